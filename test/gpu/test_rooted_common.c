/* SPDX-License-Identifier: Apache-2.0 */
/* One checked call of the rooted collectives and the pre-multiplied sums: see test_rooted_common.h. */
#include "test_rooted_common.h"

#include "device.h"
#include "device_state.h"
#include "enqueue.h"

#include <string.h>

static void* scalarBuffer; /* device memory of the pre-multiplied sums' scalars */
static int checking = 1;

void rootedSetScalarBuffer(void* deviceScalar) { scalarBuffer = deviceScalar; }

void rootedSetChecking(int on) { checking = on; }

const char* rootedName(int kind) {
  static const char* const names[] = {"reduce", "gather", "scatter", "bcast", "all-reduce", "reduce-scatter"};
  return kind >= 0 && kind <= ROOTED_REDUCESCATTER ? names[kind] : "?";
}

uint64_t rootedScalar(fcclDataType_t type) {
  switch (type) {
    case fcclFloat16: return 0x3555;  /* 0.33325 */
    case fcclBfloat16: return 0xbeab; /* -0.333984 */
    case fcclFloat32: {
      const float third = 1.0f / 3.0f;
      uint32_t bits;
      memcpy(&bits, &third, sizeof(bits));
      return bits;
    }
    case fcclFloat64: {
      const double third = 1.0 / 3.0;
      uint64_t bits;
      memcpy(&bits, &third, sizeof(bits));
      return bits;
    }
    case fcclInt8: return 0xfd;                   /* -3 */
    case fcclInt32: return 0xfffffffbu;           /* -5 */
    case fcclInt64: return 0xfffffffffffffffdull; /* -3 */
    case fcclUint8: return 3;
    case fcclUint32: return 7;
    default: return 11;
  }
}

size_t rootedSendElems(const struct rootedCase* c, int nranks) {
  return c->kind == ROOTED_SCATTER || c->kind == ROOTED_REDUCESCATTER ? c->count * (size_t)nranks : c->count;
}

size_t rootedRecvElems(const struct rootedCase* c, int nranks) {
  return c->kind == ROOTED_GATHER ? c->count * (size_t)nranks : c->count;
}

int rootedFormApplicable(const struct rootedCase* c, int nranks, int registered) {
  const size_t bytes = c->count * fcclTypeSize(c->type);
  if (c->kind == ROOTED_ALLREDUCE) return collAlgoApplicable(c->form, nranks, bytes, registered, c->inPlace);
  if (c->form == ROOTED_AUTO || bytes == 0) return 1;
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  switch (c->form) {
    case FCCL_MOVE_LL: return bytes <= layout.llBytes;
    case FCCL_MOVE_DIRECT: return registered;
    case FCCL_MOVE_STAGED: {
      const uint64_t roundUnits = layout.chunkBytes / FCCL_UNIT_BYTES;
      const uint64_t units = (bytes + FCCL_UNIT_BYTES - 1) / FCCL_UNIT_BYTES;
      return roundUnits > 0 && (units + roundUnits - 1) / roundUnits + 2 <= FCCL_MAX_STEPS;
    }
    default: return 0;
  }
}

size_t rootedCapacity(const struct rootedCase* c, int nranks) {
  const size_t size = fcclTypeSize(c->type);
  const size_t send = rootedSendElems(c, nranks) * size, recv = rootedRecvElems(c, nranks) * size;
  const size_t larger = send > recv ? send : recv;
  return (c->sendOffset > c->recvOffset ? c->sendOffset : c->recvOffset) + larger;
}

void rootedPlace(char* sendRegion, char* recvRegion, const struct rootedCase* c, int rank, int nranks, char** sendbuf,
                 char** recvbuf, char** out, size_t* outBytes, char** in, size_t* inElems) {
  const size_t size = fcclTypeSize(c->type);
  const size_t block = c->count * size;
  const int root = rank == c->root;
  char* base = sendRegion + c->sendOffset;
  char* send = base;
  char* recv = c->inPlace ? base : recvRegion + c->recvOffset;
  *in = send;
  *inElems = rootedSendElems(c, nranks);
  *out = recv;
  *outBytes = rootedRecvElems(c, nranks) * size;
  switch (c->kind) {
    case ROOTED_REDUCE:
      if (!root) *out = NULL;
      if (!root && c->nullUnused) recv = NULL;
      break;
    case ROOTED_GATHER:
      if (c->inPlace) send = *in = base + (size_t)rank * block; /* our block of the gathered output */
      if (!root) *out = NULL;
      if (!root && c->nullUnused) recv = NULL;
      break;
    case ROOTED_SCATTER:
      if (c->inPlace) recv = *out = base + (size_t)rank * block; /* our block of the root's input */
      *outBytes = block;
      if (!root) *in = NULL, *inElems = 0; /* a non-root's send is never read */
      if (!root && c->nullUnused) send = NULL;
      break;
    case ROOTED_REDUCESCATTER:
      if (c->inPlace) recv = *out = base + (size_t)rank * block;
      *outBytes = block;
      break;
    case ROOTED_BCAST: recv = *out = base; break; /* one buffer, in place on every rank (NCCL's ncclBcast) */
    default: break;                               /* all-reduce */
  }
  *sendbuf = send;
  *recvbuf = recv;
}

