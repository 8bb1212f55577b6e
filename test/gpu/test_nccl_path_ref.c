/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL path's test (test_nccl_path.c): NCCL's results against the float64 host reference. Reductions within
 * the dtype's tolerance under NCCL's own rules (float max/min ignore NaN, 16-bit floats accumulate in their own
 * precision, a product in any order or tree); moves bit for bit.
 */
#include "test_nccl_path.h"

#include "param.h"
#include "test.h"
#include "test_allreduce_common.h"
#include "test_allreduce_ref.h"
#include "test_shm.h"
#include "test_wire.h"

#include <cuda_runtime.h>
#include <fccl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- NCCL's results against the reference ---- */

static double toDouble(fcclDataType_t type, uint64_t bits) {
  if (type == fcclFloat16) return refHalfToFloat((uint16_t)bits);
  if (type == fcclBfloat16) return refBf16ToFloat((uint16_t)bits);
  if (type == fcclFloat32) {
    float f;
    uint32_t b = (uint32_t)bits;
    memcpy(&f, &b, sizeof(f));
    return f;
  }
  double d;
  memcpy(&d, &bits, sizeof(d));
  return d;
}

/* x rounded to the element's own precision, as NCCL stores each partial result. */
static double roundToType(fcclDataType_t type, double x) {
  if (type == fcclFloat16) return refHalfToFloat(refFloatToHalf((float)x));
  if (type == fcclBfloat16) return refBf16ToFloat(refFloatToBf16((float)x));
  if (type == fcclFloat32) return (float)x;
  return x;
}

/* Whether g is v, an order's product: within 2 ulps, the same infinity, or NaN where an overflowed partial product
 * met a zero input (or an underflowed one an infinity). */
static int orderGives(double g, double v, double eps, double tiny) {
  if (isnan(v)) return isnan(g);
  if (isinf(v)) return g == v;
  return fabs(g - v) <= 2.0 * eps * fabs(v) + tiny;
}

/* Whether g is one of the products NCCL's reduction orders give, each partial product rounded to the element's
 * precision (an intermediate that overflows or goes subnormal stays so, whatever the final value): every
 * sequential order of the n <= 4 inputs and, for 4, the three pairings. */
static int productOfSomeOrder(fcclDataType_t type, double g, const double* x, int n, double eps, double tiny) {
  int order[4] = {0, 1, 2, 3};
  for (;;) {
    double v = x[order[0]];
    for (int k = 1; k < n; k++) v = roundToType(type, v * x[order[k]]);
    if (orderGives(g, v, eps, tiny)) return 1;
    /* next permutation of order[0..n) */
    int i = n - 2;
    while (i >= 0 && order[i] > order[i + 1]) i--;
    if (i < 0) break;
    int j = n - 1;
    while (order[j] < order[i]) j--;
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) {
      t = order[a];
      order[a] = order[b];
      order[b] = t;
    }
  }
  if (n == 4) {
    static const int pairs[3][4] = {{0, 1, 2, 3}, {0, 2, 1, 3}, {0, 3, 1, 2}};
    for (int p = 0; p < 3; p++) {
      const double v = roundToType(type, roundToType(type, x[pairs[p][0]] * x[pairs[p][1]]) *
                                             roundToType(type, x[pairs[p][2]] * x[pairs[p][3]]));
      if (orderGives(g, v, eps, tiny)) return 1;
    }
  }
  return 0;
}

/* Whether g is a product NCCL may give of more inputs than productOfSomeOrder emulates, in whatever order or tree:
 * every partial product is a subset's, rounded with a relative error of eps while normal and an absolute one of
 * eps * minNormal while subnormal (an error the other inputs' product carries to the end), infinite past
 * maxFinite. So an infinity (and with it a NaN against a zero) is acceptable only where some subset's product
 * overflows, and a loss of precision beyond n roundings only where some subset's goes below minNormal. Subsets'
 * magnitudes in log2, since they need not fit the type, nor a double. */
