/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sendrecv_perf: nccl-tests' send/recv benchmark for fccl: every rank sends count elements to the next rank and
 * receives as many from the previous one (a ring), fcclSend and fcclRecv in one fcclGroupStart/fcclGroupEnd, with the
 * same flags, table columns and bus-bandwidth factor (1) as nccl-tests' sendrecv_perf. fccl carries these calls
 * through its communicator's NCCL communicator, which on the fccl path exists only when FCCL_NCCL_COMM asks for it:
 * this program sets FCCL_NCCL_COMM=init unless the environment sets it. As in nccl-tests, -o is taken and printed in
 * the redop column (the data moves unreduced), and the in-place run (send and receive on one buffer) is timed but not
 * checked (#wrong N/A). With --compare nccl the same ring runs through ncclSend/ncclRecv on the same buffers.
 *
 *   sendrecv_perf -b 8 -e 1G -f 2 --compare nccl
 *   sendrecv_perf -np 2 --share-gpu --hosts 2 -b 8 -e 64M -f 4     two ranks on one GPU, each its own NCCL host
 */
#include "bench/collective.h"

#include <stdlib.h>

static double sendRecvBusFactor(int nranks) {
  (void)nranks;
  return 1.0;
}

static benchCounts_t sendRecvCounts(size_t count, int nranks) {
  (void)nranks;
  return (benchCounts_t){count, count};
}

static const benchCollective_t sendRecv = {
    .program = "sendrecv_perf",
    .call = BENCH_CALL_SEND_RECV,
    .busFactor = sendRecvBusFactor,
    .counts = sendRecvCounts,
    .hasRoot = 0,
    .hasOp = 1, /* nccl-tests' sendrecv_perf runs its sweep per -o and prints it */
    .inPlace = BENCH_IN_PLACE_UNCHECKED,
    .result = benchSendRecvResult, /* rank r holds rank r - 1's input */
};

int main(int argc, char** argv) {
  /* Before any fccl call: its parameters are read once. */
  setenv("FCCL_NCCL_COMM", "init", 0);
  return benchCollectiveMain(argc, argv, &sendRecv);
}
