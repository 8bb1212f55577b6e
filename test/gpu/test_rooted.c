/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclReduce, fcclBcast, fcclGather, fcclScatter and pre-multiplied sums (fcclRedOpCreatePreMulSum) on GPUs: forked
 * ranks that share the GPUs when there are fewer GPUs than ranks (exits 77 without one). Inputs are random (never
 * zeros; -0.0, subnormals, Inf and NaN among them), outputs and the bytes around them poisoned first; reductions are
 * checked against the float64 host reference, moved data bit for bit (test_rooted_common.h says what each check is).
 *
 *   sweep [n]    every type x op (the reduce: sum, prod, max, min, avg and a pre-multiplied sum with its scalar on
 *                the host or in device memory) x form (auto, and ll, direct, staged forced where they can run) x in
 *                place and out of place x plain and registered buffers, counts 0, 1, odd, up to 65537, offsets inside
 *                a 16-byte unit, every root (a turning one beyond 2 ranks), NULL for the buffers only the root uses
 *   ranks n      a narrower sweep for n ranks (1, 3, 4, 8)
 *   premul [n]   pre-multiplied sums through fcclAllReduce (every algorithm forced where it can run, and auto) and
 *                fcclReduceScatter (every form), every type, host and device scalars (a device scalar written after
 *                the op was made: the kernel reads it when it runs)
 *   compose [n]  the root's fcclReduce bits equal fcclAllReduce's on the same inputs, every type and op
 *   large [n]    blocks up to 16 Mi elements (with a small FCCL_STAGING_BYTES: hundreds of staging rounds)
 *   graph [n]    a pre-multiplied all-reduce with a device scalar, a reduce, a gather, a scatter and a bcast
 *                captured in one CUDA graph, its ops destroyed after the capture, replayed 200 times (quick: 20)
 *                with fresh inputs and a new scalar before each replay, every replay checked
 *   wrap [n]     the LL forms (the bcast's too) across the wrap of the LL flags' epoch bits (the LL area cleaned by
 *                the kernels)
 * FCCLTEST_QUICK=1 shortens every mode; FCCLTEST_SEED repeats the data; FCCLTEST_VERBOSE=1 prints every call.
 */
#include "test_rooted_common.h"

#include "device.h"
#include "device_state.h"
#include "enqueue.h"

#include <stdlib.h>
#include <string.h>

static const fcclDataType_t kAllTypes[] = {fcclFloat32, fcclFloat16, fcclBfloat16, fcclFloat64, fcclInt8,
                                           fcclUint8,   fcclInt32,   fcclUint32,   fcclInt64,   fcclUint64};
static const int kForms[] = {ROOTED_AUTO, FCCL_MOVE_LL, FCCL_MOVE_DIRECT, FCCL_MOVE_STAGED};
#define FORMS 4
/* The reduce's ops: the built-in ones and a pre-multiplied sum. */
static const int kOps[] = {fcclSum, fcclProd, fcclMax, fcclMin, fcclAvg, ROOTED_PREMUL};
#define OPS 6

static size_t largest(const size_t* values, int n) {
  size_t most = 0;
  for (int i = 0; i < n; i++) most = values[i] > most ? values[i] : most;
  return most;
}

/* A context of capacity bytes per side and the device scalar of the pre-multiplied sums. */
static int contextInit(struct collContext* ctx, const struct collTestArgs* args, fcclComm_t comm, int rank, int nranks,
                       size_t capacity, int registered, void** scalar) {
  if (!collContextInit(ctx, args->shared, comm, rank, nranks, args->seed, (capacity + 4095) / 4096 * 4096,
                       registered)) {
    testFail(__FILE__, __LINE__, "rank %d: context setup failed", rank);
    return 0;
  }
  if (!*scalar && cudaMalloc(scalar, 8) != cudaSuccess) {
    testFail(__FILE__, __LINE__, "rank %d: cudaMalloc of the scalar failed", rank);
    return 0;
  }
  rootedSetScalarBuffer(*scalar);
  return 1;
}

/* ---- sweep, ranks --------------------------------------------------------------------------------------------- */

struct sweepSpec {
  const fcclDataType_t* types;
  int ntypes;
  const size_t* counts;
  int ncounts;
  int allOps;    /* 0: every op for the first type, sum and the pre-multiplied sum for the others */
  int everyRoot; /* every case with every root; else the root turns with the cases */
};

static int runSweep(struct collContext* ctx, const struct sweepSpec* spec, uint64_t* call) {
  const int registered = ctx->send.registered, nranks = ctx->nranks;
  int problems = 0;
  unsigned k = 0;
  for (int kind = 0; kind < ROOTED_KINDS; kind++) {
    for (int t = 0; t < spec->ntypes; t++) {
      const fcclDataType_t type = spec->types[t];
      const size_t size = fcclTypeSize(type);
      const int ops = kind == ROOTED_REDUCE ? OPS : 1;
      for (int o = 0; o < ops; o++) {
        if (!spec->allOps && t > 0 && kOps[o] != fcclSum && kOps[o] != ROOTED_PREMUL) continue;
        for (int f = 0; f < FORMS; f++) {
          for (int inPlace = kind == ROOTED_BCAST; inPlace < 2; inPlace++) { /* the bcast: in place only */
            for (int n = 0; n < spec->ncounts; n++, k++) {
              struct rootedCase c;
              memset(&c, 0, sizeof(c));
              c.kind = kind;
              c.type = type;
              c.op = kOps[o];
              c.form = kForms[f];
              c.inPlace = inPlace;
              c.count = spec->counts[n];
              if (!rootedFormApplicable(&c, nranks, registered)) continue;
              const int roots = spec->everyRoot ? nranks : 1;
              for (int r = 0; r < roots; r++) {
                c.root = spec->everyRoot ? r : (int)(k % (unsigned)nranks);
                /* offsets: aligned every fourth case, else element-aligned positions inside a 16-byte unit */
                const unsigned slots = 16 / (unsigned)size;
                c.sendOffset = k % 4 == 0 ? 0 : (size_t)((k * 3 + 1) % slots) * size;
                c.recvOffset = k % 4 == 0 ? 0 : (size_t)((k * 5 + 2) % slots) * size;
                c.nullUnused = (k + (unsigned)r) % 2 == 1;
                c.scalarOnDevice = (k / 2 + (unsigned)r) % 2 == 1;
                problems += rootedRunCase(ctx, &c, (*call)++);
                /* Too many to read: keep making the calls (the peers wait for them), stop checking. */
                if (problems > 20) rootedSetChecking(0);
              }
            }
          }
        }
      }
    }
  }
  return problems;
}

static int modeSweep(int rank, int nranks, const struct collTestArgs* args, int narrow) {
  static const fcclDataType_t quickTypes[] = {fcclFloat32, fcclBfloat16, fcclInt8, fcclFloat64};
  static const fcclDataType_t narrowTypes[] = {fcclFloat32, fcclBfloat16, fcclInt32, fcclUint8};
  /* 65537: above the LL limit of 2 ranks (256 KiB) for 4- and 8-byte elements, below it for the others. */
  static const size_t allCounts[] = {0, 1, 3, 33, 1024, 4099, 65537};
  static const size_t quickCounts[] = {0, 1, 17, 4099};
  static const size_t narrowCounts[] = {1, 5, 1000, 70001};
  struct sweepSpec spec;
  if (narrow)
    spec = (struct sweepSpec){narrowTypes, 4, narrowCounts, collQuick() ? 2 : 4, 0, 0};
  else if (collQuick())
    spec = (struct sweepSpec){quickTypes, 4, quickCounts, 4, 1, nranks <= 2};
  else
    spec = (struct sweepSpec){kAllTypes, 10, allCounts, 7, 1, nranks <= 2};
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  uint64_t call = 0;
  void* scalar = NULL;
  const size_t capacity = (size_t)nranks * largest(spec.counts, spec.ncounts) * 8 + 64;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!contextInit(&ctx, args, comm, rank, nranks, capacity, registered, &scalar)) break;
    const int problems = runSweep(&ctx, &spec, &call);
    if (rank == 0)
      printf("%s buffers: %llu calls so far, %d problems on rank 0\n", registered ? "registered" : "plain",
             (unsigned long long)call, problems);
    collContextFini(&ctx);
  }
  args->shared->flags[0] = (int)call;
  cudaFree(scalar);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- premul ----------------------------------------------------------------------------------------------------- */

