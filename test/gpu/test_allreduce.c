/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllReduce on GPUs, forked ranks (exits 77 without a GPU; ranks share GPUs when there are fewer GPUs than
 * ranks, e.g. 3, 4 and 8 ranks on 2). Every result is checked against the host reference (test_allreduce_ref.c)
 * and compared bitwise across ranks; outputs and the bytes around them are poisoned first.
 *
 *   sweep [n]   every type x op x algorithm (forced, and the automatic choice), in place and out of place, unregistered
 *               and registered buffers, counts 0, 1, odd, powers of two and not, element-aligned offsets 0..15 bytes
 *   ranks n     a narrower sweep for n ranks (run with 3, 4 and 8 on 2 GPUs)
 *   large [n]   up to 64 Mi elements (staged rounds, registered two-shot, in-place one-shot pull passes)
 *   wrap        epochs across the 32-bit wrap of the LL flags: stale packets must never satisfy a later call
 *   reinit      communicators destroyed and created again over the same slot: epochs start past the old ones
 *   invalid     argument errors: fcclInvalidArgument, nothing launched, the next call still right
 *   overrun     for contrib/gpu-lab/gpu-sanitize only: every rank's all-reduce reads and writes 256 bytes past
 *               its cudaMalloc'd buffers, which compute-sanitizer memcheck must report from the forked ranks (proof
 *               that the tool sees them); without the tool it passes, the bytes past lie in the same allocation block
 * FCCLTEST_QUICK=1 shortens every mode (for compute-sanitizer); FCCLTEST_SEED repeats the data.
 */
#include "comm.h"
#include "algo.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"
#include "param.h"
#include "test_allreduce_common.h"
#include "transport.h"

#include <unistd.h>

static const int kUnregisteredAlgos[] = {FCCL_ALGO_LL, FCCL_ALGO_LL128, FCCL_ALGO_ONESHOT_PUSH,
                                         FCCL_ALGO_TWOSHOT_STAGED, -1};
static const int kRegisteredAlgos[] = {FCCL_ALGO_LL,           FCCL_ALGO_LL128,       FCCL_ALGO_ONESHOT_PUSH,
                                       FCCL_ALGO_TWOSHOT_STAGED, FCCL_ALGO_ONESHOT_PULL, FCCL_ALGO_TWOSHOT_REG,
                                       -1};

/* The call sequence is the same on every rank: each rank runs the same cases in the same order. */
struct sweepSpec {
  const fcclDataType_t* types;
  int ntypes;
  const size_t* counts;
  int ncounts;
  int allOps; /* 0: sum only, except for the first type */
};

static int runSweep(struct collContext* ctx, const struct sweepSpec* spec, int registered, uint64_t* call) {
  const int* algos = registered ? kRegisteredAlgos : kUnregisteredAlgos;
  const int nalgos = registered ? 7 : 5;
  int problems = 0;
  unsigned k = 0;
  for (int t = 0; t < spec->ntypes; t++) {
    const fcclDataType_t type = spec->types[t];
    const size_t size = fcclTypeSize(type);
    for (int op = 0; op < fcclNumOps; op++) {
      if (!spec->allOps && t > 0 && op != fcclSum) continue;
      for (int a = 0; a < nalgos; a++) {
        for (int inPlace = 0; inPlace < 2; inPlace++) {
          for (int n = 0; n < spec->ncounts; n++, k++) {
            struct collCase c;
            c.type = type;
            c.op = (fcclRedOp_t)op;
            c.algo = algos[a];
            c.inPlace = inPlace;
            c.count = spec->counts[n];
            /* offsets: aligned every fourth case, else element-aligned positions inside a 16-byte unit */
            const unsigned slots = 16 / (unsigned)size;
            c.sendOffset = k % 4 == 0 ? 0 : (size_t)((k * 3 + 1) % slots) * size;
            c.recvOffset = k % 4 == 0 ? 0 : (size_t)((k * 5 + 2) % slots) * size;
            if (!collAlgoApplicable(c.algo, ctx->nranks, c.count * size, registered, inPlace)) continue;
            problems += collRunCase(ctx, &c, (*call)++);
            if (problems > 20) return problems;
          }
        }
      }
    }
  }
  return problems;
}

