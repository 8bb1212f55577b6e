/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllReduceAddRMSNorm on forked ranks (1..8; ranks share the GPUs, exits 77 without one), against a host
 * reference (docs/fused.md):
 *   - the residual r' bit for bit against fcclAllReduce of the same input followed by the add in fp32, rounded once
 *     (the all-reduce's result read back from the GPU, the add emulated on the host);
 *   - the output against float64 arithmetic on r' within the output type's rounding (plus fp32's error of the sum
 *     of squares); FP8 within one step of E4M3 of y / scale at the call's scale; dynamic scales against max|y| / 448;
 *   - every rank's r', output and scales hash equal;
 * on random data (never zero), plain and registered inputs, with and without residual and weight. A third
 * argument, oneshot or twoshot, runs every call of a mode in that form wherever the form can run it (strictly: a
 * call it cannot run fails), auto (the default) as the public call chooses.
 *   test_fused_norm ranks <n>   types x hidden (128 .. 16384, odd ones) x tokens x options
 *   test_fused_norm fp8 <n>     static and dynamic FP8 scales
 *   test_fused_norm batch <n>   token t alone, in 64 tokens and in 4096 gives the same bits, staged and registered,
 *                               in the automatic choice (4096 tokens: two-shot) and in each form forced
 *   test_fused_norm forms <n>   the one-shot and the two-shot form give the same bits for the same input (output,
 *                               residual, scales), every type, FP8 both ways, NULL residual and weight, plain and
 *                               registered, token counts below, at and past the rank count, many rounds; then
 *                               both forms back to back with all-reduces between them, no host synchronisation
 *   test_fused_norm graph <n>   captured calls replayed (1000; FCCLTEST_QUICK=1: 50), each checked against eager bits
 *   test_fused_norm nan <n>     NaN and Inf inputs: the rows they hit, as docs/fused.md says; the others unchanged
 *   test_fused_norm invalid     argument errors return fcclInvalidArgument with a message and launch nothing
 *   test_fused_norm timeout 2   rank 1 never calls: rank 0's kernel (staged, registered) gives up after FCCL_TIMEOUT
 *                               (300 ms here) and the communicator reports which kernel waited for which rank
 *   test_fused_norm abort 2     the same kernels waiting for rank 1 stop at once on fcclCommAbort
 */
#include "algo.h"
#include "comm.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"
#include "test_allreduce_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- host reference ------------------------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static double toDouble(fcclDataType_t type, uint64_t bits) {
  switch (type) {
    case fcclFloat16: return refHalfToFloat((uint16_t)bits);
    case fcclBfloat16: return refBf16ToFloat((uint16_t)bits);
    default: {
      float f;
      uint32_t b = (uint32_t)bits;
      memcpy(&f, &b, sizeof(f));
      return f;
    }
  }
}

static uint64_t fromFloat(fcclDataType_t type, float value) {
  switch (type) {
    case fcclFloat16: return refFloatToHalf(value);
    case fcclBfloat16: return refFloatToBf16(value);
    default: {
      uint32_t b;
      memcpy(&b, &value, sizeof(b));
      return b;
    }
  }
}

static void storeBits(fcclDataType_t type, void* buffer, size_t i, uint64_t bits) {
  if (fcclTypeSize(type) == 2)
    ((uint16_t*)buffer)[i] = (uint16_t)bits;
  else
    ((uint32_t*)buffer)[i] = (uint32_t)bits;
}

/* What a tensor holds: values of magnitude [lo, lo + span), random sign unless positive, never zero. */
enum { DATA_INPUT = 1, DATA_RESIDUAL = 2, DATA_WEIGHT = 3 };
static uint64_t dataBits(fcclDataType_t type, uint64_t seed, uint64_t call, int tensor, int rank, uint64_t index) {
  const uint64_t r = mix64(seed ^ mix64(call * 0x100000001b3ull ^ ((uint64_t)tensor << 56) ^ ((uint64_t)rank << 48) ^
                                        mix64(index)));
  const double unit = (double)(r >> 11) / 9007199254740992.0;
  double v = tensor == DATA_WEIGHT ? 0.5 + unit : 0.0625 + 2.0 * unit;
  if (tensor != DATA_WEIGHT && (r & 1)) v = -v;
  return fromFloat(type, (float)v);
}

/* E4M3: bits & 0x7f orders the magnitudes; 0x7f is NaN. */
static double fp8Value(uint8_t bits) {
  const int e = (bits >> 3) & 15, m = bits & 7;
  const double mag = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
  return (bits & 0x80) ? -mag : mag;
}
static int fp8IsNaN(uint8_t bits) { return (bits & 0x7f) == 0x7f; }

/* The magnitude code nearest |x| (ties to the even code), saturated to 448 (code 0x7e). */
static int fp8NearestCode(double x) {
  x = fabs(x);
  int lo = 0, hi = 0x7e;
  if (x >= fp8Value(0x7e)) return 0x7e;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (fp8Value((uint8_t)mid) <= x)
      lo = mid;
    else
      hi = mid;
  }
  const double dlo = x - fp8Value((uint8_t)lo), dhi = fp8Value((uint8_t)hi) - x;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

/* Whether an E4M3 result is within one code of the nearest to x (signed codes: -0 and +0 are both 0). */
static int fp8WithinOne(uint8_t got, double x) {
  if (isnan(x)) return fp8IsNaN(got);
  if (fp8IsNaN(got)) return 0;
  const int want = x < 0 ? -fp8NearestCode(x) : fp8NearestCode(x);
  const int have = (got & 0x80) ? -(int)(got & 0x7f) : (int)(got & 0x7f);
  return abs(want - have) <= 1;
}

/* Half an ulp relative of each output type, and the smallest absolute error worth counting (its subnormals). */
static double outRelative(fcclDataType_t type) {
  return type == fcclBfloat16 ? ldexp(1, -8) : type == fcclFloat16 ? ldexp(1, -11) : ldexp(1, -24);
}
static double outAbsolute(fcclDataType_t type) {
  return type == fcclBfloat16 ? 1e-38 : type == fcclFloat16 ? ldexp(1, -25) : 1e-44;
}
/* fp32's error in the sum of squares of a row and in the products, relative, for rows up to 16384 elements. */
#define NORM_FP32_ERROR 1e-4

/* ---- one case ------------------------------------------------------------------------------------------------ */

struct fusedCase {
  fcclDataType_t type;
  fcclDataType_t out; /* type or fcclFloat8e4m3 */
  fcclScaleMode_t mode;
  size_t tokens;
  size_t hidden;
  int residual; /* pass a residual */
  int weight;   /* pass a weight */
  int registered;
  float eps;
  float staticScale; /* fcclScaleStatic */
};

/* form: as fcclAllReduceAddRMSNormForm takes it (-1: the public call's choice). */
static void describe(const struct fusedCase* c, uint64_t call, int form, char* out, size_t size) {
  snprintf(out, size, "call %llu: %zu x %zu %s -> %s scale %d%s%s %s eps %g, %s", (unsigned long long)call,
           c->tokens, c->hidden, refTypeName(c->type), refTypeName(c->out), (int)c->mode,
           c->residual ? " residual" : "", c->weight ? " weight" : "", c->registered ? "registered" : "plain",
           (double)c->eps, form < 0 ? "auto" : fcclFusedFormName(form));
}

