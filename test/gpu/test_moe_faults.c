/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The MoE test's error modes (test_moe.c's header says what each covers): argument errors that launch nothing,
 * configurations that differ between ranks, invalid routing found on the device, and a peer that never calls,
 * is aborted or dies while the others wait in a dispatch.
 */
#include "test_moe.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Polls comm's asynchronous error until it is set, at most limitMs; the error (fcclSuccess: none came). */
static fcclResult_t awaitAsyncError(fcclComm_t comm, int limitMs) {
  fcclResult_t state = fcclSuccess;
  for (int waited = 0; waited <= limitMs; waited += 10) {
    if (fcclCommGetAsyncError(comm, &state) != fcclSuccess) return fcclInvalidArgument;
    if (state != fcclSuccess && state != fcclInProgress) return state;
    usleep(10000);
  }
  return fcclSuccess;
}

/* Whether bytes of device memory p still hold the poison (host: a pinned scratch of at least bytes). */
static int stillPoisoned(const void* p, size_t bytes, unsigned char* host) {
  if (cudaMemcpy(host, p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return 0;
  for (size_t i = 0; i < bytes; i++)
    if (host[i] != COLL_POISON) return 0;
  return 1;
}

/* Each call must return fcclInvalidArgument with a message holding word. */
#define INVALID(word, call)                                                                                \
  do {                                                                                                     \
    const fcclResult_t r_ = (call);                                                                        \
    EXPECT_MSG(r_ == fcclInvalidArgument, "rank %d: %s returned %s", rank, #call, fcclGetErrorString(r_)); \
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), (word));                                                   \
  } while (0)

/* The argument errors of one layout: nothing is launched, the outputs keep their poison. */
static void invalidArguments(struct moeBench* b, int rank) {
  const struct moeRefCase* s = &b->shape;
  const size_t tokens = s->maxTokens;
  const fcclDataType_t bf = fcclBfloat16, f8 = fcclFloat8e4m3, i32 = fcclInt32;
  const float* w = b->weights;
  const fcclMoeRecv_t r = {b->recvX, NULL, b->recvWeights, b->recvSources, b->recvCounts, b->recvOffsets};
  fcclMoeRecv_t r8 = r;
  r8.scales = b->recvScales;
  fcclMoeLayout_t l = b->layout;
  cudaStream_t st = b->stream;
  INVALID("more than the layout's worst case",
          fcclMoeDispatch(b->x, NULL, b->topk, i32, w, tokens + 1, bf, &r, 0, l, st));
  INVALID("datatype float32", fcclMoeDispatch(b->x, NULL, b->topk, i32, w, tokens, fcclFloat32, &r, 0, l, st));
  INVALID("idxType", fcclMoeDispatch(b->x, NULL, b->topk, fcclUint8, w, tokens, bf, &r, 0, l, st));
  INVALID("xScales is NULL", fcclMoeDispatch(b->x, NULL, b->topk, i32, w, tokens, f8, &r8, 0, l, st));
  INVALID("recv->scales is NULL", fcclMoeDispatch(b->x, b->xScales, b->topk, i32, w, tokens, f8, &r, 0, l, st));
  INVALID("recv is NULL", fcclMoeDispatch(b->x, NULL, b->topk, i32, w, tokens, bf, NULL, 0, l, st));
  INVALID("blocks", fcclMoeDispatch(b->x, NULL, b->topk, i32, w, tokens, bf, &r, 100000, l, st));
  INVALID("blocks", fcclMoeDispatch(b->x, NULL, b->topk, i32, w, tokens, bf, &r, -2, l, st));
  fcclMoeRecv_t broken = r;
  broken.x = (char*)b->recvX + 2;
  INVALID("recv->x", fcclMoeDispatch(b->x, NULL, b->topk, i32, w, tokens, bf, &broken, 0, l, st));
  broken = r;
  broken.weights = (float*)((char*)b->recvX + 64);
  INVALID("overlaps", fcclMoeDispatch(b->x, NULL, b->topk, i32, w, tokens, bf, &broken, 0, l, st));
  broken = r;
  broken.x = b->hRecvX;
  INVALID("host", fcclMoeDispatch(b->x, NULL, b->topk, i32, w, tokens, bf, &broken, 0, l, st));
  INVALID("host", fcclMoeDispatch(b->hX, NULL, b->topk, i32, w, tokens, bf, &r, 0, l, st));
  INVALID("not a live MoE layout",
          fcclMoeDispatch(b->x, NULL, b->topk, i32, w, tokens, bf, &r, 0, (fcclMoeLayout_t)(uintptr_t)0x1234, st));
  /* The combine: no dispatch yet (fcclInvalidUsage), then argument errors. */
  EXPECT_EQ_INT(fcclMoeCombine(b->y, b->out, w, tokens, bf, 0, l, st), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "no dispatch on this layout yet");
  INVALID("datatype float8e4m3", fcclMoeCombine(b->y, b->out, w, tokens, f8, 0, l, st));
  INVALID("out is NULL", fcclMoeCombine(b->y, NULL, w, tokens, bf, 0, l, st));
  /* The communicator keeps the last failure too. */
  INVALID("idxType", fcclMoeDispatch(b->x, NULL, b->topk, fcclFloat32, w, tokens, bf, &r, 0, l, st));
  EXPECT_STR_CONTAINS(fcclGetLastError(b->comm), "idxType");
}

/* Invalid routing on the last rank (an expert outside the range, or one repeated in a token's row): every rank's
 * dispatch completes without that entry, and every communicator then fails with fcclInvalidArgument naming it. */
static void invalidRouting(const struct moeArgs* args, int rank, int nranks, int which, int repeated) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, which);
  if (!comm) return;
  const struct moeRefCase shape = moeShape(nranks, 4 * nranks, 2, 256, 16, 0, 1);
  struct moeBench b;
  if (moeBenchInit(&b, args->shared, comm, rank, nranks, &shape, 0)) {
    struct moeCase c;
    memset(&c, 0, sizeof(c));
    c.ref = shape;
    c.ref.seed = args->seed;
    c.ref.call = 100 + (uint64_t)which;
    c.ref.fullTokens = 1;
    c.ref.route = repeated ? MOE_ROUTE_HOT : MOE_ROUTE_RANDOM; /* hot: entry 0 is the last expert, entry 1 -1 */
    c.idxType = repeated ? fcclInt32 : fcclInt64;
    c.outputs = MOE_OUT_ALL;
    c.weighted = 1;
    c.badRank = nranks - 1;
    c.badToken = 3;
    c.badEntry = 1;
    c.badValue = repeated ? shape.experts - 1 : shape.experts + 5;
    if (moeUpload(&b, &c) == 0) {
      EXPECT_EQ_INT(moeDispatch(&b, &c, b.stream), fcclSuccess);
      EXPECT_EQ_INT(cudaStreamSynchronize(b.stream), cudaSuccess);
      /* Every valid entry was delivered (the reference drops the invalid one too). */
      EXPECT_EQ_INT(moeCheckDispatch(&b, &c), 0);
      const fcclResult_t seen = awaitAsyncError(comm, 10000);
      EXPECT_MSG(seen == fcclInvalidArgument, "rank %d: the communicator's error is %s, want fcclInvalidArgument", rank,
                 fcclGetErrorString(seen));
      char words[160];
      snprintf(words, sizeof(words), "found invalid input of rank %d", nranks - 1);
      EXPECT_STR_CONTAINS(fcclGetLastError(comm), words);
      snprintf(words, sizeof(words), "token 3, top-k entry 1 holds expert %lld", (long long)c.badValue);
      EXPECT_STR_CONTAINS(fcclGetLastError(comm), words);
      printf("rank %d: %s\n", rank, fcclGetLastError(comm));
      /* Later calls return the error and launch nothing. */
      EXPECT_EQ_INT(moeCombine(&b, &c, b.stream), fcclInvalidArgument);
      EXPECT_EQ_INT(moeDispatch(&b, &c, b.stream), fcclInvalidArgument);
      EXPECT_EQ_INT(cudaStreamSynchronize(b.stream), cudaSuccess);
    }
  }
  /* The layout first: its ranks deregister together, the kernel's report notwithstanding; then the failed
   * communicator, locally. */
  moeBenchFini(&b);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
}

