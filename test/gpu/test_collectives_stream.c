/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The all-gather, reduce-scatter and broadcast test (test_collectives.c): calls in sequence on one stream. compose:
 * a reduce-scatter then an all-gather give bit for bit what fcclAllReduce gives; mixed: thousands of collectives of
 * every kind back to back without a host synchronisation, a sample checked at the end.
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

/* ---- compose --------------------------------------------------------------------------------------------------- */

struct composeCase {
  fcclDataType_t type;
  fcclRedOp_t op;
  size_t count; /* each rank's block: the all-reduce runs nranks x count */
  int rsForm;   /* MOVE_AUTO or forced */
  int agForm;
  int arAlgo;    /* -1 or an all-reduce algorithm */
  int rsInPlace; /* the reduce-scatter in place in the input, the all-gather out of place from there; else the
                  * reduce-scatter into the gathered output, the all-gather in place */
};

/* The all-reduce of the input, then its reduce-scatter and the all-gather of the result, on one stream. The gathered
 * bytes must equal the all-reduce's on every rank (and the all-reduce must be right). */
static int composeRun(struct collContext* ctx, const struct composeCase* k, uint64_t call) {
  const int rank = ctx->rank, nranks = ctx->nranks;
  const size_t size = fcclTypeSize(k->type);
  const size_t total = (size_t)nranks * k->count;
  const size_t bytes = total * size, block = k->count * size;
  const size_t offset = (size_t)(call % 3) * size; /* the same on every rank: registered buffers at equal offsets */
  char what[192];
  snprintf(what, sizeof(what), "call %llu: %s %s x %zu per rank, reduce-scatter %s%s, all-gather %s, all-reduce %s",
           (unsigned long long)call, refTypeName(k->type), refOpName(k->op), k->count, moveFormName(k->rsForm),
           k->rsInPlace ? " in place" : "", moveFormName(k->agForm), k->arAlgo < 0 ? "auto" : fcclAlgoName(k->arAlgo));
  if (collVerbose()) fprintf(stderr, "rank %d: %s\n", rank, what);
  char* input = ctx->send.base + COLL_GUARD + offset;
  char* reduced = ctx->recv.base + COLL_GUARD + offset;
  char* gathered = reduced + alignUp(bytes, 4096) + 256;
  if (offset + bytes > ctx->send.capacity || (size_t)(gathered + bytes - ctx->recv.base) > ctx->recv.capacity) {
    testFail(__FILE__, __LINE__, "%s: does not fit the test buffers", what);
    return 1;
  }
  COLL_CHECK_CUDA(what, cudaMemsetAsync(ctx->send.base, COLL_POISON, ctx->send.capacity + 2 * COLL_GUARD, ctx->stream));
  COLL_CHECK_CUDA(what, cudaMemsetAsync(ctx->recv.base, COLL_POISON, ctx->recv.capacity + 2 * COLL_GUARD, ctx->stream));
  refFillInput(k->type, ctx->seed, call, rank, 0, ctx->hostIn, total);
  COLL_CHECK_CUDA(what, cudaMemcpyAsync(input, ctx->hostIn, bytes, cudaMemcpyHostToDevice, ctx->stream));
  const int rsAlgo = moveAlgo(MOVE_REDUCESCATTER, k->rsForm);
  const int agAlgo = moveAlgo(MOVE_ALLGATHER, k->agForm);
  COLL_CHECK_FCCL(what, fcclAllReduceAlgo(input, reduced, total, k->type, k->op, ctx->comm, ctx->stream, k->arAlgo));
  char* mine = k->rsInPlace ? input + (size_t)rank * block : gathered + (size_t)rank * block;
  COLL_CHECK_FCCL(what, fcclReduceScatterAlgo(input, mine, k->count, k->type, k->op, ctx->comm, ctx->stream, rsAlgo));
  COLL_CHECK_FCCL(what, fcclAllGatherAlgo(mine, gathered, k->count, k->type, ctx->comm, ctx->stream, agAlgo));
  COLL_CHECK_CUDA(what, cudaStreamSynchronize(ctx->stream));
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(ctx->comm, &async), fcclSuccess);
  if (async != fcclSuccess) {
    testFail(__FILE__, __LINE__, "rank %d: %s: async error %s: %s", rank, what, fcclGetErrorString(async),
             fcclGetLastError(ctx->comm));
    return 1;
  }
  unsigned char* host = ctx->hostOut;
  COLL_CHECK_CUDA(what, cudaMemcpy(host, reduced, bytes, cudaMemcpyDeviceToHost));
  COLL_CHECK_CUDA(what, cudaMemcpy(host + bytes, gathered, bytes, cudaMemcpyDeviceToHost));
  int problems = 0;
  char message[512];
  const size_t wrong = refCheckBuffer(k->type, k->op, ctx->seed, call, nranks, host, total, message, sizeof(message));
  if (wrong) {
    testFail(__FILE__, __LINE__, "rank %d: %s: the all-reduce has %zu of %zu elements wrong: %s", rank, what, wrong,
             total, message);
    problems++;
  }
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < total; i++) {
    if (refLoadBits(k->type, host, i) != refLoadBits(k->type, host + bytes, i) && differ++ == 0) first = i;
  }
  if (differ) {
    char a[64], b[64];
    testFail(__FILE__, __LINE__,
             "rank %d: %s: %zu of %zu elements differ from the all-reduce's bits, first [%zu]: "
             "%s after reduce-scatter + all-gather, %s from the all-reduce",
             rank, what, differ, total, first,
             refFormat(k->type, refLoadBits(k->type, host + bytes, first), a, sizeof(a)),
             refFormat(k->type, refLoadBits(k->type, host, first), b, sizeof(b)));
    problems++;
  } else {
    testPassed++;
  }
  if (call < COLL_MAX_HASHES) ctx->shared->hashes[call][rank] = refHash(host + bytes, bytes) | 1;
  return problems;
}

