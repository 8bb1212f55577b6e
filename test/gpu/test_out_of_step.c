/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ranks out of step (docs/errors.md#out-of-step), forked ranks sharing one GPU (config.allowSharedDevice; exits 77
 * without a GPU). In each scenario the last rank makes a call that differs from the others' (or skips one), on a
 * communicator of its own; every rank then must see fcclInvalidUsage, through the stream (bounded polls, never a
 * blocking wait) and fcclCommGetAsyncError, well before FCCL_TIMEOUT (the suite sets 20 s; the bound here is 5 s),
 * with a message that names both ranks' calls and what differs; the next call on the communicator returns the
 * recorded error. The ranks then destroy (or abort, every other scenario) the communicator, create a fresh one and
 * run an all-reduce on random data, checked against the host reference (collRunCase).
 *
 *   argv[1]  rank count (2 or 3)       argv[2]  one scenario by name (default: all of them, in order)
 *
 * Scenarios: another count at an LL, LL128, one-shot and two-shot size; another datatype; another op; another
 * collective (all-reduce against all-gather); a broadcast with another root; a rank that skips a call (the calls
 * differ); registered buffers on some ranks and plain ones on the last (another algorithm); the fused all-reduce
 * + RMSNorm with another hidden size. And "skip_same": the last rank skips one of two identical calls, which no
 * print can tell apart: the others end in fcclTimeout (after FCCL_TIMEOUT) naming the last rank and the call.
 */
#include "algo.h"
#include "comm.h"
#include "device_state.h"
#include "enqueue.h"
#include "test_allreduce_common.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* FCCL_TIMEOUT of the suite (20 s) is far above this: a hang would show as a late error or a timeout. */
#define DETECT_BOUND_MS 5000
/* How long the ranks poll the stream at most (a hang ends in FCCL_TIMEOUT first). */
#define POLL_LIMIT_MS 60000
/* Buffers of every scenario: the largest call is the two-shot's 4 Mi floats (and an all-gather of 3 x 1000). */
#define CAPACITY ((size_t)20 << 20)

struct testArgs {
  struct collShared* shared;
  uint64_t seed;
  const char* only;
};

/* The calls of one scenario on one rank, and what every rank's message must say. */
struct scenario {
  const char* name;
  const char* difference; /* in every rank's message ("another count", ...) */
  int (*run)(struct collContext* ctx, int odd);
};

static float* sendOf(struct collContext* ctx) { return (float*)(ctx->send.base + COLL_GUARD); }
static float* recvOf(struct collContext* ctx) { return (float*)(ctx->recv.base + COLL_GUARD); }

/* The library's print of an all-reduce as fcclAllReduceAlgo with a forced algorithm makes it: the scenarios' two
 * calls must differ in it (a count-hash collision would make a scenario that cannot fail). */
static uint32_t allReducePrint(int algo, fcclDataType_t type, fcclRedOp_t op, size_t count) {
  return fcclPrintMake((uint32_t)algo, (uint32_t)type, (uint32_t)op, count);
}

static int allReduceCounts(struct collContext* ctx, int odd, int algo, size_t count, size_t other) {
  EXPECT(allReducePrint(algo, fcclFloat32, fcclSum, count) != allReducePrint(algo, fcclFloat32, fcclSum, other));
  return fcclAllReduceAlgo(sendOf(ctx), recvOf(ctx), odd ? other : count, fcclFloat32, fcclSum, ctx->comm,
                           ctx->stream, algo);
}

static int countLL(struct collContext* ctx, int odd) { return allReduceCounts(ctx, odd, FCCL_ALGO_LL, 1000, 1001); }
static int countLL128(struct collContext* ctx, int odd) {
  return allReduceCounts(ctx, odd, FCCL_ALGO_LL128, 30000, 30720);
}
static int countOneshot(struct collContext* ctx, int odd) {
  return allReduceCounts(ctx, odd, FCCL_ALGO_ONESHOT_PUSH, 65536, 65536 + 16);
}
static int countTwoshot(struct collContext* ctx, int odd) {
  return allReduceCounts(ctx, odd, FCCL_ALGO_TWOSHOT_STAGED, (size_t)4 << 20, ((size_t)4 << 20) - 4);
}

