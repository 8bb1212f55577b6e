/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Input data and result checking on host buffers. Every input element is a small integer chosen from the element
 * index, the rank and a seed, so that the exact result of sum, prod, max and min is representable in every type
 * (8-bit integers wrap, identically on host and device) and can be compared bit for bit, whatever order the
 * device adds in. avg divides, so it is compared within a few units in the last place (integers within one).
 * What a rank's result should hold comes from the collective's result function: runs of the reduction or of one
 * rank's input, each compared against one period of it.
 */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PERIOD BENCH_PATTERN_PERIOD

uint16_t benchFloatToHalf(float value) {
  uint32_t x;
  memcpy(&x, &value, sizeof(x));
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exponent = (x >> 23) & 0xffu;
  uint32_t mantissa = x & 0x7fffffu;
  if (exponent == 0xffu) return (uint16_t)(sign | 0x7c00u | (mantissa ? 0x200u : 0));
  int e = (int)exponent - 127 + 15;
  if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    mantissa |= 0x800000u;
    int shift = 14 - e;
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)e << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1))) half++; /* a carry rounds into the next binade: right */
  return (uint16_t)half;
}

float benchHalfToFloat(uint16_t bits) {
  uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t x;
  float value;
  if (exponent == 0) {
    value = (float)mantissa * 0x1p-24f;
    memcpy(&x, &value, sizeof(x));
    x |= sign;
  } else if (exponent == 0x1f) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else {
    x = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  memcpy(&value, &x, sizeof(value));
  return value;
}

uint16_t benchFloatToBf16(float value) {
  uint32_t x;
  memcpy(&x, &value, sizeof(x));
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

float benchBf16ToFloat(uint16_t bits) {
  uint32_t x = (uint32_t)bits << 16;
  float value;
  memcpy(&value, &x, sizeof(value));
  return value;
}

double benchLoadAsDouble(const void* data, size_t index, int type) {
  const unsigned char* p = (const unsigned char*)data + index * benchTypeSize(type);
  switch (type) {
    case benchInt8: { int8_t v; memcpy(&v, p, 1); return v; }
    case benchUint8: { uint8_t v; memcpy(&v, p, 1); return v; }
    case benchInt32: { int32_t v; memcpy(&v, p, 4); return v; }
    case benchUint32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case benchInt64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case benchUint64: { uint64_t v; memcpy(&v, p, 8); return (double)v; }
    case benchFloat16: { uint16_t v; memcpy(&v, p, 2); return benchHalfToFloat(v); }
    case benchFloat32: { float v; memcpy(&v, p, 4); return v; }
    case benchFloat64: { double v; memcpy(&v, p, 8); return v; }
    case benchBfloat16: { uint16_t v; memcpy(&v, p, 2); return benchBf16ToFloat(v); }
    default: return NAN;
  }
}

static int isUnsigned(int type) { return type == benchUint8 || type == benchUint32 || type == benchUint64; }
static int isFloat(int type) {
  return type == benchFloat16 || type == benchFloat32 || type == benchFloat64 || type == benchBfloat16;
}

/* Position of element `index` in the repeating pattern. */
static size_t phaseOf(size_t index, uint64_t seed) { return (size_t)(((uint64_t)index + seed * 131u) % PERIOD); }

/* Rank's input at a pattern position: an integer small enough that every op's exact result fits every type. */
static int64_t inputValue(int op, int type, int rank, int nranks, uint64_t seed, size_t phase) {
  uint64_t h = (uint64_t)phase * 37u + (uint64_t)rank * 11u + seed * 7u;
  if (op == benchProd) {
    int allowTwo = nranks <= 12; /* 2^12 still fits half's range */
    int pick = (int)(h % 8);
    if (pick == 0 && allowTwo) return 2;
    if (isUnsigned(type)) return 1;
    return (pick & 1) ? -1 : 1;
  }
  int64_t limit = nranks <= 64 ? 4 : 1;
  int64_t value = (int64_t)(h % (uint64_t)(2 * limit + 1)) - limit;
  return isUnsigned(type) ? value + limit : value;
}

/* Stores an integer (two's complement, wrapped to the type's width) or a floating value in type's encoding. */
static void encode(int type, uint64_t integerBits, double floating, unsigned char* dst) {
  switch (type) {
    case benchInt8:
    case benchUint8: { uint8_t v = (uint8_t)integerBits; memcpy(dst, &v, 1); break; }
    case benchInt32:
    case benchUint32: { uint32_t v = (uint32_t)integerBits; memcpy(dst, &v, 4); break; }
    case benchInt64:
    case benchUint64: memcpy(dst, &integerBits, 8); break;
    case benchFloat16: { uint16_t v = benchFloatToHalf((float)floating); memcpy(dst, &v, 2); break; }
    case benchFloat32: { float v = (float)floating; memcpy(dst, &v, 4); break; }
    case benchFloat64: memcpy(dst, &floating, 8); break;
    case benchBfloat16: { uint16_t v = benchFloatToBf16((float)floating); memcpy(dst, &v, 2); break; }
    default: break;
  }
}

void benchFillInput(void* dst, size_t count, size_t first, int type, int op, int rank, int nranks, uint64_t seed) {
  size_t size = benchTypeSize(type);
  unsigned char period[PERIOD * 8];
  if (size == 0) return;
  for (size_t phase = 0; phase < PERIOD; phase++) {
    int64_t value = inputValue(op, type, rank, nranks, seed, phase);
    encode(type, (uint64_t)value, (double)value, period + phase * size);
  }
  unsigned char* out = (unsigned char*)dst;
  for (size_t i = 0; i < count;) {
    size_t phase = phaseOf(first + i, seed);
    size_t n = PERIOD - phase < count - i ? PERIOD - phase : count - i;
    memcpy(out + i * size, period + phase * size, n * size);
    i += n;
  }
}

/* ---- what each collective's result holds ----------------------------------------------------------------------- */

benchSpan_t benchAllReduceResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)count;
  (void)rank;
  (void)nranks;
  (void)root;
  return (benchSpan_t){BENCH_SOURCE_REDUCED, index, SIZE_MAX};
}

