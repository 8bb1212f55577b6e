/* SPDX-License-Identifier: Apache-2.0 */
#include "cudawrap.h"

#include "check.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    char why[200];
    if (err == cudaSuccess)
      snprintf(why, sizeof(why), "symbol not found in this driver");
    else if (!fcclCudaNoDeviceText(err, why, sizeof(why)))
      snprintf(why, sizeof(why), "%s", cudaGetErrorString(err));
    snprintf(driverLoadMessage, sizeof(driverLoadMessage), "CUDA driver entry point %s unavailable: %s", symbol, why);
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

static void formatCudaVersion(int version, char* out, size_t len) {
  snprintf(out, len, "%d.%d", version / 1000, (version % 1000) / 10);
}

int fcclCudaNoDeviceText(cudaError_t error, char* text, size_t len) {
  if (error == cudaErrorInsufficientDriver) {
    /* cudaDriverGetVersion reports 0 when no driver is installed (libcuda.so.1 or the device nodes missing). */
    int driver = 0, runtime = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
    (void)cudaGetLastError();
    if (driver <= 0) {
      snprintf(text, len,
               "no NVIDIA driver found (CUDA finds no libcuda.so.1 or no /dev/nvidia* device): fccl needs "
               "an NVIDIA GPU and its driver");
    } else {
      char have[16], need[16];
      formatCudaVersion(driver, have, sizeof(have));
      formatCudaVersion(runtime, need, sizeof(need));
      snprintf(text, len,
               "the NVIDIA driver supports CUDA %s, older than this CUDA runtime (%s): a newer driver is "
               "needed",
               have, need);
    }
    return 1;
  }
  if (error == cudaErrorNoDevice) {
    const char* visible = getenv("CUDA_VISIBLE_DEVICES");
    const size_t blanks = visible ? strspn(visible, " ") : 0;
    if (visible && (visible[blanks] == '\0' || visible[blanks] == '-'))
      snprintf(text, len, "no CUDA device visible: CUDA_VISIBLE_DEVICES='%s' hides them all", visible);
    else
      snprintf(text, len, "no CUDA device visible");
    return 1;
  }
  return 0;
}

fcclResult_t fcclCudaCallError(cudaError_t error, const char* call, fcclSubsys_t subsys, const char* file, int line) {
  char text[256];
  if (fcclCudaNoDeviceText(error, text, sizeof(text)))
    return fcclSetError(fcclUnhandledCudaError, subsys, file, line, "%s (%s failed: %s)", text, call,
                        cudaGetErrorName(error));
  return fcclSetError(fcclUnhandledCudaError, subsys, file, line, "%s failed: %s (%s)", call, cudaGetErrorName(error),
                      cudaGetErrorString(error));
}
