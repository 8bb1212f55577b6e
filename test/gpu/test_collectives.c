/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllGather, fcclReduceScatter and fcclBroadcast on GPUs, forked ranks (exits 77 without a GPU; ranks share GPUs
 * when there are fewer GPUs than ranks: config.allowSharedDevice). Outputs and the bytes around them are poisoned
 * first; all-gather and broadcast outputs are checked bit for bit, reduce-scatter outputs against the float64 host
 * reference with the all-reduce's tolerance rules (test_allreduce_ref.c), and outputs that are the same on every
 * rank are compared bitwise across ranks (hashes).
 *
 *   sweep [n]     every type x op (reduce-scatter) x form (auto, and ll, direct, staged, copy forced where they can
 *                 run: direct, and copy for all-gather and broadcast, on registered buffers, LL for blocks within
 *                 the LL area) x in place and out of place x
 *                 plain and registered buffers, counts 0, 1, odd, powers of two and not, element-aligned offsets
 *                 0..15 bytes, every root of the broadcast, NULL sendbufs on the ranks that are not the root
 *   ranks n       a narrower sweep for n ranks (1, 3, 4, 8), the broadcast's root turning with the cases
 *   large [n]     blocks up to 64 Mi elements in all (the staged forms in many rounds, the copy engines on
 *                 registered buffers in and out of place); with a small
 *                 FCCL_STAGING_BYTES the sizes shrink to a few hundred staging chunks, so that rounds and parity
 *                 reuse are exercised at moderate sizes
 *   compose [n]   a reduce-scatter then an all-gather give bit for bit what fcclAllReduce gives on the same input
 *   graph [n]     AG, RS, BC and an all-reduce captured in one CUDA graph and replayed 1,000 times (quick: 50),
 *                 fresh inputs uploaded before every replay, checked every 10th; eager calls between replays; the
 *                 captured plain buffers above the LL sizes are registered for the graph by the library; the copy
 *                 forms on registered buffers (with FCCL_COPY_MOVE_MIN=1 also the auto nodes above the LL sizes,
 *                 on the buffers registered for the graph)
 *   mixed [n]     10,000 collectives of every kind (and barriers) back to back on one stream without a host
 *                 synchronisation (quick: 1,000), one in 20 checked at the end
 *   wrap [n]      epochs across the 32-bit wrap of the LL flags with the three collectives' LL forms
 *   invalid [n]   argument errors return fcclInvalidArgument with a message and launch nothing (the epochs stay);
 *                 real calls are right afterwards
 *   envforce      FCCL_ALLGATHER_ALGO, FCCL_REDUCESCATTER_ALGO, FCCL_BROADCAST_ALGO choose the kernel (seen in the
 *                 COLL trace), fall back to the table where the form cannot run, and lose to a forced form
 *   envinvalid    values that are no form: a warning naming the variable, and the calls choose by size
 *   envmismatch   FCCL_BROADCAST_ALGO set on one rank only: the init fails on every rank (fcclInvalidUsage)
 *   envcopy       FCCL_ALLGATHER_ALGO=copy, FCCL_BROADCAST_ALGO=copy run the copy engines on registered buffers at
 *                 any size and the table's form on plain ones; FCCL_REDUCESCATTER_ALGO=copy is refused (warned)
 *   rootplain     a broadcast whose root sends from a plain buffer into receive buffers registered on every rank:
 *                 only the receive buffers count (fccl.h), so every rank runs the direct form, and right
 *   inplacemix    an all-gather in place on one rank (inside its registered output) and out of place from a plain
 *                 buffer on the others: the same, the send buffers play no part
 * FCCLTEST_QUICK=1 shortens every mode; FCCLTEST_SEED repeats the data; FCCLTEST_VERBOSE=1 prints every call.
 * The files: test_collectives.c (the sweeps, large blocks, the LL wrap, argument errors, and main),
 * test_collectives_stream.c (calls in sequence on one stream: compose, mixed), test_collectives_graph.c (graph),
 * test_collectives_choice.c (how a form is chosen: the FCCL_*_ALGO variables, registration the ranks do not share).
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

static const fcclDataType_t kAllTypes[] = {fcclFloat32, fcclFloat16, fcclBfloat16, fcclFloat64, fcclInt8,
                                           fcclUint8,   fcclInt32,   fcclUint32,   fcclInt64,   fcclUint64};
