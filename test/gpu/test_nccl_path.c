/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL path and fccl's NCCL-carried calls, on forked ranks that share one GPU (or use several when there are).
 * NCCL refuses two ranks on one GPU of one host, so every rank claims its own NCCL host (NCCL_HOSTID) and NCCL runs
 * them over its socket transport on loopback; FCCL_HOSTID decides whether fccl sees one host or several.
 *
 *   nccl N        FCCL_PATH=nccl, one fccl host: every call (the four collectives on random data of several types and
 *                 ops, barrier, send/recv in a group, all-to-all, registration, graph capture) against a float64 host
 *                 reference; argument checks of the new calls.
 *   hosts N       every rank its own FCCL_HOSTID: NCCL chosen automatically (the reason names the hosts); same calls.
 *   hier          4 ranks as 2 simulated hosts x 2 (FCCL_HOSTID per pair): the hierarchical path, chosen automatically;
 *                 the same calls, plus all-reduces of every type and op at counts with and without a remainder over
 *                 the 2 local ranks, and the all-reduce refused inside a group; the hierarchical all-gather,
 *                 broadcast (every root) and reduce-scatter (every op) in place and not, captured in a graph, and
 *                 the all-gather in a group.
 *   many [N]      9 ranks (N) on one fccl host: more than fccl's kernels take, so NCCL chosen automatically (the
 *                 reason says so), as on a 16-GPU NVSwitch system; the same calls.
 *   hierinterleaved  the hierarchical path with ranks 0, 2 on one host and 1, 3 on the other: the same calls and
 *                 extras (the all-gather and the reduce-scatter then run on the world NCCL communicator, the
 *                 broadcast maps the root to its host).
 *   hierforced    the same layout with FCCL_PATH=hier: the hierarchical path, the reason says it was asked for;
 *                 the same calls.
 *   hierrefused   FCCL_PATH=hier with one fccl host: init fails on every rank with fcclInvalidUsage saying why.
 *   p2pdisable    FCCL_P2P_DISABLE=1: NCCL; same calls.
 *   fcclp2p N     one host identity for fccl, distinct NCCL_HOSTIDs, FCCL_NCCL_COMM=init: the fccl path, with
 *                 send/recv/all-to-all through the NCCL communicator; same calls.
 *   p2pmissing    the fccl path without an NCCL communicator (FCCL_NCCL_COMM's default, off): fcclSend and
 *                 fcclAllToAll fail with fcclInvalidUsage saying why, the collectives work.
 *   abort         NCCL path: rank 0's all-reduce that rank 1 never joins is stopped by fcclCommAbort, promptly.
 *   dead          NCCL path, one fccl host: rank 1 exits; rank 0's fcclCommGetAsyncError reports it (fccl's
 *                 monitor), and fcclCommAbort returns.
 *   deadhosts     the same with every rank its own host: NCCL's own error detection reports it.
 *   vanishedhosts two ranks, each its own host in a network namespace of its own, joined by a veth pair
 *                 (test_wire.h) that carries fccl's bootstrap, its peer links and NCCL's sockets; while both ranks'
 *                 all-reduces wait in NCCL, rank 1 takes its end down (no end of stream, no reset: a host that
 *                 stopped answering): each rank's fcclCommGetAsyncError reports fcclRemoteError naming the other
 *                 from the peer link's keepalive, within its bound, and fcclCommAbort returns with NCCL's kernel
 *                 stopped. Skipped where the wire cannot be laid (it needs what root has).
 *   hierabort     hierarchical path, 4 ranks: the first host's all-reduce, which the second host never joins (its
 *                 NCCL step across hosts waits), is stopped by fcclCommAbort on both of its ranks, promptly.
 *   hierdead      hierarchical path, 4 ranks: rank 1 exits; every other rank's fcclCommGetAsyncError reports an error
 *                 (rank 0 through fccl's monitor, the others through NCCL or their own peers' aborts), bounded.
 * Results of NCCL's reductions are checked within the dtype's tolerance with NCCL's own rules (float max/min ignore
 * NaN, 16-bit floats accumulate in their own precision); moves (all-gather, broadcast, send/recv, all-to-all)
 * bit for bit.
 */
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

struct testArgs {
  const char* mode;
  struct collShared* shared;
  uint64_t seed;
  int gpus;
  struct testWire* wire; /* vanishedhosts: laid before the ranks are forked */
};

/* ---- identities ---- */

enum { FCCL_HOST_ONE = 0, FCCL_HOST_PER_RANK = 1, FCCL_HOST_PER_PAIR = 2, FCCL_HOST_INTERLEAVED = 3 };

