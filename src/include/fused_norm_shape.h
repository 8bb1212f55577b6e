/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How fcclAllReduceAddRMSNorm's kernels lay out the work of a token row (docs/fused.md#the-row-kernel): a row is
 * handled by a group of rowThreads consecutive threads of a block, each holding up to FCCL_FUSED_ROW_UNITS of its
 * 16-byte units in registers (FCCL_FUSED_TARGET_UNITS where the row allows), and a block holds rowsPerBlock such
 * groups. rowThreads fixes the order of the row's sum of squares (thread t of the group owns units t, t + rowThreads,
 * ...), so it depends on the row's size only: never on the token count, the rank count, the form or the grid, which
 * is what keeps a row's bits its own (batch invariance). Host C (the launch), the kernels and fused_norm_perf's
 * baseline kernel all take it from here, so they cannot disagree.
 */
#ifndef FCCL_FUSED_NORM_SHAPE_H_
#define FCCL_FUSED_NORM_SHAPE_H_

#include "device_host.h"

#include <stdint.h>

/* 16-byte units a thread can keep of its row between the sum of squares and the output: its register arrays. With
 * at most FCCL_FUSED_MAX_BLOCK_THREADS threads per row this bounds the row at FCCL_FUSED_MAX_ROW_BYTES. */
#define FCCL_FUSED_ROW_UNITS 8
/* Units per thread that fcclFusedShapeOf aims at: a row takes the fewest threads (at least a warp) that hold it in
 * this many units each, and more units per thread only where the largest group does not hold it otherwise. A
 * thread's loads of those units (the residual's and every rank's input) are in flight together. */
#define FCCL_FUSED_TARGET_UNITS 4
/* Threads per block at most: the kernels' launch bound, which leaves them up to 128 registers per thread (the row
 * in registers, the loads in flight, without spilling). */
#define FCCL_FUSED_MAX_BLOCK_THREADS 512
/* Threads per block at least: blocks of rows smaller than this hold several rows. */
#define FCCL_FUSED_MIN_BLOCK_THREADS 512
/* Threads per SM that the grid of a form with flags between ranks counts on (its grid is at most this many threads
 * per SM, so that every block is resident at once): one block at the registers the launch bound allows. */
#define FCCL_FUSED_RESIDENT_THREADS 512
/* Row groups per block at most: a group of more than one warp synchronises on its own named barrier (1..15; 0 is
 * __syncthreads'), a group of one warp on none. */
#define FCCL_FUSED_MAX_BARRIER_GROUPS 15

FCCL_STATIC_ASSERT(FCCL_FUSED_MAX_ROW_BYTES == FCCL_FUSED_ROW_UNITS * FCCL_UNIT_BYTES * FCCL_FUSED_MAX_BLOCK_THREADS,
                   "the largest row fills every register unit of the largest row group");

typedef struct {
  uint32_t rowThreads;   /* threads per row: a power of two in [32, FCCL_FUSED_MAX_BLOCK_THREADS] */
  uint32_t rowsPerBlock; /* row groups per block */
  uint32_t blockThreads; /* rowThreads x rowsPerBlock */
} fcclFusedShape;

/* A shape of rowThreads threads per row and blockThreads per block (0: FCCL_FUSED_MIN_BLOCK_THREADS, or the row's
 * threads when more); rowThreads 0 when the pair is not one the kernels can run (rowThreads not a power of two in
 * [32, FCCL_FUSED_MAX_BLOCK_THREADS] holding the row in FCCL_FUSED_ROW_UNITS units per thread, blockThreads not a
 * multiple of it within the launch bound, or too many multi-warp groups for the named barriers). */
