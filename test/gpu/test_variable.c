/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllGatherV, fcclReduceScatterV and their forms with counts in device memory on GPUs, forked ranks (exits 77
 * without a GPU; ranks share GPUs when there are fewer GPUs than ranks). Buffers and the bytes around them are
 * poisoned first; all-gather outputs are checked bit for bit and compared across ranks (hashes), reduce-scatter
 * outputs element by element against the float64 host reference with the all-reduce's tolerance rules
 * (test_allreduce_ref.c); with equal counts both are compared bit for bit with fcclAllGather and fcclReduceScatter
 * (on one rank a forced reduce-scatter form with fcclReduceScatter forced to the same form).
 *
 *   sweep [n]     every type, every op (reduce-scatter), the automatic form and ll, direct, staged forced where they
 *                 can run, plain and registered buffers, host and device counts (with slack in the capacities), in
 *                 place and out of place, NULL buffers for empty blocks, counts random, skewed to one rank, with
 *                 zeros between, all zero, equal, on one rank only, blocks of tens to hundreds of thousands
 *   ranks n       a narrower sweep for n ranks (1, 3, 4, 8)
 *   graph [n]     host- and device-count calls captured in one CUDA graph and replayed with new inputs and new
 *                 device counts (zeros included) before every replay, eager calls between replays
 *   invalid [n]   bad arguments return fcclInvalidArgument and launch nothing; device counts that do not fit fail
 *                 the communicator with fcclInvalidArgument on every rank and write nothing
 *   mismatch [n]  ranks that pass other counts (host or device) stop as ranks out of step (fcclInvalidUsage)
 *   nccl [n]      the sweep on the NCCL path (FCCL_PATH=nccl, NCCL_HOSTID per rank), and device counts refused in
 *                 a capture there
 *   budget [n]    every form with host and device counts on a communicator without an SM budget and on one with
 *                 maxCTAs 3: more than 3 blocks unbounded, at most 3 bounded (the launched grid), results right
 * FCCLTEST_QUICK=1 shortens every mode; FCCLTEST_SEED repeats the data; FCCLTEST_VERBOSE=1 prints every call.
 */
#include "test_variable.h"

#include "algo.h"
#include "enqueue.h"
#include "test_collectives_common.h"
#include "variable.h"

#include <stdlib.h>
#include <string.h>

#define VAR_CAPACITY (24u << 20) /* bytes of every buffer region, guards apart */

/* ---- context ------------------------------------------------------------------------------------------------- */

int varContextInit(struct varContext* ctx, const struct testArgs* args, fcclComm_t comm, int rank, int nranks,
                   size_t capacity, int withRegistered) {
  memset(ctx, 0, sizeof(*ctx));
  ctx->shared = args->shared;
  ctx->comm = comm;
  ctx->rank = rank;
  ctx->nranks = nranks;
  ctx->seed = args->seed;
  ctx->capacity = capacity;
  fcclPath_t path = fcclPathFccl;
  if (fcclCommGetPath(comm, &path, NULL) != fcclSuccess) return 0;
  ctx->ncclPath = path != fcclPathFccl;
  if (cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking) != cudaSuccess) return 0;
  for (int reg = 0; reg < 2; reg++) {
    /* Registration on the NCCL path is NCCL's; the sweep there runs plain buffers only. */
    if (reg && (ctx->ncclPath || !withRegistered)) continue;
    if (!collBufferCreate(comm, &ctx->send[reg], capacity, reg)) return 0;
    if (!collBufferCreate(comm, &ctx->recv[reg], capacity, reg)) return 0;
  }
  if (cudaMalloc(&ctx->scratch, capacity) != cudaSuccess) return 0;
  if (cudaMalloc((void**)&ctx->devCounts, REF_MAX_RANKS * sizeof(int64_t)) != cudaSuccess) return 0;
  if (cudaMallocHost((void**)&ctx->hostCounts, REF_MAX_RANKS * sizeof(int64_t)) != cudaSuccess) return 0;
  if (cudaMallocHost((void**)&ctx->host, capacity + 2 * COLL_GUARD) != cudaSuccess) return 0;
  if (cudaMallocHost((void**)&ctx->host2, capacity + 2 * COLL_GUARD) != cudaSuccess) return 0;
  return 1;
}

