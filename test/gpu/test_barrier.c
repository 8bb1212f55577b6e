/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclBarrier and the bounded waits of every collective kernel, on forked ranks (exits 77 without a GPU).
 *   order [n]    work after the barrier on any rank's stream starts only after every rank's stream reached it
 *                (a slow rank's stream holds a 50 ms host function before its barrier; timestamps compared)
 *   stress [n]   10,000 all-reduces back to back on one stream without host synchronisation, every algorithm in
 *                turn, interleaved with barriers; all 10,000 outputs checked at the end (FCCLTEST_QUICK: 1,000)
 *   timeout      rank 1 never joins: rank 0's barrier, LL, LL128 and two-shot kernels give up after FCCL_TIMEOUT
 *                (set to 300 ms here), record fcclTimeout, fcclCommGetAsyncError reports it, later calls return it
 *   abort        rank 1 never joins: fcclCommAbort on rank 0 stops its waiting barrier, LL and LL128 kernels at once
 * Both also run the all-gather's copy form (registered buffers, every rank registers them): rank 0's opening
 * barrier kernel gives up (timeout) or stops (abort), and the copies and the closing barrier behind it end too.
 */
#include "algo.h"
#include "enqueue.h"
#include "test_allreduce_common.h"

#include <unistd.h>

struct barrierArgs {
  const char* mode;
  struct collShared* shared;
  uint64_t seed;
  int gpus;
};

#define ORDER_ROUNDS 8

struct stamp {
  struct collShared* shared;
  int row;
  int rank;
  int sleepMs;
};

static void CUDART_CB stampHost(void* arg) {
  const struct stamp* s = arg;
  if (s->sleepMs) usleep((useconds_t)s->sleepMs * 1000);
  s->shared->stamps[s->row][s->rank] = collNowNs();
}

static int modeOrder(int rank, int nranks, const struct barrierArgs* args) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  cudaStream_t stream;
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const int rounds = collQuick() ? 3 : ORDER_ROUNDS;
  static struct stamp before[ORDER_ROUNDS], after[ORDER_ROUNDS];
  for (int round = 0; round < rounds; round++) {
    const int slow = round % nranks;
    if (rank == slow) {
      before[round] = (struct stamp){args->shared, ORDER_ROUNDS + round, rank, 50};
      EXPECT_EQ_INT(cudaLaunchHostFunc(stream, stampHost, &before[round]), cudaSuccess);
    }
    EXPECT_EQ_INT(fcclBarrier(comm, stream), fcclSuccess);
    after[round] = (struct stamp){args->shared, round, rank, 0};
    EXPECT_EQ_INT(cudaLaunchHostFunc(stream, stampHost, &after[round]), cudaSuccess);
  }
  EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
  args->shared->flags[1] = rounds;
  EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

static void checkOrder(const struct collShared* shared, int nranks) {
  for (int round = 0; round < shared->flags[1]; round++) {
    const int slow = round % nranks;
    const int64_t released = shared->stamps[ORDER_ROUNDS + round][slow];
    for (int r = 0; r < nranks; r++)
      EXPECT_MSG(shared->stamps[round][r] >= released,
                 "round %d: rank %d ran past the barrier %.3f ms before slow rank %d reached it", round, r,
                 (double)(released - shared->stamps[round][r]) / 1e6, slow);
  }
}

static int modeStress(int rank, int nranks, const struct barrierArgs* args) {
  const int iterations = collQuick() ? 1000 : 10000;
  const size_t count = 512, slices = 16;
  const size_t bytes = count * sizeof(float);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct collBuffer send, recv;
  if (!collBufferCreate(comm, &send, slices * bytes, 1) ||
      !collBufferCreate(comm, &recv, (size_t)iterations * bytes, 1))
    return 1;
  float* host = NULL;
  EXPECT_EQ_INT(cudaMallocHost((void**)&host, (size_t)iterations * bytes), cudaSuccess);
  for (size_t k = 0; k < slices; k++) refFillInput(fcclFloat32, args->seed, k, rank, 0, host + k * count, count);
  char* in = send.base + COLL_GUARD;
  char* out = recv.base + COLL_GUARD;
  EXPECT_EQ_INT(cudaMemcpy(in, host, slices * bytes, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ_INT(cudaMemset(out, COLL_POISON, (size_t)iterations * bytes), cudaSuccess);
  cudaStream_t stream;
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  static const int algos[] = {FCCL_ALGO_LL,          FCCL_ALGO_ONESHOT_PUSH, FCCL_ALGO_TWOSHOT_STAGED,
                              FCCL_ALGO_ONESHOT_PULL, FCCL_ALGO_TWOSHOT_REG,  FCCL_ALGO_LL128,
                              -1};
  const int nalgos = (int)(sizeof(algos) / sizeof(algos[0]));
  const int64_t start = collNowNs();
  for (int i = 0; i < iterations; i++) {
    fcclResult_t res = fcclAllReduceAlgo(in + (size_t)(i % (int)slices) * bytes, out + (size_t)i * bytes, count,
                                         fcclFloat32, fcclSum, comm, stream, algos[i % nalgos]);
    if (res != fcclSuccess) {
      testFail(__FILE__, __LINE__, "rank %d: call %d: %s: %s", rank, i, fcclGetErrorString(res),
               fcclGetLastError(NULL));
      break;
    }
    if (i % 2 == 0) EXPECT_EQ_INT(fcclBarrier(comm, stream), fcclSuccess);
  }
  const int64_t enqueued = collNowNs();
  EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
  if (rank == 0)
    printf("%d all-reduces + %d barriers: enqueued in %.1f ms, done in %.1f ms\n", iterations, iterations / 2,
           (double)(enqueued - start) / 1e6, (double)(collNowNs() - start) / 1e6);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  EXPECT_EQ_INT(cudaMemcpy(host, out, (size_t)iterations * bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  int wrongCalls = 0;
  for (int i = 0; i < iterations; i++) {
    char message[256];
    const float* got = host + (size_t)i * count;
    size_t wrong = refCheckBuffer(fcclFloat32, fcclSum, args->seed, (uint64_t)(i % (int)slices), nranks, got, count,
                                  message, sizeof(message));
    if (wrong && wrongCalls++ < 5)
      testFail(__FILE__, __LINE__, "rank %d: call %d (%s): %zu wrong: %s", rank, i,
               algos[i % nalgos] < 0 ? "auto" : fcclAlgoName(algos[i % nalgos]), wrong, message);
    args->shared->hashes[i][rank] = refHash(got, bytes) | 1;
  }
  EXPECT_EQ_INT(wrongCalls, 0);
  args->shared->flags[0] = iterations;
  cudaFreeHost(host);
  EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
  collBufferDestroy(comm, &send);
  collBufferDestroy(comm, &recv);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* Waits (bounded) until shared->flags[index] is set by rank 0. */
static void waitFlag(struct collShared* shared, int index) {
  char what[48];
  snprintf(what, sizeof(what), "the end of scenario %d", index);
  const int result = testShmWait(shared->shm, &shared->flags[index], 1, 120000, what);
  EXPECT_MSG(result == TEST_SHM_OK, "rank 0 never finished scenario %d (%s)", index, testShmResultName(result));
}

/* One scenario of the timeout mode: rank 0 calls `what` alone and must see fcclTimeout, promptly. */
static void timeoutScenario(int rank, int nranks, const struct barrierArgs* args, int which, int algo) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, which);
  if (!comm) {
    testFail(__FILE__, __LINE__, "rank %d: no communicator", rank);
    return;
  }
  if (rank == 0) {
    struct collBuffer buffer;
    EXPECT(collBufferCreate(comm, &buffer, 1u << 20, 0));
    cudaStream_t stream;
    EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    float* data = (float*)(buffer.base + COLL_GUARD);
    const int64_t start = collNowNs();
    if (algo == FCCL_KERNEL_BARRIER)
      EXPECT_EQ_INT(fcclBarrier(comm, stream), fcclSuccess);
    else
      EXPECT_EQ_INT(fcclAllReduceAlgo(data, data, algo == FCCL_ALGO_LL ? 1000 : 100000, fcclFloat32, fcclSum, comm,
                                      stream, algo),
                    fcclSuccess);
    EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess); /* the kernel ends: it gave up */
    const double seconds = (double)(collNowNs() - start) / 1e9;
    EXPECT_MSG(seconds < 20, "the %s kernel took %.1f s to give up (FCCL_TIMEOUT=300 ms)", fcclAlgoName(algo),
               seconds);
    fcclResult_t async = fcclSuccess;
    EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
    EXPECT_EQ_INT(async, fcclTimeout);
    const char* text = fcclGetLastError(comm);
    EXPECT_STR_CONTAINS(text, fcclAlgoName(algo));
    EXPECT_STR_CONTAINS(text, "rank 1 did not arrive");
    printf("scenario %d (%s): gave up after %.2f s: %s\n", which, fcclAlgoName(algo), seconds, text);
    /* Later calls return the error and launch nothing. */
    EXPECT_EQ_INT(fcclAllReduce(data, data, 10, fcclFloat32, fcclSum, comm, stream), fcclTimeout);
    EXPECT_EQ_INT(fcclBarrier(comm, stream), fcclTimeout);
    EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
    collBufferDestroy(comm, &buffer);
    testShmPost(&args->shared->flags[which], 1);
  } else {
    waitFlag(args->shared, which);
  }
  /* A broken communicator: local teardown only. */
  EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
}

/* The all-gather's copy form with rank 1 absent: rank 0 enqueues a barrier kernel, the copies into the peers'
 * registered outputs and a closing barrier; the first barrier gives up after FCCL_TIMEOUT (abortIt 0) or stops on
 * fcclCommAbort (abortIt 1), the copies still run (they write mapped memory, which cannot hang), the closing
 * barrier leaves at once on the recorded error or the abort flag. */
static void copyScenario(int rank, int nranks, const struct barrierArgs* args, int which, int abortIt) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, which);
  if (!comm) {
    testFail(__FILE__, __LINE__, "rank %d: no communicator", rank);
    return;
  }
  const size_t count = 100000;
  struct collBuffer buffer;
  if (!collBufferCreate(comm, &buffer, (size_t)nranks * count * sizeof(float), 1)) {
    testFail(__FILE__, __LINE__, "rank %d: no registered buffer", rank);
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    return;
  }
  const char* what = abortIt ? "abort" : "timeout";
  if (rank == 0) {
    cudaStream_t stream;
    EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    float* out = (float*)(buffer.base + COLL_GUARD); /* in place: rank 0's block starts the output */
    int64_t start = collNowNs();
    EXPECT_EQ_INT(fcclAllGatherAlgo(out, out, count, fcclFloat32, comm, stream, FCCL_FORM_ALLGATHER_COPY), fcclSuccess);
    if (abortIt) {
      usleep(200000);
      EXPECT_EQ_INT(cudaStreamQuery(stream), cudaErrorNotReady); /* still waiting for rank 1 */
      start = collNowNs();
      EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    }
    EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
    const double seconds = (double)(collNowNs() - start) / 1e9;
    EXPECT_MSG(seconds < (abortIt ? 5 : 20), "the all-gather's copy form took %.2f s to end (%s)", seconds, what);
    if (!abortIt) {
      fcclResult_t async = fcclSuccess;
      EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
      EXPECT_EQ_INT(async, fcclTimeout);
      const char* text = fcclGetLastError(comm);
      EXPECT_STR_CONTAINS(text, fcclAlgoName(FCCL_KERNEL_BARRIER));
      EXPECT_STR_CONTAINS(text, "rank 1 did not arrive");
      EXPECT_EQ_INT(fcclAllGather(out, out, count, fcclFloat32, comm, stream), fcclTimeout);
      EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
    }
    printf("scenario %d (allgather_copy, %s): ended after %.3f s\n", which, what, seconds);
    EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
    testShmPost(&args->shared->flags[which], 1);
    if (!abortIt) EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
  } else {
    waitFlag(args->shared, which);
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
  }
  /* The aborted communicator released its registration; the memory is the test's. */
  EXPECT_EQ_INT(fcclMemFree(buffer.base), fcclSuccess);
}

static int modeTimeout(int rank, int nranks, const struct barrierArgs* args) {
  timeoutScenario(rank, nranks, args, 1, FCCL_KERNEL_BARRIER);
  timeoutScenario(rank, nranks, args, 2, FCCL_ALGO_LL);
  timeoutScenario(rank, nranks, args, 3, FCCL_ALGO_TWOSHOT_STAGED);
  timeoutScenario(rank, nranks, args, 4, FCCL_ALGO_LL128);
  copyScenario(rank, nranks, args, 5, 0);
  return 0;
}

static void abortScenario(int rank, int nranks, const struct barrierArgs* args, int which, int algo) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, which);
  if (!comm) {
    testFail(__FILE__, __LINE__, "rank %d: no communicator", rank);
    return;
  }
  if (rank == 0) {
    float* data = NULL;
    EXPECT_EQ_INT(cudaMalloc((void**)&data, 1u << 20), cudaSuccess);
    cudaStream_t stream;
    EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    if (algo == FCCL_KERNEL_BARRIER)
      EXPECT_EQ_INT(fcclBarrier(comm, stream), fcclSuccess);
    else
      EXPECT_EQ_INT(fcclAllReduceAlgo(data, data, 1000, fcclFloat32, fcclSum, comm, stream, algo), fcclSuccess);
    usleep(200000);
    EXPECT_EQ_INT(cudaStreamQuery(stream), cudaErrorNotReady); /* still waiting for rank 1 */
    const int64_t start = collNowNs();
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
    const double seconds = (double)(collNowNs() - start) / 1e9;
    EXPECT_MSG(seconds < 5, "fcclCommAbort took %.2f s to stop the %s kernel", seconds, fcclAlgoName(algo));
    printf("scenario %d (%s): aborted in %.3f s\n", which, fcclAlgoName(algo), seconds);
    EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
    EXPECT_EQ_INT(cudaFree(data), cudaSuccess);
    testShmPost(&args->shared->flags[which], 1);
  } else {
    waitFlag(args->shared, which);
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
  }
}

