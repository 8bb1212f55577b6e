/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The variable all-gather and reduce-scatter test's modes beyond the sweep (test_variable.c's header says what each
 * covers): graph capture and replay, bad input, ranks out of step, the NCCL path.
 */
#include "test_variable.h"

#include "device.h"
#include "device_state.h"
#include "param.h"
#include "test_collectives_common.h"
#include "variable.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POLL_LIMIT_MS 60000

static long elapsedMs(const struct timespec* since) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long)(now.tv_sec - since->tv_sec) * 1000 + (now.tv_nsec - since->tv_nsec) / 1000000;
}

/* Waits (bounded) for the stream to pass everything enqueued; 0 when it did. */
static int pollStream(cudaStream_t stream) {
  struct timespec since;
  clock_gettime(CLOCK_MONOTONIC, &since);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return 0;
    }
    if (elapsedMs(&since) > POLL_LIMIT_MS) return -1;
    usleep(1000);
  }
}

/* Waits (bounded) for the communicator's asynchronous error to be other than fcclSuccess; returns it. */
static fcclResult_t awaitAsyncError(fcclComm_t comm) {
  struct timespec since;
  clock_gettime(CLOCK_MONOTONIC, &since);
  fcclResult_t async = fcclSuccess;
  while (elapsedMs(&since) < POLL_LIMIT_MS) {
    if (fcclCommGetAsyncError(comm, &async) != fcclSuccess) return fcclInternalError;
    if (async != fcclSuccess && async != fcclInProgress) return async;
    usleep(1000);
  }
  return async;
}

/* ---- graph --------------------------------------------------------------------------------------------------- */

#define GRAPH_NODES 4
#define GRAPH_CAPACITY (2u << 20)

/* The captured calls. The device-count nodes are captured with every count at `largest` (their capacities:
 * largest + slack per rank, nranks x largest + slack in all); each replay writes new counts within those. */
struct graphNode {
  struct varCase c;
  int registered;
  size_t largest;
  int pattern; /* host counts: fixed at capture */
};

static const struct graphNode kNodes[GRAPH_NODES] = {
    {{0, fcclBfloat16, fcclSum, VAR_AUTO, 0, 0, 0, {0}, 2, 6}, 0, 5001, 1},
    {{1, fcclFloat32, fcclSum, VAR_AUTO, 0, 0, 0, {0}, 4, 0}, 1, 40001, 0},
    {{0, fcclFloat32, fcclSum, VAR_AUTO, 1, 0, 7, {0}, 0, 4}, 0, 60001, 0},
    {{1, fcclFloat16, fcclMax, VAR_AUTO, 1, 0, 3, {0}, 2, 2}, 0, 3001, 0},
};

struct graphState {
  struct varCase captured[GRAPH_NODES];
  struct collBuffer send[GRAPH_NODES], recv[GRAPH_NODES];
  struct varPlace place[GRAPH_NODES];
  void* staging[GRAPH_NODES];       /* pinned, GRAPH_CAPACITY + guards */
  int64_t* hostCounts[GRAPH_NODES]; /* pinned */
  int64_t* devCounts[GRAPH_NODES];
};

static int graphSetUp(struct varContext* ctx, struct graphState* g, uint64_t* rng) {
  const int n = ctx->nranks;
  for (int j = 0; j < GRAPH_NODES; j++) {
    g->captured[j] = kNodes[j].c;
    if (kNodes[j].c.device)
      for (int r = 0; r < n; r++) g->captured[j].counts[r] = kNodes[j].largest;
    else
      varMakeCounts(kNodes[j].pattern, n, kNodes[j].largest, rng, g->captured[j].counts);
    if (!collBufferCreate(ctx->comm, &g->send[j], GRAPH_CAPACITY, kNodes[j].registered)) return 0;
    if (!collBufferCreate(ctx->comm, &g->recv[j], GRAPH_CAPACITY, kNodes[j].registered)) return 0;
    varPlaceIn(g->send[j].base, g->recv[j].base, &g->captured[j], ctx->rank, n, &g->place[j]);
    if (cudaMallocHost(&g->staging[j], GRAPH_CAPACITY + 2 * COLL_GUARD) != cudaSuccess) return 0;
    if (cudaMallocHost((void**)&g->hostCounts[j], REF_MAX_RANKS * sizeof(int64_t)) != cudaSuccess) return 0;
    if (cudaMalloc((void**)&g->devCounts[j], REF_MAX_RANKS * sizeof(int64_t)) != cudaSuccess) return 0;
  }
  return 1;
}

