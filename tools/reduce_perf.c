/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reduce_perf: nccl-tests' reduce benchmark for fccl, with the same flags, table columns and bus-bandwidth factor
 * (1: the root receives the reduced message once); -r picks the root (default 0), -o the ops. With --compare nccl
 * the same sizes run through ncclReduce on the same buffers; -R 1/2 registers them with both libraries. The root's
 * result is checked against the host's reduction (-c); the other ranks' receive buffers are not significant.
 *
 *   reduce_perf -b 8 -e 1G -f 2 -d bfloat16 --compare nccl
 *   reduce_perf -b 1M -e 1G -f 4 -r 1 -o all -G 20
 *   reduce_perf -b 1M -e 1G -f 4 --max-ctas 8,16,32      the cost of an SM budget beside the default
 */
#include "bench/collective.h"

static double reduceBusFactor(int nranks) {
  (void)nranks;
  return 1.0;
}

static benchCounts_t reduceCounts(size_t count, int nranks) {
  (void)nranks;
  return (benchCounts_t){count, count};
}

static const benchCollective_t reduce = {
    .program = "reduce_perf",
    .call = BENCH_CALL_REDUCE,
    .busFactor = reduceBusFactor,
    .counts = reduceCounts,
    .hasRoot = 1,
    .hasOp = 1,
    .result = benchReduceResult, /* the reduction on the root; the others unchecked */
};

int main(int argc, char** argv) { return benchCollectiveMain(argc, argv, &reduce); }
