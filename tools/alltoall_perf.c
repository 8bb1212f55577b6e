/* SPDX-License-Identifier: Apache-2.0 */
/*
 * alltoall_perf: nccl-tests' all-to-all benchmark for fccl (fcclAllToAll: rank r's block p lands in rank p's block r),
 * with the same flags, table columns and bus-bandwidth factor ((n - 1) / n) as nccl-tests' alltoall_perf. As there,
 * the size (-b, -e, the size column) is each rank's whole buffer, the call's count is a rank's block (the size's
 * elements / nranks, rounded down to whole 16 bytes) and the count column shows it. fccl carries the call through its
 * communicator's NCCL communicator, which on the fccl path exists only when FCCL_NCCL_COMM asks for it: this program
 * sets FCCL_NCCL_COMM=init unless the environment sets it. fcclAllToAll refuses overlapping buffers, so there is no
 * in-place run (its columns read N/A; nccl-tests times NCCL's and leaves it unchecked). With --compare nccl the same
 * sizes run through ncclAlltoAll on the same buffers.
 *
 *   alltoall_perf -b 1K -e 1G -f 2 --compare nccl
 *   alltoall_perf -np 2 --share-gpu --hosts 2 -b 1K -e 64M -f 4    two ranks on one GPU, each its own NCCL host
 */
#include "bench/collective.h"

#include <stdlib.h>

static double allToAllBusFactor(int nranks) { return nranks > 0 ? (double)(nranks - 1) / nranks : 0.0; }

/* count elements to and from every rank. */
static benchCounts_t allToAllCounts(size_t count, int nranks) {
  return (benchCounts_t){count * (size_t)nranks, count * (size_t)nranks};
}

static const benchCollective_t allToAll = {
    .program = "alltoall_perf",
    .call = BENCH_CALL_ALL_TO_ALL,
    .busFactor = allToAllBusFactor,
    .counts = allToAllCounts,
    .perRank = 1,
    .alignBytes = 16,
    .countIsCall = 1,
    .hasRoot = 0,
    .hasOp = 0,
    .inPlace = BENCH_IN_PLACE_NONE,
    .result = benchAllToAllResult, /* block p from rank p's block r */
};

int main(int argc, char** argv) {
  /* Before any fccl call: its parameters are read once. */
  setenv("FCCL_NCCL_COMM", "init", 0);
  return benchCollectiveMain(argc, argv, &allToAll);
}
