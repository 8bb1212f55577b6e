/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Data types and reduction operations. Every (type, op) pair comes from the one list in device.h
 * (FCCL_DEVICE_TYPE_OP_LIST); kernels are templates over TypeTraits<type> and OpTraits<op>.
 *
 * Values travel as raw bits (Bits) and are reduced in an accumulator type (Acc): fp16 and bf16 accumulate in fp32,
 * integers in their own width with wrap-around arithmetic (done on the unsigned type: no undefined overflow).
 * Every rank reduces in rank order 0..n-1 with the same code, so results are bitwise identical on every rank.
 * Float max/min propagate NaN; avg is sum then one division by nranks (integers: of the wrapped sum, truncating
 * toward zero). The pre-multiplied sum (FCCL_DEVICE_OP_PREMULSUM) multiplies every rank's element, its own included,
 * by the call's scalar as it enters the reduction: in the accumulator's type (fp32 for 16-bit floats, where the
 * product of two of their values is exact; float32 and float64 rounded to nearest; integers wrapping), never fused
 * with the addition that follows, then sums as fcclSum does. test/gpu/test_allreduce_ref.c mirrors these rules on
 * the host.
 */
#ifndef FCCL_DEVICE_REDUCE_CUH_
#define FCCL_DEVICE_REDUCE_CUH_

#include "device.h"
#include "fccl.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace fccl {

template <int DT>
struct TypeTraits;

/* Integers: the type itself is the accumulator; U is the unsigned type of the same width for + and *. */
template <typename T, typename U>
struct IntTraits {
  using Bits = U;
  using Acc = T;
  using UAcc = U;
  static constexpr bool isFloat = false;
  __device__ __forceinline__ static Acc toAcc(Bits b) { return (Acc)b; }
  __device__ __forceinline__ static Bits fromAcc(Acc a) { return (Bits)a; }
};

template <>
struct TypeTraits<fcclInt8> : IntTraits<int8_t, uint8_t> {};
template <>
struct TypeTraits<fcclUint8> : IntTraits<uint8_t, uint8_t> {};
template <>
struct TypeTraits<fcclInt32> : IntTraits<int32_t, uint32_t> {};
template <>
struct TypeTraits<fcclUint32> : IntTraits<uint32_t, uint32_t> {};
template <>
struct TypeTraits<fcclInt64> : IntTraits<int64_t, uint64_t> {};
template <>
struct TypeTraits<fcclUint64> : IntTraits<uint64_t, uint64_t> {};

template <>
struct TypeTraits<fcclFloat16> {
  using Bits = uint16_t;
  using Acc = float;
  static constexpr bool isFloat = true;
  __device__ __forceinline__ static Acc toAcc(Bits b) { return __half2float(__ushort_as_half(b)); }
  __device__ __forceinline__ static Bits fromAcc(Acc a) { return __half_as_ushort(__float2half_rn(a)); }
};

