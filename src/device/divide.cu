/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one division of an average that was summed in parts (the hierarchical path's all-reduce: a sum inside each
 * host, a sum across hosts, then this): each element becomes OpTraits<fcclAvg>::finish of itself, so the result is
 * what one fccl kernel's avg gives for the same sum (floats: rounded division; integers: the wrapped sum divided,
 * truncating toward zero). Plain device memory, no peers.
 */
#include "device.h"
#include "reduce.cuh"

extern "C" {
#include "check.h"
}

namespace fccl {

template <int DT>
__global__ void __launch_bounds__(FCCL_DIVIDE_THREADS) divideKernel(typename TypeTraits<DT>::Bits* data,
                                                                     uint64_t count, int divisor) {
  using TT = TypeTraits<DT>;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
    data[i] = TT::fromAcc(OpTraits<fcclAvg>::finish<TT>(TT::toAcc(data[i]), divisor));
}

/* One instantiation per type: the avg entries of the one list. */
static const void* divideKernelFor(fcclDataType_t type) {
#define FCCL_DIVIDE_CASE(dt, op) \
  if (type == dt && op == fcclAvg) return reinterpret_cast<const void*>(&divideKernel<dt>);
  FCCL_DEVICE_TYPE_OP_LIST(FCCL_DIVIDE_CASE)
#undef FCCL_DIVIDE_CASE
  return nullptr;
}

}  // namespace fccl

extern "C" fcclResult_t fcclDeviceLaunchDivide(fcclDataType_t type, void* data, size_t count, int divisor,
                                               cudaStream_t stream) {
  const void* function = fccl::divideKernelFor(type);
  if (function == nullptr || divisor < 1 || (count > 0 && data == nullptr))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "no division kernel for type %d, divisor %d, %zu at %p",
                      (int)type, divisor, count, data);
  if (count == 0) return fcclSuccess;
  uint64_t n = count;
  const uint64_t wanted = (n + FCCL_DIVIDE_THREADS - 1) / FCCL_DIVIDE_THREADS;
  const unsigned blocks = (unsigned)(wanted < FCCL_DIVIDE_MAX_BLOCKS ? wanted : FCCL_DIVIDE_MAX_BLOCKS);
  void* params[] = {&data, &n, &divisor};
  cudaError_t err = cudaLaunchKernel(function, dim3(blocks), dim3(FCCL_DIVIDE_THREADS), params, 0, stream);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_COLL, "launching the division kernel (%u x %d) failed: %s",
                      blocks, FCCL_DIVIDE_THREADS, cudaGetErrorString(err));
  }
  return fcclSuccess;
}
