/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The launcher of the mixture-of-experts kernels (moe_dispatch.cu, moe_combine.cu): the device communicator and the
 * call's arguments by value, so that a captured graph replays them as they were; what changes from call to call
 * (epochs, the layout of the last dispatch) lives in device memory.
 */
#include "kernels.cuh"
#include "moe_device.h"

extern "C" {
#include "check.h"
}

namespace fccl {

const void* moeDispatchInstance();
const void* moeCombineInstance(fcclDataType_t type);

}  // namespace fccl

extern "C" fcclResult_t fcclDeviceLaunchMoe(fcclMoeOp_t op, fcclDataType_t datatype, const fcclDevComm* comm,
                                            const fcclMoeArgs* args, int blocks, int pdl, cudaStream_t stream) {
  if (comm == nullptr || args == nullptr)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "MoE launch without comm or args");
  if ((args->print & ((1u << FCCL_PRINT_FORM_BITS) - 1u)) == 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "MoE launch without the call's fingerprint");
  if (blocks < 1 || blocks > FCCL_DEVICE_MAX_BLOCKS)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "MoE grid %d outside [1, %d]", blocks,
                      FCCL_DEVICE_MAX_BLOCKS);
  const void* kernel = nullptr;
  if (op == FCCL_MOE_DISPATCH) {
    const int elemBytes = datatype == fcclFloat8e4m3 ? 1 : 2;
    if ((datatype == fcclBfloat16 || datatype == fcclFloat16 || datatype == fcclFloat8e4m3) &&
        args->elemBytes == elemBytes)
      kernel = fccl::moeDispatchInstance();
  } else if (op == FCCL_MOE_COMBINE && args->elemBytes == 2) {
    kernel = fccl::moeCombineInstance(datatype);
  }
  if (kernel == nullptr)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "no MoE %s kernel for type %d (%d-byte elements)",
                      op == FCCL_MOE_DISPATCH ? "dispatch" : "combine", (int)datatype, (int)args->elemBytes);
  fcclDevComm c = *comm;
  fcclMoeArgs a = *args;
  void* params[] = {&c, &a};
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((unsigned)blocks);
  config.blockDim = dim3(FCCL_MOE_THREADS);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = pdl ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelExC(&config, kernel, params);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_COLL,
                      "launching the MoE %s kernel (%d x %d%s) failed: %s (%s)",
                      op == FCCL_MOE_DISPATCH ? "dispatch" : "combine", blocks, FCCL_MOE_THREADS,
                      pdl ? ", programmatic dependent launch" : "", cudaGetErrorName(err), cudaGetErrorString(err));
  }
  return fcclSuccess;
}