int moeModeInvalid(const struct moeArgs* args, int rank, int nranks) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 0;
  const struct moeRefCase shape = moeShape(nranks, 4 * nranks, 2, 256, 16, 0, 1);
  struct moeBench b;
  if (!moeBenchInit(&b, args->shared, comm, rank, nranks, &shape, 0)) return 0;
  struct moeCase c;
  memset(&c, 0, sizeof(c));
  c.ref = shape;
  c.ref.seed = args->seed;
  c.ref.fullTokens = 1;
  c.idxType = fcclInt32;
  c.outputs = MOE_OUT_ALL;
  c.weighted = 1;
  c.badRank = -1;
  if (moeUpload(&b, &c) != 0 || cudaStreamSynchronize(b.stream) != cudaSuccess) return 0;
  invalidArguments(&b, rank);
  unsigned char* host = b.hRecvX;
  const size_t local = (size_t)(shape.experts / nranks);
  EXPECT_MSG(stillPoisoned(b.recvCounts, local * 4, b.hRecvCounts), "rank %d: an invalid call wrote the counts", rank);
  EXPECT_MSG(stillPoisoned(b.recvX, b.recvRows * shape.hidden * 2, host), "rank %d: an invalid call wrote rows", rank);
  EXPECT_MSG(stillPoisoned(b.out, shape.maxTokens * shape.hidden * 2, b.hOut), "rank %d: an invalid call wrote out",
             rank);

  /* FP8 needs whole blocks of 128: a layout of hidden 136 refuses an FP8 dispatch (bf16 runs on it). */
  const struct moeRefCase odd = moeShape(nranks, 2 * nranks, 2, 136, 4, 0, 1);
  fcclMoeConfig_t config = FCCL_MOE_CONFIG_INITIALIZER;
  config.numExperts = odd.experts;
  config.topk = odd.topk;
  config.hidden = odd.hidden;
  config.maxTokensPerRank = odd.maxTokens;
  fcclMoeLayout_t oddLayout = NULL;
  EXPECT_EQ_INT(fcclMoeLayoutCreate(comm, &config, &oddLayout), fcclSuccess);
  if (oddLayout) {
    const fcclMoeRecv_t r8 = {b.recvX, b.recvScales, NULL, NULL, b.recvCounts, NULL};
    INVALID("hidden 136 is not a multiple of 128",
            fcclMoeDispatch(b.x, b.xScales, b.topk, fcclInt32, NULL, 4, fcclFloat8e4m3, &r8, 0, oddLayout, b.stream));
    EXPECT_EQ_INT(fcclMoeLayoutDestroy(oddLayout), fcclSuccess);
  }

  /* Configurations: out of range on every rank, then one that differs between ranks; every rank fails alike. */
  fcclMoeLayout_t none = NULL;
  config.topk = 9;
  INVALID("topk", fcclMoeLayoutCreate(comm, &config, &none));
  if (nranks > 1) {
    config.topk = rank == nranks - 1 ? 1 : 2;
    INVALID("differs from rank", fcclMoeLayoutCreate(comm, &config, &none));
  }
  EXPECT(none == NULL);

  /* The communicator and the layout still work. */
  c.ref.call = 1;
  EXPECT_EQ_INT(moeRunCase(&b, &c, 1), 0);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  moeBenchFini(&b);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);

  /* Invalid routing fails the communicator: one of its own each. */
  invalidRouting(args, rank, nranks, 1, 0);
  invalidRouting(args, rank, nranks, 2, 1);
  return 1;
}
#undef INVALID