/* Before any fccl call of the rank: its NCCL host (always its own), its fccl host, and the test's knobs. */
static void setIdentity(int rank, int fcclHosts, const char* path) {
  char value[96];
  snprintf(value, sizeof(value), "fccl-test-%d-rank%d", (int)getppid(), rank);
  setenv("NCCL_HOSTID", value, 1);
  if (fcclHosts == FCCL_HOST_PER_RANK) setenv("FCCL_HOSTID", value, 1);
  if (fcclHosts == FCCL_HOST_PER_PAIR || fcclHosts == FCCL_HOST_INTERLEAVED) {
    /* Pairs of consecutive ranks, or ranks 0, 2 on one host and 1, 3 on the other (of 4). */
    snprintf(value, sizeof(value), "fccl-test-%d-host%d", (int)getppid(),
             fcclHosts == FCCL_HOST_PER_PAIR ? rank / 2 : rank % 2);
    setenv("FCCL_HOSTID", value, 1);
  }
  if (path) setenv("FCCL_PATH", path, 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1); /* never multicast objects */
  setenv("NCCL_NET", "Socket", 0);    /* one machine posing as several hosts: loopback sockets */
  fcclParamResetForTest();
}

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
  const double eps = type == fcclFloat16 ? 0x1p-11 : type == fcclBfloat16 ? 0x1p-8 : type == fcclFloat32 ? 0x1p-24
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
static size_t checkReduced(fcclDataType_t type, fcclRedOp_t op, uint64_t seed, uint64_t call, int nranks,
                           int hostRanks, int interleaved, uint64_t first, const void* got, size_t count, char* msg,
                           size_t size) {
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

/* Moved output: element i equals element first + i of `from`'s input, bit for bit. */
static size_t checkMoved(fcclDataType_t type, uint64_t seed, uint64_t call, int from, uint64_t first, const void* got,
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

/* ---- one rank's calls ---- */

struct rankState {
  fcclComm_t comm;
  int rank, nranks;
  uint64_t seed;
  uint64_t call; /* numbers the inputs: every rank counts the same calls */
  int hostRanks; /* the hierarchical path's ranks per host (its all-reduce's results), 0 on the others */
  int hostsInterleaved; /* the hierarchical path's hosts interleaved: rank r on host r % hosts */
  cudaStream_t stream;
  void* send;    /* device, capacity bytes each */
  void* recv;
  void* host;    /* pinned */
  size_t capacity;
};

#define CHECK_FCCL(what, call)                                                                                    \
  do {                                                                                                            \
    fcclResult_t r_ = (call);                                                                                     \
    if (r_ != fcclSuccess) {                                                                                      \
      testFail(__FILE__, __LINE__, "rank %d: %s: %s: %s: %s", s->rank, (what), #call, fcclGetErrorString(r_),     \
               fcclGetLastError(NULL));                                                                           \
      return 1;                                                                                                   \
    }                                                                                                             \
  } while (0)

#define CHECK_CUDA(what, call)                                                                                    \
  do {                                                                                                            \
    cudaError_t e_ = (call);                                                                                      \
    if (e_ != cudaSuccess) {                                                                                      \
      testFail(__FILE__, __LINE__, "rank %d: %s: %s: %s", s->rank, (what), #call, cudaGetErrorString(e_));        \
      return 1;                                                                                                   \
    }                                                                                                             \
  } while (0)

static size_t typeBytes(fcclDataType_t type) {
  switch (type) {
    case fcclInt8: case fcclUint8: return 1;
    case fcclFloat16: case fcclBfloat16: return 2;
    case fcclInt32: case fcclUint32: case fcclFloat32: return 4;
    default: return 8;
  }
}

/* This rank's input of the current call (elements [first, first + count)) into dst on the device, on the call's
 * stream, so that the call is ordered after it (the host buffer is not touched again before download syncs). */
static int upload(struct rankState* s, fcclDataType_t type, void* dst, uint64_t first, size_t count) {
  refFillInput(type, s->seed, s->call, s->rank, first, s->host, count);
  CHECK_CUDA("upload", cudaMemcpyAsync(dst, s->host, count * typeBytes(type), cudaMemcpyHostToDevice, s->stream));
  return 0;
}

/* Poisons a device buffer, on the call's stream, so that elements a call does not write show. */
static int poison(struct rankState* s, void* dst, size_t bytes) {
  CHECK_CUDA("poison", cudaMemsetAsync(dst, 0xa5, bytes, s->stream));
  return 0;
}

static int download(struct rankState* s, const void* src, size_t bytes) {
  CHECK_CUDA("sync", cudaStreamSynchronize(s->stream));
  CHECK_CUDA("download", cudaMemcpy(s->host, src, bytes, cudaMemcpyDeviceToHost));
  return 0;
}

static int report(struct rankState* s, const char* what, fcclDataType_t type, fcclRedOp_t op, size_t count,
                  size_t bad, const char* msg) {
  EXPECT_MSG(bad == 0, "rank %d: call %llu: %s %s %s x %zu: %zu wrong: %s", s->rank, (unsigned long long)s->call,
             what, refTypeName(type), refOpName(op), count, bad, msg);
  return bad != 0;
}

static int runAllReduce(struct rankState* s, fcclDataType_t type, fcclRedOp_t op, size_t count, int inPlace) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  void* out = inPlace ? s->send : s->recv;
  if (poison(s, s->recv, bytes) || upload(s, type, s->send, 0, count)) return 1;
  CHECK_FCCL("all-reduce", fcclAllReduce(s->send, out, count, type, op, s->comm, s->stream));
  if (download(s, out, bytes)) return 1;
  const size_t bad =
      checkReduced(type, op, s->seed, s->call, s->nranks, s->hostRanks, s->hostsInterleaved, 0, s->host, count, msg,
                   sizeof(msg));
  s->call++;
  return report(s, inPlace ? "all-reduce in place" : "all-reduce", type, op, count, bad, msg);
}

/* In place: recvbuf is this rank's block of sendbuf. On the hierarchical path with consecutive hosts the
 * reduce-scatter is hierarchical (its max/min take both levels' rules); with interleaved hosts it is NCCL's. */
static int runReduceScatter(struct rankState* s, fcclDataType_t type, fcclRedOp_t op, size_t count, int inPlace) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  char* recv = inPlace ? (char*)s->send + (size_t)s->rank * bytes : s->recv;
  if (poison(s, s->recv, bytes) || upload(s, type, s->send, 0, count * (size_t)s->nranks)) return 1;
  CHECK_FCCL("reduce-scatter", fcclReduceScatter(s->send, recv, count, type, op, s->comm, s->stream));
  if (download(s, recv, bytes)) return 1;
  const int hostRanks = s->hostsInterleaved ? 0 : s->hostRanks;
  const size_t bad = checkReduced(type, op, s->seed, s->call, s->nranks, hostRanks, 0, (uint64_t)s->rank * count,
                                  s->host, count, msg, sizeof(msg));
  s->call++;
  return report(s, inPlace ? "reduce-scatter in place" : "reduce-scatter", type, op, count, bad, msg);
}

/* In place: this rank's block is recvbuf's block of this rank. */
static int runAllGather(struct rankState* s, fcclDataType_t type, size_t count, int inPlace) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  char* send = inPlace ? (char*)s->recv + (size_t)s->rank * bytes : s->send;
  if (poison(s, s->recv, bytes * (size_t)s->nranks) || upload(s, type, send, 0, count)) return 1;
  CHECK_FCCL("all-gather", fcclAllGather(send, s->recv, count, type, s->comm, s->stream));
  if (download(s, s->recv, bytes * (size_t)s->nranks)) return 1;
  size_t bad = 0;
  for (int r = 0; r < s->nranks; r++)
    bad += checkMoved(type, s->seed, s->call, r, 0, (char*)s->host + (size_t)r * bytes, count, msg, sizeof(msg));
  s->call++;
  return report(s, inPlace ? "all-gather in place" : "all-gather", type, fcclSum, count, bad, msg);
}

