/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllReduceAddRMSNorm in every shape of its row kernel (src/include/fused_norm_shape.h: threads per row 32..512
 * by the row's size, rows per block, one or two chunks of units per thread) and on both of its paths (the vector
 * path: aligned buffers and rows of whole 16-byte units; the general one), on forked ranks (1..8; ranks share the GPUs,
 * exits 77 without one), against a host reference (docs/fused.md):
 *   - r' bit for bit against fcclAllReduce of the same input followed by the add in fp32, rounded once;
 *   - the output against float64 arithmetic on r' within the output type's rounding; FP8 within one E4M3 step of
 *     y / scale, dynamic scales against max|y| / 448;
 *   - nothing written past the output; every rank's r', output and scales hash equal.
 *   test_fused_norm_shapes rows <n>        every type x hidden sizes that take each shape (at, under and over each
 *                                          threads-per-row and chunk boundary, odd sizes, the largest row) x token
 *                                          counts around the rows per block; plain, registered, unaligned (the
 *                                          general path), without residual and weight; FP8 static and dynamic
 *   test_fused_norm_shapes invariance <n>  token t's bits, alone and in slices that put it in another group of its
 *                                          block, another block and another batch, are those it has in a batch of
 *                                          600: in the vector and the general path (the same data one element
 *                                          further on), staged and registered, in each form that can run the slice
 * A third argument, oneshot or twoshot, runs every call in that form where the form can run it (strictly), auto (the
 * default) as the public call chooses. FCCL_FUSED_KERNEL=legacy in the environment runs the one-shot form's previous
 * kernel: the rows mode then checks it against the host reference (its bits are its own: the invariance mode
 * compares only the row kernel's forms).
 */
#include "algo.h"
#include "device_state.h"
#include "enqueue.h"
#include "test_fused_norm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- host reference ------------------------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Values of magnitude [0.0625, 2.0625) of random sign (input, residual), [0.5, 1.5) (weight): never zero. */
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

/* Whether an E4M3 result is within one code of x (saturated to 448; signed codes, -0 and +0 both 0). */
static int fp8WithinOne(uint8_t got, double x) {
  if ((got & 0x7f) == 0x7f) return 0;
  double mag = fabs(x);
  int lo = 0, hi = 0x7e;
  if (mag >= fp8Value(0x7e)) {
    lo = 0x7e;
  } else {
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (fp8Value((uint8_t)mid) <= mag)
        lo = mid;
      else
        hi = mid;
    }
    if (fp8Value((uint8_t)hi) - mag < mag - fp8Value((uint8_t)lo)) lo = hi;
  }
  const int want = x < 0 ? -lo : lo;
  const int have = (got & 0x80) ? -(int)(got & 0x7f) : (int)(got & 0x7f);
  return abs(want - have) <= 1;
}

static double outRelative(fcclDataType_t type) {
  return type == fcclBfloat16 ? ldexp(1, -8) : type == fcclFloat16 ? ldexp(1, -11) : ldexp(1, -24);
}
/* Half an ulp of each output type's subnormals: fp16 outputs of rows where r' nearly cancels (|r'| = 2^-14, y near
 * 2e-5) are subnormal, and their rounding error is absolute, up to 2^-25, far over the relative bound. */
static double outAbsolute(fcclDataType_t type) {
  return type == fcclBfloat16 ? 1e-38 : type == fcclFloat16 ? ldexp(1, -25) : 1e-44;
}
/* fp32's error in a row's sum of squares (rows up to 32768 elements) and in the products, relative. */
#define NORM_FP32_ERROR 2e-4

/* ---- one call ------------------------------------------------------------------------------------------------ */

struct shapeCase {
  fcclDataType_t type;
  fcclDataType_t out; /* type or fcclFloat8e4m3 */
  fcclScaleMode_t mode;
  size_t tokens, hidden;
  int residual, weight, registered;
  size_t shift; /* elements every buffer starts past its 16-byte aligned base: 1 takes the general path */
};

