/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclCommSplit and fcclCommFinalize through the public API, on forked ranks that share the GPUs (exits 77 without
 * one). Every child is checked against the rule (the ranks of a color, by key, then by parent rank): its count,
 * rank, device and path, an all-reduce of values that say which parent rank sent them (exact in float) and an
 * all-gather of the members' parent ranks, which must come in child order. Modes (argv[1], argv[2] the rank count):
 *   fccl [N]  fccl's kernels (4 ranks by default), keys reversed: one color; two colors; three colors and a rank of
 *             FCCL_SPLIT_NOCOLOR (FCCL_COMM_NULL); a split of a child; splits that map nothing new (the process's
 *             mapping opens and references stay as they were); non-blocking splits (a child polled, a
 *             FCCL_SPLIT_NOCOLOR rank polling its parent); equal keys (parent order) for a child that outlives its
 *             destroyed parent; children finalized (blocking, and non-blocking as the child's config says) and then
 *             destroyed.
 *   nccl [N]  FCCL_PATH=nccl, every rank its own NCCL host (NCCL_HOSTID): the same splits, whose children are on the
 *             NCCL path with the NCCL communicator split from the parent's.
 *   hier      4 ranks as 2 hosts of 2 (FCCL_HOSTID): the hierarchical parent split by host gives children on fccl's
 *             kernels, split across hosts children on NCCL: each on the path its own ranks allow.
 *   cost [N]  prints what a split costs beside a fresh fcclCommInitRank of the same ranks (median of 5 each, after
 *             one of each untimed); asserts nothing on time.
 * Every wait is bounded: config.timeoutMs and the fork limit.
 */
#include "fccl.h"
#include "param.h"
#include "test.h"
#include "test_shm.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 8
#define COUNT 4099 /* elements of the checked all-reduce: odd */
#define GATHER 3   /* elements each rank gives the all-gather */
#define TIMEOUT_MS 60000
#define COST_ROUNDS 5

static int gpus;

struct shared {
  struct testShm* shm;
  int idReady[32];
  fcclUniqueId ids[32];
  double costs[2][MAX_RANKS]; /* cost mode: median ms of init and of split, per rank */
};

struct rank {
  struct shared* shared;
  int rank, nranks;
  fcclPath_t parentPath;
  const char* mode;
  cudaStream_t stream;
};

static double nowMs(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec * 1e3 + (double)now.tv_nsec / 1e6;
}

/* Parent rank p's element i: small integers, so the float sum of up to 8 ranks is exact. */
static float value(int parentRank, int i) { return (float)((i % 89) + 7 * parentRank + 1); }

static fcclConfig_t testConfig(const char* name, int nranks) {
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.commName = name;
  config.timeoutMs = TIMEOUT_MS;
  config.allowSharedDevice = gpus < nranks;
  return config;
}

/* Communicator number `which` of every rank, through an id rank 0 makes. */
static fcclComm_t initWhole(struct rank* r, int which, const fcclConfig_t* config) {
  struct shared* s = r->shared;
  if (r->rank == 0) {
    if (fcclGetUniqueId(&s->ids[which]) != fcclSuccess) return NULL;
    testShmPost(&s->idReady[which], 1);
  } else if (testShmWait(s->shm, &s->idReady[which], 1, TIMEOUT_MS, "the unique id") != TEST_SHM_OK) {
    return NULL;
  }
  fcclComm_t comm = NULL;
  fcclResult_t res = fcclCommInitRankConfig(&comm, r->nranks, s->ids[which], r->rank, config);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init %d: %s", r->rank, which, fcclGetLastError(NULL));
  return res == fcclSuccess ? comm : NULL;
}

typedef int (*pickFn)(int rank, int nranks);

/* The rule, written out plainly: the ranks (of `of`, parent rank i standing for whole rank of[i]) of color, by key
 * then rank; members get whole ranks. Returns the count. */
static int members(int n, const int* of, pickFn color, pickFn key, int want, int* out) {
  int count = 0, taken[MAX_RANKS] = {0};
  for (;;) {
    int best = -1;
    for (int p = 0; p < n; p++)
      if (!taken[p] && color(p, n) == want && (best < 0 || key(p, n) < key(best, n))) best = p;
    if (best < 0) return count;
    taken[best] = 1;
    out[count++] = of[best];
  }
}

/* Waits (bounded) while comm's state is fcclInProgress; returns the state. */
static fcclResult_t waitState(fcclComm_t comm) {
  fcclResult_t state = fcclInProgress;
  for (double end = nowMs() + TIMEOUT_MS; state == fcclInProgress && nowMs() < end;) {
    if (fcclCommGetAsyncError(comm, &state) != fcclSuccess) return fcclInternalError;
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 500000};
    nanosleep(&pause, NULL);
  }
  return state;
}