/* In place: the root's input is in recvbuf. */
static int runBroadcast(struct rankState* s, fcclDataType_t type, size_t count, int root, int inPlace) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  void* send = inPlace ? s->recv : s->send;
  if (poison(s, s->recv, bytes) || upload(s, type, send, 0, count)) return 1;
  CHECK_FCCL("broadcast", fcclBroadcast(send, s->recv, count, type, root, s->comm, s->stream));
  if (download(s, s->recv, bytes)) return 1;
  const size_t bad = checkMoved(type, s->seed, s->call, root, 0, s->host, count, msg, sizeof(msg));
  s->call++;
  return report(s, inPlace ? "broadcast in place" : "broadcast", type, fcclSum, count, bad, msg);
}

/* A ring exchange in a group: send to rank + 1, receive from rank - 1 (nested groups, as a pipeline stage's). */
static int runSendRecv(struct rankState* s, fcclDataType_t type, size_t count) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  const int next = (s->rank + 1) % s->nranks, prev = (s->rank + s->nranks - 1) % s->nranks;
  if (poison(s, s->recv, bytes) || upload(s, type, s->send, 0, count)) return 1;
  CHECK_FCCL("group", fcclGroupStart());
  CHECK_FCCL("group", fcclGroupStart());
  CHECK_FCCL("send", fcclSend(s->send, count, type, next, s->comm, s->stream));
  CHECK_FCCL("group", fcclGroupEnd());
  CHECK_FCCL("recv", fcclRecv(s->recv, count, type, prev, s->comm, s->stream));
  CHECK_FCCL("group", fcclGroupEnd());
  if (download(s, s->recv, bytes)) return 1;
  const size_t bad = checkMoved(type, s->seed, s->call, prev, 0, s->host, count, msg, sizeof(msg));
  s->call++;
  return report(s, "send/recv", type, fcclSum, count, bad, msg);
}

static int runAllToAll(struct rankState* s, fcclDataType_t type, size_t count) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  const size_t total = bytes * (size_t)s->nranks;
  if (poison(s, s->recv, total) || upload(s, type, s->send, 0, count * (size_t)s->nranks)) return 1;
  CHECK_FCCL("all-to-all", fcclAllToAll(s->send, s->recv, count, type, s->comm, s->stream));
  if (download(s, s->recv, total)) return 1;
  size_t bad = 0;
  for (int p = 0; p < s->nranks; p++) /* block p came from rank p's block for us */
    bad += checkMoved(type, s->seed, s->call, p, (uint64_t)s->rank * count, (char*)s->host + (size_t)p * bytes,
                      count, msg, sizeof(msg));
  s->call++;
  return report(s, "all-to-all", type, fcclSum, count, bad, msg);
}

/* Every rank enters the barrier; rank 0 enters late: nobody's stream passes it before rank 0's host entered. */
static int runBarrier(struct rankState* s, struct collShared* shared) {
  if (s->rank == 0) {
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 200 * 1000000};
    nanosleep(&pause, NULL);
    __atomic_store_n(&shared->stamps[0][0], collNowNs(), __ATOMIC_RELEASE);
  }
  CHECK_FCCL("barrier", fcclBarrier(s->comm, s->stream));
  CHECK_CUDA("barrier", cudaStreamSynchronize(s->stream));
  const int64_t passed = collNowNs();
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  const int64_t entered = __atomic_load_n(&shared->stamps[0][0], __ATOMIC_ACQUIRE);
  EXPECT_MSG(entered != 0 && passed >= entered, "rank %d: passed the barrier at %lld, rank 0 entered at %lld",
             s->rank, (long long)passed, (long long)entered);
  return 0;
}

/* Registration: a registered buffer works in a call, is counted, and a handle is released once only. */
static int runRegistered(struct rankState* s) {
  fcclRegHandle_t a = NULL, b = NULL;
  fcclMemStats_t before = {.size = sizeof(fcclMemStats_t)}, during = {.size = sizeof(fcclMemStats_t)};
  CHECK_FCCL("stats", fcclCommGetMemStats(s->comm, &before));
  CHECK_FCCL("register", fcclCommRegister(s->comm, s->send, s->capacity, &a));
  CHECK_FCCL("register", fcclCommRegister(s->comm, s->recv, s->capacity, &b));
  CHECK_FCCL("stats", fcclCommGetMemStats(s->comm, &during));
  EXPECT_EQ_INT(during.commRegistrations, before.commRegistrations + 2);
  int failed = runAllReduce(s, fcclFloat32, fcclSum, 4099, 0);
  CHECK_FCCL("deregister", fcclCommDeregister(s->comm, a));
  CHECK_FCCL("deregister", fcclCommDeregister(s->comm, b));
  /* Every rank makes the same bad call: refused on each (fcclRemoteError where the fccl path's exchange tells a
   * rank of its peers' refusal first). */
  fcclResult_t bad = fcclCommRegister(s->comm, s->send, 0, &a);
  EXPECT_MSG(bad == fcclInvalidArgument || bad == fcclRemoteError, "rank %d: register of 0 bytes returned %d",
             s->rank, bad);
  bad = fcclCommRegister(s->comm, s->send, 64, NULL);
  EXPECT_MSG(bad == fcclInvalidArgument || bad == fcclRemoteError, "rank %d: register without a handle returned %d",
             s->rank, bad);
  return failed;
}