static int otherType(struct collContext* ctx, int odd) {
  return fcclAllReduceAlgo(sendOf(ctx), recvOf(ctx), 1000, odd ? fcclInt32 : fcclFloat32, fcclSum, ctx->comm,
                           ctx->stream, FCCL_ALGO_LL);
}

static int otherOp(struct collContext* ctx, int odd) {
  return fcclAllReduceAlgo(sendOf(ctx), recvOf(ctx), 65536, fcclFloat32, odd ? fcclMax : fcclSum, ctx->comm,
                           ctx->stream, FCCL_ALGO_ONESHOT_PUSH);
}

static int otherCollective(struct collContext* ctx, int odd) {
  if (odd) return fcclAllGather(sendOf(ctx), recvOf(ctx), 1000, fcclFloat32, ctx->comm, ctx->stream);
  return fcclAllReduce(sendOf(ctx), recvOf(ctx), 1000, fcclFloat32, fcclSum, ctx->comm, ctx->stream);
}

static int otherRoot(struct collContext* ctx, int odd) {
  return fcclBroadcast(sendOf(ctx), recvOf(ctx), 1000, fcclFloat32, odd ? 1 : 0, ctx->comm, ctx->stream);
}

/* The others make calls A and B, the last rank B only: it meets the others' A with its B. */
static int skipCall(struct collContext* ctx, int odd) {
  if (!odd) {
    fcclResult_t a = fcclAllReduce(sendOf(ctx), recvOf(ctx), 1000, fcclFloat32, fcclSum, ctx->comm, ctx->stream);
    if (a != fcclSuccess) return a;
  }
  fcclResult_t b = fcclAllReduce(sendOf(ctx), recvOf(ctx), 3000, fcclFloat32, fcclSum, ctx->comm, ctx->stream);
  /* B may already find A's failure recorded (the others' B is enqueued while A runs). */
  return !odd && b == fcclInvalidUsage ? fcclSuccess : b;
}

/* Registered buffers on every rank but the last, which passes plain ones: another algorithm at a size where the
 * registered choice (pull) and the plain one (push, staging) differ. */
static struct collBuffer regSend, regRecv;
static size_t regCount;

static int pickRegisteredCount(struct collContext* ctx) {
  const struct fcclDeviceState* s = ctx->comm->device;
  static const size_t counts[] = {16384, 65536, 262144, 1048576};
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
    const uint64_t bytes = counts[i] * sizeof(float);
    fcclAlgoChoice plain, reg;
    fcclAlgoQuery q = fcclAlgoQueryMake(bytes, ctx->nranks, 0, 0, s->smCount, &s->dev.layout, s->ll128Auto,
                                        s->copyScatterMin);
    if (fcclAlgoSelect(&q, &plain) != fcclSuccess) continue;
    q.registered = 1;
    if (fcclAlgoSelect(&q, &reg) != fcclSuccess) continue;
    if (plain.algo != reg.algo) return (int)i;
  }
  return -1;
}

static int otherRegistration(struct collContext* ctx, int odd) {
  if (odd) return fcclAllReduce(sendOf(ctx), recvOf(ctx), regCount, fcclFloat32, fcclSum, ctx->comm, ctx->stream);
  return fcclAllReduce(regSend.base + COLL_GUARD, regRecv.base + COLL_GUARD, regCount, fcclFloat32, fcclSum,
                       ctx->comm, ctx->stream);
}

/* bf16 rows of 4096 elements (2048 on the last rank), 8 tokens, residual and weight, plain buffers (staged). */
static int otherHidden(struct collContext* ctx, int odd) {
  const size_t tokens = 8, hidden = odd ? 2048 : 4096;
  char* base = ctx->send.base + COLL_GUARD;
  char* out = ctx->recv.base + COLL_GUARD;
  const size_t rowBytes = 4096 * 2;
  return fcclAllReduceAddRMSNorm(base, base + tokens * rowBytes, base + 2 * tokens * rowBytes, out, tokens, hidden,
                                 1e-6f, fcclBfloat16, fcclBfloat16, fcclScaleNone, NULL, ctx->comm, ctx->stream);
}