static void graphTearDown(struct varContext* ctx, struct graphState* g) {
  for (int j = 0; j < GRAPH_NODES; j++) {
    collBufferDestroy(ctx->comm, &g->send[j]);
    collBufferDestroy(ctx->comm, &g->recv[j]);
    if (g->staging[j]) cudaFreeHost(g->staging[j]);
    if (g->hostCounts[j]) cudaFreeHost(g->hostCounts[j]);
    if (g->devCounts[j]) EXPECT_EQ_INT(cudaFree(g->devCounts[j]), cudaSuccess);
  }
}

/* Replay `rep`'s case of node j: the captured one, with new counts for the device-count nodes. */
static struct varCase graphCase(const struct varContext* ctx, const struct graphState* g, int j, int rep,
                                uint64_t* rng) {
  struct varCase c = g->captured[j];
  if (c.device) varMakeCounts(rep % VAR_PATTERNS, ctx->nranks, kNodes[j].largest, rng, c.counts);
  return c;
}

int modeGraph(int rank, int nranks, const struct collTestArgs* args) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  EXPECT(comm != NULL);
  if (!comm) return 1;
  struct varContext ctx;
  struct graphState g;
  memset(&g, 0, sizeof(g));
  uint64_t rng = args->seed ^ 0x6772617068ull;
  int ready = varContextInit(&ctx, args, comm, rank, nranks, GRAPH_CAPACITY, 0);
  ready = ready && graphSetUp(&ctx, &g, &rng);
  EXPECT(ready);
  int64_t hashes = 0;
  if (ready) {
    /* Capture: the device-count nodes read counts written before each replay. */
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    EXPECT_EQ_INT(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    for (int j = 0; j < GRAPH_NODES; j++)
      EXPECT_EQ_INT(varInvoke(&ctx, &g.captured[j], &g.place[j], g.devCounts[j], ctx.stream), fcclSuccess);
    EXPECT_EQ_INT(cudaStreamEndCapture(ctx.stream, &graph), cudaSuccess);
    EXPECT_EQ_INT(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    const int replays = collQuick() ? 20 : 200;
    int problems = 0;
    for (int rep = 0; rep < replays && exec && problems < 5; rep++) {
      struct varCase now[GRAPH_NODES];
      for (int j = 0; j < GRAPH_NODES; j++) {
        now[j] = graphCase(&ctx, &g, j, rep, &rng);
        const uint64_t call = 1000 + (uint64_t)rep * GRAPH_NODES + (uint64_t)j;
        problems += varUpload(&ctx, &now[j], &g.place[j], call, g.staging[j], g.hostCounts[j], g.devCounts[j],
                              ctx.stream);
      }
      EXPECT_EQ_INT(cudaGraphLaunch(exec, ctx.stream), cudaSuccess);
      if (pollStream(ctx.stream) != 0) {
        testFail(__FILE__, __LINE__, "rank %d: replay %d did not end within %d ms", rank, rep, POLL_LIMIT_MS);
        problems += 5;
        break;
      }
      for (int j = 0; j < GRAPH_NODES; j++) {
        char what[300], described[256];
        varDescribe(&now[j], nranks, described, sizeof(described));
        snprintf(what, sizeof(what), "replay %d node %d: %s", rep, j, described);
        const uint64_t call = 1000 + (uint64_t)rep * GRAPH_NODES + (uint64_t)j;
        problems += varCheck(&ctx, &now[j], &g.place[j], call, now[j].reduces ? -1 : hashes++, what);
      }
      /* Every 5th replay: the device-count all-gather eagerly between replays, on the graph's own buffers. */
      if (rep % 5 == 4) {
        struct varCase eager = graphCase(&ctx, &g, 2, rep + 1, &rng);
        const uint64_t call = 500000 + (uint64_t)rep;
        problems += varUpload(&ctx, &eager, &g.place[2], call, g.staging[2], g.hostCounts[2], g.devCounts[2],
                              ctx.stream);
        EXPECT_EQ_INT(varInvoke(&ctx, &eager, &g.place[2], g.devCounts[2], ctx.stream), fcclSuccess);
        EXPECT_EQ_INT(cudaStreamSynchronize(ctx.stream), cudaSuccess);
        problems += varCheck(&ctx, &eager, &g.place[2], call, hashes++, "eager between replays");
      }
    }
    EXPECT_MSG(problems == 0, "rank %d: %d problems in the replays", rank, problems);
    if (exec) EXPECT_EQ_INT(cudaGraphExecDestroy(exec), cudaSuccess);
    if (graph) EXPECT_EQ_INT(cudaGraphDestroy(graph), cudaSuccess);
    fcclResult_t async = fcclInternalError;
    EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
    EXPECT_EQ_INT(async, fcclSuccess);
  }
  graphTearDown(&ctx, &g);
  varContextFini(&ctx);
  args->shared->flags[0] = (int)hashes;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- invalid ------------------------------------------------------------------------------------------------- */

static void expectInvalid(fcclResult_t got, fcclResult_t want, const char* part, const char* what) {
  EXPECT_MSG(got == want, "%s: %s, expected %s", what, fcclGetErrorString(got), fcclGetErrorString(want));
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), part);
}