/* timeout and abort: rank 0 dispatches alone; its kernel gives up after FCCL_TIMEOUT, or stops at once on
 * fcclCommAbort. The layout outlives its communicator: calls on it are refused, its destroy frees the handle. */
static void neverCalls(const struct moeArgs* args, int rank, int nranks, int abortIt) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return;
  const struct moeRefCase shape = moeShape(nranks, 2 * nranks, 2, 512, 32, 0, 1);
  struct moeBench b;
  if (!moeBenchInit(&b, args->shared, comm, rank, nranks, &shape, 0)) return;
  struct moeCase c;
  memset(&c, 0, sizeof(c));
  c.ref = shape;
  c.ref.seed = args->seed;
  c.ref.fullTokens = 1;
  c.idxType = fcclInt64;
  c.outputs = MOE_OUT_ALL;
  c.weighted = 1;
  c.badRank = -1;
  if (rank == 0 && moeUpload(&b, &c) == 0 && cudaStreamSynchronize(b.stream) == cudaSuccess) {
    const int64_t start = collNowNs();
    EXPECT_EQ_INT(moeDispatch(&b, &c, b.stream), fcclSuccess);
    if (abortIt) {
      usleep(200000);
      EXPECT_EQ_INT(cudaStreamQuery(b.stream), cudaErrorNotReady); /* still waiting for rank 1 */
      const int64_t aborted = collNowNs();
      EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
      EXPECT_EQ_INT(cudaStreamSynchronize(b.stream), cudaSuccess);
      const double seconds = (double)(collNowNs() - aborted) / 1e9;
      EXPECT_MSG(seconds < 5, "fcclCommAbort took %.2f s to stop the dispatch", seconds);
      printf("aborted in %.3f s\n", seconds);
    } else {
      EXPECT_EQ_INT(cudaStreamSynchronize(b.stream), cudaSuccess); /* the kernel ends: it gave up */
      const double seconds = (double)(collNowNs() - start) / 1e9;
      EXPECT_MSG(seconds < 20, "the dispatch took %.1f s to give up (FCCL_TIMEOUT=300 ms)", seconds);
      EXPECT_EQ_INT(awaitAsyncError(comm, 10000), fcclTimeout);
      const char* text = fcclGetLastError(comm);
      EXPECT_STR_CONTAINS(text, "moe kernel");
      EXPECT_STR_CONTAINS(text, "rank 1 did not arrive");
      printf("gave up after %.2f s: %s\n", seconds, text);
      EXPECT_EQ_INT(moeDispatch(&b, &c, b.stream), fcclTimeout); /* nothing launched */
      EXPECT_EQ_INT(cudaStreamSynchronize(b.stream), cudaSuccess);
      EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    }
    testShmPost(&args->shared->flags[1], 1);
  } else if (rank == 0) {
    testShmPost(&args->shared->flags[1], 1); /* the failure is reported: release rank 1 */
  } else {
    const int result = testShmWait(args->shared->shm, &args->shared->flags[1], 1, 120000, "rank 0's dispatch");
    EXPECT_MSG(result == TEST_SHM_OK, "rank 0 never finished (%s)", testShmResultName(result));
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
  }
  /* The communicator is gone, and the layout's memory with it. */
  EXPECT_EQ_INT(moeDispatch(&b, &c, b.stream), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "destroyed or aborted");
  moeBenchFini(&b); /* fcclMoeLayoutDestroy: fcclSuccess, the handle only */
}

