/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fused norm's row shapes (src/include/fused_norm_shape.h) without a GPU: for every row the kernels take (1 to
 * 65536 bytes in 2- and 4-byte elements) the shape is one the kernels run (threads per row a power of two in [32, 512]
 * holding the row in the register units, the fewest that hold it in the target units, blocks within the launch
 * bound and the named barriers), it depends on the row's bytes only, and the per-call variant (fewer rows per block
 * for few rows) keeps the threads per row: the reduction order, which the bits depend on. Also the vector-path test.
 */
#include "fused_norm_shape.h"
#include "test.h"

#include <string.h>

/* Every property of a shape the kernels rely on. */
static int shapeRunnable(fcclFusedShape s, uint64_t rowBytes) {
  const uint64_t units = (rowBytes + FCCL_UNIT_BYTES - 1) / FCCL_UNIT_BYTES;
  const uint32_t t = s.rowThreads;
  return t >= 32 && t <= FCCL_FUSED_MAX_BLOCK_THREADS && (t & (t - 1)) == 0 &&
         units <= (uint64_t)t * FCCL_FUSED_ROW_UNITS && s.rowsPerBlock >= 1 && s.blockThreads == t * s.rowsPerBlock &&
         s.blockThreads <= FCCL_FUSED_MAX_BLOCK_THREADS && (t == 32 || s.rowsPerBlock <= FCCL_FUSED_MAX_BARRIER_GROUPS);
}

static void testEveryRow(void) {
  int bad = 0;
  for (uint64_t rowBytes = 1; rowBytes <= FCCL_FUSED_MAX_ROW_BYTES && bad < 5; rowBytes++) {
    const fcclFusedShape s = fcclFusedShapeOf(rowBytes);
    const uint64_t units = (rowBytes + FCCL_UNIT_BYTES - 1) / FCCL_UNIT_BYTES;
    int ok = shapeRunnable(s, rowBytes);
    /* The fewest threads: half as many would not hold the row in the target units (or would be under a warp). */
    ok &= s.rowThreads == 32 || (uint64_t)(s.rowThreads / 2) * FCCL_FUSED_TARGET_UNITS < units;
    /* The target units per thread where the largest group allows. */
    ok &= s.rowThreads == FCCL_FUSED_MAX_BLOCK_THREADS || units <= (uint64_t)s.rowThreads * FCCL_FUSED_TARGET_UNITS;
    ok &= s.blockThreads == FCCL_FUSED_MIN_BLOCK_THREADS;
    if (!ok) {
      testFail(__FILE__, __LINE__, "row of %llu bytes: shape %u x %u (block %u)", (unsigned long long)rowBytes,
               s.rowThreads, s.rowsPerBlock, s.blockThreads);
      bad++;
    }
  }
  EXPECT_EQ_INT(bad, 0);
  EXPECT_EQ_INT((int)fcclFusedShapeOf(FCCL_FUSED_MAX_ROW_BYTES + 1).rowThreads, 0);
  /* docs/fused.md's examples: bf16 hidden 4096, 8192, 16384, 32768; fp32 4096. */
  EXPECT_EQ_INT((int)fcclFusedShapeOf(4096 * 2).rowThreads, 128);
  EXPECT_EQ_INT((int)fcclFusedShapeOf(4096 * 2).rowsPerBlock, 4);
  EXPECT_EQ_INT((int)fcclFusedShapeOf(8192 * 2).rowThreads, 256);
  EXPECT_EQ_INT((int)fcclFusedShapeOf(8192 * 2).rowsPerBlock, 2);
  EXPECT_EQ_INT((int)fcclFusedShapeOf(16384 * 2).rowThreads, 512);
  EXPECT_EQ_INT((int)fcclFusedShapeOf(32768 * 2).rowThreads, 512);
  EXPECT_EQ_INT((int)fcclFusedShapeOf(4096 * 4).rowThreads, 256);
}

