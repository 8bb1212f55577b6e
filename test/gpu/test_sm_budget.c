/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The SM budget (fcclConfig_t.minCTAs and maxCTAs, FCCL_MIN_CTAS and FCCL_MAX_CTAS) read from the grids the kernels
 * were launched with (fcclDeviceLastLaunchForTest), never from timing; forked ranks on the GPUs there are (exits 77
 * without one).
 *
 *   cap [n]      one communicator without a budget and one with maxCTAs 3, the same calls on both: every
 *                collective's kernels in every form that can run (the all-reduce's six algorithms, the all-gather's,
 *                reduce-scatter's, broadcast's, reduce's, gather's and scatter's three) at sizes that want more than
 *                3 blocks, and the fused all-reduce + RMSNorm: unbounded they launch more than 3 blocks, bounded 3 at
 *                most, and the results are right (the host reference; the fused norm's bits equal to the unbounded
 *                communicator's, which its batch invariance promises whatever the grid); a child split off the
 *                bounded communicator without a config runs the fused norm within the same budget
 *   min [n]      minCTAs 5 and maxCTAs 6: a call that wants one block launches 5, one that wants many 6, results right
 *   env [n]      FCCL_MAX_CTAS=2 in the environment (meson sets it) over a config of maxCTAs 7: the variable wins
 *   mismatch     rank 0 with maxCTAs 4, rank 1 with 8: the init fails on both with fcclInvalidUsage naming the budget
 */
#include "test_rooted_common.h"

#include "device.h"
#include "device_state.h"
#include "enqueue.h"
#include "test_collectives_common.h"

#include <stdlib.h>
#include <string.h>

static fcclComm_t budgetComm(const struct collTestArgs* args, int rank, int nranks, int which, int minCtas, int maxCtas,
                             fcclResult_t* result) {
  fcclUniqueId id;
  if (!collShareId(args->shared, rank, which, &id)) return NULL;
  if (cudaSetDevice(rank % args->gpus) != cudaSuccess) return NULL;
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = nranks > args->gpus;
  config.timeoutMs = 60000;
  config.minCTAs = minCtas;
  config.maxCTAs = maxCtas;
  fcclComm_t comm = NULL;
  *result = fcclCommInitRankConfig(&comm, nranks, id, rank, &config);
  return *result == fcclSuccess ? comm : NULL;
}

/* The grid of the calling thread's last launch, checked against [lo, hi] and the kernel expected (-1: any). */
static int expectGrid(const char* what, int rank, int kernel, int lo, int hi) {
  int launched = -1, blocks = 0, threads = 0;
  fcclDeviceLastLaunchForTest(&launched, &blocks, &threads);
  int ok = blocks >= lo && blocks <= hi && (kernel < 0 || launched == kernel);
  EXPECT_MSG(ok, "rank %d: %s: launched %s on %d blocks of %d threads, expected %s on %d..%d blocks", rank, what,
             fcclAlgoName(launched), blocks, threads, kernel < 0 ? "any kernel" : fcclAlgoName(kernel), lo, hi);
  return blocks;
}

/* ---- one call of each kernel, with its grid ---------------------------------------------------------------------- */

struct budgetCall {
  int kind; /* ROOTED_* (the rooted collectives, all-reduce, reduce-scatter) or 10 + MOVE_ALLGATHER/_BROADCAST */
  int form; /* an all-reduce algorithm, or FCCL_MOVE_* */
  fcclDataType_t type;
  size_t count;
};

#define KIND_MOVE 10

/* Runs c checked on ctx (the rooted runner or the moves' runner) and returns the kernel it must have launched. */
static int runBudgetCall(struct collContext* ctx, const struct budgetCall* b, uint64_t call) {
  if (b->kind >= KIND_MOVE) {
    const struct moveCase m = {b->kind - KIND_MOVE, b->type, fcclSum, b->form, 0, b->count, 0, 0, 0, 0};
    moveRunCase(ctx, &m, call);
    return moveSet(m.kind)->algos[b->form];
  }
  struct rootedCase c;
  memset(&c, 0, sizeof(c));
  c.kind = b->kind;
  c.type = b->type;
  c.op = fcclSum;
  c.form = b->form;
  c.count = b->count;
  c.root = ctx->nranks - 1;
  rootedRunCase(ctx, &c, call);
  switch (b->kind) {
    case ROOTED_ALLREDUCE: return b->form;
    case ROOTED_REDUCESCATTER: return fcclReduceScatterAlgos.algos[b->form];
    case ROOTED_REDUCE: return fcclReduceAlgos.algos[b->form];
    case ROOTED_GATHER: return fcclGatherAlgos.algos[b->form];
    case ROOTED_SCATTER: return fcclScatterAlgos.algos[b->form];
    default: return fcclBroadcastAlgos.algos[b->form];
  }
}

/* Every kernel at a size where, unbounded, it takes more than 3 blocks (and within its form's limits). */
static int budgetCalls(int nranks, struct budgetCall* calls) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const size_t ll = layout.llBytes / 4;                  /* floats that fill a writer's LL region */
  const size_t ll128 = layout.ll128Lines * 120 / 4 - 64; /* floats within the LL128 area */
  const size_t big = 2u << 20;                           /* 8 MiB of floats: every data kernel's grid is full */
  int n = 0;
  const int algos[] = {FCCL_ALGO_LL,           FCCL_ALGO_LL128,          FCCL_ALGO_ONESHOT_PUSH,
                       FCCL_ALGO_ONESHOT_PULL, FCCL_ALGO_TWOSHOT_STAGED, FCCL_ALGO_TWOSHOT_REG};
  for (int a = 0; a < 6; a++) {
    const size_t count = algos[a] == FCCL_ALGO_LL             ? ll
                         : algos[a] == FCCL_ALGO_LL128        ? ll128
                         : algos[a] == FCCL_ALGO_ONESHOT_PUSH ? layout.chunkBytes / 4
                                                              : big;
    if (nranks > 1 || algos[a] != FCCL_ALGO_LL128)
      calls[n++] = (struct budgetCall){ROOTED_ALLREDUCE, algos[a], fcclFloat32, count};
  }
  const int kinds[] = {ROOTED_REDUCESCATTER, ROOTED_REDUCE, ROOTED_GATHER,
                       ROOTED_SCATTER,       ROOTED_BCAST,  KIND_MOVE + MOVE_ALLGATHER};
  for (int k = 0; k < 6; k++)
    for (int form = FCCL_MOVE_LL; form <= FCCL_MOVE_STAGED; form++) {
      const size_t count = form == FCCL_MOVE_LL ? ll : big / (size_t)nranks;
      calls[n++] = (struct budgetCall){kinds[k], form, fcclFloat32, count};
    }
  return n;
}