int modeCompose(int rank, int nranks, const struct collTestArgs* args) {
  static const fcclDataType_t types[] = {fcclFloat32, fcclBfloat16, fcclFloat16, fcclFloat64,
                                         fcclInt32,   fcclInt8,     fcclUint64};
  static const size_t allCounts[] = {1, 3, 1000, 4099, 100003, (1u << 20) + 5};
  static const size_t quickCounts[] = {1, 1000, 100003};
  const size_t* counts = collQuick() ? quickCounts : allCounts;
  const int ncounts = collQuick() ? 3 : 6;
  const int ntypes = (int)(sizeof(types) / sizeof(types[0]));
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  const size_t largest = (size_t)nranks * largestCount(counts, ncounts) * 8;
  const size_t capacity = 2 * alignUp(largest, 4096) + 8192;
  uint64_t call = 0;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, capacity, registered)) {
      testFail(__FILE__, __LINE__, "rank %d: context setup failed", rank);
      break;
    }
    int problems = 0;
    for (int t = 0; t < ntypes; t++) {
      for (int n = 0; n < ncounts; n++) {
        for (int v = 0; v < 2; v++) {
          struct composeCase k;
          k.type = types[t];
          k.op = (fcclRedOp_t)((t + 2 * n + 3 * v) % fcclNumOps); /* every op for every type over the counts */
          k.count = counts[n];
          const size_t block = k.count * fcclTypeSize(k.type);
          k.rsForm = kForms[(t + n + v) % FORMS];
          k.agForm = kForms[(t + 2 * n + 3 * v + 1) % FORMS];
          if (!moveFormApplicable(MOVE_REDUCESCATTER, k.rsForm, nranks, block, registered)) k.rsForm = MOVE_AUTO;
          if (!moveFormApplicable(MOVE_ALLGATHER, k.agForm, nranks, block, registered)) k.agForm = MOVE_AUTO;
          /* Every third case against the two-shot all-reduce, itself a reduce-scatter and an all-gather. */
          k.arAlgo = (t + n + v) % 3 == 0 ? (registered ? FCCL_ALGO_TWOSHOT_REG : FCCL_ALGO_TWOSHOT_STAGED) : -1;
          if (!collAlgoApplicable(k.arAlgo, nranks, (size_t)nranks * block, registered, 0)) k.arAlgo = -1;
          k.rsInPlace = (n + v) % 2;
          problems += composeRun(&ctx, &k, call++);
        }
      }
    }
    if (rank == 0)
      printf("%s buffers: %llu cases so far, %d problems on rank 0\n", registered ? "registered" : "plain",
             (unsigned long long)call, problems);
    collContextFini(&ctx);
  }
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- mixed ----------------------------------------------------------------------------------------------------- */

