/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllReduceAddRMSNorm on one rank: the all-reduce of one rank is its input, so the call is the residual add and
 * the RMSNorm of the row kernel (fused_norm.cuh), with no peers, no flags and no staging, over as many blocks as stay
 * resident, each taking batch after batch of rows (core/coll/fused_norm.c). Its rows' bits are those of every other
 * form (docs/fused.md#batch-invariance).
 */
#include "fused_norm.cuh"
#include "kernels.cuh"

namespace fccl {

/* Touches no epoch: the call posts and awaits no flag, so no later call needs to tell its flags apart. */
template <int DT, bool FP8, bool VEC>
__global__ void __launch_bounds__(FCCL_FUSED_MAX_BLOCK_THREADS) fusedNormLocal(fcclDevComm c, fcclFusedArgs a) {
  using TT = TypeTraits<DT>;
  (void)c;
  gridDependencyEnter();
  fused::localRows<TT, FP8, VEC>(a, fcclFusedShapeOf(a.hidden * sizeof(typename TT::Bits)).rowThreads);
}

/* The one-rank kernel for (datatype, FP8 output or not, vector path); NULL for a type without one. */
const void* fusedNormLocalInstance(fcclDataType_t type, bool fp8, bool vec) {
#define FCCL_FUSED_ENTRY_(dt, f8)                                             \
  if (type == dt && fp8 == f8)                                                \
    return vec ? reinterpret_cast<const void*>(&fusedNormLocal<dt, f8, true>) \
               : reinterpret_cast<const void*>(&fusedNormLocal<dt, f8, false>);
#define FCCL_FUSED_FOR_OUT_(dt) FCCL_FUSED_ENTRY_(dt, false) FCCL_FUSED_ENTRY_(dt, true)
  FCCL_FUSED_FOR_OUT_(fcclFloat16)
  FCCL_FUSED_FOR_OUT_(fcclBfloat16)
  FCCL_FUSED_FOR_OUT_(fcclFloat32)
#undef FCCL_FUSED_FOR_OUT_
#undef FCCL_FUSED_ENTRY_
  return nullptr;
}

}  // namespace fccl
