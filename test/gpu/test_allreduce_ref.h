/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host reference for the all-reduce tests (no CUDA): reproducible inputs, the reduction as the device defines it
 * (emulated bit for bit: rank order 0..n-1, fp16/bf16 accumulated in fp32, integers wrapping, NaN-propagating
 * max/min, avg = sum / n), a float64 reference with the dtype's tolerance, and the element check that accepts a
 * result equal to the emulation or within tolerance of the float64 value.
 *
 * Inputs are a pure function of (seed, call, rank, index): every rank computes every other rank's input locally,
 * so the reference needs no data exchange, and a 64 Mi-element check needs no more memory than the output.
 */
#ifndef FCCL_TEST_ALLREDUCE_REF_H_
#define FCCL_TEST_ALLREDUCE_REF_H_

#include "device.h" /* fcclTypeSize */
#include "fccl.h"

#include <stddef.h>
#include <stdint.h>

/* The most ranks a test forks: fccl's kernels take 8, the NCCL path more (test_nccl_path's "many"). */
#define REF_MAX_RANKS 16

/* Names for messages. */
const char* refTypeName(fcclDataType_t type);
const char* refOpName(fcclRedOp_t op);
int refTypeIsFloat(fcclDataType_t type);

/* IEEE binary16 and bfloat16 <-> binary32, round to nearest even, subnormals, overflow to Inf, NaN kept NaN. */
float refHalfToFloat(uint16_t bits);
uint16_t refFloatToHalf(float value);
float refBf16ToFloat(uint16_t bits);
uint16_t refFloatToBf16(float value);

/* The kinds of float inputs generated (for the generator's own tests). */
typedef enum { REF_NORMAL, REF_NEG_ZERO, REF_SUBNORMAL, REF_LARGE, REF_INF, REF_NAN, REF_KINDS } refKind_t;

/* Bits (zero-extended) of element index of rank's input in call `call`. Never +0; floats include -0.0,
 * subnormals, large magnitudes, Inf and NaN (rarely); *kind (may be NULL) says which. */
uint64_t refInputBits(fcclDataType_t type, uint64_t seed, uint64_t call, int rank, uint64_t index, refKind_t* kind);

/* Fills count elements of rank's input, starting at element `first` of the logical buffer. */
void refFillInput(fcclDataType_t type, uint64_t seed, uint64_t call, int rank, uint64_t first, void* out,
                  size_t count);

/* The device's result for one element, emulated bit for bit (inputs[r]: rank r's bits). */
uint64_t refReduceBits(fcclDataType_t type, fcclRedOp_t op, const uint64_t* inputs, int nranks);

/* The float64 result of one element and the absolute error the dtype's arithmetic may add to it. */
double refReduceDouble(fcclDataType_t type, fcclRedOp_t op, const uint64_t* inputs, int nranks, double* tolerance);

/* Whether got is an acceptable result for these inputs (equal to the emulation, NaN for NaN, or within the float64
 * reference's tolerance). */
int refCheckElement(fcclDataType_t type, fcclRedOp_t op, uint64_t got, const uint64_t* inputs, int nranks);

/* A pre-multiplied sum (fcclRedOpCreatePreMulSum) of one element as the device computes it (src/device/reduce.cuh):
 * each rank's input times scalar (the bits of an element of type) in the accumulator's type (fp32 for 16-bit
 * floats, where the product is exact; integers wrapping), never fused with the sum that follows in rank order. */
uint64_t refPreMulSumBits(fcclDataType_t type, uint64_t scalar, const uint64_t* inputs, int nranks);

/* Its float64 value, and the absolute error the dtype's arithmetic may add to it. */
double refPreMulSumDouble(fcclDataType_t type, uint64_t scalar, const uint64_t* inputs, int nranks, double* tolerance);

/* Whether got is an acceptable pre-multiplied sum (the emulation, NaN for NaN, or within the float64 value's
 * tolerance). */
int refCheckPreMulSum(fcclDataType_t type, uint64_t scalar, uint64_t got, const uint64_t* inputs, int nranks);

/* Element value as text ("1.5 (0x3e00)"), for messages. */
const char* refFormat(fcclDataType_t type, uint64_t bits, char* buf, size_t size);

/* Checks count elements of got (the output of call `call` over nranks ranks): returns the number of bad elements;
 * the first few are described in message (may be NULL). */
size_t refCheckBuffer(fcclDataType_t type, fcclRedOp_t op, uint64_t seed, uint64_t call, int nranks,
                      const void* got, size_t count, char* message, size_t messageSize);

/* Reads element i of a buffer of type as zero-extended bits. */
uint64_t refLoadBits(fcclDataType_t type, const void* buffer, size_t i);

/* 64-bit FNV-1a of bytes, to compare outputs across ranks. */
uint64_t refHash(const void* data, size_t bytes);

#endif /* FCCL_TEST_ALLREDUCE_REF_H_ */