enum {
  MIXED_ALLGATHER = MOVE_ALLGATHER,
  MIXED_REDUCESCATTER = MOVE_REDUCESCATTER,
  MIXED_BROADCAST = MOVE_BROADCAST,
  MIXED_ALLREDUCE,
  MIXED_BARRIER,
  MIXED_KINDS
};
#define MIXED_TYPES 4
static const fcclDataType_t kMixedTypes[MIXED_TYPES] = {fcclFloat32, fcclBfloat16, fcclInt8, fcclFloat64};
static const size_t kMixedCounts[] = {1, 7, 1000, 4099, 33001, 70001};
#define MIXED_COUNTS ((int)(sizeof(kMixedCounts) / sizeof(kMixedCounts[0])))
#define MIXED_MAX_COUNT 70001
#define MIXED_POOL_CALL 4000000u /* the input "call" of type t's pool: MIXED_POOL_CALL + t */

/* Call i of the sequence: a pure function of i and the rank count, the same on every rank. */
struct mixedCall {
  int what; /* MIXED_* */
  int registered;
  int t;             /* kMixedTypes index */
  struct moveCase c; /* for an all-reduce: a reduce-scatter case of count (checked as rank 0's block) */
  size_t poolFirst;  /* elements into the type's input pool where sendbuf starts */
  int sample;        /* checked at the end: its own output region, after the previous sample's of its kind */
};