/* Graph capture: an all-reduce, a barrier and a ring exchange captured once, replayed with new inputs. */
static int runGraph(struct rankState* s) {
  const size_t count = 3001;
  const size_t bytes = count * sizeof(float);
  const int next = (s->rank + 1) % s->nranks, prev = (s->rank + s->nranks - 1) % s->nranks;
  char* recvExchange = (char*)s->recv + ((bytes + 255) / 256 * 256);
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CHECK_CUDA("capture", cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeGlobal));
  fcclResult_t r1 = fcclAllReduce(s->send, s->recv, count, fcclFloat32, fcclSum, s->comm, s->stream);
  fcclResult_t r2 = fcclBarrier(s->comm, s->stream);
  fcclResult_t r3 = fcclGroupStart();
  fcclResult_t r4 = fcclSend(s->send, count, fcclFloat32, next, s->comm, s->stream);
  fcclResult_t r5 = fcclRecv(recvExchange, count, fcclFloat32, prev, s->comm, s->stream);
  fcclResult_t r6 = fcclGroupEnd();
  CHECK_CUDA("capture", cudaStreamEndCapture(s->stream, &graph));
  EXPECT_MSG(r1 == fcclSuccess && r2 == fcclSuccess && r3 == fcclSuccess && r4 == fcclSuccess && r5 == fcclSuccess &&
                 r6 == fcclSuccess,
             "rank %d: captured calls returned %d %d %d %d %d %d: %s", s->rank, r1, r2, r3, r4, r5, r6,
             fcclGetLastError(NULL));
  CHECK_CUDA("instantiate", cudaGraphInstantiate(&exec, graph, 0));
  int failed = 0;
  for (int replay = 0; replay < 3 && !failed; replay++) {
    char msg[256];
    if (poison(s, s->recv, 2 * bytes + 256) || upload(s, fcclFloat32, s->send, 0, count)) return 1;
    CHECK_CUDA("replay", cudaGraphLaunch(exec, s->stream));
    if (download(s, s->recv, bytes)) return 1;
    size_t bad = checkReduced(fcclFloat32, fcclSum, s->seed, s->call, s->nranks, s->hostRanks, s->hostsInterleaved, 0,
                              s->host, count, msg,
                              sizeof(msg));
    failed |= report(s, "graph all-reduce", fcclFloat32, fcclSum, count, bad, msg);
    if (download(s, recvExchange, bytes)) return 1;
    bad = checkMoved(fcclFloat32, s->seed, s->call, prev, 0, s->host, count, msg, sizeof(msg));
    failed |= report(s, "graph send/recv", fcclFloat32, fcclSum, count, bad, msg);
    s->call++;
  }
  CHECK_CUDA("graph", cudaGraphExecDestroy(exec));
  CHECK_CUDA("graph", cudaGraphDestroy(graph));
  return failed;
}