static const struct scenario kScenarios[] = {
    {"count_ll", "another count", countLL},
    {"count_ll128", "another count", countLL128},
    {"count_oneshot", "another count", countOneshot},
    {"count_twoshot", "another count", countTwoshot},
    {"datatype", "another datatype", otherType},
    {"op", "another op", otherOp},
    {"collective", "another collective", otherCollective},
    {"root", "another root", otherRoot},
    {"skip", "count", skipCall},
    {"registration", "another algorithm", otherRegistration},
    {"fused_hidden", "another token count or hidden size", otherHidden},
};
#define SCENARIOS ((int)(sizeof(kScenarios) / sizeof(kScenarios[0])))
/* The scenario without a print to tell the calls apart, after the others (ids: 2 per scenario). */
#define SKIP_SAME SCENARIOS

static long elapsedMs(const struct timespec* since) { return testElapsedMs(since); }

/* Polls the stream (1 ms sleeps) until its work ended or POLL_LIMIT_MS passed; returns the elapsed ms, or -1. */
static long pollStream(cudaStream_t stream, const struct timespec* since) {
  for (;;) {
    cudaError_t e = cudaStreamQuery(stream);
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return elapsedMs(since);
    }
    if (elapsedMs(since) > POLL_LIMIT_MS) return -1;
    usleep(1000);
  }
}

/* A fresh communicator after the failed one: a correct all-reduce on random data, checked. */
static int freshAllReduce(const struct testArgs* args, int rank, int nranks, int which) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, 1, which);
  if (!comm) return 1;
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, 1u << 20, 0)) return 1;
  struct collCase c = {fcclFloat32, fcclSum, -1, 0, 12345, 4, 8};
  int problems = collRunCase(&ctx, &c, (uint64_t)which);
  struct collCase ll = {fcclBfloat16, fcclMax, FCCL_ALGO_LL, 1, 777, 2, 2};
  problems += collRunCase(&ctx, &ll, (uint64_t)which + 1000);
  collContextFini(&ctx);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return problems;
}

/* Checks this rank's report of the scenario's failure: code, bound, message; then the next call's answer. */
static void checkReport(struct collContext* ctx, const struct scenario* sc, const struct timespec* since) {
  const int rank = ctx->rank;
  const long ms = pollStream(ctx->stream, since);
  EXPECT_MSG(ms >= 0 && ms < DETECT_BOUND_MS, "rank %d: %s: the stream ended after %ld ms (bound %d ms)", rank,
             sc->name, ms, DETECT_BOUND_MS);
  fcclResult_t async = fcclSuccess;
  EXPECT_EQ_INT(fcclCommGetAsyncError(ctx->comm, &async), fcclSuccess);
  EXPECT_MSG(async == fcclInvalidUsage, "rank %d: %s: asynchronous error %s (%s), expected fcclInvalidUsage", rank,
             sc->name, fcclGetErrorString(async), fcclGetLastError(ctx->comm));
  const char* text = fcclGetLastError(ctx->comm);
  char mine[64];
  snprintf(mine, sizeof(mine), "rank %d's call ", rank);
  EXPECT_STR_CONTAINS(text, "ranks out of step");
  EXPECT_STR_CONTAINS(text, mine);
  EXPECT_STR_CONTAINS(text, "does not match rank ");
  EXPECT_STR_CONTAINS(text, sc->difference);
  /* The peer named is another rank, and its call is described as ours is. */
  const char* peer = strstr(text, "does not match rank ");
  if (peer) {
    const int other = atoi(peer + strlen("does not match rank "));
    EXPECT_MSG(other != rank && other >= 0 && other < ctx->nranks, "rank %d: %s: peer %d named: %s", rank, sc->name,
               other, text);
  }
  if (collVerbose()) printf("rank %d: %s: %ld ms: %s\n", rank, sc->name, ms, text);
  /* The next call returns the recorded error without launching anything. */
  EXPECT_EQ_INT(fcclAllReduce(sendOf(ctx), recvOf(ctx), 10, fcclFloat32, fcclSum, ctx->comm, ctx->stream),
                fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "failed earlier");
}