static uint64_t mixHash(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static size_t mixedRecvBytes(const struct mixedCall* m, int nranks) {
  if (m->what == MIXED_BARRIER) return 0;
  const size_t elems = m->what == MIXED_ALLREDUCE ? m->c.count : moveRecvElems(m->c.kind, m->c.count, nranks);
  return elems * fcclTypeSize(m->c.type);
}

static void mixedPlan(uint64_t i, int nranks, int sampleEvery, struct mixedCall* m) {
  const uint64_t h = mixHash(i);
  memset(m, 0, sizeof(*m));
  m->what = (int)(h % MIXED_KINDS);
  m->registered = (int)((h >> 8) & 1);
  m->t = (int)((h >> 12) % MIXED_TYPES);
  m->c.kind = m->what == MIXED_ALLREDUCE ? MOVE_REDUCESCATTER : m->what;
  m->c.type = kMixedTypes[m->t];
  m->c.count = kMixedCounts[(h >> 16) % MIXED_COUNTS];
  m->c.form = kForms[(h >> 20) % FORMS];
  m->c.root = (int)((h >> 24) % (uint64_t)nranks);
  m->c.op = (fcclRedOp_t)((h >> 28) % fcclNumOps);
  m->c.nullSend = (int)((h >> 36) & 1);
  m->poolFirst = (size_t)((h >> 40) % 61);
  if (m->what == MIXED_ALLREDUCE ||
      !moveFormApplicable(m->c.kind, m->c.form, nranks, m->c.count * fcclTypeSize(m->c.type), m->registered))
    m->c.form = MOVE_AUTO;
  m->sample = m->what != MIXED_BARRIER && i % (uint64_t)sampleEvery == (uint64_t)sampleEvery - 1;
}

int modeMixed(int rank, int nranks, const struct collTestArgs* args) {
  const int iterations = collQuick() ? 1000 : 10000;
  const int sampleEvery = collQuick() ? 10 : 20;
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  /* Plan: where every sample's output goes, one region with guards after another, per buffer kind. */
  size_t sampleBytes[2] = {COLL_GUARD, COLL_GUARD}, samples = 0;
  for (int i = 0; i < iterations; i++) {
    struct mixedCall m;
    mixedPlan((uint64_t)i, nranks, sampleEvery, &m);
    if (!m.sample) continue;
    sampleBytes[m.registered] += alignUp(mixedRecvBytes(&m, nranks), 256) + COLL_GUARD;
    samples++;
  }
  /* Input pools (one per type, every call's sendbuf lies in it, never written) and a scratch output. */
  const size_t poolElems = (size_t)nranks * MIXED_MAX_COUNT + 64;
  size_t poolOffset[MIXED_TYPES], poolBytes = 0;
  for (int t = 0; t < MIXED_TYPES; t++) {
    poolOffset[t] = poolBytes;
    poolBytes += alignUp(poolElems * fcclTypeSize(kMixedTypes[t]), 4096);
  }
  const size_t scratchBytes = (size_t)nranks * MIXED_MAX_COUNT * 8 + 64;
  struct collBuffer pool[2], scratch[2], out[2];
  for (int r = 0; r < 2; r++)
    if (!collBufferCreate(comm, &pool[r], poolBytes, r) || !collBufferCreate(comm, &scratch[r], scratchBytes, r) ||
        !collBufferCreate(comm, &out[r], sampleBytes[r], r))
      return 1;
  void* hostPool = NULL;
  void* host = NULL; /* the pools read back */
  EXPECT_EQ_INT(cudaMallocHost(&hostPool, poolBytes), cudaSuccess);
  EXPECT_EQ_INT(cudaMallocHost(&host, poolBytes), cudaSuccess);
  if (testFailed) return 1;
  for (int t = 0; t < MIXED_TYPES; t++)
    refFillInput(kMixedTypes[t], args->seed, MIXED_POOL_CALL + (uint64_t)t, rank, 0, (char*)hostPool + poolOffset[t],
                 poolElems);
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ_INT(cudaMemcpy(pool[r].base + COLL_GUARD, hostPool, poolBytes, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ_INT(cudaMemset(out[r].base, COLL_POISON, out[r].capacity + 2 * COLL_GUARD), cudaSuccess);
  }
  cudaStream_t stream;
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);

  /* The sequence, without a host synchronisation. */
  size_t cursor[2] = {COLL_GUARD, COLL_GUARD};
  int made = 0;
  const int64_t start = collNowNs();
  for (int i = 0; i < iterations; i++) {
    struct mixedCall m;
    mixedPlan((uint64_t)i, nranks, sampleEvery, &m);
    fcclResult_t res;
    if (m.what == MIXED_BARRIER) {
      res = fcclBarrier(comm, stream);
    } else {
      const size_t size = fcclTypeSize(m.c.type);
      char* sendbuf = pool[m.registered].base + COLL_GUARD + poolOffset[m.t] + m.poolFirst * size;
      char* recvbuf = scratch[m.registered].base + COLL_GUARD;
      if (m.sample) {
        recvbuf = out[m.registered].base + COLL_GUARD + cursor[m.registered];
        cursor[m.registered] += alignUp(mixedRecvBytes(&m, nranks), 256) + COLL_GUARD;
      }
      if (m.what == MIXED_ALLREDUCE)
        res = fcclAllReduce(sendbuf, recvbuf, m.c.count, m.c.type, m.c.op, comm, stream);
      else
        res = moveCall(&m.c, m.what == MIXED_BROADCAST && m.c.nullSend && rank != m.c.root ? NULL : sendbuf, recvbuf,
                       comm, stream);
    }
    if (res != fcclSuccess) {
      testFail(__FILE__, __LINE__, "rank %d: call %d (kind %d): %s: %s", rank, i, m.what, fcclGetErrorString(res),
               fcclGetLastError(NULL));
      break;
    }
    made++;
  }
  const int64_t enqueued = collNowNs();
  EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
  if (rank == 0)
    printf("%d calls (%zu checked): enqueued in %.1f ms, done in %.1f ms\n", made, samples,
           (double)(enqueued - start) / 1e6, (double)(collNowNs() - start) / 1e6);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);

  /* The samples, in order; the pools unchanged. */
  int wrongCalls = 0;
  uint64_t sample = 0;
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ_INT(cudaMemcpy(host, pool[r].base + COLL_GUARD, poolBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_MSG(memcmp(host, hostPool, poolBytes) == 0, "rank %d: an input pool (%s) changed", rank,
               r ? "registered" : "plain");
  }
  unsigned char* hosts[2] = {NULL, NULL};
  EXPECT_EQ_INT(cudaMallocHost((void**)&hosts[0], out[0].capacity + 2 * COLL_GUARD), cudaSuccess);
  EXPECT_EQ_INT(cudaMallocHost((void**)&hosts[1], out[1].capacity + 2 * COLL_GUARD), cudaSuccess);
  for (int r = 0; r < 2 && hosts[r]; r++)
    EXPECT_EQ_INT(cudaMemcpy(hosts[r], out[r].base, out[r].capacity + 2 * COLL_GUARD, cudaMemcpyDeviceToHost),
                  cudaSuccess);
  size_t at[2] = {COLL_GUARD, COLL_GUARD};
  for (int i = 0; i < made && hosts[0] && hosts[1]; i++) {
    struct mixedCall m;
    mixedPlan((uint64_t)i, nranks, sampleEvery, &m);
    if (!m.sample) continue;
    const size_t bytes = mixedRecvBytes(&m, nranks);
    const unsigned char* got = hosts[m.registered] + COLL_GUARD + at[m.registered];
    at[m.registered] += alignUp(bytes, 256) + COLL_GUARD;
    int guards = 1;
    for (int g = 0; g < COLL_GUARD; g++) guards &= got[-1 - g] == COLL_POISON && got[bytes + (size_t)g] == COLL_POISON;
    char message[512];
    const size_t wrong = moveCheckOutput(&m.c, args->seed, MIXED_POOL_CALL + (uint64_t)m.t, m.poolFirst,
                                         m.what == MIXED_ALLREDUCE ? 0 : rank, nranks, got, message, sizeof(message));
    if ((wrong || !guards) && wrongCalls++ < 5) {
      char what[192];
      moveDescribe(&m.c, (uint64_t)i, what, sizeof(what));
      testFail(__FILE__, __LINE__, "rank %d: %s%s (%s buffers): %zu wrong%s: %s", rank,
               m.what == MIXED_ALLREDUCE ? "all-reduce, as " : "", what, m.registered ? "registered" : "plain", wrong,
               guards ? "" : ", bytes next to it overwritten", message);
    }
    if (m.what != MIXED_REDUCESCATTER && sample < COLL_MAX_HASHES)
      args->shared->hashes[sample][rank] = refHash(got, bytes) | 1;
    sample++;
  }
  EXPECT_EQ_INT(wrongCalls, 0);
  args->shared->flags[0] = (int)sample;

  cudaFreeHost(hosts[0]);
  cudaFreeHost(hosts[1]);
  cudaFreeHost(hostPool);
  cudaFreeHost(host);
  EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
  for (int r = 0; r < 2; r++) {
    collBufferDestroy(comm, &pool[r]);
    collBufferDestroy(comm, &scratch[r]);
    collBufferDestroy(comm, &out[r]);
  }
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}
