/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unfused baseline of fused_norm_perf: residual add + RMSNorm of bf16 rows after a separate fcclAllReduce, as
 * an application would run it. The arithmetic is docs/fused.md's (fp32, one block of 512 threads per row, each
 * thread's units in order, a butterfly per warp and the warps in order), so that its output also checks the fused
 * call's bit for bit.
 */
#include "fused_norm_ref.h"

#include <cuda_bf16.h>
#include <stdint.h>

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = 8; /* 16-byte units: rows up to 64 KiB */

__device__ __forceinline__ float bf(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
__device__ __forceinline__ uint16_t tobf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/* Element e of unit u of a row (zero past its end). */
__device__ __forceinline__ uint16_t at(const uint16_t* row, uint64_t u, int e, uint64_t hidden) {
  const uint64_t i = u * 8 + e;
  return i < hidden ? row[i] : 0;
}

__global__ void __launch_bounds__(kThreads, 1) addRmsNorm(const uint16_t* reduced, uint16_t* residual,
                                                          const uint16_t* weight, uint16_t* output, uint64_t hidden,
                                                          float eps) {
  __shared__ float shared[kWarps];
  const uint64_t row = blockIdx.x;
  const uint64_t units = (hidden + 7) / 8;
  const uint16_t* s = reduced + row * hidden;
  uint16_t* r = residual + row * hidden;
  uint16_t* o = output + row * hidden;
  uint16_t v[kPerThread][8];
  float squares = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerThread; j++) {
    const uint64_t u = threadIdx.x + (uint64_t)j * kThreads;
    if (u >= units) break;
#pragma unroll
    for (int e = 0; e < 8; e++) {
      v[j][e] = tobf(__fadd_rn(bf(at(r, u, e, hidden)), bf(at(s, u, e, hidden))));
      if (u * 8 + e < hidden) r[u * 8 + e] = v[j][e];
      const float x = bf(v[j][e]);
      squares = __fmaf_rn(x, x, squares);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) squares = __fadd_rn(squares, __shfl_xor_sync(~0u, squares, offset));
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x / 32] = squares;
  __syncthreads();
  float total = shared[0];
#pragma unroll
  for (int w = 1; w < kWarps; w++) total = __fadd_rn(total, shared[w]);
  const float inv = __frsqrt_rn(__fadd_rn(__fdiv_rn(total, (float)hidden), eps));
#pragma unroll
  for (int j = 0; j < kPerThread; j++) {
    const uint64_t u = threadIdx.x + (uint64_t)j * kThreads;
    if (u >= units) break;
#pragma unroll
    for (int e = 0; e < 8; e++)
      if (u * 8 + e < hidden) o[u * 8 + e] = tobf(__fmul_rn(__fmul_rn(bf(v[j][e]), inv), bf(weight[u * 8 + e])));
  }
}

}  // namespace

extern "C" int fusedNormRefLaunch(const void* reduced, void* residual, const void* weight, void* output,
                                  size_t tokens, size_t hidden, float eps, void* stream) {
  if (tokens == 0) return 0;
  if (hidden == 0 || hidden > (size_t)kPerThread * 8 * kThreads) return -1;
  addRmsNorm<<<(unsigned)tokens, kThreads, 0, (cudaStream_t)stream>>>(
      (const uint16_t*)reduced, (uint16_t*)residual, (const uint16_t*)weight, (uint16_t*)output, hidden, eps);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