static int modePremul(int rank, int nranks, const struct collTestArgs* args) {
  static const size_t counts[] = {1, 17, 4099, 65537, 300001};
  static const int algos[] = {-1,
                              FCCL_ALGO_LL,
                              FCCL_ALGO_LL128,
                              FCCL_ALGO_ONESHOT_PUSH,
                              FCCL_ALGO_ONESHOT_PULL,
                              FCCL_ALGO_TWOSHOT_STAGED,
                              FCCL_ALGO_TWOSHOT_REG};
  const int ncounts = collQuick() ? 3 : 5, ntypes = collQuick() ? 4 : 10;
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  uint64_t call = 0;
  void* scalar = NULL;
  int problems = 0;
  unsigned k = 0;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!contextInit(&ctx, args, comm, rank, nranks, (size_t)nranks * counts[ncounts - 1] * 8 + 64, registered,
                     &scalar))
      break;
    for (int kind = ROOTED_ALLREDUCE; kind <= ROOTED_REDUCESCATTER; kind++) {
      const int forms = kind == ROOTED_ALLREDUCE ? 7 : FORMS;
      for (int t = 0; t < ntypes; t++) {
        for (int f = 0; f < forms; f++) {
          for (int inPlace = 0; inPlace < 2; inPlace++) {
            for (int n = 0; n < ncounts; n++, k++) {
              struct rootedCase c;
              memset(&c, 0, sizeof(c));
              c.kind = kind;
              c.type = kAllTypes[t];
              c.op = ROOTED_PREMUL;
              c.form = kind == ROOTED_ALLREDUCE ? algos[f] : kForms[f];
              c.inPlace = inPlace;
              c.count = counts[n];
              c.scalarOnDevice = k % 2;
              c.sendOffset = k % 3 == 0 ? 0 : fcclTypeSize(c.type) * (k % 2 + 1) % 16;
              c.recvOffset = c.sendOffset;
              if (!rootedFormApplicable(&c, nranks, registered)) continue;
              problems += rootedRunCase(&ctx, &c, call++);
              if (problems > 20) rootedSetChecking(0);
            }
          }
        }
      }
    }
    if (rank == 0)
      printf("%s buffers: %llu calls so far, %d problems on rank 0\n", registered ? "registered" : "plain",
             (unsigned long long)call, problems);
    collContextFini(&ctx);
  }
  args->shared->flags[0] = (int)call;
  cudaFree(scalar);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- compose ---------------------------------------------------------------------------------------------------- */

