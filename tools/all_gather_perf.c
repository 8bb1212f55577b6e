/* SPDX-License-Identifier: Apache-2.0 */
/*
 * all_gather_perf: nccl-tests' all-gather benchmark for fccl, with the same flags, table columns and bus-bandwidth
 * factor ((n - 1) / n); algbw counts the gathered buffer, as nccl-tests does. Sizes (-b, -e and the size column)
 * are the gathered buffer's, as nccl-tests has them: each rank sends 1/nranks of the size, rounded down to 16 bytes,
 * and the count column is that sendcount (docs/benchmark.md). With
 * --compare nccl the same sizes run through ncclAllGather on the same buffers; -R 1/2 registers them with both
 * libraries. Every element is checked bit for bit (-c).
 *
 *   all_gather_perf -b 8 -e 512M -f 2 -d bfloat16 --compare nccl     every local GPU, one forked process each
 *   all_gather_perf -b 1M -e 256M -f 4 -R 1 -G 20                      registered buffers, CUDA graphs
 *   FCCL_ALLGATHER_ALGO=copy all_gather_perf -b 16M -e 1G -f 2 -R 1 -G 20  the copy engines (registered buffers)
 */
#include "bench/collective.h"

static double allGatherBusFactor(int nranks) { return nranks > 0 ? (double)(nranks - 1) / nranks : 0.0; }

/* Each rank sends its block and receives every rank's. */
static benchCounts_t allGatherCounts(size_t count, int nranks) {
  return (benchCounts_t){count, count * (size_t)nranks};
}

static const benchCollective_t allGather = {
    .program = "all_gather_perf",
    .call = BENCH_CALL_ALL_GATHER,
    .busFactor = allGatherBusFactor,
    .counts = allGatherCounts,
    .perRank = 1,
    .alignBytes = 16, /* nccl-tests 2.19: a rank's block rounded down to 16 bytes, the count column shows it */
    .countIsCall = 1,
    .hasRoot = 0,
    .hasOp = 0,
    .result = benchAllGatherResult, /* rank q's block at q x count */
};

int main(int argc, char** argv) { return benchCollectiveMain(argc, argv, &allGather); }
