/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllReduceAddRMSNorm's test (test_fused_norm.c): every argument error (fcclInvalidArgument, a message naming
 * it, nothing written), and a peer that never calls: the waiting kernel gives up after FCCL_TIMEOUT, or stops at
 * once on fcclCommAbort.
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

/* Every argument error: fcclInvalidArgument, a message naming it, nothing written. */
int fusedModeInvalid(struct fusedContext* x) {
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
#define INVALID(word, call)                                                                                   \
  do {                                                                                                        \
    const fcclResult_t r_ = (call);                                                                           \
    EXPECT_MSG(r_ == fcclInvalidArgument, "rank %d: %s returned %s", x->rank, #call, fcclGetErrorString(r_)); \
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), (word));                                                      \
  } while (0)
  INVALID("input", fcclAllReduceAddRMSNorm(NULL, res, w, out, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("output", fcclAllReduceAddRMSNorm(in, res, w, NULL, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("hidden", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, 0, e, bf, bf, none, NULL, comm, s));
  INVALID("row", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, 40000, e, bf, bf, none, NULL, comm, s));
  INVALID("eps", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, -1.0f, bf, bf, none, NULL, comm, s));
  INVALID("eps", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, NAN, bf, bf, none, NULL, comm, s));
  INVALID("eps", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, INFINITY, bf, bf, none, NULL, comm, s));
  INVALID("datatype",
          fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, fcclInt32, fcclInt32, none, NULL, comm, s));
  INVALID("datatype",
          fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, f8, f8, fcclScaleStatic, sc, comm, s));
  INVALID("outtype", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, fcclFloat16, none, NULL, comm, s));
  INVALID("scaleMode", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, f8, none, NULL, comm, s));
  INVALID("scaleMode",
          fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, bf, fcclScaleStatic, sc, comm, s));
  INVALID("scaleMode",
          fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, f8, (fcclScaleMode_t)7, sc, comm, s));
  INVALID("scale is NULL",
          fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, f8, fcclScaleDynamic, NULL, comm, s));
  INVALID("without an FP8", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, bf, none, sc, comm, s));
  INVALID("input", fcclAllReduceAddRMSNorm(in + 1, res, w, out, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("residual", fcclAllReduceAddRMSNorm(in, res + 1, w, out, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("weight",
          fcclAllReduceAddRMSNorm(in, res, (const char*)w + 1, out, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("scale", fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, f8, fcclScaleDynamic,
                                           (float*)((char*)sc + 2), comm, s));
  INVALID("overlaps residual",
          fcclAllReduceAddRMSNorm(in, in + 512, w, out, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("input", fcclAllReduceAddRMSNorm(in, res, w, in, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("overlaps output",
          fcclAllReduceAddRMSNorm(in, res, w, res + 256, tokens, hidden, e, bf, bf, none, NULL, comm, s));
  INVALID("overlap",
          fcclAllReduceAddRMSNorm(in, res, w, out, tokens, hidden, e, bf, f8, fcclScaleDynamic, (float*)out, comm, s));
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
  fusedRunCase(x, &c, 0, NULL);
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

int fusedFaultMain(int rank, int nranks, const struct modeArgs* args) {
  const int abortIt = strcmp(args->mode, "abort") == 0;
  faultScenario(args, rank, nranks, 1, 0, abortIt);
  faultScenario(args, rank, nranks, 2, 1, abortIt);
  if (rank == 0) args->shared->flags[0] = 1;
  char name[64];
  snprintf(name, sizeof(name), "fused_norm %s rank %d", args->mode, rank);
  return testSummary(name);
}