struct context {
  struct collShared* shared;
  fcclComm_t comm;
  int rank, nranks, form;
  uint64_t seed;
  cudaStream_t stream;
  size_t capacity;
  struct collBuffer plainIn, regIn;
  char *residual, *weight, *output, *reduced, *scale;                           /* device, 256-byte aligned */
  char *hIn, *hResidual, *hWeight, *hOutput, *hReduced, *hResidualOut, *hScale; /* pinned */
};

static const float kStaticScale = 0.0078125f;

static size_t outBytes(const struct shapeCase* c) { return c->tokens * c->hidden * fcclTypeSize(c->out); }
static size_t inBytes(const struct shapeCase* c) { return c->tokens * c->hidden * fcclTypeSize(c->type); }
static char* inputOf(struct context* x, const struct shapeCase* c) {
  return (c->registered ? x->regIn.base : x->plainIn.base) + COLL_GUARD + c->shift * fcclTypeSize(c->type);
}
static char* shifted(char* base, const struct shapeCase* c, fcclDataType_t type) {
  return base + c->shift * fcclTypeSize(type);
}

/* Whether the two-shot form can run the case with the environment's staging (fused_norm.c's condition). */
static int twoshotFits(const struct shapeCase* c, int nranks) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const uint64_t pitch = (c->hidden * fcclTypeSize(c->type) + 15) / 16 * 16;
  const uint64_t outPitch = (c->hidden * fcclTypeSize(c->out) + 15) / 16 * 16;
  const uint64_t result = (c->residual ? pitch : 0) + outPitch + (c->mode == fcclScaleDynamic ? 4 : 0);
  return pitch <= layout.chunkBytes && result <= layout.chunkBytes;
}

static int formOf(const struct context* x, const struct shapeCase* c, int form) {
  if (form == FCCL_FUSED_TWOSHOT && !twoshotFits(c, x->nranks)) return -1;
  return form;
}

static void describe(const struct shapeCase* c, uint64_t call, int form, char* out, size_t size) {
  snprintf(out, size, "call %llu: %zu x %zu %s -> %s scale %d%s%s %s shift %zu, %s", (unsigned long long)call,
           c->tokens, c->hidden, refTypeName(c->type), refTypeName(c->out), (int)c->mode,
           c->residual ? " residual" : "", c->weight ? " weight" : "", c->registered ? "registered" : "plain", c->shift,
           form < 0 ? "auto" : fcclFusedFormName(form));
}

/* The call on rows [first, first + tokens) of the case's buffers, in form (-1: the public call's choice). */
static fcclResult_t shapeCall(struct context* x, const struct shapeCase* c, size_t first, size_t tokens, int form) {
  const size_t in = fcclTypeSize(c->type), out = fcclTypeSize(c->out);
  return fcclAllReduceAddRMSNormForm(inputOf(x, c) + first * c->hidden * in,
                                     c->residual ? shifted(x->residual, c, c->type) + first * c->hidden * in : NULL,
                                     c->weight ? shifted(x->weight, c, c->type) : NULL,
                                     shifted(x->output, c, c->out) + first * c->hidden * out, tokens, c->hidden, 1e-6f,
                                     c->type, c->out, c->mode,
                                     c->mode == fcclScaleNone     ? NULL
                                     : c->mode == fcclScaleStatic ? (float*)x->scale
                                                                  : (float*)x->scale + first,
                                     x->comm, x->stream, form);
}

/* The case's data for call `call` into the host copies and the device (input at its shift; residual, weight and
 * output at theirs); output and scales poisoned, the static scale set. */
