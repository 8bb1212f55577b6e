/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclMoeDispatch and fcclMoeCombine on forked ranks (1..8; ranks share the GPUs, exits 77 without one), against the
 * host reference (test_moe_ref.h): every delivered row's bits, FP8 scales, weight and source, the counts and offsets
 * per local expert, the rows no token goes to left unwritten, and the combine's output bit for bit (the fma chain in
 * ascending expert order, one rounding: docs/moe.md#combine), on random data, every rank with its own token count.
 *   test_moe ranks <n>    four configurations (packed, aligned, padded; top-1 to top-8; hidden 128 to 1024) x routings
 *                         (random, skewed, every token to one hot expert, sparse) x bf16, fp16 and FP8 x int32 and
 *                         int64 indices, with a rank without tokens, SM budgets of 1, 3 and the layout's, and every
 *                         optional output or none
 *   test_moe large <n>    hidden 7168 (top-8 of 32 experts per rank, packed by 128 rows) and 4096 (padded), bf16 and
 *                         FP8, every rank at its worst case
 *   test_moe blocks <n>   one call under SM budgets 1, 2, 5, the layout's and one block per SM: the same bits
 *   test_moe graph <n>    dispatch, a copy of the rows as the experts' outputs and combine captured in one CUDA graph
 *                         (bf16, fp16), replayed with new routing and data each time (FCCLTEST_QUICK=1: fewer); FP8
 *                         dispatch and combine in two graphs with the experts' outputs made on the host between them
 *   test_moe mixed <n>    two layouts, all-reduces and a dispatch twice in a row on one stream with no host
 *                         synchronisation between them
 *   test_moe invalid <n>  argument errors (fcclInvalidArgument, nothing launched), configurations that differ
 *                         between ranks, then invalid routing on the last rank: every rank's calls complete and every
 *                         communicator reports fcclInvalidArgument naming the rank, token, entry and value
 *   test_moe timeout 2    rank 1 never dispatches: rank 0's kernel gives up after FCCL_TIMEOUT (300 ms) and says
 *                         which rank it waited for
 *   test_moe abort 2      the same kernel stops at once on fcclCommAbort
 *   test_moe dead <n>     the last rank dies while the others wait in the dispatch: fcclRemoteError naming it
 * The files: test_moe.c (the modes that check results, and main), test_moe_case.c (a layout with its buffers, one
 * checked case), test_moe_faults.c (errors, a peer that never calls or dies).
 */
#include "test_moe.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- configurations and cases -------------------------------------------------------------------------------- */

/* A configuration as experts per rank (the count follows the ranks), topk (clipped to the experts), hidden, the
 * worst case of tokens, the layout. */
struct shapeSpec {
  int perRank;
  int topk;
  size_t hidden;
  size_t tokens;
  int padded;
  int alignment;
};

static struct moeRefCase shapeOf(const struct shapeSpec* s, int nranks) {
  const int experts = s->perRank * nranks;
  return moeShape(nranks, experts, s->topk < experts ? s->topk : experts, s->hidden, s->tokens, s->padded,
                  s->alignment);
}

static struct moeCase caseOf(const struct moeRefCase* shape, uint64_t seed, uint64_t call) {
  struct moeCase c;
  memset(&c, 0, sizeof(c));
  c.ref = *shape;
  c.ref.seed = seed;
  c.ref.call = call;
  c.idxType = fcclInt64;
  c.outputs = MOE_OUT_ALL;
  c.weighted = 1;
  c.badRank = -1;
  return c;
}

static int gpuSms(void) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device))
    return 1;
  return sms;
}

/* ---- modes --------------------------------------------------------------------------------------------------- */