/* Rank q's block sits at q x count: runs of one rank's input, from the element's place in its block to its end. */
benchSpan_t benchAllGatherResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)rank;
  (void)nranks;
  (void)root;
  if (count == 0) return (benchSpan_t){0, index, 1}; /* no elements: never asked */
  return (benchSpan_t){(int)(index / count), index % count, count - index % count};
}

/* Rank r holds block r of the reduction: input elements from r x count on. */
benchSpan_t benchReduceScatterResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)nranks;
  (void)root;
  return (benchSpan_t){BENCH_SOURCE_REDUCED, (size_t)rank * count + index, SIZE_MAX};
}

/* Every rank holds root's input. */
benchSpan_t benchBroadcastResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)count;
  (void)rank;
  (void)nranks;
  return (benchSpan_t){root, index, SIZE_MAX};
}

/* The previous rank's input (nccl-tests' ring: every rank sends to the next). */
benchSpan_t benchSendRecvResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)count;
  (void)root;
  return (benchSpan_t){(rank + nranks - 1) % nranks, index, SIZE_MAX};
}

/* Block p comes from rank p's block for this rank: runs of one block. */
benchSpan_t benchAllToAllResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)nranks;
  (void)root;
  if (count == 0) return (benchSpan_t){0, index, 1}; /* no elements: never asked */
  return (benchSpan_t){(int)(index / count), (size_t)rank * count + index % count, count - index % count};
}

benchSpan_t benchReduceResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)count;
  (void)nranks;
  return (benchSpan_t){rank == root ? BENCH_SOURCE_REDUCED : BENCH_SOURCE_UNCHECKED, index, SIZE_MAX};
}

benchSpan_t benchGatherResult(size_t index, size_t count, int rank, int nranks, int root) {
  if (rank != root) return (benchSpan_t){BENCH_SOURCE_UNCHECKED, index, SIZE_MAX};
  return benchAllGatherResult(index, count, rank, nranks, root);
}

benchSpan_t benchScatterResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)nranks;
  return (benchSpan_t){root, (size_t)rank * count + index, SIZE_MAX};
}

size_t benchVariableCount(size_t count, int rank, int nranks) {
  return nranks > 0 ? count * (size_t)(2 * rank + 1) / (size_t)nranks : 0;
}

size_t benchVariableRoom(size_t count, int nranks) {
  if (nranks <= 0) return 0;
  const size_t n = (size_t)nranks;
  return count * (2 * n - 1) / n + (count * (2 * n - 1) % n != 0);
}

size_t benchVariableOffset(size_t count, int rank, int nranks) {
  size_t offset = 0;
  for (int q = 0; q < rank; q++) offset += benchVariableCount(count, q, nranks);
  return offset;
}

/* Runs of one rank's block, found by walking the blocks (at most a few thousand ranks). */
benchSpan_t benchAllGatherVResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)rank;
  (void)root;
  size_t offset = 0;
  for (int q = 0; q < nranks; q++) {
    const size_t block = benchVariableCount(count, q, nranks);
    if (index < offset + block) return (benchSpan_t){q, index - offset, offset + block - index};
    offset += block;
  }
  return (benchSpan_t){BENCH_SOURCE_UNCHECKED, index, SIZE_MAX}; /* past the sum: the call writes nothing there */
}

benchSpan_t benchReduceScatterVResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)root;
  const size_t mine = benchVariableCount(count, rank, nranks);
  if (index >= mine) return (benchSpan_t){BENCH_SOURCE_UNCHECKED, index, SIZE_MAX};
  return (benchSpan_t){BENCH_SOURCE_REDUCED, benchVariableOffset(count, rank, nranks) + index, mine - index};
}

/* ---- the checker ---------------------------------------------------------------------------------------------- */

/* One period of source's expected elements. */
static unsigned char* periodOf(const benchChecker_t* checker, int source) {
  return checker->expected + (size_t)(source + 1) * PERIOD * checker->elemSize;
}