static int upload(struct context* x, const struct shapeCase* c, uint64_t call) {
  struct context* ctx = x;
  const size_t n = c->tokens * c->hidden, size = fcclTypeSize(c->type);
  for (size_t i = 0; i < n; i++) {
    fusedStoreBits(c->type, x->hIn, i, dataBits(c->type, x->seed, call, DATA_INPUT, x->rank, i));
    fusedStoreBits(c->type, x->hResidual, i, dataBits(c->type, x->seed, call, DATA_RESIDUAL, 0, i));
  }
  for (size_t i = 0; i < c->hidden; i++)
    fusedStoreBits(c->type, x->hWeight, i, dataBits(c->type, x->seed, call, DATA_WEIGHT, 0, i));
  COLL_CHECK_CUDA("upload", cudaMemcpyAsync(inputOf(x, c), x->hIn, n * size, cudaMemcpyHostToDevice, x->stream));
  COLL_CHECK_CUDA("upload", cudaMemcpyAsync(shifted(x->residual, c, c->type), x->hResidual, n * size,
                                            cudaMemcpyHostToDevice, x->stream));
  COLL_CHECK_CUDA("upload", cudaMemcpyAsync(shifted(x->weight, c, c->type), x->hWeight, c->hidden * size,
                                            cudaMemcpyHostToDevice, x->stream));
  COLL_CHECK_CUDA("poison", cudaMemsetAsync(x->output, COLL_POISON, outBytes(c) + 128, x->stream));
  COLL_CHECK_CUDA("poison", cudaMemsetAsync(x->scale, COLL_POISON, c->tokens * sizeof(float) + 64, x->stream));
  if (c->mode == fcclScaleStatic)
    COLL_CHECK_CUDA("scale",
                    cudaMemcpyAsync(x->scale, &kStaticScale, sizeof(float), cudaMemcpyHostToDevice, x->stream));
  return 0;
}

/* r', the output (with 64 bytes past it), the scales and, when reduced, fcclAllReduce's sum. */
static int download(struct context* x, const struct shapeCase* c, int reduced) {
  struct context* ctx = x;
  COLL_CHECK_CUDA("download", cudaMemcpyAsync(x->hResidualOut, shifted(x->residual, c, c->type), inBytes(c),
                                              cudaMemcpyDeviceToHost, x->stream));
  COLL_CHECK_CUDA("download", cudaMemcpyAsync(x->hOutput, shifted(x->output, c, c->out), outBytes(c) + 64,
                                              cudaMemcpyDeviceToHost, x->stream));
  COLL_CHECK_CUDA("download",
                  cudaMemcpyAsync(x->hScale, x->scale, c->tokens * sizeof(float), cudaMemcpyDeviceToHost, x->stream));
  if (reduced)
    COLL_CHECK_CUDA("download",
                    cudaMemcpyAsync(x->hReduced, x->reduced, inBytes(c), cudaMemcpyDeviceToHost, x->stream));
  COLL_CHECK_CUDA("download", cudaStreamSynchronize(x->stream));
  return 0;
}

