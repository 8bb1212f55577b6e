/* SPDX-License-Identifier: Apache-2.0 */
/*
 * all_gather_v_perf: the variable all-gather (fcclAllGatherV) in nccl-tests' shape: the same flags, table columns
 * and bus-bandwidth factor as all_gather_perf ((n - 1) / n). Sizes (-b, -e and the size column) are the gathered
 * buffer's; the count column is the mean block (size / element / n), and rank q sends count x (2q + 1) / n elements
 * (benchVariableCount: from about count / n on rank 0 to about 2 x count on the last), the skew of tokens routed
 * unevenly, whose blocks add up to the size. With --compare nccl the same blocks run through NCCL as vLLM's
 * all_gatherv does (a group of one ncclBroadcast per rank). Every element is checked bit for bit (-c). In place is
 * not run (its columns read N/A): the driver places NCCL's fixed blocks.
 *
 *   all_gather_v_perf -b 8 -e 512M -f 2 -d bfloat16 --compare nccl
 *   all_gather_v_perf -b 1M -e 256M -f 4 -R 1 -G 20
 */
#include "bench/collective.h"

static double allGatherVBusFactor(int nranks) { return nranks > 0 ? (double)(nranks - 1) / nranks : 0.0; }

/* Each rank sends at most the last rank's block (room for it that grows with count, as collective.h asks) and
 * receives every block. */
static benchCounts_t allGatherVCounts(size_t count, int nranks) {
  return (benchCounts_t){benchVariableRoom(count, nranks), count * (size_t)nranks};
}

static const benchCollective_t allGatherV = {
    .program = "all_gather_v_perf",
    .call = BENCH_CALL_ALL_GATHER_V,
    .busFactor = allGatherVBusFactor,
    .counts = allGatherVCounts,
    .perRank = 1,
    .alignBytes = 0,
    .countIsCall = 1,
    .hasRoot = 0,
    .hasOp = 0,
    .inPlace = BENCH_IN_PLACE_NONE,
    .result = benchAllGatherVResult, /* rank q's block after the blocks of ranks 0..q-1 */
};

int main(int argc, char** argv) { return benchCollectiveMain(argc, argv, &allGatherV); }
