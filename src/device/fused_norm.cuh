/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The row kernel of fcclAllReduceAddRMSNorm, shared by its forms (fused_norm_oneshot.cu: one-shot,
 * fused_norm_local.cu: one rank, fused_norm_twoshot.cu: two-shot) and by fused_norm_perf's add + RMSNorm baseline:
 * the rank-order reduction of a token row, the residual add, the sum of squares in one fixed order, the norm and the
 * FP8 quantisation.
 *
 * A row is handled by a group of rowThreads threads (fused_norm_shape.h: a function of the row's size only). Thread t
 * of the group owns the row's 16-byte units t, t + rowThreads, ... (at most FCCL_FUSED_ROW_UNITS) and keeps them
 * in registers from the loads to the output: the row is read from memory once. It issues all its loads of the
 * residual and the input before it waits for any, adds its squares in unit and element order, and the group
 * combines its threads' sums by a butterfly in each warp and then the warps in order, on a barrier of its own
 * (one per reduction; no block-wide barrier per row). The order depends on rowThreads and the thread's index
 * only, so a row's bits depend on its own data only, whichever form runs it and whichever rank, block or group
 * computes it (docs/fused.md#batch-invariance).
 *
 * Rows are dealt out in batches of rowsPerBlock: batch b goes to block b mod grid, its row k to the block's group
 * k (forEachRow). Every loop over rows in the fused kernels follows that mapping, so the flags between blocks of one
 * index cover the same rows on every rank.
 */
#ifndef FCCL_DEVICE_FUSED_NORM_CUH_
#define FCCL_DEVICE_FUSED_NORM_CUH_

#include "common.cuh"
#include "fused_norm_shape.h"

#include <cuda_fp8.h>

namespace fccl {

namespace fused {

constexpr int kRowUnits = FCCL_FUSED_ROW_UNITS;      /* units a thread can hold of its row */
constexpr int kChunkUnits = FCCL_FUSED_TARGET_UNITS; /* units whose loads go out together */
constexpr int kMaxWarps = FCCL_FUSED_MAX_BLOCK_THREADS / 32;
constexpr float kFp8Max = 448.0f; /* the largest finite E4M3 value */

/* max(a, b) where a NaN operand wins: the row's scale is NaN when the row holds one. */
__device__ __forceinline__ float maxNaN(float a, float b) { return (a != a || a > b) ? a : b; }

/* FP8 E4M3 of x, saturating to +-448 (NaN stays NaN), as __nv_fp8_e4m3's conversion does. */
__device__ __forceinline__ uint8_t toFp8(float x) {
  return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

/*
 * A block's scratch for its groups' reductions: one float per warp in four slots, the sum and the maximum of rows
 * of even and odd parity. A warp that goes on to its group's next row writes the other parity, so it never
 * overwrites a value that a slower warp of its group still reads; the row after that comes after the next row's
 * barrier, which every warp of the group reaches only once it has read.
 */
struct Scratch {
  float slot[4][kMaxWarps];
};

/* The threads of one row: `threads` consecutive threads of the block (a power of two, at least a warp). */
struct RowGroup {
  uint32_t threads;   /* rowThreads */
  uint32_t lane;      /* this thread's index in the group */
  uint32_t index;     /* the group's index in the block */
  uint32_t count;     /* groups in the block: rows per batch */
  uint32_t warps;     /* warps in the group */
  uint32_t firstWarp; /* the group's first warp in the block */
  uint32_t parity;    /* rows this thread's group handled so far, modulo 2: its scratch slots */

  __device__ __forceinline__ explicit RowGroup(uint32_t rowThreads)
      : threads(rowThreads),
        lane(threadIdx.x & (rowThreads - 1)),
        index(threadIdx.x / rowThreads),
        count(blockDim.x / rowThreads),
        warps(rowThreads / 32),
        firstWarp(threadIdx.x / rowThreads * (rowThreads / 32)),
        parity(0) {}

  /* Every thread of the group, and no other: its own named barrier (0 is __syncthreads'). A group of one warp
   * needs none: its shuffles synchronise it. */
  __device__ __forceinline__ void sync() const {
    asm volatile("bar.sync %0, %1;" ::"r"(index + 1), "r"(threads) : "memory");
  }
};

/*
 * f(i) for each row i in [0, rows) of this thread's group: batch b (rows [b R, b R + R), R groups per block) goes
 * to block b mod grid, and its row b R + k to group k. Nothing in it synchronises the block, so the groups of a block
 * may run different numbers of rows.
 */
template <class F>
__device__ __forceinline__ void forEachRow(uint64_t rows, const RowGroup& g, F&& f) {
  for (uint64_t batch = blockIdx.x; batch * g.count < rows; batch += gridDim.x) {
    const uint64_t i = batch * g.count + g.index;
    if (i < rows) f(i);
  }
}

/* The combination of the group's values v by op (commutative), the same bits on every thread of the group: a
 * butterfly inside each warp (lane i combines with lane i ^ offset, so both lanes of a pair hold the same value),
 * then the warps' values in warp order. The order depends on nothing but the thread's index in the group. */
template <class Op>
__device__ __forceinline__ float groupReduce(float v, const RowGroup& g, float* slot, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (g.warps == 1) return v;
  if ((threadIdx.x & 31) == 0) slot[g.firstWarp + g.lane / 32] = v;
  g.sync();
  float total = slot[g.firstWarp];
  for (uint32_t w = 1; w < g.warps; w++) total = op(total, slot[g.firstWarp + w]);
  return total;
}

/*
 * Unit u of a row, for the row kernel. VEC (fcclFusedVectorizable): every base is 16-byte aligned and the row a
 * whole number of units, so each access is one 16-byte C++ access: the compiler may issue a thread's loads back to
 * back (the flags' asm, with its memory clobber, still orders them), and the weight, read-only for the call, goes
 * through the non-coherent cache. Otherwise UnitIO's aligned-or-element-wise access, zeros past the row's end.
 */
template <class TT, bool VEC>
struct RowIO {
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;

  __device__ __forceinline__ static void load(uint64_t base, uint32_t u, uint64_t bytes, Unit& x) {
    if constexpr (VEC) {
      const ulonglong2 w = *ptr<const ulonglong2>(base + (uint64_t)u * FCCL_UNIT_BYTES);
      x.words[0] = w.x;
      x.words[1] = w.y;
    } else {
      IO::load(base, u, bytes, x);
    }
  }
  __device__ __forceinline__ static void loadReadOnly(uint64_t base, uint32_t u, uint64_t bytes, Unit& x) {
    if constexpr (VEC) {
      const ulonglong2 w = __ldg(ptr<const ulonglong2>(base + (uint64_t)u * FCCL_UNIT_BYTES));
      x.words[0] = w.x;
      x.words[1] = w.y;
    } else {
      IO::load(base, u, bytes, x);
    }
  }
  __device__ __forceinline__ static void store(uint64_t base, uint32_t u, uint64_t bytes, const Unit& x) {
    if constexpr (VEC)
      *ptr<ulonglong2>(base + (uint64_t)u * FCCL_UNIT_BYTES) = make_ulonglong2(x.words[0], x.words[1]);
    else
      IO::store(base, u, bytes, x);
  }
};

/* Stores the E FP8 values of one unit (packed, element i in byte i) at output element `first` of a row of hidden
 * elements: one store when it is whole and aligned, else byte by byte, never past the row. */
template <int E>
__device__ __forceinline__ void storeFp8(uint64_t rowOut, uint64_t first, uint64_t hidden, uint64_t packed) {
  const uint64_t at = rowOut + first;
  if (first + E <= hidden && (at & (E - 1)) == 0) {
    if constexpr (E == 8)
      *ptr<uint64_t>(at) = packed;
    else if constexpr (E == 4)
      *ptr<uint32_t>(at) = (uint32_t)packed;
    else
      *ptr<uint16_t>(at) = (uint16_t)packed;
    return;
  }
#pragma unroll
  for (int i = 0; i < E; i++)
    if (first + i < hidden) *ptr<uint8_t>(at + i) = (uint8_t)(packed >> (8 * i));
}

/*
 * Where the two-shot form also stores a row's results, for the peers that did not compute it: peer p's copy starts
 * at base[p] (0: none), a 16-byte aligned region of the peer's slot holding r' at base + residual (when the call has
 * a residual), the output row at base + output and the dynamic scale at base + scale.
 */
struct RowCopies {
  uint64_t base[FCCL_DEVICE_MAX_RANKS];
  uint64_t residual, output, scale;
};

/* Stores one 16-byte unit at byte `offset` of every peer's copy region. */
template <int NR>
__device__ __forceinline__ void copyUnit(const RowCopies* copies, uint64_t offset, const uint64_t (&words)[2]) {
#pragma unroll
  for (int p = 0; p < NR; p++)
    if (copies->base[p]) st_data16(ptr<void>(copies->base[p] + offset), words[0], words[1]);
}

/*
 * One token row, by the threads of group g: bases[r] is rank r's input row (its input, its staged copy or, with one
 * rank, the input itself: NR 1 adds nothing). Reduces it in rank order with the all-reduce's arithmetic (fp32
 * accumulation, one rounding to the type), adds and writes back the residual, and writes the normalised row (and the
 * FP8 scale) for token `row`; with COPIES, also r', the output row and the scale into every peer's region of copies,
 * from the same registers. Every thread of the group must call it for the same row.
 *
 * A thread's units are loaded in chunks of kChunkUnits (fewer with more than two ranks, so that the input's loads
 * hold at most about eight units of registers): the residual's and every rank's loads of a chunk are all issued
 * before the first add waits for any. A row of the shape fcclFusedShapeOf chooses is one chunk per thread up to
 * 32 KiB (bf16: hidden 16384).
 */
template <class TT, bool FP8, int NR, bool VEC, bool COPIES>
__device__ __forceinline__ void normRow(const fcclFusedArgs& a, const uint64_t (&bases)[FCCL_DEVICE_MAX_RANKS], int n,
                                        uint64_t row, float staticScale, RowGroup& g, Scratch& scratch,
                                        const RowCopies* copies) {
  using RIO = RowIO<TT, VEC>;
  using Unit = typename RIO::Unit;
  using Bits = typename TT::Bits;
  constexpr int E = 16 / (int)sizeof(Bits);
  constexpr int U = kRowUnits;
  constexpr int C = kChunkUnits;
  constexpr int D = NR == 1 ? C : NR == 2 ? 2 : 1;
  static_assert(U % C == 0 && C % D == 0, "chunks split the thread's units evenly");
  const uint64_t rowBytes = a.hidden * sizeof(Bits);
  const uint32_t units = (uint32_t)divUp(rowBytes, FCCL_UNIT_BYTES);
  const uint64_t residual = a.residual ? a.residual + row * rowBytes : 0;
  auto unitOf = [&](int j) { return g.lane + (uint32_t)j * g.threads; };

  /* r' of the thread's units, from the loads to the output; elements past the row are zero bits throughout. */
  Unit v[U];
  float squares = 0.0f;
#pragma unroll
  for (int j0 = 0; j0 < U; j0 += D) {
    if (unitOf(j0) >= units) break;
    Unit x[D][NR];
    if (residual) {
#pragma unroll
      for (int j = 0; j < D; j++)
        if (unitOf(j0 + j) < units) RIO::load(residual, unitOf(j0 + j), rowBytes, v[j0 + j]);
    }
#pragma unroll
    for (int j = 0; j < D; j++) {
      if (unitOf(j0 + j) >= units) continue;
#pragma unroll
      for (int r = 0; r < NR; r++)
        if (r < n) RIO::load(bases[r], unitOf(j0 + j), rowBytes, x[j][r]);
    }
#pragma unroll
    for (int j = 0; j < D; j++) {
      const uint32_t u = unitOf(j0 + j);
      if (u >= units) break;
      Unit s;
      if constexpr (NR == 1) {
        s = x[j][0];
      } else {
        UnitReducer<TT, OpTraits<fcclSum>, 16> acc;
        acc.first(x[j][0]);
#pragma unroll
        for (int r = 1; r < NR; r++)
          if (r < n) acc.add(x[j][r]);
        acc.result(s, n);
      }
      Unit& rp = v[j0 + j];
      if (residual) {
#pragma unroll
        for (int e = 0; e < E; e++) rp.e[e] = TT::fromAcc(addRn(TT::toAcc(rp.e[e]), TT::toAcc(s.e[e])));
        RIO::store(residual, u, rowBytes, rp);
        if constexpr (COPIES) copyUnit<NR>(copies, copies->residual + (uint64_t)u * FCCL_UNIT_BYTES, rp.words);
      } else {
        rp = s;
      }
      /* The sum of squares in unit and element order. */
#pragma unroll
      for (int e = 0; e < E; e++) {
        const float x2 = TT::toAcc(rp.e[e]);
        squares = __fmaf_rn(x2, x2, squares);
      }
    }
  }

  /* The weight's units of chunk c0 (w[j]: unit unitOf(c0 + j)); the first chunk's load while the group meets. */
  Unit w[C];
  auto loadWeight = [&](int c0) {
    if (!a.weight) return;
#pragma unroll
    for (int j = 0; j < C; j++)
      if (unitOf(c0 + j) < units) RIO::loadReadOnly(a.weight, unitOf(c0 + j), rowBytes, w[j]);
  };
  loadWeight(0);
  const uint32_t slots = 2 * g.parity; /* this row's sum, then its maximum */
  g.parity ^= 1;
  const float total = groupReduce(squares, g, scratch.slot[slots], [](float x, float y) { return __fadd_rn(x, y); });
  const float inv = __frsqrt_rn(__fadd_rn(__fdiv_rn(total, (float)a.hidden), a.eps));

  /* f(u, y) for each of the thread's units u, y = r' * inv * weight of its elements, chunk by chunk. */
  auto forEachNormalised = [&](auto&& f) {
#pragma unroll
    for (int c0 = 0; c0 < U; c0 += C) {
      if (unitOf(c0) >= units) break;
      if (c0 > 0) loadWeight(c0);
#pragma unroll
      for (int j = 0; j < C; j++) {
        const uint32_t u = unitOf(c0 + j);
        if (u >= units) break;
        float y[E];
#pragma unroll
        for (int e = 0; e < E; e++) {
          y[e] = __fmul_rn(TT::toAcc(v[c0 + j].e[e]), inv);
          if (a.weight) y[e] = __fmul_rn(y[e], TT::toAcc(w[j].e[e]));
        }
        f(u, y);
      }
    }
  };

  if constexpr (!FP8) {
    const uint64_t out = a.output + row * rowBytes;
    forEachNormalised([&](uint32_t u, const float(&y)[E]) {
      Unit o;
#pragma unroll
      for (int e = 0; e < E; e++) o.e[e] = TT::fromAcc(y[e]);
      RIO::store(out, u, rowBytes, o);
      if constexpr (COPIES) copyUnit<NR>(copies, copies->output + (uint64_t)u * FCCL_UNIT_BYTES, o.words);
    });
  } else {
    const bool dynamic = a.scaleMode == fcclScaleDynamic;
    float scale = staticScale;
    if (dynamic) {
      /* Elements past the row are zero: they cannot raise the maximum. */
      float amax = 0.0f;
      forEachNormalised([&](uint32_t, const float(&y)[E]) {
#pragma unroll
        for (int e = 0; e < E; e++) amax = maxNaN(fabsf(y[e]), amax);
      });
      amax = groupReduce(amax, g, scratch.slot[slots + 1], [](float x, float y) { return maxNaN(x, y); });
      scale = __fdiv_rn(amax, kFp8Max);
      if (g.lane == 0) {
        ptr<float>(a.scale)[row] = scale;
        if constexpr (COPIES) {
#pragma unroll
          for (int p = 0; p < NR; p++)
            if (copies->base[p]) *ptr<float>(copies->base[p] + copies->scale) = scale;
        }
      }
      /* The output pass starts over at the first chunk: its weight again, for a row of more than one. */
      if (unitOf(C) < units) loadWeight(0);
    }
    const uint64_t out = a.output + row * a.hidden;
    forEachNormalised([&](uint32_t u, const float(&y)[E]) {
      uint64_t packed = 0;
#pragma unroll
      for (int e = 0; e < E; e++) {
        /* A dynamic scale of 0 means an all-zero row: its outputs are 0 rather than 0 / 0. */
        const float q = dynamic && scale == 0.0f ? 0.0f : __fdiv_rn(y[e], scale);
        packed |= (uint64_t)toFp8(q) << (8 * e);
      }
      const uint64_t first = (uint64_t)u * E;
      if constexpr (VEC && E == 8)
        *ptr<uint64_t>(out + first) = packed;
      else if constexpr (VEC && E == 4)
        *ptr<uint32_t>(out + first) = (uint32_t)packed;
      else
        storeFp8<E>(out, first, a.hidden, packed);
      if constexpr (COPIES) {
#pragma unroll
        for (int p = 0; p < NR; p++)
          if (copies->base[p]) storeFp8<E>(copies->base[p] + copies->output, first, a.hidden, packed);
      }
    });
  }
}

/*
 * Copies one row of `bytes` from src (16-byte aligned: a staging area) to dst with the group's threads, each
 * issuing its loads of up to FCCL_FUSED_TARGET_UNITS units before its stores. IO: UnitIO of the row's element type
 * (dst may be unaligned; never written past bytes).
 */
template <class IO>
__device__ __forceinline__ void copyRow(uint64_t src, uint64_t dst, uint64_t bytes, const RowGroup& g) {
  const uint32_t units = (uint32_t)divUp(bytes, FCCL_UNIT_BYTES);
  for (uint32_t first = g.lane; first < units; first += g.threads * kChunkUnits) {
    typename IO::Unit x[kChunkUnits];
#pragma unroll
    for (int j = 0; j < kChunkUnits; j++) {
      const uint32_t u = first + (uint32_t)j * g.threads;
      if (u < units) ld_data16(ptr<const void>(src + (uint64_t)u * FCCL_UNIT_BYTES), x[j].words[0], x[j].words[1]);
    }
#pragma unroll
    for (int j = 0; j < kChunkUnits; j++) {
      const uint32_t u = first + (uint32_t)j * g.threads;
      if (u < units) IO::store(dst, u, bytes, x[j]);
    }
  }
}

/*
 * Pushes one row of `bytes` from src (any element-aligned address) into the 16-byte aligned rows dsts[p] of the
 * peers p < NR that have one (0: none), with the group's threads, loads before stores as copyRow.
 */
template <class IO, int NR>
__device__ __forceinline__ void pushRow(uint64_t src, uint64_t bytes, const uint64_t (&dsts)[FCCL_DEVICE_MAX_RANKS],
                                        const RowGroup& g) {
  const uint32_t units = (uint32_t)divUp(bytes, FCCL_UNIT_BYTES);
  for (uint32_t first = g.lane; first < units; first += g.threads * kChunkUnits) {
    typename IO::Unit x[kChunkUnits];
#pragma unroll
    for (int j = 0; j < kChunkUnits; j++) {
      const uint32_t u = first + (uint32_t)j * g.threads;
      if (u < units) IO::load(src, u, bytes, x[j]);
    }
#pragma unroll
    for (int j = 0; j < kChunkUnits; j++) {
      const uint32_t u = first + (uint32_t)j * g.threads;
      if (u >= units) break;
#pragma unroll
      for (int p = 0; p < NR; p++)
        if (dsts[p]) st_data16(ptr<void>(dsts[p] + (uint64_t)u * FCCL_UNIT_BYTES), x[j].words[0], x[j].words[1]);
    }
  }
}

/*
 * Every row of a one-rank call (no all-reduce: the input is the sum), each by its group: what the one-rank form
 * runs, and fused_norm_perf's add + RMSNorm baseline. rowThreads: fcclFusedShapeOf's for the library (another
 * shape is only a different reduction order, for measurements); the block is rowsPerBlock groups of it. VEC:
 * fcclFusedVectorizable(&a, ...).
 */
template <class TT, bool FP8, bool VEC>
__device__ __forceinline__ void localRows(const fcclFusedArgs& a, uint32_t rowThreads) {
  __shared__ Scratch scratch;
  /* Written by stream work before this kernel, read once. */
  const float staticScale = FP8 && a.scaleMode == fcclScaleStatic ? *ptr<const float>(a.scale) : 1.0f;
  const uint64_t rowBytes = a.hidden * sizeof(typename TT::Bits);
  RowGroup g(rowThreads);
  forEachRow(a.tokens, g, [&](uint64_t row) {
    const uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {a.input + row * rowBytes};
    normRow<TT, FP8, 1, VEC, false>(a, bases, 1, row, staticScale, g, scratch, nullptr);
  });
}

}  // namespace fused

}  // namespace fccl

#endif /* FCCL_DEVICE_FUSED_NORM_CUH_ */