/* Per-rank buffers, large enough for every case of a mode. */
struct fusedContext {
  struct collShared* shared;
  fcclComm_t comm;
  int rank, nranks;
  uint64_t seed;
  cudaStream_t stream;
  size_t capacity;              /* bytes of each device buffer */
  int form;                     /* -1: as the public call; FCCL_FUSED_ONESHOT or FCCL_FUSED_TWOSHOT where it runs */
  struct collBuffer plainIn;    /* inputs, plain */
  struct collBuffer regIn;      /* inputs, registered */
  void *residual, *weight, *output, *reduced, *scale; /* device */
  void *hIn, *hResidual, *hWeight, *hOutput, *hReduced, *hResidualOut, *hScale; /* pinned host */
};

static int contextInit(struct fusedContext* x, struct collShared* shared, fcclComm_t comm, int rank, int nranks,
                       uint64_t seed, size_t capacity, int form) {
  memset(x, 0, sizeof(*x));
  x->form = form;
  x->shared = shared;
  x->comm = comm;
  x->rank = rank;
  x->nranks = nranks;
  x->seed = seed;
  x->capacity = capacity;
  if (cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking) != cudaSuccess) return 0;
  if (!collBufferCreate(comm, &x->plainIn, capacity, 0) || !collBufferCreate(comm, &x->regIn, capacity, 1)) return 0;
  void** dev[] = {&x->residual, &x->weight, &x->output, &x->reduced, &x->scale};
  for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
    if (cudaMalloc(dev[i], capacity) != cudaSuccess) return 0;
  void** host[] = {&x->hIn, &x->hResidual, &x->hWeight, &x->hOutput, &x->hReduced, &x->hResidualOut, &x->hScale};
  for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
    if (cudaMallocHost(host[i], capacity) != cudaSuccess) return 0;
  return 1;
}

static void contextFini(struct fusedContext* x) {
  void* dev[] = {x->residual, x->weight, x->output, x->reduced, x->scale};
  for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) cudaFree(dev[i]);
  void* host[] = {x->hIn, x->hResidual, x->hWeight, x->hOutput, x->hReduced, x->hResidualOut, x->hScale};
  for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) cudaFreeHost(host[i]);
  collBufferDestroy(x->comm, &x->plainIn);
  collBufferDestroy(x->comm, &x->regIn);
  if (x->stream) cudaStreamDestroy(x->stream);
}

static char* inputOf(struct fusedContext* x, const struct fusedCase* c) {
  return (c->registered ? x->regIn.base : x->plainIn.base) + COLL_GUARD;
}

/* Host copies of the case's data for call `call` (input of this rank, residual and weight shared by all ranks),
 * uploaded; output and scales poisoned. Also the host's NaN/Inf edits: poke(c, hIn) may change inputs. */
static int upload(struct fusedContext* x, const struct fusedCase* c, uint64_t call,
                  void (*poke)(const struct fusedCase*, int rank, void* hostIn)) {
  const size_t n = c->tokens * c->hidden, size = fcclTypeSize(c->type);
  for (size_t i = 0; i < n; i++) {
    storeBits(c->type, x->hIn, i, dataBits(c->type, x->seed, call, DATA_INPUT, x->rank, i));
    storeBits(c->type, x->hResidual, i, dataBits(c->type, x->seed, call, DATA_RESIDUAL, 0, i));
  }
  for (size_t i = 0; i < c->hidden; i++)
    storeBits(c->type, x->hWeight, i, dataBits(c->type, x->seed, call, DATA_WEIGHT, 0, i));
  if (poke) poke(c, x->rank, x->hIn);
  struct fusedContext* ctx = x;
  COLL_CHECK_CUDA("upload", cudaMemcpyAsync(inputOf(x, c), x->hIn, n * size, cudaMemcpyHostToDevice, x->stream));
  COLL_CHECK_CUDA("upload", cudaMemcpyAsync(x->residual, x->hResidual, n * size, cudaMemcpyHostToDevice, x->stream));
  COLL_CHECK_CUDA("upload", cudaMemcpyAsync(x->weight, x->hWeight, c->hidden * size, cudaMemcpyHostToDevice,
                                            x->stream));
  COLL_CHECK_CUDA("poison", cudaMemsetAsync(x->output, COLL_POISON, n * size + 64, x->stream));
  COLL_CHECK_CUDA("poison", cudaMemsetAsync(x->scale, COLL_POISON, c->tokens * sizeof(float) + 64, x->stream));
  if (c->mode == fcclScaleStatic)
    COLL_CHECK_CUDA("scale", cudaMemcpyAsync(x->scale, &c->staticScale, sizeof(float), cudaMemcpyHostToDevice,
                                             x->stream));
  return 0;
}

/* Whether a row of the case fits one staging chunk under the environment's FCCL_STAGING_BYTES (fccl.h: a row
 * that does not is an argument error, whether the input is registered or not). */
static int rowFits(const struct fusedCase* c, int nranks) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const uint64_t pitch = (c->hidden * fcclTypeSize(c->type) + 15) / 16 * 16;
  return pitch <= layout.chunkBytes;
}

/* Whether the two-shot form can run the case: one row pushed to an owner, and one row's results (r' with a
 * residual, the output row, a dynamic scale), each fit a staging chunk (fused_norm.c). */
static int twoshotFits(const struct fusedCase* c, int nranks) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const uint64_t pitch = (c->hidden * fcclTypeSize(c->type) + 15) / 16 * 16;
  const uint64_t outPitch = (c->hidden * fcclTypeSize(c->out) + 15) / 16 * 16;
  const uint64_t result = (c->residual ? pitch : 0) + outPitch + (c->mode == fcclScaleDynamic ? 4 : 0);
  return pitch <= layout.chunkBytes && result <= layout.chunkBytes;
}

/* The form a call of the case runs in: the context's where that form can run it, else the public call's choice. */
static int formOf(const struct fusedContext* x, const struct fusedCase* c) {
  if (x->form == FCCL_FUSED_TWOSHOT) return twoshotFits(c, x->nranks) ? FCCL_FUSED_TWOSHOT : -1;
  if (x->form == FCCL_FUSED_ONESHOT) return rowFits(c, x->nranks) ? FCCL_FUSED_ONESHOT : -1;
  return -1;
}

static fcclResult_t fusedCallForm(struct fusedContext* x, const struct fusedCase* c, const void* input,
                                  void* residual, void* output, float* scale, size_t tokens, cudaStream_t stream,
                                  int form) {
  return fcclAllReduceAddRMSNormForm(input, c->residual ? residual : NULL, c->weight ? x->weight : NULL, output,
                                     tokens, c->hidden, c->eps, c->type, c->out, c->mode, c->mode ? scale : NULL,
                                     x->comm, stream, form);
}

static fcclResult_t fusedCall(struct fusedContext* x, const struct fusedCase* c, const void* input, void* residual,
                              void* output, float* scale, size_t tokens, cudaStream_t stream) {
  return fusedCallForm(x, c, input, residual, output, scale, tokens, stream, formOf(x, c));
}

/* Output bytes of a row and of the case. */
static size_t outRow(const struct fusedCase* c) { return c->hidden * fcclTypeSize(c->out); }