/* Arguments refused before anything is launched, then a right call. */
static void invalidArguments(struct varContext* ctx) {
  const int n = ctx->nranks;
  size_t counts[REF_MAX_RANKS];
  for (int r = 0; r < n; r++) counts[r] = 4;
  char* send = ctx->send[0].base + COLL_GUARD;
  char* recv = ctx->recv[0].base + COLL_GUARD;
  void* hostMem = malloc(4096);
  EXPECT(hostMem != NULL);
  if (!hostMem) return;
  uint64_t before = 0, after = 1;
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(ctx->comm, &before), fcclSuccess);
  cudaStream_t s = ctx->stream;
  fcclComm_t comm = ctx->comm;
  expectInvalid(fcclAllGatherV(hostMem, recv, counts, fcclFloat32, comm, s), fcclInvalidArgument, "sendbuf",
                "AGV host sendbuf");
  expectInvalid(fcclReduceScatterV(send, hostMem, counts, fcclFloat32, fcclSum, comm, s), fcclInvalidArgument,
                "recvbuf", "RSV host recvbuf");
  expectInvalid(fcclAllGatherV(send + 1, recv, counts, fcclFloat32, comm, s), fcclInvalidArgument, "aligned",
                "AGV misaligned sendbuf");
  expectInvalid(fcclAllGatherV(send, recv, NULL, fcclFloat32, comm, s), fcclInvalidArgument, "counts",
                "AGV NULL counts");
  expectInvalid(fcclReduceScatterV(send, recv, counts, fcclFloat32, fcclNumOps, comm, s), fcclInvalidArgument, "op",
                "RSV unknown op");
  expectInvalid(fcclAllGatherVDevice(send, recv, (const int64_t*)hostMem, 4, 4 * (size_t)n, fcclFloat32, comm, s),
                fcclInvalidArgument, "counts", "AGV device counts in host memory");
  expectInvalid(fcclReduceScatterVDevice(send, recv, (const int64_t*)((char*)ctx->devCounts + 4), 4 * (size_t)n, 4,
                                         fcclFloat32, fcclSum, comm, s),
                fcclInvalidArgument, "aligned", "RSV misaligned device counts");
  expectInvalid(fcclAllGatherVDevice(send, recv, ctx->devCounts, SIZE_MAX / 2, SIZE_MAX / 2, fcclFloat32, comm, s),
                fcclInvalidArgument, "overflows", "AGV capacities that overflow");
  expectInvalid(fcclAllGatherVAlgo(send, recv, counts, fcclFloat32, comm, s, 9999), fcclInvalidArgument, "algorithm",
                "AGV unknown algorithm");
  free(hostMem);
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(ctx->comm, &after), fcclSuccess);
  EXPECT_MSG(after == before, "rank %d: the refused calls moved the epoch from %llu to %llu", ctx->rank,
             (unsigned long long)before, (unsigned long long)after);
}

/* Device counts that do not fit (kind 0: a count above the per-rank capacity; 1: the sum above the capacity of
 * every block; 2: a negative count): the call is accepted, the kernel moves nothing and the communicator fails
 * with fcclInvalidArgument on every rank. */