static int runScenario(const struct testArgs* args, int rank, int nranks, int index) {
  const struct scenario* sc = &kScenarios[index];
  const int odd = rank == nranks - 1;
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, 1, 2 * index);
  if (!comm) return 1;
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, CAPACITY, 0)) return 1;
  /* Inputs are never checked here (the calls must fail); they are set so that nothing reads undefined bytes. */
  EXPECT_EQ_INT(cudaMemset(ctx.send.base, 0x3c, CAPACITY + 2 * COLL_GUARD), cudaSuccess);
  int registered = 0;
  if (sc->run == otherRegistration) {
    const int pick = pickRegisteredCount(&ctx);
    EXPECT_MSG(pick >= 0, "rank %d: no size where registered and plain buffers choose different algorithms", rank);
    static const size_t counts[] = {16384, 65536, 262144, 1048576};
    regCount = pick >= 0 ? counts[pick] : 0;
    registered = collBufferCreate(comm, &regSend, CAPACITY, 1) && collBufferCreate(comm, &regRecv, CAPACITY, 1);
    EXPECT(registered);
    if (!registered || pick < 0) return 1;
    EXPECT_EQ_INT(cudaMemset(regSend.base, 0x3c, CAPACITY + 2 * COLL_GUARD), cudaSuccess);
  }
  EXPECT_EQ_INT(cudaDeviceSynchronize(), cudaSuccess);
  /* Every rank starts its calls together, so that the bound measures the detection, not a late peer's init. */
  EXPECT_EQ_INT(fcclBarrier(comm, ctx.stream), fcclSuccess);
  EXPECT_EQ_INT(cudaStreamSynchronize(ctx.stream), cudaSuccess);

  struct timespec since;
  clock_gettime(CLOCK_MONOTONIC, &since);
  EXPECT_EQ_INT(sc->run(&ctx, odd), fcclSuccess);
  checkReport(&ctx, sc, &since);

  /* A failed communicator: destroyed, or aborted every other scenario; its registrations go with it (the context's
   * own buffers are plain: freeing them calls nothing on the communicator). */
  collContextFini(&ctx);
  EXPECT_EQ_INT(index % 2 ? fcclCommAbort(comm) : fcclCommDestroy(comm), fcclSuccess);
  if (registered) {
    EXPECT_EQ_INT(fcclMemFree(regSend.base), fcclSuccess);
    EXPECT_EQ_INT(fcclMemFree(regRecv.base), fcclSuccess);
  }
  return freshAllReduce(args, rank, nranks, 2 * index + 1);
}

/* Two identical calls, the second skipped by the last rank: the others time out naming it and call 3 (the barrier
 * before them is call 1). The last rank waits for the others' verdict before it destroys its communicator. */