/* Downloads r', the output, the all-reduce's result and the scales. */
static int download(struct fusedContext* x, const struct fusedCase* c) {
  struct fusedContext* ctx = x;
  const size_t n = c->tokens * c->hidden, size = fcclTypeSize(c->type);
  COLL_CHECK_CUDA("download", cudaMemcpyAsync(x->hResidualOut, x->residual, n * size, cudaMemcpyDeviceToHost,
                                              x->stream));
  COLL_CHECK_CUDA("download", cudaMemcpyAsync(x->hOutput, x->output, c->tokens * outRow(c) + 64,
                                              cudaMemcpyDeviceToHost, x->stream));
  COLL_CHECK_CUDA("download", cudaMemcpyAsync(x->hReduced, x->reduced, n * size, cudaMemcpyDeviceToHost, x->stream));
  COLL_CHECK_CUDA("download", cudaMemcpyAsync(x->hScale, x->scale, c->tokens * sizeof(float) + 64,
                                              cudaMemcpyDeviceToHost, x->stream));
  COLL_CHECK_CUDA("download", cudaStreamSynchronize(x->stream));
  return 0;
}

/*
 * Checks what download() brought back against the reference; rows listed in nanRows (-1 ended) are skipped by the
 * value checks (the NaN test checks them itself). Returns the number of problems, the first few reported.
 */
static int checkCase(struct fusedContext* x, const struct fusedCase* c, uint64_t call) {
  char what[256];
  describe(c, call, formOf(x, c), what, sizeof(what));
  const fcclDataType_t t = c->type;
  int problems = 0;
  const size_t hidden = c->hidden;
  double* y = malloc(hidden * sizeof(double));
  if (!y) return 1;
  for (size_t row = 0; row < c->tokens && problems < 8; row++) {
    /* r' bit for bit from fcclAllReduce's result plus the residual in fp32, rounded once. */
    double squares = 0;
    int nonFinite = 0;
    for (size_t i = 0; i < hidden; i++) {
      const size_t at = row * hidden + i;
      const uint64_t reduced = refLoadBits(t, x->hReduced, at);
      uint64_t want = reduced;
      if (c->residual) {
        want = fromFloat(t, (float)toDouble(t, refLoadBits(t, x->hResidual, at)) + (float)toDouble(t, reduced));
        const uint64_t got = refLoadBits(t, x->hResidualOut, at);
        const int bothNaN = isnan(toDouble(t, got)) && isnan(toDouble(t, want));
        if (got != want && !bothNaN && problems++ < 4) {
          char a[64], b[64];
          testFail(__FILE__, __LINE__, "rank %d: %s: residual row %zu element %zu: %s, want %s", x->rank, what, row, i,
                   refFormat(t, got, a, sizeof(a)), refFormat(t, want, b, sizeof(b)));
        }
      }
      const double r = toDouble(t, want);
      y[i] = r;
      nonFinite |= !isfinite(r);
      squares += r * r;
    }
    if (nonFinite) continue; /* the NaN test's rows */
    const double inv = 1.0 / sqrt(squares / (double)hidden + (double)c->eps);
    double amax = 0;
    for (size_t i = 0; i < hidden; i++) {
      y[i] *= inv;
      if (c->weight) y[i] *= toDouble(t, refLoadBits(t, x->hWeight, i));
      amax = fmax(amax, fabs(y[i]));
    }
    if (c->out != fcclFloat8e4m3) {
      for (size_t i = 0; i < hidden; i++) {
        const uint64_t got = refLoadBits(t, x->hOutput, row * hidden + i);
        const double g = toDouble(t, got);
        const double tol = fabs(y[i]) * (outRelative(t) + NORM_FP32_ERROR) + outAbsolute(t);
        if (!(fabs(g - y[i]) <= tol) && problems++ < 4) {
          char a[64];
          testFail(__FILE__, __LINE__, "rank %d: %s: output row %zu element %zu: %s, want %.9g (tolerance %.3g)",
                   x->rank, what, row, i, refFormat(t, got, a, sizeof(a)), y[i], tol);
        }
      }
      continue;
    }
    float scale = c->staticScale;
    if (c->mode == fcclScaleDynamic) {
      memcpy(&scale, (const char*)x->hScale + row * sizeof(float), sizeof(float));
      const double want = amax / 448.0;
      if (!(fabs(scale - want) <= want * NORM_FP32_ERROR) && problems++ < 4)
        testFail(__FILE__, __LINE__, "rank %d: %s: row %zu scale %.9g, want %.9g", x->rank, what, row, (double)scale,
                 want);
    }
    for (size_t i = 0; i < hidden; i++) {
      const uint8_t got = ((const uint8_t*)x->hOutput)[row * hidden + i];
      const double q = y[i] / scale;
      if (!fp8WithinOne(got, q) && problems++ < 4)
        testFail(__FILE__, __LINE__, "rank %d: %s: output row %zu element %zu: fp8 0x%02x (%g), want %.9g", x->rank,
                 what, row, i, got, fp8Value(got), q);
    }
  }
  free(y);
  /* Without a residual argument the residual buffer is not the call's: it must hold what was uploaded. */
  if (!c->residual &&
      memcmp(x->hResidualOut, x->hResidual, c->tokens * c->hidden * fcclTypeSize(t)) != 0) {
    testFail(__FILE__, __LINE__, "rank %d: %s: the residual buffer changed without a residual argument", x->rank,
             what);
    problems++;
  }
  /* Nothing written past the output. */
  const unsigned char* tail = (const unsigned char*)x->hOutput + c->tokens * outRow(c);
  for (int i = 0; i < 64; i++)
    if (tail[i] != COLL_POISON) {
      testFail(__FILE__, __LINE__, "rank %d: %s: byte %d past the output written", x->rank, what, i);
      problems++;
      break;
    }
  if (call < COLL_MAX_HASHES) {
    const size_t n = c->tokens * c->hidden * fcclTypeSize(t);
    uint64_t h = refHash(x->hOutput, c->tokens * outRow(c)) ^ (refHash(x->hResidualOut, n) * 3);
    if (c->mode == fcclScaleDynamic) h ^= refHash(x->hScale, c->tokens * sizeof(float)) * 5;
    x->shared->hashes[call][x->rank] = h | 1;
  }
  if (problems == 0) testPassed++;
  return problems;
}

/* One case: upload, the fused call and fcclAllReduce of the same input, download, check. A row too large for the
 * staging chunk must be refused with fcclInvalidArgument instead (and is not checked further). */
static int runCase(struct fusedContext* x, const struct fusedCase* c, uint64_t call,
                   void (*poke)(const struct fusedCase*, int rank, void* hostIn)) {
  struct fusedContext* ctx = x;
  char what[256];
  describe(c, call, formOf(x, c), what, sizeof(what));
  if (collVerbose() && x->rank == 0) printf("%s\n", what);
  if (upload(x, c, call, poke)) return 1;
  const void* in = inputOf(x, c);
  if (!rowFits(c, x->nranks)) {
    const fcclResult_t r = fusedCall(x, c, in, x->residual, x->output, x->scale, c->tokens, x->stream);
    EXPECT_MSG(r == fcclInvalidArgument, "rank %d: %s: a row over the staging chunk returned %s", x->rank, what,
               fcclGetErrorString(r));
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "staging chunk");
    return r == fcclInvalidArgument ? 0 : 1;
  }
  COLL_CHECK_FCCL(what, fusedCall(x, c, in, x->residual, x->output, x->scale, c->tokens, x->stream));
  COLL_CHECK_FCCL(what, fcclAllReduce(in, x->reduced, c->tokens * c->hidden, c->type, fcclSum, x->comm, x->stream));
  if (download(x, c)) return 1;
  return checkCase(x, c, call);
}

/* ---- modes --------------------------------------------------------------------------------------------------- */

