/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fccl's own add + RMSNorm of bf16 rows, the norm half of fused_norm_perf's unfused baseline: the library's row kernel
 * (src/device/fused_norm.cuh, compiled into this tool from its header: libfccl is still used through its API only)
 * on one rank's rows, with no all-reduce, no flags and no epochs. In the library's shape of the row
 * (fused_norm_shape.h) its arithmetic and reduction order are the fused call's, so its output checks the fused call's
 * bit for bit; in another shape it is the same kernel with another reduction order, which the benchmark times to
 * choose the shapes.
 */
#include "fused_norm_ref.h"

#include "fused_norm.cuh"

namespace {

template <bool VEC>
__global__ void __launch_bounds__(FCCL_FUSED_MAX_BLOCK_THREADS) addRmsNorm(fcclFusedArgs a, uint32_t rowThreads) {
  fccl::fused::localRows<fccl::TypeTraits<fcclBfloat16>, false, VEC>(a, rowThreads);
}

}  // namespace

extern "C" int fusedNormRefShape(size_t hidden, unsigned rowThreads, unsigned blockThreads, unsigned* rowsPerBlock) {
  const uint64_t rowBytes = (uint64_t)hidden * 2;
  const fcclFusedShape shape = rowThreads == 0 ? fcclFusedShapeOf(rowBytes)
                                               : fcclFusedShapeMake(rowBytes, rowThreads, blockThreads);
  if (shape.rowThreads == 0) return -1;
  if (rowsPerBlock) *rowsPerBlock = shape.rowsPerBlock;
  return (int)shape.rowThreads;
}

extern "C" int fusedNormRefLaunch(const void* reduced, void* residual, const void* weight, void* output, size_t tokens,
                                  size_t hidden, float eps, unsigned rowThreads, unsigned blockThreads, void* stream) {
  if (tokens == 0) return 0;
  const uint64_t rowBytes = (uint64_t)hidden * 2;
  if (hidden == 0 || rowBytes > FCCL_FUSED_MAX_ROW_BYTES) return -1;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return -1;
  /* The library's: its rows per block for this token count on this GPU, as fcclAllReduceAddRMSNorm launches. */
  const fcclFusedShape shape = rowThreads == 0 ? fcclFusedShapeFor(rowBytes, tokens, sms)
                                               : fcclFusedShapeMake(rowBytes, rowThreads, blockThreads);
  if (shape.rowThreads == 0) return -1;
  fcclFusedArgs a = {};
  a.input = (uint64_t)(uintptr_t)reduced;
  a.residual = (uint64_t)(uintptr_t)residual;
  a.weight = (uint64_t)(uintptr_t)weight;
  a.output = (uint64_t)(uintptr_t)output;
  a.tokens = tokens;
  a.hidden = hidden;
  a.eps = eps;
  a.scaleMode = fcclScaleNone;
  /* Batches of rowsPerBlock rows over as many blocks as stay resident, as the library's one-rank form launches. */
  const uint64_t batches = (tokens + shape.rowsPerBlock - 1) / shape.rowsPerBlock;
  const uint64_t perSm = shape.blockThreads < FCCL_FUSED_RESIDENT_THREADS
                             ? FCCL_FUSED_RESIDENT_THREADS / shape.blockThreads
                             : 1;
  const uint64_t resident = (uint64_t)(sms > 0 ? sms : 1) * perSm;
  const unsigned blocks = (unsigned)(batches < resident ? batches : resident);
  if (fcclFusedVectorizable(&a, rowBytes, 1))
    addRmsNorm<true><<<blocks, shape.blockThreads, 0, (cudaStream_t)stream>>>(a, shape.rowThreads);
  else
    addRmsNorm<false><<<blocks, shape.blockThreads, 0, (cudaStream_t)stream>>>(a, shape.rowThreads);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