fcclResult_t rootedCall(const struct rootedCase* c, const void* sendbuf, void* recvbuf, fcclRedOp_t op, fcclComm_t comm,
                        cudaStream_t stream) {
  const int algo = c->form == ROOTED_AUTO ? -1 : c->form;
  switch (c->kind) {
    case ROOTED_REDUCE:
      if (algo < 0) return fcclReduce(sendbuf, recvbuf, c->count, c->type, op, c->root, comm, stream);
      return fcclReduceAlgo(sendbuf, recvbuf, c->count, c->type, op, c->root, comm, stream,
                            fcclReduceAlgos.algos[algo]);
    case ROOTED_GATHER:
      if (algo < 0) return fcclGather(sendbuf, recvbuf, c->count, c->type, c->root, comm, stream);
      return fcclGatherAlgo(sendbuf, recvbuf, c->count, c->type, c->root, comm, stream, fcclGatherAlgos.algos[algo]);
    case ROOTED_SCATTER:
      if (algo < 0) return fcclScatter(sendbuf, recvbuf, c->count, c->type, c->root, comm, stream);
      return fcclScatterAlgo(sendbuf, recvbuf, c->count, c->type, c->root, comm, stream, fcclScatterAlgos.algos[algo]);
    case ROOTED_BCAST:
      if (algo < 0) return fcclBcast(recvbuf, c->count, c->type, c->root, comm, stream);
      return fcclBroadcastAlgo(recvbuf, recvbuf, c->count, c->type, c->root, comm, stream,
                               fcclBroadcastAlgos.algos[algo]);
    case ROOTED_ALLREDUCE: return fcclAllReduceAlgo(sendbuf, recvbuf, c->count, c->type, op, comm, stream, algo);
    default:
      return fcclReduceScatterAlgo(sendbuf, recvbuf, c->count, c->type, op, comm, stream,
                                   algo < 0 ? -1 : fcclReduceScatterAlgos.algos[algo]);
  }
}

/* Appends "[j] = got, expected want; " for the first few wrong elements. */
static void describeWrong(fcclDataType_t type, size_t bad, size_t j, uint64_t got, uint64_t want, char* message,
                          size_t messageSize) {
  if (bad >= 4 || !message || messageSize == 0) return;
  const size_t used = strlen(message);
  if (used + 1 >= messageSize) return;
  char a[64], b[64];
  snprintf(message + used, messageSize - used, "%s[%zu] = %s, expected %s; ", bad ? "" : "element", j,
           refFormat(type, got, a, sizeof(a)), refFormat(type, want, b, sizeof(b)));
}

size_t rootedCheckOutput(const struct rootedCase* c, uint64_t seed, uint64_t call, int rank, int nranks,
                         uint64_t scalar, const void* out, char* message, size_t messageSize) {
  size_t bad = 0;
  if (message && messageSize) message[0] = '\0';
  const size_t n = c->kind == ROOTED_GATHER ? c->count * (size_t)nranks : c->count;
  uint64_t in[REF_MAX_RANKS];
  for (size_t j = 0; j < n; j++) {
    const uint64_t got = refLoadBits(c->type, out, j);
    uint64_t want = 0;
    int ok = 0;
    switch (c->kind) {
      case ROOTED_GATHER: /* rank q's input element i at q x count + i, bit for bit */
        want = refInputBits(c->type, seed, call, (int)(j / c->count), j % c->count, NULL);
        ok = got == want;
        break;
      case ROOTED_SCATTER: /* the root's element rank x count + j */
        want = refInputBits(c->type, seed, call, c->root, (uint64_t)rank * c->count + j, NULL);
        ok = got == want;
        break;
      case ROOTED_BCAST:
        want = refInputBits(c->type, seed, call, c->root, j, NULL);
        ok = got == want;
        break;
      default: { /* reductions: element j of every rank (the reduce-scatter's block rank) */
        const uint64_t at = c->kind == ROOTED_REDUCESCATTER ? (uint64_t)rank * c->count + j : j;
        for (int q = 0; q < nranks; q++) in[q] = refInputBits(c->type, seed, call, q, at, NULL);
        if (c->op == ROOTED_PREMUL) {
          want = refPreMulSumBits(c->type, scalar, in, nranks);
          ok = refCheckPreMulSum(c->type, scalar, got, in, nranks);
        } else {
          want = refReduceBits(c->type, (fcclRedOp_t)c->op, in, nranks);
          ok = refCheckElement(c->type, (fcclRedOp_t)c->op, got, in, nranks);
        }
        break;
      }
    }
    if (!ok) describeWrong(c->type, bad++, j, got, want, message, messageSize);
  }
  return bad;
}