static int modeRanks(struct collShared* shared, fcclComm_t comm, int rank, int nranks, uint64_t seed) {
  static const struct shapeSpec shapes[] = {{2, 2, 128, 64, 0, 1},
                                            {4, 8, 256, 40, 1, 1},
                                            {8, 4, 1024, 33, 0, 16},
                                            {1, 1, 512, 96, 0, 1}};
  static const fcclDataType_t types[] = {fcclBfloat16, fcclFloat16, fcclFloat8e4m3};
  static const int budgets[] = {0, 1, 3};
  static const int outputs[] = {MOE_OUT_ALL, 0, MOE_OUT_WEIGHTS | MOE_OUT_SOURCES};
  const int quick = collQuick();
  uint64_t call = 0;
  for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
    const struct moeRefCase shape = shapeOf(&shapes[si], nranks);
    struct moeBench b;
    if (!moeBenchInit(&b, shared, comm, rank, nranks, &shape, 0)) return (int)call + 1;
    for (int route = 0; route < MOE_ROUTE_KINDS; route++)
      for (size_t ti = 0; ti < 3; ti++) {
        if (quick && (route + (int)ti) % 2 != 0) continue;
        struct moeCase c = caseOf(&shape, seed, call);
        c.ref.route = (moeRoute_t)route;
        c.ref.type = types[ti];
        c.ref.outType = types[ti] == fcclFloat16 ? fcclFloat16 : (call % 2 ? fcclFloat16 : fcclBfloat16);
        c.ref.emptyRank = nranks > 1 && call % 2 == 0 ? nranks - 1 : -1;
        c.ref.fullTokens = call % 3 == 0;
        c.idxType = call % 2 ? fcclInt32 : fcclInt64;
        c.blocks = budgets[call % 3];
        c.outputs = outputs[(call / 3) % 3];
        c.weighted = call % 4 != 1;
        if (c.ref.type == fcclFloat8e4m3 && shape.hidden % 128 != 0) continue;
        /* Every case on every rank, failed or not: a rank that stopped early would leave its peers in calls it
         * never makes. */
        moeRunCase(&b, &c, call++);
      }
    moeBenchFini(&b);
  }
  return (int)call;
}

static int modeLarge(struct collShared* shared, fcclComm_t comm, int rank, int nranks, uint64_t seed) {
  const size_t tokens = collQuick() ? 8 : 32;
  const struct shapeSpec shapes[] = {{32, 8, 7168, tokens, 0, 128}, {8, 8, 4096, tokens * 2, 1, 1}};
  static const fcclDataType_t types[] = {fcclBfloat16, fcclFloat8e4m3};
  uint64_t call = 0;
  for (size_t si = 0; si < 2; si++) {
    const struct moeRefCase shape = shapeOf(&shapes[si], nranks);
    struct moeBench b;
    if (!moeBenchInit(&b, shared, comm, rank, nranks, &shape, 0)) return (int)call + 1;
    for (size_t ti = 0; ti < 2; ti++)
      for (int route = MOE_ROUTE_RANDOM; route <= MOE_ROUTE_SKEWED; route++) {
        struct moeCase c = caseOf(&shape, seed, call);
        c.ref.type = types[ti];
        c.ref.route = (moeRoute_t)route;
        c.ref.fullTokens = 1;
        moeRunCase(&b, &c, call++);
      }
    moeBenchFini(&b);
  }
  return (int)call;
}

/* One case under several SM budgets: each checked against the reference, so every budget gives the same bits. */
static int modeBlocks(struct collShared* shared, fcclComm_t comm, int rank, int nranks, uint64_t seed) {
  const struct shapeSpec spec = {4, 4, 512, 100, 0, 1};
  const struct moeRefCase shape = shapeOf(&spec, nranks);
  struct moeBench b;
  if (!moeBenchInit(&b, shared, comm, rank, nranks, &shape, 2)) return 1;
  const int sms = gpuSms();
  const int budgets[] = {1, 2, 5, 0, sms < 256 ? sms : 256};
  uint64_t call = 0;
  for (int route = 0; route < MOE_ROUTE_KINDS; route++)
    for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
      struct moeCase c = caseOf(&shape, seed, (uint64_t)route); /* the same data for every budget */
      c.ref.route = (moeRoute_t)route;
      c.ref.emptyRank = nranks > 2 ? 1 : -1;
      c.blocks = budgets[i];
      moeRunCase(&b, &c, call++);
    }
  moeBenchFini(&b);
  return (int)call;
}