/* What download() brought back against the host reference; the number of problems, the first few reported. */
static int check(struct context* x, const struct shapeCase* c, uint64_t call, int form) {
  char what[256];
  describe(c, call, form, what, sizeof(what));
  const fcclDataType_t t = c->type;
  const size_t hidden = c->hidden;
  int problems = 0;
  double* y = malloc(hidden * sizeof(double));
  if (!y) return 1;
  for (size_t row = 0; row < c->tokens && problems < 8; row++) {
    double squares = 0;
    for (size_t i = 0; i < hidden; i++) {
      const size_t at = row * hidden + i;
      uint64_t want = refLoadBits(t, x->hReduced, at);
      if (c->residual) {
        want = fusedFromFloat(t, (float)fusedToDouble(t, refLoadBits(t, x->hResidual, at)) +
                                     (float)fusedToDouble(t, want));
        const uint64_t got = refLoadBits(t, x->hResidualOut, at);
        if (got != want && problems++ < 4) {
          char a[64], b[64];
          testFail(__FILE__, __LINE__, "rank %d: %s: residual row %zu element %zu: %s, want %s", x->rank, what, row, i,
                   refFormat(t, got, a, sizeof(a)), refFormat(t, want, b, sizeof(b)));
        }
      }
      y[i] = fusedToDouble(t, want);
      squares += y[i] * y[i];
    }
    const double inv = 1.0 / sqrt(squares / (double)hidden + 1e-6);
    double amax = 0;
    for (size_t i = 0; i < hidden; i++) {
      y[i] *= inv;
      if (c->weight) y[i] *= fusedToDouble(t, refLoadBits(t, x->hWeight, i));
      amax = fmax(amax, fabs(y[i]));
    }
    if (c->out != fcclFloat8e4m3) {
      for (size_t i = 0; i < hidden; i++) {
        const uint64_t got = refLoadBits(t, x->hOutput, row * hidden + i);
        const double tol = fabs(y[i]) * (outRelative(t) + NORM_FP32_ERROR) + outAbsolute(t);
        if (!(fabs(fusedToDouble(t, got) - y[i]) <= tol) && problems++ < 4) {
          char a[64];
          testFail(__FILE__, __LINE__, "rank %d: %s: output row %zu element %zu: %s, want %.9g", x->rank, what, row, i,
                   refFormat(t, got, a, sizeof(a)), y[i]);
        }
      }
      continue;
    }
    float scale = kStaticScale;
    if (c->mode == fcclScaleDynamic) {
      memcpy(&scale, x->hScale + row * sizeof(float), sizeof(float));
      const double want = amax / 448.0;
      if (!(fabs(scale - want) <= want * NORM_FP32_ERROR) && problems++ < 4)
        testFail(__FILE__, __LINE__, "rank %d: %s: row %zu scale %.9g, want %.9g", x->rank, what, row, (double)scale,
                 want);
    }
    for (size_t i = 0; i < hidden; i++) {
      const uint8_t got = ((const uint8_t*)x->hOutput)[row * hidden + i];
      if (!fp8WithinOne(got, y[i] / scale) && problems++ < 4)
        testFail(__FILE__, __LINE__, "rank %d: %s: output row %zu element %zu: fp8 0x%02x, want %.9g", x->rank, what,
                 row, i, got, y[i] / scale);
    }
  }
  free(y);
  if (!c->residual && memcmp(x->hResidualOut, x->hResidual, inBytes(c)) != 0) {
    testFail(__FILE__, __LINE__, "rank %d: %s: the residual buffer changed without a residual argument", x->rank, what);
    problems++;
  }
  const unsigned char* tail = (const unsigned char*)x->hOutput + outBytes(c);
  for (int i = 0; i < 64; i++)
    if (tail[i] != COLL_POISON) {
      testFail(__FILE__, __LINE__, "rank %d: %s: byte %d past the output written", x->rank, what, i);
      problems++;
      break;
    }
  if (call < COLL_MAX_HASHES) {
    uint64_t h = refHash(x->hOutput, outBytes(c)) ^ (refHash(x->hResidualOut, inBytes(c)) * 3);
    if (c->mode == fcclScaleDynamic) h ^= refHash(x->hScale, c->tokens * sizeof(float)) * 5;
    x->shared->hashes[call][x->rank] = h | 1;
  }
  if (problems == 0) testPassed++;
  return problems;
}

/* Upload, the fused call in the context's form, fcclAllReduce of the same input, download, check. */
static int runCase(struct context* x, const struct shapeCase* c, uint64_t call) {
  struct context* ctx = x;
  const int form = formOf(x, c, x->form);
  char what[256];
  describe(c, call, form, what, sizeof(what));
  if (collVerbose() && x->rank == 0) printf("%s\n", what);
  if (upload(x, c, call)) return 1;
  COLL_CHECK_FCCL(what, shapeCall(x, c, 0, c->tokens, form));
  COLL_CHECK_FCCL(what, fcclAllReduce(inputOf(x, c), x->reduced, c->tokens * c->hidden, c->type, fcclSum, x->comm,
                                      x->stream));
  if (download(x, c, 1)) return 1;
  return check(x, c, call, form);
}

/* ---- modes --------------------------------------------------------------------------------------------------- */

static const fcclDataType_t kTypes[] = {fcclBfloat16, fcclFloat16, fcclFloat32};

