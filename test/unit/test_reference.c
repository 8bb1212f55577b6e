/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The all-reduce tests' host reference (test/gpu/test_allreduce_ref.c) checked on its own, without a GPU: fp16
 * and bf16 conversions (every value round-trips, ties go to even, overflow and subnormals), the emulated device
 * arithmetic (wrapping integers, NaN-propagating max/min, signed zeros, fp32 accumulation order), the tolerance
 * of the float64 reference (accepts rounding, rejects real errors) and the input generator.
 */
#include "test.h"
#include "test_allreduce_ref.h"

#include <math.h>

static uint32_t floatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static void testHalf(void) {
  int roundTrips = 1, nanKept = 1;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = refHalfToFloat((uint16_t)h);
    if (isnan(f)) {
      nanKept &= (refFloatToHalf(f) & 0x7c00) == 0x7c00 && (refFloatToHalf(f) & 0x3ff) != 0;
      continue;
    }
    roundTrips &= refFloatToHalf(f) == h;
  }
  EXPECT(roundTrips);
  EXPECT(nanKept);
  EXPECT_EQ_INT(refFloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ_INT(refFloatToHalf(1.0f + ldexpf(1, -11)), 0x3c00);     /* tie: to even */
  EXPECT_EQ_INT(refFloatToHalf(1.0f + 3 * ldexpf(1, -11)), 0x3c02); /* tie: to even (up) */
  EXPECT_EQ_INT(refFloatToHalf(1.0f + ldexpf(1, -11) + ldexpf(1, -20)), 0x3c01);
  EXPECT_EQ_INT(refFloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ_INT(refFloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ_INT(refFloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ_INT(refFloatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ_INT(refFloatToHalf(ldexpf(1, -24)), 0x0001);
  EXPECT_EQ_INT(refFloatToHalf(ldexpf(1, -25)), 0x0000);     /* half the smallest subnormal: to even (0) */
  EXPECT_EQ_INT(refFloatToHalf(3 * ldexpf(1, -25)), 0x0002); /* 1.5 subnormal steps: to even (2) */
  EXPECT_EQ_INT(refFloatToHalf(ldexpf(1, -14) - ldexpf(1, -26)), 0x0400); /* rounds up to the smallest normal */
  EXPECT_EQ_INT(refFloatToHalf(-0.0f), 0x8000);
  EXPECT(refHalfToFloat(0x0001) == ldexpf(1, -24));
  EXPECT(refHalfToFloat(0xc000) == -2.0f);
  EXPECT(isinf(refHalfToFloat(0x7c00)));
}

static void testBf16(void) {
  int roundTrips = 1;
  for (uint32_t b = 0; b < 65536; b++) {
    float f = refBf16ToFloat((uint16_t)b);
    if (!isnan(f)) roundTrips &= refFloatToBf16(f) == b;
  }
  EXPECT(roundTrips);
  EXPECT_EQ_INT(refFloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ_INT(refFloatToBf16(1.0f + ldexpf(1, -8)), 0x3f80);
  EXPECT_EQ_INT(refFloatToBf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82);
  EXPECT_EQ_INT(refFloatToBf16(3.4e38f), 0x7f80); /* beyond the largest bf16: Inf */
  EXPECT(isnan(refBf16ToFloat(refFloatToBf16(NAN))));
}

static uint64_t fbits(float f) { return floatBits(f); }

static void testIntegers(void) {
  uint64_t in[3];
  in[0] = 127, in[1] = 1;
  EXPECT_EQ_INT(refReduceBits(fcclInt8, fcclSum, in, 2), 0x80); /* wraps to -128 */
  in[0] = 16, in[1] = 16;
  EXPECT_EQ_INT(refReduceBits(fcclUint8, fcclProd, in, 2), 0);
  in[0] = 0xff, in[1] = 1; /* int8 -1 vs 1; uint8 255 vs 1 */
  EXPECT_EQ_INT(refReduceBits(fcclInt8, fcclMax, in, 2), 1);
  EXPECT_EQ_INT(refReduceBits(fcclUint8, fcclMax, in, 2), 0xff);
  EXPECT_EQ_INT(refReduceBits(fcclInt8, fcclMin, in, 2), 0xff);
  in[0] = 0xfffffff9, in[1] = 0; /* int32: -7 + 0, avg over 2: -3 (toward zero) */
  EXPECT_EQ_INT(refReduceBits(fcclInt32, fcclAvg, in, 2), 0xfffffffd);
  EXPECT_EQ_INT(refReduceBits(fcclUint32, fcclAvg, in, 2), 0x7ffffffc);
  in[0] = 0x7f, in[1] = 0x7f, in[2] = 0x7f; /* int8 avg of a wrapped sum: 381 -> 125, / 3 = 41 */
  EXPECT_EQ_INT(refReduceBits(fcclInt8, fcclAvg, in, 3), 41);
  in[0] = 0x8000000000000000ull, in[1] = 5;
  EXPECT_EQ_INT(refReduceBits(fcclInt64, fcclMin, in, 2), (long long)0x8000000000000000ull);
  EXPECT_EQ_INT(refReduceBits(fcclUint64, fcclMin, in, 2), 5);
  /* integers are exact: only the emulated value is accepted */
  in[0] = 10, in[1] = 20;
  EXPECT(refCheckElement(fcclInt32, fcclSum, 30, in, 2));
  EXPECT(!refCheckElement(fcclInt32, fcclSum, 31, in, 2));
}

static void testFloats(void) {
  uint64_t in[4];
  /* fp32 accumulation in rank order: (1e8 + 1) - 1e8 is 0 in float, 1 exactly. */
  in[0] = fbits(1e8f), in[1] = fbits(1.0f), in[2] = fbits(-1e8f);
  EXPECT_EQ_INT(refReduceBits(fcclFloat32, fcclSum, in, 3), fbits(0.0f));
  double tol = 0;
  double exact = refReduceDouble(fcclFloat32, fcclSum, in, 3, &tol);
  EXPECT(exact == 1.0);
  EXPECT(tol > 1.0 && tol < 100.0);
  EXPECT(refCheckElement(fcclFloat32, fcclSum, fbits(0.0f), in, 3));
  EXPECT(refCheckElement(fcclFloat32, fcclSum, fbits(1.0f), in, 3)); /* another order: within tolerance */
  EXPECT(!refCheckElement(fcclFloat32, fcclSum, fbits(1000.0f), in, 3));
  /* NaN propagates through max/min, from either side; equal values give the later one. */
  in[0] = fbits(NAN), in[1] = fbits(1.0f);
  EXPECT(isnan(refHalfToFloat(0x7e00)));
  uint64_t r = refReduceBits(fcclFloat32, fcclMax, in, 2);
  EXPECT((r & 0x7f800000u) == 0x7f800000u && (r & 0x7fffff));
  in[0] = fbits(1.0f), in[1] = fbits(NAN);
  r = refReduceBits(fcclFloat32, fcclMin, in, 2);
  EXPECT((r & 0x7f800000u) == 0x7f800000u && (r & 0x7fffff));
  EXPECT(refCheckElement(fcclFloat32, fcclMin, fbits(-NAN), in, 2)); /* any NaN for NaN */
  EXPECT(!refCheckElement(fcclFloat32, fcclMin, fbits(1.0f), in, 2));
  in[0] = fbits(0.0f), in[1] = fbits(-0.0f);
  EXPECT_EQ_INT(refReduceBits(fcclFloat32, fcclMax, in, 2), fbits(-0.0f));
  in[0] = fbits(-0.0f), in[1] = fbits(-0.0f);
  EXPECT_EQ_INT(refReduceBits(fcclFloat32, fcclSum, in, 2), fbits(-0.0f));
  /* fp16: accumulated in fp32, rounded once; overflow to Inf accepted only as Inf. */
  in[0] = 0x3c00, in[1] = 0x4000; /* 1 + 2 */
  EXPECT_EQ_INT(refReduceBits(fcclFloat16, fcclAvg, in, 2), 0x3e00); /* 1.5 */
  in[0] = refFloatToHalf(60000.0f), in[1] = refFloatToHalf(60000.0f);
  EXPECT_EQ_INT(refReduceBits(fcclFloat16, fcclSum, in, 2), 0x7c00);
  EXPECT(refCheckElement(fcclFloat16, fcclSum, 0x7c00, in, 2));
  EXPECT(!refCheckElement(fcclFloat16, fcclSum, 0x7bff, in, 2));
  /* fp16 sum of values whose fp32 sum rounds: one half-ulp of the output is tolerated, two are not. */
  in[0] = 0x3c00, in[1] = 0x1400; /* 1 + 2^-10 */
  EXPECT_EQ_INT(refReduceBits(fcclFloat16, fcclSum, in, 2), 0x3c01);
  EXPECT(refCheckElement(fcclFloat16, fcclSum, 0x3c01, in, 2));
  EXPECT(!refCheckElement(fcclFloat16, fcclSum, 0x3c03, in, 2));
  /* bf16 prod */
  in[0] = refFloatToBf16(3.0f), in[1] = refFloatToBf16(-2.0f);
  EXPECT_EQ_INT(refReduceBits(fcclBfloat16, fcclProd, in, 2), refFloatToBf16(-6.0f));
  /* float64 stays double */
  double a = 1.0 / 3, b = 2.0 / 3;
  memcpy(&in[0], &a, 8);
  memcpy(&in[1], &b, 8);
  double s = a + b;
  uint64_t sb;
  memcpy(&sb, &s, 8);
  EXPECT_EQ_INT(refReduceBits(fcclFloat64, fcclSum, in, 2), (long long)sb);
  /* subnormal products underflow in fp32: the emulated 0 is right although the float64 value is not 0 */
  in[0] = fbits(ldexpf(1, -140)), in[1] = fbits(ldexpf(1, -20));
  EXPECT_EQ_INT(refReduceBits(fcclFloat32, fcclProd, in, 2), fbits(0.0f));
  EXPECT(refCheckElement(fcclFloat32, fcclProd, fbits(0.0f), in, 2));
}

static void testGenerator(void) {
  const fcclDataType_t types[] = {fcclInt8,   fcclUint8,   fcclInt32,   fcclUint32,  fcclInt64,
                                  fcclUint64, fcclFloat16, fcclFloat32, fcclFloat64, fcclBfloat16};
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
    int seen[REF_KINDS] = {0};
    int zeros = 0, differentRanks = 0;
    for (uint64_t i = 0; i < 200000; i++) {
      refKind_t kind;
      uint64_t v = refInputBits(types[t], 42, 7, 1, i, &kind);
      zeros += v == 0;
      seen[kind]++;
      differentRanks += v != refInputBits(types[t], 42, 7, 0, i, NULL);
      EXPECT_EQ_INT(v, refInputBits(types[t], 42, 7, 1, i, NULL)); /* reproducible */
    }
    EXPECT_MSG(zeros == 0, "%s: %d zero inputs", refTypeName(types[t]), zeros);
    EXPECT(differentRanks > 100000);
    if (refTypeIsFloat(types[t]))
      for (int k = 0; k < REF_KINDS; k++)
        EXPECT_MSG(seen[k] > 0, "%s: no input of kind %d", refTypeName(types[t]), k);
  }
  /* refFillInput writes exactly count elements. */
  uint16_t buf[10];
  for (int i = 0; i < 10; i++) buf[i] = 0x5a5a;
  refFillInput(fcclFloat16, 1, 2, 0, 0, buf, 9);
  EXPECT_EQ_INT(buf[9], 0x5a5a);
  EXPECT_EQ_INT(buf[3], refInputBits(fcclFloat16, 1, 2, 0, 3, NULL));
}

static void testCheckBuffer(void) {
  enum { N = 1000, RANKS = 3 };
  static float out[N];
  uint64_t in[RANKS];
  for (int i = 0; i < N; i++) {
    for (int r = 0; r < RANKS; r++) in[r] = refInputBits(fcclFloat32, 9, 4, r, (uint64_t)i, NULL);
    uint32_t bits = (uint32_t)refReduceBits(fcclFloat32, fcclSum, in, RANKS);
    memcpy(&out[i], &bits, 4);
  }
  char message[256];
  EXPECT_EQ_INT(refCheckBuffer(fcclFloat32, fcclSum, 9, 4, RANKS, out, N, message, sizeof(message)), 0);
  /* A wrong call id, rank count or op is caught; so is one corrupted element. */
  EXPECT(refCheckBuffer(fcclFloat32, fcclSum, 9, 5, RANKS, out, N, NULL, 0) > N / 2);
  EXPECT(refCheckBuffer(fcclFloat32, fcclSum, 9, 4, 2, out, N, NULL, 0) > N / 2);
  EXPECT(refCheckBuffer(fcclFloat32, fcclMax, 9, 4, RANKS, out, N, NULL, 0) > N / 2);
  int victim = 0;
  while (isnan(out[victim]) || isinf(out[victim])) victim++;
  out[victim] = out[victim] * 1.5f + 1.0f;
  EXPECT_EQ_INT(refCheckBuffer(fcclFloat32, fcclSum, 9, 4, RANKS, out, N, message, sizeof(message)), 1);
  char index[32];
  snprintf(index, sizeof(index), "[%d]", victim);
  EXPECT_STR_CONTAINS(message, index);
  /* Poison is never a right answer. */
  memset(out, 0xa5, sizeof(out));
  EXPECT_EQ_INT(refCheckBuffer(fcclFloat32, fcclSum, 9, 4, RANKS, out, N, NULL, 0), N);
  EXPECT(refHash("abc", 3) != refHash("abd", 3));
}

/* The pre-multiplied sum as fccl's kernels define it (reduce.cuh): each product in the accumulator's type, then the
 * sum in rank order. */
static void testPreMulSum(void) {
  uint64_t in[3];
  in[0] = 100, in[1] = 100;
  EXPECT_EQ_INT(refPreMulSumBits(fcclInt8, 3, in, 2), (600 & 0xff)); /* integers wrap */
  EXPECT_EQ_INT(refPreMulSumBits(fcclUint32, 0xffffffffu, in, 2), (uint32_t)-200);
  in[0] = 0x3c00, in[1] = 0x4000;                                      /* float16 1 and 2 */
  EXPECT_EQ_INT(refPreMulSumBits(fcclFloat16, 0x3800, in, 2), 0x3e00); /* times 0.5: 1.5 */
  /* bfloat16 1.0078125 times 1.015625 on 3 ranks: the products are exact in fp32 and the one rounding is the
   * output's (0x4045); rounding each product to bfloat16 first would give 0x4044. */
  in[0] = in[1] = in[2] = 0x3f81;
  EXPECT_EQ_INT(refPreMulSumBits(fcclBfloat16, 0x3f82, in, 3), 0x4045);
  EXPECT(refCheckPreMulSum(fcclBfloat16, 0x3f82, 0x4045, in, 3));
  /* float32: each product rounded, never fused with the add: 3 x (1 + 2^-23) x (1 + 2^-23), summed. */
  const float x = 1.0f + 0x1p-23f;
  in[0] = in[1] = in[2] = fbits(x);
  const float product = x * x;
  EXPECT_EQ_INT(refPreMulSumBits(fcclFloat32, fbits(x), in, 3), fbits(product + product + product));
  /* Inf times 0 is NaN, and NaN wins the sum; a wrong finite value is refused. */
  in[0] = fbits(1.0f / 0.0f), in[1] = fbits(2.0f);
  EXPECT(refCheckPreMulSum(fcclFloat32, fbits(0.0f), fbits(0.0f / 0.0f), in, 2));
  in[0] = fbits(1.0f);
  EXPECT(refCheckPreMulSum(fcclFloat32, fbits(0.25f), fbits(0.75f), in, 2));
  EXPECT(!refCheckPreMulSum(fcclFloat32, fbits(0.25f), fbits(0.7501f), in, 2));
  double tolerance = 0;
  EXPECT(refPreMulSumDouble(fcclFloat32, fbits(0.25f), in, 2, &tolerance) == 0.75);
  EXPECT(tolerance > 0 && tolerance < 1e-6);
}

int main(void) {
  testHalf();
  testPreMulSum();
  testBf16();
  testIntegers();
  testFloats();
  testGenerator();
  testCheckBuffer();
  return testSummary("reference");
}
