/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllReduceAddRMSNorm's test (test_fused_norm.c): the host reference (inputs, 16-bit and FP8 conversions, the
 * tolerances) and one case: the per-rank buffers, the upload, the call in the requested form and the checks of
 * r', the output and the scales against the reference.
 */
#include "test_fused_norm.h"

#include "algo.h"
#include "comm.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"

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

double fusedToDouble(fcclDataType_t type, uint64_t bits) {
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

uint64_t fusedFromFloat(fcclDataType_t type, float value) {
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

void fusedStoreBits(fcclDataType_t type, void* buffer, size_t i, uint64_t bits) {
  if (fcclTypeSize(type) == 2)
    ((uint16_t*)buffer)[i] = (uint16_t)bits;
  else
    ((uint32_t*)buffer)[i] = (uint32_t)bits;
}

/* What a tensor holds: values of magnitude [lo, lo + span), random sign unless positive, never zero. */
enum { DATA_INPUT = 1, DATA_RESIDUAL = 2, DATA_WEIGHT = 3 };
static uint64_t dataBits(fcclDataType_t type, uint64_t seed, uint64_t call, int tensor, int rank, uint64_t index) {
  const uint64_t r = mix64(
      seed ^ mix64(call * 0x100000001b3ull ^ ((uint64_t)tensor << 56) ^ ((uint64_t)rank << 48) ^ mix64(index)));
  const double unit = (double)(r >> 11) / 9007199254740992.0;
  double v = tensor == DATA_WEIGHT ? 0.5 + unit : 0.0625 + 2.0 * unit;
  if (tensor != DATA_WEIGHT && (r & 1)) v = -v;
  return fusedFromFloat(type, (float)v);
}

/* E4M3: bits & 0x7f orders the magnitudes; 0x7f is NaN. */
static double fp8Value(uint8_t bits) {
  const int e = (bits >> 3) & 15, m = bits & 7;
  const double mag = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
  return (bits & 0x80) ? -mag : mag;
}
int fusedFp8IsNaN(uint8_t bits) { return (bits & 0x7f) == 0x7f; }

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
  if (isnan(x)) return fusedFp8IsNaN(got);
  if (fusedFp8IsNaN(got)) return 0;
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

/* form: as fcclAllReduceAddRMSNormForm takes it (-1: the public call's choice). */
void fusedDescribe(const struct fusedCase* c, uint64_t call, int form, char* out, size_t size) {
  snprintf(out, size, "call %llu: %zu x %zu %s -> %s scale %d%s%s %s eps %g, %s", (unsigned long long)call, c->tokens,
           c->hidden, refTypeName(c->type), refTypeName(c->out), (int)c->mode, c->residual ? " residual" : "",
           c->weight ? " weight" : "", c->registered ? "registered" : "plain", (double)c->eps,
           form < 0 ? "auto" : fcclFusedFormName(form));
}

int fusedContextInit(struct fusedContext* x, struct collShared* shared, fcclComm_t comm, int rank, int nranks,
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

void fusedContextFini(struct fusedContext* x) {
  void* dev[] = {x->residual, x->weight, x->output, x->reduced, x->scale};
  for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) cudaFree(dev[i]);
  void* host[] = {x->hIn, x->hResidual, x->hWeight, x->hOutput, x->hReduced, x->hResidualOut, x->hScale};
  for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) cudaFreeHost(host[i]);
  collBufferDestroy(x->comm, &x->plainIn);
  collBufferDestroy(x->comm, &x->regIn);
  if (x->stream) cudaStreamDestroy(x->stream);
}

char* fusedInputOf(struct fusedContext* x, const struct fusedCase* c) {
  return (c->registered ? x->regIn.base : x->plainIn.base) + COLL_GUARD;
}

/* Host copies of the case's data for call `call` (input of this rank, residual and weight shared by all ranks),
 * uploaded; output and scales poisoned. Also the host's NaN/Inf edits: poke(c, hIn) may change inputs. */
int fusedUpload(struct fusedContext* x, const struct fusedCase* c, uint64_t call,
                void (*poke)(const struct fusedCase*, int rank, void* hostIn)) {
  const size_t n = c->tokens * c->hidden, size = fcclTypeSize(c->type);
  for (size_t i = 0; i < n; i++) {
    fusedStoreBits(c->type, x->hIn, i, dataBits(c->type, x->seed, call, DATA_INPUT, x->rank, i));
    fusedStoreBits(c->type, x->hResidual, i, dataBits(c->type, x->seed, call, DATA_RESIDUAL, 0, i));
  }
  for (size_t i = 0; i < c->hidden; i++)
    fusedStoreBits(c->type, x->hWeight, i, dataBits(c->type, x->seed, call, DATA_WEIGHT, 0, i));
  if (poke) poke(c, x->rank, x->hIn);
  struct fusedContext* ctx = x;
  COLL_CHECK_CUDA("upload", cudaMemcpyAsync(fusedInputOf(x, c), x->hIn, n * size, cudaMemcpyHostToDevice, x->stream));
  COLL_CHECK_CUDA("upload", cudaMemcpyAsync(x->residual, x->hResidual, n * size, cudaMemcpyHostToDevice, x->stream));
  COLL_CHECK_CUDA("upload",
                  cudaMemcpyAsync(x->weight, x->hWeight, c->hidden * size, cudaMemcpyHostToDevice, x->stream));
  COLL_CHECK_CUDA("poison", cudaMemsetAsync(x->output, COLL_POISON, n * size + 64, x->stream));
  COLL_CHECK_CUDA("poison", cudaMemsetAsync(x->scale, COLL_POISON, c->tokens * sizeof(float) + 64, x->stream));
  if (c->mode == fcclScaleStatic)
    COLL_CHECK_CUDA("scale",
                    cudaMemcpyAsync(x->scale, &c->staticScale, sizeof(float), cudaMemcpyHostToDevice, x->stream));
  return 0;
}

/* Whether a row of the case fits one staging chunk under the environment's FCCL_STAGING_BYTES (fccl.h: a row
 * that does not is an argument error, whether the input is registered or not). */
int fusedRowFits(const struct fusedCase* c, int nranks) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const uint64_t pitch = (c->hidden * fcclTypeSize(c->type) + 15) / 16 * 16;
  return pitch <= layout.chunkBytes;
}