static int modeSweep(int rank, int nranks, const struct collTestArgs* args, int narrow) {
  static const fcclDataType_t allTypes[] = {fcclFloat32, fcclFloat16, fcclBfloat16, fcclFloat64, fcclInt8,
                                            fcclUint8,   fcclInt32,   fcclUint32,   fcclInt64,   fcclUint64};
  static const fcclDataType_t quickTypes[] = {fcclFloat32, fcclBfloat16, fcclInt8, fcclFloat64};
  static const fcclDataType_t narrowTypes[] = {fcclFloat32, fcclBfloat16, fcclInt32, fcclUint8};
  static const size_t allCounts[] = {0, 1, 2, 3, 7, 16, 33, 255, 1024, 4099, 65537};
  static const size_t quickCounts[] = {0, 1, 17, 4099};
  static const size_t narrowCounts[] = {1, 5, 1000, 70001};
  struct sweepSpec spec;
  if (narrow) {
    spec = (struct sweepSpec){narrowTypes, 4, narrowCounts, collQuick() ? 2 : 4, 0};
  } else if (collQuick()) {
    spec = (struct sweepSpec){quickTypes, 4, quickCounts, 4, 1};
  } else {
    spec = (struct sweepSpec){allTypes, 10, allCounts, 11, 1};
  }
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  uint64_t call = 0;
  const size_t capacity = 1u << 20;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, capacity, registered)) {
      testFail(__FILE__, __LINE__, "rank %d: context setup failed", rank);
      break;
    }
    int problems = runSweep(&ctx, &spec, registered, &call);
    if (rank == 0)
      printf("%s buffers: %llu calls so far, %d problems on rank 0\n", registered ? "registered" : "unregistered",
             (unsigned long long)call, problems);
    collContextFini(&ctx);
    if (problems > 20) break;
  }
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

static int modeLarge(int rank, int nranks, const struct collTestArgs* args) {
  const size_t big = collQuick() ? (1u << 20) + 3 : (64u << 20);
  const size_t mid = collQuick() ? (1u << 18) + 1 : (16u << 20) + 3;
  /* 2-byte elements, registered, out of place, 2 ranks: 16 MiB scatters into the owner's inbox (a share of one
   * 8 MiB staging chunk), 24 MiB + 14 bytes by push into its output, or into the inbox too under
   * allreduce_large_inbox (FCCL_STAGING_BYTES=64 MiB: 16 MiB chunks). */
  const size_t inboxWhole = collQuick() ? (1u << 18) : (8u << 20);
  const size_t inboxOdd = collQuick() ? (1u << 18) + 7 : (12u << 20) + 7;
  const struct {
    int registered;
    struct collCase c;
  } cases[] = {
      {0, {fcclFloat32, fcclSum, -1, 0, big, 0, 0}},
      {0, {fcclBfloat16, fcclSum, -1, 1, big + 5, 2, 2}},
      {0, {fcclFloat64, fcclSum, FCCL_ALGO_TWOSHOT_STAGED, 0, mid / 2 + 7, 8, 0}},
      {0, {fcclInt8, fcclMax, FCCL_ALGO_TWOSHOT_STAGED, 0, mid + 11, 3, 5}},
      {1, {fcclFloat32, fcclSum, FCCL_ALGO_TWOSHOT_REG, 0, big, 0, 0}},
      {1, {fcclFloat32, fcclAvg, FCCL_ALGO_ONESHOT_PULL, 1, mid, 4, 4}},
      {1, {fcclInt32, fcclMax, -1, 1, mid + 1, 0, 0}},
      {1, {fcclFloat16, fcclSum, FCCL_ALGO_TWOSHOT_REG, 0, big - 1, 6, 10}},
      {1, {fcclBfloat16, fcclSum, -1, 0, inboxWhole, 2, 2}},
      {1, {fcclFloat16, fcclMin, FCCL_ALGO_TWOSHOT_REG, 0, inboxOdd, 6, 4}},
      /* LL128 at the table's limit (1 MiB; 1.875 MiB fit per peer for 2 ranks): many line groups per warp. */
      {0, {fcclBfloat16, fcclSum, FCCL_ALGO_LL128, 1, (1u << 19) + 13, 2, 2}},
      {1, {fcclFloat32, fcclMax, FCCL_ALGO_LL128, 0, (1u << 18) - 5, 4, 8}},
  };
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  uint64_t call = 0;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, big * 4 + 64, registered)) {
      testFail(__FILE__, __LINE__, "rank %d: context setup failed", rank);
      break;
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
      if (cases[i].registered != registered) continue;
      const struct collCase* c = &cases[i].c;
      const int scatter =
          collScatterOf(c->algo, nranks, c->count * fcclTypeSize(c->type), registered, c->inPlace);
      /* The 16 MiB case is there for the inbox scatter: make sure it runs it. */
      if (nranks == 2 && !collQuick() && c->count == inboxWhole && c->type == fcclBfloat16)
        EXPECT_EQ_INT(scatter, FCCL_SCATTER_INBOX);
      const int64_t start = collNowNs();
      collRunCase(&ctx, c, call++);
      if (rank == 0)
        printf("%s %s x %zu (%s, %s, scatter %s): checked in %.2f s\n", refTypeName(c->type), refOpName(c->op),
               c->count, c->algo < 0 ? "auto" : fcclAlgoName(c->algo), registered ? "registered" : "staged",
               fcclScatterName(scatter), (double)(collNowNs() - start) / 1e9);
    }
    collContextFini(&ctx);
  }
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* Runs one small checked call with algorithm algo (barrier for algo == FCCL_KERNEL_BARRIER). */
static void smallCall(struct collContext* ctx, int algo, size_t count, uint64_t* call) {
  if (algo == FCCL_KERNEL_BARRIER) {
    EXPECT_EQ_INT(fcclBarrier(ctx->comm, ctx->stream), fcclSuccess);
    EXPECT_EQ_INT(cudaStreamSynchronize(ctx->stream), cudaSuccess);
    return;
  }
  struct collCase c = {fcclFloat32, fcclSum, algo, 0, count, 0, 0};
  collRunCase(ctx, &c, (*call)++);
}