/* Hidden sizes of 2-byte and 4-byte types around every threads-per-row boundary (32 threads hold up to 128 units of
 * 16 bytes in FCCL_FUSED_TARGET_UNITS each, then 64, 128, 256, 512), a row of less than one unit, partial last units,
 * rows of two chunks per thread past 32 KiB, and the largest row (64 KiB). */
static const size_t kHidden2[] = {5,    8,    100,  1024,  1032,  2048,  2056,  4096,
                                  4100, 8192, 8200, 12289, 16384, 16392, 24577, 32768};
static const size_t kHidden4[] = {3, 4, 100, 512, 516, 1024, 2048, 4096, 4098, 8192, 8196, 16384};

static int modeRows(struct context* x) {
  static const size_t tokensFull[] = {1, 5, 17, 67};
  static const size_t tokensQuick[] = {1, 17};
  const size_t* tokens = collQuick() ? tokensQuick : tokensFull;
  const int nTokens = collQuick() ? 2 : 4;
  uint64_t call = 0;
  int bad = 0;
  for (size_t ti = 0; ti < 3 && bad < 10; ti++) {
    const int wide = fcclTypeSize(kTypes[ti]) == 4;
    const size_t* hiddens = wide ? kHidden4 : kHidden2;
    const size_t nHidden = wide ? sizeof(kHidden4) / sizeof(kHidden4[0]) : sizeof(kHidden2) / sizeof(kHidden2[0]);
    for (size_t hi = 0; hi < nHidden && bad < 10; hi++)
      for (int k = 0; k < nTokens && bad < 10; k++)
        for (int opt = 0; opt < 4; opt++) {
          /* opt 0: plain; 1: registered; 2: unaligned (the general path), registered on odd token counts; 3: no
           * residual and no weight. */
          const int full = opt != 3, registered = opt == 1 || (opt == 2 && (tokens[k] & 1));
          const size_t shift = opt == 2 ? 1u : 0u;
          const fcclDataType_t type = kTypes[ti];
          struct shapeCase c = {type, type, fcclScaleNone, tokens[k], hiddens[hi], full, full, registered, shift};
          if (inBytes(&c) + 256 > x->capacity) {
            testFail(__FILE__, __LINE__, "rank %d: %zu x %zu does not fit the buffers", x->rank, c.tokens, c.hidden);
            return (int)call + 1;
          }
          bad += runCase(x, &c, call++);
        }
  }
  /* FP8, static and dynamic, in both paths, for a size of each shape. */
  static const size_t fp8Hidden[] = {8, 1032, 4096, 8200, 16392};
  for (size_t ti = 0; ti < 3 && bad < 10; ti++)
    for (size_t hi = 0; hi < sizeof(fp8Hidden) / sizeof(fp8Hidden[0]) && bad < 10; hi++)
      for (int mode = fcclScaleStatic; mode <= fcclScaleDynamic; mode++)
        for (size_t shift = 0; shift < 2; shift++) {
          struct shapeCase c = {kTypes[ti], fcclFloat8e4m3, (fcclScaleMode_t)mode, 17, fp8Hidden[hi], 1, shift == 0,
                                (int)shift, shift};
          if (fcclTypeSize(c.type) == 4 && c.hidden > 16384) continue;
          bad += runCase(x, &c, call++);
        }
  return (int)call;
}