static int badDeviceCounts(const struct collTestArgs* args, int rank, int nranks, int kind) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 1 + kind);
  EXPECT(comm != NULL);
  if (!comm) return 1;
  struct varContext ctx;
  const int ready = varContextInit(&ctx, args, comm, rank, nranks, 1u << 20, 0);
  EXPECT(ready);
  if (ready) {
    const size_t regionBytes = ctx.capacity + 2 * COLL_GUARD;
    EXPECT_EQ_INT(cudaMemset(ctx.send[0].base, COLL_POISON, regionBytes), cudaSuccess);
    EXPECT_EQ_INT(cudaMemset(ctx.recv[0].base, COLL_POISON, regionBytes), cudaSuccess);
    int64_t counts[REF_MAX_RANKS];
    for (int r = 0; r < nranks; r++) counts[r] = 4;
    const int culprit = nranks - 1;
    if (kind == 0) counts[culprit] = 5;
    if (kind == 2) counts[culprit] = -1;
    EXPECT_EQ_INT(cudaMemcpy(ctx.devCounts, counts, (size_t)nranks * sizeof(int64_t), cudaMemcpyHostToDevice),
                  cudaSuccess);
    char* send = ctx.send[0].base + COLL_GUARD;
    char* recv = ctx.recv[0].base + COLL_GUARD;
    fcclResult_t res;
    if (kind == 1) /* every count 4, their sum above sendcapacity */
      res = fcclReduceScatterVDevice(send, recv, ctx.devCounts, 4 * (size_t)nranks - 1, 4, fcclFloat32, fcclSum, comm,
                                     ctx.stream);
    else
      res = fcclAllGatherVDevice(send, recv, ctx.devCounts, 4, 4 * (size_t)nranks + 8, fcclFloat32, comm, ctx.stream);
    EXPECT_EQ_INT(res, fcclSuccess);
    EXPECT_EQ_INT(pollStream(ctx.stream), 0);
    const fcclResult_t async = awaitAsyncError(comm);
    EXPECT_MSG(async == fcclInvalidArgument, "rank %d: device counts kind %d: asynchronous error %s (%s)", rank, kind,
               fcclGetErrorString(async), fcclGetLastError(comm));
    EXPECT_STR_CONTAINS(fcclGetLastError(comm), "counts");
    /* Nothing written. */
    EXPECT_EQ_INT(cudaMemcpy(ctx.host2, ctx.recv[0].base, regionBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t written = 0;
    for (size_t i = 0; i < regionBytes; i++) written += ctx.host2[i] != COLL_POISON;
    EXPECT_MSG(written == 0, "rank %d: device counts kind %d: %zu bytes written", rank, kind, written);
    /* The next call returns the recorded error. */
    size_t fine[REF_MAX_RANKS];
    for (int r = 0; r < nranks; r++) fine[r] = 4;
    EXPECT(fcclAllGatherV(send, recv, fine, fcclFloat32, comm, ctx.stream) != fcclSuccess);
  }
  varContextFini(&ctx);
  EXPECT_EQ_INT(kind % 2 ? fcclCommAbort(comm) : fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

int modeInvalid(int rank, int nranks, const struct collTestArgs* args) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  EXPECT(comm != NULL);
  if (!comm) return 1;
  struct varContext ctx;
  const int ready = varContextInit(&ctx, args, comm, rank, nranks, 1u << 20, 0);
  EXPECT(ready);
  int64_t calls = 0;
  if (ready) {
    invalidArguments(&ctx);
    /* The peers are still in step: a right call of each kind, checked. */
    struct varCase c;
    memset(&c, 0, sizeof(c));
    c.type = fcclFloat32;
    c.op = fcclSum;
    c.form = VAR_AUTO;
    for (int r = 0; r < nranks; r++) c.counts[r] = (size_t)(3 + 5 * r);
    for (int reduces = 0; reduces < 2; reduces++) {
      c.reduces = reduces;
      struct varPlace p;
      varPlaceIn(ctx.send[0].base, ctx.recv[0].base, &c, rank, nranks, &p);
      EXPECT_EQ_INT(varUpload(&ctx, &c, &p, (uint64_t)reduces, ctx.host, ctx.hostCounts, ctx.devCounts, ctx.stream), 0);
      EXPECT_EQ_INT(varInvoke(&ctx, &c, &p, ctx.devCounts, ctx.stream), fcclSuccess);
      EXPECT_EQ_INT(cudaStreamSynchronize(ctx.stream), cudaSuccess);
      EXPECT_EQ_INT(varCheck(&ctx, &c, &p, (uint64_t)reduces, reduces ? -1 : calls++, "after the refused calls"), 0);
    }
  }
  varContextFini(&ctx);
  args->shared->flags[0] = (int)calls;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  for (int kind = 0; kind < 3; kind++) badDeviceCounts(args, rank, nranks, kind);
  return 0;
}

/* ---- mismatch ------------------------------------------------------------------------------------------------ */

/* The last rank passes counts[0] + 1 where the others pass counts[0] (host counts, or device counts): every rank
 * stops with fcclInvalidUsage (ranks out of step) instead of moving blocks of sizes that do not match. */
static void mismatched(const struct collTestArgs* args, int rank, int nranks, int device) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 4 + device);
  EXPECT(comm != NULL);
  if (!comm) return;
  struct varContext ctx;
  const int ready = varContextInit(&ctx, args, comm, rank, nranks, 1u << 20, 0);
  EXPECT(ready);
  if (ready) {
    size_t counts[REF_MAX_RANKS];
    int64_t deviceCounts[REF_MAX_RANKS];
    for (int r = 0; r < nranks; r++) counts[r] = (size_t)(5 + 2 * r);
    if (rank == nranks - 1) counts[0] += 1;
    for (int r = 0; r < nranks; r++) deviceCounts[r] = (int64_t)counts[r];
    EXPECT_EQ_INT(cudaMemset(ctx.send[0].base, 0x3c, ctx.capacity + 2 * COLL_GUARD), cudaSuccess);
    EXPECT_EQ_INT(cudaMemcpy(ctx.devCounts, deviceCounts, (size_t)nranks * sizeof(int64_t), cudaMemcpyHostToDevice),
                  cudaSuccess);
    char* send = ctx.send[0].base + COLL_GUARD;
    char* recv = ctx.recv[0].base + COLL_GUARD;
    /* Every rank starts together, so that the wait measures the detection, not a late peer. */
    EXPECT_EQ_INT(fcclBarrier(comm, ctx.stream), fcclSuccess);
    EXPECT_EQ_INT(cudaStreamSynchronize(ctx.stream), cudaSuccess);
    const fcclResult_t res = device ? fcclAllGatherVDevice(send, recv, ctx.devCounts, 64, 64 * (size_t)nranks,
                                                           fcclFloat32, comm, ctx.stream)
                                    : fcclAllGatherV(send, recv, counts, fcclFloat32, comm, ctx.stream);
    EXPECT_EQ_INT(res, fcclSuccess);
    EXPECT_EQ_INT(pollStream(ctx.stream), 0);
    const fcclResult_t async = awaitAsyncError(comm);
    EXPECT_MSG(async == fcclInvalidUsage, "rank %d: %s counts that differ: asynchronous error %s (%s)", rank,
               device ? "device" : "host", fcclGetErrorString(async), fcclGetLastError(comm));
    EXPECT_STR_CONTAINS(fcclGetLastError(comm), "out of step");
  }
  varContextFini(&ctx);
  EXPECT_EQ_INT(device ? fcclCommAbort(comm) : fcclCommDestroy(comm), fcclSuccess);
}