/* Whether the two-shot form can run the case: one row pushed to an owner, and one row's results (r' with a
 * residual, the output row, a dynamic scale), each fit a staging chunk (fused_norm.c). */
int fusedTwoshotFits(const struct fusedCase* c, int nranks) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const uint64_t pitch = (c->hidden * fcclTypeSize(c->type) + 15) / 16 * 16;
  const uint64_t outPitch = (c->hidden * fcclTypeSize(c->out) + 15) / 16 * 16;
  const uint64_t result = (c->residual ? pitch : 0) + outPitch + (c->mode == fcclScaleDynamic ? 4 : 0);
  return pitch <= layout.chunkBytes && result <= layout.chunkBytes;
}

/* The form a call of the case runs in: the context's where that form can run it, else the public call's choice. */
static int formOf(const struct fusedContext* x, const struct fusedCase* c) {
  if (x->form == FCCL_FUSED_TWOSHOT) return fusedTwoshotFits(c, x->nranks) ? FCCL_FUSED_TWOSHOT : -1;
  if (x->form == FCCL_FUSED_ONESHOT) return fusedRowFits(c, x->nranks) ? FCCL_FUSED_ONESHOT : -1;
  return -1;
}

fcclResult_t fusedCallForm(struct fusedContext* x, const struct fusedCase* c, const void* input, void* residual,
                           void* output, float* scale, size_t tokens, cudaStream_t stream, int form) {
  return fcclAllReduceAddRMSNormForm(input, c->residual ? residual : NULL, c->weight ? x->weight : NULL, output, tokens,
                                     c->hidden, c->eps, c->type, c->out, c->mode, c->mode ? scale : NULL, x->comm,
                                     stream, form);
}

fcclResult_t fusedCall(struct fusedContext* x, const struct fusedCase* c, const void* input, void* residual,
                       void* output, float* scale, size_t tokens, cudaStream_t stream) {
  return fusedCallForm(x, c, input, residual, output, scale, tokens, stream, formOf(x, c));
}

/* Output bytes of a row and of the case. */
size_t fusedOutRow(const struct fusedCase* c) { return c->hidden * fcclTypeSize(c->out); }

