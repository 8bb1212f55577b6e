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
 */
#include "algo.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"
#include "test_collectives_common.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct testArgs {
  const char* mode;
  struct collShared* shared;
  uint64_t seed;
  int gpus;
};

static const fcclDataType_t kAllTypes[] = {fcclFloat32, fcclFloat16, fcclBfloat16, fcclFloat64, fcclInt8,
                                           fcclUint8,   fcclInt32,   fcclUint32,   fcclInt64,   fcclUint64};
static const int kForms[] = {MOVE_AUTO, FCCL_MOVE_LL, FCCL_MOVE_DIRECT, FCCL_MOVE_STAGED, FCCL_MOVE_COPY};
#define FORMS 5

static size_t alignUp(size_t value, size_t align) { return (value + align - 1) / align * align; }

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

static size_t largestCount(const size_t* counts, int n) {
  size_t largest = 0;
  for (int i = 0; i < n; i++) largest = counts[i] > largest ? counts[i] : largest;
  return largest;
}

static int modeSweep(int rank, int nranks, const struct testArgs* args, int narrow) {
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

static int modeLarge(int rank, int nranks, const struct testArgs* args) {
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

/* ---- compose --------------------------------------------------------------------------------------------------- */

struct composeCase {
  fcclDataType_t type;
  fcclRedOp_t op;
  size_t count;    /* each rank's block: the all-reduce runs nranks x count */
  int rsForm;      /* MOVE_AUTO or forced */
  int agForm;
  int arAlgo;      /* -1 or an all-reduce algorithm */
  int rsInPlace;   /* the reduce-scatter in place in the input, the all-gather out of place from there; else the
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
    testFail(__FILE__, __LINE__, "rank %d: %s: %zu of %zu elements differ from the all-reduce's bits, first [%zu]: "
             "%s after reduce-scatter + all-gather, %s from the all-reduce", rank, what, differ, total, first,
             refFormat(k->type, refLoadBits(k->type, host + bytes, first), a, sizeof(a)),
             refFormat(k->type, refLoadBits(k->type, host, first), b, sizeof(b)));
    problems++;
  } else {
    testPassed++;
  }
  if (call < COLL_MAX_HASHES) ctx->shared->hashes[call][rank] = refHash(host + bytes, bytes) | 1;
  return problems;
}

static int modeCompose(int rank, int nranks, const struct testArgs* args) {
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

/* ---- graph ----------------------------------------------------------------------------------------------------- */

/* A node of the captured sequence: a move, or an all-reduce of count elements (allReduce; out of place). */
struct graphNode {
  int registered;
  int allReduce;
  struct moveCase c;
};

#define ROOT_LAST (-1)
/* Plain buffers of auto nodes above the LL sizes are registered for the graph at capture (out of place: receive and
 * send buffer), where every rank agrees on in place. */
static const struct graphNode kGraphNodes[] = {
    {1, 0, {MOVE_ALLGATHER, fcclFloat32, fcclSum, FCCL_MOVE_LL, 0, 1000, 0, 0, 4, 0}},
    {0, 0, {MOVE_ALLGATHER, fcclBfloat16, fcclSum, MOVE_AUTO, 0, 300001, 0, 2, 6, 0}},   /* graph-registered */
    {0, 0, {MOVE_ALLGATHER, fcclInt8, fcclSum, FCCL_MOVE_STAGED, 1, 70001, 0, 3, 0, 0}},
    {0, 0, {MOVE_ALLGATHER, fcclBfloat16, fcclSum, MOVE_AUTO, 1, 200001, 0, 2, 0, 0}},
    {0, 0, {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, MOVE_AUTO, 0, 100003, 0, 4, 8, 0}}, /* graph-registered */
    {1, 0, {MOVE_REDUCESCATTER, fcclBfloat16, fcclMax, FCCL_MOVE_DIRECT, 1, 5001, 0, 2, 0, 0}},
    {0, 0, {MOVE_REDUCESCATTER, fcclFloat16, fcclAvg, FCCL_MOVE_LL, 0, 2047, 0, 6, 2, 0}},
    {0, 0, {MOVE_BROADCAST, fcclFloat32, fcclSum, MOVE_AUTO, 0, 200000, ROOT_LAST, 0, 4, 1}},
    {1, 0, {MOVE_BROADCAST, fcclInt32, fcclSum, FCCL_MOVE_DIRECT, 1, 30001, 0, 4, 0, 0}},
    {0, 0, {MOVE_BROADCAST, fcclBfloat16, fcclSum, FCCL_MOVE_LL, 0, 777, 1, 2, 2, 0}},
    {0, 0, {MOVE_BROADCAST, fcclFloat32, fcclSum, MOVE_AUTO, 1, 150000, 0, 0, 0, 0}},     /* graph-registered */
    {0, 1, {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, MOVE_AUTO, 0, 5000, 0, 0, 12, 0}}, /* all-reduce */
    /* the copy engines: memcpy nodes between barrier kernels, in and out of place */
    {1, 0, {MOVE_ALLGATHER, fcclBfloat16, fcclSum, FCCL_MOVE_COPY, 0, 100001, 0, 2, 6, 0}},
    {1, 0, {MOVE_ALLGATHER, fcclInt8, fcclSum, FCCL_MOVE_COPY, 1, 777, 0, 3, 0, 0}},
    {1, 0, {MOVE_BROADCAST, fcclFloat64, fcclSum, FCCL_MOVE_COPY, 0, 30001, ROOT_LAST, 8, 0, 1}},
    {1, 0, {MOVE_BROADCAST, fcclFloat16, fcclSum, FCCL_MOVE_COPY, 1, 4097, 1, 2, 0, 0}},
};
#define GRAPH_NODES ((int)(sizeof(kGraphNodes) / sizeof(kGraphNodes[0])))
#define GRAPH_SETS 3 /* input sets in turn: each replay's inputs differ from the previous replay's */

struct graphPlace {
  struct moveCase c; /* the root resolved for the rank count */
  char* sendbuf;
  char* recvbuf;
  char* whole;
  size_t wholeBytes;
  size_t sendElems;
  void* hostIn[GRAPH_SETS];
  void* hostOut; /* whole + its guards */
};

static uint64_t graphRegistrations(fcclComm_t comm) {
  fcclMemStats_t stats;
  memset(&stats, 0, sizeof(stats));
  stats.size = sizeof(stats);
  EXPECT_EQ_INT(fcclCommGetMemStats(comm, &stats), fcclSuccess);
  return stats.commGraphRegistrations;
}

/* Checks node j's output in p->hostOut against input set `set`; returns 1 when it is wrong. */
static int graphCheckNode(int rank, int nranks, uint64_t seed, int j, const struct graphPlace* p, int set,
                          int replay, uint64_t hashIndex, struct collShared* shared) {
  const unsigned char* host = p->hostOut;
  const unsigned char* out = host + COLL_GUARD;
  const size_t size = fcclTypeSize(p->c.type);
  int bad = 0;
  for (int i = 0; i < COLL_GUARD; i++)
    bad |= host[i] != COLL_POISON || host[COLL_GUARD + p->wholeBytes + i] != COLL_POISON;
  EXPECT_MSG(!bad, "rank %d replay %d node %d: bytes next to the output were overwritten", rank, replay, j);
  const uint64_t call = (uint64_t)set * GRAPH_NODES + (uint64_t)j;
  char message[512];
  size_t wrong;
  size_t outBytes;
  if (kGraphNodes[j].allReduce) {
    /* An all-reduce's element i reduces element i of every rank: the reduce-scatter check of rank 0's block. */
    wrong = moveCheckOutput(&p->c, seed, call, 0, 0, nranks, out, message, sizeof(message));
    outBytes = p->c.count * size;
  } else {
    if (p->c.inPlace && p->c.kind == MOVE_REDUCESCATTER) {
      const size_t own = (size_t)rank * p->c.count * size, blockBytes = p->c.count * size;
      const char* in = p->hostIn[set];
      EXPECT_MSG(memcmp(out, in, own) == 0 &&
                     memcmp(out + own + blockBytes, in + own + blockBytes, p->wholeBytes - own - blockBytes) == 0,
                 "rank %d replay %d node %d: the other ranks' input blocks changed", rank, replay, j);
      out += own;
    }
    wrong = moveCheckOutput(&p->c, seed, call, 0, rank, nranks, out, message, sizeof(message));
    outBytes = moveRecvElems(p->c.kind, p->c.count, nranks) * size;
  }
  char what[192];
  moveDescribe(&p->c, call, what, sizeof(what));
  EXPECT_MSG(wrong == 0, "rank %d replay %d node %d (%s%s): %zu wrong: %s", rank, replay, j,
             kGraphNodes[j].allReduce ? "all-reduce; " : "", what, wrong, message);
  if ((kGraphNodes[j].allReduce || p->c.kind != MOVE_REDUCESCATTER) && hashIndex < COLL_MAX_HASHES)
    shared->hashes[hashIndex][rank] = refHash(out, outBytes) | 1;
  return bad || wrong != 0;
}

static int modeGraph(int rank, int nranks, const struct testArgs* args) {
  const char* setting = getenv("FCCL_GRAPH_REGISTER");
  const int graphRegister = setting == NULL || atoi(setting) != 0;
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct graphPlace place[GRAPH_NODES];
  memset(place, 0, sizeof(place));
  size_t region = 0;
  for (int j = 0; j < GRAPH_NODES; j++) {
    struct moveCase c = kGraphNodes[j].c;
    c.root = c.root == ROOT_LAST ? nranks - 1 : c.root % nranks;
    place[j].c = c;
    const size_t send = kGraphNodes[j].allReduce ? c.sendOffset + c.count * fcclTypeSize(c.type)
                                                   : moveSendBytes(&c, nranks);
    const size_t recv = kGraphNodes[j].allReduce ? c.recvOffset + c.count * fcclTypeSize(c.type)
                                                   : moveRecvBytes(&c, nranks);
    region = send > region ? send : region;
    region = recv > region ? recv : region;
  }
  region = alignUp(region + 2 * COLL_GUARD, 4096);
  /* [plain, registered] send and receive buffers; node j uses region j of its kind's. */
  struct collBuffer send[2], recv[2];
  for (int r = 0; r < 2; r++)
    if (!collBufferCreate(comm, &send[r], GRAPH_NODES * region, r) ||
        !collBufferCreate(comm, &recv[r], GRAPH_NODES * region, r))
      return 1;
  cudaStream_t stream;
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ_INT(cudaMemset(send[r].base, COLL_POISON, send[r].capacity + 2 * COLL_GUARD), cudaSuccess);
    EXPECT_EQ_INT(cudaMemset(recv[r].base, COLL_POISON, recv[r].capacity + 2 * COLL_GUARD), cudaSuccess);
  }
  for (int j = 0; j < GRAPH_NODES; j++) {
    struct graphPlace* p = &place[j];
    const int reg = kGraphNodes[j].registered;
    char* sendRegion = send[reg].base + COLL_GUARD + (size_t)j * region + COLL_GUARD;
    char* recvRegion = recv[reg].base + COLL_GUARD + (size_t)j * region + COLL_GUARD;
    const size_t size = fcclTypeSize(p->c.type);
    if (kGraphNodes[j].allReduce) {
      p->sendbuf = sendRegion + p->c.sendOffset;
      p->recvbuf = p->whole = recvRegion + p->c.recvOffset;
      p->wholeBytes = p->c.count * size;
      p->sendElems = p->c.count;
    } else {
      movePlaceIn(sendRegion, recvRegion, &p->c, rank, nranks, &p->sendbuf, &p->recvbuf, &p->whole, &p->wholeBytes);
      p->sendElems = moveSendElems(p->c.kind, p->c.count, nranks);
    }
    for (int s = 0; s < GRAPH_SETS; s++) {
      EXPECT_EQ_INT(cudaMallocHost(&p->hostIn[s], p->sendElems * size + 16), cudaSuccess);
      refFillInput(p->c.type, args->seed, (uint64_t)s * GRAPH_NODES + (uint64_t)j, rank, 0, p->hostIn[s],
                   p->sendElems);
    }
    EXPECT_EQ_INT(cudaMallocHost(&p->hostOut, p->wholeBytes + 2 * COLL_GUARD), cudaSuccess);
  }
  if (testFailed) return 1;

  /* Capture (global mode, as PyTorch captures): barrier, the nodes, barrier. */
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  EXPECT_EQ_INT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ_INT(fcclBarrier(comm, stream), fcclSuccess);
  for (int j = 0; j < GRAPH_NODES; j++) {
    const struct graphPlace* p = &place[j];
    fcclResult_t res = kGraphNodes[j].allReduce
                           ? fcclAllReduce(p->sendbuf, p->recvbuf, p->c.count, p->c.type, p->c.op, comm, stream)
                           : moveCall(&p->c, p->sendbuf, p->recvbuf, comm, stream);
    EXPECT_MSG(res == fcclSuccess, "rank %d: capturing node %d: %s: %s", rank, j, fcclGetErrorString(res),
               fcclGetLastError(NULL));
  }
  EXPECT_EQ_INT(fcclBarrier(comm, stream), fcclSuccess);
  EXPECT_EQ_INT(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ_INT(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  if (testFailed) return 1;
  /* The out-of-place all-gather and reduce-scatter above the LL sizes register their two buffers each. */
  const uint64_t registrations = graphRegistrations(comm);
  if (graphRegister)
    EXPECT_MSG(registrations >= 4, "rank %d: %llu buffers registered for the graph, want at least 4", rank,
               (unsigned long long)registrations);
  else
    EXPECT_EQ_INT(registrations, 0);

  struct collContext eager;
  if (!collContextInit(&eager, args->shared, comm, rank, nranks, args->seed ^ 0x5555, 1u << 20, 0)) return 1;
  const int replays = collQuick() ? 50 : 1000;
  uint64_t eagerCall = 0, checks = 0;
  int bad = 0;
  const int64_t start = collNowNs();
  for (int replay = 0; replay < replays; replay++) { /* every replay, whatever it finds: the peers wait for them */
    const int set = replay % GRAPH_SETS;
    for (int j = 0; j < GRAPH_NODES; j++) {
      const struct graphPlace* p = &place[j];
      EXPECT_EQ_INT(cudaMemsetAsync(p->whole - COLL_GUARD, COLL_POISON, p->wholeBytes + 2 * COLL_GUARD, stream),
                    cudaSuccess);
      if (p->sendbuf)
        EXPECT_EQ_INT(cudaMemcpyAsync(p->sendbuf, p->hostIn[set], p->sendElems * fcclTypeSize(p->c.type),
                                      cudaMemcpyHostToDevice, stream),
                      cudaSuccess);
    }
    EXPECT_EQ_INT(cudaGraphLaunch(exec, stream), cudaSuccess);
    if ((replay % 10 == 9 || replay == replays - 1) && bad < 5) {
      for (int j = 0; j < GRAPH_NODES; j++)
        EXPECT_EQ_INT(cudaMemcpyAsync(place[j].hostOut, place[j].whole - COLL_GUARD,
                                      place[j].wholeBytes + 2 * COLL_GUARD, cudaMemcpyDeviceToHost, stream),
                      cudaSuccess);
      EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
      for (int j = 0; j < GRAPH_NODES; j++)
        bad += graphCheckNode(rank, nranks, args->seed, j, &place[j], set, replay, checks * GRAPH_NODES + j,
                              args->shared);
      checks++;
    }
    /* Every 100 replays eager calls on another stream: graph and eager calls share the epoch counters. */
    if (replay % 100 == 99) {
      const struct moveCase staged = {MOVE_ALLGATHER, fcclFloat32, fcclSum, FCCL_MOVE_STAGED, 0, 4097, 0, 4, 0, 0};
      const struct moveCase ll = {MOVE_BROADCAST, fcclBfloat16, fcclSum, FCCL_MOVE_LL, 0, 1000,
                                  (replay / 100) % nranks, 2, 2, 1};
      EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
      bad += moveRunCase(&eager, &staged, 1000000 + eagerCall++);
      bad += moveRunCase(&eager, &ll, 1000000 + eagerCall++);
    }
  }
  EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
  if (rank == 0)
    printf("%d replays of %d nodes (+ 2 barriers), %llu checked, %llu buffers registered for the graph, %.2f s\n",
           replays, GRAPH_NODES, (unsigned long long)checks, (unsigned long long)registrations,
           (double)(collNowNs() - start) / 1e9);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  args->shared->flags[0] = (int)(checks * GRAPH_NODES);

  /* The graph's end releases its registrations (CUDA runs the release on a thread of its own; the communicator's
   * next call finishes it): bounded polling. */
  EXPECT_EQ_INT(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ_INT(cudaGraphDestroy(graph), cudaSuccess);
  int released = 0;
  for (int attempt = 0; attempt < 1000 && !released; attempt++) {
    EXPECT_EQ_INT(fcclAllGather(NULL, NULL, 0, fcclFloat32, comm, stream), fcclSuccess);
    released = graphRegistrations(comm) == 0;
    if (!released) usleep(10000);
  }
  EXPECT_MSG(released, "rank %d: graph registrations still held 10 s after the graph was destroyed", rank);

  collContextFini(&eager);
  EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
  for (int j = 0; j < GRAPH_NODES; j++) {
    for (int s = 0; s < GRAPH_SETS; s++) cudaFreeHost(place[j].hostIn[s]);
    cudaFreeHost(place[j].hostOut);
  }
  for (int r = 0; r < 2; r++) {
    collBufferDestroy(comm, &send[r]);
    collBufferDestroy(comm, &recv[r]);
  }
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- mixed ----------------------------------------------------------------------------------------------------- */

enum { MIXED_ALLGATHER = MOVE_ALLGATHER, MIXED_REDUCESCATTER = MOVE_REDUCESCATTER, MIXED_BROADCAST = MOVE_BROADCAST,
       MIXED_ALLREDUCE, MIXED_BARRIER, MIXED_KINDS };
#define MIXED_TYPES 4
static const fcclDataType_t kMixedTypes[MIXED_TYPES] = {fcclFloat32, fcclBfloat16, fcclInt8, fcclFloat64};
static const size_t kMixedCounts[] = {1, 7, 1000, 4099, 33001, 70001};
#define MIXED_COUNTS ((int)(sizeof(kMixedCounts) / sizeof(kMixedCounts[0])))
#define MIXED_MAX_COUNT 70001
#define MIXED_POOL_CALL 4000000u /* the input "call" of type t's pool: MIXED_POOL_CALL + t */

/* Call i of the sequence: a pure function of i and the rank count, the same on every rank. */
struct mixedCall {
  int what;            /* MIXED_* */
  int registered;
  int t;               /* kMixedTypes index */
  struct moveCase c;   /* for an all-reduce: a reduce-scatter case of count (checked as rank 0's block) */
  size_t poolFirst;    /* elements into the type's input pool where sendbuf starts */
  int sample;          /* checked at the end: its own output region, after the previous sample's of its kind */
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

static int modeMixed(int rank, int nranks, const struct testArgs* args) {
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

/* ---- wrap ------------------------------------------------------------------------------------------------------ */

static void wrapCall(struct collContext* ctx, int kind, int form, size_t count, int root, uint64_t* call) {
  const struct moveCase c = {kind, fcclFloat32, fcclSum, form, 0, count, root % ctx->nranks, 0, 0, 0};
  moveRunCase(ctx, &c, (*call)++);
}

static int modeWrap(int rank, int nranks, const struct testArgs* args) {
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

static int modeInvalid(int rank, int nranks, const struct testArgs* args) {
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
    int current = -1;
    EXPECT_EQ_INT(cudaGetDevice(&current), cudaSuccess);
    const int otherDevice = (current + 1) % args->gpus;
    float* foreign = NULL;
    cudaStream_t foreignStream = NULL;
    EXPECT_EQ_INT(cudaSetDevice(otherDevice), cudaSuccess);
    EXPECT_EQ_INT(cudaMalloc((void**)&foreign, 256), cudaSuccess);
    EXPECT_EQ_INT(cudaStreamCreateWithFlags(&foreignStream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ_INT(cudaSetDevice(current), cudaSuccess);
    expectInvalid(fcclAllGather(foreign, out, 8, fcclFloat32, comm, s), "device", "AG foreign sendbuf");
    expectInvalid(fcclBroadcast(in, foreign, 8, fcclFloat32, 0, comm, s), "device", "BC foreign recvbuf");
    expectInvalid(fcclReduceScatter(in, out, 8, fcclFloat32, fcclSum, comm, foreignStream), "stream",
                  "RS foreign stream");
    int now = -1;
    EXPECT_EQ_INT(cudaGetDevice(&now), cudaSuccess);
    EXPECT_EQ_INT(now, current);
    EXPECT_EQ_INT(cudaSetDevice(otherDevice), cudaSuccess);
    EXPECT_EQ_INT(cudaStreamDestroy(foreignStream), cudaSuccess);
    EXPECT_EQ_INT(cudaFree(foreign), cudaSuccess);
    EXPECT_EQ_INT(cudaSetDevice(current), cudaSuccess);
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

/* ---- the FCCL_*_ALGO variables --------------------------------------------------------------------------------- */

/* The COLL trace lines, kept to look for the kernel a call ran ("fcclAllGather 1000 x float32 ...: allgather_staged,
 * 1 x 512, ..."). */
#define LOG_KEEP 65536
static char logText[LOG_KEEP];
static size_t logUsed;

static void keepLog(void* userData, fcclLogLevel_t level, const char* subsystem, const char* line) {
  (void)userData;
  (void)level;
  (void)subsystem;
  const size_t n = strlen(line);
  if (logUsed + n + 2 >= LOG_KEEP) logUsed = 0; /* only the latest lines matter */
  memcpy(logText + logUsed, line, n);
  logText[logUsed + n] = '\n';
  logText[logUsed + n + 1] = '\0';
  logUsed += n + 1;
}

static void clearLog(void) {
  logUsed = 0;
  logText[0] = '\0';
}

/* The call ran `kernel` (its name in the trace, between ": " and ","). */
static void expectKernel(const char* kernel, const char* what) {
  char needle[64];
  snprintf(needle, sizeof(needle), ": %s, ", kernel);
  EXPECT_MSG(strstr(logText, needle) != NULL, "%s: the trace does not show %s: %s", what, kernel, logText);
  clearLog();
}

static int modeEnvForce(int rank, int nranks, const struct testArgs* args) {
  setenv("FCCL_ALLGATHER_ALGO", "staged", 1);
  setenv("FCCL_REDUCESCATTER_ALGO", "ll", 1);
  setenv("FCCL_BROADCAST_ALGO", "direct", 1);
  setenv("FCCL_DEBUG", "TRACE", 1);
  setenv("FCCL_DEBUG_SUBSYS", "COLL", 1);
  EXPECT_EQ_INT(fcclSetLogCallback(keepLog, NULL), fcclSuccess);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const size_t beyondLL = layout.llBytes / sizeof(float) + 5;
  uint64_t call = 0;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed,
                         (size_t)nranks * beyondLL * sizeof(float) + 64, registered))
      return 1;
    clearLog();
    /* Forced by the variable, at a size where the table would run LL. */
    const struct moveCase ag = {MOVE_ALLGATHER, fcclFloat32, fcclSum, MOVE_AUTO, 0, 1000, 0, 0, 0, 0};
    moveRunCase(&ctx, &ag, call++);
    expectKernel("allgather_staged", "FCCL_ALLGATHER_ALGO=staged");
    const struct moveCase rs = {MOVE_REDUCESCATTER, fcclFloat32, fcclMax, MOVE_AUTO, 0, 1000, 0, 0, 0, 0};
    moveRunCase(&ctx, &rs, call++);
    expectKernel("reducescatter_ll", "FCCL_REDUCESCATTER_ALGO=ll");
    /* Beyond what the form can run: the table's choice. */
    const struct moveCase rsBig = {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, MOVE_AUTO, 0, beyondLL, 0, 0, 0, 0};
    moveRunCase(&ctx, &rsBig, call++);
    expectKernel(registered ? "reducescatter_direct" : "reducescatter_staged", "FCCL_REDUCESCATTER_ALGO=ll, too large");
    const struct moveCase bc = {MOVE_BROADCAST, fcclFloat32, fcclSum, MOVE_AUTO, 0, 1000, nranks - 1, 0, 0, 1};
    moveRunCase(&ctx, &bc, call++);
    expectKernel(registered ? "broadcast_direct" : "broadcast_ll", "FCCL_BROADCAST_ALGO=direct");
    /* A form forced by the caller wins over the variable. */
    const struct moveCase agLL = {MOVE_ALLGATHER, fcclFloat32, fcclSum, FCCL_MOVE_LL, 0, 1000, 0, 0, 0, 0};
    moveRunCase(&ctx, &agLL, call++);
    expectKernel("allgather_ll", "forced LL under FCCL_ALLGATHER_ALGO=staged");
    collContextFini(&ctx);
  }
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  EXPECT_EQ_INT(fcclSetLogCallback(NULL, NULL), fcclSuccess);
  return 0;
}

/* FCCL_ALLGATHER_ALGO=copy and FCCL_BROADCAST_ALGO=copy: the copy engines on registered buffers at any size, the
 * table's choice on plain ones; FCCL_REDUCESCATTER_ALGO=copy is no form of the reduce-scatter (warned, by size). */
static int modeEnvCopy(int rank, int nranks, const struct testArgs* args) {
  setenv("FCCL_ALLGATHER_ALGO", "copy", 1);
  setenv("FCCL_REDUCESCATTER_ALGO", "copy", 1);
  setenv("FCCL_BROADCAST_ALGO", "copy", 1);
  setenv("FCCL_DEBUG", "TRACE", 1);
  setenv("FCCL_DEBUG_SUBSYS", "COLL", 1);
  EXPECT_EQ_INT(fcclSetLogCallback(keepLog, NULL), fcclSuccess);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  EXPECT_STR_CONTAINS(logText, "FCCL_REDUCESCATTER_ALGO=copy is not one of auto, ll, direct, staged;");
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  const size_t beyondLL = layout.llBytes / sizeof(float) + 5;
  uint64_t call = 0;
  for (int registered = 0; registered < 2; registered++) {
    struct collContext ctx;
    if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed,
                         (size_t)nranks * beyondLL * sizeof(float) + 64, registered))
      return 1;
    clearLog();
    const struct moveCase ag = {MOVE_ALLGATHER, fcclFloat32, fcclSum, MOVE_AUTO, 0, 1000, 0, 4, 8, 0};
    moveRunCase(&ctx, &ag, call++);
    expectKernel(registered ? "allgather_copy" : "allgather_ll", "FCCL_ALLGATHER_ALGO=copy, 1000 floats");
    const struct moveCase agBig = {MOVE_ALLGATHER, fcclFloat32, fcclSum, MOVE_AUTO, 1, beyondLL, 0, 0, 0, 0};
    moveRunCase(&ctx, &agBig, call++);
    expectKernel(registered ? "allgather_copy" : "allgather_staged", "FCCL_ALLGATHER_ALGO=copy, beyond LL");
    const struct moveCase bc = {MOVE_BROADCAST, fcclBfloat16, fcclSum, MOVE_AUTO, 0, 1001, nranks - 1, 2, 6, 1};
    moveRunCase(&ctx, &bc, call++);
    expectKernel(registered ? "broadcast_copy" : "broadcast_ll", "FCCL_BROADCAST_ALGO=copy");
    const struct moveCase rs = {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, MOVE_AUTO, 0, beyondLL, 0, 0, 0, 0};
    moveRunCase(&ctx, &rs, call++);
    expectKernel(registered ? "reducescatter_direct" : "reducescatter_staged", "FCCL_REDUCESCATTER_ALGO=copy");
    /* A form forced by the caller wins over the variable. */
    const struct moveCase agLL = {MOVE_ALLGATHER, fcclFloat32, fcclSum, FCCL_MOVE_LL, 0, 1000, 0, 0, 0, 0};
    moveRunCase(&ctx, &agLL, call++);
    expectKernel("allgather_ll", "forced LL under FCCL_ALLGATHER_ALGO=copy");
    collContextFini(&ctx);
  }
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  EXPECT_EQ_INT(fcclSetLogCallback(NULL, NULL), fcclSuccess);
  return 0;
}

static int modeEnvInvalid(int rank, int nranks, const struct testArgs* args) {
  setenv("FCCL_ALLGATHER_ALGO", "fastest", 1);
  setenv("FCCL_REDUCESCATTER_ALGO", "twoshot", 1);
  setenv("FCCL_BROADCAST_ALGO", "LL", 1); /* names are lower case */
  EXPECT_EQ_INT(fcclSetLogCallback(keepLog, NULL), fcclSuccess);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  EXPECT_STR_CONTAINS(logText, "FCCL_ALLGATHER_ALGO=fastest is not one of auto, ll, direct, staged");
  EXPECT_STR_CONTAINS(logText, "FCCL_REDUCESCATTER_ALGO=twoshot is not one of");
  EXPECT_STR_CONTAINS(logText, "FCCL_BROADCAST_ALGO=LL is not one of");
  EXPECT_EQ_INT(fcclSetLogCallback(NULL, NULL), fcclSuccess);
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, (size_t)nranks * 100003 * 4 + 64, 0))
    return 1;
  uint64_t call = 0;
  for (int kind = 0; kind < MOVE_KINDS; kind++) {
    const struct moveCase small = {kind, fcclBfloat16, fcclSum, MOVE_AUTO, 0, 1001, kind % nranks, 2, 0, 0};
    const struct moveCase large = {kind, fcclFloat32, fcclAvg, MOVE_AUTO, 1, 100003, nranks - 1, 0, 0, 0};
    moveRunCase(&ctx, &small, call++);
    moveRunCase(&ctx, &large, call++);
  }
  collContextFini(&ctx);
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

static int modeEnvMismatch(int rank, int nranks, const struct testArgs* args) {
  if (rank == nranks - 1) setenv("FCCL_BROADCAST_ALGO", "staged", 1);
  EXPECT_EQ_INT(fcclSetLogCallback(keepLog, NULL), fcclSuccess); /* the cause, logged where it is found */
  fcclUniqueId id;
  if (!collShareId(args->shared, rank, 0, &id)) return 1;
  EXPECT_EQ_INT(cudaSetDevice(rank % args->gpus), cudaSuccess);
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = nranks > args->gpus;
  config.timeoutMs = 60000;
  fcclComm_t comm = NULL;
  const fcclResult_t res = fcclCommInitRankConfig(&comm, nranks, id, rank, &config);
  EXPECT_MSG(res == fcclInvalidUsage, "rank %d: fcclCommInitRankConfig returned %s, want fcclInvalidUsage", rank,
             fcclGetErrorString(res));
  EXPECT_STR_CONTAINS(logText, "were given different algorithms");
  EXPECT(comm == NULL); /* output parameters are written only on success */
  EXPECT_EQ_INT(fcclSetLogCallback(NULL, NULL), fcclSuccess);
  if (res == fcclSuccess && comm) EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- registration that the ranks do not share ------------------------------------------------------------------ */

/* Waits for the call, reports a failure (a timeout: the ranks ran different forms) and checks the output. Returns 1
 * when the communicator must be aborted. */
static int finishUnshared(struct collContext* ctx, const struct moveCase* c, const char* recvbuf, uint64_t call,
                          const char* what) {
  EXPECT_EQ_INT(cudaStreamSynchronize(ctx->stream), cudaSuccess);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(ctx->comm, &async), fcclSuccess);
  EXPECT_MSG(async == fcclSuccess, "rank %d: %s did not complete (%s: %s): the ranks ran different forms", ctx->rank,
             what, fcclGetErrorString(async), fcclGetLastError(ctx->comm));
  if (async != fcclSuccess) return 1;
  const size_t bytes = moveRecvElems(c->kind, c->count, ctx->nranks) * fcclTypeSize(c->type);
  EXPECT_EQ_INT(cudaMemcpy(ctx->hostOut, recvbuf, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  char message[512];
  const size_t wrong = moveCheckOutput(c, ctx->seed, call, 0, ctx->rank, ctx->nranks, ctx->hostOut, message,
                                       sizeof(message));
  EXPECT_MSG(wrong == 0, "rank %d: %s: %zu wrong: %s", ctx->rank, what, wrong, message);
  if (call < COLL_MAX_HASHES) ctx->shared->hashes[call][ctx->rank] = refHash(ctx->hostOut, bytes) | 1;
  return 0;
}

static int modeUnshared(int rank, int nranks, const struct testArgs* args, int kind) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  const size_t count = 1u << 20; /* 4 MiB of floats per block: beyond LL for any rank count */
  struct collContext ctx;
  if (!collContextInit(&ctx, args->shared, comm, rank, nranks, args->seed, (size_t)nranks * count * 4, 1)) return 1;
  char* plain = NULL;
  EXPECT_EQ_INT(cudaMalloc((void**)&plain, count * 4), cudaSuccess);
  EXPECT_EQ_INT(cudaMemset(ctx.recv.base, COLL_POISON, ctx.recv.capacity + 2 * COLL_GUARD), cudaSuccess);
  char* recvbuf = ctx.recv.base + COLL_GUARD;
  const uint64_t call = 0;
  struct moveCase c = {kind, fcclFloat32, fcclSum, MOVE_AUTO, 0, count, 0, 0, 0, 1};
  const char* sendbuf = NULL;
  char what[160];
  refFillInput(c.type, args->seed, call, rank, 0, ctx.hostIn, count);
  if (kind == MOVE_BROADCAST) {
    /* Root 0 sends from its plain buffer; the others pass NULL. */
    snprintf(what, sizeof(what), "a broadcast from a plain sendbuf into registered recvbufs");
    if (rank == 0) {
      EXPECT_EQ_INT(cudaMemcpy(plain, ctx.hostIn, count * 4, cudaMemcpyHostToDevice), cudaSuccess);
      sendbuf = plain;
    }
  } else {
    /* Rank 1 in place (its block of its registered output), every other rank from its plain buffer. */
    snprintf(what, sizeof(what), "an all-gather in place on rank 1 and from plain sendbufs on the others");
    c.inPlace = rank == 1;
    char* at = rank == 1 ? recvbuf + count * 4 : plain;
    EXPECT_EQ_INT(cudaMemcpy(at, ctx.hostIn, count * 4, cudaMemcpyHostToDevice), cudaSuccess);
    sendbuf = at;
  }
  const fcclResult_t res = kind == MOVE_BROADCAST
                               ? fcclBroadcast(sendbuf, recvbuf, count, fcclFloat32, 0, comm, ctx.stream)
                               : fcclAllGather(sendbuf, recvbuf, count, fcclFloat32, comm, ctx.stream);
  EXPECT_MSG(res == fcclSuccess, "rank %d: %s: %s: %s", rank, what, fcclGetErrorString(res), fcclGetLastError(NULL));
  const int abortComm = res != fcclSuccess || finishUnshared(&ctx, &c, recvbuf, call, what);
  args->shared->flags[0] = 1;
  EXPECT_EQ_INT(cudaFree(plain), cudaSuccess);
  if (abortComm) {
    /* The kernels gave up (FCCL_TIMEOUT): the communicator is unusable; its buffers go with it. */
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    return 0;
  }
  collContextFini(&ctx);
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
  const struct testArgs* args = arg;
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
  char name[64];
  snprintf(name, sizeof(name), "collectives %s rank %d", args->mode, rank);
  return testSummary(name) != 0 || code != 0;
}

int main(int argc, char** argv) {
  struct testArgs args = {argc > 1 ? argv[1] : "sweep", NULL, 0, 0};
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
  args.gpus = testGpuCount();
  if (args.gpus < 1) {
    printf("SKIP: no GPU\n");
    return TEST_SKIP;
  }
  args.seed = testSeed();
  args.shared = collSharedNew(nranks);
  printf("collectives %s: %d ranks on %d GPU(s)%s\n", args.mode, nranks, args.gpus, collQuick() ? " (quick)" : "");
  int codes[REF_MAX_RANKS];
  const int failed = testShmForkRanks(args.shared->shm, rankMain, &args, forkTimeout, codes);
  for (int r = 0; r < nranks; r++)
    if (codes[r] != 0) testFail(__FILE__, __LINE__, "rank %d exited with %d", r, codes[r]);
  const int differ = collCompareHashes(args.shared, nranks, (uint64_t)args.shared->flags[0]);
  EXPECT_MSG(differ == 0, "%d calls gave different bits on different ranks", differ);
  EXPECT_EQ_INT(failed, 0);
  collSharedFree(args.shared);
  return testSummary("collectives");
}