int modeMismatch(int rank, int nranks, const struct collTestArgs* args) {
  mismatched(args, rank, nranks, 0);
  mismatched(args, rank, nranks, 1);
  return 0;
}

/* ---- SM budget ----------------------------------------------------------------------------------------------- */

#define BUDGET_MAX_CTAS 3

/* A communicator with the SM budget maxCtas (-1: none), as collCommCreate makes one. */
static fcclComm_t budgetComm(const struct collTestArgs* args, int rank, int nranks, int which, int maxCtas) {
  fcclUniqueId id;
  if (!collShareId(args->shared, rank, which, &id)) return NULL;
  if (cudaSetDevice(rank % args->gpus) != cudaSuccess) return NULL;
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = nranks > args->gpus;
  config.timeoutMs = 60000;
  config.maxCTAs = maxCtas;
  fcclComm_t comm = NULL;
  const fcclResult_t res = fcclCommInitRankConfig(&comm, nranks, id, rank, &config);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init with maxCTAs %d: %s", rank, maxCtas, fcclGetLastError(NULL));
  return res == fcclSuccess ? comm : NULL;
}

/* One call on ctx, checked, and the blocks it was launched with in *blocks; returns the number of problems. */
static int budgetRun(struct varContext* ctx, const struct varCase* c, int registered, uint64_t call, const char* what,
                     int* blocks) {
  struct varPlace p;
  varPlaceIn(ctx->send[registered].base, ctx->recv[registered].base, c, ctx->rank, ctx->nranks, &p);
  if (varUpload(ctx, c, &p, call, ctx->host, ctx->hostCounts, ctx->devCounts, ctx->stream) != 0) return 1;
  COLL_CHECK_FCCL(what, varInvoke(ctx, c, &p, ctx->devCounts, ctx->stream));
  int kernel = -1, threads = 0;
  fcclDeviceLastLaunchForTest(&kernel, blocks, &threads);
  const int want = (c->reduces ? fcclReduceScatterVAlgos : fcclAllGatherVAlgos).algos[c->form];
  EXPECT_MSG(kernel == want, "rank %d: %s: launched %s, expected %s", ctx->rank, what, fcclAlgoName(kernel),
             fcclAlgoName(want));
  COLL_CHECK_CUDA(what, cudaStreamSynchronize(ctx->stream));
  return varCheck(ctx, c, &p, call, -1, what);
}

