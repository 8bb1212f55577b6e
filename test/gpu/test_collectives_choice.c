/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The all-gather, reduce-scatter and broadcast test (test_collectives.c): how a form is chosen. The FCCL_*_ALGO
 * variables (forced kernels seen in the COLL trace, bad values, ranks that disagree, the copy engines), and
 * registration that only some buffers have: only the buffers peers reach count, so every rank chooses alike.
 */
#include "test_collectives.h"

#include "algo.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"
#include "test_collectives_common.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the FCCL_*_ALGO variables --------------------------------------------------------------------------------- */

/* The COLL trace lines, kept to look for the kernel a call ran ("fcclAllGather 1000 x float32 ...: allgather_staged,
 * 1 x 512, ..."). */
#define LOG_KEEP 65536
static char logText[LOG_KEEP];
static size_t logUsed;

static void keepLog(void* userData, fcclLogLevel_t level, const char* subsystem, const char* line) {
  (void)userData;
  (void)level;
  (void)subsystem;
  const size_t n = strlen(line);
  if (logUsed + n + 2 >= LOG_KEEP) logUsed = 0; /* only the latest lines matter */
  memcpy(logText + logUsed, line, n);
  logText[logUsed + n] = '\n';
  logText[logUsed + n + 1] = '\0';
  logUsed += n + 1;
}

static void clearLog(void) {
  logUsed = 0;
  logText[0] = '\0';
}

/* The call ran `kernel` (its name in the trace, between ": " and ","). */
static void expectKernel(const char* kernel, const char* what) {
  char needle[64];
  snprintf(needle, sizeof(needle), ": %s, ", kernel);
  EXPECT_MSG(strstr(logText, needle) != NULL, "%s: the trace does not show %s: %s", what, kernel, logText);
  clearLog();
}

int modeEnvForce(int rank, int nranks, const struct collTestArgs* args) {
  setenv("FCCL_ALLGATHER_ALGO", "staged", 1);
  setenv("FCCL_REDUCESCATTER_ALGO", "ll", 1);
  setenv("FCCL_BROADCAST_ALGO", "direct", 1);
  setenv("FCCL_DEBUG", "TRACE", 1);
  setenv("FCCL_DEBUG_SUBSYS", "COLL", 1);
  EXPECT_EQ_INT(fcclSetLogCallback(keepLog, NULL), fcclSuccess);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const size_t beyondLL = layout.llBytes / sizeof(float) + 5;
  uint64_t call = 0;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed,
                         (size_t)nranks * beyondLL * sizeof(float) + 64, registered))
      return 1;
    clearLog();
    /* Forced by the variable, at a size where the table would run LL. */
    const struct moveCase ag = {MOVE_ALLGATHER, fcclFloat32, fcclSum, MOVE_AUTO, 0, 1000, 0, 0, 0, 0};
    moveRunCase(&ctx, &ag, call++);
    expectKernel("allgather_staged", "FCCL_ALLGATHER_ALGO=staged");
    const struct moveCase rs = {MOVE_REDUCESCATTER, fcclFloat32, fcclMax, MOVE_AUTO, 0, 1000, 0, 0, 0, 0};
    moveRunCase(&ctx, &rs, call++);
    expectKernel("reducescatter_ll", "FCCL_REDUCESCATTER_ALGO=ll");
    /* Beyond what the form can run: the table's choice. */
    const struct moveCase rsBig = {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, MOVE_AUTO, 0, beyondLL, 0, 0, 0, 0};
    moveRunCase(&ctx, &rsBig, call++);
    expectKernel(registered ? "reducescatter_direct" : "reducescatter_staged", "FCCL_REDUCESCATTER_ALGO=ll, too large");
    const struct moveCase bc = {MOVE_BROADCAST, fcclFloat32, fcclSum, MOVE_AUTO, 0, 1000, nranks - 1, 0, 0, 1};
    moveRunCase(&ctx, &bc, call++);
    expectKernel(registered ? "broadcast_direct" : "broadcast_ll", "FCCL_BROADCAST_ALGO=direct");
    /* A form forced by the caller wins over the variable. */
    const struct moveCase agLL = {MOVE_ALLGATHER, fcclFloat32, fcclSum, FCCL_MOVE_LL, 0, 1000, 0, 0, 0, 0};
    moveRunCase(&ctx, &agLL, call++);
    expectKernel("allgather_ll", "forced LL under FCCL_ALLGATHER_ALGO=staged");
    collContextFini(&ctx);
  }
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  EXPECT_EQ_INT(fcclSetLogCallback(NULL, NULL), fcclSuccess);
  return 0;
}

/* FCCL_ALLGATHER_ALGO=copy and FCCL_BROADCAST_ALGO=copy: the copy engines on registered buffers at any size, the
 * table's choice on plain ones; FCCL_REDUCESCATTER_ALGO=copy is no form of the reduce-scatter (warned, by size). */
