/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scatter_perf: nccl-tests' scatter benchmark for fccl, with the same flags, table columns and bus-bandwidth factor
 * ((n - 1) / n); as in nccl-tests the sizes (-b, -e and the size column) are the root's whole buffer: each rank
 * receives 1/nranks of the size, rounded down to 16 bytes, and the count column is that recvcount. -r picks the root
 * (default 0). With --compare nccl the same sizes run through ncclScatter (NCCL 2.28 and newer) on the same buffers;
 * -R 1/2 registers them with both libraries. Every rank's block is checked bit for bit against the root's (-c).
 *
 *   scatter_perf -b 8 -e 1G -f 2 -d bfloat16 --compare nccl
 *   scatter_perf -b 1M -e 1G -f 4 -r 1 -R 1 -G 20
 */
#include "bench/collective.h"

static double scatterBusFactor(int nranks) { return nranks > 0 ? (double)(nranks - 1) / nranks : 0.0; }

/* The root sends every rank's block; each rank receives its own. */
static benchCounts_t scatterCounts(size_t count, int nranks) { return (benchCounts_t){count * (size_t)nranks, count}; }

static const benchCollective_t scatter = {
    .program = "scatter_perf",
    .call = BENCH_CALL_SCATTER,
    .busFactor = scatterBusFactor,
    .counts = scatterCounts,
    .perRank = 1,
    .alignBytes = 16, /* nccl-tests 2.19: a rank's block rounded down to 16 bytes, the count column shows it */
    .countIsCall = 1,
    .hasRoot = 1,
    .hasOp = 0,
    .result = benchScatterResult, /* the root's block r on rank r */
};

int main(int argc, char** argv) { return benchCollectiveMain(argc, argv, &scatter); }