static int productOfAnyTree(double g, const double* x, int n, double eps, double minNormal, double maxFinite) {
  double logs[REF_MAX_RANKS], logTotal = 0;
  long double exact = 1; /* x86's 64-bit mantissa and 15-bit exponent: exact enough for every type */
  int m = 0, zeros = 0, infs = 0, negative = 0;
  for (int r = 0; r < n; r++) {
    negative ^= signbit(x[r]) != 0;
    if (x[r] == 0) {
      zeros++;
    } else if (isinf(x[r])) {
      infs++;
    } else {
      logs[m] = log2(fabs(x[r]));
      logTotal += logs[m++];
      exact *= fabsl((long double)x[r]);
    }
  }
  const double product = (negative ? -1.0 : 1.0) * (double)exact;
  if (!zeros && !infs && isfinite(g) && fabs(g - product) <= 4.0 * n * eps * fabs(product) + n * minNormal) return 1;
  /* margins of 1% in log2 for the partials' own rounding errors */
  const double logMax = log2(maxFinite) - 0.01, logMinNormal = log2(minNormal) + 0.01;
  const double logHalfStep = log2(eps) + log2(minNormal); /* for float64 2^-1075, no double */
  int overflows = 0, flushes = 0;
  double carried = 0; /* the bound on what subnormal partials lose, as it reaches the result */
  for (uint32_t set = 1; set < (1u << m); set++) {
    if (!(set & (set - 1))) continue; /* an input alone is exact */
    double l = 0;
    for (int k = 0; k < m; k++)
      if (set >> k & 1) l += logs[k];
    if (l >= logMax) overflows = 1;
    if (l < logMinNormal) carried += exp2(logHalfStep + logTotal - l);
    if (l < logHalfStep + 0.01) flushes = 1;
  }
  if (zeros && infs) return isnan(g);
  if (isnan(g)) return (zeros || flushes) && (infs || overflows);
  if (zeros) return g == 0;
  const int sameSign = (signbit(g) != 0) == negative;
  if (infs || isinf(g)) return isinf(g) && sameSign && (infs || overflows);
  return fabs(g - product) <= 4.0 * n * eps * fabs(product) + 2.0 * carried + n * minNormal;
}

/* Whether got is what NCCL may legitimately give: fccl's result (refCheckElement) or, for floats, NCCL's rules:
 * max/min skip NaN, and sums/products are rounded to the element's own precision at each of up to nranks steps
 * (a partial product may overflow or lose bits to the subnormal range that the exact product does not: products of
 * up to 4 ranks are emulated in every order, those of more bounded over every subset). */
static int ncclAcceptable(fcclDataType_t type, fcclRedOp_t op, uint64_t got, const uint64_t* in, int n) {
  if (refCheckElement(type, op, got, in, n)) return 1;
  if (!refTypeIsFloat(type)) return 0;
  const double eps = type == fcclFloat16    ? 0x1p-11
                     : type == fcclBfloat16 ? 0x1p-8
                     : type == fcclFloat32  ? 0x1p-24
                                            : 0x1p-53;
  const double maxFinite = type == fcclFloat16 ? 65504.0 : type == fcclFloat64 ? 1.79e308 : 3.38e38;
  const double minNormal = type == fcclFloat16 ? 0x1p-14 : type == fcclFloat64 ? 0x1p-1022 : 0x1p-126;
  const double g = toDouble(type, got);
  int anyNan = 0;
  double best = NAN, absSum = 0;
  for (int r = 0; r < n; r++) {
    const double x = toDouble(type, in[r]);
    if (isnan(x)) {
      anyNan = 1;
      continue;
    }
    if (isnan(best) || (op == fcclMax ? x > best : x < best)) best = x;
    absSum += fabs(x);
  }
  if (op == fcclMax || op == fcclMin) return g == best || (anyNan && isnan(g));
  if (anyNan) return isnan(g);
  if (op == fcclProd) {
    double x[REF_MAX_RANKS];
    for (int r = 0; r < n; r++) x[r] = toDouble(type, in[r]);
    return n <= 4 ? productOfSomeOrder(type, g, x, n, eps, 2.0 * eps * minNormal)
                  : productOfAnyTree(g, x, n, eps, minNormal, maxFinite);
  }
  double tol = 0;
  const double ref = refReduceDouble(type, op, in, n, &tol);
  if (isnan(ref)) return isnan(g);
  if (isinf(g)) return absSum > maxFinite / 2;
  const double scale = op == fcclAvg ? absSum / n : absSum;
  return fabs(g - ref) <= 4.0 * n * eps * scale + n * minNormal;
}

/* The hierarchical all-reduce's float max/min reduce with two rules: inside a host fccl's (a NaN wins), across hosts
 * NCCL's (a number wins over a NaN). got is acceptable when it is that two-level result, the hosts being of
 * hostRanks ranks each (0: not hierarchical): consecutive ranks, or with interleaved rank r on host r % hosts. */
static int hierMaxMinAcceptable(fcclDataType_t type, fcclRedOp_t op, uint64_t got, const uint64_t* in, int n,
                                int hostRanks, int interleaved) {
  if (hostRanks < 2 || (op != fcclMax && op != fcclMin) || !refTypeIsFloat(type)) return 0;
  const int hosts = n / hostRanks;
  double best = NAN;
  for (int h = 0; h < hosts; h++) {
    double part = NAN;
    int partNan = 0;
    for (int r = 0; r < n; r++) {
      if ((interleaved ? r % hosts : r / hostRanks) != h) continue;
      const double x = toDouble(type, in[r]);
      if (isnan(x))
        partNan = 1;
      else if (isnan(part) || (op == fcclMax ? x > part : x < part))
        part = x;
    }
    if (partNan) continue; /* this host's partial is a NaN: NCCL takes the other hosts' */
    if (isnan(best) || (op == fcclMax ? part > best : part < best)) best = part;
  }
  const double g = toDouble(type, got);
  return isnan(best) ? isnan(g) : g == best;
}

