/*
 * Kernel tables shared by the launcher: each algorithm's file instantiates its kernel for every (type, op) of
 * FCCL_DEVICE_TYPE_OP_LIST and returns the one asked for.
 */
#ifndef FCCL_DEVICE_KERNELS_CUH_
#define FCCL_DEVICE_KERNELS_CUH_

#include "device.h"

namespace fccl {

/* NULL for a (type, op) outside the list. */
const void* llKernel(fcclDataType_t type, fcclRedOp_t op);
const void* oneshotPushKernel(fcclDataType_t type, fcclRedOp_t op);
const void* oneshotPullKernel(fcclDataType_t type, fcclRedOp_t op);
const void* twoshotStagedKernel(fcclDataType_t type, fcclRedOp_t op);
const void* twoshotRegKernel(fcclDataType_t type, fcclRedOp_t op);
const void* ll128Kernel(fcclDataType_t type, fcclRedOp_t op);

}  // namespace fccl

/* Body of a table function: returns the instantiation of KERNEL for (type, op). */
#define FCCL_KERNEL_TABLE_ENTRY_(dt, op) \
  if (type == dt && redOp == op) return reinterpret_cast<const void*>(&FCCL_TABLE_KERNEL<dt, op>);
#define FCCL_KERNEL_TABLE(name)                                 \
  const void* name(fcclDataType_t type, fcclRedOp_t redOp) {   \
    FCCL_DEVICE_TYPE_OP_LIST(FCCL_KERNEL_TABLE_ENTRY_)          \
    return nullptr;                                             \
  }

#endif /* FCCL_DEVICE_KERNELS_CUH_ */