/* The fused norm on a communicator: bf16 rows of 4096, finite pseudo-random values; the output copied to host. */
static int fusedNorm(fcclComm_t comm, int rank, size_t tokens, uint16_t* out, int* blocks) {
  const size_t hidden = 4096, n = tokens * hidden;
  uint16_t* host = malloc(n * 2);
  void *input = NULL, *output = NULL;
  uint64_t state = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
  for (size_t i = 0; i < n; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    host[i] = (uint16_t)(0x3c00 + ((state >> 40) & 0x3ff) - 0x200); /* bf16 around 0.01: finite, varied */
  }
  int ok = host && cudaMalloc(&input, n * 2) == cudaSuccess && cudaMalloc(&output, n * 2) == cudaSuccess &&
           cudaMemcpy(input, host, n * 2, cudaMemcpyHostToDevice) == cudaSuccess;
  ok = ok && fcclAllReduceAddRMSNorm(input, NULL, NULL, output, tokens, hidden, 1e-6f, fcclBfloat16, fcclBfloat16,
                                     fcclScaleNone, NULL, comm, NULL) == fcclSuccess;
  int kernel = -1, threads = 0;
  fcclDeviceLastLaunchForTest(&kernel, blocks, &threads);
  ok = ok && kernel == FCCL_KERNEL_FUSED_NORM && cudaDeviceSynchronize() == cudaSuccess &&
       cudaMemcpy(out, output, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess;
  EXPECT_MSG(ok, "rank %d: the fused norm failed: %s", rank, fcclGetLastError(NULL));
  cudaFree(input);
  cudaFree(output);
  free(host);
  return ok;
}

/* The grid the budget must give a kernel whose grid without one was `unbounded`, where most is the most blocks the
 * budget allows on this GPU (maxCTAs, one per SM): at most most, raised to minCTAs (never past most). */
static int boundedGrid(int unbounded, int minCtas, int most) {
  if (unbounded > most) return most;
  const int least = minCtas > 0 ? (minCtas < most ? minCtas : most) : 1;
  return unbounded < least ? least : unbounded;
}

static int modeCap(int rank, int nranks, const struct collTestArgs* args, int minCtas, int maxCtas) {
  fcclResult_t res;
  fcclComm_t free_ = budgetComm(args, rank, nranks, 0, -1, -1, &res);
  fcclComm_t bounded = budgetComm(args, rank, nranks, 1, minCtas, maxCtas, &res);
  if (!free_ || !bounded) {
    testFail(__FILE__, __LINE__, "rank %d: init: %s", rank, fcclGetLastError(NULL));
    return 1;
  }
  int smCount = 0;
  EXPECT_EQ_INT(cudaDeviceGetAttribute(&smCount, cudaDevAttrMultiProcessorCount, rank % args->gpus), cudaSuccess);
  const int most = maxCtas < smCount ? maxCtas : smCount;
  struct budgetCall calls[64];
  int ncalls = budgetCalls(nranks, calls);
  /* One element: a kernel that wants one block (LL, one warp), which a minimum raises. */
  calls[ncalls++] = (struct budgetCall){ROOTED_ALLREDUCE, -1, fcclFloat32, 1};
  uint64_t call = 0;
  void* scalar = NULL;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext onFree, onBounded;
    const size_t capacity = (size_t)(2u << 20) * 4 + 4096; /* the largest buffer of any call, an offset */
    if (!collContextInit(&onFree, args->shared, free_, rank, nranks, args->seed, capacity, registered) ||
        !collContextInit(&onBounded, args->shared, bounded, rank, nranks, args->seed, capacity, registered)) {
      testFail(__FILE__, __LINE__, "rank %d: context setup failed", rank);
      return 1;
    }
    if (!scalar) EXPECT_EQ_INT(cudaMalloc(&scalar, 8), cudaSuccess);
    rootedSetScalarBuffer(scalar);
    for (int i = 0; i < ncalls; i++) {
      const struct budgetCall* b = &calls[i];
      struct rootedCase probe;
      memset(&probe, 0, sizeof(probe));
      probe.kind = b->kind < KIND_MOVE ? b->kind
                                       : ROOTED_BCAST; /* the all-gather's forms take a block as the bcast's */
      probe.type = b->type;
      probe.form = b->form;
      probe.count = b->count;
      if (!rootedFormApplicable(&probe, nranks, registered)) continue;
      char what[96];
      const char* form = b->kind != ROOTED_ALLREDUCE ? (const char* const[]){"ll", "direct", "staged"}[b->form]
                         : b->form < 0               ? "auto"
                                                     : fcclAlgoName(b->form);
      snprintf(what, sizeof(what), "%s %s x %zu (%s buffers)",
               b->kind >= KIND_MOVE ? "all-gather" : rootedName(b->kind), form, b->count,
               registered ? "registered" : "plain");
      const int kernel = runBudgetCall(&onFree, b, call++);
      const int unbounded = expectGrid(what, rank, kernel, 1, FCCL_DEVICE_MAX_BLOCKS);
      /* The test must be able to fail: the sizes want more blocks than the maximum (but the one-element call). */
      if (b->count > 1) EXPECT_MSG(unbounded > most, "rank %d: %s: %d blocks unbounded", rank, what, unbounded);
      runBudgetCall(&onBounded, b, call++);
      const int expected = boundedGrid(unbounded, minCtas, most);
      expectGrid(what, rank, kernel, expected, expected);
    }
    collContextFini(&onFree);
    collContextFini(&onBounded);
  }
  /* The fused norm: its grid bounded, its bits the unbounded communicator's. */
  const size_t tokens = 512;
  uint16_t* a = malloc(tokens * 4096 * 2);
  uint16_t* b = malloc(tokens * 4096 * 2);
  int freeBlocks = 0, boundedBlocks = 0;
  if (fusedNorm(free_, rank, tokens, a, &freeBlocks) && fusedNorm(bounded, rank, tokens, b, &boundedBlocks)) {
    EXPECT_MSG(freeBlocks > most && boundedBlocks == most, "rank %d: fused norm grids %d unbounded, %d bounded (%d)",
               rank, freeBlocks, boundedBlocks, most);
    EXPECT_MSG(memcmp(a, b, tokens * 4096 * 2) == 0, "rank %d: the fused norm's bits depend on the grid", rank);
  }
  /* A child split off the bounded communicator without a config keeps its budget (NCCL's rule for a NULL config). */
  fcclComm_t child = NULL;
  const fcclResult_t split = fcclCommSplit(bounded, 0, rank, &child, NULL);
  EXPECT_MSG(split == fcclSuccess, "rank %d: split: %s", rank, fcclGetLastError(NULL));
  int childBlocks = 0;
  if (split == fcclSuccess && fusedNorm(child, rank, tokens, b, &childBlocks)) {
    EXPECT_MSG(childBlocks == most, "rank %d: the split's fused norm ran on %d blocks, the budget allows %d", rank,
               childBlocks, most);
    EXPECT_MSG(memcmp(a, b, tokens * 4096 * 2) == 0, "rank %d: the split's fused norm gave other bits", rank);
  }
  if (child) EXPECT_EQ_INT(fcclCommDestroy(child), fcclSuccess);
  free(a);
  free(b);
  cudaFree(scalar);
  args->shared->flags[0] = 0;
  EXPECT_EQ_INT(fcclCommDestroy(bounded), fcclSuccess);
  EXPECT_EQ_INT(fcclCommDestroy(free_), fcclSuccess);
  return 0;
}