/* The new calls' argument checks (local: nothing reaches NCCL, so the ranks stay in step). */
static void runInvalid(struct rankState* s) {
  EXPECT_EQ_INT(fcclSend(s->send, 4, fcclFloat32, s->nranks, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "peer");
  EXPECT_EQ_INT(fcclRecv(s->recv, 4, fcclFloat32, -1, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclSend(NULL, 4, fcclFloat32, 0, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "sendbuf is NULL");
  EXPECT_EQ_INT(fcclRecv(NULL, 4, fcclFloat32, 0, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "recvbuf is NULL");
  EXPECT_EQ_INT(fcclSend(s->send, 4, (fcclDataType_t)42, 0, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclAllToAll(s->send, (char*)s->send + 4, 4, fcclFloat32, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "overlap");
  EXPECT_EQ_INT(fcclSend(s->send, 4, fcclFloat32, 0, NULL, s->stream), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclGroupEnd(), fcclInvalidUsage);
  EXPECT_EQ_INT(fcclAllReduce(s->send, s->recv, 4, fcclFloat32, (fcclRedOp_t)9, s->comm, s->stream),
                fcclInvalidArgument);
  EXPECT_EQ_INT(fcclSend(s->send, 0, fcclFloat32, 0, s->comm, s->stream), fcclSuccess); /* count 0: nothing */
  fcclPath_t path;
  EXPECT_EQ_INT(fcclCommGetPath(s->comm, NULL, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommGetPath(NULL, &path, NULL), fcclInvalidArgument);
}

static int stateInit(struct rankState* s, fcclComm_t comm, int rank, int nranks, uint64_t seed) {
  memset(s, 0, sizeof(*s));
  s->comm = comm;
  s->rank = rank;
  s->nranks = nranks;
  s->seed = seed;
  s->capacity = (size_t)65537 * 8 * REF_MAX_RANKS + 4096;
  CHECK_CUDA("init", cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  CHECK_CUDA("init", cudaMalloc(&s->send, s->capacity));
  CHECK_CUDA("init", cudaMalloc(&s->recv, s->capacity));
  CHECK_CUDA("init", cudaMallocHost(&s->host, s->capacity));
  return 0;
}

static void stateFini(struct rankState* s) {
  if (s->stream) cudaStreamDestroy(s->stream);
  cudaFree(s->send);
  cudaFree(s->recv);
  cudaFreeHost(s->host);
}

/* Every call on random data. Every rank makes the same calls in the same order. */
static int runEverything(struct rankState* s, struct collShared* shared) {
  static const fcclDataType_t types[] = {fcclFloat32, fcclBfloat16, fcclFloat16, fcclFloat64, fcclInt32,
                                         fcclUint8,   fcclInt64};
  static const fcclRedOp_t ops[] = {fcclSum, fcclProd, fcclMax, fcclMin, fcclAvg};
  static const size_t counts[] = {1, 7, 1023, 65537};
  int failed = 0;
  runInvalid(s);
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
      for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        failed += runAllReduce(s, types[t], ops[o], counts[c], (int)(c % 2));
        if (c < 3) failed += runReduceScatter(s, types[t], ops[o], counts[c], 0);
      }
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
      failed += runAllGather(s, types[t], counts[c], 0);
      failed += runBroadcast(s, types[t], counts[c], (int)(c % (size_t)s->nranks), 0);
      failed += runSendRecv(s, types[t], counts[c]);
      failed += runAllToAll(s, types[t], counts[c]);
    }
  failed += runBarrier(s, shared);
  failed += runGraph(s);
  failed += runRegistered(s); /* last: it ends with refused registrations */
  return failed;
}

/* The hierarchical all-gather, broadcast and reduce-scatter captured once, replayed with new inputs: the
 * all-gather out of place, then a broadcast from the last rank (on the second host) in place, in another part of
 * recvbuf, then a reduce-scatter large enough that its scratch grows while the stream is captured. */
static int runHierGraph(struct rankState* s) {
  const size_t count = 3001;
  const size_t bytes = count * sizeof(float);
  const int root = s->nranks - 1;
  char* broadcastBuf = (char*)s->recv + ((bytes * (size_t)s->nranks + 255) / 256 * 256);
  const size_t scatterCount = 300001, scatterBytes = scatterCount * sizeof(float);
  char* scatterIn = (char*)s->send + (bytes + 255) / 256 * 256;
  char* scatterOut = broadcastBuf + (bytes + 255) / 256 * 256;
  if ((size_t)(scatterIn - (char*)s->send) + scatterBytes * (size_t)s->nranks > s->capacity ||
      (size_t)(scatterOut - (char*)s->recv) + scatterBytes > s->capacity) {
    testFail(__FILE__, __LINE__, "rank %d: the graph's buffers do not fit", s->rank);
    return 1;
  }
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CHECK_CUDA("capture", cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeGlobal));
  fcclResult_t gathered = fcclAllGather(s->send, s->recv, count, fcclFloat32, s->comm, s->stream);
  fcclResult_t broadcast = fcclBroadcast(broadcastBuf, broadcastBuf, count, fcclFloat32, root, s->comm, s->stream);
  fcclResult_t scattered =
      fcclReduceScatter(scatterIn, scatterOut, scatterCount, fcclFloat32, fcclSum, s->comm, s->stream);
  CHECK_CUDA("capture", cudaStreamEndCapture(s->stream, &graph));
  EXPECT_MSG(gathered == fcclSuccess && broadcast == fcclSuccess && scattered == fcclSuccess,
             "rank %d: captured calls returned %d %d %d: %s", s->rank, gathered, broadcast, scattered,
             fcclGetLastError(NULL));
  CHECK_CUDA("instantiate", cudaGraphInstantiate(&exec, graph, 0));
  int failed = 0;
  for (int replay = 0; replay < 3 && !failed; replay++) {
    char msg[256];
    if (poison(s, s->recv, bytes * (size_t)s->nranks) || upload(s, fcclFloat32, s->send, 0, count)) return 1;
    CHECK_CUDA("sync", cudaStreamSynchronize(s->stream)); /* upload stages through s->host */
    if (upload(s, fcclFloat32, broadcastBuf, count, count)) return 1;
    CHECK_CUDA("sync", cudaStreamSynchronize(s->stream));
    if (upload(s, fcclFloat32, scatterIn, 0, scatterCount * (size_t)s->nranks)) return 1;
    CHECK_CUDA("replay", cudaGraphLaunch(exec, s->stream));
    if (download(s, s->recv, bytes * (size_t)s->nranks)) return 1;
    size_t bad = 0;
    for (int r = 0; r < s->nranks; r++)
      bad += checkMoved(fcclFloat32, s->seed, s->call, r, 0, (char*)s->host + (size_t)r * bytes, count, msg,
                        sizeof(msg));
    failed |= report(s, "graph all-gather", fcclFloat32, fcclSum, count, bad, msg);
    if (download(s, broadcastBuf, bytes)) return 1;
    bad = checkMoved(fcclFloat32, s->seed, s->call, root, count, s->host, count, msg, sizeof(msg));
    failed |= report(s, "graph broadcast in place", fcclFloat32, fcclSum, count, bad, msg);
    if (download(s, scatterOut, scatterBytes)) return 1;
    bad = checkReduced(fcclFloat32, fcclSum, s->seed, s->call, s->nranks, s->hostsInterleaved ? 0 : s->hostRanks, 0,
                       (uint64_t)s->rank * scatterCount, s->host, scatterCount, msg, sizeof(msg));
    failed |= report(s, "graph reduce-scatter", fcclFloat32, fcclSum, scatterCount, bad, msg);
    s->call++;
  }
  CHECK_CUDA("graph", cudaGraphExecDestroy(exec));
  CHECK_CUDA("graph", cudaGraphDestroy(graph));
  return failed;
}

/* The hierarchical all-reduce's own cases: every type and op at counts that the 2 local ranks divide (no remainder
 * for the world NCCL communicator), at 2 (one element per local rank) and odd counts around a shard boundary, in
 * place and out of place; inside a group it is refused on every rank before anything is enqueued. */
static int runHierExtras(struct rankState* s) {
  static const fcclDataType_t types[] = {fcclFloat32, fcclBfloat16, fcclFloat16, fcclFloat64, fcclInt8,
                                         fcclUint8,   fcclInt32,    fcclUint32,  fcclInt64,   fcclUint64};
  static const fcclRedOp_t ops[] = {fcclSum, fcclProd, fcclMax, fcclMin, fcclAvg};
  static const size_t counts[] = {2, 3, 4096, 65535, 65536};
  int failed = 0;
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
      for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        failed += runAllReduce(s, types[t], ops[o], counts[c], (int)((t + c) % 2));
  CHECK_FCCL("group", fcclGroupStart());
  EXPECT_EQ_INT(fcclAllReduce(s->send, s->recv, 64, fcclFloat32, fcclSum, s->comm, s->stream), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "inside fcclGroupStart/fcclGroupEnd on the hierarchical path");
  CHECK_FCCL("group", fcclGroupEnd());
  /* The communicator goes on after the refusal. */
  failed += runAllReduce(s, fcclFloat32, fcclSum, 1001, 0);
  /* The hierarchical all-gather and broadcast: in place and not, every root, counts 1 to past a staging round. */
  static const fcclDataType_t moved[] = {fcclFloat32, fcclBfloat16, fcclInt8, fcclFloat64};
  static const size_t movedCounts[] = {1, 7, 4097, 65537};
  for (size_t t = 0; t < sizeof(moved) / sizeof(moved[0]); t++)
    for (size_t c = 0; c < sizeof(movedCounts) / sizeof(movedCounts[0]); c++) {
      failed += runAllGather(s, moved[t], movedCounts[c], (int)((t + c) % 2));
      for (int root = 0; root < s->nranks; root++)
        failed += runBroadcast(s, moved[t], movedCounts[c], root, (int)((t + c + (size_t)root) % 2));
    }
  /* The hierarchical reduce-scatter: every op, in place and not, counts 1 to past a staging round (its scratch
   * grows on the way). */
  static const fcclDataType_t reduced[] = {fcclFloat32, fcclBfloat16, fcclFloat16, fcclInt32, fcclUint8};
  static const fcclRedOp_t reducedOps[] = {fcclSum, fcclProd, fcclMax, fcclMin, fcclAvg};
  for (size_t t = 0; t < sizeof(reduced) / sizeof(reduced[0]); t++)
    for (size_t o = 0; o < sizeof(reducedOps) / sizeof(reducedOps[0]); o++)
      for (size_t c = 0; c < sizeof(movedCounts) / sizeof(movedCounts[0]); c++)
        failed += runReduceScatter(s, reduced[t], reducedOps[o], movedCounts[c], (int)((t + o + c) % 2));
  /* In a group the all-gather goes to the world NCCL communicator, and stays correct. */
  const size_t groupCount = 1031, groupBytes = groupCount * sizeof(float);
  char msg[256];
  if (poison(s, s->recv, groupBytes * (size_t)s->nranks) || upload(s, fcclFloat32, s->send, 0, groupCount)) return 1;
  CHECK_FCCL("group", fcclGroupStart());
  CHECK_FCCL("all-gather in a group", fcclAllGather(s->send, s->recv, groupCount, fcclFloat32, s->comm, s->stream));
  CHECK_FCCL("group", fcclGroupEnd());
  if (download(s, s->recv, groupBytes * (size_t)s->nranks)) return 1;
  size_t bad = 0;
  for (int r = 0; r < s->nranks; r++)
    bad += checkMoved(fcclFloat32, s->seed, s->call, r, 0, (char*)s->host + (size_t)r * groupBytes, groupCount, msg,
                      sizeof(msg));
  s->call++;
  failed += report(s, "all-gather in a group", fcclFloat32, fcclSum, groupCount, bad, msg);
  failed += runHierGraph(s);
  return failed;
}

static int expectPath(struct rankState* s, fcclPath_t want, const char* reasonPart) {
  fcclPath_t path = fcclNumPaths;
  const char* reason = NULL;
  CHECK_FCCL("path", fcclCommGetPath(s->comm, &path, &reason));
  EXPECT_MSG(path == want, "rank %d: path %s (%s), expected %s", s->rank, fcclGetPathName(path),
             reason ? reason : "", fcclGetPathName(want));
  if (reasonPart) EXPECT_STR_CONTAINS(reason, reasonPart);
  return path != want;
}

/* ---- modes ---- */

struct modeSpec {
  const char* name;
  int fcclHosts;
  const char* path;      /* FCCL_PATH, or NULL */
  fcclPath_t expected;
  const char* reasonPart;
};

static const struct modeSpec kEverything[] = {
    {"nccl", FCCL_HOST_ONE, "nccl", fcclPathNccl, "FCCL_PATH=nccl"},
    {"hosts", FCCL_HOST_PER_RANK, NULL, fcclPathNccl, "hosts"},
    {"many", FCCL_HOST_ONE, NULL, fcclPathNccl, "more than fccl's kernels take"},
    {"hier", FCCL_HOST_PER_PAIR, NULL, fcclPathHier, "the 4 ranks are on 2 hosts of 2"},
    {"hierforced", FCCL_HOST_PER_PAIR, "hier", fcclPathHier, "FCCL_PATH=hier"},
    {"hierinterleaved", FCCL_HOST_INTERLEAVED, NULL, fcclPathHier, "the 4 ranks are on 2 hosts of 2"},
    {"p2pdisable", FCCL_HOST_ONE, NULL, fcclPathNccl, "FCCL_P2P_DISABLE=1"},
    {"fcclp2p", FCCL_HOST_ONE, NULL, fcclPathFccl, "on one host"},
};

static int rankEverything(int rank, int nranks, const struct modeSpec* m, struct testArgs* args) {
  setIdentity(rank, m->fcclHosts, m->path);
  if (strcmp(m->name, "p2pdisable") == 0) setenv("FCCL_P2P_DISABLE", "1", 1);
  if (strcmp(m->name, "fcclp2p") == 0) setenv("FCCL_NCCL_COMM", "init", 1);
  fcclParamResetForTest();
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct rankState state, *s = &state;
  int failed = stateInit(s, comm, rank, nranks, args->seed);
  if (!failed) failed = expectPath(s, m->expected, m->reasonPart);
  if (m->expected == fcclPathHier) s->hostRanks = 2;
  s->hostsInterleaved = m->fcclHosts == FCCL_HOST_INTERLEAVED;
  if (!failed) failed = runEverything(s, args->shared);
  if (!failed && (strcmp(m->name, "hier") == 0 || strcmp(m->name, "hierinterleaved") == 0)) failed = runHierExtras(s);
  stateFini(s);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  (void)failed;
  return testSummary(m->name);
}

/* FCCL_PATH=hier where fccl sees one host: every rank's init fails with fcclInvalidUsage naming the rule. */
static int rankHierRefused(int rank, int nranks, struct testArgs* args) {
  setIdentity(rank, FCCL_HOST_ONE, "hier");
  fcclUniqueId id;
  if (!collShareId(args->shared, rank, 0, &id)) return 1;
  EXPECT_EQ_INT(cudaSetDevice(rank % args->gpus), cudaSuccess);
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = nranks > args->gpus;
  config.timeoutMs = 60000;
  fcclComm_t comm = NULL;
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, nranks, id, rank, &config), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "FCCL_PATH=hier, but the hierarchical path needs");
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "on one host");
  EXPECT(comm == NULL);
  return testSummary("hierrefused");
}

/* The fccl path without an NCCL communicator: the NCCL-only calls say why; the collectives work. */
static int rankP2pMissing(int rank, int nranks, struct testArgs* args) {
  unsetenv("FCCL_NCCL_COMM"); /* the default: off */
  fcclParamResetForTest();
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct rankState state, *s = &state;
  if (stateInit(s, comm, rank, nranks, args->seed) == 0 && expectPath(s, fcclPathFccl, NULL) == 0) {
    EXPECT_EQ_INT(fcclSend(s->send, 16, fcclFloat32, (rank + 1) % nranks, comm, s->stream), fcclInvalidUsage);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "set FCCL_NCCL_COMM=init");
    EXPECT_EQ_INT(fcclAllToAll(s->send, s->recv, 16, fcclFloat32, comm, s->stream), fcclInvalidUsage);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "no NCCL communicator");
    runAllReduce(s, fcclFloat32, fcclSum, 1000, 0);
  }
  stateFini(s);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return testSummary("p2pmissing");
}