/* The same calls on a communicator without a budget and on one with maxCTAs 3: every form of both collectives, host
 * and device counts, at sizes whose grid is larger than 3 blocks unbounded; bounded the grid is 3 blocks at most and
 * the results are as right (the host reference). */
int modeBudget(int rank, int nranks, const struct collTestArgs* args) {
  fcclComm_t comms[2] = {budgetComm(args, rank, nranks, 0, -1), budgetComm(args, rank, nranks, 1, BUDGET_MAX_CTAS)};
  if (!comms[0] || !comms[1]) return 1;
  struct varContext ctxs[2];
  int ready = 1;
  for (int b = 0; b < 2; b++) ready = varContextInit(&ctxs[b], args, comms[b], rank, nranks, 24u << 20, 1) && ready;
  EXPECT(ready);
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  uint64_t call = 0;
  int checked = 0;
  for (int reduces = 0; ready && reduces < 2; reduces++)
    for (int form = FCCL_MOVE_LL; form <= FCCL_MOVE_STAGED; form++)
      for (int device = 0; device < 2; device++) {
        struct varCase c;
        memset(&c, 0, sizeof(c));
        c.reduces = reduces;
        c.type = fcclFloat32;
        c.op = fcclSum;
        c.form = form;
        c.device = device;
        c.slack = device ? 5 : 0;
        /* Skewed: rank 0 the largest block (a full LL region, or 1 Mi floats), the others half of it. */
        const size_t largest = form == FCCL_MOVE_LL ? layout.llBytes / 4 - c.slack : (size_t)1 << 20;
        for (int r = 0; r < nranks; r++) c.counts[r] = r == 0 ? largest : largest / 2;
        const int registered = form == FCCL_MOVE_DIRECT;
        if (!moveFormApplicable(reduces ? MOVE_REDUCESCATTER : MOVE_ALLGATHER, form, nranks, (largest + c.slack) * 4,
                                registered))
          continue;
        char what[300], described[256];
        varDescribe(&c, nranks, described, sizeof(described));
        int blocks[2] = {0, 0};
        for (int b = 0; b < 2; b++) {
          snprintf(what, sizeof(what), "%s, %s", described, b ? "maxCTAs 3" : "no budget");
          EXPECT_EQ_INT(budgetRun(&ctxs[b], &c, registered, call++, what, &blocks[b]), 0);
        }
        EXPECT_MSG(blocks[0] > BUDGET_MAX_CTAS, "rank %d: %s: %d blocks without a budget: the case cannot show one",
                   rank, described, blocks[0]);
        EXPECT_MSG(blocks[1] >= 1 && blocks[1] <= BUDGET_MAX_CTAS, "rank %d: %s: %d blocks under maxCTAs %d", rank,
                   described, blocks[1], BUDGET_MAX_CTAS);
        checked++;
      }
  EXPECT_MSG(checked >= 8, "rank %d: only %d cases could run", rank, checked);
  for (int b = 0; b < 2; b++) {
    varContextFini(&ctxs[b]);
    EXPECT_EQ_INT(fcclCommDestroy(comms[b]), fcclSuccess);
  }
  return 0;
}

/* ---- NCCL path ----------------------------------------------------------------------------------------------- */