const int kForms[FORMS] = {MOVE_AUTO, FCCL_MOVE_LL, FCCL_MOVE_DIRECT, FCCL_MOVE_STAGED, FCCL_MOVE_COPY};

size_t alignUp(size_t value, size_t align) { return (value + align - 1) / align * align; }

/* The same on every rank: each rank makes the same calls in the same order. */
struct sweepSpec {
  const fcclDataType_t* types;
  int ntypes;
  const size_t* counts;
  int ncounts;
  int allOps;    /* 0: sum only, except for the first type */
  int everyRoot; /* 1: every case of the broadcast with every root; 0: the root turns with the cases */
};

static int runSweep(struct collContext* ctx, const struct sweepSpec* spec, uint64_t* call) {
  const int registered = ctx->send.registered;
  int problems = 0;
  unsigned k = 0;
  for (int kind = 0; kind < MOVE_KINDS; kind++) {
    for (int t = 0; t < spec->ntypes; t++) {
      const fcclDataType_t type = spec->types[t];
      const size_t size = fcclTypeSize(type);
      const int ops = kind == MOVE_REDUCESCATTER ? fcclNumOps : 1;
      for (int op = 0; op < ops; op++) {
        if (!spec->allOps && t > 0 && op != fcclSum) continue;
        for (int f = 0; f < FORMS; f++) {
          for (int inPlace = 0; inPlace < 2; inPlace++) {
            for (int n = 0; n < spec->ncounts; n++, k++) {
              const size_t count = spec->counts[n];
              if (!moveFormApplicable(kind, kForms[f], ctx->nranks, count * size, registered)) continue;
              const int roots = kind == MOVE_BROADCAST && spec->everyRoot ? ctx->nranks : 1;
              for (int r = 0; r < roots; r++) {
                struct moveCase c;
                memset(&c, 0, sizeof(c));
                c.kind = kind;
                c.type = type;
                c.op = (fcclRedOp_t)op;
                c.form = kForms[f];
                c.inPlace = inPlace;
                c.count = count;
                c.root = spec->everyRoot ? r : (int)(k % (unsigned)ctx->nranks);
                /* offsets: aligned every fourth case, else element-aligned positions inside a 16-byte unit */
                const unsigned slots = 16 / (unsigned)size;
                c.sendOffset = k % 4 == 0 ? 0 : (size_t)((k * 3 + 1) % slots) * size;
                c.recvOffset = k % 4 == 0 ? 0 : (size_t)((k * 5 + 2) % slots) * size;
                c.nullSend = kind == MOVE_BROADCAST && !inPlace && (k + (unsigned)r) % 2 == 1;
                problems += moveRunCase(ctx, &c, (*call)++);
                /* Too many to read: keep making the calls (the peers wait for them), stop checking. */
                if (problems > 20) moveSetChecking(0);
              }
            }
          }
        }
      }
    }
  }
  return problems;
}

size_t largestCount(const size_t* counts, int n) {
  size_t largest = 0;
  for (int i = 0; i < n; i++) largest = counts[i] > largest ? counts[i] : largest;
  return largest;
}

static int modeSweep(int rank, int nranks, const struct collTestArgs* args, int narrow) {
  static const fcclDataType_t quickTypes[] = {fcclFloat32, fcclBfloat16, fcclInt8, fcclFloat64};
  static const fcclDataType_t narrowTypes[] = {fcclFloat32, fcclBfloat16, fcclInt32, fcclUint8};
  /* 65537: above the LL limit of 2 ranks (256 KiB) for 4- and 8-byte elements, below it for the others. */
  static const size_t allCounts[] = {0, 1, 2, 3, 7, 16, 33, 255, 1024, 4099, 65537};
  static const size_t quickCounts[] = {0, 1, 17, 4099};
  static const size_t narrowCounts[] = {1, 5, 1000, 70001};
  struct sweepSpec spec;
  if (narrow)
    spec = (struct sweepSpec){narrowTypes, 4, narrowCounts, collQuick() ? 2 : 4, 0, 0};
  else if (collQuick())
    spec = (struct sweepSpec){quickTypes, 4, quickCounts, 4, 1, 1};
  else
    spec = (struct sweepSpec){kAllTypes, 10, allCounts, 11, 1, 1};
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  uint64_t call = 0;
  /* The larger buffer of any case (nranks blocks of 8-byte elements) and an offset below 16 bytes. */
  const size_t capacity = (size_t)nranks * largestCount(spec.counts, spec.ncounts) * 8 + 64;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, capacity, registered)) {
      testFail(__FILE__, __LINE__, "rank %d: context setup failed", rank);
      break;
    }
    const int problems = runSweep(&ctx, &spec, &call);
    if (rank == 0)
      printf("%s buffers: %llu calls so far, %d problems on rank 0\n", registered ? "registered" : "plain",
             (unsigned long long)call, problems);
    collContextFini(&ctx);
  }
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- large ----------------------------------------------------------------------------------------------------- */