/* FCCL_MAX_CTAS (set by meson for this mode) over config.maxCTAs 7: the variable wins. */
static int modeEnv(int rank, int nranks, const struct collTestArgs* args) {
  const char* value = getenv("FCCL_MAX_CTAS");
  EXPECT_MSG(value && atoi(value) == 2, "FCCL_MAX_CTAS is %s, the test wants 2", value ? value : "unset");
  fcclResult_t res;
  fcclComm_t comm = budgetComm(args, rank, nranks, 0, -1, 7, &res);
  if (!comm) {
    testFail(__FILE__, __LINE__, "rank %d: init: %s", rank, fcclGetLastError(NULL));
    return 1;
  }
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, (size_t)(16u << 20) + 4096, 0)) return 1;
  const struct collCase c = {fcclFloat32, fcclSum, FCCL_ALGO_TWOSHOT_STAGED, 0, 4u << 20, 0, 0};
  collRunCase(&ctx, &c, 0);
  expectGrid("two-shot staged, 16 MiB", rank, FCCL_ALGO_TWOSHOT_STAGED, 2, 2);
  collContextFini(&ctx);
  args->shared->flags[0] = 1;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* Ranks with different budgets: every rank's init fails, saying so. */
static int modeMismatch(int rank, int nranks, const struct collTestArgs* args) {
  fcclResult_t res = fcclSuccess;
  fcclComm_t comm = budgetComm(args, rank, nranks, 0, -1, rank == 0 ? 4 : 8, &res);
  EXPECT(comm == NULL);
  EXPECT_EQ_INT(res, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "SM budget");
  args->shared->flags[0] = 0;
  return 0;
}