template <>
struct TypeTraits<fcclBfloat16> {
  using Bits = uint16_t;
  using Acc = float;
  static constexpr bool isFloat = true;
  __device__ __forceinline__ static Acc toAcc(Bits b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
  __device__ __forceinline__ static Bits fromAcc(Acc a) { return __bfloat16_as_ushort(__float2bfloat16_rn(a)); }
};

template <>
struct TypeTraits<fcclFloat32> {
  using Bits = uint32_t;
  using Acc = float;
  static constexpr bool isFloat = true;
  __device__ __forceinline__ static Acc toAcc(Bits b) { return __uint_as_float(b); }
  __device__ __forceinline__ static Bits fromAcc(Acc a) { return __float_as_uint(a); }
};

template <>
struct TypeTraits<fcclFloat64> {
  using Bits = uint64_t;
  using Acc = double;
  static constexpr bool isFloat = true;
  __device__ __forceinline__ static Acc toAcc(Bits b) { return __longlong_as_double((long long)b); }
  __device__ __forceinline__ static Bits fromAcc(Acc a) { return (Bits)__double_as_longlong(a); }
};

/* Arithmetic that is exact in IEEE round-to-nearest and never contracted into an FMA. */
__device__ __forceinline__ float addRn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double addRn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float mulRn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mulRn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float divRn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double divRn(double a, double b) { return __ddiv_rn(a, b); }

template <int OP>
struct OpTraits;

template <>
struct OpTraits<fcclSum> {
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc apply(typename TT::Acc a, typename TT::Acc b) {
    if constexpr (TT::isFloat)
      return addRn(a, b);
    else
      return (typename TT::Acc)((typename TT::UAcc)a + (typename TT::UAcc)b);
  }
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc finish(typename TT::Acc a, int) {
    return a;
  }
};

template <>
struct OpTraits<fcclProd> {
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc apply(typename TT::Acc a, typename TT::Acc b) {
    if constexpr (TT::isFloat)
      return mulRn(a, b);
    else
      return (typename TT::Acc)((typename TT::UAcc)a * (typename TT::UAcc)b);
  }
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc finish(typename TT::Acc a, int) {
    return a;
  }
};

/* max(a, b): a NaN operand wins (the first one in rank order); equal values (+0 and -0) give b. */
template <>
struct OpTraits<fcclMax> {
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc apply(typename TT::Acc a, typename TT::Acc b) {
    if constexpr (TT::isFloat) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a > b ? a : b;
  }
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc finish(typename TT::Acc a, int) {
    return a;
  }
};

template <>
struct OpTraits<fcclMin> {
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc apply(typename TT::Acc a, typename TT::Acc b) {
    if constexpr (TT::isFloat) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? a : b;
  }
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc finish(typename TT::Acc a, int) {
    return a;
  }
};

template <>
struct OpTraits<fcclAvg> {
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc apply(typename TT::Acc a, typename TT::Acc b) {
    return OpTraits<fcclSum>::apply<TT>(a, b);
  }
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc finish(typename TT::Acc a, int n) {
    if constexpr (TT::isFloat)
      return divRn(a, (typename TT::Acc)n);
    else
      return (typename TT::Acc)(a / (typename TT::Acc)n);
  }
};

/* The pre-multiplied sum: the sum's rules after each input is multiplied by the scalar (pre). */
template <>
struct OpTraits<FCCL_DEVICE_OP_PREMULSUM> {
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc apply(typename TT::Acc a, typename TT::Acc b) {
    return OpTraits<fcclSum>::apply<TT>(a, b);
  }
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc finish(typename TT::Acc a, int) {
    return a;
  }
  template <class TT>
  __device__ __forceinline__ static typename TT::Acc pre(typename TT::Acc x, typename TT::Acc scalar) {
    if constexpr (TT::isFloat)
      return mulRn(x, scalar);
    else
      return (typename TT::Acc)((typename TT::UAcc)x * (typename TT::UAcc)scalar);
  }
};

/* Whether an op multiplies its inputs first (OpTraits<FCCL_DEVICE_OP_PREMULSUM>). */
template <class OT>
struct OpPreMul {
  static constexpr bool value = false;
};
template <>
struct OpPreMul<OpTraits<FCCL_DEVICE_OP_PREMULSUM>> {
  static constexpr bool value = true;
};

/* The block's pre-multiplied sum scalar, as the bits of the call's datatype (epochBeginOp of common.cuh writes it
 * before the __syncthreads of the epoch; the pre-multiplying kernels only read it). */
static __shared__ uint64_t fcclBlockScalar;

/* BYTES bytes of data seen as 8-byte words (to move) or as elements (to reduce). */
template <typename Bits, int BYTES>
union UnitBits {
  uint64_t words[BYTES / 8];
  Bits e[BYTES / sizeof(Bits)];
};

/*
 * Reduces BYTES-byte units (16: vector paths, 8: LL packets) element by element, in the order the values are
 * added (rank 0 first). The unit is raw bits; the accumulators live in registers (indices are compile-time).
 */
template <class TT, class OT, int BYTES>
struct UnitReducer {
  using Bits = typename TT::Bits;
  using Acc = typename TT::Acc;
  static constexpr int kElems = BYTES / (int)sizeof(Bits);
  static_assert(BYTES % sizeof(Bits) == 0, "unit holds whole elements");
  Acc acc[kElems];
  Acc scalar; /* the pre-multiplied sum's (OpPreMul); unused by the other ops */

  using Unit = UnitBits<Bits, BYTES>;

  __device__ __forceinline__ UnitReducer() {
    if constexpr (OpPreMul<OT>::value) scalar = TT::toAcc((Bits)fcclBlockScalar);
  }
  /* An input element as it enters the reduction: multiplied by the scalar first for the pre-multiplied sum. */
  __device__ __forceinline__ Acc input(Bits b) const {
    if constexpr (OpPreMul<OT>::value)
      return OT::template pre<TT>(TT::toAcc(b), scalar);
    else
      return TT::toAcc(b);
  }
  __device__ __forceinline__ void first(const Unit& u) {
#pragma unroll
    for (int i = 0; i < kElems; i++) acc[i] = input(u.e[i]);
  }
  __device__ __forceinline__ void add(const Unit& u) {
#pragma unroll
    for (int i = 0; i < kElems; i++) acc[i] = OT::template apply<TT>(acc[i], input(u.e[i]));
  }
  __device__ __forceinline__ void result(Unit& u, int nranks) const {
#pragma unroll
    for (int i = 0; i < kElems; i++) u.e[i] = TT::fromAcc(OT::template finish<TT>(acc[i], nranks));
  }
};

}  // namespace fccl

#endif /* FCCL_DEVICE_REDUCE_CUH_ */