static void testPerCall(void) {
  static const uint64_t rowBytes[] = {2, 200, 2048, 2064, 8192, 16384, 16400, 32768, 65536};
  static const uint64_t rows[] = {1, 2, 3, 64, 131, 132, 133, 263, 264, 528, 529, 1000, 1u << 20};
  static const int sms[] = {0, 1, 78, 132};
  int bad = 0;
  for (size_t b = 0; b < sizeof(rowBytes) / sizeof(rowBytes[0]); b++)
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++)
      for (size_t m = 0; m < sizeof(sms) / sizeof(sms[0]); m++) {
        const fcclFusedShape full = fcclFusedShapeOf(rowBytes[b]);
        const fcclFusedShape s = fcclFusedShapeFor(rowBytes[b], rows[r], sms[m]);
        const uint64_t gpuSms = sms[m] > 0 ? (uint64_t)sms[m] : 1;
        int ok = shapeRunnable(s, rowBytes[b]) && s.rowThreads == full.rowThreads &&
                 s.rowsPerBlock <= full.rowsPerBlock;
        /* Fewer rows per block only where the full blocks would leave SMs without a batch. */
        ok &= s.rowsPerBlock == full.rowsPerBlock || (rows[r] + s.rowsPerBlock - 1) / s.rowsPerBlock <= gpuSms;
        ok &= s.rowsPerBlock == full.rowsPerBlock || rows[r] < gpuSms * full.rowsPerBlock;
        if (!ok) {
          testFail(__FILE__, __LINE__, "row of %llu bytes, %llu rows, %d SMs: shape %u x %u",
                   (unsigned long long)rowBytes[b], (unsigned long long)rows[r], sms[m], s.rowThreads, s.rowsPerBlock);
          bad++;
        }
      }
  EXPECT_EQ_INT(bad, 0);
  /* 64 tokens of bf16 4096 on 132 SMs: a row per block, 64 blocks. */
  EXPECT_EQ_INT((int)fcclFusedShapeFor(8192, 64, 132).rowsPerBlock, 1);
  EXPECT_EQ_INT((int)fcclFusedShapeFor(8192, 8192, 132).rowsPerBlock, 4);
}

static void testMake(void) {
  /* What the benchmark's candidates may ask for, and what they may not. */
  EXPECT_EQ_INT((int)fcclFusedShapeMake(16384, 128, 512).rowsPerBlock, 4);
  EXPECT_EQ_INT((int)fcclFusedShapeMake(16384, 128, 128).rowsPerBlock, 1);
  EXPECT_EQ_INT((int)fcclFusedShapeMake(16384, 128, 0).blockThreads, FCCL_FUSED_MIN_BLOCK_THREADS);
  EXPECT_EQ_INT((int)fcclFusedShapeMake(16384, 64, 512).rowThreads, 0);  /* 1024 units in 64 x 8: no room */
  EXPECT_EQ_INT((int)fcclFusedShapeMake(16384, 96, 0).rowThreads, 0);    /* not a power of two */
  EXPECT_EQ_INT((int)fcclFusedShapeMake(16384, 1024, 0).rowThreads, 0);  /* over the launch bound */
  EXPECT_EQ_INT((int)fcclFusedShapeMake(16384, 256, 384).rowThreads, 0); /* not a multiple */
  EXPECT_EQ_INT((int)fcclFusedShapeMake(200, 32, 512).rowsPerBlock, 16); /* one-warp groups need no barrier */
  EXPECT_EQ_INT((int)fcclFusedShapeMake(200, 64, 512).rowsPerBlock, 8);
}

static void testVectorizable(void) {
  fcclFusedArgs a;
  memset(&a, 0, sizeof(a));
  a.input = 0x10000;
  a.output = 0x20000;
  EXPECT_EQ_INT(fcclFusedVectorizable(&a, 8192, 1), 1);
  EXPECT_EQ_INT(fcclFusedVectorizable(&a, 8194, 1), 0); /* a partial last unit */
  a.residual = 0x30002;
  EXPECT_EQ_INT(fcclFusedVectorizable(&a, 8192, 1), 0);
  a.residual = 0x30000;
  a.weight = 0x40000;
  a.registered = 1;
  a.peerInput[0] = 0x50000;
  a.peerInput[1] = 0x60008;
  EXPECT_EQ_INT(fcclFusedVectorizable(&a, 8192, 1), 1); /* rank 1's mapping is not read on one rank */
  EXPECT_EQ_INT(fcclFusedVectorizable(&a, 8192, 2), 0);
  a.registered = 0;
  EXPECT_EQ_INT(fcclFusedVectorizable(&a, 8192, 2), 1); /* staged: the peers' inputs are not read in place */
}

int main(void) {
  testEveryRow();
  testPerCall();
  testMake();
  testVectorizable();
  return testSummary("fused_norm_shape");
}