int modeEnvCopy(int rank, int nranks, const struct collTestArgs* args) {
  setenv("FCCL_ALLGATHER_ALGO", "copy", 1);
  setenv("FCCL_REDUCESCATTER_ALGO", "copy", 1);
  setenv("FCCL_BROADCAST_ALGO", "copy", 1);
  setenv("FCCL_DEBUG", "TRACE", 1);
  setenv("FCCL_DEBUG_SUBSYS", "COLL", 1);
  EXPECT_EQ_INT(fcclSetLogCallback(keepLog, NULL), fcclSuccess);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  EXPECT_STR_CONTAINS(logText, "FCCL_REDUCESCATTER_ALGO=copy is not one of auto, ll, direct, staged;");
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const size_t beyondLL = layout.llBytes / sizeof(float) + 5;
  uint64_t call = 0;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed,
                         (size_t)nranks * beyondLL * sizeof(float) + 64, registered))
      return 1;
    clearLog();
    const struct moveCase ag = {MOVE_ALLGATHER, fcclFloat32, fcclSum, MOVE_AUTO, 0, 1000, 0, 4, 8, 0};
    moveRunCase(&ctx, &ag, call++);
    expectKernel(registered ? "allgather_copy" : "allgather_ll", "FCCL_ALLGATHER_ALGO=copy, 1000 floats");
    const struct moveCase agBig = {MOVE_ALLGATHER, fcclFloat32, fcclSum, MOVE_AUTO, 1, beyondLL, 0, 0, 0, 0};
    moveRunCase(&ctx, &agBig, call++);
    expectKernel(registered ? "allgather_copy" : "allgather_staged", "FCCL_ALLGATHER_ALGO=copy, beyond LL");
    const struct moveCase bc = {MOVE_BROADCAST, fcclBfloat16, fcclSum, MOVE_AUTO, 0, 1001, nranks - 1, 2, 6, 1};
    moveRunCase(&ctx, &bc, call++);
    expectKernel(registered ? "broadcast_copy" : "broadcast_ll", "FCCL_BROADCAST_ALGO=copy");
    const struct moveCase rs = {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, MOVE_AUTO, 0, beyondLL, 0, 0, 0, 0};
    moveRunCase(&ctx, &rs, call++);
    expectKernel(registered ? "reducescatter_direct" : "reducescatter_staged", "FCCL_REDUCESCATTER_ALGO=copy");
    /* A form forced by the caller wins over the variable. */
    const struct moveCase agLL = {MOVE_ALLGATHER, fcclFloat32, fcclSum, FCCL_MOVE_LL, 0, 1000, 0, 0, 0, 0};
    moveRunCase(&ctx, &agLL, call++);
    expectKernel("allgather_ll", "forced LL under FCCL_ALLGATHER_ALGO=copy");
    collContextFini(&ctx);
  }
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  EXPECT_EQ_INT(fcclSetLogCallback(NULL, NULL), fcclSuccess);
  return 0;
}

int modeEnvInvalid(int rank, int nranks, const struct collTestArgs* args) {
  setenv("FCCL_ALLGATHER_ALGO", "fastest", 1);
  setenv("FCCL_REDUCESCATTER_ALGO", "twoshot", 1);
  setenv("FCCL_BROADCAST_ALGO", "LL", 1); /* names are lower case */
  EXPECT_EQ_INT(fcclSetLogCallback(keepLog, NULL), fcclSuccess);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  EXPECT_STR_CONTAINS(logText, "FCCL_ALLGATHER_ALGO=fastest is not one of auto, ll, direct, staged");
  EXPECT_STR_CONTAINS(logText, "FCCL_REDUCESCATTER_ALGO=twoshot is not one of");
  EXPECT_STR_CONTAINS(logText, "FCCL_BROADCAST_ALGO=LL is not one of");
  EXPECT_EQ_INT(fcclSetLogCallback(NULL, NULL), fcclSuccess);
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, (size_t)nranks * 100003 * 4 + 64, 0))
    return 1;
  uint64_t call = 0;
  for (int kind = 0; kind < MOVE_KINDS; kind++) {
    const struct moveCase small = {kind, fcclBfloat16, fcclSum, MOVE_AUTO, 0, 1001, kind % nranks, 2, 0, 0};
    const struct moveCase large = {kind, fcclFloat32, fcclAvg, MOVE_AUTO, 1, 100003, nranks - 1, 0, 0, 0};
    moveRunCase(&ctx, &small, call++);
    moveRunCase(&ctx, &large, call++);
  }
  collContextFini(&ctx);
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

