/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reduce_scatter_v_perf: the variable reduce-scatter (fcclReduceScatterV) in nccl-tests' shape: the same flags, table
 * columns and bus-bandwidth factor as reduce_scatter_perf ((n - 1) / n). Sizes (-b, -e and the size column) are the
 * input's; the count column is the mean block (size / element / n), and rank q receives the reduction of
 * count x (2q + 1) / n elements (benchVariableCount), the skew of tokens routed unevenly. -o picks the ops; with
 * --compare nccl the same blocks run through NCCL as vLLM's reduce_scatterv does (a group of one ncclReduce per
 * rank). In place is not run (its columns read N/A): the driver places NCCL's fixed blocks.
 *
 *   reduce_scatter_v_perf -b 8 -e 512M -f 2 -d bfloat16 -o sum --compare nccl
 *   reduce_scatter_v_perf -b 1M -e 256M -f 4 -R 1 -G 20
 */
#include "bench/collective.h"

static double reduceScatterVBusFactor(int nranks) { return nranks > 0 ? (double)(nranks - 1) / nranks : 0.0; }

/* Each rank sends every block and receives at most the last rank's (room for it that grows with count, as
 * collective.h asks). */
static benchCounts_t reduceScatterVCounts(size_t count, int nranks) {
  return (benchCounts_t){count * (size_t)nranks, benchVariableRoom(count, nranks)};
}

static const benchCollective_t reduceScatterV = {
    .program = "reduce_scatter_v_perf",
    .call = BENCH_CALL_REDUCE_SCATTER_V,
    .busFactor = reduceScatterVBusFactor,
    .counts = reduceScatterVCounts,
    .perRank = 1,
    .alignBytes = 0,
    .countIsCall = 1,
    .hasRoot = 0,
    .hasOp = 1,
    .inPlace = BENCH_IN_PLACE_NONE,
    .result = benchReduceScatterVResult, /* the reduction of this rank's block */
};

int main(int argc, char** argv) { return benchCollectiveMain(argc, argv, &reduceScatterV); }