/* The root's reduce and the all-reduce of the same inputs (call index `call` for both) give the same bits. */
static int composeOne(struct collContext* ctx, fcclDataType_t type, int op, size_t count, int root, uint64_t call) {
  const size_t bytes = count * fcclTypeSize(type);
  char* in = ctx->send.base + COLL_GUARD;
  char* out = ctx->recv.base + COLL_GUARD;
  char what[128];
  snprintf(what, sizeof(what), "compose %s op %d x %zu, root %d", refTypeName(type), op, count, root);
  refFillInput(type, ctx->seed, call, ctx->rank, 0, ctx->hostIn, count);
  COLL_CHECK_CUDA(what, cudaMemcpy(in, ctx->hostIn, bytes, cudaMemcpyHostToDevice));
  fcclRedOp_t redOp = (fcclRedOp_t)op;
  const uint64_t scalar = rootedScalar(type);
  if (op == ROOTED_PREMUL)
    COLL_CHECK_FCCL(what, fcclRedOpCreatePreMulSum(&redOp, (void*)&scalar, type, fcclScalarHostImmediate, ctx->comm));
  COLL_CHECK_FCCL(what, fcclReduce(in, out, count, type, redOp, root, ctx->comm, ctx->stream));
  COLL_CHECK_CUDA(what, cudaStreamSynchronize(ctx->stream));
  unsigned char* reduced = ctx->hostOut;
  if (ctx->rank == root) COLL_CHECK_CUDA(what, cudaMemcpy(reduced, out, bytes, cudaMemcpyDeviceToHost));
  COLL_CHECK_FCCL(what, fcclAllReduce(in, out, count, type, redOp, ctx->comm, ctx->stream));
  COLL_CHECK_CUDA(what, cudaStreamSynchronize(ctx->stream));
  if (op == ROOTED_PREMUL) EXPECT_EQ_INT(fcclRedOpDestroy(redOp, ctx->comm), fcclSuccess);
  if (ctx->rank != root) return 0;
  unsigned char* allReduced = (unsigned char*)ctx->hostOut + bytes;
  COLL_CHECK_CUDA(what, cudaMemcpy(allReduced, out, bytes, cudaMemcpyDeviceToHost));
  if (memcmp(reduced, allReduced, bytes) != 0) {
    testFail(__FILE__, __LINE__, "rank %d: %s: the reduce's bits differ from the all-reduce's", ctx->rank, what);
    return 1;
  }
  testPassed++;
  return 0;
}