struct modeArgs {
  struct collShared* shared;
  uint64_t seed;
  int gpus;
  const char* mode;
  int form; /* -1, FCCL_FUSED_ONESHOT or FCCL_FUSED_TWOSHOT: the third argument */
};

static const fcclDataType_t kTypes[] = {fcclBfloat16, fcclFloat16, fcclFloat32};

static int modeRanks(struct fusedContext* x) {
  static const size_t hiddens[] = {128, 129, 1000, 4095, 4096, 8192, 16384};
  static const size_t tokensQuick[] = {1, 5};
  static const size_t tokensFull[] = {1, 5, 67};
  const size_t* tokens = collQuick() ? tokensQuick : tokensFull;
  const int nTokens = collQuick() ? 2 : 3;
  uint64_t call = 0;
  int bad = 0;
  for (size_t ti = 0; ti < 3; ti++)
    for (size_t hi = 0; hi < sizeof(hiddens) / sizeof(hiddens[0]); hi++)
      for (int k = 0; k < nTokens; k++)
        for (int opt = 0; opt < 4; opt++) {
          /* opt: bit 0 registered; residual always but in opt 2, weight always but in opt 3. */
          struct fusedCase c = {kTypes[ti], kTypes[ti], fcclScaleNone, tokens[k], hiddens[hi], opt != 2, opt != 3,
                                opt & 1, 1e-6f, 1.0f};
          bad += runCase(x, &c, call++, NULL);
          if (bad > 10) return call;
        }
  return (int)call;
}

static int modeFp8(struct fusedContext* x) {
  static const size_t hiddens[] = {128, 129, 4096, 8191};
  uint64_t call = 0;
  for (size_t ti = 0; ti < 3; ti++)
    for (size_t hi = 0; hi < sizeof(hiddens) / sizeof(hiddens[0]); hi++)
      for (int mode = fcclScaleStatic; mode <= fcclScaleDynamic; mode++)
        for (int reg = 0; reg < 2; reg++) {
          struct fusedCase c = {kTypes[ti], fcclFloat8e4m3, (fcclScaleMode_t)mode, 33, hiddens[hi], 1, reg == 0, reg,
                                1e-5f, 0.0078125f};
          runCase(x, &c, call++, NULL);
        }
  return (int)call;
}

/* Token t's bits alone, among 64 and among 4096 tokens, staged and registered, are the same: under the automatic
 * choice (the batch of 4096 runs the two-shot form, a token alone the one-shot) and with each form forced where it
 * can run the call. */
static int modeBatch(struct fusedContext* x) {
  struct fusedContext* ctx = x;
  const size_t big = collQuick() ? 1024 : 4096, hidden = 4096;
  uint64_t call = 0;
  for (size_t ti = 0; ti < 3; ti++) {
    for (int fp8 = 0; fp8 < 2; fp8++) {
      struct fusedCase c = {kTypes[ti], fp8 ? fcclFloat8e4m3 : kTypes[ti], fp8 ? fcclScaleDynamic : fcclScaleNone,
                            big, hidden, 1, 1, 0, 1e-6f, 1.0f};
      const size_t size = fcclTypeSize(c.type), row = hidden * size, outBytes = outRow(&c);
      if (big * row + 64 > x->capacity || !rowFits(&c, x->nranks)) continue;
      /* The whole batch, staged: the reference bits (also checked against the host reference). */
      if (runCase(x, &c, call, NULL)) return (int)call + 1;
      char* refOut = malloc(big * outBytes);
      char* refRes = malloc(big * row);
      float* refScale = malloc(big * sizeof(float));
      if (!refOut || !refRes || !refScale) return (int)call + 1;
      memcpy(refOut, x->hOutput, big * outBytes);
      memcpy(refRes, x->hResidualOut, big * row);
      memcpy(refScale, x->hScale, big * sizeof(float));
      /* The same data through other batch sizes and forms: [first, first + tokens) of the batch, in the automatic
       * choice (-1) or a form forced (strictly: the two-shot only where it fits). */
      const int two = twoshotFits(&c, x->nranks) ? FCCL_FUSED_TWOSHOT : FCCL_FUSED_ONESHOT;
      const struct {
        size_t first, tokens;
        int registered, form;
      } slices[] = {{0, big, 1, -1},
                    {0, 1, 0, -1},
                    {7, 1, 1, -1},
                    {big - 1, 1, 0, -1},
                    {big / 2, 1, 1, -1},
                    {3, 64, 0, -1},
                    {big - 64, 64, 1, -1},
                    {0, big, 0, FCCL_FUSED_ONESHOT},
                    {0, big, 1, FCCL_FUSED_ONESHOT},
                    {0, big, 0, two},
                    {0, big, 1, two},
                    {5, 1, 0, two},
                    {big - 3, 3, 1, two},
                    {11, 1, 1, FCCL_FUSED_ONESHOT}};
      for (size_t s = 0; s < sizeof(slices) / sizeof(slices[0]); s++) {
        c.registered = slices[s].registered;
        const int form = slices[s].form;
        char* in = inputOf(x, &c);
        COLL_CHECK_CUDA("batch", cudaMemcpyAsync(in, x->hIn, big * row, cudaMemcpyHostToDevice, x->stream));
        COLL_CHECK_CUDA("batch", cudaMemcpyAsync(x->residual, x->hResidual, big * row, cudaMemcpyHostToDevice,
                                                 x->stream));
        COLL_CHECK_CUDA("batch", cudaMemsetAsync(x->output, COLL_POISON, big * outBytes, x->stream));
        COLL_CHECK_CUDA("batch", cudaMemsetAsync(x->scale, COLL_POISON, big * sizeof(float), x->stream));
        const size_t f = slices[s].first, n = slices[s].tokens;
        COLL_CHECK_FCCL("batch", fusedCallForm(x, &c, in + f * row, (char*)x->residual + f * row,
                                               (char*)x->output + f * outBytes, (float*)x->scale + f, n, x->stream,
                                               form));
        COLL_CHECK_CUDA("batch", cudaMemcpyAsync(x->hOutput, x->output, big * outBytes, cudaMemcpyDeviceToHost,
                                                 x->stream));
        COLL_CHECK_CUDA("batch", cudaMemcpyAsync(x->hResidualOut, x->residual, big * row, cudaMemcpyDeviceToHost,
                                                 x->stream));
        COLL_CHECK_CUDA("batch", cudaMemcpyAsync(x->hScale, x->scale, big * sizeof(float), cudaMemcpyDeviceToHost,
                                                 x->stream));
        COLL_CHECK_CUDA("batch", cudaStreamSynchronize(x->stream));
        const char* formName = form < 0 ? "auto" : fcclFusedFormName(form);
        EXPECT_MSG(memcmp((char*)x->hOutput + f * outBytes, refOut + f * outBytes, n * outBytes) == 0,
                   "rank %d: %s: tokens [%zu, %zu) alone (%s, %s) differ in the output from the batch of %zu",
                   x->rank, refTypeName(c.type), f, f + n, c.registered ? "registered" : "staged", formName, big);
        EXPECT_MSG(memcmp((char*)x->hResidualOut + f * row, refRes + f * row, n * row) == 0,
                   "rank %d: %s: tokens [%zu, %zu) alone (%s) differ in the residual", x->rank, refTypeName(c.type),
                   f, f + n, formName);
        if (fp8)
          EXPECT_MSG(memcmp((float*)x->hScale + f, refScale + f, n * sizeof(float)) == 0,
                     "rank %d: %s: tokens [%zu, %zu) alone (%s) differ in the scales", x->rank, refTypeName(c.type),
                     f, f + n, formName);
        /* The rows next to the slice were not written (the output was poisoned before the call). */
        int outside = 1;
        const unsigned char* o = (const unsigned char*)x->hOutput;
        for (size_t b = 0; b < outBytes; b++) {
          if (f > 0) outside &= o[(f - 1) * outBytes + b] == COLL_POISON;
          if (f + n < big) outside &= o[(f + n) * outBytes + b] == COLL_POISON;
        }
        EXPECT_MSG(outside, "rank %d: %s: tokens [%zu, %zu) (%s) wrote output rows next to theirs", x->rank,
                   refTypeName(c.type), f, f + n, formName);
      }
      free(refOut);
      free(refRes);
      free(refScale);
      call++;
    }
  }
  return (int)call;
}

