/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The benchmark's host-only core (test_bench.c): data and checking (tools/bench/check.c). The 16-bit float
 * conversions, the input pattern and the checker against an independent host reduction, and the expected results
 * of the all-gather, reduce-scatter and broadcast.
 */
#include "test_bench.h"

#include "bench.h"
#include "test.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void testHalfAndBf16(void) {
  EXPECT_EQ_INT(benchFloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ_INT(benchFloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ_INT(benchFloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ_INT(benchFloatToHalf(65520.0f), 0x7c00); /* rounds up to infinity */
  EXPECT_EQ_INT(benchFloatToHalf(0x1p-24f), 0x0001); /* smallest subnormal */
  EXPECT_EQ_INT(benchFloatToHalf(0x1p-26f), 0x0000); /* below half of it: zero */
  EXPECT_EQ_INT(benchFloatToHalf(0.1f), 0x2e66);
  EXPECT_EQ_INT(benchFloatToHalf(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
  EXPECT_EQ_INT(benchFloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ_INT(benchFloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ_INT(benchFloatToBf16(1.0f + 0x1p-8f), 0x3f80); /* tie to even */
  EXPECT_EQ_INT(benchFloatToBf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);
  EXPECT_EQ_INT(benchFloatToBf16(-3.0f), 0xc040);
  int halfMismatch = 0, bfMismatch = 0;
  for (uint32_t bits = 0; bits < 0x10000; bits++) {
    int halfNan = (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff);
    int bfNan = (bits & 0x7f80) == 0x7f80 && (bits & 0x7f);
    if (!halfNan && benchFloatToHalf(benchHalfToFloat((uint16_t)bits)) != bits) halfMismatch++;
    if (!bfNan && benchFloatToBf16(benchBf16ToFloat((uint16_t)bits)) != bits) bfMismatch++;
    if (halfNan && !isnan(benchHalfToFloat((uint16_t)bits))) halfMismatch++;
  }
  EXPECT_EQ_INT(halfMismatch, 0);
  EXPECT_EQ_INT(bfMismatch, 0);
  EXPECT(benchHalfToFloat(0x0001) == 0x1p-24f);
  EXPECT(benchHalfToFloat(0x7c00) == INFINITY);
}

/* Stores a double in type's encoding: integers wrap to the width like the device does. */
static void storeAs(int type, double value, void* dst) {
  switch (type) {
    case benchInt8:
    case benchUint8: {
      uint8_t v = (uint8_t)(int64_t)value;
      memcpy(dst, &v, 1);
      break;
    }
    case benchInt32:
    case benchUint32: {
      uint32_t v = (uint32_t)(int64_t)value;
      memcpy(dst, &v, 4);
      break;
    }
    case benchInt64:
    case benchUint64: {
      uint64_t v = (uint64_t)(int64_t)value;
      memcpy(dst, &v, 8);
      break;
    }
    case benchFloat16: {
      uint16_t v = benchFloatToHalf((float)value);
      memcpy(dst, &v, 2);
      break;
    }
    case benchFloat32: {
      float v = (float)value;
      memcpy(dst, &v, 4);
      break;
    }
    case benchFloat64: memcpy(dst, &value, 8); break;
    case benchBfloat16: {
      uint16_t v = benchFloatToBf16((float)value);
      memcpy(dst, &v, 2);
      break;
    }
  }
}

static int isFloatType(int type) {
  return type == benchFloat16 || type == benchFloat32 || type == benchFloat64 || type == benchBfloat16;
}

/* The all-reduce done independently of the checker: decode every rank's input, reduce in double, encode. */
static void hostAllReduce(int type, int op, int nranks, uint64_t seed, size_t count, unsigned char* out) {
  size_t size = benchTypeSize(type);
  unsigned char* input = (unsigned char*)malloc(count * size * (size_t)nranks);
  for (int rank = 0; rank < nranks; rank++)
    benchFillInput(input + (size_t)rank * count * size, count, 0, type, op, rank, nranks, seed);
  for (size_t i = 0; i < count; i++) {
    double acc = benchLoadAsDouble(input, i, type);
    for (int rank = 1; rank < nranks; rank++) {
      double v = benchLoadAsDouble(input + (size_t)rank * count * size, i, type);
      switch (op) {
        case benchSum:
        case benchAvg: acc += v; break;
        case benchProd: acc *= v; break;
        case benchMax: acc = v > acc ? v : acc; break;
        case benchMin: acc = v < acc ? v : acc; break;
      }
    }
    if (op == benchAvg) acc = isFloatType(type) ? acc / nranks : trunc(acc / nranks);
    storeAs(type, acc, out + i * size);
  }
  free(input);
}

void testChecker(void) {
  const size_t count = 3 * BENCH_PATTERN_PERIOD + 17;
  static const int rankCounts[] = {1, 2, 3, 8};
  unsigned char* result = (unsigned char*)malloc(count * 8);
  for (int type = 0; type < BENCH_NUM_TYPES; type++) {
    size_t size = benchTypeSize(type);
    for (int op = 0; op < BENCH_NUM_OPS; op++) {
      for (size_t k = 0; k < sizeof(rankCounts) / sizeof(rankCounts[0]); k++) {
        int nranks = rankCounts[k];
        uint64_t seed = 7 + (uint64_t)k;
        benchChecker_t checker;
        EXPECT_EQ_INT(benchCheckerInit(&checker, type, op, nranks, seed), 0);
        hostAllReduce(type, op, nranks, seed, count, result);
        int64_t wrong = benchCheckerCount(&checker, result, count, 0);
        EXPECT_MSG(wrong == 0, "%s %s %d ranks: %lld wrong on a right result", benchTypeName(type), benchOpName(op),
                   nranks, (long long)wrong);
        /* The same result checked in two pieces that split a pattern period. */
        size_t split = BENCH_PATTERN_PERIOD + 5;
        wrong = benchCheckerCount(&checker, result, split, 0) +
                benchCheckerCount(&checker, result + split * size, count - split, split);
        EXPECT_EQ_INT(wrong, 0);
        /* What --inject-corruption does (bit 6 of the top byte), and an unwritten, poisoned tail. */
        result[(count / 2) * size + size - 1] ^= 0x40;
        EXPECT_EQ_INT(benchCheckerCount(&checker, result, count, 0), 1);
        result[(count / 2) * size + size - 1] ^= 0x40;
        memset(result + (count - 10) * size, BENCH_POISON_BYTE, 10 * size);
        wrong = benchCheckerCount(&checker, result, count, 0);
        EXPECT_MSG(wrong == 10, "%s %s %d ranks: a poisoned tail gave %lld wrong, not 10", benchTypeName(type),
                   benchOpName(op), nranks, (long long)wrong);
        benchCheckerFree(&checker);
      }
    }
  }
  /* avg with floats tolerates rounding but not a different value. */
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, benchFloat32, benchAvg, 3, 1), 0);
  hostAllReduce(benchFloat32, benchAvg, 3, 1, count, result);
  float value;
  memcpy(&value, result, 4);
  value = nextafterf(value, INFINITY);
  memcpy(result, &value, 4);
  EXPECT_EQ_INT(benchCheckerCount(&checker, result, count, 0), 0);
  value += 0.25f;
  memcpy(result, &value, 4);
  EXPECT_EQ_INT(benchCheckerCount(&checker, result, count, 0), 1);
  benchCheckerFree(&checker);
  EXPECT_EQ_INT(benchCheckerInit(&checker, 99, benchSum, 2, 1), -1);
  free(result);

  /* Inputs: pieces fill like the whole; ranks and seeds differ; values stay small. */
  const size_t n = 5000;
  unsigned char* whole = (unsigned char*)malloc(n * 4);
  unsigned char* parts = (unsigned char*)malloc(n * 4);
  unsigned char* other = (unsigned char*)malloc(n * 4);
  benchFillInput(whole, n, 0, benchInt32, benchSum, 1, 4, 9);
  benchFillInput(parts, 1234, 0, benchInt32, benchSum, 1, 4, 9);
  benchFillInput(parts + 1234 * 4, n - 1234, 1234, benchInt32, benchSum, 1, 4, 9);
  EXPECT(memcmp(whole, parts, n * 4) == 0);
  benchFillInput(other, n, 0, benchInt32, benchSum, 2, 4, 9);
  EXPECT(memcmp(whole, other, n * 4) != 0);
  benchFillInput(other, n, 0, benchInt32, benchSum, 1, 4, 10);
  EXPECT(memcmp(whole, other, n * 4) != 0);
  int small = 1, nonzero = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t v;
    memcpy(&v, whole + i * 4, 4);
    if (v < -4 || v > 4) small = 0;
    if (v != 0) nonzero++;
  }
  EXPECT(small);
  EXPECT(nonzero > (int)n / 2);
  free(whole);
  free(parts);
  free(other);
}

/* Other collectives' result functions, as their programs would declare them: all-gather (every rank's input in
 * turn) and reduce-scatter (the rank's slice of the reduction). */
static benchSpan_t allGatherResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)rank;
  (void)nranks;
  (void)root;
  return (benchSpan_t){(int)(index / count), index % count, count - index % count};
}

static benchSpan_t reduceScatterResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)nranks;
  (void)root;
  return (benchSpan_t){BENCH_SOURCE_REDUCED, (size_t)rank * count + index, SIZE_MAX};
}

