/* SPDX-License-Identifier: Apache-2.0 */
#include "cudawrap.h"

#include "check.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

/* The ABI version of the driver entry points we ask for: the CUDA 12.0 signatures of the functions above. */
#define FCCL_DRIVER_ABI_VERSION 12000

#define FCCL_CU_DEFINE(name, ret, params) ret(CUDAAPI* pfn_##name) params;
FCCL_CU_FUNCTIONS(FCCL_CU_DEFINE)
#undef FCCL_CU_DEFINE

static pthread_once_t driverOnce = PTHREAD_ONCE_INIT;
static fcclResult_t driverLoadResult = fcclInternalError;
static char driverLoadMessage[256];

static int loadSymbol(const char* symbol, void** target) {
  enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, target, FCCL_DRIVER_ABI_VERSION, cudaEnableDefault,
                                                     &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || *target == NULL) {
    (void)cudaGetLastError();
    snprintf(driverLoadMessage, sizeof(driverLoadMessage), "CUDA driver entry point %s unavailable: %s", symbol,
             err != cudaSuccess ? cudaGetErrorString(err) : "symbol not found in this driver");
    return 0;
  }
  return 1;
}

static void loadDriver(void) {
#define FCCL_CU_LOAD(name, ret, params) \
  if (!loadSymbol(#name, (void**)&pfn_##name)) return;
  FCCL_CU_FUNCTIONS(FCCL_CU_LOAD)
#undef FCCL_CU_LOAD
  driverLoadResult = fcclSuccess;
}

fcclResult_t fcclCudaDriverLoad(void) {
  pthread_once(&driverOnce, loadDriver);
  if (driverLoadResult != fcclSuccess)
    return FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_INIT, "%s", driverLoadMessage);
  return fcclSuccess;
}

/* -1: the device's own answer; 0 or 1: fcclCudaFakeMpsForTest's. */
static int fakeMps = -1;

void fcclCudaFakeMpsForTest(int value) { __atomic_store_n(&fakeMps, value, __ATOMIC_RELEASE); }

fcclResult_t fcclCudaDeviceMpsEnabled(int cudaDev, int* enabled) {
  *enabled = 0;
  FCCLCHECK(fcclCudaDriverLoad());
  CUdevice device;
  CUCHECK(cuDeviceGet(&device, cudaDev));
  int value = 0;
  const CUresult got = pfn_cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, device);
  if (got == CUDA_ERROR_INVALID_VALUE) {
    /* A driver older than the attribute (CUDA 11.x): it cannot tell, and says so in the log. */
    FCCL_INFO(FCCL_SUBSYS_INIT, "device %d: the driver does not report whether MPS shares it; taken as not", cudaDev);
    value = 0;
  } else if (got != CUDA_SUCCESS) {
    return fcclCuError(got, "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MPS_ENABLED)", FCCL_SUBSYS_INIT, __FILE__,
                       __LINE__);
  }
  const int fake = __atomic_load_n(&fakeMps, __ATOMIC_ACQUIRE);
  *enabled = fake >= 0 ? fake : value != 0;
  return fcclSuccess;
}

fcclResult_t fcclCuError(CUresult error, const char* call, fcclSubsys_t subsys, const char* file, int line) {
  const char* name = "unknown";
  const char* text = "";
  if (pfn_cuGetErrorName) pfn_cuGetErrorName(error, &name);
  if (pfn_cuGetErrorString) pfn_cuGetErrorString(error, &text);
  return fcclSetError(fcclUnhandledCudaError, subsys, file, line, "%s failed: %s (%s)", call, name, text);
}