/*
 * Back to back on one stream, with no host synchronisation: fused calls alternating forms and plain or registered
 * input, each into residual and output rows of its own (the residual reset to the same values), and all-reduces of
 * three sizes (other algorithms, other staging use) between them. Every call's staging must be free when the next
 * call of any kind writes it: every slot must hold the bits of one synchronised one-shot call, and a last
 * all-reduce those of a synchronised one. Returns the number of problems.
 */
static int mixedCalls(struct fusedContext* x, uint64_t call) {
  struct fusedContext* ctx = x;
  struct fusedCase c = {fcclBfloat16, fcclBfloat16, fcclScaleNone, 67, 4096, 1, 1, 0, 1e-6f, 1.0f};
  const size_t count = c.tokens * c.hidden, bytes = count * 2, outBytes = c.tokens * outRow(&c);
  size_t slots = x->capacity / (bytes + 64);
  if (slots > 12) slots = 12;
  if (slots < 2 || !twoshotFits(&c, x->nranks)) return 0;
  if (upload(x, &c, call, NULL)) return 1;
  char* plain = x->plainIn.base + COLL_GUARD;
  char* reg = x->regIn.base + COLL_GUARD;
  COLL_CHECK_CUDA("mixed", cudaMemcpyAsync(reg, x->hIn, bytes, cudaMemcpyHostToDevice, x->stream));
  COLL_CHECK_FCCL("mixed", fusedCallForm(x, &c, plain, x->residual, x->output, NULL, c.tokens, x->stream,
                                         FCCL_FUSED_ONESHOT));
  COLL_CHECK_FCCL("mixed", fcclAllReduce(plain, x->reduced, count, c.type, fcclSum, x->comm, x->stream));
  char* want = malloc(2 * bytes + outBytes);
  if (!want) return 1;
  COLL_CHECK_CUDA("mixed", cudaMemcpyAsync(want, x->residual, bytes, cudaMemcpyDeviceToHost, x->stream));
  COLL_CHECK_CUDA("mixed", cudaMemcpyAsync(want + bytes, x->reduced, bytes, cudaMemcpyDeviceToHost, x->stream));
  COLL_CHECK_CUDA("mixed", cudaMemcpyAsync(want + 2 * bytes, x->output, outBytes, cudaMemcpyDeviceToHost, x->stream));
  COLL_CHECK_CUDA("mixed", cudaStreamSynchronize(x->stream));
  for (size_t k = 0; k < slots; k++)
    COLL_CHECK_CUDA("mixed", cudaMemcpyAsync((char*)x->residual + k * bytes, x->hResidual, bytes,
                                             cudaMemcpyHostToDevice, x->stream));
  COLL_CHECK_CUDA("mixed", cudaMemsetAsync(x->output, COLL_POISON, slots * outBytes, x->stream));
  const size_t counts[] = {1000, count, 100003};
  for (size_t k = 0; k < slots; k++) {
    const int form = k % 2 ? FCCL_FUSED_TWOSHOT : FCCL_FUSED_ONESHOT;
    const char* in = (k / 2) % 2 ? reg : plain;
    COLL_CHECK_FCCL("mixed", fusedCallForm(x, &c, in, (char*)x->residual + k * bytes, (char*)x->output + k * outBytes,
                                           NULL, c.tokens, x->stream, form));
    COLL_CHECK_FCCL("mixed", fcclAllReduce(in, x->reduced, counts[k % 3], c.type, fcclSum, x->comm, x->stream));
  }
  COLL_CHECK_FCCL("mixed", fcclAllReduce(plain, x->reduced, count, c.type, fcclSum, x->comm, x->stream));
  COLL_CHECK_CUDA("mixed", cudaMemcpyAsync(x->hResidualOut, x->residual, slots * bytes, cudaMemcpyDeviceToHost,
                                           x->stream));
  COLL_CHECK_CUDA("mixed", cudaMemcpyAsync(x->hOutput, x->output, slots * outBytes, cudaMemcpyDeviceToHost,
                                           x->stream));
  COLL_CHECK_CUDA("mixed", cudaMemcpyAsync(x->hReduced, x->reduced, bytes, cudaMemcpyDeviceToHost, x->stream));
  COLL_CHECK_CUDA("mixed", cudaStreamSynchronize(x->stream));
  int problems = 0;
  for (size_t k = 0; k < slots; k++) {
    const int same = memcmp((char*)x->hResidualOut + k * bytes, want, bytes) == 0 &&
                     memcmp((char*)x->hOutput + k * outBytes, want + 2 * bytes, outBytes) == 0;
    EXPECT_MSG(same, "rank %d: back-to-back fused call %zu (%s, %s) differs from the synchronised call", x->rank, k,
               k % 2 ? "twoshot" : "oneshot", (k / 2) % 2 ? "registered" : "plain");
    problems += !same;
  }
  EXPECT_MSG(memcmp(x->hReduced, want + bytes, bytes) == 0,
             "rank %d: the all-reduce after back-to-back fused calls differs from the synchronised one", x->rank);
  problems += memcmp(x->hReduced, want + bytes, bytes) != 0;
  free(want);
  return problems;
}

/* The same input through the one-shot and the two-shot form (each strictly, each also checked against the host
 * reference): output, residual and scales bit for bit the same. Then mixedCalls. */