/* Sets every rank's epochs: first a barrier, so that no rank still works on a call of the old epochs. */
static void setEpoch(struct collContext* ctx, uint64_t epoch) {
  EXPECT_EQ_INT(fcclBarrier(ctx->comm, ctx->stream), fcclSuccess);
  EXPECT_EQ_INT(cudaStreamSynchronize(ctx->stream), cudaSuccess);
  EXPECT_EQ_INT(fcclDeviceSetEpochForTest(ctx->comm, epoch), fcclSuccess);
}

static int modeWrap(int rank, int nranks, const struct collTestArgs* args) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, 1u << 20, 0)) return 1;
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, (uint64_t)fcclParamInt(FCCL_PARAM_STAGING_BYTES), &layout);
  const size_t fullLL = layout.llBytes / sizeof(float); /* fills the whole LL region of a parity */
  uint64_t call = 0, epoch = 0;
  const uint64_t wrap1 = 1ull << 32, wrap2 = 2ull << 32;

  /* A full LL region at epoch 2^32 - 6 (even parity, flag 0xfffffffa). */
  setEpoch(&ctx, wrap1 - 6);
  smallCall(&ctx, FCCL_ALGO_LL, fullLL, &call);
  for (int i = 0; i < 3; i++) smallCall(&ctx, FCCL_ALGO_LL, 100 + i, &call);
  /* 2^32 - 2 and 2^32 - 1: the kernels of these calls (not LL ones) clean the two LL parities. */
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(comm, &epoch), fcclSuccess);
  EXPECT_EQ_INT(epoch, wrap1 - 2);
  smallCall(&ctx, FCCL_KERNEL_BARRIER, 0, &call);
  smallCall(&ctx, FCCL_ALGO_TWOSHOT_STAGED, 1000, &call);
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(comm, &epoch), fcclSuccess);
  EXPECT_EQ_INT(epoch, wrap1 + 2); /* low word 0 skipped, parity kept alternating */
  for (int i = 0; i < 3; i++) smallCall(&ctx, FCCL_ALGO_LL, 50 + i, &call);
  /* Jump to the same low word and parity as the full call: without the cleaning, its stale packets would pass. */
  setEpoch(&ctx, wrap2 - 6);
  smallCall(&ctx, FCCL_ALGO_LL, fullLL, &call);
  /* Through the second wrap with LL calls only, then every kind of call past it. */
  for (int i = 0; i < 6; i++) smallCall(&ctx, FCCL_ALGO_LL, fullLL - 7 * (size_t)i, &call);
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(comm, &epoch), fcclSuccess);
  EXPECT_EQ_INT(epoch, wrap2 + 3);
  const int kinds[] = {FCCL_ALGO_LL, FCCL_KERNEL_BARRIER, FCCL_ALGO_ONESHOT_PUSH, FCCL_ALGO_TWOSHOT_STAGED,
                       FCCL_ALGO_LL128, FCCL_ALGO_LL};
  for (int i = 0; i < 6; i++) smallCall(&ctx, kinds[i], 3000 + (size_t)i, &call);
  collContextFini(&ctx);
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

