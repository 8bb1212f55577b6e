/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA driver API, reached through cudaGetDriverEntryPointByVersion so that libfccl links only cudart and
 * loads on machines without libcuda. Call fcclCudaDriverLoad() once (it is idempotent and thread-safe) before
 * using any pfn_* pointer.
 */
#ifndef FCCL_CUDAWRAP_H_
#define FCCL_CUDAWRAP_H_

#include "debug.h"
#include "fccl.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <stddef.h>

/* Every driver function fccl uses: FCCL_CU_FN(name, return-type, parameter list). */
#define FCCL_CU_FUNCTIONS(X)                                                                                    \
  X(cuGetErrorString, CUresult, (CUresult error, const char** text))                                            \
  X(cuGetErrorName, CUresult, (CUresult error, const char** text))                                              \
  X(cuDriverGetVersion, CUresult, (int* version))                                                               \
  X(cuCtxGetCurrent, CUresult, (CUcontext * context))                                                           \
  X(cuDeviceGet, CUresult, (CUdevice* device, int ordinal))                                                     \
  X(cuDeviceGetAttribute, CUresult, (int* value, CUdevice_attribute attribute, CUdevice device))                \
  X(cuMemCreate, CUresult,                                                                                      \
    (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp* prop, unsigned long long flags)) \
  X(cuMemRelease, CUresult, (CUmemGenericAllocationHandle handle))                                              \
  X(cuMemMap, CUresult,                                                                                         \
    (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags)) \
  X(cuMemUnmap, CUresult, (CUdeviceptr ptr, size_t size))                                                       \
  X(cuMemSetAccess, CUresult, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count))        \
  X(cuMemAddressReserve, CUresult,                                                                              \
    (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags))             \
  X(cuMemAddressFree, CUresult, (CUdeviceptr ptr, size_t size))                                                 \
  X(cuMemGetAllocationGranularity, CUresult,                                                                    \
    (size_t * granularity, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags option))           \
  X(cuMemExportToShareableHandle, CUresult,                                                                     \
    (void* shareableHandle, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType handleType,          \
     unsigned long long flags))                                                                                 \
  X(cuMemImportFromShareableHandle, CUresult,                                                                   \
    (CUmemGenericAllocationHandle * handle, void* osHandle, CUmemAllocationHandleType shHandleType))            \
  X(cuMemRetainAllocationHandle, CUresult, (CUmemGenericAllocationHandle * handle, void* addr))                 \
  X(cuMemGetAllocationPropertiesFromHandle, CUresult,                                                           \
    (CUmemAllocationProp * prop, CUmemGenericAllocationHandle handle))                                          \
  X(cuPointerGetAttribute, CUresult, (void* data, CUpointer_attribute attribute, CUdeviceptr ptr))              \
  X(cuPointerGetAttributes, CUresult,                                                                           \
    (unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr))                        \
  X(cuMemGetAddressRange, CUresult, (CUdeviceptr * base, size_t* size, CUdeviceptr ptr))

#define FCCL_CU_DECLARE(name, ret, params) extern ret(CUDAAPI* pfn_##name) params;
FCCL_CU_FUNCTIONS(FCCL_CU_DECLARE)
#undef FCCL_CU_DECLARE

/* Resolves every driver entry point once. fcclUnhandledCudaError (with the missing symbol named) when the driver
 * is absent or too old. */
fcclResult_t fcclCudaDriverLoad(void);

/*
 * Driver calls. Like CUDACHECK: a failure is described once with the call and the driver's error name.
 */
#define CUCHECK(call)                                                                                           \
  do {                                                                                                          \
    CUresult fcclCuErr_ = pfn_##call;                                                                           \
    if (fcclCuErr_ != CUDA_SUCCESS) return fcclCuError(fcclCuErr_, #call, FCCL_LOG_SUBSYS, __FILE__, __LINE__); \
  } while (0)

#define CUCHECKGOTO(call, res, label)                                              \
  do {                                                                             \
    CUresult fcclCuErr_ = pfn_##call;                                              \
    if (fcclCuErr_ != CUDA_SUCCESS) {                                              \
      (res) = fcclCuError(fcclCuErr_, #call, FCCL_LOG_SUBSYS, __FILE__, __LINE__); \
      goto label;                                                                  \
    }                                                                              \
  } while (0)

/* Describes a failed driver call once (FCCL_ERROR's way) under subsys. */
fcclResult_t fcclCuError(CUresult error, const char* call, fcclSubsys_t subsys, const char* file, int line);

/*
 * Whether contexts on device cudaDev are shared through CUDA MPS (CU_DEVICE_ATTRIBUTE_MPS_ENABLED): *enabled 1 or
 * 0, and 0 where the driver does not know the attribute. Loads the driver's entry points.
 */
fcclResult_t fcclCudaDeviceMpsEnabled(int cudaDev, int* enabled);

/* Tests only: makes fcclCudaDeviceMpsEnabled answer value (0 or 1) for every device of this process, as a GPU under
 * an MPS server would, without starting one; -1 gives the device's own answer back. */
void fcclCudaFakeMpsForTest(int value);

/*
 * The first CUDA calls of an init (cudaGetDevice, cudaGetDeviceCount) on a machine without a usable driver or GPU.
 * There the runtime answers cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime
 * version", also when no driver is installed at all, which sends people to upgrade a driver they do not have; these
 * say "no NVIDIA driver found", "the NVIDIA driver supports CUDA 12.4, older than this CUDA runtime (13.0)" or "no
 * CUDA device visible" instead, as the tools do (tools/common/cuda_status.h).
 * fcclCudaNoDeviceText: 1 with the words in text for cudaErrorInsufficientDriver and cudaErrorNoDevice, else 0.
 * fcclCudaCallError: fcclUnhandledCudaError described under subsys, in those words for those errors, else as
 * CUDACHECK describes a failed call.
 */
int fcclCudaNoDeviceText(cudaError_t error, char* text, size_t len);
fcclResult_t fcclCudaCallError(cudaError_t error, const char* call, fcclSubsys_t subsys, const char* file, int line);
#define FCCL_CUDA_INIT_FAILED(error, call) fcclCudaCallError((error), (call), FCCL_LOG_SUBSYS, __FILE__, __LINE__)

#endif /* FCCL_CUDAWRAP_H_ */