/* Whether the COLL_GUARD bytes before and after the output at out (of outBytes, copied to before and after) are
 * still poison, but for those that lie in the input [in, in + inBytes): in place, an output block's neighbours are
 * other blocks of the input (the scatter's root, the reduce-scatter), which the input check covers. */
static int guardsIntact(const unsigned char* before, const unsigned char* after, const char* out, size_t outBytes,
                        const char* in, size_t inBytes) {
  for (int i = 0; i < COLL_GUARD; i++) {
    const char* beforeAt = out - COLL_GUARD + i;
    const char* afterAt = out + outBytes + i;
    const int beforeInInput = in && beforeAt >= in && beforeAt < in + inBytes;
    const int afterInInput = in && afterAt >= in && afterAt < in + inBytes;
    if ((!beforeInInput && before[i] != COLL_POISON) || (!afterInInput && after[i] != COLL_POISON)) return 0;
  }
  return 1;
}

/* Whether bytes of host are all poison. */
static int allPoison(const unsigned char* host, size_t bytes) {
  for (size_t i = 0; i < bytes; i++)
    if (host[i] != COLL_POISON) return 0;
  return 1;
}

static void describeCase(const struct rootedCase* c, uint64_t call, char* out, size_t size) {
  static const char* const ops[] = {"sum", "prod", "max", "min", "avg"};
  const char* op = c->op == ROOTED_PREMUL ? (c->scalarOnDevice ? "premul (device scalar)" : "premul (host scalar)")
                   : c->kind == ROOTED_REDUCE || c->kind >= ROOTED_ALLREDUCE ? ops[c->op]
                                                                             : "-";
  const char* form = c->form == ROOTED_AUTO        ? "auto"
                     : c->kind == ROOTED_ALLREDUCE ? fcclAlgoName(c->form)
                                                   : (const char* const[]){"ll", "direct", "staged"}[c->form];
  snprintf(out, size, "call %llu: %s %s %s x %zu, %s, %s, root %d, offsets %zu/%zu%s", (unsigned long long)call,
           rootedName(c->kind), refTypeName(c->type), op, c->count, form, c->inPlace ? "in place" : "out of place",
           c->root, c->sendOffset, c->recvOffset, c->nullUnused ? ", NULL where unused" : "");
}