void varContextFini(struct varContext* ctx) {
  if (ctx->stream) EXPECT_EQ_INT(cudaStreamSynchronize(ctx->stream), cudaSuccess);
  for (int reg = 0; reg < 2; reg++) {
    collBufferDestroy(ctx->comm, &ctx->send[reg]);
    collBufferDestroy(ctx->comm, &ctx->recv[reg]);
  }
  if (ctx->scratch) EXPECT_EQ_INT(cudaFree(ctx->scratch), cudaSuccess);
  if (ctx->devCounts) EXPECT_EQ_INT(cudaFree(ctx->devCounts), cudaSuccess);
  if (ctx->hostCounts) cudaFreeHost(ctx->hostCounts);
  if (ctx->host) cudaFreeHost(ctx->host);
  if (ctx->host2) cudaFreeHost(ctx->host2);
  if (ctx->stream) cudaStreamDestroy(ctx->stream);
  memset(ctx, 0, sizeof(*ctx));
}

/* ---- a case -------------------------------------------------------------------------------------------------- */

size_t varTotal(const struct varCase* c, int nranks) {
  size_t total = 0;
  for (int r = 0; r < nranks; r++) total += c->counts[r];
  return total;
}

size_t varLargest(const struct varCase* c, int nranks) {
  size_t largest = 0;
  for (int r = 0; r < nranks; r++) largest = c->counts[r] > largest ? c->counts[r] : largest;
  return largest;
}

static size_t varOffset(const struct varCase* c, int rank) {
  size_t at = 0;
  for (int r = 0; r < rank; r++) at += c->counts[r];
  return at;
}

void varCapacities(const struct varCase* c, int nranks, size_t* sendCapacity, size_t* recvCapacity) {
  const size_t perRank = varLargest(c, nranks) + c->slack, all = varTotal(c, nranks) + c->slack;
  *sendCapacity = c->reduces ? all : perRank;
  *recvCapacity = c->reduces ? perRank : all;
}

/* Elements of this rank's send and receive buffers the call may touch. */
static void varElems(const struct varCase* c, int rank, int nranks, size_t* sendElems, size_t* recvElems) {
  if (c->device) {
    varCapacities(c, nranks, sendElems, recvElems);
    return;
  }
  const size_t mine = c->counts[rank], all = varTotal(c, nranks);
  *sendElems = c->reduces ? all : mine;
  *recvElems = c->reduces ? mine : all;
}

void varPlaceIn(char* sendRegion, char* recvRegion, const struct varCase* c, int rank, int nranks, struct varPlace* p) {
  const size_t size = fcclTypeSize(c->type);
  p->sendRegion = sendRegion;
  p->recvRegion = recvRegion;
  p->sendbuf = sendRegion + COLL_GUARD + c->sendOffset;
  p->recvbuf = recvRegion + COLL_GUARD + c->recvOffset;
  if (c->inPlace) {
    /* The own block inside the buffer of every block: the all-gather's output, the reduce-scatter's input. */
    if (c->reduces)
      p->recvbuf = p->sendbuf + varOffset(c, rank) * size;
    else
      p->sendbuf = p->recvbuf + varOffset(c, rank) * size;
    return;
  }
  /* An empty own block out of place: NULL, as fccl.h allows. */
  if (!c->device && c->counts[rank] == 0) {
    if (c->reduces)
      p->recvbuf = NULL;
    else
      p->sendbuf = NULL;
  }
  (void)nranks;
}

int varUpload(struct varContext* ctx, const struct varCase* c, const struct varPlace* p, uint64_t call, void* staging,
              int64_t* hostCounts, int64_t* devCounts, cudaStream_t stream) {
  const size_t size = fcclTypeSize(c->type);
  const size_t regionBytes = ctx->capacity + 2 * COLL_GUARD;
  COLL_CHECK_CUDA("poison", cudaMemsetAsync(p->sendRegion, COLL_POISON, regionBytes, stream));
  COLL_CHECK_CUDA("poison", cudaMemsetAsync(p->recvRegion, COLL_POISON, regionBytes, stream));
  const size_t inputElems = c->reduces ? varTotal(c, ctx->nranks) : c->counts[ctx->rank];
  if (inputElems > 0) {
    refFillInput(c->type, ctx->seed, call, ctx->rank, 0, staging, inputElems);
    COLL_CHECK_CUDA("input", cudaMemcpyAsync(p->sendbuf, staging, inputElems * size, cudaMemcpyHostToDevice, stream));
  }
  if (c->device) {
    for (int r = 0; r < ctx->nranks; r++) hostCounts[r] = (int64_t)c->counts[r];
    COLL_CHECK_CUDA("counts", cudaMemcpyAsync(devCounts, hostCounts, (size_t)ctx->nranks * sizeof(int64_t),
                                              cudaMemcpyHostToDevice, stream));
  }
  return 0;
}

