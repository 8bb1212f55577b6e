/* SPDX-License-Identifier: Apache-2.0 */
/*
 * broadcast_perf: nccl-tests' broadcast benchmark for fccl, with the same flags, table columns and bus-bandwidth
 * factor (1: every rank receives the message once); -r picks the root (default 0). With --compare nccl the same
 * sizes run through ncclBroadcast on the same buffers; -R 1/2 registers them with both libraries. Every element is
 * checked bit for bit against the root's input (-c).
 *
 *   broadcast_perf -b 8 -e 1G -f 2 -d bfloat16 --compare nccl
 *   broadcast_perf -b 1M -e 1G -f 4 -r 1 -G 20
 *   FCCL_BROADCAST_ALGO=copy broadcast_perf -b 16M -e 1G -f 2 -R 1 -G 20   the copy engines (registered buffers)
 */
#include "bench/collective.h"

static double broadcastBusFactor(int nranks) {
  (void)nranks;
  return 1.0;
}

static benchCounts_t broadcastCounts(size_t count, int nranks) {
  (void)nranks;
  return (benchCounts_t){count, count};
}

static const benchCollective_t broadcast = {
    .program = "broadcast_perf",
    .call = BENCH_CALL_BROADCAST,
    .busFactor = broadcastBusFactor,
    .counts = broadcastCounts,
    .hasRoot = 1,
    .hasOp = 0,
    .result = benchBroadcastResult, /* root's input on every rank */
};

int main(int argc, char** argv) { return benchCollectiveMain(argc, argv, &broadcast); }
