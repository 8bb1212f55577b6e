/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The instantiation tables of the kernels, shared by their files and the launcher. Each KERNEL row of
 * FCCL_KERNEL_LIST (kernel_list.h) names a __global__ template; its file instantiates it with one of the table
 * macros below, which define <kernel>Instance(type, op, rankBound): the instantiation for the call, NULL for one
 * outside the lists. launch.cu's table calls them by kernel id.
 */
#ifndef FCCL_DEVICE_KERNELS_CUH_
#define FCCL_DEVICE_KERNELS_CUH_

#include "device.h"

#include <type_traits>

namespace fccl {

/* <kernel>Instance of every KERNEL row. The pulling kernels come in one instantiation per rank bound
 * (fcclRankBound of the communicator's rank count); the others ignore it. */
#define FCCL_DECLARE_INSTANCE_(id, request, name, kernel) \
  const void* kernel##Instance(fcclDataType_t type, fcclRedOp_t op, int rankBound);
FCCL_KERNEL_LIST(FCCL_DECLARE_INSTANCE_, FCCL_LIST_SKIP3_, FCCL_LIST_SKIP2_)
#undef FCCL_DECLARE_INSTANCE_

/* The kernels with launchers of their own (OWN rows). The barrier (barrier.cu) takes the device communicator and a
 * print. fcclAllReduceAddRMSNorm (FCCL_KERNEL_FUSED_NORM) has four kernels, chosen by launch.cu from the call's form
 * and rank count: one-shot (fused_norm_oneshot.cu), one rank (fused_norm_local.cu), two-shot
 * (fused_norm_twoshot.cu), each per input type (fp16, bf16, fp32), FP8 output or the input's type, rank bound and
 * vector path (fcclFusedVectorizable); and the one-shot kernel as it ran before the row kernel
 * (fused_norm_legacy.cu, FCCL_FUSED_ONESHOT_LEGACY, kFusedLegacyThreads per block), kept to be measured against. */
const void* barrierInstance();
const void* fusedNormInstance(fcclDataType_t type, bool fp8, int rankBound, bool vec);
const void* fusedNormLocalInstance(fcclDataType_t type, bool fp8, bool vec);
const void* fusedNormTwoshotInstance(fcclDataType_t type, bool fp8, int rankBound, bool vec);
const void* fusedNormLegacyInstance(fcclDataType_t type, bool fp8, int rankBound);
constexpr unsigned kFusedLegacyThreads = 512;

/*
 * The rank bound a pulling kernel is compiled for: the smallest of 2, 4 and 8 that holds nranks. Its register
 * arrays hold that many ranks. One kernel with all three bounds inlined spilled (twoshot_reg: 192 bytes of stack,
 * 1076 bytes of spill loads at 128 registers) where each bound alone does not.
 */
__host__ __device__ constexpr int fcclRankBound(int nranks) {
  return nranks <= 2 ? 2 : nranks <= 4 ? 4 : FCCL_DEVICE_MAX_RANKS;
}

/* The compile-time value behind a table's runtime choice: make(IntC<v>...) instantiates the kernel for v. */
template <int V>
using IntC = std::integral_constant<int, V>;

/* make(IntC<type>, IntC<op>) for the pair of FCCL_DEVICE_TYPE_OP_LIST asked for; NULL for another. */
template <class Make>
const void* typeOpInstance(fcclDataType_t type, fcclRedOp_t op, Make make) {
#define FCCL_TYPE_OP_CASE_(dt, o) \
  if (type == dt && op == o) return make(IntC<dt>(), IntC<o>());
  FCCL_DEVICE_TYPE_OP_LIST(FCCL_TYPE_OP_CASE_)
#undef FCCL_TYPE_OP_CASE_
  return nullptr;
}

/* make(IntC<bound>) for a rank bound of fcclRankBound; NULL for another. */
template <class Make>
const void* rankBoundInstance(int rankBound, Make make) {
  if (rankBound == 2) return make(IntC<2>());
  if (rankBound == 4) return make(IntC<4>());
  if (rankBound == FCCL_DEVICE_MAX_RANKS) return make(IntC<FCCL_DEVICE_MAX_RANKS>());
  return nullptr;
}

/* make(IntC<bytes>) for type's element size (1, 2, 4 or 8 bytes); NULL for another. */
template <class Make>
const void* elemSizeInstance(fcclDataType_t type, Make make) {
  switch (fcclTypeSize(type)) {
    case 1: return make(IntC<1>());
    case 2: return make(IntC<2>());
    case 4: return make(IntC<4>());
    case 8: return make(IntC<8>());
    default: return nullptr;
  }
}

}  // namespace fccl

/* kernel##Instance for a kernel templated on (type, op): one instantiation per pair of FCCL_DEVICE_TYPE_OP_LIST. */
#define FCCL_KERNEL_TABLE(kernel)                                                             \
  const void* kernel##Instance(fcclDataType_t type, fcclRedOp_t op, int) {                    \
    return typeOpInstance(type, op, [](auto dt, auto o) {                                     \
      return reinterpret_cast<const void*>(&kernel<decltype(dt)::value, decltype(o)::value>); \
    });                                                                                       \
  }

/* The same for kernels templated on (type, op, rank bound): three instantiations per pair. */
#define FCCL_RANKED_KERNEL_TABLE(kernel)                                                                             \
  const void* kernel##Instance(fcclDataType_t type, fcclRedOp_t op, int rankBound) {                                 \
    return typeOpInstance(type, op, [rankBound](auto dt, auto o) {                                                   \
      return rankBoundInstance(rankBound, [](auto nr) {                                                              \
        return reinterpret_cast<const void*>(&kernel<decltype(dt)::value, decltype(o)::value, decltype(nr)::value>); \
      });                                                                                                            \
    });                                                                                                              \
  }

/* The same for kernels that move data without reducing it, templated on the element size only (1, 2, 4, 8). */
#define FCCL_SIZED_KERNEL_TABLE(kernel)                                                                           \
  const void* kernel##Instance(fcclDataType_t type, fcclRedOp_t, int) {                                           \
    return elemSizeInstance(type,                                                                                 \
                            [](auto es) { return reinterpret_cast<const void*>(&kernel<decltype(es)::value>); }); \
  }

#endif /* FCCL_DEVICE_KERNELS_CUH_ */