/* Token t's bits in slices of a batch of 600 against the whole batch's (vector path, the public call's form). */
static int modeInvariance(struct context* x) {
  struct context* ctx = x;
  const size_t big = 600;
  /* Each shape's threads per row, and rows of two chunks per thread (over 32 KiB). */
  static const size_t hidden2[] = {64, 1000, 4096, 8192, 17000};
  static const size_t hidden4[] = {64, 1000, 4096, 8200};
  uint64_t call = 0;
  for (size_t ti = 0; ti < 3; ti += 2) { /* bf16 and fp32 */
    const int wide = ti == 2;
    const size_t* hiddens = wide ? hidden4 : hidden2;
    const size_t nHidden = wide ? 4 : 5;
    for (size_t hi = 0; hi < nHidden; hi++)
      for (int fp8 = 0; fp8 < 2; fp8++) {
        const fcclDataType_t out = fp8 ? fcclFloat8e4m3 : kTypes[ti];
        const fcclScaleMode_t mode = fp8 ? fcclScaleDynamic : fcclScaleNone;
        struct shapeCase c = {kTypes[ti], out, mode, big, hiddens[hi], 1, 1, 0, 0};
        if (inBytes(&c) + 256 > x->capacity) {
          testFail(__FILE__, __LINE__, "rank %d: %zu x %zu does not fit the buffers", x->rank, c.tokens, c.hidden);
          return (int)call + 1;
        }
        const int saved = x->form;
        x->form = -1;
        const int bad = runCase(x, &c, call);
        x->form = saved;
        if (bad) return (int)call + 1;
        const size_t row = c.hidden * fcclTypeSize(c.type), orow = c.hidden * fcclTypeSize(c.out);
        char* refOut = malloc(big * orow);
        char* refRes = malloc(big * row);
        float* refScale = malloc(big * sizeof(float));
        if (!refOut || !refRes || !refScale) return (int)call + 1;
        memcpy(refOut, x->hOutput, big * orow);
        memcpy(refRes, x->hResidualOut, big * row);
        memcpy(refScale, x->hScale, big * sizeof(float));
        /* Slices [first, first + tokens): alone, next to other rows of its block, across blocks and batches; each
         * in the vector and the general path, staged and registered, in the public choice and each form. */
        static const size_t slices[][2] = {{0, 1}, {7, 1}, {599, 1}, {3, 2}, {5, 31}, {17, 100}, {1, 599}};
        for (size_t s = 0; s < sizeof(slices) / sizeof(slices[0]); s++)
          for (int variant = 0; variant < 4; variant++) {
            c.shift = (size_t)(variant & 1);
            c.registered = (variant >> 1) & 1;
            const int forms[] = {-1, FCCL_FUSED_ONESHOT, FCCL_FUSED_TWOSHOT};
            const int form = formOf(x, &c, forms[(s + (size_t)variant) % 3]);
            const size_t f = slices[s][0], n = slices[s][1];
            /* The whole batch's inputs and residual in place at this shift, the output poisoned. */
            COLL_CHECK_CUDA("slice",
                            cudaMemcpyAsync(inputOf(x, &c), x->hIn, big * row, cudaMemcpyHostToDevice, x->stream));
            COLL_CHECK_CUDA("slice", cudaMemcpyAsync(shifted(x->residual, &c, c.type), x->hResidual, big * row,
                                                     cudaMemcpyHostToDevice, x->stream));
            COLL_CHECK_CUDA("slice", cudaMemcpyAsync(shifted(x->weight, &c, c.type), x->hWeight, row,
                                                     cudaMemcpyHostToDevice, x->stream));
            COLL_CHECK_CUDA("slice", cudaMemsetAsync(x->output, COLL_POISON, big * orow + 128, x->stream));
            COLL_CHECK_FCCL("slice", shapeCall(x, &c, f, n, form));
            if (download(x, &c, 0)) return (int)call + 1;
            char what[256];
            describe(&c, call, form, what, sizeof(what));
            EXPECT_MSG(memcmp(x->hOutput + f * orow, refOut + f * orow, n * orow) == 0,
                       "rank %d: %s: tokens [%zu, %zu) alone differ in the output from the batch of %zu", x->rank, what,
                       f, f + n, big);
            EXPECT_MSG(memcmp(x->hResidualOut + f * row, refRes + f * row, n * row) == 0,
                       "rank %d: %s: tokens [%zu, %zu) alone differ in the residual", x->rank, what, f, f + n);
            if (fp8)
              EXPECT_MSG(memcmp((float*)x->hScale + f, refScale + f, n * sizeof(float)) == 0,
                         "rank %d: %s: tokens [%zu, %zu) alone differ in the scales", x->rank, what, f, f + n);
            int outside = 1;
            const unsigned char* o = (const unsigned char*)x->hOutput;
            for (size_t b = 0; b < orow; b++) {
              if (f > 0) outside &= o[(f - 1) * orow + b] == COLL_POISON;
              if (f + n < big) outside &= o[(f + n) * orow + b] == COLL_POISON;
            }
            EXPECT_MSG(outside, "rank %d: %s: tokens [%zu, %zu) wrote output rows next to theirs", x->rank, what, f,
                       f + n);
          }
        free(refOut);
        free(refRes);
        free(refScale);
        call++;
      }
  }
  return (int)call;
}

