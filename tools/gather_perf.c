/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gather_perf: nccl-tests' gather benchmark for fccl, with the same flags, table columns and bus-bandwidth factor
 * ((n - 1) / n); as in nccl-tests the sizes (-b, -e and the size column) are the gathered buffer's: each rank sends
 * 1/nranks of the size, rounded down to 16 bytes, and the count column is that sendcount. -r picks the root (default
 * 0). With --compare nccl the same sizes run through ncclGather (NCCL 2.28 and newer) on the same buffers; -R 1/2
 * registers them with both libraries. The root's buffer is checked bit for bit (-c); the others' are not
 * significant.
 *
 *   gather_perf -b 8 -e 1G -f 2 -d bfloat16 --compare nccl
 *   gather_perf -b 1M -e 1G -f 4 -r 1 -R 1 -G 20
 */
#include "bench/collective.h"

static double gatherBusFactor(int nranks) { return nranks > 0 ? (double)(nranks - 1) / nranks : 0.0; }

/* Each rank sends its block; the root receives every rank's. */
static benchCounts_t gatherCounts(size_t count, int nranks) { return (benchCounts_t){count, count * (size_t)nranks}; }

static const benchCollective_t gather = {
    .program = "gather_perf",
    .call = BENCH_CALL_GATHER,
    .busFactor = gatherBusFactor,
    .counts = gatherCounts,
    .perRank = 1,
    .alignBytes = 16, /* nccl-tests 2.19: a rank's block rounded down to 16 bytes, the count column shows it */
    .countIsCall = 1,
    .hasRoot = 1,
    .hasOp = 0,
    .result = benchGatherResult, /* on the root, rank q's block at q x count; the others unchecked */
};

int main(int argc, char** argv) { return benchCollectiveMain(argc, argv, &gather); }