struct placedCase {
  int registered;
  struct moveCase c;
};

static int modeLarge(int rank, int nranks, const struct collTestArgs* args) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  /* A chunk below 1 MiB (FCCL_STAGING_BYTES=131072: 32 KiB for 2 ranks): 256 chunks of 4-byte elements in the larger
   * buffer, a few hundred rounds per call. */
  const int smallStaging = layout.chunkBytes < (1u << 20);
  const size_t big = collQuick() ? (1u << 20) + 3 : smallStaging ? (size_t)(layout.chunkBytes / 4) * 256 : (64u << 20);
  const size_t per = big / (size_t)nranks; /* an all-gather's or reduce-scatter's block: nranks of them fill big */
  const size_t ll = layout.llBytes;
  const int last = nranks - 1;
  const struct placedCase cases[] = {
      /* plain: the automatic choice beyond the LL sizes is staged */
      {0, {MOVE_ALLGATHER, fcclFloat32, fcclSum, MOVE_AUTO, 0, per, 0, 0, 0, 0}},
      {0, {MOVE_ALLGATHER, fcclInt8, fcclSum, FCCL_MOVE_STAGED, 1, per - 3, 0, 5, 0, 0}},
      {0, {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, MOVE_AUTO, 0, per, 0, 0, 0, 0}},
      {0, {MOVE_REDUCESCATTER, fcclFloat64, fcclMax, FCCL_MOVE_STAGED, 0, per / 2 + 7, 0, 8, 0, 0}},
      {0, {MOVE_REDUCESCATTER, fcclBfloat16, fcclAvg, FCCL_MOVE_STAGED, 1, per - 5, 0, 2, 0, 0}},
      {0, {MOVE_BROADCAST, fcclFloat32, fcclSum, MOVE_AUTO, 0, big, last, 0, 4, 1}},
      {0, {MOVE_BROADCAST, fcclUint8, fcclSum, FCCL_MOVE_STAGED, 1, big - 13, 0, 3, 0, 0}},
      /* LL at its limit: the whole LL area of a parity per writer */
      {0, {MOVE_ALLGATHER, fcclBfloat16, fcclSum, FCCL_MOVE_LL, 0, ll / 2, 0, 2, 6, 0}},
      {0, {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, FCCL_MOVE_LL, 1, ll / 4 - 1, 0, 4, 0, 0}},
      {0, {MOVE_BROADCAST, fcclInt8, fcclSum, FCCL_MOVE_LL, 0, ll, last, 1, 7, 0}},
      /* registered: direct, and staged forced on registered buffers */
      {1, {MOVE_ALLGATHER, fcclBfloat16, fcclSum, FCCL_MOVE_DIRECT, 1, per - 1, 0, 2, 0, 0}},
      {1, {MOVE_ALLGATHER, fcclFloat64, fcclSum, MOVE_AUTO, 0, per / 2 + 1, 0, 8, 0, 0}},
      {1, {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, FCCL_MOVE_DIRECT, 0, per, 0, 0, 0, 0}},
      {1, {MOVE_REDUCESCATTER, fcclInt32, fcclMin, MOVE_AUTO, 1, per + 1, 0, 4, 0, 0}},
      {1, {MOVE_REDUCESCATTER, fcclFloat16, fcclProd, FCCL_MOVE_DIRECT, 0, per - 7, 0, 6, 10, 0}},
      {1, {MOVE_BROADCAST, fcclFloat16, fcclSum, FCCL_MOVE_DIRECT, 0, big - 1, 1 % nranks, 2, 6, 1}},
      {1, {MOVE_BROADCAST, fcclInt64, fcclSum, FCCL_MOVE_STAGED, 1, big / 2 + 3, nranks / 2, 8, 0, 0}},
      {1, {MOVE_ALLGATHER, fcclFloat32, fcclSum, FCCL_MOVE_LL, 1, ll / 4, 0, 0, 0, 0}},
      /* registered: the copy engines, in and out of place, odd sizes and offsets, the broadcast from two roots */
      {1, {MOVE_ALLGATHER, fcclFloat32, fcclSum, FCCL_MOVE_COPY, 0, per, 0, 4, 8, 0}},
      {1, {MOVE_ALLGATHER, fcclInt8, fcclSum, FCCL_MOVE_COPY, 1, per - 3, 0, 5, 0, 0}},
      {1, {MOVE_ALLGATHER, fcclFloat16, fcclSum, FCCL_MOVE_COPY, 0, per / 2 + 1, 0, 2, 6, 0}},
      {1, {MOVE_BROADCAST, fcclBfloat16, fcclSum, FCCL_MOVE_COPY, 0, big - 5, last, 2, 6, 1}},
      {1, {MOVE_BROADCAST, fcclUint8, fcclSum, FCCL_MOVE_COPY, 1, big - 13, 1 % nranks, 3, 0, 0}},
      {1, {MOVE_BROADCAST, fcclFloat64, fcclSum, FCCL_MOVE_COPY, 0, big / 8 + 1, 0, 8, 0, 0}},
  };
  const size_t ncases = sizeof(cases) / sizeof(cases[0]);
  size_t capacity = 0;
  for (size_t i = 0; i < ncases; i++) {
    const size_t send = moveSendBytes(&cases[i].c, nranks), recv = moveRecvBytes(&cases[i].c, nranks);
    capacity = send > capacity ? send : capacity;
    capacity = recv > capacity ? recv : capacity;
  }
  capacity = alignUp(capacity, 4096);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  if (rank == 0)
    printf("staging chunk %llu bytes, LL area %llu bytes per writer, larger buffer up to %zu elements\n",
           (unsigned long long)layout.chunkBytes, (unsigned long long)layout.llBytes, big);
  uint64_t call = 0;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, capacity, registered)) {
      testFail(__FILE__, __LINE__, "rank %d: context setup failed", rank);
      break;
    }
    for (size_t i = 0; i < ncases; i++) {
      if (cases[i].registered != registered) continue;
      const struct moveCase* c = &cases[i].c;
      const size_t blockBytes = c->count * fcclTypeSize(c->type);
      if (!moveFormApplicable(c->kind, c->form, nranks, blockBytes, registered)) continue; /* LL of 1 rank's area */
      const int form = c->form == MOVE_AUTO ? moveAutoForm(c->kind, nranks, blockBytes, registered) : c->form;
      const int64_t start = collNowNs();
      moveRunCase(&ctx, c, call++);
      if (rank == 0) {
        char what[192], rounds[48] = "";
        moveDescribe(c, call - 1, what, sizeof(what));
        if (form == FCCL_MOVE_STAGED && layout.chunkBytes > 0)
          snprintf(rounds, sizeof(rounds), ", %llu rounds",
                   (unsigned long long)((blockBytes + layout.chunkBytes - 1) / layout.chunkBytes));
        printf("%s (%s buffers, runs %s%s): checked in %.2f s\n", what, registered ? "registered" : "plain",
               moveFormName(form), rounds, (double)(collNowNs() - start) / 1e9);
      }
    }
    collContextFini(&ctx);
  }
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- wrap ------------------------------------------------------------------------------------------------------ */

