/* SPDX-License-Identifier: Apache-2.0 */
/* Shared machinery of the collective GPU tests: see test_allreduce_common.h. */
#include "test_allreduce_common.h"

#include "algo.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"
#include "param.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct collShared* collSharedNew(int nranks) {
  struct testShm* shm = testShmCreate(nranks, 0, sizeof(struct collShared), 60000);
  if (!shm) exit(1);
  struct collShared* shared = testShmUser(shm);
  shared->shm = shm;
  return shared;
}

void collSharedFree(struct collShared* shared) { testShmDestroy(shared->shm); }

int collQuick(void) {
  const char* v = getenv("FCCLTEST_QUICK");
  return v && *v && strcmp(v, "0") != 0;
}

int collVerbose(void) {
  const char* v = getenv("FCCLTEST_VERBOSE");
  return v && *v && strcmp(v, "0") != 0;
}

int64_t collNowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int collShareId(struct collShared* shared, int rank, int which, fcclUniqueId* id) {
  if (which < 0 || which >= COLL_MAX_IDS) return 0;
  if (rank == 0) {
    if (fcclGetUniqueId(id) != fcclSuccess) {
      fprintf(stderr, "fcclGetUniqueId failed: %s\n", fcclGetLastError(NULL));
      return 0;
    }
    shared->ids[which] = *id;
    testShmPost(&shared->idReady[which], 1);
    return 1;
  }
  char what[48];
  snprintf(what, sizeof(what), "rank %d: unique id %d", rank, which);
  if (testShmWait(shared->shm, &shared->idReady[which], 1, 60000, what) != TEST_SHM_OK) return 0;
  *id = shared->ids[which];
  return 1;
}

fcclComm_t collCommCreate(struct collShared* shared, int rank, int nranks, int gpus, int which) {
  fcclUniqueId id;
  if (!collShareId(shared, rank, which, &id)) return NULL;
  if (cudaSetDevice(rank % gpus) != cudaSuccess) {
    fprintf(stderr, "rank %d: cudaSetDevice(%d) failed\n", rank, rank % gpus);
    return NULL;
  }
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = nranks > gpus;
  config.timeoutMs = 60000;
  config.commName = "coll-test";
  fcclComm_t comm = NULL;
  fcclResult_t res = fcclCommInitRankConfig(&comm, nranks, id, rank, &config);
  if (res != fcclSuccess) {
    fprintf(stderr, "rank %d: fcclCommInitRankConfig: %s: %s\n", rank, fcclGetErrorString(res),
            fcclGetLastError(NULL));
    return NULL;
  }
  return comm;
}

int collBufferCreate(fcclComm_t comm, struct collBuffer* b, size_t capacity, int registered) {
  memset(b, 0, sizeof(*b));
  b->capacity = capacity;
  const size_t total = capacity + 2 * COLL_GUARD;
  if (registered) {
    fcclResult_t res = fcclMemAlloc((void**)&b->base, total);
    if (res == fcclSuccess) res = fcclCommRegister(comm, b->base, total, &b->handle);
    if (res != fcclSuccess) {
      fprintf(stderr, "registered buffer of %zu bytes: %s: %s\n", total, fcclGetErrorString(res),
              fcclGetLastError(NULL));
      return 0;
    }
    b->registered = 1;
    return 1;
  }
  if (cudaMalloc((void**)&b->base, total) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc of %zu bytes failed\n", total);
    return 0;
  }
  return 1;
}

void collBufferDestroy(fcclComm_t comm, struct collBuffer* b) {
  if (!b->base) return;
  if (b->registered) {
    EXPECT_EQ_INT(fcclCommDeregister(comm, b->handle), fcclSuccess);
    EXPECT_EQ_INT(fcclMemFree(b->base), fcclSuccess);
  } else {
    EXPECT_EQ_INT(cudaFree(b->base), cudaSuccess);
  }
  b->base = NULL;
}

