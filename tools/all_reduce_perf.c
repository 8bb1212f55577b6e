/* SPDX-License-Identifier: Apache-2.0 */
/*
 * all_reduce_perf: nccl-tests' all-reduce benchmark for fccl, with the same flags, the same table and the same
 * bus-bandwidth factor (2 (n - 1) / n), so its output diffs line by line against nccl-tests'. With --compare nccl the
 * same sizes run through ncclAllReduce on the same buffers in the same processes, printed beside fccl with the
 * speedup (NCCL time / fccl time). -R 1/2 registers the buffers with both libraries (fcclMemAlloc +
 * fcclCommRegister; ncclMemAlloc + ncclCommRegister, or a symmetric NCCL window).
 *
 *   all_reduce_perf -b 8 -e 1G -f 2 -d bfloat16 --compare nccl      every local GPU, one forked process each
 *   all_reduce_perf -b 8 -e 128M -f 2 -g 2 -G 20                     one process driving two GPUs, CUDA graphs
 *   torchrun --nproc-per-node 2 --no-python all_reduce_perf -b 1M -e 1G -f 4   ranks from torchrun's variables
 */
#include "bench/collective.h"

static benchCounts_t allReduceCounts(size_t count, int nranks) {
  (void)nranks;
  return (benchCounts_t){count, count};
}

static const benchCollective_t allReduce = {
    .program = "all_reduce_perf",
    .call = BENCH_CALL_ALL_REDUCE,
    .busFactor = benchAllReduceBusFactor, /* 2 (n - 1) / n */
    .counts = allReduceCounts,
    .hasRoot = 0,
    .hasOp = 1,
    .result = benchAllReduceResult, /* every rank holds the reduction */
};

int main(int argc, char** argv) { return benchCollectiveMain(argc, argv, &allReduce); }