static int varAlgo(const struct varCase* c) {
  if (c->form == VAR_AUTO) return -1;
  return (c->reduces ? fcclReduceScatterVAlgos : fcclAllGatherVAlgos).algos[c->form];
}

fcclResult_t varInvoke(const struct varContext* ctx, const struct varCase* c, const struct varPlace* p,
                       const int64_t* devCounts, cudaStream_t stream) {
  const int algo = varAlgo(c);
  size_t sendCapacity = 0, recvCapacity = 0;
  varCapacities(c, ctx->nranks, &sendCapacity, &recvCapacity);
  if (c->reduces && c->device)
    return fcclReduceScatterVDeviceAlgo(p->sendbuf, p->recvbuf, devCounts, sendCapacity, recvCapacity, c->type, c->op,
                                        ctx->comm, stream, algo);
  if (c->reduces)
    return fcclReduceScatterVAlgo(p->sendbuf, p->recvbuf, c->counts, c->type, c->op, ctx->comm, stream, algo);
  if (c->device)
    return fcclAllGatherVDeviceAlgo(p->sendbuf, p->recvbuf, devCounts, sendCapacity, recvCapacity, c->type, ctx->comm,
                                    stream, algo);
  return fcclAllGatherVAlgo(p->sendbuf, p->recvbuf, c->counts, c->type, ctx->comm, stream, algo);
}

void varDescribe(const struct varCase* c, int nranks, char* out, size_t size) {
  static const char* const kFormNames[] = {"ll", "direct", "staged"};
  int at = snprintf(out, size, "%s %s%s%s, %s, %s counts", c->reduces ? "reduce-scatter-v" : "all-gather-v",
                    refTypeName(c->type), c->reduces ? " " : "", c->reduces ? refOpName(c->op) : "",
                    c->form == VAR_AUTO ? "auto" : kFormNames[c->form], c->device ? "device" : "host");
  if (c->device && at > 0 && (size_t)at < size) at += snprintf(out + at, size - (size_t)at, " (slack %zu)", c->slack);
  if (at > 0 && (size_t)at < size)
    at += snprintf(out + at, size - (size_t)at, ", %s, offsets %zu/%zu, counts",
                   c->inPlace ? "in place" : "out of place", c->sendOffset, c->recvOffset);
  for (int r = 0; r < nranks && at > 0 && (size_t)at < size; r++)
    at += snprintf(out + at, size - (size_t)at, "%s%zu", r ? "/" : " ", c->counts[r]);
}

/* Bytes of host[0, bytes) outside [start, start + len) that are not the poison; the first one's offset. */
static size_t poisonOutside(const unsigned char* host, size_t bytes, size_t start, size_t len, size_t* first) {
  size_t bad = 0;
  for (size_t i = 0; i < bytes; i++) {
    if (i >= start && i < start + len) continue;
    if (host[i] != COLL_POISON && bad++ == 0) *first = i;
  }
  return bad;
}

/* Elements [0, count) at host + at: rank `from`'s input of `call` from element `first`, bit for bit. */
static size_t movedWrong(const struct varContext* ctx, const struct varCase* c, uint64_t call, int from, size_t first,
                         const unsigned char* at, size_t count, size_t* firstWrong) {
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    const uint64_t want = refInputBits(c->type, ctx->seed, call, from, first + i, NULL);
    if (refLoadBits(c->type, at, i) != want && bad++ == 0) *firstWrong = i;
  }
  return bad;
}