int collContextInit(struct collContext* ctx, struct collShared* shared, fcclComm_t comm, int rank, int nranks,
                    uint64_t seed, size_t capacity, int registered) {
  memset(ctx, 0, sizeof(*ctx));
  ctx->shared = shared;
  ctx->comm = comm;
  ctx->rank = rank;
  ctx->nranks = nranks;
  ctx->seed = seed;
  if (cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking) != cudaSuccess) return 0;
  if (!collBufferCreate(comm, &ctx->send, capacity, registered)) return 0;
  if (!collBufferCreate(comm, &ctx->recv, capacity, registered)) return 0;
  ctx->hostBytes = capacity + 2 * COLL_GUARD;
  if (cudaMallocHost(&ctx->hostIn, ctx->hostBytes) != cudaSuccess) return 0;
  if (cudaMallocHost(&ctx->hostOut, ctx->hostBytes) != cudaSuccess) return 0;
  return 1;
}

void collContextFini(struct collContext* ctx) {
  if (ctx->stream) EXPECT_EQ_INT(cudaStreamSynchronize(ctx->stream), cudaSuccess);
  collBufferDestroy(ctx->comm, &ctx->send);
  collBufferDestroy(ctx->comm, &ctx->recv);
  if (ctx->hostIn) cudaFreeHost(ctx->hostIn);
  if (ctx->hostOut) cudaFreeHost(ctx->hostOut);
  if (ctx->stream) cudaStreamDestroy(ctx->stream);
  memset(ctx, 0, sizeof(*ctx));
}

static int guardsIntact(const unsigned char* before, const unsigned char* after) {
  for (int i = 0; i < COLL_GUARD; i++)
    if (before[i] != COLL_POISON || after[i] != COLL_POISON) return 0;
  return 1;
}

int collRunCase(struct collContext* ctx, const struct collCase* c, uint64_t call) {
  const size_t size = fcclTypeSize(c->type);
  const size_t bytes = c->count * size;
  const size_t recvOffset = c->inPlace ? c->sendOffset : c->recvOffset;
  if (c->sendOffset + bytes > ctx->send.capacity || recvOffset + bytes > ctx->recv.capacity) {
    testFail(__FILE__, __LINE__, "case of %zu bytes does not fit the test buffers", bytes);
    return 1;
  }
  char what[160];
  snprintf(what, sizeof(what), "call %llu: %s %s x %zu, %s, %s, offsets %zu/%zu",
           (unsigned long long)call, refTypeName(c->type), refOpName(c->op), c->count,
           c->algo < 0 ? "auto" : fcclAlgoName(c->algo), c->inPlace ? "in place" : "out of place", c->sendOffset,
           recvOffset);
  if (collVerbose()) fprintf(stderr, "rank %d: %s\n", ctx->rank, what);
  struct collBuffer* out = c->inPlace ? &ctx->send : &ctx->recv;
  char* sendRegion = ctx->send.base + COLL_GUARD + c->sendOffset;
  char* recvRegion = out->base + COLL_GUARD + recvOffset;

  COLL_CHECK_CUDA("case",
                  cudaMemsetAsync(ctx->send.base, COLL_POISON, ctx->send.capacity + 2 * COLL_GUARD, ctx->stream));
  if (!c->inPlace)
    COLL_CHECK_CUDA("case",
                    cudaMemsetAsync(ctx->recv.base, COLL_POISON, ctx->recv.capacity + 2 * COLL_GUARD, ctx->stream));
  refFillInput(c->type, ctx->seed, call, ctx->rank, 0, ctx->hostIn, c->count);
  COLL_CHECK_CUDA("case", cudaMemcpyAsync(sendRegion, ctx->hostIn, bytes, cudaMemcpyHostToDevice, ctx->stream));

  fcclResult_t res = fcclAllReduceAlgo(sendRegion, recvRegion, c->count, c->type, c->op, ctx->comm, ctx->stream,
                                       c->algo);
  if (res != fcclSuccess) {
    testFail(__FILE__, __LINE__, "rank %d: %s: fcclAllReduce returned %s: %s", ctx->rank, what,
             fcclGetErrorString(res), fcclGetLastError(NULL));
    return 1;
  }
  COLL_CHECK_CUDA("case", cudaStreamSynchronize(ctx->stream));
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(ctx->comm, &async), fcclSuccess);
  if (async != fcclSuccess) {
    testFail(__FILE__, __LINE__, "rank %d: %s: async error %s: %s", ctx->rank, what, fcclGetErrorString(async),
             fcclGetLastError(ctx->comm));
    return 1;
  }

  int problems = 0;
  unsigned char* host = ctx->hostOut;
  COLL_CHECK_CUDA("case", cudaMemcpy(host, recvRegion - COLL_GUARD, bytes + 2 * COLL_GUARD, cudaMemcpyDeviceToHost));
  if (!guardsIntact(host, host + COLL_GUARD + bytes)) {
    testFail(__FILE__, __LINE__, "rank %d: %s: bytes next to the output were overwritten", ctx->rank, what);
    problems++;
  }
  char message[512];
  size_t bad = refCheckBuffer(c->type, c->op, ctx->seed, call, ctx->nranks, host + COLL_GUARD, c->count, message,
                              sizeof(message));
  if (bad) {
    testFail(__FILE__, __LINE__, "rank %d: %s: %zu of %zu elements wrong: %s", ctx->rank, what, bad, c->count,
             message);
    problems++;
  } else {
    testPassed++;
  }
  if (call < COLL_MAX_HASHES) ctx->shared->hashes[call][ctx->rank] = refHash(host + COLL_GUARD, bytes) | 1;
  if (!c->inPlace) {
    COLL_CHECK_CUDA("case", cudaMemcpy(host, sendRegion - COLL_GUARD, bytes + 2 * COLL_GUARD, cudaMemcpyDeviceToHost));
    if (memcmp(host + COLL_GUARD, ctx->hostIn, bytes) != 0 || !guardsIntact(host, host + COLL_GUARD + bytes)) {
      testFail(__FILE__, __LINE__, "rank %d: %s: the input buffer (or its guards) changed", ctx->rank, what);
      problems++;
    }
  }
  return problems;
}