static int modeReinit(int rank, int nranks, const struct collTestArgs* args) {
  const int cycles = collQuick() ? 3 : 20;
  uint64_t call = 0;
  int previousSlot = -1, reused = 0;
  /* A communicator kept alive throughout keeps the arena chunk, so that each new communicator takes the slot the
   * previous one left, with its contents (a device's last communicator frees the chunk). */
  fcclComm_t keeper = collCommCreate(args->shared, rank, nranks, args->gpus, COLL_MAX_IDS - 1);
  if (!keeper) return 1;
  for (int cycle = 0; cycle < cycles && testFailed == 0; cycle++) {
    /* Skewed ranks: the re-init races of docs/ipc.md#the-failures-this-rules-out need one rank to arrive late. */
    if (rank == cycle % nranks) usleep(20000);
    fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, cycle);
    if (!comm) return 1;
    uint64_t epoch = 0;
    EXPECT_EQ_INT(fcclDeviceGetEpochForTest(comm, &epoch), fcclSuccess);
    const int slot = fcclTransportSlotIndex(comm->transport);
    if (cycle > 0 && slot == previousSlot) {
      reused++;
      EXPECT_MSG(epoch > ((uint64_t)cycle << 36), "cycle %d: epoch %llu does not start past the old one", cycle,
                 (unsigned long long)epoch);
    }
    previousSlot = slot;
    struct collContext ctx;
    if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, 1u << 20, 0)) return 1;
    smallCall(&ctx, FCCL_ALGO_LL, 1000 + (size_t)cycle, &call);
    smallCall(&ctx, FCCL_ALGO_TWOSHOT_STAGED, 20000 + (size_t)cycle, &call);
    /* Leave epochs far ahead: the next communicator on this slot must start past them. */
    setEpoch(&ctx, ((uint64_t)(cycle + 1) << 36) + 5);
    smallCall(&ctx, FCCL_ALGO_LL, 77, &call);
    smallCall(&ctx, FCCL_ALGO_ONESHOT_PUSH, 5000, &call);
    collContextFini(&ctx);
    EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  }
  EXPECT_MSG(reused > 0, "no communicator reused its predecessor's slot: the epoch start was not exercised");
  if (rank == 0) printf("%d of %d communicators reused the previous one's slot\n", reused, cycles - 1);
  EXPECT_EQ_INT(fcclCommDestroy(keeper), fcclSuccess);
  args->shared->flags[0] = (int)call;
  return 0;
}

static int modeInvalid(int rank, int nranks, const struct collTestArgs* args) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, 1u << 20, 0)) return 1;
  uint64_t before = 0, after = 0;
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(comm, &before), fcclSuccess);
  float* dev = (float*)(ctx.send.base + COLL_GUARD);
  float* out = (float*)(ctx.recv.base + COLL_GUARD);
  cudaStream_t s = ctx.stream;

  EXPECT_EQ_INT(fcclAllReduce(NULL, out, 5, fcclFloat32, fcclSum, comm, s), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "sendbuf is NULL");
  EXPECT_EQ_INT(fcclAllReduce(dev, NULL, 5, fcclFloat32, fcclSum, comm, s), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclAllReduce(dev, out, 5, (fcclDataType_t)99, fcclSum, comm, s), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclAllReduce(dev, out, 5, fcclFloat32, (fcclRedOp_t)-1, comm, s), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclAllReduce((char*)dev + 2, out, 5, fcclFloat32, fcclSum, comm, s), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not aligned");
  EXPECT_EQ_INT(fcclAllReduce(dev, out, SIZE_MAX / 2, fcclFloat32, fcclSum, comm, s), fcclInvalidArgument);
  float hostBuffer[8];
  EXPECT_EQ_INT(fcclAllReduce(hostBuffer, out, 8, fcclFloat32, fcclSum, comm, s), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclAllReduce(dev, ctx.hostIn, 8, fcclFloat32, fcclSum, comm, s), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "host");
  EXPECT_EQ_INT(fcclAllReduce(dev, out, 8, fcclFloat32, fcclSum, NULL, s), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclBarrier(NULL, s), fcclInvalidArgument);
  /* Forced algorithms that cannot run the call (internal entry point). */
  EXPECT_EQ_INT(fcclAllReduceAlgo(dev, out, 200000, fcclFloat32, fcclSum, comm, s, FCCL_ALGO_LL),
                fcclInvalidArgument);
  EXPECT_EQ_INT(fcclAllReduceAlgo(dev, out, 100, fcclFloat32, fcclSum, comm, s, FCCL_ALGO_ONESHOT_PULL),
                fcclInvalidArgument);
  EXPECT_EQ_INT(fcclAllReduceAlgo(dev, out, 100, fcclFloat32, fcclSum, comm, s, 42), fcclInvalidArgument);
  /* count 0 does nothing, even with NULL buffers. */
  EXPECT_EQ_INT(fcclAllReduce(NULL, NULL, 0, fcclFloat32, fcclSum, comm, s), fcclSuccess);
  if (args->gpus >= 2) {
    struct collForeign foreign;
    collForeignCreate(&foreign, args->gpus, 64);
    EXPECT_EQ_INT(fcclAllReduce(foreign.buffer, out, 8, fcclFloat32, fcclSum, comm, s), fcclInvalidArgument);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "device");
    EXPECT_EQ_INT(fcclAllReduce(dev, out, 8, fcclFloat32, fcclSum, comm, foreign.stream), fcclInvalidArgument);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "stream");
    EXPECT_EQ_INT(fcclBarrier(comm, foreign.stream), fcclInvalidArgument);
    collForeignFree(&foreign); /* checks that the calls left the current device as the caller had it */
  }
  /* Nothing was launched: the epochs did not move, and a real call still agrees with the peers. */
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(comm, &after), fcclSuccess);
  EXPECT_EQ_INT(after, before);
  uint64_t call = 0;
  smallCall(&ctx, FCCL_ALGO_LL, 1000, &call);
  smallCall(&ctx, -1, 200000, &call);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  collContextFini(&ctx);
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