/* fcclCommAbort stops an all-reduce that a peer never joins, and returns promptly. NCCL path: rank 0 calls, rank 1
 * never does. Hierarchical path (hier): the first host's ranks call, and their reduce-scatter inside the host
 * completes, but the second host's never do: the step across hosts waits. */
static int rankAbort(int rank, int nranks, struct testArgs* args, int hier) {
  setIdentity(rank, hier ? FCCL_HOST_PER_PAIR : FCCL_HOST_ONE, hier ? NULL : "nccl");
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct rankState state, *s = &state;
  const int calls = hier ? rank < 2 : rank == 0;
  int ready = stateInit(s, comm, rank, nranks, args->seed) == 0;
  if (ready && hier) ready = expectPath(s, fcclPathHier, NULL) == 0;
  /* Together first: NCCL connects to its peers at a communicator's first call, which needs both. */
  if (ready && runAllReduce(s, fcclFloat32, fcclSum, 1 << 18, 0) == 0 && calls) {
    EXPECT_EQ_INT(fcclAllReduce(s->send, s->recv, 1 << 18, fcclFloat32, fcclSum, comm, s->stream), fcclSuccess);
    struct timespec pause = {.tv_sec = 1, .tv_nsec = 0};
    nanosleep(&pause, NULL);
    EXPECT_EQ_INT(cudaStreamQuery(s->stream), cudaErrorNotReady); /* waits for a peer that never comes */
    const int64_t start = collNowNs();
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    const double seconds = (double)(collNowNs() - start) / 1e9;
    EXPECT_MSG(seconds < 30.0, "fcclCommAbort took %.1f s", seconds);
    cudaError_t synced = cudaStreamSynchronize(s->stream); /* NCCL's abort ended the kernel */
    (void)synced;
    (void)cudaGetLastError();
    if (rank == 0) testShmPost(&args->shared->flags[1], 1);
  } else if (!calls) {
    EXPECT_EQ_INT(testShmWait(args->shared->shm, &args->shared->flags[1], 1, 120000, "rank 0's abort"), TEST_SHM_OK);
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
  }
  stateFini(s);
  return testSummary(hier ? "hierabort" : "abort");
}