/* Downloads r', the output, the all-reduce's result and the scales. */
static int download(struct fusedContext* x, const struct fusedCase* c) {
  struct fusedContext* ctx = x;
  const size_t n = c->tokens * c->hidden, size = fcclTypeSize(c->type);
  COLL_CHECK_CUDA("download",
                  cudaMemcpyAsync(x->hResidualOut, x->residual, n * size, cudaMemcpyDeviceToHost, x->stream));
  COLL_CHECK_CUDA("download", cudaMemcpyAsync(x->hOutput, x->output, c->tokens * fusedOutRow(c) + 64,
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
  fusedDescribe(c, call, formOf(x, c), what, sizeof(what));
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
        want = fusedFromFloat(t, (float)fusedToDouble(t, refLoadBits(t, x->hResidual, at)) +
                                     (float)fusedToDouble(t, reduced));
        const uint64_t got = refLoadBits(t, x->hResidualOut, at);
        const int bothNaN = isnan(fusedToDouble(t, got)) && isnan(fusedToDouble(t, want));
        if (got != want && !bothNaN && problems++ < 4) {
          char a[64], b[64];
          testFail(__FILE__, __LINE__, "rank %d: %s: residual row %zu element %zu: %s, want %s", x->rank, what, row, i,
                   refFormat(t, got, a, sizeof(a)), refFormat(t, want, b, sizeof(b)));
        }
      }
      const double r = fusedToDouble(t, want);
      y[i] = r;
      nonFinite |= !isfinite(r);
      squares += r * r;
    }
    if (nonFinite) continue; /* the NaN test's rows */
    const double inv = 1.0 / sqrt(squares / (double)hidden + (double)c->eps);
    double amax = 0;
    for (size_t i = 0; i < hidden; i++) {
      y[i] *= inv;
      if (c->weight) y[i] *= fusedToDouble(t, refLoadBits(t, x->hWeight, i));
      amax = fmax(amax, fabs(y[i]));
    }
    if (c->out != fcclFloat8e4m3) {
      for (size_t i = 0; i < hidden; i++) {
        const uint64_t got = refLoadBits(t, x->hOutput, row * hidden + i);
        const double g = fusedToDouble(t, got);
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
      /* A dynamic scale of 0 (an all-zero row) gives outputs of 0 (docs/fused.md), not 0 / 0. */
      const double q = c->mode == fcclScaleDynamic && scale == 0.0f ? 0.0 : y[i] / scale;
      if (!fp8WithinOne(got, q) && problems++ < 4)
        testFail(__FILE__, __LINE__, "rank %d: %s: output row %zu element %zu: fp8 0x%02x (%g), want %.9g", x->rank,
                 what, row, i, got, fp8Value(got), q);
    }
  }
  free(y);
  /* Without a residual argument the residual buffer is not the call's: it must hold what was uploaded. */
  if (!c->residual && memcmp(x->hResidualOut, x->hResidual, c->tokens * c->hidden * fcclTypeSize(t)) != 0) {
    testFail(__FILE__, __LINE__, "rank %d: %s: the residual buffer changed without a residual argument", x->rank, what);
    problems++;
  }
  /* Nothing written past the output. */
  const unsigned char* tail = (const unsigned char*)x->hOutput + c->tokens * fusedOutRow(c);
  for (int i = 0; i < 64; i++)
    if (tail[i] != COLL_POISON) {
      testFail(__FILE__, __LINE__, "rank %d: %s: byte %d past the output written", x->rank, what, i);
      problems++;
      break;
    }
  if (call < COLL_MAX_HASHES) {
    const size_t n = c->tokens * c->hidden * fcclTypeSize(t);
    uint64_t h = refHash(x->hOutput, c->tokens * fusedOutRow(c)) ^ (refHash(x->hResidualOut, n) * 3);
    if (c->mode == fcclScaleDynamic) h ^= refHash(x->hScale, c->tokens * sizeof(float)) * 5;
    x->shared->hashes[call][x->rank] = h | 1;
  }
  if (problems == 0) testPassed++;
  return problems;
}

/* One case: upload, the fused call and fcclAllReduce of the same input, download, check. A row too large for the
 * staging chunk must be refused with fcclInvalidArgument instead (and is not checked further). */
int fusedRunCase(struct fusedContext* x, const struct fusedCase* c, uint64_t call,
                 void (*poke)(const struct fusedCase*, int rank, void* hostIn)) {
  struct fusedContext* ctx = x;
  char what[256];
  fusedDescribe(c, call, formOf(x, c), what, sizeof(what));
  if (collVerbose() && x->rank == 0) printf("%s\n", what);
  if (fusedUpload(x, c, call, poke)) return 1;
  const void* in = fusedInputOf(x, c);
  if (!fusedRowFits(c, x->nranks)) {
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