static int modeCompose(int rank, int nranks, const struct collTestArgs* args) {
  static const size_t counts[] = {4099, 70001, 1000003};
  const int ncounts = collQuick() ? 2 : 3;
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct collContext ctx;
  void* scalar = NULL;
  /* hostOut holds both results */
  if (!contextInit(&ctx, args, comm, rank, nranks, 2 * counts[ncounts - 1] * 8, 0, &scalar)) return 1;
  uint64_t call = 0;
  int problems = 0;
  for (int t = 0; t < 10; t++)
    for (int o = 0; o < OPS; o++)
      for (int n = 0; n < ncounts; n++, call++)
        problems += composeOne(&ctx, kAllTypes[t], kOps[o], counts[n], (int)(call % (uint64_t)nranks), call);
  if (rank == 0) printf("%llu reduces compared, %d problems on rank 0\n", (unsigned long long)call, problems);
  collContextFini(&ctx);
  cudaFree(scalar);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- large ------------------------------------------------------------------------------------------------------ */

static int modeLarge(int rank, int nranks, const struct collTestArgs* args) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const int smallStaging = layout.chunkBytes < (1u << 20);
  /* 16 Mi elements; with small staging a few hundred chunks of 4-byte elements */
  const size_t big = collQuick() ? (1u << 20) + 3 : smallStaging ? (size_t)(layout.chunkBytes / 4) * 300 : (16u << 20);
  const size_t per = big / (size_t)nranks;
  const int last = nranks - 1;
  struct {
    int registered;
    struct rootedCase c;
  } cases[] = {
      {0, {ROOTED_REDUCE, fcclFloat32, fcclSum, ROOTED_AUTO, 0, big, last, 0, 4, 1, 0}},
      {0, {ROOTED_REDUCE, fcclBfloat16, ROOTED_PREMUL, FCCL_MOVE_STAGED, 1, big - 5, 0, 2, 0, 0, 1}},
      {0, {ROOTED_GATHER, fcclInt8, fcclSum, ROOTED_AUTO, 0, per - 3, 0, 1, 7, 1, 0}},
      {0, {ROOTED_GATHER, fcclFloat64, fcclSum, FCCL_MOVE_STAGED, 1, per / 2 + 1, last, 8, 0, 0, 0}},
      {0, {ROOTED_SCATTER, fcclFloat16, fcclSum, ROOTED_AUTO, 0, per + 1, last, 2, 6, 1, 0}},
      {0, {ROOTED_SCATTER, fcclUint32, fcclSum, FCCL_MOVE_STAGED, 1, per - 1, 0, 4, 0, 0, 0}},
      {0, {ROOTED_BCAST, fcclFloat32, fcclSum, ROOTED_AUTO, 1, big - 7, last, 4, 0, 0, 0}},
      {1, {ROOTED_REDUCE, fcclFloat16, fcclAvg, FCCL_MOVE_DIRECT, 0, big - 1, 0, 2, 6, 0, 0}},
      {1, {ROOTED_REDUCE, fcclInt64, ROOTED_PREMUL, ROOTED_AUTO, 1, big / 2 + 3, last, 8, 0, 1, 0}},
      {1, {ROOTED_GATHER, fcclBfloat16, fcclSum, FCCL_MOVE_DIRECT, 1, per, last, 2, 0, 1, 0}},
      {1, {ROOTED_SCATTER, fcclFloat32, fcclSum, ROOTED_AUTO, 0, per - 9, 0, 4, 12, 1, 0}},
      {1, {ROOTED_SCATTER, fcclInt8, fcclSum, FCCL_MOVE_DIRECT, 1, per + 5, last, 3, 0, 0, 0}},
  };
  const size_t ncases = sizeof(cases) / sizeof(cases[0]);
  size_t capacity = 0;
  for (size_t i = 0; i < ncases; i++)
    if (rootedCapacity(&cases[i].c, nranks) > capacity) capacity = rootedCapacity(&cases[i].c, nranks);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  uint64_t call = 0;
  void* scalar = NULL;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!contextInit(&ctx, args, comm, rank, nranks, capacity, registered, &scalar)) break;
    for (size_t i = 0; i < ncases; i++) {
      if (cases[i].registered != registered || !rootedFormApplicable(&cases[i].c, nranks, registered)) continue;
      const int64_t start = collNowNs();
      rootedRunCase(&ctx, &cases[i].c, call++);
      if (rank == 0)
        printf("case %zu (%s x %zu): checked in %.2f s\n", i, rootedName(cases[i].c.kind), cases[i].c.count,
               (double)(collNowNs() - start) / 1e9);
    }
    collContextFini(&ctx);
  }
  args->shared->flags[0] = (int)call;
  cudaFree(scalar);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- wrap ------------------------------------------------------------------------------------------------------- */