static int modeForms(struct fusedContext* x) {
  static const size_t hiddens[] = {129, 4096, 8191};
  const size_t n = (size_t)x->nranks;
  const size_t tokenCounts[] = {1, n > 1 ? n - 1 : 2, n, n + 1, 3 * n + 2, 333, 1000};
  const int nTokens = collQuick() ? 5 : (int)(sizeof(tokenCounts) / sizeof(tokenCounts[0]));
  uint64_t call = 0;
  int bad = 0;
  for (size_t ti = 0; ti < 3 && bad < 10; ti++)
    for (size_t hi = 0; hi < sizeof(hiddens) / sizeof(hiddens[0]); hi++)
      for (int k = 0; k < nTokens; k++)
        for (int opt = 0; opt < 12; opt++) {
          /* residual, weight, FP8 scale mode (none: the input's type); opt & 1: registered */
          static const struct {
            int residual, weight;
            fcclScaleMode_t mode;
          } variants[] = {{1, 1, fcclScaleNone},   {0, 1, fcclScaleNone},    {1, 0, fcclScaleNone},
                          {1, 1, fcclScaleStatic}, {1, 1, fcclScaleDynamic}, {0, 0, fcclScaleDynamic}};
          const int v = opt >> 1;
          const fcclScaleMode_t mode = variants[v].mode;
          struct fusedCase c = {kTypes[ti], mode != fcclScaleNone ? fcclFloat8e4m3 : kTypes[ti], mode, tokenCounts[k],
                                hiddens[hi], variants[v].residual, variants[v].weight, opt & 1, 1e-6f, 0.0078125f};
          if (c.tokens * c.hidden * fcclTypeSize(c.type) + 64 > x->capacity || !twoshotFits(&c, x->nranks)) continue;
          const size_t outBytes = c.tokens * outRow(&c), resBytes = c.tokens * c.hidden * fcclTypeSize(c.type);
          x->form = FCCL_FUSED_ONESHOT;
          bad += runCase(x, &c, call, NULL);
          char* out = malloc(outBytes);
          char* res = malloc(resBytes);
          float* scales = malloc(c.tokens * sizeof(float));
          if (!out || !res || !scales) return (int)call + 1;
          memcpy(out, x->hOutput, outBytes);
          memcpy(res, x->hResidualOut, resBytes);
          memcpy(scales, x->hScale, c.tokens * sizeof(float));
          x->form = FCCL_FUSED_TWOSHOT;
          bad += runCase(x, &c, call, NULL); /* the same call number: the same data */
          char what[256];
          describe(&c, call, FCCL_FUSED_TWOSHOT, what, sizeof(what));
          const int same = memcmp(out, x->hOutput, outBytes) == 0 && memcmp(res, x->hResidualOut, resBytes) == 0 &&
                           (mode != fcclScaleDynamic || memcmp(scales, x->hScale, c.tokens * sizeof(float)) == 0);
          EXPECT_MSG(same, "rank %d: %s: the two-shot form's bits differ from the one-shot form's", x->rank, what);
          bad += !same;
          free(out);
          free(res);
          free(scales);
          call++;
        }
  x->form = -1;
  if (bad < 10) mixedCalls(x, call);
  return (int)call;
}