int varCheck(struct varContext* ctx, const struct varCase* c, const struct varPlace* p, uint64_t call,
             int64_t hashIndex, const char* what) {
  const int rank = ctx->rank, n = ctx->nranks;
  const size_t size = fcclTypeSize(c->type);
  const size_t regionBytes = ctx->capacity + 2 * COLL_GUARD;
  const size_t total = varTotal(c, n), mine = c->counts[rank], at = varOffset(c, rank);
  unsigned char* send = ctx->host;
  unsigned char* recv = ctx->host2;
  COLL_CHECK_CUDA(what, cudaMemcpy(send, p->sendRegion, regionBytes, cudaMemcpyDeviceToHost));
  COLL_CHECK_CUDA(what, cudaMemcpy(recv, p->recvRegion, regionBytes, cudaMemcpyDeviceToHost));
  /* The buffer that holds every block (and, in place, the own one) and where it starts in its region. */
  unsigned char* whole = c->reduces ? send : recv;
  const size_t wholeStart = COLL_GUARD + (c->reduces ? c->sendOffset : c->recvOffset);
  int problems = 0;
  size_t where = 0, wrong = 0;
  if (!c->reduces) {
    for (int r = 0; r < n; r++) {
      const size_t offset = varOffset(c, r);
      wrong = movedWrong(ctx, c, call, r, 0, whole + wholeStart + offset * size, c->counts[r], &where);
      if (wrong) {
        testFail(__FILE__, __LINE__, "rank %d: %s: %zu elements of rank %d's block wrong, first %zu", rank, what, wrong,
                 r, where);
        problems++;
      }
    }
    wrong = poisonOutside(recv, regionBytes, wholeStart, total * size, &where);
    if (!c->inPlace && mine > 0) {
      const size_t sendStart = COLL_GUARD + c->sendOffset;
      size_t inputWrong = movedWrong(ctx, c, call, rank, 0, send + sendStart, mine, &where);
      inputWrong += poisonOutside(send, regionBytes, sendStart, mine * size, &where);
      if (inputWrong) {
        testFail(__FILE__, __LINE__, "rank %d: %s: the input changed (%zu bytes/elements)", rank, what, inputWrong);
        problems++;
      }
    }
    if (hashIndex >= 0 && total > 0) ctx->shared->hashes[hashIndex][rank] = refHash(whole + wholeStart, total * size);
  } else {
    /* The own block reduced, in rank order on fccl's kernels (refCheckElement accepts the emulated bits or the
     * float64 reference within the type's tolerance). */
    const unsigned char* out = c->inPlace ? whole + wholeStart + at * size : recv + COLL_GUARD + c->recvOffset;
    uint64_t inputs[REF_MAX_RANKS];
    size_t bad = 0, firstBad = 0;
    for (size_t i = 0; i < mine; i++) {
      for (int w = 0; w < n; w++) inputs[w] = refInputBits(c->type, ctx->seed, call, w, at + i, NULL);
      if (!refCheckElement(c->type, c->op, refLoadBits(c->type, out, i), inputs, n) && bad++ == 0) firstBad = i;
    }
    if (bad) {
      char got[64];
      testFail(__FILE__, __LINE__, "rank %d: %s: %zu of %zu reduced elements wrong, first %zu = %s", rank, what, bad,
               mine, firstBad, refFormat(c->type, refLoadBits(c->type, out, firstBad), got, sizeof(got)));
      problems++;
    }
    /* The input (in place: its other blocks) unchanged. */
    size_t inputWrong = movedWrong(ctx, c, call, rank, 0, send + wholeStart, at, &where);
    const size_t afterOwn = at + mine;
    if (c->inPlace) {
      inputWrong += movedWrong(ctx, c, call, rank, afterOwn, send + wholeStart + afterOwn * size, total - afterOwn,
                               &where);
    } else {
      inputWrong += movedWrong(ctx, c, call, rank, at, send + wholeStart + at * size, mine, &where);
      inputWrong += movedWrong(ctx, c, call, rank, afterOwn, send + wholeStart + afterOwn * size, total - afterOwn,
                               &where);
    }
    inputWrong += poisonOutside(send, regionBytes, wholeStart, total * size, &where);
    if (inputWrong) {
      testFail(__FILE__, __LINE__, "rank %d: %s: the input changed (%zu bytes/elements)", rank, what, inputWrong);
      problems++;
    }
    wrong = c->inPlace ? poisonOutside(recv, regionBytes, 0, 0, &where)
                       : poisonOutside(recv, regionBytes, COLL_GUARD + c->recvOffset, mine * size, &where);
  }
  if (wrong) {
    testFail(__FILE__, __LINE__, "rank %d: %s: %zu bytes written outside the output, first at byte %zu of the region",
             rank, what, wrong, where);
    problems++;
  }
  return problems;
}

/* ---- counts -------------------------------------------------------------------------------------------------- */

