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
 *   test_fused_norm fp8 <n>     static and dynamic FP8 scales; a row of zeros (dynamic scale 0, outputs 0)
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
 * The files: test_fused_norm.c (the modes that check results, and main), test_fused_norm_case.c (the host
 * reference and one case: buffers, upload, the call, the checks), test_fused_norm_faults.c (argument errors, a
 * peer that never calls).
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

/* ---- modes --------------------------------------------------------------------------------------------------- */

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
          /* opt: bit 0 registered; residual always but in opt 2, weight always but in opt 3; in opt 1 an eps of
           * the order of the mean square (about 1.4 per rank), so that a norm without it, or with it elsewhere,
           * misses the reference by far more than the tolerance. */
          struct fusedCase c = {kTypes[ti], kTypes[ti], fcclScaleNone,           tokens[k], hiddens[hi], opt != 2,
                                opt != 3,   opt & 1,    opt == 1 ? 0.5f : 1e-6f, 1.0f};
          bad += fusedRunCase(x, &c, call++, NULL);
          if (bad > 10) return call;
        }
  return (int)call;
}

/* Every rank's input: row 4 all zeros (without a residual, r' of that row is 0). */
static void pokeZeroRow(const struct fusedCase* c, int rank, void* hostIn) {
  (void)rank;
  for (size_t i = 0; i < c->hidden; i++) fusedStoreBits(c->type, hostIn, 4 * c->hidden + i, 0);
}