static int modeWrap(int rank, int nranks, const struct collTestArgs* args) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const size_t fullLL = layout.llBytes / sizeof(float);
  struct collContext ctx;
  void* scalar = NULL;
  if (!contextInit(&ctx, args, comm, rank, nranks, (size_t)nranks * layout.llBytes + 64, 0, &scalar)) return 1;
  uint64_t call = 0;
  const uint64_t wraps[] = {1ull << 32, 2ull << 32};
  for (int w = 0; w < 2; w++) {
    EXPECT_EQ_INT(fcclBarrier(comm, ctx.stream), fcclSuccess);
    EXPECT_EQ_INT(cudaStreamSynchronize(ctx.stream), cudaSuccess);
    EXPECT_EQ_INT(fcclDeviceSetEpochForTest(comm, wraps[w] - 7), fcclSuccess);
    /* Seven calls of the LL forms through the epochs whose kernels clean the LL area (low 12 bits 0xffe, 0xfff),
     * with full regions before them, then more after the wrap. The kinds turn by two between the wraps, so that each
     * of the four (the bcast's tokens too) runs in a cleaning call: calls 5 and 6 are the bcast and the gather, then
     * the scatter and the reduce. */
    static const int kinds[] = {ROOTED_REDUCE, ROOTED_BCAST, ROOTED_GATHER, ROOTED_SCATTER};
    for (int i = 0; i < 12; i++) {
      struct rootedCase c;
      memset(&c, 0, sizeof(c));
      c.kind = kinds[(i + 2 * w) % 4];
      c.type = fcclFloat32;
      c.op = c.kind == ROOTED_REDUCE && (i / 4) % 2 ? ROOTED_PREMUL : fcclSum;
      c.inPlace = c.kind == ROOTED_BCAST; /* the bcast is in place */
      c.form = FCCL_MOVE_LL;
      c.count = i < 4 ? fullLL : 100 + (size_t)i;
      c.root = i % nranks;
      c.nullUnused = i % 2;
      rootedRunCase(&ctx, &c, call++);
    }
  }
  collContextFini(&ctx);
  cudaFree(scalar);
  args->shared->flags[0] = 0;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

int rootedModeGraph(int rank, int nranks, struct collShared* shared, uint64_t seed, int gpus);

/* ---- main ------------------------------------------------------------------------------------------------------- */

static const struct {
  const char* name;
  int forkTimeout; /* seconds for the whole run, under meson's timeout (test/gpu/meson.build) */
} kModes[] = {{"sweep", 560}, {"ranks", 560}, {"premul", 560}, {"compose", 560},
              {"large", 560}, {"graph", 560}, {"wrap", 100}};
/* The ranks mode on 8 ranks, whose meson timeout is 900 s. */
#define RANKS8_FORK_TIMEOUT 860

static int rankMain(int rank, int nranks, void* arg) {
  const struct collTestArgs* args = arg;
  int code = 0;
  if (strcmp(args->mode, "sweep") == 0)
    code = modeSweep(rank, nranks, args, 0);
  else if (strcmp(args->mode, "ranks") == 0)
    code = modeSweep(rank, nranks, args, 1);
  else if (strcmp(args->mode, "premul") == 0)
    code = modePremul(rank, nranks, args);
  else if (strcmp(args->mode, "compose") == 0)
    code = modeCompose(rank, nranks, args);
  else if (strcmp(args->mode, "large") == 0)
    code = modeLarge(rank, nranks, args);
  else if (strcmp(args->mode, "graph") == 0)
    code = rootedModeGraph(rank, nranks, args->shared, args->seed, args->gpus);
  else if (strcmp(args->mode, "wrap") == 0)
    code = modeWrap(rank, nranks, args);
  return collRankSummary("rooted", args->mode, rank, code);
}

int main(int argc, char** argv) {
  struct collTestArgs args = {argc > 1 ? argv[1] : "sweep", NULL, 0, 0};
  const int nranks = argc > 2 ? atoi(argv[2]) : 2;
  int forkTimeout = 0;
  for (size_t i = 0; i < sizeof(kModes) / sizeof(kModes[0]); i++)
    if (strcmp(args.mode, kModes[i].name) == 0) forkTimeout = kModes[i].forkTimeout;
  if (strcmp(args.mode, "ranks") == 0 && nranks >= 8) forkTimeout = RANKS8_FORK_TIMEOUT;
  if (forkTimeout == 0 || nranks < 1 || nranks > FCCL_DEVICE_MAX_RANKS) {
    fprintf(stderr, "usage: %s sweep|ranks|premul|compose|large|graph|wrap [nranks 1..8]\n", argv[0]);
    return 2;
  }
  return collTestMain("rooted", &args, nranks, rankMain, forkTimeout, "calls");
}