static int modeAbort(int rank, int nranks, const struct barrierArgs* args) {
  abortScenario(rank, nranks, args, 1, FCCL_KERNEL_BARRIER);
  abortScenario(rank, nranks, args, 2, FCCL_ALGO_LL);
  abortScenario(rank, nranks, args, 3, FCCL_ALGO_LL128);
  copyScenario(rank, nranks, args, 4, 1);
  return 0;
}

static int rankMain(int rank, int nranks, void* arg) {
  const struct barrierArgs* args = arg;
  if (strcmp(args->mode, "order") == 0) modeOrder(rank, nranks, args);
  else if (strcmp(args->mode, "stress") == 0) modeStress(rank, nranks, args);
  else if (strcmp(args->mode, "timeout") == 0) modeTimeout(rank, nranks, args);
  else modeAbort(rank, nranks, args);
  char name[64];
  snprintf(name, sizeof(name), "barrier %s rank %d", args->mode, rank);
  return testSummary(name);
}

int main(int argc, char** argv) {
  struct barrierArgs args = {argc > 1 ? argv[1] : "order", NULL, 0, 0};
  int nranks = argc > 2 ? atoi(argv[2]) : 2;
  if ((strcmp(args.mode, "order") != 0 && strcmp(args.mode, "stress") != 0 && strcmp(args.mode, "timeout") != 0 &&
       strcmp(args.mode, "abort") != 0) ||
      nranks < 2 || nranks > REF_MAX_RANKS) {
    fprintf(stderr, "usage: %s order|stress|timeout|abort [nranks 2..8]\n", argv[0]);
    return 2;
  }
  /* Read by the ranks' first fccl call, after the fork. */
  if (strcmp(args.mode, "timeout") == 0) setenv("FCCL_TIMEOUT", "300", 1);
  if (strcmp(args.mode, "abort") == 0) setenv("FCCL_TIMEOUT", "30000", 1); /* a failed abort: slow, not a hang */
  args.gpus = testGpuCount();
  if (args.gpus < 1) {
    printf("SKIP: no GPU\n");
    return TEST_SKIP;
  }
  args.seed = testSeed();
  args.shared = collSharedNew(nranks);
  int codes[REF_MAX_RANKS];
  int failed = testShmForkRanks(args.shared->shm, rankMain, &args, 600, codes);
  EXPECT_EQ_INT(failed, 0);
  if (strcmp(args.mode, "order") == 0) checkOrder(args.shared, nranks);
  if (strcmp(args.mode, "stress") == 0) {
    int differ = collCompareHashes(args.shared, nranks, (uint64_t)args.shared->flags[0]);
    EXPECT_MSG(differ == 0, "%d calls gave different bits on different ranks", differ);
  }
  return testSummary("barrier");
}