/* Dispatch, the rows copied as the experts' outputs, combine: captured in one graph, replayed with new inputs. */
static int graphIdentity(struct moeBench* b, fcclDataType_t type, uint64_t seed, uint64_t* call) {
  struct moeBench* ctx = b;
  const int replays = collQuick() ? 5 : 20;
  struct moeCase c = caseOf(&b->shape, seed, *call);
  c.ref.type = c.ref.outType = type;
  c.ref.identityExperts = 1;
  c.ref.fullTokens = 1; /* the token count is part of the graph: every replay has the same */
  c.ref.emptyRank = b->nranks > 2 ? b->nranks - 1 : -1;
  if (moeUpload(b, &c)) return 1;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  COLL_CHECK_CUDA("capture", cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
  const fcclResult_t dispatched = moeDispatch(b, &c, b->stream);
  const cudaError_t copied = cudaMemcpyAsync(b->y, b->recvX, b->recvRows * b->shape.hidden * 2,
                                             cudaMemcpyDeviceToDevice, b->stream);
  const fcclResult_t combined = moeCombine(b, &c, b->stream);
  COLL_CHECK_CUDA("capture", cudaStreamEndCapture(b->stream, &graph));
  COLL_CHECK_FCCL("capture", dispatched);
  COLL_CHECK_CUDA("capture", copied);
  COLL_CHECK_FCCL("capture", combined);
  COLL_CHECK_CUDA("instantiate", cudaGraphInstantiate(&exec, graph, 0));
  int bad = 0;
  for (int r = 0; r < replays; r++) {
    c.ref.call = (*call)++;
    c.ref.route = (moeRoute_t)(r % MOE_ROUTE_KINDS);
    if (r > 0 && moeUpload(b, &c)) return 1;
    COLL_CHECK_CUDA("replay", cudaGraphLaunch(exec, b->stream));
    COLL_CHECK_CUDA("replay", cudaStreamSynchronize(b->stream));
    bad += moeCheckDispatch(b, &c);
    bad += moeCheckCombine(b, &c, c.ref.call);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return bad;
}

/* FP8: the dispatch and the combine in graphs of their own, the experts' outputs made on the host between them. */
static int graphSplit(struct moeBench* b, uint64_t seed, uint64_t* call) {
  struct moeBench* ctx = b;
  const int replays = collQuick() ? 3 : 10;
  struct moeCase c = caseOf(&b->shape, seed, *call);
  c.ref.type = fcclFloat8e4m3;
  c.ref.fullTokens = 1;
  if (moeUpload(b, &c)) return 1;
  cudaGraph_t graphs[2] = {NULL, NULL};
  cudaGraphExec_t execs[2] = {NULL, NULL};
  for (int g = 0; g < 2; g++) {
    COLL_CHECK_CUDA("capture", cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
    const fcclResult_t res = g == 0 ? moeDispatch(b, &c, b->stream) : moeCombine(b, &c, b->stream);
    COLL_CHECK_CUDA("capture", cudaStreamEndCapture(b->stream, &graphs[g]));
    COLL_CHECK_FCCL("capture", res);
    COLL_CHECK_CUDA("instantiate", cudaGraphInstantiate(&execs[g], graphs[g], 0));
  }
  int bad = 0;
  for (int r = 0; r < replays; r++) {
    c.ref.call = (*call)++;
    c.ref.route = (moeRoute_t)(r % MOE_ROUTE_KINDS);
    if (r > 0 && moeUpload(b, &c)) return 1;
    COLL_CHECK_CUDA("replay", cudaGraphLaunch(execs[0], b->stream));
    COLL_CHECK_CUDA("replay", cudaStreamSynchronize(b->stream));
    bad += moeCheckDispatch(b, &c);
    COLL_CHECK_CUDA("replay", cudaGraphLaunch(execs[1], b->stream));
    bad += moeCheckCombine(b, &c, c.ref.call);
  }
  for (int g = 0; g < 2; g++) {
    cudaGraphExecDestroy(execs[g]);
    cudaGraphDestroy(graphs[g]);
  }
  return bad;
}

static int modeGraph(struct collShared* shared, fcclComm_t comm, int rank, int nranks, uint64_t seed) {
  const struct shapeSpec spec = {2, 2, 256, 32, 0, 1};
  const struct moeRefCase shape = shapeOf(&spec, nranks);
  struct moeBench b;
  if (!moeBenchInit(&b, shared, comm, rank, nranks, &shape, 0)) return 1;
  uint64_t call = 0;
  graphIdentity(&b, fcclBfloat16, seed, &call);
  graphIdentity(&b, fcclFloat16, seed, &call);
  graphSplit(&b, seed, &call);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  moeBenchFini(&b);
  return (int)call;
}

/*
 * Two layouts, all-reduces and back-to-back dispatches on one stream, no host synchronisation until the end (the
 * experts' outputs are the rows themselves, copied on the stream): every call's staging is free when the next call
 * of any kind writes it. A's first combine is copied to the host on the stream before A dispatches twice more.
 */
static int modeMixed(struct collShared* shared, fcclComm_t comm, int rank, int nranks, uint64_t seed) {
  const struct shapeSpec specA = {2, 2, 128, 48, 0, 1}, specB = {4, 4, 256, 32, 1, 1};
  const struct moeRefCase shapeA = shapeOf(&specA, nranks), shapeB = shapeOf(&specB, nranks);
  struct moeBench a, b;
  if (!moeBenchInit(&a, shared, comm, rank, nranks, &shapeA, 0)) return 1;
  if (!moeBenchInit(&b, shared, comm, rank, nranks, &shapeB, 3)) return 1;
  struct moeBench* ctx = &a;
  const int rounds = collQuick() ? 2 : 6;
  const size_t count = 4099;
  float *sum = NULL, *hostSum = NULL;
  void* firstOut = NULL;
  COLL_CHECK_CUDA("mixed", cudaMalloc((void**)&sum, count * sizeof(float)));
  COLL_CHECK_CUDA("mixed", cudaMallocHost((void**)&hostSum, count * sizeof(float)));
  COLL_CHECK_CUDA("mixed", cudaMallocHost(&firstOut, shapeA.maxTokens * shapeA.hidden * 2));
  cudaStream_t s = a.stream;
  uint64_t call = 0;
  for (int round = 0; round < rounds; round++) {
    struct moeCase ca = caseOf(&shapeA, seed, call++), cb = caseOf(&shapeB, seed, call++);
    ca.ref.identityExperts = cb.ref.identityExperts = 1;
    ca.ref.route = (moeRoute_t)(round % MOE_ROUTE_KINDS);
    cb.ref.route = (moeRoute_t)((round + 1) % MOE_ROUTE_KINDS);
    ca.ref.emptyRank = nranks > 1 ? round % nranks : -1;
    cb.ref.type = cb.ref.outType = fcclFloat16;
    if (moeUpload(&a, &ca) || moeUpload(&b, &cb)) return (int)call;
    for (size_t i = 0; i < count; i++) hostSum[i] = (float)(rank + 1) * (float)(i % 7 + 1);
    COLL_CHECK_CUDA("mixed", cudaMemcpyAsync(sum, hostSum, count * sizeof(float), cudaMemcpyHostToDevice, s));
    COLL_CHECK_CUDA("mixed", cudaStreamSynchronize(a.stream));
    COLL_CHECK_CUDA("mixed", cudaStreamSynchronize(b.stream));
    /* From here on, one stream and no host synchronisation. */
    COLL_CHECK_FCCL("mixed", moeDispatch(&a, &ca, s));
    COLL_CHECK_FCCL("mixed", fcclAllReduce(sum, sum, count, fcclFloat32, fcclSum, comm, s));
    COLL_CHECK_FCCL("mixed", moeDispatch(&b, &cb, s));
    COLL_CHECK_CUDA("mixed",
                    cudaMemcpyAsync(a.y, a.recvX, a.recvRows * shapeA.hidden * 2, cudaMemcpyDeviceToDevice, s));
    COLL_CHECK_CUDA("mixed",
                    cudaMemcpyAsync(b.y, b.recvX, b.recvRows * shapeB.hidden * 2, cudaMemcpyDeviceToDevice, s));
    COLL_CHECK_FCCL("mixed", moeCombine(&b, &cb, s));
    COLL_CHECK_FCCL("mixed", fcclBarrier(comm, s));
    COLL_CHECK_FCCL("mixed", moeCombine(&a, &ca, s));
    COLL_CHECK_CUDA("mixed",
                    cudaMemcpyAsync(firstOut, a.out, shapeA.maxTokens * shapeA.hidden * 2, cudaMemcpyDeviceToHost, s));
    COLL_CHECK_FCCL("mixed", moeDispatch(&a, &ca, s));
    COLL_CHECK_FCCL("mixed", moeDispatch(&a, &ca, s));
    COLL_CHECK_CUDA("mixed", cudaMemsetAsync(a.y, 0xff, a.recvRows * shapeA.hidden * 2, s));
    COLL_CHECK_CUDA("mixed",
                    cudaMemcpyAsync(a.y, a.recvX, a.recvRows * shapeA.hidden * 2, cudaMemcpyDeviceToDevice, s));
    COLL_CHECK_FCCL("mixed", moeCombine(&a, &ca, s));
    COLL_CHECK_FCCL("mixed", fcclAllReduce(sum, sum, count, fcclFloat32, fcclSum, comm, s));
    COLL_CHECK_CUDA("mixed", cudaMemcpyAsync(hostSum, sum, count * sizeof(float), cudaMemcpyDeviceToHost, s));
    COLL_CHECK_CUDA("mixed", cudaStreamSynchronize(s));
    /* The checks download on each bench's own stream: B's on its own, after s is done. */
    moeCheckDispatch(&a, &ca);
    moeCheckDispatch(&b, &cb);
    moeCheckCombine(&b, &cb, cb.ref.call);
    moeCheckCombine(&a, &ca, ca.ref.call);
    const int same = memcmp(firstOut, a.hOut, shapeA.maxTokens * shapeA.hidden * 2) == 0;
    EXPECT_MSG(same, "rank %d: round %d: layout A's first combine differs from its last", rank, round);
    /* The first all-reduce sums (rank + 1) x (i % 7 + 1) over the ranks, the second sums nranks copies of that. */
    const float twice = (float)nranks * (float)(nranks * (nranks + 1) / 2);
    int sums = 1;
    for (size_t i = 0; i < count; i++) sums &= hostSum[i] == twice * (float)(i % 7 + 1);
    EXPECT_MSG(sums, "rank %d: round %d: the all-reduces between the MoE calls are wrong", rank, round);
  }
  cudaFree(sum);
  cudaFreeHost(hostSum);
  cudaFreeHost(firstOut);
  moeBenchFini(&b);
  moeBenchFini(&a);
  return (int)call;
}

static int rankMain(int rank, int nranks, void* arg) {
  const struct moeArgs* args = arg;
  const char* mode = args->mode;
  if (strcmp(mode, "timeout") == 0 || strcmp(mode, "abort") == 0 || strcmp(mode, "dead") == 0)
    return moeFaultMain(rank, nranks, args);
  if (strcmp(mode, "invalid") == 0) {
    moeModeInvalid(args, rank, nranks);
    char name[64];
    snprintf(name, sizeof(name), "moe invalid rank %d", rank);
    return testSummary(name);
  }
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  int calls = 0;
  if (strcmp(mode, "ranks") == 0) calls = modeRanks(args->shared, comm, rank, nranks, args->seed);
  if (strcmp(mode, "large") == 0) calls = modeLarge(args->shared, comm, rank, nranks, args->seed);
  if (strcmp(mode, "blocks") == 0) calls = modeBlocks(args->shared, comm, rank, nranks, args->seed);
  if (strcmp(mode, "graph") == 0) calls = modeGraph(args->shared, comm, rank, nranks, args->seed);
  if (strcmp(mode, "mixed") == 0) calls = modeMixed(args->shared, comm, rank, nranks, args->seed);
  EXPECT_MSG(calls > 0, "rank %d: no call ran", rank);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  if (async != fcclSuccess) fprintf(stderr, "rank %d: %s\n", rank, fcclGetLastError(comm));
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  char name[64];
  snprintf(name, sizeof(name), "moe %s rank %d", mode, rank);
  return testSummary(name);
}

int main(int argc, char** argv) {
  static const char* const modes[] = {"ranks",   "large",   "blocks", "graph", "mixed",
                                      "invalid", "timeout", "abort",  "dead"};
  const char* mode = argc > 1 ? argv[1] : "ranks";
  int known = 0;
  for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) known |= strcmp(mode, modes[i]) == 0;
  const int nranks = argc > 2 ? atoi(argv[2]) : 2;
  if (!known || nranks < 1 || nranks > MOE_REF_MAX_RANKS || argc > 3) {
    fprintf(stderr, "usage: %s ranks|large|blocks|graph|mixed|invalid|timeout|abort|dead [nranks 1..%d]\n", argv[0],
            MOE_REF_MAX_RANKS);
    return 2;
  }
  if ((strcmp(mode, "timeout") == 0 || strcmp(mode, "abort") == 0) && nranks != 2) {
    fprintf(stderr, "%s: the %s mode runs on 2 ranks\n", argv[0], mode);
    return 2;
  }
  if (strcmp(mode, "dead") == 0 && nranks < 2) {
    fprintf(stderr, "%s: the dead mode needs a survivor\n", argv[0]);
    return 2;
  }
  /* Read once, at the communicator's first call, in every forked rank. */
  if (strcmp(mode, "timeout") == 0) setenv("FCCL_TIMEOUT", "300", 1);
  struct moeArgs args = {collSharedNew(nranks), testSeed(), testGpuCount(), mode};
  if (args.gpus < 1) {
    printf("SKIP: no GPU\n");
    collSharedFree(args.shared);
    return TEST_SKIP;
  }
  int codes[MOE_REF_MAX_RANKS];
  /* Inside meson's timeout (test/gpu/meson.build), so that a hung rank is reported here, by name. */
  const int faults = strcmp(mode, "invalid") == 0 || strcmp(mode, "timeout") == 0 || strcmp(mode, "abort") == 0 ||
                     strcmp(mode, "dead") == 0;
  const int failed = testShmForkRanks(args.shared->shm, rankMain, &args, faults ? 270 : 570, codes);
  if (strcmp(mode, "dead") == 0) { /* the last rank is killed; every survivor must pass */
    EXPECT_EQ_INT(failed, 1);
    EXPECT_EQ_INT(codes[nranks - 1], -1);
  } else {
    EXPECT_EQ_INT(failed, 0);
  }
  collSharedFree(args.shared);
  char name[64];
  snprintf(name, sizeof(name), "moe %s", mode);
  return testSummary(name);
}