int modeEnvMismatch(int rank, int nranks, const struct collTestArgs* args) {
  if (rank == nranks - 1) setenv("FCCL_BROADCAST_ALGO", "staged", 1);
  EXPECT_EQ_INT(fcclSetLogCallback(keepLog, NULL), fcclSuccess); /* the cause, logged where it is found */
  fcclUniqueId id;
  if (!collShareId(args->shared, rank, 0, &id)) return 1;
  EXPECT_EQ_INT(cudaSetDevice(rank % args->gpus), cudaSuccess);
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = nranks > args->gpus;
  config.timeoutMs = 60000;
  fcclComm_t comm = NULL;
  const fcclResult_t res = fcclCommInitRankConfig(&comm, nranks, id, rank, &config);
  EXPECT_MSG(res == fcclInvalidUsage, "rank %d: fcclCommInitRankConfig returned %s, want fcclInvalidUsage", rank,
             fcclGetErrorString(res));
  EXPECT_STR_CONTAINS(logText, "were given different algorithms");
  EXPECT(comm == NULL); /* output parameters are written only on success */
  EXPECT_EQ_INT(fcclSetLogCallback(NULL, NULL), fcclSuccess);
  if (res == fcclSuccess && comm) EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- registration that the ranks do not share ------------------------------------------------------------------ */

/* Waits for the call, reports a failure (a timeout: the ranks ran different forms) and checks the output. Returns 1
 * when the communicator must be aborted. */
static int finishUnshared(struct collContext* ctx, const struct moveCase* c, const char* recvbuf, uint64_t call,
                          const char* what) {
  EXPECT_EQ_INT(cudaStreamSynchronize(ctx->stream), cudaSuccess);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(ctx->comm, &async), fcclSuccess);
  EXPECT_MSG(async == fcclSuccess, "rank %d: %s did not complete (%s: %s): the ranks ran different forms", ctx->rank,
             what, fcclGetErrorString(async), fcclGetLastError(ctx->comm));
  if (async != fcclSuccess) return 1;
  const size_t bytes = moveRecvElems(c->kind, c->count, ctx->nranks) * fcclTypeSize(c->type);
  EXPECT_EQ_INT(cudaMemcpy(ctx->hostOut, recvbuf, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  char message[512];
  const size_t wrong = moveCheckOutput(c, ctx->seed, call, 0, ctx->rank, ctx->nranks, ctx->hostOut, message,
                                       sizeof(message));
  EXPECT_MSG(wrong == 0, "rank %d: %s: %zu wrong: %s", ctx->rank, what, wrong, message);
  if (call < COLL_MAX_HASHES) ctx->shared->hashes[call][ctx->rank] = refHash(ctx->hostOut, bytes) | 1;
  return 0;
}

int modeUnshared(int rank, int nranks, const struct collTestArgs* args, int kind) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  const size_t count = 1u << 20; /* 4 MiB of floats per block: beyond LL for any rank count */
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, (size_t)nranks * count * 4, 1)) return 1;
  char* plain = NULL;
  EXPECT_EQ_INT(cudaMalloc((void**)&plain, count * 4), cudaSuccess);
  EXPECT_EQ_INT(cudaMemset(ctx.recv.base, COLL_POISON, ctx.recv.capacity + 2 * COLL_GUARD), cudaSuccess);
  char* recvbuf = ctx.recv.base + COLL_GUARD;
  const uint64_t call = 0;
  struct moveCase c = {kind, fcclFloat32, fcclSum, MOVE_AUTO, 0, count, 0, 0, 0, 1};
  const char* sendbuf = NULL;
  char what[160];
  refFillInput(c.type, args->seed, call, rank, 0, ctx.hostIn, count);
  if (kind == MOVE_BROADCAST) {
    /* Root 0 sends from its plain buffer; the others pass NULL. */
    snprintf(what, sizeof(what), "a broadcast from a plain sendbuf into registered recvbufs");
    if (rank == 0) {
      EXPECT_EQ_INT(cudaMemcpy(plain, ctx.hostIn, count * 4, cudaMemcpyHostToDevice), cudaSuccess);
      sendbuf = plain;
    }
  } else {
    /* Rank 1 in place (its block of its registered output), every other rank from its plain buffer. */
    snprintf(what, sizeof(what), "an all-gather in place on rank 1 and from plain sendbufs on the others");
    c.inPlace = rank == 1;
    char* at = rank == 1 ? recvbuf + count * 4 : plain;
    EXPECT_EQ_INT(cudaMemcpy(at, ctx.hostIn, count * 4, cudaMemcpyHostToDevice), cudaSuccess);
    sendbuf = at;
  }
  const fcclResult_t res = kind == MOVE_BROADCAST
                               ? fcclBroadcast(sendbuf, recvbuf, count, fcclFloat32, 0, comm, ctx.stream)
                               : fcclAllGather(sendbuf, recvbuf, count, fcclFloat32, comm, ctx.stream);
  EXPECT_MSG(res == fcclSuccess, "rank %d: %s: %s: %s", rank, what, fcclGetErrorString(res), fcclGetLastError(NULL));
  const int abortComm = res != fcclSuccess || finishUnshared(&ctx, &c, recvbuf, call, what);
  args->shared->flags[0] = 1;
  EXPECT_EQ_INT(cudaFree(plain), cudaSuccess);
  if (abortComm) {
    /* The kernels gave up (FCCL_TIMEOUT): the communicator is unusable; its buffers go with it. */
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    return 0;
  }
  collContextFini(&ctx);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}