static int runSkipSame(const struct testArgs* args, int rank, int nranks) {
  const int odd = rank == nranks - 1;
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, 1, 2 * SKIP_SAME);
  if (!comm) return 1;
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, 1u << 20, 0)) return 1;
  EXPECT_EQ_INT(cudaMemset(ctx.send.base, 0x3c, (1u << 20) + 2 * COLL_GUARD), cudaSuccess);
  EXPECT_EQ_INT(fcclBarrier(comm, ctx.stream), fcclSuccess);
  EXPECT_EQ_INT(cudaStreamSynchronize(ctx.stream), cudaSuccess);
  struct timespec since;
  clock_gettime(CLOCK_MONOTONIC, &since);
  for (int i = 0; i < (odd ? 1 : 2); i++)
    EXPECT_EQ_INT(fcclAllReduce(sendOf(&ctx), recvOf(&ctx), 1000, fcclFloat32, fcclSum, comm, ctx.stream),
                  fcclSuccess);
  volatile int* verdicts = &args->shared->flags[1];
  if (!odd) {
    const long ms = pollStream(ctx.stream, &since);
    EXPECT_MSG(ms >= 0, "rank %d: skip_same: the stream did not end within %d ms", rank, POLL_LIMIT_MS);
    fcclResult_t async = fcclSuccess;
    EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
    EXPECT_EQ_INT(async, fcclTimeout);
    const char* text = fcclGetLastError(comm);
    char missing[64];
    snprintf(missing, sizeof(missing), "rank %d did not arrive", nranks - 1);
    EXPECT_STR_CONTAINS(text, missing);
    EXPECT_STR_CONTAINS(text, "of call 3 (all-reduce, float32, sum, algorithm");
    if (collVerbose()) printf("rank %d: skip_same: %ld ms: %s\n", rank, ms, text);
    __atomic_add_fetch(verdicts, 1, __ATOMIC_SEQ_CST);
  } else {
    EXPECT_EQ_INT(cudaStreamSynchronize(ctx.stream), cudaSuccess);
    fcclResult_t async = fcclInternalError;
    EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
    EXPECT_EQ_INT(async, fcclSuccess);
    /* Bounded: the others' timeout (FCCL_TIMEOUT) plus POLL_LIMIT_MS. */
    struct timespec waitStart;
    clock_gettime(CLOCK_MONOTONIC, &waitStart);
    while (__atomic_load_n(verdicts, __ATOMIC_SEQ_CST) < nranks - 1 && elapsedMs(&waitStart) < 2 * POLL_LIMIT_MS)
      usleep(10000);
    EXPECT_EQ_INT(__atomic_load_n(verdicts, __ATOMIC_SEQ_CST), nranks - 1);
  }
  collContextFini(&ctx);
  /* Every rank aborts: the last one's communicator works, but its peers' failed. */
  EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
  return freshAllReduce(args, rank, nranks, 2 * SKIP_SAME + 1);
}

static int rankMain(int rank, int nranks, void* arg) {
  const struct testArgs* args = arg;
  int problems = 0;
  for (int i = 0; i < SCENARIOS && testFailed == 0; i++)
    if (!args->only || strcmp(args->only, kScenarios[i].name) == 0) problems += runScenario(args, rank, nranks, i);
  if (testFailed == 0 && (!args->only || strcmp(args->only, "skip_same") == 0))
    problems += runSkipSame(args, rank, nranks);
  EXPECT_EQ_INT(problems, 0);
  return testSummary("out_of_step rank");
}

int main(int argc, char** argv) {
  const int nranks = argc > 1 ? atoi(argv[1]) : 2;
  struct testArgs args = {NULL, 0, argc > 2 ? argv[2] : NULL};
  int known = args.only == NULL || strcmp(args.only, "skip_same") == 0;
  for (int i = 0; i < SCENARIOS; i++) known |= args.only != NULL && strcmp(args.only, kScenarios[i].name) == 0;
  if (nranks < 2 || nranks > 3 || !known) {
    fprintf(stderr, "usage: %s 2|3 [scenario]\n", argv[0]);
    return 2;
  }
  if (testGpuCount() < 1) {
    printf("SKIP: no GPU\n");
    return TEST_SKIP;
  }
  args.seed = testSeed();
  args.shared = collSharedNew(nranks);
  printf("out_of_step: %d ranks on one GPU%s%s\n", nranks, args.only ? ", scenario " : "",
         args.only ? args.only : "");
  int codes[REF_MAX_RANKS];
  const int failed = testShmForkRanks(args.shared->shm, rankMain, &args, 540, codes);
  for (int r = 0; r < nranks; r++)
    if (codes[r] != 0) testFail(__FILE__, __LINE__, "rank %d exited with %d", r, codes[r]);
  EXPECT_EQ_INT(failed, 0);
  collSharedFree(args.shared);
  return testSummary("out_of_step");
}