int collCompareHashes(const struct collShared* shared, int nranks, uint64_t calls) {
  int differ = 0;
  for (uint64_t c = 0; c < calls && c < COLL_MAX_HASHES; c++) {
    uint64_t first = 0;
    for (int r = 0; r < nranks; r++) {
      uint64_t h = shared->hashes[c][r];
      if (!h) continue;
      if (!first) first = h;
      if (h != first) {
        if (differ < 5) fprintf(stderr, "call %llu: rank %d's output differs bitwise from rank 0's\n",
                                (unsigned long long)c, r);
        differ++;
        break;
      }
    }
  }
  return differ;
}

/* The query a call of these arguments makes, under the environment's FCCL_STAGING_BYTES, FCCL_LL128 and
 * FCCL_COPY_SCATTER_MIN, with algo forced (-1: the automatic choice). */
static fcclAlgoQuery caseQuery(int algo, int nranks, size_t bytes, int registered, int inPlace) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  fcclAlgoQuery q = fcclAlgoQueryMake(bytes, nranks, registered, inPlace, 132, &layout, fcclDeviceLL128Auto(),
                                       fcclDeviceCopyScatterMin());
  q.forced = algo;
  return q;
}

int collAlgoApplicable(int algo, int nranks, size_t bytes, int registered, int inPlace) {
  if (algo < 0) return 1;
  if (bytes == 0) return 1;
  fcclAlgoQuery q = caseQuery(algo, nranks, bytes, registered, inPlace);
  return fcclAlgoApplicable((fcclDevKernel_t)algo, &q, NULL);
}

int collScatterOf(int algo, int nranks, size_t bytes, int registered, int inPlace) {
  if (bytes == 0) return FCCL_SCATTER_PULL;
  fcclAlgoQuery q = caseQuery(algo, nranks, bytes, registered, inPlace);
  fcclAlgoChoice choice;
  if (fcclAlgoSelect(&q, &choice) != fcclSuccess || choice.algo != FCCL_ALGO_TWOSHOT_REG) return FCCL_SCATTER_PULL;
  return choice.scatter;
}