static int modeOverrun(int rank, int nranks, const struct collTestArgs* args) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  const size_t count = 4096; /* floats: 16 KiB, and the call covers 64 more */
  float* send = NULL;
  float* recv = NULL;
  cudaStream_t stream = NULL;
  EXPECT_EQ_INT(cudaMalloc((void**)&send, count * sizeof(float)), cudaSuccess);
  EXPECT_EQ_INT(cudaMalloc((void**)&recv, count * sizeof(float)), cudaSuccess);
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ_INT(cudaMemset(send, 0, count * sizeof(float)), cudaSuccess);
  EXPECT_EQ_INT(fcclAllReduceAlgo(send, recv, count + 64, fcclFloat32, fcclSum, comm, stream, FCCL_ALGO_LL),
                fcclSuccess);
  /* Under memcheck the kernel is stopped and this rank's context is lost; its peer's kernel then times out
   * (FCCL_TIMEOUT), or finishes if our packets reached it first. Either way the communicator is aborted: a destroy
   * would wait (up to the bootstrap timeout) for a peer that aborted. */
  cudaError_t synced = cudaStreamSynchronize(stream);
  fcclResult_t async = fcclInternalError;
  (void)fcclCommGetAsyncError(comm, &async);
  printf("rank %d: the overrunning call ended with %s, communicator state %s\n", rank, cudaGetErrorName(synced),
         fcclGetErrorString(async));
  (void)fcclCommAbort(comm);
  (void)cudaStreamDestroy(stream);
  (void)cudaFree(send);
  (void)cudaFree(recv);
  return 0;
}

static int rankMain(int rank, int nranks, void* arg) {
  const struct collTestArgs* args = arg;
  int code = 0;
  if (strcmp(args->mode, "sweep") == 0) code = modeSweep(rank, nranks, args, 0);
  else if (strcmp(args->mode, "ranks") == 0) code = modeSweep(rank, nranks, args, 1);
  else if (strcmp(args->mode, "large") == 0) code = modeLarge(rank, nranks, args);
  else if (strcmp(args->mode, "wrap") == 0) code = modeWrap(rank, nranks, args);
  else if (strcmp(args->mode, "reinit") == 0) code = modeReinit(rank, nranks, args);
  else if (strcmp(args->mode, "invalid") == 0) code = modeInvalid(rank, nranks, args);
  else if (strcmp(args->mode, "overrun") == 0) code = modeOverrun(rank, nranks, args);
  return collRankSummary("allreduce", args->mode, rank, code);
}

int main(int argc, char** argv) {
  struct collTestArgs args = {argc > 1 ? argv[1] : "sweep", NULL, 0, 0};
  int nranks = argc > 2 ? atoi(argv[2]) : 2;
  const char* modes[] = {"sweep", "ranks", "large", "wrap", "reinit", "invalid", "overrun"};
  int known = 0;
  for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) known |= strcmp(args.mode, modes[i]) == 0;
  if (!known || nranks < 1 || nranks > REF_MAX_RANKS) {
    fprintf(stderr, "usage: %s sweep|ranks|large|wrap|reinit|invalid|overrun [nranks 1..8]\n", argv[0]);
    return 2;
  }
  return collTestMain("allreduce", &args, nranks, rankMain, collQuick() ? 900 : 600, "calls");
}