const char* varPatternName(int pattern) {
  static const char* const kNames[VAR_PATTERNS] = {"random", "skewed", "zeros", "empty", "equal", "one"};
  return pattern >= 0 && pattern < VAR_PATTERNS ? kNames[pattern] : "?";
}

void varMakeCounts(int pattern, int nranks, size_t largest, uint64_t* rng, size_t* counts) {
  const int hot = (int)(testRandom(rng) % (uint64_t)nranks);
  const size_t equal = 1 + (size_t)(testRandom(rng) % largest);
  for (int r = 0; r < REF_MAX_RANKS; r++) {
    const size_t any = (size_t)(testRandom(rng) % (largest + 1));
    size_t count = 0;
    switch (pattern) {
      case 0: count = any; break;
      case 1: count = r == hot ? largest : any % 3; break; /* one rank holds nearly everything */
      case 2: count = r % 2 == hot % 2 ? 0 : any; break;
      case 3: count = 0; break;
      case 4: count = equal; break;
      default: count = r == hot ? (any + 1 > largest ? largest : any + 1) : 0; break;
    }
    counts[r] = r < nranks ? count : 0;
  }
}

/* ---- sweep --------------------------------------------------------------------------------------------------- */

static const fcclDataType_t kTypes[] = {fcclFloat32, fcclFloat16, fcclBfloat16, fcclFloat64, fcclInt8,
                                        fcclUint8,   fcclInt32,   fcclUint32,   fcclInt64,   fcclUint64};
#define TYPES ((int)(sizeof(kTypes) / sizeof(kTypes[0])))
static const fcclRedOp_t kOps[] = {fcclSum, fcclProd, fcclMax, fcclMin, fcclAvg};
/* On the NCCL path the ops whose results do not depend on NCCL's order beyond the float tolerance. */
static const fcclRedOp_t kNcclOps[] = {fcclSum, fcclMax, fcclMin};

/* With equal host counts out of place: the fixed-count collective on the same input gives the same bits. On one
 * rank a reduce-scatter whose form is forced is compared with fcclReduceScatter forced to the same form: unforced,
 * one rank copies (fcclAlgoIsCopy), and a copy keeps a NaN's bits where a reducing kernel gives the NaN its
 * arithmetic and conversions make (the same value: varCheck holds it to the reference). */
static int compareWithFixed(struct varContext* ctx, const struct varCase* c, const struct varPlace* p,
                            const char* what) {
  const size_t size = fcclTypeSize(c->type), count = c->counts[0];
  const size_t outBytes = c->reduces ? count * size : varTotal(c, ctx->nranks) * size;
  const int fixedAlgo = c->reduces && ctx->nranks == 1 && c->form != VAR_AUTO ? fcclReduceScatterAlgos.algos[c->form]
                                                                              : -1;
  if (c->reduces)
    COLL_CHECK_FCCL(what, fcclReduceScatterAlgo(p->sendbuf, ctx->scratch, count, c->type, c->op, ctx->comm, ctx->stream,
                                                fixedAlgo));
  else
    COLL_CHECK_FCCL(what, fcclAllGather(p->sendbuf, ctx->scratch, count, c->type, ctx->comm, ctx->stream));
  COLL_CHECK_CUDA(what, cudaStreamSynchronize(ctx->stream));
  COLL_CHECK_CUDA(what, cudaMemcpy(ctx->host, ctx->scratch, outBytes, cudaMemcpyDeviceToHost));
  COLL_CHECK_CUDA(what, cudaMemcpy(ctx->host2, p->recvbuf, outBytes, cudaMemcpyDeviceToHost));
  if (memcmp(ctx->host, ctx->host2, outBytes) != 0) {
    testFail(__FILE__, __LINE__, "rank %d: %s: bits differ from %s's with the same count%s", ctx->rank, what,
             c->reduces ? "fcclReduceScatter" : "fcclAllGather", fixedAlgo >= 0 ? " and form" : "");
    return 1;
  }
  return 0;
}