/* ---- ranks --------------------------------------------------------------------------------------------------- */

static int contextInit(struct context* x, const struct modeArgs* args, fcclComm_t comm, int rank, int nranks) {
  memset(x, 0, sizeof(*x));
  x->shared = args->shared;
  x->comm = comm;
  x->rank = rank;
  x->nranks = nranks;
  x->seed = args->seed;
  x->form = args->form;
  /* 67 x 32768 bf16 (rows), 600 x 17000 bf16 and 600 x 8200 fp32 (invariance), with room for the shift. */
  x->capacity = strcmp(args->mode, "rows") == 0 ? (size_t)8 << 20 : (size_t)20 << 20;
  if (cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking) != cudaSuccess) return 0;
  if (!collBufferCreate(comm, &x->plainIn, x->capacity, 0) || !collBufferCreate(comm, &x->regIn, x->capacity, 1))
    return 0;
  char** dev[] = {&x->residual, &x->weight, &x->output, &x->reduced, &x->scale};
  for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
    if (cudaMalloc((void**)dev[i], x->capacity) != cudaSuccess) return 0;
  char** host[] = {&x->hIn, &x->hResidual, &x->hWeight, &x->hOutput, &x->hReduced, &x->hResidualOut, &x->hScale};
  for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
    if (cudaMallocHost((void**)host[i], x->capacity) != cudaSuccess) return 0;
  return 1;
}

static void contextFini(struct context* x) {
  char* dev[] = {x->residual, x->weight, x->output, x->reduced, x->scale};
  for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) cudaFree(dev[i]);
  char* host[] = {x->hIn, x->hResidual, x->hWeight, x->hOutput, x->hReduced, x->hResidualOut, x->hScale};
  for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) cudaFreeHost(host[i]);
  collBufferDestroy(x->comm, &x->plainIn);
  collBufferDestroy(x->comm, &x->regIn);
  if (x->stream) cudaStreamDestroy(x->stream);
}

static int rankMain(int rank, int nranks, void* arg) {
  const struct modeArgs* args = arg;
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct context x;
  if (!contextInit(&x, args, comm, rank, nranks)) {
    testFail(__FILE__, __LINE__, "rank %d: buffers", rank);
    return 1;
  }
  const int calls = strcmp(args->mode, "rows") == 0 ? modeRows(&x) : modeInvariance(&x);
  if (rank == 0) args->shared->flags[0] = calls;
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  contextFini(&x);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  char name[64];
  snprintf(name, sizeof(name), "fused_norm_shapes %s rank %d", args->mode, rank);
  return testSummary(name);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "rows";
  const int nranks = argc > 2 ? atoi(argv[2]) : 1;
  const int request = fcclFusedParseRequest(argc > 3 ? argv[3] : "auto");
  if ((strcmp(mode, "rows") != 0 && strcmp(mode, "invariance") != 0) || nranks < 1 || nranks > 8 || request < 0 ||
      argc > 4) {
    fprintf(stderr, "usage: %s rows|invariance [nranks 1..8 [auto|oneshot|twoshot]]\n", argv[0]);
    return 2;
  }
  struct modeArgs args = {collSharedNew(nranks), testSeed(), testGpuCount(), mode,
                          request == FCCL_FUSED_REQUEST_AUTO ? -1 : request};
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
  snprintf(name, sizeof(name), "fused_norm_shapes %s %s", mode, args.form < 0 ? "auto" : fcclFusedFormName(args.form));
  return testSummary(name);
}