int rootedRunCase(struct collContext* ctx, const struct rootedCase* c, uint64_t call) {
  const int rank = ctx->rank, nranks = ctx->nranks;
  const size_t size = fcclTypeSize(c->type);
  char what[256];
  describeCase(c, call, what, sizeof(what));
  if (rootedCapacity(c, nranks) > ctx->send.capacity || rootedCapacity(c, nranks) > ctx->recv.capacity) {
    testFail(__FILE__, __LINE__, "%s: does not fit the test buffers", what);
    return 1;
  }
  if (collVerbose()) fprintf(stderr, "rank %d: %s\n", rank, what);
  char *sendbuf, *recvbuf, *out, *in;
  size_t outBytes, inElems;
  char* sendRegion = ctx->send.base + COLL_GUARD;
  char* recvRegion = ctx->recv.base + COLL_GUARD;
  rootedPlace(sendRegion, recvRegion, c, rank, nranks, &sendbuf, &recvbuf, &out, &outBytes, &in, &inElems);

  COLL_CHECK_CUDA(what, cudaMemsetAsync(ctx->send.base, COLL_POISON, ctx->send.capacity + 2 * COLL_GUARD, ctx->stream));
  COLL_CHECK_CUDA(what, cudaMemsetAsync(ctx->recv.base, COLL_POISON, ctx->recv.capacity + 2 * COLL_GUARD, ctx->stream));
  refFillInput(c->type, ctx->seed, call, rank, 0, ctx->hostIn, inElems);
  if (in && inElems)
    COLL_CHECK_CUDA(what, cudaMemcpyAsync(in, ctx->hostIn, inElems * size, cudaMemcpyHostToDevice, ctx->stream));

  /* A pre-multiplied sum: the op made for the call; a device scalar is uploaded after the op is made, so a kernel
   * that read it at the op's creation would see the old value. The op is destroyed as soon as the call returned. */
  fcclRedOp_t op = c->op == ROOTED_PREMUL ? fcclSum : (fcclRedOp_t)(c->op < 0 ? fcclSum : c->op);
  const uint64_t scalar = rootedScalar(c->type);
  if (c->op == ROOTED_PREMUL) {
    void* where = c->scalarOnDevice ? scalarBuffer : (void*)&scalar;
    if (c->scalarOnDevice) COLL_CHECK_CUDA(what, cudaMemsetAsync(scalarBuffer, 0x7f, 8, ctx->stream));
    COLL_CHECK_FCCL(what, fcclRedOpCreatePreMulSum(&op, where, c->type,
                                                   c->scalarOnDevice ? fcclScalarDevice : fcclScalarHostImmediate,
                                                   ctx->comm));
    if (c->scalarOnDevice)
      COLL_CHECK_CUDA(what, cudaMemcpyAsync(scalarBuffer, &scalar, size, cudaMemcpyHostToDevice, ctx->stream));
  }
  fcclResult_t res = rootedCall(c, sendbuf, recvbuf, op, ctx->comm, ctx->stream);
  if (c->op == ROOTED_PREMUL) EXPECT_EQ_INT(fcclRedOpDestroy(op, ctx->comm), fcclSuccess);
  if (res != fcclSuccess) {
    testFail(__FILE__, __LINE__, "rank %d: %s: returned %s: %s", rank, what, fcclGetErrorString(res),
             fcclGetLastError(NULL));
    return 1;
  }
  COLL_CHECK_CUDA(what, cudaStreamSynchronize(ctx->stream));
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(ctx->comm, &async), fcclSuccess);
  if (async != fcclSuccess) {
    testFail(__FILE__, __LINE__, "rank %d: %s: async error %s: %s", rank, what, fcclGetErrorString(async),
             fcclGetLastError(ctx->comm));
    return 1;
  }

  if (!checking) return 0;
  int problems = 0;
  unsigned char* host = ctx->hostOut;
  if (out) {
    COLL_CHECK_CUDA(what, cudaMemcpy(host, out - COLL_GUARD, outBytes + 2 * COLL_GUARD, cudaMemcpyDeviceToHost));
    if (!guardsIntact(host, host + COLL_GUARD + outBytes, out, outBytes, in, in ? inElems * size : 0)) {
      testFail(__FILE__, __LINE__, "rank %d: %s: bytes next to the output were overwritten", rank, what);
      problems++;
    }
    char message[512];
    const size_t bad = rootedCheckOutput(c, ctx->seed, call, rank, nranks, scalar, host + COLL_GUARD, message,
                                         sizeof(message));
    if (bad) {
      testFail(__FILE__, __LINE__, "rank %d: %s: %zu of %zu elements wrong: %s", rank, what, bad, outBytes / size,
               message);
      problems++;
    } else {
      testPassed++;
    }
    if (c->kind == ROOTED_BCAST && call < COLL_MAX_HASHES)
      ctx->shared->hashes[call][rank] = refHash(host + COLL_GUARD, outBytes) | 1;
  }
  /* What the call must leave alone: its input (but for what an in-place call overwrites with its result), and a
   * reduce's or gather's recvbuf off the root. */
  if (in && inElems) {
    const size_t bytes = inElems * size;
    size_t holeFrom = 0, holeTo = 0; /* the part of the input the result replaces */
    int check = 1;
    if (c->inPlace || c->kind == ROOTED_BCAST) {
      switch (c->kind) {
        case ROOTED_REDUCE: check = out == NULL; break; /* the root's result replaces its input */
        case ROOTED_BCAST:
        case ROOTED_ALLREDUCE: check = 0; break;
        case ROOTED_REDUCESCATTER:
          holeFrom = (size_t)rank * c->count * size;
          holeTo = holeFrom + c->count * size;
          break;
        default: break; /* gather: our block is our input; scatter: the root's own block is its result */
      }
    }
    if (check) {
      COLL_CHECK_CUDA(what, cudaMemcpy(host, in, bytes, cudaMemcpyDeviceToHost));
      if (memcmp(host, ctx->hostIn, holeFrom) != 0 ||
          memcmp(host + holeTo, (const char*)ctx->hostIn + holeTo, bytes - holeTo) != 0) {
        testFail(__FILE__, __LINE__, "rank %d: %s: the input changed", rank, what);
        problems++;
      }
    }
  }
  if (!out && recvbuf && !c->inPlace && (c->kind == ROOTED_REDUCE || c->kind == ROOTED_GATHER)) {
    const size_t bytes = rootedRecvElems(c, nranks) * size;
    COLL_CHECK_CUDA(what, cudaMemcpy(host, recvbuf, bytes, cudaMemcpyDeviceToHost));
    if (!allPoison(host, bytes)) {
      testFail(__FILE__, __LINE__, "rank %d: %s: a recvbuf off the root was written", rank, what);
      problems++;
    }
  }
  return problems;
}