/* A rank that dies: its peers' fcclCommGetAsyncError reports it (bounded), and fcclCommAbort returns. path NULL:
 * the path fccl chooses (the hierarchical one for FCCL_HOST_PER_PAIR). */
static int rankDead(int rank, int nranks, struct testArgs* args, int fcclHosts, const char* path, const char* name) {
  setIdentity(rank, fcclHosts, path);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct rankState state, *s = &state;
  /* Together first (NCCL connects at the first call), every rank's result checked before anybody goes on; then
   * rank 1 dies without a word: no destroy, no abort. */
  int ready = stateInit(s, comm, rank, nranks, args->seed) == 0 && runAllReduce(s, fcclFloat32, fcclSum, 4096, 0) == 0;
  EXPECT_EQ_INT(testShmBarrier(args->shared->shm, rank), TEST_SHM_OK);
  if (rank == 1) _exit(ready ? 0 : 1);
  if (ready) {
    /* The death may be seen before this call (a peer link ends in milliseconds): then the call itself reports it. */
    const fcclResult_t issued = fcclAllReduce(s->send, s->recv, 1 << 16, fcclFloat32, fcclSum, comm, s->stream);
    EXPECT_MSG(issued == fcclSuccess || issued == fcclRemoteError, "rank %d: the all-reduce after the death: %s: %s",
               rank, fcclGetErrorString(issued), fcclGetLastError(comm));
    fcclResult_t async = fcclSuccess;
    const int64_t start = collNowNs();
    while (async == fcclSuccess && collNowNs() - start < (int64_t)120 * 1000000000) {
      EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
      struct timespec pause = {.tv_sec = 0, .tv_nsec = 10 * 1000000};
      nanosleep(&pause, NULL);
    }
    EXPECT_MSG(async != fcclSuccess, "rank %d: no error reported 120 s after rank 1 died", rank);
    printf("rank %d: after %.1f s: %s: %s\n", rank, (double)(collNowNs() - start) / 1e9, fcclGetErrorString(async),
           fcclGetLastError(comm));
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    (void)cudaStreamSynchronize(s->stream);
    (void)cudaGetLastError();
  }
  stateFini(s);
  return testSummary(name);
}

/* How long a rank waits for its error after the cut: the keepalive, the monitor's poll and the kernel's probe timer,
 * with room for a loaded machine; the time taken is printed. */
#define VANISHED_SEEN_MS(keepaliveMs) ((keepaliveMs) + 3000)

static int rankVanished(int rank, int nranks, struct testArgs* args) {
  enum { FLAG_CUT = 0, FLAG_DONE = 1 };
  if (testWireEnter(args->wire, rank) != 0) {
    testFail(__FILE__, __LINE__, "rank %d: could not enter its network namespace", rank);
    return 1;
  }
  setenv("FCCL_SOCKET_IFNAME", args->wire->end[rank], 1); /* fccl's bootstrap and peer links over the pair */
  setenv("NCCL_SOCKET_IFNAME", args->wire->end[rank], 1); /* and NCCL's */
  setIdentity(rank, FCCL_HOST_PER_RANK, "nccl");
  const int keepaliveMs = (int)fcclParamInt(FCCL_PARAM_PEER_KEEPALIVE_MS);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct rankState state, *s = &state;
  int ready = stateInit(s, comm, rank, nranks, args->seed) == 0 && runAllReduce(s, fcclFloat32, fcclSum, 4096, 0) == 0;
  EXPECT_EQ_INT(testShmBarrier(args->shared->shm, rank), TEST_SHM_OK);
  int* flags = args->shared->flags;
  if (rank == 1) {
    EXPECT_MSG(testWireCut(args->wire, rank) == 0, "rank 1: could not take %s down", args->wire->end[rank]);
    testShmPost(&flags[FLAG_CUT], 1);
  } else {
    EXPECT_EQ_INT(testShmWait(args->shared->shm, &flags[FLAG_CUT], 1, 30000, "the cut"), TEST_SHM_OK);
  }
  const int64_t cut = collNowNs();
  if (ready) {
    /* NCCL's kernel waits for data that will not come: only fccl's keepalive can tell the peer is gone. */
    const fcclResult_t issued = fcclAllReduce(s->send, s->recv, 1 << 16, fcclFloat32, fcclSum, comm, s->stream);
    EXPECT_MSG(issued == fcclSuccess || issued == fcclRemoteError, "rank %d: the all-reduce after the cut: %s: %s",
               rank, fcclGetErrorString(issued), fcclGetLastError(comm));
    fcclResult_t async = fcclSuccess;
    while (async == fcclSuccess && collNowNs() - cut < (int64_t)VANISHED_SEEN_MS(keepaliveMs) * 1000000) {
      EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
      struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
      nanosleep(&pause, NULL);
    }
    const double seenMs = (double)(collNowNs() - cut) / 1e6;
    char peer[32];
    snprintf(peer, sizeof(peer), "rank %d", 1 - rank);
    EXPECT_MSG(async == fcclRemoteError, "rank %d: %s %.0f ms after the cut (keepalive %d ms): %s", rank,
               fcclGetErrorString(async), seenMs, keepaliveMs, fcclGetLastError(comm));
    EXPECT_STR_CONTAINS(fcclGetLastError(comm), peer);
    EXPECT_STR_CONTAINS(fcclGetLastError(comm), "stopped answering");
    printf("rank %d: the cut seen in %.0f ms (keepalive %d ms): %s\n", rank, seenMs, keepaliveMs,
           fcclGetLastError(comm));
    const int64_t abortStart = collNowNs();
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    /* NCCL's kernel stopped: the stream drains without the peer (bounded, not a synchronize that could hang). */
    cudaError_t drained = cudaErrorNotReady;
    while (drained == cudaErrorNotReady && collNowNs() - abortStart < (int64_t)20 * 1000000000) {
      struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
      nanosleep(&pause, NULL);
      drained = cudaStreamQuery(s->stream);
    }
    EXPECT_MSG(drained != cudaErrorNotReady, "rank %d: the stream still runs 20 s after fcclCommAbort", rank);
    (void)cudaGetLastError();
    printf("rank %d: aborted, its stream drained, in %.0f ms\n", rank, (double)(collNowNs() - abortStart) / 1e6);
  }
  /* Neither rank leaves before both looked: a process's end closes nothing over a cut wire, but a GPU's context
   * released early would change what the other sees. */
  testShmPost(&flags[FLAG_DONE + rank], 1);
  EXPECT_EQ_INT(testShmWait(args->shared->shm, &flags[FLAG_DONE + 1 - rank], 1, 60000, "the peer's verdict"),
                TEST_SHM_OK);
  stateFini(s);
  return testSummary("vanishedhosts");
}