static void wrapCall(struct collContext* ctx, int kind, int form, size_t count, int root, uint64_t* call) {
  const struct moveCase c = {kind, fcclFloat32, fcclSum, form, 0, count, root % ctx->nranks, 0, 0, 0};
  moveRunCase(ctx, &c, (*call)++);
}

static int modeWrap(int rank, int nranks, const struct collTestArgs* args) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const size_t fullLL = layout.llBytes / sizeof(float); /* a block that fills a writer's LL region of a parity */
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, alignUp((size_t)nranks * layout.llBytes,
                                                                                   1u << 20), 0))
    return 1;
  uint64_t call = 0, epoch = 0;
  const uint64_t wrap1 = 1ull << 32, wrap2 = 2ull << 32;
  const int last = nranks - 1;

  /* Full LL regions at epoch 2^32 - 6 (even parity, flag 0xfffffffa) from every form's LL kernel. */
  moveSetEpoch(&ctx, wrap1 - 6);
  wrapCall(&ctx, MOVE_ALLGATHER, FCCL_MOVE_LL, fullLL, 0, &call);
  wrapCall(&ctx, MOVE_REDUCESCATTER, FCCL_MOVE_LL, 100, 0, &call);
  wrapCall(&ctx, MOVE_BROADCAST, FCCL_MOVE_LL, fullLL, last, &call);
  wrapCall(&ctx, MOVE_BROADCAST, FCCL_MOVE_LL, 101, 0, &call);
  /* 2^32 - 2 and 2^32 - 1: the kernels of these calls (not LL ones) clean the two LL parities. */
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(comm, &epoch), fcclSuccess);
  EXPECT_EQ_INT(epoch, wrap1 - 2);
  wrapCall(&ctx, MOVE_BROADCAST, FCCL_MOVE_STAGED, 1000, last, &call);
  wrapCall(&ctx, MOVE_REDUCESCATTER, FCCL_MOVE_STAGED, 1000, 0, &call);
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(comm, &epoch), fcclSuccess);
  EXPECT_EQ_INT(epoch, wrap1 + 2); /* low word 0 skipped, parity kept alternating */
  wrapCall(&ctx, MOVE_ALLGATHER, FCCL_MOVE_LL, 50, 0, &call);
  wrapCall(&ctx, MOVE_BROADCAST, FCCL_MOVE_LL, 51, 1, &call);
  wrapCall(&ctx, MOVE_REDUCESCATTER, FCCL_MOVE_LL, 52, 0, &call);
  /* The same low word and parity as the full calls: without the cleaning their stale packets would pass. */
  moveSetEpoch(&ctx, wrap2 - 6);
  wrapCall(&ctx, MOVE_ALLGATHER, FCCL_MOVE_LL, fullLL, 0, &call);
  /* Through the second wrap with LL calls only (the LL kernels clean too), then every form past it. */
  for (int i = 0; i < 6; i++) wrapCall(&ctx, i % MOVE_KINDS, FCCL_MOVE_LL, fullLL - 7 * (size_t)i, i, &call);
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(comm, &epoch), fcclSuccess);
  EXPECT_EQ_INT(epoch, wrap2 + 3);
  for (int kind = 0; kind < MOVE_KINDS; kind++)
    for (int f = 1; f < FORMS; f++)
      if (moveFormApplicable(kind, kForms[f], nranks, 3000 * sizeof(float), 0))
        wrapCall(&ctx, kind, kForms[f], 3000 + (size_t)f, kind + f, &call);
  EXPECT_EQ_INT(fcclBarrier(comm, ctx.stream), fcclSuccess);
  wrapCall(&ctx, MOVE_BROADCAST, MOVE_AUTO, 5, last, &call);
  collContextFini(&ctx);
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- invalid --------------------------------------------------------------------------------------------------- */