/*
 * comm is a child whose ranks are, in order, the whole communicator's ranks whole[0..n-1]: its count, rank, device
 * and path, then an all-reduce (every member's values, by whole rank) and an all-gather (whole ranks in order).
 */
static void checkChild(struct rank* r, fcclComm_t comm, const int* whole, int n, fcclPath_t path, const char* what) {
  int value32 = -1, me = -1;
  for (int i = 0; i < n; i++)
    if (whole[i] == r->rank) me = i;
  EXPECT_EQ_INT(fcclCommCount(comm, &value32), fcclSuccess);
  EXPECT_MSG(value32 == n, "%s: rank %d: count %d, expected %d", what, r->rank, value32, n);
  EXPECT_EQ_INT(fcclCommUserRank(comm, &value32), fcclSuccess);
  EXPECT_MSG(value32 == me, "%s: rank %d: child rank %d, expected %d", what, r->rank, value32, me);
  int dev = -1, current = -1;
  EXPECT_EQ_INT(fcclCommCuDevice(comm, &dev), fcclSuccess);
  EXPECT_EQ_INT(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ_INT(dev, current);
  fcclPath_t got = fcclNumPaths;
  const char* reason = NULL;
  EXPECT_EQ_INT(fcclCommGetPath(comm, &got, &reason), fcclSuccess);
  EXPECT_MSG(got == path, "%s: rank %d: path %s (%s), expected %s", what, r->rank, fcclGetPathName(got),
             reason ? reason : "", fcclGetPathName(path));

  float *send = NULL, *recv = NULL, *host = malloc(COUNT * sizeof(float));
  int32_t *gsend = NULL, *grecv = NULL, gathered[MAX_RANKS * GATHER];
  if (!host || cudaMalloc((void**)&send, COUNT * sizeof(float)) != cudaSuccess ||
      cudaMalloc((void**)&recv, COUNT * sizeof(float)) != cudaSuccess ||
      cudaMalloc((void**)&gsend, GATHER * sizeof(int32_t)) != cudaSuccess ||
      cudaMalloc((void**)&grecv, MAX_RANKS * GATHER * sizeof(int32_t)) != cudaSuccess) {
    testFail(__FILE__, __LINE__, "%s: rank %d: allocation failed", what, r->rank);
    goto out;
  }
  for (int i = 0; i < COUNT; i++) host[i] = value(r->rank, i);
  int32_t mine[GATHER];
  for (int j = 0; j < GATHER; j++) mine[j] = r->rank * 1000 + j;
  /* Inputs and poison on the collectives' own stream, which orders them before the calls. r->stream is
   * cudaStreamNonBlocking: it does not wait for the legacy default stream, where cudaMemset runs asynchronously to
   * the host and a cudaMemcpy from pageable memory may return before its DMA is done. A one-rank child's calls are
   * copies that start at once, which the poison then overwrote (or which read an input not yet there). */
  EXPECT_EQ_INT(cudaMemcpyAsync(send, host, COUNT * sizeof(float), cudaMemcpyHostToDevice, r->stream), cudaSuccess);
  EXPECT_EQ_INT(cudaMemcpyAsync(gsend, mine, sizeof(mine), cudaMemcpyHostToDevice, r->stream), cudaSuccess);
  EXPECT_EQ_INT(cudaMemsetAsync(recv, 0xff, COUNT * sizeof(float), r->stream), cudaSuccess); /* poisoned: NaN */
  EXPECT_EQ_INT(cudaMemsetAsync(grecv, 0xff, MAX_RANKS * GATHER * sizeof(int32_t), r->stream), cudaSuccess);
  fcclResult_t res = fcclAllReduce(send, recv, COUNT, fcclFloat32, fcclSum, comm, r->stream);
  EXPECT_MSG(res == fcclSuccess, "%s: rank %d: all-reduce: %s", what, r->rank, fcclGetLastError(NULL));
  res = fcclAllGather(gsend, grecv, GATHER, fcclInt32, comm, r->stream);
  EXPECT_MSG(res == fcclSuccess, "%s: rank %d: all-gather: %s", what, r->rank, fcclGetLastError(NULL));
  EXPECT_EQ_INT(cudaStreamSynchronize(r->stream), cudaSuccess);
  EXPECT_EQ_INT(cudaMemcpy(host, recv, COUNT * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ_INT(cudaMemcpy(gathered, grecv, (size_t)n * GATHER * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t wrong = 0;
  for (int i = 0; i < COUNT; i++) {
    double sum = 0;
    for (int m = 0; m < n; m++) sum += value(whole[m], i);
    wrong += host[i] != (float)sum;
  }
  EXPECT_MSG(wrong == 0, "%s: rank %d: %zu of %d sums wrong", what, r->rank, wrong, COUNT);
  for (int m = 0; m < n; m++)
    for (int j = 0; j < GATHER; j++)
      EXPECT_MSG(gathered[m * GATHER + j] == whole[m] * 1000 + j, "%s: rank %d: all-gather block %d holds %d, not %d",
                 what, r->rank, m, gathered[m * GATHER + j], whole[m] * 1000 + j);
out:
  cudaFree(send);
  cudaFree(recv);
  cudaFree(gsend);
  cudaFree(grecv);
  free(host);
}

/* Splits comm (whose rank i is whole rank of[i], n of them) by color and key and checks the child; returns it (NULL
 * for FCCL_SPLIT_NOCOLOR, after checking it got FCCL_COMM_NULL). childMembers (may be NULL) receives its whole
 * ranks. */
static fcclComm_t splitChecked(struct rank* r, fcclComm_t comm, const int* of, int n, pickFn color, pickFn key,
                               fcclPath_t path, const char* what, int* childMembers, int* childCount) {
  int me = -1;
  for (int i = 0; i < n; i++)
    if (of[i] == r->rank) me = i;
  fcclComm_t child = (fcclComm_t)(uintptr_t)0x5e5e;
  fcclResult_t res = fcclCommSplit(comm, color(me, n), key(me, n), &child, NULL);
  EXPECT_MSG(res == fcclSuccess, "%s: rank %d: fcclCommSplit: %s", what, r->rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return NULL;
  if (color(me, n) == FCCL_SPLIT_NOCOLOR) {
    EXPECT_MSG(child == FCCL_COMM_NULL, "%s: rank %d: FCCL_SPLIT_NOCOLOR gave %p", what, r->rank, (void*)child);
    return NULL;
  }
  int whole[MAX_RANKS];
  const int count = members(n, of, color, key, color(me, n), whole);
  checkChild(r, child, whole, count, path, what);
  if (childMembers) memcpy(childMembers, whole, sizeof(whole));
  if (childCount) *childCount = count;
  return child;
}

static int colorOne(int rank, int n) { return (void)rank, (void)n, 0; }
static int keyReversed(int rank, int n) { return n - 1 - rank; }
static int colorParity(int rank, int n) { return (void)n, rank % 2; }
static int keyNegative(int rank, int n) { return (void)n, -rank; }
static int colorThreeOrNone(int rank, int n) { return (void)n, rank == 1 ? FCCL_SPLIT_NOCOLOR : rank % 3; }
static int keyEqual(int rank, int n) { return (void)rank, (void)n, 5; }
static int colorHost(int rank, int n) { return (void)n, rank / 2; }

static uint64_t opens(void) {
  fcclMemStats_t stats = {.size = sizeof(stats)};
  return fcclCommGetMemStats(NULL, &stats) == fcclSuccess ? stats.totalOpens : UINT64_MAX;
}

static uint64_t references(void) {
  fcclMemStats_t stats = {.size = sizeof(stats)};
  return fcclCommGetMemStats(NULL, &stats) == fcclSuccess ? stats.mappingReferences : 0;
}

/* The splits every path runs, on parent (the whole communicator). */
static void splits(struct rank* r, fcclComm_t parent, fcclPath_t childPath) {
  int whole[MAX_RANKS], n = r->nranks;
  for (int i = 0; i < n; i++) whole[i] = i;
  const int fccl = childPath == fcclPathFccl;

  /* One color, keys reversed: what the parent maps is the child's too. */
  const uint64_t opensBefore = opens(), refsBefore = references();
  int reversedMembers[MAX_RANKS], reversedCount = 0;
  fcclComm_t reversed = splitChecked(r, parent, whole, n, colorOne, keyReversed, childPath, "one color, keys reversed",
                                     reversedMembers, &reversedCount);
  if (fccl && n > 1) {
    EXPECT_MSG(opens() == opensBefore, "rank %d: the split opened %llu mappings", r->rank,
               (unsigned long long)(opens() - opensBefore));
    /* The child's hold on those chunks is a user more of each peer's arena record, which keeps one mapping
     * reference per chunk (src/transport/arena.h): the reference its import took is handed back. */
    EXPECT_MSG(references() == refsBefore, "rank %d: the split changed the mapping references by %lld", r->rank,
               (long long)(references() - refsBefore));
  }
  /* A split of that child: halves of its ranks by parity, keys reversed again. */
  if (reversed) {
    fcclComm_t nested = splitChecked(r, reversed, reversedMembers, reversedCount, colorParity, keyNegative, childPath,
                                     "a split of a child", NULL, NULL);
    if (nested) EXPECT_EQ_INT(fcclCommDestroy(nested), fcclSuccess);
    EXPECT_EQ_INT(fcclCommDestroy(reversed), fcclSuccess);
  }
  /* Two colors: children of fewer ranks take the parent's slot size too (test_split_layout), so map nothing new. */
  const uint64_t opensBeforeTwo = opens();
  fcclComm_t two = splitChecked(r, parent, whole, n, colorParity, keyNegative, childPath, "two colors", NULL, NULL);
  if (fccl)
    EXPECT_MSG(opens() == opensBeforeTwo, "rank %d: the two-color split opened %llu mappings", r->rank,
               (unsigned long long)(opens() - opensBeforeTwo));
  if (two) EXPECT_EQ_INT(fcclCommDestroy(two), fcclSuccess);
  fcclComm_t three = splitChecked(r, parent, whole, n, colorThreeOrNone, keyNegative, childPath,
                                  "three colors and FCCL_SPLIT_NOCOLOR", NULL, NULL);
  if (three) EXPECT_EQ_INT(fcclCommDestroy(three), fcclSuccess);

  /* Non-blocking: a child polled to completion; a FCCL_SPLIT_NOCOLOR rank (rank 1) polls its parent. */
  fcclConfig_t config = testConfig("non-blocking child", n);
  config.blocking = 0;
  fcclComm_t child = NULL;
  const int color = r->rank == 1 ? FCCL_SPLIT_NOCOLOR : 0;
  fcclResult_t res = fcclCommSplit(parent, color, r->rank, &child, &config);
  EXPECT_MSG(res == fcclInProgress || res == fcclSuccess, "rank %d: non-blocking split: %d %s", r->rank, res,
             fcclGetLastError(NULL));
  if (color == FCCL_SPLIT_NOCOLOR) {
    EXPECT(child == FCCL_COMM_NULL);
    EXPECT_EQ_INT(waitState(parent), fcclSuccess);
  } else if (child) {
    EXPECT_EQ_INT(waitState(child), fcclSuccess);
    int out[MAX_RANKS], k = 0;
    for (int i = 0; i < n; i++)
      if (i != 1) out[k++] = i;
    checkChild(r, child, out, k, childPath, "non-blocking child");
    /* Finalized as its config says (non-blocking), then a local destroy. */
    res = fcclCommFinalize(child);
    EXPECT_MSG(res == fcclInProgress || res == fcclSuccess, "rank %d: fcclCommFinalize: %s", r->rank,
               fcclGetLastError(NULL));
    EXPECT_EQ_INT(waitState(child), fcclSuccess);
    EXPECT_EQ_INT(fcclAllReduce(NULL, NULL, 0, fcclFloat32, fcclSum, child, r->stream), fcclInvalidUsage);
    EXPECT_EQ_INT(fcclCommDestroy(child), fcclSuccess);
  }

  /* A blocking child finalized, then destroyed; the parent works on. */
  fcclComm_t last = splitChecked(r, parent, whole, n, colorOne, keyNegative, childPath, "finalized child", NULL, NULL);
  if (last) {
    EXPECT_EQ_INT(fcclCommFinalize(last), fcclSuccess);
    EXPECT_EQ_INT(fcclCommDestroy(last), fcclSuccess);
  }
}

static int rankMain(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct rank r = {.shared = arg, .rank = rank, .nranks = nranks};
  const char* mode = getenv("FCCLTEST_SPLIT_MODE");
  fcclPath_t path = fcclPathFccl, childPath = fcclPathFccl;
  char value[96];
  snprintf(value, sizeof(value), "fccl-split-%d-rank%d", (int)getppid(), rank);
  if (strcmp(mode, "nccl") == 0 || strcmp(mode, "hier") == 0) {
    setenv("NCCL_HOSTID", value, 1); /* NCCL takes two ranks on one GPU only as different hosts */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    setenv("NCCL_NET", "Socket", 0);
  }
  if (strcmp(mode, "nccl") == 0) {
    setenv("FCCL_PATH", "nccl", 1);
    path = childPath = fcclPathNccl;
  }
  if (strcmp(mode, "hier") == 0) {
    snprintf(value, sizeof(value), "fccl-split-%d-host%d", (int)getppid(), rank / 2);
    setenv("FCCL_HOSTID", value, 1);
    path = fcclPathHier;
  }
  fcclParamResetForTest();
  EXPECT_EQ_INT(cudaSetDevice(rank % gpus), cudaSuccess);
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), cudaSuccess);
  fcclConfig_t config = testConfig("parent", nranks);

  if (strcmp(mode, "cost") == 0) {
    double init[COST_ROUNDS + 1], split[COST_ROUNDS + 1];
    fcclComm_t parent = initWhole(&r, 0, &config);
    for (int round = 0; parent && round <= COST_ROUNDS; round++) {
      testShmBarrier(r.shared->shm, rank);
      double start = nowMs();
      fcclComm_t fresh = initWhole(&r, 1 + round, &config);
      init[round] = nowMs() - start;
      if (fresh) EXPECT_EQ_INT(fcclCommDestroy(fresh), fcclSuccess);
      testShmBarrier(r.shared->shm, rank);
      start = nowMs();
      fcclComm_t child = NULL;
      EXPECT_EQ_INT(fcclCommSplit(parent, 0, rank, &child, NULL), fcclSuccess);
      split[round] = nowMs() - start;
      if (child) EXPECT_EQ_INT(fcclCommDestroy(child), fcclSuccess);
    }
    /* Round 0 (the first of each, which loads what the process loads once) is left out. */
    for (int i = 1; i <= COST_ROUNDS; i++)
      for (int j = i + 1; j <= COST_ROUNDS; j++) {
        if (init[j] < init[i]) {
          double t = init[i];
          init[i] = init[j];
          init[j] = t;
        }
        if (split[j] < split[i]) {
          double t = split[i];
          split[i] = split[j];
          split[j] = t;
        }
      }
    r.shared->costs[0][rank] = init[1 + COST_ROUNDS / 2];
    r.shared->costs[1][rank] = split[1 + COST_ROUNDS / 2];
    if (parent) EXPECT_EQ_INT(fcclCommDestroy(parent), fcclSuccess);
    EXPECT(parent != NULL);
    return testSummary("comm_split cost (rank)");
  }

  fcclComm_t parent = initWhole(&r, 0, &config);
  if (!parent) return 1;
  fcclPath_t got = fcclNumPaths;
  EXPECT_EQ_INT(fcclCommGetPath(parent, &got, NULL), fcclSuccess);
  EXPECT_MSG(got == path, "rank %d: the parent is on the %s path, expected %s", rank, fcclGetPathName(got),
             fcclGetPathName(path));
  int whole[MAX_RANKS];
  for (int i = 0; i < nranks; i++) whole[i] = i;
  if (strcmp(mode, "hier") == 0) {
    /* By host: one host's two GPUs, fccl's kernels. Across hosts: one GPU per host, which NCCL carries. */
    fcclComm_t byHost = splitChecked(&r, parent, whole, nranks, colorHost, keyNegative, fcclPathFccl, "one host", NULL,
                                     NULL);
    if (byHost) EXPECT_EQ_INT(fcclCommDestroy(byHost), fcclSuccess);
    fcclComm_t across = splitChecked(&r, parent, whole, nranks, colorParity, keyReversed, fcclPathNccl, "across hosts",
                                     NULL, NULL);
    if (across) EXPECT_EQ_INT(fcclCommDestroy(across), fcclSuccess);
    fcclComm_t all = splitChecked(&r, parent, whole, nranks, colorOne, keyEqual, fcclPathHier, "every rank", NULL,
                                  NULL);
    if (all) EXPECT_EQ_INT(fcclCommDestroy(all), fcclSuccess);
  } else {
    splits(&r, parent, childPath);
    /* The parent destroyed before its child: the child keeps what it maps, and works on. */
    fcclComm_t child = splitChecked(&r, parent, whole, nranks, colorOne, keyEqual, childPath, "outliving", NULL, NULL);
    EXPECT_EQ_INT(fcclCommDestroy(parent), fcclSuccess);
    parent = NULL;
    if (child) {
      checkChild(&r, child, whole, nranks, childPath, "after the parent's destroy");
      EXPECT_EQ_INT(fcclCommDestroy(child), fcclSuccess);
    }
  }
  if (parent) EXPECT_EQ_INT(fcclCommDestroy(parent), fcclSuccess);
  EXPECT_EQ_INT(cudaStreamDestroy(r.stream), cudaSuccess);
  return testSummary(mode);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "fccl";
  int nranks = argc > 2 ? atoi(argv[2]) : 4;
  if (strcmp(mode, "hier") == 0) nranks = 4;
  if ((strcmp(mode, "fccl") != 0 && strcmp(mode, "nccl") != 0 && strcmp(mode, "hier") != 0 &&
       strcmp(mode, "cost") != 0) ||
      nranks < 2 || nranks > MAX_RANKS) {
    fprintf(stderr, "usage: %s fccl|nccl|hier|cost [nranks 2..%d]\n", argv[0], MAX_RANKS);
    return 2;
  }
  gpus = testGpuCount();
  if (gpus < 1) {
    printf("SKIP: needs a GPU\n");
    return TEST_SKIP;
  }
  setenv("FCCLTEST_SPLIT_MODE", mode, 1);
  struct testShm* shm = testShmCreate(nranks, 0, sizeof(struct shared), TIMEOUT_MS);
  if (!shm) return 1;
  struct shared* shared = testShmUser(shm);
  shared->shm = shm;
  int codes[MAX_RANKS];
  const int failed = testShmForkRanks(shm, rankMain, shared, 280, codes);
  EXPECT_MSG(failed == 0, "%d of %d ranks failed", failed, nranks);
  if (strcmp(mode, "cost") == 0 && failed == 0) {
    double init = 0, split = 0;
    for (int r = 0; r < nranks; r++) {
      if (shared->costs[0][r] > init) init = shared->costs[0][r];
      if (shared->costs[1][r] > split) split = shared->costs[1][r];
    }
    printf(
        "%d ranks on %d GPU(s), slowest rank's median of %d: fcclCommInitRank %.2f ms, fcclCommSplit %.2f ms "
        "(%.1fx)\n",
        nranks, gpus, COST_ROUNDS, init, split, split > 0 ? init / split : 0.0);
  }
  testShmDestroy(shm);
  return testSummary(mode);
}