static inline FCCL_HOST_DEVICE fcclFusedShape fcclFusedShapeMake(uint64_t rowBytes, uint32_t rowThreads,
                                                                 uint32_t blockThreads) {
  fcclFusedShape shape = {0, 0, 0};
  const uint64_t units = (rowBytes + FCCL_UNIT_BYTES - 1) / FCCL_UNIT_BYTES;
  if (rowThreads < 32 || rowThreads > FCCL_FUSED_MAX_BLOCK_THREADS || (rowThreads & (rowThreads - 1)) != 0 ||
      units > (uint64_t)rowThreads * FCCL_FUSED_ROW_UNITS)
    return shape;
  if (blockThreads == 0)
    blockThreads = rowThreads > FCCL_FUSED_MIN_BLOCK_THREADS ? rowThreads : FCCL_FUSED_MIN_BLOCK_THREADS;
  if (blockThreads > FCCL_FUSED_MAX_BLOCK_THREADS || blockThreads % rowThreads != 0) return shape;
  if (rowThreads > 32 && blockThreads / rowThreads > FCCL_FUSED_MAX_BARRIER_GROUPS) return shape;
  shape.rowThreads = rowThreads;
  shape.rowsPerBlock = blockThreads / rowThreads;
  shape.blockThreads = blockThreads;
  return shape;
}

/* The shape of a row of rowBytes bytes (at most FCCL_FUSED_MAX_ROW_BYTES): the fewest threads per row, at least a
 * warp, that hold it in FCCL_FUSED_TARGET_UNITS units each (up to FCCL_FUSED_MAX_BLOCK_THREADS), in blocks of
 * FCCL_FUSED_MIN_BLOCK_THREADS. bf16: hidden 4096 runs 128 threads per row and 4 rows per block, 8192 256 and 2,
 * 16384 and 32768 512 and 1. */
static inline FCCL_HOST_DEVICE fcclFusedShape fcclFusedShapeOf(uint64_t rowBytes) {
  const uint64_t units = (rowBytes + FCCL_UNIT_BYTES - 1) / FCCL_UNIT_BYTES;
  uint32_t threads = 32;
  while (threads < FCCL_FUSED_MAX_BLOCK_THREADS && (uint64_t)threads * FCCL_FUSED_TARGET_UNITS < units) threads *= 2;
  return fcclFusedShapeMake(rowBytes, threads, 0);
}

/* The shape of a row of rowBytes bytes for a call whose grid shares `rows` rows at a time on smCount SMs: the row's
 * threads (fcclFusedShapeOf: what its bits depend on), and fewer rows per block than its blocks hold when there are
 * too few rows to give every SM a block otherwise, so that few rows spread over as many SMs as there are rows. */
static inline fcclFusedShape fcclFusedShapeFor(uint64_t rowBytes, uint64_t rows, int smCount) {
  const fcclFusedShape full = fcclFusedShapeOf(rowBytes);
  const uint64_t sms = smCount > 0 ? (uint64_t)smCount : 1;
  const uint64_t perSm = (rows + sms - 1) / sms;
  if (full.rowThreads == 0 || perSm >= full.rowsPerBlock) return full;
  return fcclFusedShapeMake(rowBytes, full.rowThreads, full.rowThreads * (uint32_t)(perSm > 0 ? perSm : 1));
}

/* Whether every row of a call takes the kernels' vector path (16-byte accesses, no per-element tail): rows a whole
 * number of 16-byte units and every buffer 16-byte aligned (the peers' inputs too when they are read in place, nranks
 * of them; the staging areas always are). The host chooses the kernel by it. */
static inline FCCL_HOST_DEVICE int fcclFusedVectorizable(const fcclFusedArgs* args, uint64_t rowBytes, int nranks) {
  uint64_t bits = rowBytes | args->input | args->residual | args->weight | args->output;
  if (args->registered)
    for (int r = 0; r < nranks && r < FCCL_DEVICE_MAX_RANKS; r++) bits |= args->peerInput[r];
  return (bits & (FCCL_UNIT_BYTES - 1)) == 0;
}

#endif /* FCCL_FUSED_NORM_SHAPE_H_ */
