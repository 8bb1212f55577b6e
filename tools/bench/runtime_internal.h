/*
 * What the runtime's files and the engines share, and the programs need not see.
 */
#ifndef FCCL_BENCH_RUNTIME_INTERNAL_H_
#define FCCL_BENCH_RUNTIME_INTERNAL_H_

#include "runtime.h"

#include <cuda_runtime.h>

#define BENCH_CHECK_CUDA(agent, call)                                                               \
  do {                                                                                              \
    cudaError_t benchErr_ = (call);                                                                 \
    if (benchErr_ != cudaSuccess) {                                                                 \
      (void)cudaGetLastError();                                                                     \
      benchFail((agent), "%s failed: %s (%s)", #call, cudaGetErrorName(benchErr_),                  \
                cudaGetErrorString(benchErr_));                                                     \
      return -1;                                                                                    \
    }                                                                                               \
  } while (0)

#endif /* FCCL_BENCH_RUNTIME_INTERNAL_H_ */