/* Captured: residual restored from a pristine copy, then the fused call; every replay gives the eager bits. */
static int modeGraph(struct fusedContext* x) {
  struct fusedContext* ctx = x;
  uint64_t call = 0;
  const int replays = collQuick() ? 50 : 1000;
  for (int variant = 0; variant < 3; variant++) {
    struct fusedCase c = {fcclBfloat16, variant == 2 ? fcclFloat8e4m3 : fcclBfloat16,
                          variant == 2 ? fcclScaleDynamic : fcclScaleNone, 33, 4096, 1, 1, variant == 1, 1e-6f, 1.0f};
    if (runCase(x, &c, call++, NULL)) return (int)call;
    const size_t row = c.hidden * fcclTypeSize(c.type), outBytes = c.tokens * outRow(&c);
    char* eagerOut = malloc(outBytes);
    char* eagerRes = malloc(c.tokens * row);
    if (!eagerOut || !eagerRes) return (int)call;
    memcpy(eagerOut, x->hOutput, outBytes);
    memcpy(eagerRes, x->hResidualOut, c.tokens * row);
    void* pristine = NULL;
    COLL_CHECK_CUDA("graph", cudaMalloc(&pristine, c.tokens * row));
    COLL_CHECK_CUDA("graph", cudaMemcpy(pristine, x->hResidual, c.tokens * row, cudaMemcpyHostToDevice));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    COLL_CHECK_CUDA("graph", cudaStreamBeginCapture(x->stream, cudaStreamCaptureModeGlobal));
    COLL_CHECK_CUDA("graph", cudaMemcpyAsync(x->residual, pristine, c.tokens * row, cudaMemcpyDeviceToDevice,
                                             x->stream));
    const fcclResult_t captured = fusedCall(x, &c, inputOf(x, &c), x->residual, x->output, x->scale, c.tokens,
                                            x->stream);
    COLL_CHECK_CUDA("graph", cudaStreamEndCapture(x->stream, &graph));
    COLL_CHECK_FCCL("graph capture", captured);
    COLL_CHECK_CUDA("graph", cudaGraphInstantiate(&exec, graph, 0));
    int bad = 0;
    for (int r = 0; r < replays && bad < 3; r++) {
      COLL_CHECK_CUDA("graph", cudaMemsetAsync(x->output, COLL_POISON, outBytes, x->stream));
      COLL_CHECK_CUDA("graph", cudaGraphLaunch(exec, x->stream));
      /* An eager all-reduce between replays: graph and eager calls share the epochs. */
      if (r % 10 == 9)
        COLL_CHECK_FCCL("graph", fcclAllReduce(inputOf(x, &c), x->reduced, 1000, fcclFloat32, fcclSum, x->comm,
                                               x->stream));
      COLL_CHECK_CUDA("graph", cudaMemcpyAsync(x->hOutput, x->output, outBytes, cudaMemcpyDeviceToHost, x->stream));
      COLL_CHECK_CUDA("graph", cudaMemcpyAsync(x->hResidualOut, x->residual, c.tokens * row, cudaMemcpyDeviceToHost,
                                               x->stream));
      COLL_CHECK_CUDA("graph", cudaStreamSynchronize(x->stream));
      const int same = memcmp(x->hOutput, eagerOut, outBytes) == 0 &&
                       memcmp(x->hResidualOut, eagerRes, c.tokens * row) == 0;
      EXPECT_MSG(same, "rank %d: graph variant %d replay %d differs from the eager call", x->rank, variant, r);
      bad += !same;
    }
    fcclResult_t async = fcclInternalError;
    EXPECT_EQ_INT(fcclCommGetAsyncError(x->comm, &async), fcclSuccess);
    EXPECT_EQ_INT(async, fcclSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(pristine);
    free(eagerOut);
    free(eagerRes);
  }
  return (int)call;
}

/* Rank 0's input: NaN at row 1 element 5, +Inf at row 2 element 7. */
static void pokeNaN(const struct fusedCase* c, int rank, void* hostIn) {
  if (rank != 0) return;
  storeBits(c->type, hostIn, 1 * c->hidden + 5, fromFloat(c->type, NAN));
  storeBits(c->type, hostIn, 2 * c->hidden + 7, fromFloat(c->type, INFINITY));
}

static int modeNaN(struct fusedContext* x) {
  uint64_t call = 0;
  for (size_t ti = 0; ti < 3; ti++)
    for (int fp8 = 0; fp8 < 2; fp8++) {
      struct fusedCase c = {kTypes[ti], fp8 ? fcclFloat8e4m3 : kTypes[ti], fp8 ? fcclScaleDynamic : fcclScaleNone, 4,
                            300, 1, 1, 0, 1e-6f, 1.0f};
      runCase(x, &c, call++, pokeNaN); /* rows 0 and 3 against the reference */
      const fcclDataType_t t = c.type;
      int nanRow = 1, zerosElse = 1, nanAtInf = 1;
      for (size_t i = 0; i < c.hidden; i++) {
        if (fp8) {
          const uint8_t* o = (const uint8_t*)x->hOutput;
          nanRow &= fp8IsNaN(o[c.hidden + i]);
          /* Row 2's scale is NaN (max |y| over a NaN): every output NaN. */
          nanAtInf &= fp8IsNaN(o[2 * c.hidden + i]);
        } else {
          nanRow &= isnan(toDouble(t, refLoadBits(t, x->hOutput, c.hidden + i)));
          const double v = toDouble(t, refLoadBits(t, x->hOutput, 2 * c.hidden + i));
          if (i == 7)
            nanAtInf &= isnan(v);
          else
            zerosElse &= v == 0.0;
        }
      }
      EXPECT_MSG(nanRow, "rank %d: %s: a NaN input does not make its row's outputs NaN", x->rank, refTypeName(t));
      EXPECT_MSG(nanAtInf, "rank %d: %s: an Inf input does not give NaN where docs/fused.md says", x->rank,
                 refTypeName(t));
      EXPECT_MSG(zerosElse, "rank %d: %s: an Inf input does not zero the rest of its row", x->rank, refTypeName(t));
      if (fp8) {
        float s1, s2;
        memcpy(&s1, (const char*)x->hScale + sizeof(float), sizeof(float));
        memcpy(&s2, (const char*)x->hScale + 2 * sizeof(float), sizeof(float));
        EXPECT_MSG(isnan(s1) && isnan(s2), "rank %d: the scales of the NaN and Inf rows are %g and %g", x->rank,
                   (double)s1, (double)s2);
      }
    }
  return (int)call;
}

/* Every argument error: fcclInvalidArgument, a message naming it, nothing written. */
static int modeInvalid(struct fusedContext* x) {
  struct fusedContext* ctx = x;
  const size_t tokens = 4, hidden = 256;
  char* in = x->plainIn.base + COLL_GUARD;
  char* res = x->residual;
  char* out = x->output;
  float* sc = x->scale;
  const void* w = x->weight;
  fcclComm_t comm = x->comm;
  cudaStream_t s = x->stream;
  COLL_CHECK_CUDA("invalid", cudaMemset(out, COLL_POISON, 1 << 20));
  COLL_CHECK_CUDA("invalid", cudaMemset(res, COLL_POISON, 1 << 20));
  const fcclDataType_t bf = fcclBfloat16, f8 = fcclFloat8e4m3;
  const fcclScaleMode_t none = fcclScaleNone;
  const float e = 1e-6f;
  /* Each call must fail with fcclInvalidArgument and a message holding word, on the thread and on the comm. */
#define INVALID(word, call)                                                                                    \
  do {                                                                                                         \
    const fcclResult_t r_ = (call);                                                                            \
    EXPECT_MSG(r_ == fcclInvalidArgument, "rank %d: %s returned %s", x->rank, #call, fcclGetErrorString(r_)); \
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), (word));                                                       \
  } while (0)
  INVALID("input", fcclAllReduceAddRMSNorm(NULL, res, w, out, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("output", fcclAllReduceAddRMSNorm(in, res, w, NULL, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("hidden", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, 0, e, bf, bf, none, NULL, comm, s));
  INVALID("row", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, 40000, e, bf, bf, none, NULL, comm, s));
  INVALID("eps", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, -1.0f, bf, bf, none, NULL, comm, s));
  INVALID("eps", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, NAN, bf, bf, none, NULL, comm, s));
  INVALID("eps", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, INFINITY, bf, bf, none, NULL, comm, s));
  INVALID("datatype", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, fcclInt32, fcclInt32, none, NULL,
                                              comm, s));
  INVALID("datatype", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, f8, f8, fcclScaleStatic, sc, comm,
                                              s));
  INVALID("outtype", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, fcclFloat16, none, NULL, comm,
                                             s));
  INVALID("scaleMode", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, f8, none, NULL, comm, s));
  INVALID("scaleMode", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, bf, fcclScaleStatic, sc, comm,
                                               s));
  INVALID("scaleMode", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, f8, (fcclScaleMode_t)7, sc,
                                               comm, s));
  INVALID("scale is NULL", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, f8, fcclScaleDynamic, NULL,
                                                   comm, s));
  INVALID("without an FP8", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, bf, none, sc, comm, s));
  INVALID("input", fcclAllReduceAddRMSNorm(in + 1, res, w, out, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("residual", fcclAllReduceAddRMSNorm(in, res + 1, w, out, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("weight", fcclAllReduceAddRMSNorm(in, res, (const char*)w + 1, out, tokens, hidden, e, bf, bf, none, NULL,
                                            comm, s));
  INVALID("scale", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, f8, fcclScaleDynamic,
                                           (float*)((char*)sc + 2), comm, s));
  INVALID("overlaps residual", fcclAllReduceAddRMSNorm(in, in + 512, w, out, tokens, hidden, e, bf, bf, none, NULL,
                                                       comm, s));
  INVALID("input", fcclAllReduceAddRMSNorm(in, res, w, in, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("overlaps output", fcclAllReduceAddRMSNorm(in, res, w, res + 256, tokens, hidden, e, bf, bf, none, NULL,
                                                     comm, s));
  INVALID("overlap", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, f8, fcclScaleDynamic,
                                             (float*)out, comm, s));
  INVALID("overflow", fcclAllReduceAddRMSNorm(in, res, w, out, SIZE_MAX / 4, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("communicator", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, bf, none, NULL, NULL, s));
  INVALID("host", fcclAllReduceAddRMSNorm(x->hIn, res, w, out, tokens, hidden, e, bf, bf, none, NULL, comm, s));
#undef INVALID
  /* The comm records the last failure too. */
  EXPECT_EQ_INT(fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, NAN, bf, bf, none, NULL, comm, s),
                fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(comm), "fcclAllReduceAddRMSNorm: eps");
  /* Tokens 0 with NULL buffers: nothing to do. */
  EXPECT_EQ_INT(fcclAllReduceAddRMSNorm(NULL, NULL, NULL, NULL, 0, hidden, 1e-6f, bf, bf, fcclScaleNone, NULL, comm, s),
                fcclSuccess);
  COLL_CHECK_CUDA("invalid", cudaStreamSynchronize(s));
  /* Nothing was launched: output and residual still hold the poison. */
  unsigned char* host = x->hOutput;
  COLL_CHECK_CUDA("invalid", cudaMemcpy(host, out, 1 << 16, cudaMemcpyDeviceToHost));
  COLL_CHECK_CUDA("invalid", cudaMemcpy(host + (1 << 16), res, 1 << 16, cudaMemcpyDeviceToHost));
  int untouched = 1;
  for (size_t i = 0; i < (2u << 16); i++) untouched &= host[i] == COLL_POISON;
  EXPECT_MSG(untouched, "rank %d: an invalid call wrote output or residual", x->rank);
  /* The communicator still works. */
  struct fusedCase c = {fcclBfloat16, fcclBfloat16, fcclScaleNone, tokens, hidden, 1, 1, 0, 1e-6f, 1.0f};
  runCase(x, &c, 0, NULL);
  return 1;
}

/* Rank 0 calls the fused norm alone on a communicator of its own (number which), its input staged or registered:
 * with abortIt it aborts the waiting kernel, else the kernel gives up after FCCL_TIMEOUT and the communicator says
 * so. Rank 1 waits for rank 0 to finish, then aborts its communicator too. */
static void faultScenario(const struct modeArgs* args, int rank, int nranks, int which, int registered, int abortIt) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, which);
  if (!comm) {
    testFail(__FILE__, __LINE__, "rank %d: no communicator", rank);
    return;
  }
  struct collBuffer in;
  if (!collBufferCreate(comm, &in, 1u << 20, registered)) { /* registration is collective: both ranks */
    testFail(__FILE__, __LINE__, "rank %d: buffer", rank);
    return;
  }
  const char* form = registered ? "registered" : "staged";
  const char* shape = args->form < 0 ? "auto" : fcclFusedFormName(args->form);
  if (rank == 0) {
    void *residual = NULL, *output = NULL;
    cudaStream_t stream;
    EXPECT_EQ_INT(cudaMalloc(&residual, 1u << 20), cudaSuccess);
    EXPECT_EQ_INT(cudaMalloc(&output, 1u << 20), cudaSuccess);
    EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ_INT(cudaMemset(in.base, 0x3c, (1u << 20) + 2 * COLL_GUARD), cudaSuccess); /* bf16 1.0-ish */
    const int64_t start = collNowNs();
    EXPECT_EQ_INT(fcclAllReduceAddRMSNormForm(in.base + COLL_GUARD, residual, NULL, output, 8, 1024, 1e-6f,
                                              fcclBfloat16, fcclBfloat16, fcclScaleNone, NULL, comm, stream,
                                              args->form),
                  fcclSuccess);
    if (abortIt) {
      usleep(200000);
      EXPECT_EQ_INT(cudaStreamQuery(stream), cudaErrorNotReady); /* still waiting for rank 1 */
      const int64_t aborted = collNowNs();
      EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
      EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
      const double seconds = (double)(collNowNs() - aborted) / 1e9;
      EXPECT_MSG(seconds < 5, "fcclCommAbort took %.2f s to stop the %s %s fused norm", seconds, form, shape);
      printf("%s %s: aborted in %.3f s\n", form, shape, seconds);
    } else {
      EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess); /* the kernel ends: it gave up */
      const double seconds = (double)(collNowNs() - start) / 1e9;
      EXPECT_MSG(seconds < 20, "the %s %s fused norm took %.1f s to give up (FCCL_TIMEOUT=300 ms)", form, shape,
                 seconds);
      fcclResult_t async = fcclSuccess;
      EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
      EXPECT_EQ_INT(async, fcclTimeout);
      const char* text = fcclGetLastError(comm);
      EXPECT_STR_CONTAINS(text, "fused_norm kernel");
      EXPECT_STR_CONTAINS(text, "rank 1 did not arrive");
      printf("%s %s: gave up after %.2f s: %s\n", form, shape, seconds, text);
      /* Later calls return the error and launch nothing. */
      EXPECT_EQ_INT(fcclAllReduceAddRMSNormForm(in.base + COLL_GUARD, residual, NULL, output, 8, 1024, 1e-6f,
                                                fcclBfloat16, fcclBfloat16, fcclScaleNone, NULL, comm, stream,
                                                args->form),
                    fcclTimeout);
      EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    }
    EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
    EXPECT_EQ_INT(cudaFree(residual), cudaSuccess);
    EXPECT_EQ_INT(cudaFree(output), cudaSuccess);
    testShmPost(&args->shared->flags[which], 1);
  } else {
    const int result = testShmWait(args->shared->shm, &args->shared->flags[which], 1, 120000, "rank 0's scenario");
    EXPECT_MSG(result == TEST_SHM_OK, "rank 0 never finished scenario %d (%s)", which, testShmResultName(result));
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
  }
  /* The communicator is gone: its registrations were released by the abort, the memory is ours to free. */
  if (registered)
    EXPECT_EQ_INT(fcclMemFree(in.base), fcclSuccess);
  else
    EXPECT_EQ_INT(cudaFree(in.base), cudaSuccess);
}