/* Host counts captured and replayed through NCCL's grouped calls; device counts refused in a capture and in a group
 * (NCCL needs them on the host), and read back outside. */
static void ncclCapture(struct varContext* ctx) {
  const int n = ctx->nranks;
  struct varCase c;
  memset(&c, 0, sizeof(c));
  c.type = fcclFloat32;
  c.op = fcclSum;
  c.form = VAR_AUTO;
  for (int r = 0; r < n; r++) c.counts[r] = r == 0 ? 0 : (size_t)(1000 * r + 7);
  for (int reduces = 0; reduces < 2; reduces++) {
    c.reduces = reduces;
    struct varPlace p;
    varPlaceIn(ctx->send[0].base, ctx->recv[0].base, &c, ctx->rank, n, &p);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    EXPECT_EQ_INT(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ_INT(varInvoke(ctx, &c, &p, ctx->devCounts, ctx->stream), fcclSuccess);
    EXPECT_EQ_INT(cudaStreamEndCapture(ctx->stream, &graph), cudaSuccess);
    EXPECT_EQ_INT(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int rep = 0; rep < 3 && exec; rep++) {
      const uint64_t call = 2000 + (uint64_t)(reduces * 10 + rep);
      EXPECT_EQ_INT(varUpload(ctx, &c, &p, call, ctx->host, ctx->hostCounts, ctx->devCounts, ctx->stream), 0);
      EXPECT_EQ_INT(cudaGraphLaunch(exec, ctx->stream), cudaSuccess);
      EXPECT_EQ_INT(pollStream(ctx->stream), 0);
      EXPECT_EQ_INT(varCheck(ctx, &c, &p, call, -1, "NCCL path, captured host counts"), 0);
    }
    if (exec) EXPECT_EQ_INT(cudaGraphExecDestroy(exec), cudaSuccess);
    if (graph) EXPECT_EQ_INT(cudaGraphDestroy(graph), cudaSuccess);
  }
  char* send = ctx->send[0].base + COLL_GUARD;
  char* recv = ctx->recv[0].base + COLL_GUARD;
  cudaGraph_t graph = NULL;
  EXPECT_EQ_INT(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  expectInvalid(fcclAllGatherVDevice(send, recv, ctx->devCounts, 16, 16 * (size_t)n, fcclFloat32, ctx->comm,
                                     ctx->stream),
                fcclInvalidUsage, "captured", "AGV device counts captured on NCCL");
  EXPECT_EQ_INT(cudaStreamEndCapture(ctx->stream, &graph), cudaSuccess);
  if (graph) EXPECT_EQ_INT(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ_INT(fcclGroupStart(), fcclSuccess);
  expectInvalid(fcclReduceScatterVDevice(send, recv, ctx->devCounts, 16 * (size_t)n, 16, fcclFloat32, fcclSum,
                                         ctx->comm, ctx->stream),
                fcclInvalidUsage, "group", "RSV device counts in a group on NCCL");
  EXPECT_EQ_INT(fcclGroupEnd(), fcclSuccess);
}

int modeNccl(int rank, int nranks, const struct collTestArgs* args) {
  /* Each rank its own NCCL host, so that NCCL takes ranks that share a GPU; NCCL on loopback sockets. */
  char host[96];
  snprintf(host, sizeof(host), "fccl-variable-%d-rank%d", (int)getppid(), rank);
  setenv("NCCL_HOSTID", host, 1);
  setenv("FCCL_PATH", "nccl", 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("NCCL_NET", "Socket", 0);
  fcclParamResetForTest();
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  EXPECT(comm != NULL);
  if (!comm) return 1;
  struct varContext ctx;
  const int ready = varContextInit(&ctx, args, comm, rank, nranks, 24u << 20, 0);
  EXPECT(ready);
  uint64_t calls = 0;
  if (ready) {
    EXPECT_MSG(ctx.ncclPath, "rank %d: the communicator is not on the NCCL path", rank);
    calls = varSweep(&ctx, 0, 0);
    EXPECT_MSG(calls > 10, "rank %d: only %llu calls ran", rank, (unsigned long long)calls);
    ncclCapture(&ctx);
    fcclResult_t async = fcclInternalError;
    EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
    EXPECT_EQ_INT(async, fcclSuccess);
  }
  varContextFini(&ctx);
  args->shared->flags[0] = (int)calls;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}
