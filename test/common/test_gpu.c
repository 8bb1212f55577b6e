#include "test.h"

#include <cuda_runtime.h>

void testRequireGpus(int minGpus) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count < minGpus) {
    (void)cudaGetLastError();
    printf("SKIP: needs %d GPU(s), found %d (%s)\n", minGpus, status == cudaSuccess ? count : 0,
           status == cudaSuccess ? "ok" : cudaGetErrorString(status));
    exit(TEST_SKIP);
  }
}
