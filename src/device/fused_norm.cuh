/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The arithmetic of one token row of fcclAllReduceAddRMSNorm, shared by its forms (fused_norm_oneshot.cu: one-shot,
 * fused_norm_twoshot.cu: two-shot): the rank-order reduction, the residual add, the sum of squares in one fixed
 * order, the norm and the FP8 quantisation. A row's bits depend on its own data only, whichever form runs it and
 * whichever rank or block computes it (docs/fused.md#batch-invariance).
 */
#ifndef FCCL_DEVICE_FUSED_NORM_CUH_
#define FCCL_DEVICE_FUSED_NORM_CUH_

#include "common.cuh"

#include <cuda_fp8.h>

namespace fccl {

namespace fused {

constexpr int kThreads = FCCL_FUSED_THREADS;
constexpr int kWarps = kThreads / 32;
constexpr int kUnits = FCCL_FUSED_UNITS_PER_THREAD;
constexpr float kFp8Max = 448.0f; /* the largest finite E4M3 value */

/* max(a, b) where a NaN operand wins: the row's scale is NaN when the row holds one. */
__device__ __forceinline__ float maxNaN(float a, float b) { return (a != a || a > b) ? a : b; }

/* The combination of every thread's v by op (commutative), the same bits on every thread: a butterfly inside each
 * warp (lane i combines with lane i ^ offset, so both lanes of a pair hold the same value), then the warps' values in
 * warp order. The order depends on nothing but the thread index. */
template <class Op>
__device__ __forceinline__ float blockReduce(float v, float (&shared)[kWarps], Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  float total = shared[0];
#pragma unroll
  for (int w = 1; w < kWarps; w++) total = op(total, shared[w]);
  __syncthreads(); /* shared is reused by the next reduction */
  return total;
}

__device__ __forceinline__ float blockSum(float v, float (&shared)[kWarps]) {
  return blockReduce(v, shared, [](float a, float b) { return __fadd_rn(a, b); });
}

/* The maximum (NaN if any is NaN); NaN payloads are kept identical on every rank by the fixed order. */
__device__ __forceinline__ float blockMax(float v, float (&shared)[kWarps]) {
  return blockReduce(v, shared, [](float a, float b) { return maxNaN(a, b); });
}

/* FP8 E4M3 of x, saturating to +-448 (NaN stays NaN), as __nv_fp8_e4m3's conversion does. */
__device__ __forceinline__ uint8_t toFp8(float x) {
  return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

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
 * One token row: bases[r] is rank r's input row (its input or its staged copy). Reduces it in rank order, adds
 * and writes back the residual, and writes the normalised row (and the FP8 scale) for token `row`; with COPIES,
 * also r', the output row and the scale into every peer's region of copies, from the same registers.
 */
template <class TT, bool FP8, int NR, bool COPIES = false>
__device__ __forceinline__ void normRow(const fcclFusedArgs& a, const uint64_t (&bases)[FCCL_DEVICE_MAX_RANKS], int n,
                                        uint64_t row, float staticScale, float (&shared)[kWarps],
                                        const RowCopies* copies = nullptr) {
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  using Bits = typename TT::Bits;
  constexpr int E = 16 / (int)sizeof(Bits);
  const uint64_t rowBytes = a.hidden * sizeof(Bits);
  const uint64_t units = divUp(rowBytes, FCCL_UNIT_BYTES);
  const uint64_t residual = a.residual ? a.residual + row * rowBytes : 0;

  /* r' of the thread's units, in registers until the output; elements past the row are zero bits throughout. */
  Unit v[kUnits];
  float squares = 0.0f;
#pragma unroll
  for (int j = 0; j < kUnits; j++) {
    const uint64_t u = threadIdx.x + (uint64_t)j * kThreads;
    if (u >= units) break;
    reduceRanks16<TT, OpTraits<fcclSum>, NR>(bases, n, u, rowBytes, v[j]);
    if (residual) {
      Unit r;
      IO::load(residual, u, rowBytes, r);
#pragma unroll
      for (int e = 0; e < E; e++) v[j].e[e] = TT::fromAcc(addRn(TT::toAcc(r.e[e]), TT::toAcc(v[j].e[e])));
      IO::store(residual, u, rowBytes, v[j]);
      if constexpr (COPIES) copyUnit<NR>(copies, copies->residual + u * FCCL_UNIT_BYTES, v[j].words);
    }
#pragma unroll
    for (int e = 0; e < E; e++) {
      const float x = TT::toAcc(v[j].e[e]);
      squares = __fmaf_rn(x, x, squares);
    }
  }
  const float total = blockSum(squares, shared);
  const float inv = __frsqrt_rn(__fadd_rn(__fdiv_rn(total, (float)a.hidden), a.eps));

  /* f(u, y) for each of the thread's units u, y = r' * inv * weight of its elements. */
  auto forEachNormalised = [&](auto&& f) {
#pragma unroll
    for (int j = 0; j < kUnits; j++) {
      const uint64_t u = threadIdx.x + (uint64_t)j * kThreads;
      if (u >= units) break;
      Unit w;
      if (a.weight) IO::load(a.weight, u, rowBytes, w);
      float y[E];
#pragma unroll
      for (int e = 0; e < E; e++) {
        y[e] = __fmul_rn(TT::toAcc(v[j].e[e]), inv);
        if (a.weight) y[e] = __fmul_rn(y[e], TT::toAcc(w.e[e]));
      }
      f(u, y);
    }
  };

  if constexpr (!FP8) {
    const uint64_t out = a.output + row * rowBytes;
    forEachNormalised([&](uint64_t u, const float (&y)[E]) {
      Unit o;
#pragma unroll
      for (int e = 0; e < E; e++) o.e[e] = TT::fromAcc(y[e]);
      IO::store(out, u, rowBytes, o);
      if constexpr (COPIES) copyUnit<NR>(copies, copies->output + u * FCCL_UNIT_BYTES, o.words);
    });
  } else {
    float scale = staticScale;
    if (a.scaleMode == fcclScaleDynamic) {
      float amax = 0.0f;
      /* Elements past the row are zero: they cannot raise the maximum. */
      forEachNormalised([&](uint64_t, const float (&y)[E]) {
#pragma unroll
        for (int e = 0; e < E; e++) amax = maxNaN(fabsf(y[e]), amax);
      });
      amax = blockMax(amax, shared);
      scale = __fdiv_rn(amax, kFp8Max);
      if (threadIdx.x == 0) {
        ptr<float>(a.scale)[row] = scale;
        if constexpr (COPIES) {
#pragma unroll
          for (int p = 0; p < NR; p++)
            if (copies->base[p]) *ptr<float>(copies->base[p] + copies->scale) = scale;
        }
      }
    }
    const uint64_t out = a.output + row * a.hidden;
    forEachNormalised([&](uint64_t u, const float (&y)[E]) {
      uint64_t packed = 0;
#pragma unroll
      for (int e = 0; e < E; e++) {
        /* A dynamic scale of 0 means an all-zero row: its outputs are 0 rather than 0 / 0. */
        const float q = a.scaleMode == fcclScaleDynamic && scale == 0.0f ? 0.0f : __fdiv_rn(y[e], scale);
        packed |= (uint64_t)toFp8(q) << (8 * e);
      }
      storeFp8<E>(out, u * E, a.hidden, packed);
      if constexpr (COPIES) {
#pragma unroll
        for (int p = 0; p < NR; p++)
          if (copies->base[p]) storeFp8<E>(copies->base[p] + copies->output, u * E, a.hidden, packed);
      }
    });
  }
}

}  // namespace fused

}  // namespace fccl

#endif /* FCCL_DEVICE_FUSED_NORM_CUH_ */