int collReplayMain(int argc, char** argv, const char* name, int (*rankMain)(int rank, int nranks, void* arg),
                   int timeoutSeconds) {
  int nranks = argc > 1 ? atoi(argv[1]) : 2;
  if (nranks < 2 || nranks > REF_MAX_RANKS) {
    fprintf(stderr, "usage: %s [nranks 2..%d]\n", argv[0], REF_MAX_RANKS);
    return 2;
  }
  struct collReplayArgs args = {collSharedNew(nranks), testSeed(), testGpuCount()};
  if (args.gpus < 1) {
    printf("SKIP: no GPU\n");
    return TEST_SKIP;
  }
  int codes[REF_MAX_RANKS];
  int failed = testShmForkRanks(args.shared->shm, rankMain, &args, timeoutSeconds, codes);
  EXPECT_EQ_INT(failed, 0);
  int differ = collCompareHashes(args.shared, nranks, (uint64_t)args.shared->flags[0]);
  EXPECT_MSG(differ == 0, "%d calls gave different bits on different ranks", differ);
  collSharedFree(args.shared);
  return testSummary(name);
}

int collTestMain(const char* name, struct collTestArgs* args, int nranks,
                 int (*rankMain)(int rank, int nranks, void* arg), int timeoutSeconds, const char* calls) {
  args->gpus = testGpuCount();
  if (args->gpus < 1) {
    printf("SKIP: no GPU\n");
    return TEST_SKIP;
  }
  args->seed = testSeed();
  args->shared = collSharedNew(nranks);
  printf("%s %s: %d ranks on %d GPU(s)%s\n", name, args->mode, nranks, args->gpus, collQuick() ? " (quick)" : "");
  int codes[REF_MAX_RANKS];
  const int failed = testShmForkRanks(args->shared->shm, rankMain, args, timeoutSeconds, codes);
  for (int r = 0; r < nranks; r++)
    if (codes[r] != 0) testFail(__FILE__, __LINE__, "rank %d exited with %d", r, codes[r]);
  if (calls) {
    const int differ = collCompareHashes(args->shared, nranks, (uint64_t)args->shared->flags[0]);
    EXPECT_MSG(differ == 0, "%d %s gave different bits on different ranks", differ, calls);
  }
  EXPECT_EQ_INT(failed, 0);
  collSharedFree(args->shared);
  return testSummary(name);
}

int collRankSummary(const char* name, const char* mode, int rank, int code) {
  char summary[64];
  snprintf(summary, sizeof(summary), "%s %s rank %d", name, mode, rank);
  return testSummary(summary) != 0 || code != 0;
}

void collForeignCreate(struct collForeign* foreign, int gpus, size_t bytes) {
  foreign->current = -1;
  foreign->buffer = NULL;
  foreign->stream = NULL;
  EXPECT_EQ_INT(cudaGetDevice(&foreign->current), cudaSuccess);
  foreign->other = (foreign->current + 1) % gpus;
  EXPECT_EQ_INT(cudaSetDevice(foreign->other), cudaSuccess);
  EXPECT_EQ_INT(cudaMalloc(&foreign->buffer, bytes), cudaSuccess);
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&foreign->stream, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ_INT(cudaSetDevice(foreign->current), cudaSuccess);
}

void collForeignFree(struct collForeign* foreign) {
  int now = -1;
  EXPECT_EQ_INT(cudaGetDevice(&now), cudaSuccess);
  EXPECT_EQ_INT(now, foreign->current);
  EXPECT_EQ_INT(cudaSetDevice(foreign->other), cudaSuccess);
  EXPECT_EQ_INT(cudaStreamDestroy(foreign->stream), cudaSuccess);
  EXPECT_EQ_INT(cudaFree(foreign->buffer), cudaSuccess);
  EXPECT_EQ_INT(cudaSetDevice(foreign->current), cudaSuccess);
}