/* res must be fcclInvalidArgument with a message saying `says` (NULL: any message). */
static void expectInvalid(fcclResult_t res, const char* says, const char* what) {
  EXPECT_MSG(res == fcclInvalidArgument, "%s: returned %s, want fcclInvalidArgument", what, fcclGetErrorString(res));
  const char* message = fcclGetLastError(NULL);
  EXPECT_MSG(message && message[0], "%s: no message", what);
  if (says) EXPECT_STR_CONTAINS(message, says);
}

static int modeInvalid(int rank, int nranks, const struct collTestArgs* args) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, 4u << 20, 0)) return 1;
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  uint64_t before = 0, after = 0;
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(comm, &before), fcclSuccess);
  float* in = (float*)(ctx.send.base + COLL_GUARD);
  float* out = (float*)(ctx.recv.base + COLL_GUARD);
  cudaStream_t s = ctx.stream;
  float hostBuffer[8];
  /* Every call below fails the same way on every rank: a rank that launched would wait for peers that did not. */
  expectInvalid(fcclAllGather(NULL, out, 5, fcclFloat32, comm, s), "sendbuf is NULL", "AG NULL sendbuf");
  expectInvalid(fcclAllGather(in, NULL, 5, fcclFloat32, comm, s), "recvbuf is NULL", "AG NULL recvbuf");
  expectInvalid(fcclReduceScatter(NULL, out, 5, fcclFloat32, fcclSum, comm, s), "sendbuf is NULL", "RS NULL sendbuf");
  expectInvalid(fcclReduceScatter(in, NULL, 5, fcclFloat32, fcclSum, comm, s), "recvbuf is NULL", "RS NULL recvbuf");
  expectInvalid(fcclBroadcast(in, NULL, 5, fcclFloat32, 0, comm, s), "is NULL", "BC NULL recvbuf");
  expectInvalid(fcclBroadcast(NULL, NULL, 5, fcclFloat32, nranks - 1, comm, s), "is NULL", "BC NULL buffers");
  expectInvalid(fcclAllGather(in, out, 5, (fcclDataType_t)99, comm, s), "datatype", "AG bad type");
  expectInvalid(fcclReduceScatter(in, out, 5, (fcclDataType_t)-1, fcclSum, comm, s), "datatype", "RS bad type");
  expectInvalid(fcclReduceScatter(in, out, 5, fcclFloat32, (fcclRedOp_t)fcclNumOps, comm, s), "op", "RS bad op");
  expectInvalid(fcclBroadcast(in, out, 5, (fcclDataType_t)fcclNumTypes, 0, comm, s), "datatype", "BC bad type");
  expectInvalid(fcclBroadcast(in, out, 5, fcclFloat32, nranks, comm, s), "root", "BC root nranks");
  expectInvalid(fcclBroadcast(in, out, 5, fcclFloat32, -1, comm, s), "root", "BC root -1");
  expectInvalid(fcclBroadcast(NULL, NULL, 0, fcclFloat32, nranks + 3, comm, s), "root", "BC root, count 0");
  expectInvalid(fcclAllGather((char*)in + 2, out, 5, fcclFloat32, comm, s), "not aligned", "AG misaligned send");
  expectInvalid(fcclAllGather(in, (char*)out + 4, 5, fcclFloat64, comm, s), "not aligned", "AG misaligned recv");
  expectInvalid(fcclReduceScatter(in, (char*)out + 1, 5, fcclBfloat16, fcclSum, comm, s), "not aligned",
                "RS misaligned recv");
  expectInvalid(fcclReduceScatter((char*)in + 6, out, 5, fcclInt64, fcclMax, comm, s), "not aligned",
                "RS misaligned send");
  /* A misaligned recvbuf is every rank's error (a root's misaligned sendbuf would be the root's alone). */
  expectInvalid(fcclBroadcast(in, (char*)out + 4, 5, fcclFloat64, 0, comm, s), "not aligned", "BC misaligned recv");
  expectInvalid(fcclAllGather(hostBuffer, out, 8, fcclFloat32, comm, s), "host", "AG host sendbuf");
  expectInvalid(fcclReduceScatter(in, ctx.hostIn, 2, fcclFloat32, fcclSum, comm, s), "host", "RS host recvbuf");
  expectInvalid(fcclBroadcast(in, ctx.hostIn, 8, fcclFloat32, 0, comm, s), "host", "BC host recvbuf");
  expectInvalid(fcclAllGather(in, out, SIZE_MAX / 4, fcclFloat32, comm, s), "overflows", "AG count overflow");
  expectInvalid(fcclReduceScatter(in, out, SIZE_MAX / 4, fcclFloat32, fcclSum, comm, s), "overflows",
                "RS count overflow"); /* its sendbuf: nranks x count */
  expectInvalid(fcclAllGather(in, out, 8, fcclFloat32, NULL, s), "invalid communicator", "AG NULL comm");
  expectInvalid(fcclReduceScatter(in, out, 8, fcclFloat32, fcclSum, NULL, s), "invalid communicator", "RS NULL comm");
  expectInvalid(fcclBroadcast(in, out, 8, fcclFloat32, 0, NULL, s), "invalid communicator", "BC NULL comm");
  /* Forced forms that cannot run the call (internal entry points), and kernels of another collective. */
  const size_t beyondLL = layout.llBytes / sizeof(float) + 1;
  expectInvalid(fcclAllGatherAlgo(in, out, beyondLL, fcclFloat32, comm, s, FCCL_KERNEL_ALLGATHER_LL), "LL area",
                "AG LL beyond the LL area");
  expectInvalid(fcclReduceScatterAlgo(in, out, beyondLL, fcclFloat32, fcclSum, comm, s, FCCL_KERNEL_REDUCESCATTER_LL),
                "LL area", "RS LL beyond the LL area");
  expectInvalid(fcclBroadcastAlgo(in, out, beyondLL, fcclFloat32, 0, comm, s, FCCL_KERNEL_BROADCAST_LL), "LL area",
                "BC LL beyond the LL area");
  expectInvalid(fcclAllGatherAlgo(in, out, 100, fcclFloat32, comm, s, FCCL_KERNEL_ALLGATHER_DIRECT),
                "not registered", "AG direct on plain buffers");
  expectInvalid(fcclReduceScatterAlgo(in, out, 100, fcclInt8, fcclMin, comm, s, FCCL_KERNEL_REDUCESCATTER_DIRECT),
                "not registered", "RS direct on plain buffers");
  expectInvalid(fcclBroadcastAlgo(in, out, 100, fcclFloat32, 0, comm, s, FCCL_KERNEL_BROADCAST_DIRECT),
                "not registered", "BC direct on plain buffers");
  expectInvalid(fcclAllGatherAlgo(in, out, 100, fcclFloat32, comm, s, FCCL_FORM_ALLGATHER_COPY), "not registered",
                "AG copy on plain buffers");
  expectInvalid(fcclBroadcastAlgo(in, out, 100, fcclFloat32, nranks - 1, comm, s, FCCL_FORM_BROADCAST_COPY),
                "not registered", "BC copy on plain buffers");
  expectInvalid(fcclAllGatherAlgo(in, out, 100, fcclFloat32, comm, s, FCCL_KERNEL_BROADCAST_LL), "unknown algorithm",
                "AG with a broadcast kernel");
  expectInvalid(fcclReduceScatterAlgo(in, out, 100, fcclFloat32, fcclSum, comm, s, FCCL_ALGO_TWOSHOT_STAGED),
                "unknown algorithm", "RS with an all-reduce algorithm");
  expectInvalid(fcclBroadcastAlgo(in, out, 100, fcclFloat32, 0, comm, s, FCCL_ALGO_IDS), "unknown algorithm",
                "BC with no kernel");
  expectInvalid(fcclAllReduceAlgo(in, out, 100, fcclFloat32, fcclSum, comm, s, FCCL_KERNEL_REDUCESCATTER_STAGED),
                "unknown algorithm", "AR with a reduce-scatter kernel");
  /* Count 0 does nothing, even with NULL buffers and a forced form that could not run anything. */
  EXPECT_EQ_INT(fcclAllGather(NULL, NULL, 0, fcclFloat32, comm, s), fcclSuccess);
  EXPECT_EQ_INT(fcclReduceScatter(NULL, NULL, 0, fcclFloat32, fcclProd, comm, s), fcclSuccess);
  EXPECT_EQ_INT(fcclBroadcast(NULL, NULL, 0, fcclFloat32, 0, comm, s), fcclSuccess);
  EXPECT_EQ_INT(fcclAllGatherAlgo(in, out, 0, fcclFloat32, comm, s, FCCL_KERNEL_ALLGATHER_DIRECT), fcclSuccess);
  if (args->gpus >= 2) {
    struct collForeign foreign;
    collForeignCreate(&foreign, args->gpus, 256);
    expectInvalid(fcclAllGather(foreign.buffer, out, 8, fcclFloat32, comm, s), "device", "AG foreign sendbuf");
    expectInvalid(fcclBroadcast(in, foreign.buffer, 8, fcclFloat32, 0, comm, s), "device", "BC foreign recvbuf");
    expectInvalid(fcclReduceScatter(in, out, 8, fcclFloat32, fcclSum, comm, foreign.stream), "stream",
                  "RS foreign stream");
    collForeignFree(&foreign); /* checks that the calls left the current device as the caller had it */
  }
  /* Nothing was launched: the epochs did not move. The next calls still agree with the peers. */
  EXPECT_EQ_INT(fcclDeviceGetEpochForTest(comm, &after), fcclSuccess);
  EXPECT_EQ_INT(after, before);
  uint64_t call = 0;
  const struct moveCase after1 = {MOVE_ALLGATHER, fcclFloat32, fcclSum, FCCL_MOVE_LL, 0, 1000, 0, 0, 0, 0};
  const struct moveCase after2 = {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, MOVE_AUTO, 0, 100003, 0, 0, 0, 0};
  const struct moveCase after3 = {MOVE_BROADCAST, fcclInt8, fcclSum, FCCL_MOVE_STAGED, 0, 5001, nranks - 1, 1, 3, 1};
  moveRunCase(&ctx, &after1, call++);
  moveRunCase(&ctx, &after2, call++);
  moveRunCase(&ctx, &after3, call++);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  collContextFini(&ctx);
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- main ------------------------------------------------------------------------------------------------------ */