/* dead: the last rank is killed while the others wait in a dispatch: fcclRemoteError naming it. */
static void peerDies(const struct moeArgs* args, int rank, int nranks) {
  const int victim = nranks - 1;
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return;
  const struct moeRefCase shape = moeShape(nranks, 2 * nranks, 2, 512, 32, 0, 1);
  struct moeBench b;
  if (!moeBenchInit(&b, args->shared, comm, rank, nranks, &shape, 0)) return;
  if (rank == victim) {
    /* Dies once every survivor's dispatch is enqueued; bounded: a survivor that failed first never posts. */
    for (int r = 0; r < victim; r++)
      (void)testShmWait(args->shared->shm, &args->shared->flags[1 + r], 1, 60000, "a survivor's dispatch");
    usleep(200000);
    fflush(stdout);
    raise(SIGKILL);
    _exit(3); /* not reached */
  }
  struct moeCase c;
  memset(&c, 0, sizeof(c));
  c.ref = shape;
  c.ref.seed = args->seed;
  c.ref.fullTokens = 1;
  c.idxType = fcclInt64;
  c.outputs = MOE_OUT_ALL;
  c.weighted = 1;
  c.badRank = -1;
  int uploaded = moeUpload(&b, &c) == 0 && cudaStreamSynchronize(b.stream) == cudaSuccess;
  EXPECT(uploaded);
  EXPECT_EQ_INT(moeDispatch(&b, &c, b.stream), fcclSuccess);
  testShmPost(&args->shared->flags[1 + rank], 1);
  (void)cudaStreamSynchronize(b.stream); /* the kernel ends at the abort word, or at FCCL_TIMEOUT */
  const fcclResult_t seen = awaitAsyncError(comm, 60000);
  EXPECT_MSG(seen == fcclRemoteError, "rank %d: the error is %s, want fcclRemoteError: %s", rank,
             fcclGetErrorString(seen), fcclGetLastError(comm));
  char name[32];
  snprintf(name, sizeof(name), "rank %d", victim);
  EXPECT_STR_CONTAINS(fcclGetLastError(comm), name);
  printf("rank %d: %s\n", rank, fcclGetLastError(comm));
  EXPECT_EQ_INT(moeDispatch(&b, &c, b.stream), fcclRemoteError);
  /* Destroyed after the failure without waiting for the victim (its result is the failure's or fcclSuccess); the
   * layout's memory goes with it, and the layout's destroy frees the handle alone. */
  (void)fcclCommDestroy(comm);
  moeBenchFini(&b);
}

int moeFaultMain(int rank, int nranks, const struct moeArgs* args) {
  if (strcmp(args->mode, "dead") == 0)
    peerDies(args, rank, nranks);
  else
    neverCalls(args, rank, nranks, strcmp(args->mode, "abort") == 0);
  char name[64];
  snprintf(name, sizeof(name), "moe %s rank %d", args->mode, rank);
  return testSummary(name);
}
