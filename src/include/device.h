/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The device layer as the rest of the library sees it: the (type, op) pairs the kernels are built for and the
 * extern "C" launcher of src/device/. Everything a kernel reads comes in plain structs (device_host.h).
 * docs/collectives.md describes the algorithms, the slot layout, epochs and memory ordering.
 */
#ifndef FCCL_DEVICE_H_
#define FCCL_DEVICE_H_

#include "datatype.h" /* fcclTypeSize, which the launcher and its callers use */
#include "device_host.h"
#include "fccl.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The pre-multiplied sum as the kernels know it, one past the built-in ops: an op of fcclRedOpCreatePreMulSum is
 * resolved to it by the enqueue path, its scalar carried by fcclDevArgs (scalar, scalarPtr). Each rank's element is
 * multiplied by the scalar in the accumulator's type, then summed as fcclSum sums (src/device/reduce.cuh).
 */
#define FCCL_DEVICE_OP_PREMULSUM ((fcclRedOp_t)fcclNumOps)

/*
 * Every (data type, reduction op) the kernels are instantiated for: the one list. X(type, op) is expanded once per
 * pair; the table functions of src/device and the tests iterate it.
 */
#define FCCL_DEVICE_FOR_TYPES_(X, op) \
  X(fcclInt8, op)                     \
  X(fcclUint8, op)                    \
  X(fcclInt32, op)                    \
  X(fcclUint32, op)                   \
  X(fcclInt64, op)                    \
  X(fcclUint64, op)                   \
  X(fcclFloat16, op)                  \
  X(fcclFloat32, op)                  \
  X(fcclFloat64, op)                  \
  X(fcclBfloat16, op)
#define FCCL_DEVICE_TYPE_OP_LIST(X)   \
  FCCL_DEVICE_FOR_TYPES_(X, fcclSum)  \
  FCCL_DEVICE_FOR_TYPES_(X, fcclProd) \
  FCCL_DEVICE_FOR_TYPES_(X, fcclMax)  \
  FCCL_DEVICE_FOR_TYPES_(X, fcclMin)  \
  FCCL_DEVICE_FOR_TYPES_(X, fcclAvg)  \
  FCCL_DEVICE_FOR_TYPES_(X, FCCL_DEVICE_OP_PREMULSUM)

/*
 * Launches kernel (an algorithm of fcclDevKernel_t, or FCCL_KERNEL_BARRIER, which takes no type or op) for
 * (type, op) with blocks x threads on stream (the current device must be comm's); pdl != 0 adds programmatic
 * dependent launch (FCCL_PDL; compute capability >= 9.0). args->print must be the call's fingerprint (fcclPrintMake);
 * the barrier takes args NULL (fcclBarrier: FCCL_PRINT_BARRIER) or the arguments of the call it opens, whose print
 * it carries. fcclInvalidArgument for an unknown kernel/type/op, a grid outside [1, FCCL_DEVICE_MAX_BLOCKS] x
 * [32, FCCL_DEVICE_THREADS] or args without a print; fcclUnhandledCudaError when the launch fails.
 */
fcclResult_t fcclDeviceLaunch(fcclDevKernel_t kernel, fcclDataType_t type, fcclRedOp_t op, const fcclDevComm* comm,
                              const fcclDevArgs* args, int blocks, int threads, int pdl, cudaStream_t stream);

/*
 * Launches the fused all-reduce + add + RMSNorm for datatype (fp16, bf16, fp32) and outtype (datatype or
 * fcclFloat8e4m3) in the form args->form (FCCL_FUSED_ONESHOT, FCCL_FUSED_TWOSHOT, FCCL_FUSED_ONESHOT_LEGACY) with
 * `blocks` blocks of the row's shape (fused_norm_shape.h) on stream; args->print as for fcclDeviceLaunch.
 * fcclInvalidArgument for a type pair or form without a kernel, a grid outside [1, FCCL_DEVICE_MAX_BLOCKS] (any
 * size for the one-shot form of one rank, which has no flags) or args without a print; fcclUnhandledCudaError when
 * the launch fails.
 */
fcclResult_t fcclDeviceLaunchFusedNorm(fcclDataType_t datatype, fcclDataType_t outtype, const fcclDevComm* comm,
                                       const fcclFusedArgs* args, int blocks, int pdl, cudaStream_t stream);

/* The division kernel's grid: FCCL_DIVIDE_THREADS per block, at most FCCL_DIVIDE_MAX_BLOCKS blocks (a grid-stride
 * loop covers larger counts). */
#define FCCL_DIVIDE_THREADS 256
#define FCCL_DIVIDE_MAX_BLOCKS 256

/*
 * Divides count elements of type at data (device memory of the current device) by divisor in place on stream, as
 * the avg of fccl's kernels divides its sum once (src/device/reduce.cuh): the average of a sum that was made in
 * parts (the hierarchical all-reduce). fcclInvalidArgument for a type outside the list or divisor < 1;
 * fcclUnhandledCudaError when the launch fails.
 */
fcclResult_t fcclDeviceLaunchDivide(fcclDataType_t type, void* data, size_t count, int divisor, cudaStream_t stream);

/* Whether the current device can load this build's kernels (the barrier's, as a probe): fcclInvalidUsage saying
 * so when the build has no code for it. */
fcclResult_t fcclDeviceKernelsLoadable(void);

/* Test hook: the kernel (an fcclDevKernel_t) and grid of the calling thread's last successful launch through
 * fcclDeviceLaunch or fcclDeviceLaunchFusedNorm; kernel -1 and a grid of 0 x 0 before the first. The SM budget's
 * tests read the grid a call really launched with it. */
void fcclDeviceLastLaunchForTest(int* kernel, int* blocks, int* threads);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FCCL_DEVICE_H_ */