/* Reduced output: element i of this rank's output is the reduction of every rank's input element first + i.
 * hostRanks > 0: the output of the hierarchical all-reduce over hosts of that many ranks (interleaved: as above). */
size_t checkReduced(fcclDataType_t type, fcclRedOp_t op, uint64_t seed, uint64_t call, int nranks, int hostRanks,
                    int interleaved, uint64_t first, const void* got, size_t count, char* msg, size_t size) {
  size_t bad = 0;
  uint64_t in[REF_MAX_RANKS];
  msg[0] = '\0';
  for (size_t i = 0; i < count; i++) {
    for (int r = 0; r < nranks; r++) in[r] = refInputBits(type, seed, call, r, first + i, NULL);
    const uint64_t value = refLoadBits(type, got, i);
    if (ncclAcceptable(type, op, value, in, nranks) ||
        hierMaxMinAcceptable(type, op, value, in, nranks, hostRanks, interleaved))
      continue;
    if (bad++ == 0) {
      char a[64], b[64];
      snprintf(msg, size, "element %zu = %s, reference %s", i, refFormat(type, value, a, sizeof(a)),
               refFormat(type, refReduceBits(type, op, in, nranks), b, sizeof(b)));
    }
  }
  return bad;
}

/* A pre-multiplied sum: fccl's result (refCheckPreMulSum), or NCCL's, whose products are rounded to the element's
 * precision and summed in it in any order or tree; integers exactly. */
static int preMulAcceptable(fcclDataType_t type, uint64_t scalar, uint64_t got, const uint64_t* in, int n) {
  if (refCheckPreMulSum(type, scalar, got, in, n)) return 1;
  if (!refTypeIsFloat(type)) return 0;
  const double eps = type == fcclFloat16    ? 0x1p-11
                     : type == fcclBfloat16 ? 0x1p-8
                     : type == fcclFloat32  ? 0x1p-24
                                            : 0x1p-53;
  const double maxFinite = type == fcclFloat16 ? 65504.0 : type == fcclFloat64 ? 1.79e308 : 3.38e38;
  const double minNormal = type == fcclFloat16 ? 0x1p-14 : type == fcclFloat64 ? 0x1p-1022 : 0x1p-126;
  const double g = toDouble(type, got), s = toDouble(type, scalar);
  double ref = 0, absSum = 0;
  for (int r = 0; r < n; r++) {
    const double product = toDouble(type, in[r]) * s;
    ref += product;
    absSum += fabs(product);
  }
  if (isnan(ref)) return isnan(g);
  if (isinf(g) || isnan(g)) return absSum > maxFinite / 2; /* a partial sum or a rounded product overflowed */
  return fabs(g - ref) <= 4.0 * (n + 1) * eps * absSum + n * minNormal;
}

size_t checkPreMulSum(fcclDataType_t type, uint64_t scalar, uint64_t seed, uint64_t call, int nranks, uint64_t first,
                      const void* got, size_t count, char* msg, size_t size) {
  size_t bad = 0;
  uint64_t in[REF_MAX_RANKS];
  msg[0] = '\0';
  for (size_t i = 0; i < count; i++) {
    for (int r = 0; r < nranks; r++) in[r] = refInputBits(type, seed, call, r, first + i, NULL);
    const uint64_t value = refLoadBits(type, got, i);
    if (preMulAcceptable(type, scalar, value, in, nranks)) continue;
    if (bad++ == 0) {
      char a[64], b[64];
      snprintf(msg, size, "element %zu = %s, reference %s", i, refFormat(type, value, a, sizeof(a)),
               refFormat(type, refPreMulSumBits(type, scalar, in, nranks), b, sizeof(b)));
    }
  }
  return bad;
}

/* Moved output: element i equals element first + i of `from`'s input, bit for bit. */
size_t checkMoved(fcclDataType_t type, uint64_t seed, uint64_t call, int from, uint64_t first, const void* got,
                  size_t count, char* msg, size_t size) {
  size_t bad = 0;
  msg[0] = '\0';
  for (size_t i = 0; i < count; i++) {
    const uint64_t want = refInputBits(type, seed, call, from, first + i, NULL);
    const uint64_t value = refLoadBits(type, got, i);
    if (value == want) continue;
    if (bad++ == 0) {
      char a[64], b[64];
      snprintf(msg, size, "element %zu = %s, expected %s (rank %d's element %llu)", i,
               refFormat(type, value, a, sizeof(a)), refFormat(type, want, b, sizeof(b)), from,
               (unsigned long long)(first + i));
    }
  }
  return bad;
}
