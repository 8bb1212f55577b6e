/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernel tables shared by the launcher: each algorithm's file instantiates its kernel for every (type, op) of
 * FCCL_DEVICE_TYPE_OP_LIST and returns the one asked for.
 */
#ifndef FCCL_DEVICE_KERNELS_CUH_
#define FCCL_DEVICE_KERNELS_CUH_

#include "device.h"

namespace fccl {

/* NULL for a (type, op) outside the list. The pulling kernels come in one instantiation per rank bound
 * (fcclRankBound of the communicator's rank count). */
const void* llKernel(fcclDataType_t type, fcclRedOp_t op);
const void* oneshotPushKernel(fcclDataType_t type, fcclRedOp_t op, int rankBound);
const void* oneshotPullKernel(fcclDataType_t type, fcclRedOp_t op, int rankBound);
const void* twoshotStagedKernel(fcclDataType_t type, fcclRedOp_t op, int rankBound);
const void* twoshotRegKernel(fcclDataType_t type, fcclRedOp_t op, int rankBound);
const void* ll128Kernel(fcclDataType_t type, fcclRedOp_t op);
/* All-gather and broadcast move data: one instantiation per element size (1, 2, 4, 8) and form (kernel). */
const void* allGatherKernel(int kernel, int elemSize);
const void* broadcastKernel(int kernel, int elemSize);
const void* reduceScatterLLKernel(fcclDataType_t type, fcclRedOp_t op);
const void* reduceScatterDirectKernel(fcclDataType_t type, fcclRedOp_t op, int rankBound);
const void* reduceScatterStagedKernel(fcclDataType_t type, fcclRedOp_t op, int rankBound);
/* fcclAllReduceAddRMSNorm: the kernel of a call of input type `type` (fp16, bf16, fp32), FP8 output or the input's
 * type, on nranks ranks, in args.form (fused_norm.cu), its threads per block and the most blocks it takes (the
 * kernels with flags: one epoch counter per block); kernel NULL when there is none. */
struct FusedLaunch {
  const void* kernel;
  unsigned threads;
  int maxBlocks;
};
FusedLaunch fusedNormLaunch(fcclDataType_t type, bool fp8, int nranks, const fcclFusedArgs& args);
/* Its kernel of one rank (fused_norm_local.cu), its two-shot form and its previous one-shot kernel
 * (FCCL_FUSED_ONESHOT_LEGACY, kFusedLegacyThreads per block), per input type, FP8 output or not, rank bound and,
 * for the row kernel, vector path (fcclFusedVectorizable). */
const void* fusedNormLocalKernel(fcclDataType_t type, bool fp8, bool vec);
const void* fusedNormTwoshotKernel(fcclDataType_t type, bool fp8, int rankBound, bool vec);
const void* fusedNormLegacyKernel(fcclDataType_t type, bool fp8, int rankBound);
constexpr unsigned kFusedLegacyThreads = 512;

/*
 * The rank bound a pulling kernel is compiled for: the smallest of 2, 4 and 8 that holds nranks. Its register
 * arrays hold that many ranks. One kernel with all three bounds inlined spilled (twoshot_reg: 192 bytes of stack,
 * 1076 bytes of spill loads at 128 registers) where each bound alone does not.
 */
__host__ __device__ constexpr int fcclRankBound(int nranks) {
  return nranks <= 2 ? 2 : nranks <= 4 ? 4 : FCCL_DEVICE_MAX_RANKS;
}

}  // namespace fccl

/* Body of a table function: returns the instantiation of KERNEL for (type, op). */
#define FCCL_KERNEL_TABLE_ENTRY_(dt, op) \
  if (type == dt && redOp == op) return reinterpret_cast<const void*>(&FCCL_TABLE_KERNEL<dt, op>);
#define FCCL_KERNEL_TABLE(name)                                 \
  const void* name(fcclDataType_t type, fcclRedOp_t redOp) {   \
    FCCL_DEVICE_TYPE_OP_LIST(FCCL_KERNEL_TABLE_ENTRY_)          \
    return nullptr;                                             \
  }

/* The same for kernels templated on (type, op, rank bound). */
#define FCCL_RANKED_TABLE_ENTRY_(dt, op)                                                         \
  if (type == dt && redOp == op) {                                                               \
    if (rankBound == 2) return reinterpret_cast<const void*>(&FCCL_TABLE_KERNEL<dt, op, 2>);     \
    if (rankBound == 4) return reinterpret_cast<const void*>(&FCCL_TABLE_KERNEL<dt, op, 4>);     \
    if (rankBound == FCCL_DEVICE_MAX_RANKS)                                                      \
      return reinterpret_cast<const void*>(&FCCL_TABLE_KERNEL<dt, op, FCCL_DEVICE_MAX_RANKS>);   \
    return nullptr;                                                                              \
  }
#define FCCL_RANKED_KERNEL_TABLE(name)                                         \
  const void* name(fcclDataType_t type, fcclRedOp_t redOp, int rankBound) {   \
    FCCL_DEVICE_TYPE_OP_LIST(FCCL_RANKED_TABLE_ENTRY_)                         \
    return nullptr;                                                            \
  }

#endif /* FCCL_DEVICE_KERNELS_CUH_ */
