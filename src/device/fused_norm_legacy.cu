/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one-shot form of fcclAllReduceAddRMSNorm as it ran before the row kernel (fused_norm.cuh), kept so that
 * FCCL_FUSED_KERNEL=legacy can measure the two side by side (contrib/gpu-lab/fused-norm-tune): one block of 512
 * threads per row at a time, at most one block per SM (launched with the grid fused_norm.c computes for it), thread t
 * owning the row's units t, t + 512, ...; each unit reduced, added and stored before the next one's loads are
 * issued. The same flags, rounds and staging as fused_norm_oneshot.cu; a row's reduction order is the row kernel's
 * only for rows of 16384 bf16 elements, so its bits are not the other forms' (docs/fused.md#batch-invariance does not
 * apply across the two kernels).
 */
#include "common.cuh"
#include "kernels.cuh"

#include <cuda_fp8.h>

namespace fccl {

namespace fused_legacy {

constexpr int kThreads = (int)kFusedLegacyThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kUnits = FCCL_FUSED_MAX_ROW_BYTES / FCCL_UNIT_BYTES / kThreads;
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
 * One token row: bases[r] is rank r's input row (its input or its staged copy). Reduces it in rank order, adds
 * and writes back the residual, and writes the normalised row (and the FP8 scale) for token `row`.
 */
template <class TT, bool FP8, int NR>
__device__ __forceinline__ void normRow(const fcclFusedArgs& a, const uint64_t (&bases)[FCCL_DEVICE_MAX_RANKS], int n,
                                        uint64_t row, float staticScale, float (&shared)[kWarps]) {
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
    forEachNormalised([&](uint64_t u, const float(&y)[E]) {
      Unit o;
#pragma unroll
      for (int e = 0; e < E; e++) o.e[e] = TT::fromAcc(y[e]);
      IO::store(out, u, rowBytes, o);
    });
  } else {
    float scale = staticScale;
    if (a.scaleMode == fcclScaleDynamic) {
      float amax = 0.0f;
      /* Elements past the row are zero: they cannot raise the maximum. */
      forEachNormalised([&](uint64_t, const float(&y)[E]) {
#pragma unroll
        for (int e = 0; e < E; e++) amax = maxNaN(fabsf(y[e]), amax);
      });
      amax = blockMax(amax, shared);
      scale = __fdiv_rn(amax, kFp8Max);
      if (threadIdx.x == 0) {
        ptr<float>(a.scale)[row] = scale;
      }
    }
    const uint64_t out = a.output + row * a.hidden;
    forEachNormalised([&](uint64_t u, const float(&y)[E]) {
      uint64_t packed = 0;
#pragma unroll
      for (int e = 0; e < E; e++) {
        /* A dynamic scale of 0 means an all-zero row: its outputs are 0 rather than 0 / 0. */
        const float q = a.scaleMode == fcclScaleDynamic && scale == 0.0f ? 0.0f : __fdiv_rn(y[e], scale);
        packed |= (uint64_t)toFp8(q) << (8 * e);
      }
      storeFp8<E>(out, u * E, a.hidden, packed);
    });
  }
}

}  // namespace fused_legacy

using fused_legacy::kThreads;
using fused_legacy::kWarps;
using fused_legacy::normRow;