/* One case from end to end on ctx's stream; returns the number of problems. */
static int runCase(struct varContext* ctx, const struct varCase* c, int registered, uint64_t call) {
  char what[256];
  varDescribe(c, ctx->nranks, what, sizeof(what));
  char tagged[300];
  snprintf(tagged, sizeof(tagged), "call %llu: %s%s", (unsigned long long)call, what, registered ? ", registered" : "");
  if (collVerbose()) printf("rank %d: %s\n", ctx->rank, tagged);
  struct varPlace p;
  varPlaceIn(ctx->send[registered].base, ctx->recv[registered].base, c, ctx->rank, ctx->nranks, &p);
  if (varUpload(ctx, c, &p, call, ctx->host, ctx->hostCounts, ctx->devCounts, ctx->stream) != 0) return 1;
  COLL_CHECK_FCCL(tagged, varInvoke(ctx, c, &p, ctx->devCounts, ctx->stream));
  COLL_CHECK_CUDA(tagged, cudaStreamSynchronize(ctx->stream));
  int problems = varCheck(ctx, c, &p, call, (int64_t)call, tagged);
  int equal = varTotal(c, ctx->nranks) > 0;
  for (int r = 1; r < ctx->nranks; r++) equal &= c->counts[r] == c->counts[0];
  /* NCCL sums the grouped reduces in an order of its own: only the moved bits compare there. */
  if (equal && !c->device && !c->inPlace && (!c->reduces || !ctx->ncclPath))
    problems += compareWithFixed(ctx, c, &p, tagged);
  return problems;
}

uint64_t varSweep(struct varContext* ctx, int narrow, uint64_t firstCall) {
  const int n = ctx->nranks;
  const int quick = collQuick();
  /* Blocks within the LL area, a few staging rounds, many rounds (or the direct form). */
  const size_t largestByClass[] = {37, quick ? 2001 : 6001, narrow || quick ? 40001 : 150001};
  uint64_t rng = ctx->seed ^ 0x7661726961626c65ull;
  uint64_t call = firstCall, k = 0;
  int problems = 0;
  for (int reduces = 0; reduces < 2; reduces++)
    for (int f = 0; f < 4; f++)
      for (int registered = 0; registered < 2; registered++)
        for (int sizeClass = 0; sizeClass < 3; sizeClass++)
          for (int pattern = 0; pattern < VAR_PATTERNS; pattern++, k++) {
            if (narrow && (k % 2 == 1 || (sizeClass == 2 && pattern % 3 != 0))) continue;
            if (quick && k % 4 >= 2) continue;
            /* The case's other properties from a mix of its index, so that none follows the loops' periods. */
            uint64_t mix = (k + 1) * 0x9e3779b97f4a7c15ull;
            mix ^= mix >> 29;
            struct varCase c;
            memset(&c, 0, sizeof(c));
            c.reduces = reduces;
            c.form = f == 0 ? VAR_AUTO : f - 1;
            c.type = kTypes[(mix >> 8) % TYPES];
            c.op = ctx->ncclPath ? kNcclOps[(mix >> 16) % 3] : kOps[(mix >> 16) % 5];
            c.device = mix % 3 == 1;
            c.inPlace = !c.device && (mix >> 24) % 3 == 0;
            c.slack = c.device ? (mix >> 32) % 5 : 0;
            const size_t size = fcclTypeSize(c.type);
            c.sendOffset = ((mix >> 40) % 4) * size;
            c.recvOffset = ((mix >> 44) % 4) * size;
            varMakeCounts(pattern, n, largestByClass[sizeClass], &rng, c.counts);
            /* Every rank skips the same cases: all of this depends on the case alone. */
            if (registered && !ctx->send[1].base) continue;
            if (ctx->ncclPath && c.form != VAR_AUTO) continue;
            size_t sendElems = 0, recvElems = 0;
            varElems(&c, 0, n, &sendElems, &recvElems);
            if (c.reduces ? sendElems : recvElems) {
              const size_t wholeElems = c.reduces ? sendElems : recvElems;
              if (wholeElems * size + 16 * size > ctx->capacity) continue;
            }
            size_t blockBytes = (varLargest(&c, n) + c.slack) * size;
            if (c.device && blockBytes == 0) blockBytes = size; /* the library's least block */
            if (c.form != VAR_AUTO &&
                !moveFormApplicable(reduces ? MOVE_REDUCESCATTER : MOVE_ALLGATHER, c.form, n, blockBytes, registered))
              continue;
            problems += runCase(ctx, &c, registered, call++);
          }
  EXPECT_MSG(problems == 0, "rank %d: %d problems in the sweep", ctx->rank, problems);
  return call - firstCall;
}