static const struct {
  const char* name;
  int forkTimeout; /* seconds for the whole run, under meson's timeout */
} kModes[] = {{"sweep", 560},  {"ranks", 860},   {"large", 560},      {"compose", 560},     {"graph", 560},
              {"mixed", 560},  {"wrap", 100},    {"invalid", 100},    {"envforce", 100},    {"envinvalid", 100},
              {"envmismatch", 100}, {"rootplain", 100}, {"inplacemix", 100}, {"envcopy", 100}};

static int rankMain(int rank, int nranks, void* arg) {
  const struct collTestArgs* args = arg;
  int code = 0;
  if (strcmp(args->mode, "sweep") == 0) code = modeSweep(rank, nranks, args, 0);
  else if (strcmp(args->mode, "ranks") == 0) code = modeSweep(rank, nranks, args, 1);
  else if (strcmp(args->mode, "large") == 0) code = modeLarge(rank, nranks, args);
  else if (strcmp(args->mode, "compose") == 0) code = modeCompose(rank, nranks, args);
  else if (strcmp(args->mode, "graph") == 0) code = modeGraph(rank, nranks, args);
  else if (strcmp(args->mode, "mixed") == 0) code = modeMixed(rank, nranks, args);
  else if (strcmp(args->mode, "wrap") == 0) code = modeWrap(rank, nranks, args);
  else if (strcmp(args->mode, "invalid") == 0) code = modeInvalid(rank, nranks, args);
  else if (strcmp(args->mode, "envforce") == 0) code = modeEnvForce(rank, nranks, args);
  else if (strcmp(args->mode, "envinvalid") == 0) code = modeEnvInvalid(rank, nranks, args);
  else if (strcmp(args->mode, "envmismatch") == 0) code = modeEnvMismatch(rank, nranks, args);
  else if (strcmp(args->mode, "envcopy") == 0) code = modeEnvCopy(rank, nranks, args);
  else if (strcmp(args->mode, "rootplain") == 0) code = modeUnshared(rank, nranks, args, MOVE_BROADCAST);
  else if (strcmp(args->mode, "inplacemix") == 0) code = modeUnshared(rank, nranks, args, MOVE_ALLGATHER);
  return collRankSummary("collectives", args->mode, rank, code);
}

int main(int argc, char** argv) {
  struct collTestArgs args = {argc > 1 ? argv[1] : "sweep", NULL, 0, 0};
  const int nranks = argc > 2 ? atoi(argv[2]) : 2;
  int forkTimeout = 0;
  for (size_t i = 0; i < sizeof(kModes) / sizeof(kModes[0]); i++)
    if (strcmp(args.mode, kModes[i].name) == 0) forkTimeout = kModes[i].forkTimeout;
  const int minRanks = strcmp(args.mode, "inplacemix") == 0 || strcmp(args.mode, "envmismatch") == 0 ? 2 : 1;
  if (forkTimeout == 0 || nranks < minRanks || nranks > REF_MAX_RANKS) {
    fprintf(stderr, "usage: %s sweep|ranks|large|compose|graph|mixed|wrap|invalid|envforce|envinvalid|envmismatch|"
            "envcopy|rootplain|inplacemix [nranks 1..8]\n", argv[0]);
    return 2;
  }
  return collTestMain("collectives", &args, nranks, rankMain, forkTimeout, "calls");
}