static int rankMain(int rank, int nranks, void* arg) {
  struct testArgs* args = arg;
  for (size_t i = 0; i < sizeof(kEverything) / sizeof(kEverything[0]); i++)
    if (strcmp(args->mode, kEverything[i].name) == 0) return rankEverything(rank, nranks, &kEverything[i], args);
  if (strcmp(args->mode, "p2pmissing") == 0) return rankP2pMissing(rank, nranks, args);
  if (strcmp(args->mode, "hierrefused") == 0) return rankHierRefused(rank, nranks, args);
  if (strcmp(args->mode, "abort") == 0) return rankAbort(rank, nranks, args, 0);
  if (strcmp(args->mode, "hierabort") == 0) return rankAbort(rank, nranks, args, 1);
  if (strcmp(args->mode, "dead") == 0) return rankDead(rank, nranks, args, FCCL_HOST_ONE, "nccl", "dead");
  if (strcmp(args->mode, "deadhosts") == 0)
    return rankDead(rank, nranks, args, FCCL_HOST_PER_RANK, "nccl", "deadhosts");
  if (strcmp(args->mode, "hierdead") == 0) return rankDead(rank, nranks, args, FCCL_HOST_PER_PAIR, NULL, "hierdead");
  if (strcmp(args->mode, "vanishedhosts") == 0) return rankVanished(rank, nranks, args);
  return 2;
}

int main(int argc, char** argv) {
  struct testArgs args = {argc > 1 ? argv[1] : "nccl", NULL, 0, 0, NULL};
  int nranks = argc > 2 ? atoi(argv[2]) : 2;
  /* The hierarchical modes: 2 simulated hosts x 2 ranks. */
  if (strncmp(args.mode, "hier", 4) == 0) nranks = 4;
  if (strcmp(args.mode, "many") == 0 && argc <= 2) nranks = 9;
  int known = strcmp(args.mode, "p2pmissing") == 0 || strcmp(args.mode, "abort") == 0 ||
              strcmp(args.mode, "dead") == 0 || strcmp(args.mode, "deadhosts") == 0 ||
              strcmp(args.mode, "hierrefused") == 0 || strcmp(args.mode, "hierabort") == 0 ||
              strcmp(args.mode, "hierdead") == 0 || strcmp(args.mode, "vanishedhosts") == 0;
  for (size_t i = 0; i < sizeof(kEverything) / sizeof(kEverything[0]); i++)
    known |= strcmp(args.mode, kEverything[i].name) == 0;
  if (!known || nranks < 2 || nranks > REF_MAX_RANKS) {
    fprintf(stderr,
            "usage: %s nccl|hosts|many|hier|hierinterleaved|hierforced|hierrefused|p2pdisable|fcclp2p|p2pmissing|"
            "abort|hierabort|dead|deadhosts|hierdead|vanishedhosts [nranks 2..%d]\n",
            argv[0], REF_MAX_RANKS);
    return 2;
  }
  args.gpus = testGpuCount();
  if (args.gpus < 1) {
    printf("SKIP: no GPU\n");
    return TEST_SKIP;
  }
  struct testWire wire;
  if (strcmp(args.mode, "vanishedhosts") == 0) {
    if (nranks != 2) {
      fprintf(stderr, "%s: vanishedhosts takes 2 ranks, not %d\n", argv[0], nranks);
      return 2;
    }
    const char* why = testWireLay(&wire);
    if (why) {
      printf("SKIP: %s\n", why);
      return TEST_SKIP;
    }
    args.wire = &wire;
  }
  args.seed = testSeed();
  args.shared = collSharedNew(nranks);
  printf("nccl_path %s: %d ranks on %d GPU(s)\n", args.mode, nranks, args.gpus);
  int codes[REF_MAX_RANKS];
  const int failed = testShmForkRanks(args.shared->shm, rankMain, &args, 540, codes);
  for (int r = 0; r < nranks; r++)
    if (codes[r] != 0) testFail(__FILE__, __LINE__, "rank %d exited with %d", r, codes[r]);
  EXPECT_EQ_INT(failed, 0);
  collSharedFree(args.shared);
  if (args.wire) testWireFree(args.wire);
  return testSummary("nccl_path");
}