static int modeSweep(int rank, int nranks, const struct testArgs* args, int narrow) {
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  EXPECT(comm != NULL);
  if (!comm) return 1;
  struct varContext ctx;
  const int ready = varContextInit(&ctx, args, comm, rank, nranks, VAR_CAPACITY, 1);
  EXPECT(ready);
  uint64_t calls = 0;
  if (ready) {
    calls = varSweep(&ctx, narrow, 0);
    EXPECT_MSG(calls > (narrow ? 20u : 50u), "rank %d: only %llu calls ran", rank, (unsigned long long)calls);
    fcclResult_t async = fcclInternalError;
    EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
    EXPECT_EQ_INT(async, fcclSuccess);
  }
  varContextFini(&ctx);
  args->shared->flags[0] = (int)calls;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}

/* ---- main ---------------------------------------------------------------------------------------------------- */

static const struct {
  const char* name;
  int forkTimeout; /* seconds for the whole run, under meson's timeout */
  int minRanks;
} kModes[] = {{"sweep", 560, 1},    {"ranks", 560, 1}, {"graph", 560, 1}, {"invalid", 200, 1},
              {"mismatch", 200, 2}, {"nccl", 560, 2},  {"budget", 260, 1}};
/* The ranks mode on 8 ranks, whose meson timeout is 900 s. */
#define RANKS8_FORK_TIMEOUT 860

static int rankMain(int rank, int nranks, void* arg) {
  const struct testArgs* args = arg;
  int code = 0;
  if (strcmp(args->mode, "sweep") == 0)
    code = modeSweep(rank, nranks, args, 0);
  else if (strcmp(args->mode, "ranks") == 0)
    code = modeSweep(rank, nranks, args, 1);
  else if (strcmp(args->mode, "graph") == 0)
    code = modeGraph(rank, nranks, args);
  else if (strcmp(args->mode, "invalid") == 0)
    code = modeInvalid(rank, nranks, args);
  else if (strcmp(args->mode, "mismatch") == 0)
    code = modeMismatch(rank, nranks, args);
  else if (strcmp(args->mode, "nccl") == 0)
    code = modeNccl(rank, nranks, args);
  else if (strcmp(args->mode, "budget") == 0)
    code = modeBudget(rank, nranks, args);
  char name[64];
  snprintf(name, sizeof(name), "variable %s rank %d", args->mode, rank);
  return testSummary(name) != 0 || code != 0;
}

int main(int argc, char** argv) {
  struct testArgs args = {argc > 1 ? argv[1] : "sweep", NULL, 0, 0};
  const int nranks = argc > 2 ? atoi(argv[2]) : 2;
  int forkTimeout = 0, minRanks = 1;
  for (size_t i = 0; i < sizeof(kModes) / sizeof(kModes[0]); i++)
    if (strcmp(args.mode, kModes[i].name) == 0) forkTimeout = kModes[i].forkTimeout, minRanks = kModes[i].minRanks;
  if (strcmp(args.mode, "ranks") == 0 && nranks >= 8) forkTimeout = RANKS8_FORK_TIMEOUT;
  if (forkTimeout == 0 || nranks < minRanks || nranks > 8) {
    fprintf(stderr, "usage: %s sweep|ranks|graph|invalid|mismatch|nccl|budget [nranks 1..8]\n", argv[0]);
    return 2;
  }
  args.gpus = testGpuCount();
  if (args.gpus < 1) {
    printf("SKIP: no GPU\n");
    return TEST_SKIP;
  }
  args.seed = testSeed();
  args.shared = collSharedNew(nranks);
  printf("variable %s: %d ranks on %d GPU(s)%s, seed %llu\n", args.mode, nranks, args.gpus,
         collQuick() ? " (quick)" : "", (unsigned long long)args.seed);
  int codes[REF_MAX_RANKS];
  const int failed = testShmForkRanks(args.shared->shm, rankMain, &args, forkTimeout, codes);
  for (int r = 0; r < nranks; r++)
    if (codes[r] != 0) testFail(__FILE__, __LINE__, "rank %d exited with %d", r, codes[r]);
  const int differ = collCompareHashes(args.shared, nranks, (uint64_t)args.shared->flags[0]);
  EXPECT_MSG(differ == 0, "%d all-gathers gave different bits on different ranks", differ);
  EXPECT_EQ_INT(failed, 0);
  collSharedFree(args.shared);
  return testSummary("variable");
}