int benchCheckerInit(benchChecker_t* checker, int type, int op, int nranks, uint64_t seed) {
  memset(checker, 0, sizeof(*checker));
  if (type < 0 || type >= BENCH_NUM_TYPES || (op != BENCH_NO_OP && (op < 0 || op >= BENCH_NUM_OPS)) || nranks < 1)
    return -1;
  checker->type = type;
  checker->op = op;
  checker->nranks = nranks;
  checker->seed = seed;
  checker->elemSize = benchTypeSize(type);
  checker->result = benchAllReduceResult;
  checker->root = -1;
  checker->expected = (unsigned char*)malloc((size_t)(nranks + 1) * PERIOD * checker->elemSize);
  checker->expectedValue = (double*)malloc(PERIOD * sizeof(double));
  if (!checker->expected || !checker->expectedValue) {
    benchCheckerFree(checker);
    return -1;
  }
  unsigned char* reduced = periodOf(checker, BENCH_SOURCE_REDUCED);
  for (size_t phase = 0; phase < PERIOD; phase++) {
    uint64_t bits = op == benchProd ? 1u : 0u;  /* integer result, wrapping like the device */
    double floating = op == benchProd ? 1.0 : 0.0;
    int64_t extreme = 0;
    for (int rank = 0; rank < nranks; rank++) {
      int64_t v = inputValue(op, type, rank, nranks, seed, phase);
      encode(type, (uint64_t)v, (double)v, periodOf(checker, rank) + phase * checker->elemSize);
      if (op == benchProd) {
        bits *= (uint64_t)v;
        floating *= (double)v;
      } else {
        bits += (uint64_t)v;
        floating += (double)v;
      }
      if (rank == 0 || (op == benchMax && v > extreme) || (op == benchMin && v < extreme)) extreme = v;
    }
    if (op == benchMax || op == benchMin) {
      bits = (uint64_t)extreme;
      floating = (double)extreme;
    } else if (op == benchAvg) {
      int64_t sum = (int64_t)floating; /* exact: |sum| <= 4 * nranks */
      floating = isFloat(type) ? floating / nranks : (double)(sum / nranks);
      bits = (uint64_t)(sum / nranks);
    }
    encode(type, bits, floating, reduced + phase * checker->elemSize);
    checker->expectedValue[phase] = benchLoadAsDouble(reduced, phase, type);
  }
  return 0;
}

void benchCheckerSetResult(benchChecker_t* checker, benchResultFn_t result, size_t count, int rank, int root) {
  checker->result = result;
  checker->count = count;
  checker->rank = rank;
  checker->root = root;
}

/* Relative tolerance for avg: a few units in the last place of the type. */
static double avgTolerance(int type) {
  switch (type) {
    case benchFloat16: return 0x1p-9;
    case benchBfloat16: return 0x1p-6;
    case benchFloat32: return 0x1p-21;
    case benchFloat64: return 0x1p-50;
    default: return 0;
  }
}

/* Wrong elements among data[0..n), which should hold elements [input, input + n) of source. */
static int64_t countSpan(const benchChecker_t* checker, int source, size_t input, const unsigned char* data,
                         size_t n) {
  if (source == BENCH_SOURCE_UNCHECKED) return 0;
  if (source < BENCH_SOURCE_REDUCED || source >= checker->nranks) return (int64_t)n; /* no such source */
  size_t size = checker->elemSize;
  int64_t wrong = 0;
  if (source == BENCH_SOURCE_REDUCED && checker->op == benchAvg) {
    double tolerance = avgTolerance(checker->type);
    for (size_t i = 0; i < n; i++) {
      double expected = checker->expectedValue[phaseOf(input + i, checker->seed)];
      double value = benchLoadAsDouble(data, i, checker->type);
      double bound = isFloat(checker->type) ? tolerance * (fabs(expected) > 1.0 ? fabs(expected) : 1.0) : 1.0;
      if (!(fabs(value - expected) <= bound)) wrong++;
    }
    return wrong;
  }
  const unsigned char* period = periodOf(checker, source);
  for (size_t i = 0; i < n;) {
    size_t phase = phaseOf(input + i, checker->seed);
    size_t run = PERIOD - phase < n - i ? PERIOD - phase : n - i;
    const unsigned char* want = period + phase * size;
    if (memcmp(data + i * size, want, run * size) != 0) {
      for (size_t k = 0; k < run; k++)
        if (memcmp(data + (i + k) * size, want + k * size, size) != 0) wrong++;
    }
    i += run;
  }
  return wrong;
}

int64_t benchCheckerCount(const benchChecker_t* checker, const void* got, size_t count, size_t first) {
  const unsigned char* data = (const unsigned char*)got;
  int64_t wrong = 0;
  for (size_t i = 0; i < count;) {
    benchSpan_t span = checker->result(first + i, checker->count, checker->rank, checker->nranks, checker->root);
    size_t n = span.run == 0 ? 1 : span.run < count - i ? span.run : count - i;
    wrong += countSpan(checker, span.source, span.input, data + i * checker->elemSize, n);
    i += n;
  }
  return wrong;
}

void benchCheckerFree(benchChecker_t* checker) {
  free(checker->expected);
  free(checker->expectedValue);
  checker->expected = NULL;
  checker->expectedValue = NULL;
}
