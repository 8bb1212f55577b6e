/* SPDX-License-Identifier: Apache-2.0 */
/* Host reference for the all-reduce tests: see test_allreduce_ref.h. Plain C11 (no CUDA, no FMA contraction). */
#include "test_allreduce_ref.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const char* refTypeName(fcclDataType_t type) {
  static const char* const names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",     "uint64",
                                      "float16", "float32", "float64", "bfloat16", "float8e4m3"};
  return (int)type >= 0 && type < fcclNumTypes ? names[type] : "?";
}

const char* refOpName(fcclRedOp_t op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return (int)op >= 0 && op < fcclNumOps ? names[op] : "?";
}

int refTypeIsFloat(fcclDataType_t type) {
  return type == fcclFloat16 || type == fcclFloat32 || type == fcclFloat64 || type == fcclBfloat16;
}

static uint32_t floatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
static float bitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}
static uint64_t doubleBits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof(u));
  return u;
}
static double bitsDouble(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof(d));
  return d;
}

float refHalfToFloat(uint16_t h) {
  const uint32_t sign = (uint32_t)(h >> 15) << 31;
  const int exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0x1f) return bitsFloat(sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0));
  float magnitude = exponent == 0 ? ldexpf((float)mantissa, -24) : ldexpf((float)(1024 + mantissa), exponent - 25);
  return sign ? -magnitude : magnitude;
}