static int faultMain(int rank, int nranks, const struct modeArgs* args) {
  const int abortIt = strcmp(args->mode, "abort") == 0;
  faultScenario(args, rank, nranks, 1, 0, abortIt);
  faultScenario(args, rank, nranks, 2, 1, abortIt);
  if (rank == 0) args->shared->flags[0] = 1;
  char name[64];
  snprintf(name, sizeof(name), "fused_norm %s rank %d", args->mode, rank);
  return testSummary(name);
}

static int rankMain(int rank, int nranks, void* arg) {
  const struct modeArgs* args = arg;
  if (strcmp(args->mode, "timeout") == 0 || strcmp(args->mode, "abort") == 0) return faultMain(rank, nranks, args);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct fusedContext x;
  /* The batch of 4096 x 4096 fp32 (64 MiB) fits, and 67 x 16384 fp32 in the other modes. */
  const size_t capacity = strcmp(args->mode, "batch") == 0 ? (size_t)65 << 20 : (size_t)8 << 20;
  if (!contextInit(&x, args->shared, comm, rank, nranks, args->seed, capacity, args->form)) {
    testFail(__FILE__, __LINE__, "rank %d: buffers", rank);
    return 1;
  }
  int calls = 0;
  if (strcmp(args->mode, "ranks") == 0) calls = modeRanks(&x);
  if (strcmp(args->mode, "fp8") == 0) calls = modeFp8(&x);
  if (strcmp(args->mode, "batch") == 0) calls = modeBatch(&x);
  if (strcmp(args->mode, "forms") == 0) calls = modeForms(&x);
  if (strcmp(args->mode, "graph") == 0) calls = modeGraph(&x);
  if (strcmp(args->mode, "nan") == 0) calls = modeNaN(&x);
  if (strcmp(args->mode, "invalid") == 0) calls = modeInvalid(&x);
  if (rank == 0) args->shared->flags[0] = calls;
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  contextFini(&x);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  char name[64];
  snprintf(name, sizeof(name), "fused_norm %s rank %d", args->mode, rank);
  return testSummary(name);
}

int main(int argc, char** argv) {
  const char* modes[] = {"ranks", "fp8", "batch", "forms", "graph", "nan", "invalid", "timeout", "abort"};
  const char* mode = argc > 1 ? argv[1] : "ranks";
  int known = 0;
  for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) known |= strcmp(mode, modes[i]) == 0;
  const int nranks = argc > 2 ? atoi(argv[2]) : 2;
  const int request = fcclFusedParseRequest(argc > 3 ? argv[3] : "auto");
  if (!known || nranks < 1 || nranks > REF_MAX_RANKS || request < 0 || argc > 4) {
    fprintf(stderr,
            "usage: %s ranks|fp8|batch|forms|graph|nan|invalid|timeout|abort [nranks 1..%d [auto|oneshot|twoshot]]\n",
            argv[0], REF_MAX_RANKS);
    return 2;
  }
  const int form = request == FCCL_FUSED_REQUEST_AUTO ? -1 : request;
  const int fault = strcmp(mode, "timeout") == 0 || strcmp(mode, "abort") == 0;
  if (fault && nranks != 2) {
    fprintf(stderr, "%s: the %s mode runs on 2 ranks\n", argv[0], mode);
    return 2;
  }
  /* Read once, at the communicator's first call, in every forked rank. */
  if (strcmp(mode, "timeout") == 0) setenv("FCCL_TIMEOUT", "300", 1);
  struct modeArgs args = {collSharedNew(nranks), testSeed(), testGpuCount(), mode, form};
  if (args.gpus < 1) {
    printf("SKIP: no GPU\n");
    collSharedFree(args.shared);
    return TEST_SKIP;
  }
  int codes[REF_MAX_RANKS];
  const int failed = testShmForkRanks(args.shared->shm, rankMain, &args, 1200, codes);
  EXPECT_EQ_INT(failed, 0);
  const int calls = args.shared->flags[0];
  EXPECT_MSG(calls > 0, "no call ran");
  const int differ = collCompareHashes(args.shared, nranks, (uint64_t)(calls < COLL_MAX_HASHES ? calls : 0));
  EXPECT_MSG(differ == 0, "%d calls gave different bits on different ranks", differ);
  collSharedFree(args.shared);
  char name[64];
  snprintf(name, sizeof(name), "fused_norm %s %s", mode, form < 0 ? "auto" : fcclFusedFormName(form));
  return testSummary(name);
}