void testCheckerResults(void) {
  const int nranks = 3, type = benchInt32;
  const size_t count = BENCH_PATTERN_PERIOD + 5, total = count * (size_t)nranks, size = 4;
  const uint64_t seed = 11;
  EXPECT(strcmp(benchOpName(BENCH_NO_OP), "none") == 0);
  /* All-gather: every rank's input, in rank order, checked whole and in pieces that cross the ranks' parts. */
  unsigned char* gathered = (unsigned char*)malloc(total * size);
  for (int rank = 0; rank < nranks; rank++)
    benchFillInput(gathered + (size_t)rank * count * size, count, 0, type, BENCH_NO_OP, rank, nranks, seed);
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, BENCH_NO_OP, nranks, seed), 0);
  benchCheckerSetResult(&checker, allGatherResult, count, 1, -1);
  EXPECT_EQ_INT(benchCheckerCount(&checker, gathered, total, 0), 0);
  const size_t split = count + 7;
  EXPECT_EQ_INT(benchCheckerCount(&checker, gathered, split, 0) +
                    benchCheckerCount(&checker, gathered + split * size, total - split, split),
                0);
  gathered[(2 * count + 3) * size] ^= 1;
  EXPECT_EQ_INT(benchCheckerCount(&checker, gathered, total, 0), 1);
  gathered[(2 * count + 3) * size] ^= 1;
  /* Rank 0's part where rank 1's belongs. */
  memcpy(gathered + count * size, gathered, count * size);
  int64_t wrong = benchCheckerCount(&checker, gathered, total, 0);
  EXPECT_MSG(wrong > (int64_t)count / 2, "another rank's input in rank 1's part: %lld wrong", (long long)wrong);
  benchCheckerFree(&checker);
  free(gathered);

  /* Reduce-scatter: rank 1 holds elements [count, 2 count) of the reduction of inputs of nranks x count. */
  unsigned char* reduced = (unsigned char*)malloc(total * size);
  hostAllReduce(type, benchSum, nranks, seed, total, reduced);
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, benchSum, nranks, seed), 0);
  benchCheckerSetResult(&checker, reduceScatterResult, count, 1, -1);
  EXPECT_EQ_INT(benchCheckerCount(&checker, reduced + count * size, count, 0), 0);
  wrong = benchCheckerCount(&checker, reduced, count, 0);
  EXPECT_MSG(wrong > (int64_t)count / 2, "rank 0's slice taken for rank 1's: %lld wrong", (long long)wrong);
  benchCheckerFree(&checker);
  free(reduced);
}