uint16_t refFloatToHalf(float value) {
  const uint32_t x = floatBits(value);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00 | (uint16_t)((magnitude >> 13) & 0x3ff);
  if (magnitude >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to Inf (and Inf stays Inf) */
  if (magnitude < 0x38800000u) {                        /* below 2^-14: a subnormal half, or zero */
    const float scaled = bitsFloat(magnitude) * 16777216.0f; /* exact: a power of two */
    return sign | (uint16_t)nearbyintf(scaled);          /* round to nearest even; 1024 is the smallest normal */
  }
  uint32_t h = ((((magnitude >> 23) - 127 + 15) << 10) | ((magnitude & 0x7fffff) >> 13));
  const uint32_t rest = magnitude & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return sign | (uint16_t)h;
}

float refBf16ToFloat(uint16_t bits) { return bitsFloat((uint32_t)bits << 16); }

uint16_t refFloatToBf16(float value) {
  uint32_t x = floatBits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

/* ---- inputs ---- */

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t hashInput(uint64_t seed, uint64_t call, int rank, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1) + 0xd1b54a32d192ed03ull * (uint64_t)(rank + 1) +
               0xabc98388fb8fac03ull * (call + 1);
  return mix64(mix64(z));
}

uint64_t refInputBits(fcclDataType_t type, uint64_t seed, uint64_t call, int rank, uint64_t index, refKind_t* kind) {
  const uint64_t r = hashInput(seed, call, rank, index);
  if (!refTypeIsFloat(type)) {
    const size_t bits = fcclTypeSize(type) * 8;
    uint64_t v = bits == 64 ? r : r & ((1ull << bits) - 1);
    if (kind) *kind = REF_NORMAL;
    return v ? v : 1;
  }
  const unsigned c = (unsigned)(r & 1023);
  refKind_t k = c < 16 ? REF_NEG_ZERO
                : c < 32 ? REF_SUBNORMAL
                : c < 48 ? REF_LARGE
                : c == 48 ? REF_INF
                : c == 49 ? REF_NAN
                          : REF_NORMAL;
  if (kind) *kind = k;
  const uint64_t sign = (r >> 10) & 1;
  const uint64_t m = r >> 11;       /* mantissa bits */
  const uint64_t pick = (r >> 53);  /* 11 bits to choose an exponent */
  switch (type) {
    case fcclFloat32: {
      uint64_t e = 0, mant = m & 0x7fffff;
      switch (k) {
        case REF_NEG_ZERO: return 0x80000000u;
        case REF_SUBNORMAL: e = 0; mant |= 1; break;
        case REF_LARGE: e = 190 + pick % 61; break;
        case REF_INF: return (sign << 31) | 0x7f800000u;
        case REF_NAN: return (sign << 31) | 0x7fc00000u | (mant & 0x3fffff);
        default: e = 123 + pick % 8; break;
      }
      return (sign << 31) | (e << 23) | mant;
    }
    case fcclFloat64: {
      uint64_t e = 0, mant = (m | (m << 42)) & 0xfffffffffffffull;
      switch (k) {
        case REF_NEG_ZERO: return 0x8000000000000000ull;
        case REF_SUBNORMAL: e = 0; mant |= 1; break;
        case REF_LARGE: e = 1600 + pick % 401; break;
        case REF_INF: return (sign << 63) | 0x7ff0000000000000ull;
        case REF_NAN: return (sign << 63) | 0x7ff8000000000000ull | (mant & 0x7ffffffffffffull);
        default: e = 1019 + pick % 8; break;
      }
      return (sign << 63) | (e << 52) | mant;
    }
    case fcclFloat16: {
      uint64_t e = 0, mant = m & 0x3ff;
      switch (k) {
        case REF_NEG_ZERO: return 0x8000;
        case REF_SUBNORMAL: e = 0; mant |= 1; break;
        case REF_LARGE: e = 26 + pick % 5; break;
        case REF_INF: return (sign << 15) | 0x7c00;
        case REF_NAN: return (sign << 15) | 0x7e00 | (mant & 0x1ff);
        default: e = 11 + pick % 8; break;
      }
      return (sign << 15) | (e << 10) | mant;
    }
    default: { /* bfloat16 */
      uint64_t e = 0, mant = m & 0x7f;
      switch (k) {
        case REF_NEG_ZERO: return 0x8000;
        case REF_SUBNORMAL: e = 0; mant |= 1; break;
        case REF_LARGE: e = 190 + pick % 61; break;
        case REF_INF: return (sign << 15) | 0x7f80;
        case REF_NAN: return (sign << 15) | 0x7fc0 | (mant & 0x3f);
        default: e = 123 + pick % 8; break;
      }
      return (sign << 15) | (e << 7) | mant;
    }
  }
}

static void storeBits(fcclDataType_t type, void* buffer, size_t i, uint64_t bits) {
  switch (fcclTypeSize(type)) {
    case 1: ((uint8_t*)buffer)[i] = (uint8_t)bits; break;
    case 2: ((uint16_t*)buffer)[i] = (uint16_t)bits; break;
    case 4: ((uint32_t*)buffer)[i] = (uint32_t)bits; break;
    default: ((uint64_t*)buffer)[i] = bits; break;
  }
}

uint64_t refLoadBits(fcclDataType_t type, const void* buffer, size_t i) {
  switch (fcclTypeSize(type)) {
    case 1: return ((const uint8_t*)buffer)[i];
    case 2: return ((const uint16_t*)buffer)[i];
    case 4: return ((const uint32_t*)buffer)[i];
    default: return ((const uint64_t*)buffer)[i];
  }
}

void refFillInput(fcclDataType_t type, uint64_t seed, uint64_t call, int rank, uint64_t first, void* out,
                  size_t count) {
  for (size_t i = 0; i < count; i++) storeBits(type, out, i, refInputBits(type, seed, call, rank, first + i, NULL));
}

/* ---- the device's arithmetic, emulated ---- */

static int isSigned(fcclDataType_t type) { return type == fcclInt8 || type == fcclInt32 || type == fcclInt64; }

static uint64_t widthMask(fcclDataType_t type) {
  size_t bits = fcclTypeSize(type) * 8;
  return bits == 64 ? ~0ull : (1ull << bits) - 1;
}

static int64_t signExtend(fcclDataType_t type, uint64_t bits) {
  size_t width = fcclTypeSize(type) * 8;
  if (width == 64) return (int64_t)bits;
  uint64_t signBit = 1ull << (width - 1);
  return (int64_t)((bits ^ signBit) - signBit);
}

static uint64_t reduceInt(fcclDataType_t type, fcclRedOp_t op, const uint64_t* in, int n) {
  const uint64_t mask = widthMask(type);
  uint64_t acc = in[0] & mask;
  for (int r = 1; r < n; r++) {
    const uint64_t x = in[r] & mask;
    switch (op) {
      case fcclSum:
      case fcclAvg: acc = (acc + x) & mask; break;
      case fcclProd: acc = (acc * x) & mask; break;
      case fcclMax:
        if (isSigned(type) ? signExtend(type, x) > signExtend(type, acc) : x > acc) acc = x;
        break;
      default: /* min */
        if (isSigned(type) ? signExtend(type, x) < signExtend(type, acc) : x < acc) acc = x;
        break;
    }
  }
  if (op == fcclAvg) {
    if (isSigned(type))
      acc = (uint64_t)(signExtend(type, acc) / (int64_t)n) & mask;
    else
      acc = (acc / (uint64_t)n) & mask;
  }
  return acc;
}

/* max(a, b): a NaN wins (the earlier one first), equal values give b: the device's OpTraits. */
static float maxF(float a, float b) { return isnan(a) ? a : isnan(b) ? b : (a > b ? a : b); }
static float minF(float a, float b) { return isnan(a) ? a : isnan(b) ? b : (a < b ? a : b); }
static double maxD(double a, double b) { return isnan(a) ? a : isnan(b) ? b : (a > b ? a : b); }
static double minD(double a, double b) { return isnan(a) ? a : isnan(b) ? b : (a < b ? a : b); }

static float toFloat(fcclDataType_t type, uint64_t bits) {
  if (type == fcclFloat16) return refHalfToFloat((uint16_t)bits);
  if (type == fcclBfloat16) return refBf16ToFloat((uint16_t)bits);
  return bitsFloat((uint32_t)bits);
}

static uint64_t fromFloat(fcclDataType_t type, float value) {
  if (type == fcclFloat16) return refFloatToHalf(value);
  if (type == fcclBfloat16) return refFloatToBf16(value);
  return floatBits(value);
}

uint64_t refReduceBits(fcclDataType_t type, fcclRedOp_t op, const uint64_t* in, int n) {
  if (!refTypeIsFloat(type)) return reduceInt(type, op, in, n);
  if (type == fcclFloat64) {
    double acc = bitsDouble(in[0]);
    for (int r = 1; r < n; r++) {
      const double x = bitsDouble(in[r]);
      switch (op) {
        case fcclSum:
        case fcclAvg: acc = acc + x; break;
        case fcclProd: acc = acc * x; break;
        case fcclMax: acc = maxD(acc, x); break;
        default: acc = minD(acc, x); break;
      }
    }
    if (op == fcclAvg) acc = acc / (double)n;
    return doubleBits(acc);
  }
  float acc = toFloat(type, in[0]);
  for (int r = 1; r < n; r++) {
    const float x = toFloat(type, in[r]);
    switch (op) {
      case fcclSum:
      case fcclAvg: acc = acc + x; break;
      case fcclProd: acc = acc * x; break;
      case fcclMax: acc = maxF(acc, x); break;
      default: acc = minF(acc, x); break;
    }
  }
  if (op == fcclAvg) acc = acc / (float)n;
  return fromFloat(type, acc);
}

/* ---- float64 reference and tolerance ---- */

static double toDouble(fcclDataType_t type, uint64_t bits) {
  return type == fcclFloat64 ? bitsDouble(bits) : (double)toFloat(type, bits);
}

/* Unit roundoff of the output type, of the accumulator, the smallest subnormal and the largest finite output. */
static void typeLimits(fcclDataType_t type, double* epsOut, double* epsAcc, double* tiny, double* maxFinite) {
  switch (type) {
    case fcclFloat16:
      *epsOut = ldexp(1, -11);
      *epsAcc = ldexp(1, -24);
      *tiny = ldexp(1, -24);
      *maxFinite = 65504;
      break;
    case fcclBfloat16:
      *epsOut = ldexp(1, -8);
      *epsAcc = ldexp(1, -24);
      *tiny = ldexp(1, -133);
      *maxFinite = (double)refBf16ToFloat(0x7f7f);
      break;
    case fcclFloat32:
      *epsOut = ldexp(1, -24);
      *epsAcc = ldexp(1, -24);
      *tiny = ldexp(1, -149);
      *maxFinite = FLT_MAX;
      break;
    default: *epsOut = ldexp(1, -53); *epsAcc = ldexp(1, -53); *tiny = ldexp(1, -1074); *maxFinite = DBL_MAX; break;
  }
}

double refReduceDouble(fcclDataType_t type, fcclRedOp_t op, const uint64_t* in, int n, double* tolerance) {
  double epsOut, epsAcc, tiny, maxFinite;
  typeLimits(type, &epsOut, &epsAcc, &tiny, &maxFinite);
  double acc = toDouble(type, in[0]), absSum = fabs(acc);
  for (int r = 1; r < n; r++) {
    const double x = toDouble(type, in[r]);
    switch (op) {
      case fcclSum:
      case fcclAvg: acc += x; absSum += fabs(x); break;
      case fcclProd: acc *= x; break;
      case fcclMax: acc = maxD(acc, x); break;
      default: acc = minD(acc, x); break;
    }
  }
  double tol = 0;
  switch (op) {
    case fcclSum: tol = (n + 1) * epsAcc * absSum + epsOut * fabs(acc) + tiny; break;
    case fcclAvg:
      acc /= n;
      tol = (n + 2) * epsAcc * absSum / n + epsOut * fabs(acc) + tiny;
      break;
    case fcclProd: tol = (n + 1) * (epsAcc + epsOut) * fabs(acc) + tiny; break;
    default: tol = 0; break;
  }
  if (tolerance) *tolerance = tol;
  return acc;
}

static int sameValue(fcclDataType_t type, uint64_t a, uint64_t b) {
  if (a == b) return 1;
  if (!refTypeIsFloat(type)) return 0;
  return isnan(toDouble(type, a)) && isnan(toDouble(type, b));
}

int refCheckElement(fcclDataType_t type, fcclRedOp_t op, uint64_t got, const uint64_t* in, int n) {
  if (sameValue(type, got, refReduceBits(type, op, in, n))) return 1;
  if (!refTypeIsFloat(type)) return 0;
  double tol = 0;
  const double ref = refReduceDouble(type, op, in, n, &tol);
  const double value = toDouble(type, got);
  double epsOut, epsAcc, tiny, maxFinite;
  typeLimits(type, &epsOut, &epsAcc, &tiny, &maxFinite);
  if (isnan(ref)) return isnan(value);
  if (isinf(ref) || fabs(ref) > maxFinite * (1 + epsOut)) return isinf(value) && (value > 0) == (ref > 0);
  if (!isfinite(value)) return 0;
  return fabs(value - ref) <= tol;
}

/* ---- pre-multiplied sums ---- */

uint64_t refPreMulSumBits(fcclDataType_t type, uint64_t scalar, const uint64_t* in, int n) {
  if (!refTypeIsFloat(type)) {
    const uint64_t mask = widthMask(type);
    uint64_t acc = 0;
    for (int r = 0; r < n; r++) acc = (acc + ((in[r] & mask) * (scalar & mask))) & mask;
    return acc;
  }
  if (type == fcclFloat64) {
    const double s = bitsDouble(scalar);
    double acc = 0;
    for (int r = 0; r < n; r++) {
      const double product = bitsDouble(in[r]) * s; /* rounded here: never fused with the add below */
      acc = r == 0 ? product : acc + product;
    }
    return doubleBits(acc);
  }
  const float s = toFloat(type, scalar);
  float acc = 0;
  for (int r = 0; r < n; r++) {
    const float product = toFloat(type, in[r]) * s;
    acc = r == 0 ? product : acc + product;
  }
  return fromFloat(type, acc);
}

double refPreMulSumDouble(fcclDataType_t type, uint64_t scalar, const uint64_t* in, int n, double* tolerance) {
  double epsOut, epsAcc, tiny, maxFinite;
  typeLimits(type, &epsOut, &epsAcc, &tiny, &maxFinite);
  const double s = toDouble(type, scalar);
  double acc = 0, absSum = 0;
  for (int r = 0; r < n; r++) {
    const double product = toDouble(type, in[r]) * s;
    acc += product;
    absSum += fabs(product);
  }
  /* One rounding per product and per addition in the accumulator, one to the output type. */
  if (tolerance) *tolerance = (n + 2) * epsAcc * absSum + epsOut * fabs(acc) + tiny;
  return acc;
}

int refCheckPreMulSum(fcclDataType_t type, uint64_t scalar, uint64_t got, const uint64_t* in, int n) {
  if (sameValue(type, got, refPreMulSumBits(type, scalar, in, n))) return 1;
  if (!refTypeIsFloat(type)) return 0;
  double tol = 0;
  const double ref = refPreMulSumDouble(type, scalar, in, n, &tol);
  const double value = toDouble(type, got);
  double epsOut, epsAcc, tiny, maxFinite;
  typeLimits(type, &epsOut, &epsAcc, &tiny, &maxFinite);
  if (isnan(ref)) return isnan(value);
  if (isinf(ref) || fabs(ref) > maxFinite * (1 + epsOut)) return isinf(value) && (value > 0) == (ref > 0);
  if (!isfinite(value)) return 0;
  return fabs(value - ref) <= tol;
}

const char* refFormat(fcclDataType_t type, uint64_t bits, char* buf, size_t size) {
  if (refTypeIsFloat(type))
    snprintf(buf, size, "%.9g (0x%llx)", toDouble(type, bits), (unsigned long long)bits);
  else if (isSigned(type))
    snprintf(buf, size, "%lld", (long long)signExtend(type, bits));
  else
    snprintf(buf, size, "%llu", (unsigned long long)bits);
  return buf;
}

size_t refCheckBuffer(fcclDataType_t type, fcclRedOp_t op, uint64_t seed, uint64_t call, int nranks,
                      const void* got, size_t count, char* message, size_t messageSize) {
  size_t bad = 0;
  size_t used = 0;
  if (message && messageSize) message[0] = '\0';
  uint64_t in[REF_MAX_RANKS];
  for (size_t i = 0; i < count; i++) {
    for (int r = 0; r < nranks; r++) in[r] = refInputBits(type, seed, call, r, i, NULL);
    const uint64_t value = refLoadBits(type, got, i);
    if (refCheckElement(type, op, value, in, nranks)) continue;
    if (bad < 4 && message && used + 1 < messageSize) {
      char a[64], b[64];
      int w = snprintf(message + used, messageSize - used, "%s[%zu] = %s, expected %s; ", bad ? "" : "element", i,
                       refFormat(type, value, a, sizeof(a)),
                       refFormat(type, refReduceBits(type, op, in, nranks), b, sizeof(b)));
      if (w > 0) used += (size_t)w < messageSize - used ? (size_t)w : messageSize - used - 1;
    }
    bad++;
  }
  return bad;
}

uint64_t refHash(const void* data, size_t bytes) {
  const unsigned char* p = data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
