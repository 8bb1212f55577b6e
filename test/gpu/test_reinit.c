/*
 * The user report's scenario through the public API, two processes (one GPU each; with one GPU they share it):
 *   report - FCCLTEST_ROUNDS rounds (1000) of: fcclCommInitRank again while the previous communicator lives, a
 *            flag exchange across the GPUs through the new communicator's slots, then fcclCommDestroy of the
 *            previous one. Every exchange completes; fcclCommGetMemStats' open mappings are equal after round 1
 *            and after the last round.
 *   cycles - FCCLTEST_CYCLES (10000) fcclCommInitRank/fcclCommDestroy cycles: open mappings back to zero, device
 *            memory (cudaMemGetInfo) back to where it was after the first cycle (the arena frees its chunks when
 *            the device's last communicator goes).
 *   two    - two communicators alive at once over the same GPUs, used alternately on two streams.
 * The flag exchange writes the last 64 bytes of each slot (staging space of the device layer, never its header).
 */
#include "test_ipc_common.h"
#include "transport.h"

#define NRANKS 2

struct testArgs {
  struct testShm* shm;
  int gpus;
  const char* mode;
};

struct rankCtx {
  struct testShmRank shmRank;
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
  if (testShmAllGather(&ctx->shmRank, ids, sizeof(ids[0])) != fcclSuccess) return fcclTimeout;
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.commName = name;
  config.allowSharedDevice = 1; /* one GPU: both processes on it */
  fcclResult_t res = fcclCommInitRankConfig(comm, ctx->nranks, ids[0], ctx->rank, &config);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init of %s failed: %s", ctx->rank, name, fcclGetLastError(NULL));
  if (res == fcclSuccess && fcclTransportPeerSlot(*comm, ctx->rank) == NULL) {
    EXPECT_MSG(0, "rank %d: fcclCommInitRank did not set up the transport (init.c's LAYER SETUP hook)", ctx->rank);
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

static uint64_t* flagWord(fcclComm_t comm, int owner, int writer) {
  char* slot = fcclTransportPeerSlot(comm, owner);
  return (uint64_t*)(slot + fcclTransportSlotBytes(comm) - 64) + writer;
}

/* Every rank writes value + rank into its word of every slot; after a barrier every owner finds them all. */
static int flagExchange(struct rankCtx* ctx, fcclComm_t comm, uint64_t value, cudaStream_t stream) {
  int ok = 1;
  static uint64_t* host;
  if (!host && cudaMallocHost((void**)&host, 64 * sizeof(uint64_t)) != cudaSuccess) return 0;
  host[0] = value + (uint64_t)ctx->rank;
  for (int p = 0; p < ctx->nranks; p++)
    ok &= cudaMemcpyAsync(flagWord(comm, p, ctx->rank), host, 8, cudaMemcpyHostToDevice, stream) == cudaSuccess;
  ok &= cudaStreamSynchronize(stream) == cudaSuccess;
  ok &= testShmBarrier(&ctx->shmRank) == fcclSuccess;
  ok &= cudaMemcpyAsync(host + 8, flagWord(comm, ctx->rank, 0), (size_t)ctx->nranks * 8, cudaMemcpyDeviceToHost,
                        stream) == cudaSuccess;
  ok &= cudaStreamSynchronize(stream) == cudaSuccess;
  for (int p = 0; p < ctx->nranks; p++) ok &= host[8 + p] == value + (uint64_t)p;
  ok &= testShmBarrier(&ctx->shmRank) == fcclSuccess;
  return ok;
}

static void testReport(struct rankCtx* ctx) {
  long rounds = testEnvLong("FCCLTEST_ROUNDS", 1000);
  fcclComm_t comms[2] = {NULL, NULL};
  if (create(ctx, &comms[0], "report-0") != fcclSuccess) return;
  int completed = flagExchange(ctx, comms[0], 1ull << 32, cudaStreamLegacy);
  fcclMemStats_t first = {0}, last = {0};
  long round = 1;
  for (; round <= rounds; round++) {
    fcclComm_t* next = &comms[round % 2];
    if (create(ctx, next, "report") != fcclSuccess) break; /* the previous one is still alive */
    if (!flagExchange(ctx, *next, ((uint64_t)round + 1) << 32, cudaStreamLegacy)) {
      EXPECT_MSG(0, "rank %d: the flag exchange of round %ld did not complete", ctx->rank, round);
      break;
    }
    completed++;
    if (round == 1) first = stats(*next);
    if (round == rounds) last = stats(*next);
    destroy(comms[(round - 1) % 2]);
    comms[(round - 1) % 2] = NULL;
  }
  EXPECT_EQ_INT(completed, rounds + 1);
  EXPECT_EQ_INT(first.openMappings, last.openMappings);
  EXPECT_EQ_INT(first.mappingReferences, last.mappingReferences);
  EXPECT_EQ_INT(last.totalOpens, first.totalOpens);
  printf("rank %d: %ld rounds of init without destroy: open mappings %llu after round 1, %llu after round %ld\n",
         ctx->rank, rounds, (unsigned long long)first.openMappings, (unsigned long long)last.openMappings, rounds);
  for (int i = 0; i < 2; i++)
    if (comms[i]) destroy(comms[i]);
  EXPECT_EQ_INT(stats(NULL).openMappings, 0);
}

static void testCycles(struct rankCtx* ctx) {
  long cycles = testEnvLong("FCCLTEST_CYCLES", 10000);
  fcclComm_t comm = NULL;
  size_t freeStart = 0, freeEnd = 0, total = 0;
  if (create(ctx, &comm, "cycle") != fcclSuccess) return;
  destroy(comm);
  EXPECT_EQ_INT(cudaMemGetInfo(&freeStart, &total), cudaSuccess);
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long done = 0;
  for (long cycle = 1; cycle <= cycles; cycle++) {
    if (create(ctx, &comm, "cycle") != fcclSuccess) break;
    if (cycle % 1000 == 0 && !flagExchange(ctx, comm, (uint64_t)cycle << 20, cudaStreamLegacy)) break;
    destroy(comm);
    done++;
  }
  EXPECT_EQ_INT(done, cycles);
  fcclMemStats_t after = stats(NULL);
  EXPECT_EQ_INT(after.openMappings, 0);
  EXPECT_EQ_INT(after.totalOpens, after.totalCloses);
  EXPECT_EQ_INT(cudaMemGetInfo(&freeEnd, &total), cudaSuccess);
  long long drift = (long long)freeStart - (long long)freeEnd;
  EXPECT_MSG(drift <= (2ll << 20), "rank %d: device memory in use grew by %lld bytes over %ld cycles", ctx->rank,
             drift, done);
  printf("rank %d: %ld init/destroy cycles in %.1f s: %llu mappings open, device memory drift %lld bytes\n",
         ctx->rank, done, testShmElapsedMs(&start) / 1000.0, (unsigned long long)after.openMappings, drift);
}

static void testTwo(struct rankCtx* ctx) {
  fcclComm_t a = NULL, b = NULL;
  if (create(ctx, &a, "two-a") != fcclSuccess) return;
  if (create(ctx, &b, "two-b") != fcclSuccess) {
    destroy(a);
    return;
  }
  EXPECT(fcclTransportSlotIndex(a) != fcclTransportSlotIndex(b));
  cudaStream_t streams[2];
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&streams[0], cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&streams[1], cudaStreamNonBlocking), cudaSuccess);
  int ok = 1;
  for (int i = 0; i < 200; i++) ok &= flagExchange(ctx, i % 2 ? b : a, (uint64_t)(i + 1) << 24, streams[i % 2]);
  /* Each communicator's words still hold its own last values: they never shared memory. */
  uint64_t seen[2] = {0, 0};
  EXPECT_EQ_INT(cudaMemcpy(&seen[0], flagWord(a, ctx->rank, 0), 8, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ_INT(cudaMemcpy(&seen[1], flagWord(b, ctx->rank, 0), 8, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ_INT(seen[0], (uint64_t)199 << 24);
  EXPECT_EQ_INT(seen[1], (uint64_t)200 << 24);
  EXPECT(ok);
  cudaStreamDestroy(streams[0]);
  cudaStreamDestroy(streams[1]);
  destroy(b);
  destroy(a);
}

static int rankMain(int rank, int nranks, void* argp) {
  struct testArgs* args = argp;
  struct rankCtx ctx = {.rank = rank, .nranks = nranks, .dev = rank % args->gpus};
  ctx.shmRank = (struct testShmRank){.shm = args->shm, .rank = rank};
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
  int gpus = testGpuCountInChild();
  if (gpus < 1) {
    printf("SKIP: needs a GPU\n");
    return TEST_SKIP;
  }
  struct testArgs args = {.shm = testShmCreate(NRANKS, 120000), .gpus = gpus, .mode = argc > 1 ? argv[1] : "all"};
  EXPECT(args.shm != NULL);
  if (!args.shm) return testSummary("reinit");
  int codes[NRANKS];
  EXPECT_EQ_INT(testForkRanks(NRANKS, rankMain, &args, (int)testEnvLong("FCCLTEST_TIMEOUT", 880), codes), 0);
  for (int r = 0; r < NRANKS; r++) EXPECT_MSG(codes[r] == 0, "rank %d exited with %d", r, codes[r]);
  testShmDestroy(args.shm);
  return testSummary("reinit");
}
