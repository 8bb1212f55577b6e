/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The launcher of the mixture-of-experts kernels (src/device/moe_launch.cu), as src/core/coll/moe.c calls it. The
 * kernels report under FCCL_KERNEL_MOE (kernel_list.h's OWN row); what they do: docs/moe.md.
 */
#ifndef FCCL_MOE_DEVICE_H_
#define FCCL_MOE_DEVICE_H_

#include "device_host.h"
#include "fccl.h"
#include "moe_shape.h"

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a launch runs: the dispatch or the combine. */
typedef enum { FCCL_MOE_DISPATCH = 0, FCCL_MOE_COMBINE = 1 } fcclMoeOp_t;

/*
 * Launches the dispatch (datatype fcclBfloat16, fcclFloat16 or fcclFloat8e4m3: args->elemBytes must match) or the
 * combine (fcclBfloat16 or fcclFloat16) with `blocks` blocks of FCCL_MOE_THREADS on stream; pdl as
 * fcclDeviceLaunch. Every block must be resident at once (blocks at most the SM count: the caller's check).
 * fcclInvalidArgument for another type, blocks outside [1, FCCL_DEVICE_MAX_BLOCKS] or args without a print;
 * fcclUnhandledCudaError when the launch fails.
 */
fcclResult_t fcclDeviceLaunchMoe(fcclMoeOp_t op, fcclDataType_t datatype, const fcclDevComm* comm,
                                 const fcclMoeArgs* args, int blocks, int pdl, cudaStream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FCCL_MOE_DEVICE_H_ */
