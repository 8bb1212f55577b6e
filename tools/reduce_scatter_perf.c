/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reduce_scatter_perf: nccl-tests' reduce-scatter benchmark for fccl, with the same flags, table columns and
 * bus-bandwidth factor ((n - 1) / n); algbw counts the input, as nccl-tests does. Sizes (-b, -e and the size column)
 * are the input's, as nccl-tests has them: each rank receives 1/nranks of the size, rounded down to 16 bytes, and
 * the count column is that recvcount (docs/benchmark.md). -o picks the
 * ops; with --compare nccl the same sizes run through ncclReduceScatter on the same buffers; -R 1/2 registers them with
 * both libraries.
 *
 *   reduce_scatter_perf -b 8 -e 512M -f 2 -d bfloat16 -o sum --compare nccl
 *   reduce_scatter_perf -b 1M -e 256M -f 4 -o all -R 1
 */
#include "bench/collective.h"

static double reduceScatterBusFactor(int nranks) { return nranks > 0 ? (double)(nranks - 1) / nranks : 0.0; }

/* Each rank sends one block for every rank and receives the reduction of its own. */
static benchCounts_t reduceScatterCounts(size_t count, int nranks) {
  return (benchCounts_t){count * (size_t)nranks, count};
}

static const benchCollective_t reduceScatter = {
    .program = "reduce_scatter_perf",
    .call = BENCH_CALL_REDUCE_SCATTER,
    .busFactor = reduceScatterBusFactor,
    .counts = reduceScatterCounts,
    .perRank = 1,
    .alignBytes = 16, /* nccl-tests 2.19: a rank's block rounded down to 16 bytes, the count column shows it */
    .countIsCall = 1,
    .hasRoot = 0,
    .hasOp = 1,
    .result = benchReduceScatterResult, /* rank r: block r of the reduction */
};

int main(int argc, char** argv) { return benchCollectiveMain(argc, argv, &reduceScatter); }