template <int DT, bool FP8, int NR>
__global__ void __launch_bounds__(kThreads, 1) fusedNormLegacy(fcclDevComm c, fcclFusedArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  __shared__ float shared[kWarps];
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c, a.print);
  const int n = c.nranks;
  const int me = c.rank;
  const int kernel = FCCL_KERNEL_FUSED_NORM;
  const uint64_t rowBytes = a.hidden * sizeof(typename TT::Bits);
  const uint64_t pitch = divUp(rowBytes, FCCL_UNIT_BYTES) * FCCL_UNIT_BYTES;
  const uint64_t units = pitch / FCCL_UNIT_BYTES;
  /* Written by stream work before this kernel, read once. */
  const float staticScale = FP8 && a.scaleMode == fcclScaleStatic ? *ptr<const float>(a.scale) : 1.0f;

  if (a.registered) {
    postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
    if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_READY, epoch)) {
      epochEnd(c, epoch);
      return;
    }
    for (uint64_t row = blockIdx.x; row < a.tokens; row += gridDim.x) {
      uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
#pragma unroll
      for (int r = 0; r < NR; r++)
        if (r < n) bases[r] = a.peerInput[r] + row * rowBytes;
      normRow<TT, FP8, NR>(a, bases, n, row, staticScale, shared);
    }
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
    (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), false, kernel, FCCL_PHASE_DONE, epoch);
    epochEnd(c, epoch);
    return;
  }

  /* Our rows of round k into our inbox region of every peer; all of round k's rows reduced and normalised from our
   * input and every writer's inbox region. */
  auto fill = [&](uint64_t k) {
    const StagedRound r(k, a.tokens, a.roundRows, epoch);
    uint64_t outbound[FCCL_DEVICE_MAX_RANKS] = {};
    peerRegionsOutbound<NR>(c, c.layout.inboxOffset, r.parity, outbound);
    for (uint64_t i = blockIdx.x; i < r.len; i += gridDim.x) {
      const uint64_t in = a.input + (r.start + i) * rowBytes;
      for (uint64_t u = threadIdx.x; u < units; u += kThreads) {
        Unit v;
        IO::load(in, u, rowBytes, v);
#pragma unroll
        for (int p = 0; p < NR; p++)
          if (p < n && p != me)
            st_data16(ptr<void>(outbound[p] + i * pitch + u * FCCL_UNIT_BYTES), v.words[0], v.words[1]);
      }
    }
  };
  auto consume = [&](uint64_t k) {
    const StagedRound r(k, a.tokens, a.roundRows, epoch);
    uint64_t inbound[FCCL_DEVICE_MAX_RANKS] = {};
    peerRegionsInbound<NR>(c, c.layout.inboxOffset, r.parity, inbound);
    for (uint64_t i = blockIdx.x; i < r.len; i += gridDim.x) {
      uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
#pragma unroll
      for (int w = 0; w < NR; w++)
        if (w < n) bases[w] = w == me ? a.input + (r.start + i) * rowBytes : inbound[w] + i * pitch;
      normRow<TT, FP8, NR>(a, bases, n, r.start + i, staticScale, shared);
    }
  };
  stagedRounds(c, divUp(a.tokens, a.roundRows), epoch, kernel, fill, consume);
  epochEnd(c, epoch);
}

/* The legacy kernel for (datatype, FP8 output or not, rank bound); NULL for a type without one. */
const void* fusedNormLegacyInstance(fcclDataType_t type, bool fp8, int rankBound) {
#define FCCL_FUSED_ENTRY_(dt, f8, nr) \
  if (type == dt && fp8 == f8 && rankBound == nr) return reinterpret_cast<const void*>(&fusedNormLegacy<dt, f8, nr>);
#define FCCL_FUSED_FOR_BOUNDS_(dt, f8) \
  FCCL_FUSED_ENTRY_(dt, f8, 2) FCCL_FUSED_ENTRY_(dt, f8, 4) FCCL_FUSED_ENTRY_(dt, f8, FCCL_DEVICE_MAX_RANKS)
#define FCCL_FUSED_FOR_OUT_(dt) FCCL_FUSED_FOR_BOUNDS_(dt, false) FCCL_FUSED_FOR_BOUNDS_(dt, true)
  FCCL_FUSED_FOR_OUT_(fcclFloat16)
  FCCL_FUSED_FOR_OUT_(fcclBfloat16)
  FCCL_FUSED_FOR_OUT_(fcclFloat32)
#undef FCCL_FUSED_FOR_OUT_
#undef FCCL_FUSED_FOR_BOUNDS_
#undef FCCL_FUSED_ENTRY_
  return nullptr;
}

}  // namespace fccl