static int rankMain(int rank, int nranks, void* arg) {
  const struct collTestArgs* args = arg;
  int code = 0;
  if (strcmp(args->mode, "cap") == 0)
    code = modeCap(rank, nranks, args, -1, 3);
  else if (strcmp(args->mode, "min") == 0)
    code = modeCap(rank, nranks, args, 5, 6);
  else if (strcmp(args->mode, "env") == 0)
    code = modeEnv(rank, nranks, args);
  else if (strcmp(args->mode, "mismatch") == 0)
    code = modeMismatch(rank, nranks, args);
  return collRankSummary("sm_budget", args->mode, rank, code);
}

int main(int argc, char** argv) {
  struct collTestArgs args = {argc > 1 ? argv[1] : "cap", NULL, 0, 0};
  const int nranks = argc > 2 ? atoi(argv[2]) : 2;
  const int known = strcmp(args.mode, "cap") == 0 || strcmp(args.mode, "min") == 0 || strcmp(args.mode, "env") == 0 ||
                    strcmp(args.mode, "mismatch") == 0;
  /* 2 ranks at least: one rank's call of one element is a copy, no kernel. */
  if (!known || nranks < 2 || nranks > FCCL_DEVICE_MAX_RANKS) {
    fprintf(stderr, "usage: %s cap|min|env|mismatch [nranks 2..8]\n", argv[0]);
    return 2;
  }
  /* Under meson's timeout for the mode (600 s for cap and min, 120 s for env and mismatch), so that a rank that hangs
   * is named by the test rather than the whole run killed. Its calls' outputs are not compared across ranks. */
  const int forkTimeout = strcmp(args.mode, "cap") == 0 || strcmp(args.mode, "min") == 0 ? 540 : 100;
  return collTestMain("sm_budget", &args, nranks, rankMain, forkTimeout, NULL);
}