/* Static and dynamic scales; then rows of zeros without a residual: a dynamic scale of 0 and outputs of 0. */
static int modeFp8(struct fusedContext* x) {
  struct fusedContext* ctx = x;
  static const size_t hiddens[] = {128, 129, 4096, 8191};
  uint64_t call = 0;
  for (size_t ti = 0; ti < 3; ti++)
    for (size_t hi = 0; hi < sizeof(hiddens) / sizeof(hiddens[0]); hi++)
      for (int mode = fcclScaleStatic; mode <= fcclScaleDynamic; mode++)
        for (int reg = 0; reg < 2; reg++) {
          struct fusedCase c = {kTypes[ti], fcclFloat8e4m3, (fcclScaleMode_t)mode, 33, hiddens[hi], 1, reg == 0, reg,
                                1e-5f, 0.0078125f};
          fusedRunCase(x, &c, call++, NULL);
        }
  for (size_t ti = 0; ti < 3; ti++)
    for (size_t hi = 1; hi < 3; hi++)
      for (int mode = fcclScaleStatic; mode <= fcclScaleDynamic; mode++) {
        struct fusedCase c = {kTypes[ti], fcclFloat8e4m3, (fcclScaleMode_t)mode, 33, hiddens[hi], 0, 1, (int)hi & 1,
                              1e-5f,      0.0078125f};
        if (fusedRunCase(x, &c, call++, pokeZeroRow)) continue;
        /* Checked against the reference above; said once more, plainly: row 4's bytes are all 0. */
        int zeros = 1;
        for (size_t i = 0; i < c.hidden; i++) zeros &= ((const uint8_t*)x->hOutput)[4 * c.hidden + i] == 0;
        float scale = -1.0f;
        memcpy(&scale, (const char*)x->hScale + 4 * sizeof(float), sizeof(float));
        EXPECT_MSG(zeros, "rank %d: %s: a row of zeros does not give FP8 zeros", ctx->rank, refTypeName(c.type));
        EXPECT_MSG(mode != fcclScaleDynamic || scale == 0.0f, "rank %d: %s: a row of zeros has the dynamic scale %g",
                   ctx->rank, refTypeName(c.type), (double)scale);
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
      const size_t size = fcclTypeSize(c.type), row = hidden * size, outBytes = fusedOutRow(&c);
      if (big * row + 64 > x->capacity || !fusedRowFits(&c, x->nranks)) continue;
      /* The whole batch, staged: the reference bits (also checked against the host reference). */
      if (fusedRunCase(x, &c, call, NULL)) return (int)call + 1;
      char* refOut = malloc(big * outBytes);
      char* refRes = malloc(big * row);
      float* refScale = malloc(big * sizeof(float));
      if (!refOut || !refRes || !refScale) return (int)call + 1;
      memcpy(refOut, x->hOutput, big * outBytes);
      memcpy(refRes, x->hResidualOut, big * row);
      memcpy(refScale, x->hScale, big * sizeof(float));
      /* The same data through other batch sizes and forms: [first, first + tokens) of the batch, in the automatic
       * choice (-1) or a form forced (strictly: the two-shot only where it fits). */
      const int two = fusedTwoshotFits(&c, x->nranks) ? FCCL_FUSED_TWOSHOT : FCCL_FUSED_ONESHOT;
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
        char* in = fusedInputOf(x, &c);
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
  const size_t count = c.tokens * c.hidden, bytes = count * 2, outBytes = c.tokens * fusedOutRow(&c);
  size_t slots = x->capacity / (bytes + 64);
  if (slots > 12) slots = 12;
  if (slots < 2 || !fusedTwoshotFits(&c, x->nranks)) return 0;
  if (fusedUpload(x, &c, call, NULL)) return 1;
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
          if (c.tokens * c.hidden * fcclTypeSize(c.type) + 64 > x->capacity || !fusedTwoshotFits(&c, x->nranks))
            continue;
          const size_t outBytes = c.tokens * fusedOutRow(&c), resBytes = c.tokens * c.hidden * fcclTypeSize(c.type);
          x->form = FCCL_FUSED_ONESHOT;
          bad += fusedRunCase(x, &c, call, NULL);
          char* out = malloc(outBytes);
          char* res = malloc(resBytes);
          float* scales = malloc(c.tokens * sizeof(float));
          if (!out || !res || !scales) return (int)call + 1;
          memcpy(out, x->hOutput, outBytes);
          memcpy(res, x->hResidualOut, resBytes);
          memcpy(scales, x->hScale, c.tokens * sizeof(float));
          x->form = FCCL_FUSED_TWOSHOT;
          bad += fusedRunCase(x, &c, call, NULL); /* the same call number: the same data */
          char what[256];
          fusedDescribe(&c, call, FCCL_FUSED_TWOSHOT, what, sizeof(what));
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
    if (fusedRunCase(x, &c, call++, NULL)) return (int)call;
    const size_t row = c.hidden * fcclTypeSize(c.type), outBytes = c.tokens * fusedOutRow(&c);
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
    const fcclResult_t captured = fusedCall(x, &c, fusedInputOf(x, &c), x->residual, x->output, x->scale, c.tokens,
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
        COLL_CHECK_FCCL("graph",
                        fcclAllReduce(fusedInputOf(x, &c), x->reduced, 1000, fcclFloat32, fcclSum, x->comm, x->stream));
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
  fusedStoreBits(c->type, hostIn, 1 * c->hidden + 5, fusedFromFloat(c->type, NAN));
  fusedStoreBits(c->type, hostIn, 2 * c->hidden + 7, fusedFromFloat(c->type, INFINITY));
}

static int modeNaN(struct fusedContext* x) {
  uint64_t call = 0;
  for (size_t ti = 0; ti < 3; ti++)
    for (int fp8 = 0; fp8 < 2; fp8++) {
      struct fusedCase c = {kTypes[ti], fp8 ? fcclFloat8e4m3 : kTypes[ti], fp8 ? fcclScaleDynamic : fcclScaleNone, 4,
                            300, 1, 1, 0, 1e-6f, 1.0f};
      fusedRunCase(x, &c, call++, pokeNaN); /* rows 0 and 3 against the reference */
      const fcclDataType_t t = c.type;
      int nanRow = 1, zerosElse = 1, nanAtInf = 1;
      for (size_t i = 0; i < c.hidden; i++) {
        if (fp8) {
          const uint8_t* o = (const uint8_t*)x->hOutput;
          nanRow &= fusedFp8IsNaN(o[c.hidden + i]);
          /* Row 2's scale is NaN (max |y| over a NaN): every output NaN. */
          nanAtInf &= fusedFp8IsNaN(o[2 * c.hidden + i]);
        } else {
          nanRow &= isnan(fusedToDouble(t, refLoadBits(t, x->hOutput, c.hidden + i)));
          const double v = fusedToDouble(t, refLoadBits(t, x->hOutput, 2 * c.hidden + i));
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

static int rankMain(int rank, int nranks, void* arg) {
  const struct modeArgs* args = arg;
  if (strcmp(args->mode, "timeout") == 0 || strcmp(args->mode, "abort") == 0) return fusedFaultMain(rank, nranks, args);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct fusedContext x;
  /* The batch of 4096 x 4096 fp32 (64 MiB) fits, and 67 x 16384 fp32 in the other modes. */
  const size_t capacity = strcmp(args->mode, "batch") == 0 ? (size_t)65 << 20 : (size_t)8 << 20;
  if (!fusedContextInit(&x, args->shared, comm, rank, nranks, args->seed, capacity, args->form)) {
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
  if (strcmp(args->mode, "invalid") == 0) calls = fusedModeInvalid(&x);
  if (rank == 0) args->shared->flags[0] = calls;
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  fusedContextFini(&x);
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
