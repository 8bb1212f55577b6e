/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Re-initialisation through the public API, two processes (one GPU each; with one GPU they share it):
 *   report - FCCLTEST_ROUNDS rounds (1000) of: fcclCommInitRank again while the previous communicator lives
 *            (its fcclBarrier possibly still running), fcclBarrier across the GPUs on the new one, then
 *            fcclCommDestroy of the previous one: how an application replaces its communicator (what could hang
 *            it: docs/ipc.md#the-failures-this-rules-out). Every barrier completes; fcclCommGetMemStats' open
 *            mappings are equal after round 1 and after the last round, and nothing is mapped after round 1.
 *   cycles - FCCLTEST_CYCLES (10000) fcclCommInitRank/fcclCommDestroy cycles: open mappings back to zero, device
 *            memory (cudaMemGetInfo) back to where it was after the first cycle (the arena frees its chunks when
 *            the device's last communicator goes); a barrier every 100 cycles.
 *   two    - two communicators alive at once over the same GPUs, all-reduces alternating between them on two
 *            streams: both correct; the first allocated one slot's chunk, the second one more
 *            (fcclCommGetMemStats).
 */
#include "test_cycles.h"
#include "test_ipc_common.h"
#include "transport.h"

#define NRANKS 2

struct rankCtx {
  struct testShm* shm;
  int rank, nranks, dev;
};

/* Rank 0 makes the id, the others receive it through the shared page. */
static fcclResult_t create(struct rankCtx* ctx, fcclComm_t* comm, const char* name) {
  fcclUniqueId ids[NRANKS];
  memset(ids, 0, sizeof(ids));
  if (ctx->rank == 0) {
    fcclResult_t res = fcclGetUniqueId(&ids[0]);
    if (res != fcclSuccess) return res;
  }
  if (testShmAllGather(ctx->shm, ctx->rank, ids, sizeof(ids[0])) != TEST_SHM_OK) return fcclTimeout;
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.commName = name;
  config.allowSharedDevice = 1; /* one GPU: both processes on it */
  fcclResult_t res = fcclCommInitRankConfig(comm, ctx->nranks, ids[0], ctx->rank, &config);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init of %s failed: %s", ctx->rank, name, fcclGetLastError(NULL));
  if (res == fcclSuccess && fcclTransportPeerSlot((*comm)->transport, ctx->rank) == NULL) {
    EXPECT_MSG(0, "rank %d: fcclCommInitRank did not set up the transport (no slot of its own)", ctx->rank);
    (void)fcclCommDestroy(*comm);
    return fcclInternalError;
  }
  return res;
}

static void destroy(fcclComm_t comm) {
  fcclResult_t res = fcclCommDestroy(comm);
  EXPECT_MSG(res == fcclSuccess, "fcclCommDestroy failed: %s", fcclGetLastError(NULL));
}

static fcclMemStats_t stats(fcclComm_t comm) {
  fcclMemStats_t s;
  memset(&s, 0, sizeof(s));
  s.size = sizeof(s);
  EXPECT_EQ_INT(fcclCommGetMemStats(comm, &s), fcclSuccess);
  return s;
}

/* fcclBarrier on stream; with wait, also waits for it and checks that no kernel recorded an error. */
static int barrier(fcclComm_t comm, cudaStream_t stream, int wait) {
  fcclResult_t res = fcclBarrier(comm, stream);
  EXPECT_MSG(res == fcclSuccess, "fcclBarrier failed: %s", fcclGetLastError(NULL));
  if (res != fcclSuccess || !wait) return res == fcclSuccess;
  cudaError_t err = cudaStreamSynchronize(stream);
  EXPECT_MSG(err == cudaSuccess, "waiting for fcclBarrier: %s", cudaGetErrorString(err));
  fcclResult_t async = fcclInProgress;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_MSG(async == fcclSuccess, "a barrier kernel recorded %s: %s", fcclGetErrorString(async),
             fcclGetLastError(comm));
  return err == cudaSuccess && async == fcclSuccess;
}

/*
 * The barrier of round i-1 may still be running (not waited for) while round i creates the next
 * communicator; only then is it waited for, and the previous communicator destroyed after the new one's barrier
 * is enqueued. One rank is a little late every third round.
 */
static void testReport(struct rankCtx* ctx) {
  long rounds = testEnvLong("FCCLTEST_ROUNDS", 1000);
  fcclComm_t comms[2] = {NULL, NULL};
  cudaStream_t stream;
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  if (create(ctx, &comms[0], "report-0") != fcclSuccess) return;
  int completed = 0;
  int launched = barrier(comms[0], stream, 0);
  fcclMemStats_t first = {0}, last = {0};
  for (long round = 1; round <= rounds && launched; round++) {
    fcclComm_t* next = &comms[round % 2];
    fcclComm_t* prev = &comms[(round - 1) % 2];
    if (create(ctx, next, "report") != fcclSuccess) break; /* init again, the previous comm alive and busy */
    if (cudaStreamSynchronize(stream) != cudaSuccess) break;
    fcclResult_t async = fcclInProgress;
    if (fcclCommGetAsyncError(*prev, &async) != fcclSuccess || async != fcclSuccess) {
      EXPECT_MSG(0, "rank %d: the barrier of round %ld did not complete: %s", ctx->rank, round - 1,
                 fcclGetLastError(*prev));
      break;
    }
    completed++;
    if (ctx->rank == 1 && round % 3 == 0) usleep(300);
    launched = barrier(*next, stream, 0);
    if (round == 1) first = stats(*next);
    if (round == rounds) last = stats(*next);
    destroy(*prev);
    *prev = NULL;
  }
  if (launched && barrier(comms[rounds % 2], stream, 1)) completed++;
  EXPECT_EQ_INT(completed, rounds + 1);
  EXPECT_EQ_INT(first.openMappings, last.openMappings);
  EXPECT_EQ_INT(first.mappingReferences, last.mappingReferences);
  EXPECT_EQ_INT(last.totalOpens, first.totalOpens);
  EXPECT_EQ_INT(last.openMappings, 2 * (ctx->nranks - 1)); /* two communicators alive: each slot its own chunk */
  EXPECT_EQ_INT(last.arenaChunks, 2);
  printf("rank %d: %ld rounds of init without destroy, %d barriers completed: open mappings %llu after round 1, "
         "%llu after round %ld\n", ctx->rank, rounds, completed, (unsigned long long)first.openMappings,
         (unsigned long long)last.openMappings, rounds);
  for (int i = 0; i < 2; i++)
    if (comms[i]) destroy(comms[i]);
  cudaStreamDestroy(stream);
  EXPECT_EQ_INT(stats(NULL).openMappings, 0);
}

/* One cycle of testCycles: fcclCommInitRank and fcclCommDestroy; every 100 cycles the communicator also runs a
 * barrier, so that the cycles create communicators that work, not only ones that come and go. */
struct cycleCtx {
  struct rankCtx* rank;
  fcclComm_t comm;
};

static int cycleCreate(void* arg, long cycle) {
  struct cycleCtx* c = arg;
  (void)cycle;
  return create(c->rank, &c->comm, "cycle") == fcclSuccess;
}

static int cycleUse(void* arg, long cycle) {
  struct cycleCtx* c = arg;
  return cycle % 100 != 0 || barrier(c->comm, cudaStreamLegacy, 1);
}

static void cycleDestroy(void* arg, long cycle) {
  struct cycleCtx* c = arg;
  (void)cycle;
  destroy(c->comm);
  c->comm = NULL;
}

static void testCycles(struct rankCtx* ctx) {
  const struct testCycleOps ops = {"init/destroy", cycleCreate, cycleUse, cycleDestroy};
  struct cycleCtx cycle = {ctx, NULL};
  testCyclesRun(ctx->shm, ctx->rank, testEnvLong("FCCLTEST_CYCLES", 10000), 2ll << 20, &ops, &cycle, NULL);
}

/* Two communicators over the same GPUs, all-reduces alternating between them on two streams: both correct. */
static void testTwo(struct rankCtx* ctx) {
  fcclComm_t comms[2] = {NULL, NULL};
  if (create(ctx, &comms[0], "two-a") != fcclSuccess) return;
  /* A first communicator allocates the chunk of its one slot, and maps one chunk of each peer. */
  fcclMemStats_t first = stats(comms[0]);
  EXPECT_EQ_INT(first.arenaChunks, 1);
  EXPECT_EQ_INT(first.arenaBytes, first.commDeviceBytes);
  EXPECT_EQ_INT(first.commPeerBytes, (uint64_t)(ctx->nranks - 1) * first.commDeviceBytes);
  printf("rank %d: a first communicator of %d ranks: %.1f MiB of its own, %.1f MiB of its peers' mapped\n", ctx->rank,
         ctx->nranks, (double)first.commDeviceBytes / 1048576.0, (double)first.commPeerBytes / 1048576.0);
  if (create(ctx, &comms[1], "two-b") != fcclSuccess) {
    destroy(comms[0]);
    return;
  }
  EXPECT(fcclTransportSlotIndex(comms[0]->transport) != fcclTransportSlotIndex(comms[1]->transport));
  /* Each slot is a chunk of its own, allocated when its communicator came: what fcclCommGetMemStats reports. */
  fcclMemStats_t a = stats(comms[0]), b = stats(comms[1]);
  EXPECT_EQ_INT(a.commDeviceBytes, b.commDeviceBytes);
  EXPECT_EQ_INT(b.arenaChunks, 2);
  EXPECT_EQ_INT(b.arenaBytes, a.commDeviceBytes + b.commDeviceBytes);
  EXPECT_EQ_INT(b.openMappings, 2 * (ctx->nranks - 1));
  EXPECT_EQ_INT(b.bytesMapped, a.commPeerBytes + b.commPeerBytes);
  enum { COUNT = 70001 }; /* odd */
  cudaStream_t streams[2];
  int32_t* dev[2] = {NULL, NULL};
  int32_t* host = malloc(COUNT * sizeof(int32_t));
  for (int c = 0; c < 2; c++) {
    EXPECT_EQ_INT(cudaStreamCreateWithFlags(&streams[c], cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ_INT(cudaMalloc((void**)&dev[c], COUNT * sizeof(int32_t)), cudaSuccess);
  }
  int bad = 0;
  for (int iteration = 0; iteration < 100; iteration++) {
    int c = iteration % 2;
    /* element i of rank r: r * 1000003 + i * 7 + iteration * (c + 1); the sum over ranks is exact in int32 */
    for (int i = 0; i < COUNT; i++) host[i] = ctx->rank * 1000003 + i * 7 + iteration * (c + 1);
    bad += cudaMemcpyAsync(dev[c], host, COUNT * sizeof(int32_t), cudaMemcpyHostToDevice, streams[c]) != cudaSuccess;
    fcclResult_t res = fcclAllReduce(dev[c], dev[c], COUNT, fcclInt32, fcclSum, comms[c], streams[c]);
    EXPECT_MSG(res == fcclSuccess, "fcclAllReduce on comm %d: %s", c, fcclGetLastError(NULL));
    bad += cudaMemcpyAsync(host, dev[c], COUNT * sizeof(int32_t), cudaMemcpyDeviceToHost, streams[c]) != cudaSuccess;
    bad += cudaStreamSynchronize(streams[c]) != cudaSuccess;
    for (int i = 0; i < COUNT; i++) {
      int64_t expected = 0;
      for (int r = 0; r < ctx->nranks; r++) expected += r * 1000003 + i * 7 + iteration * (c + 1);
      bad += host[i] != (int32_t)expected;
    }
  }
  EXPECT_MSG(bad == 0, "rank %d: %d wrong elements with two live communicators", ctx->rank, bad);
  for (int c = 0; c < 2; c++) {
    fcclResult_t async = fcclInProgress;
    EXPECT_EQ_INT(fcclCommGetAsyncError(comms[c], &async), fcclSuccess);
    EXPECT_EQ_INT(async, fcclSuccess);
    cudaFree(dev[c]);
    cudaStreamDestroy(streams[c]);
  }
  free(host);
  destroy(comms[1]);
  destroy(comms[0]);
}

static int rankMain(int rank, int nranks, void* argp) {
  struct testIpcArgs* args = argp;
  struct rankCtx ctx = {.rank = rank, .nranks = nranks, .dev = rank % args->gpus};
  ctx.shm = args->shm;
  if (cudaSetDevice(ctx.dev) != cudaSuccess) {
    EXPECT_MSG(0, "rank %d: cudaSetDevice(%d) failed", rank, ctx.dev);
    return testSummary("reinit rank");
  }
  if (!strcmp(args->mode, "report") || !strcmp(args->mode, "all")) testReport(&ctx);
  if (!strcmp(args->mode, "two") || !strcmp(args->mode, "all")) testTwo(&ctx);
  if (!strcmp(args->mode, "cycles") || !strcmp(args->mode, "all")) testCycles(&ctx);
  char name[64];
  snprintf(name, sizeof(name), "reinit %s rank %d (device %d)", args->mode, rank, ctx.dev);
  return testSummary(name);
}

int main(int argc, char** argv) {
  return testIpcMain(argc, argv, "reinit", 120000, 880, rankMain);
}
