/* SPDX-License-Identifier: Apache-2.0 */
/* Shared machinery of the all-gather, reduce-scatter and broadcast GPU tests: see test_collectives_common.h. */
#include "test_collectives_common.h"

#include "algo.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"

#include <string.h>

const char* moveName(int kind) {
  static const char* const names[] = {"all-gather", "reduce-scatter", "broadcast"};
  return kind >= 0 && kind < MOVE_KINDS ? names[kind] : "?";
}

const char* moveFormName(int form) {
  switch (form) {
    case MOVE_AUTO: return "auto";
    case FCCL_MOVE_LL: return "ll";
    case FCCL_MOVE_DIRECT: return "direct";
    case FCCL_MOVE_STAGED: return "staged";
    case FCCL_MOVE_COPY: return "copy";
    default: return "?";
  }
}

const fcclAlgoSet* moveSet(int kind) {
  switch (kind) {
    case MOVE_ALLGATHER: return &fcclAllGatherAlgos;
    case MOVE_REDUCESCATTER: return &fcclReduceScatterAlgos;
    default: return &fcclBroadcastAlgos;
  }
}

int moveAlgo(int kind, int form) {
  const fcclAlgoSet* set = moveSet(kind);
  if (form == MOVE_AUTO) return -1;
  return form >= 0 && form < set->count ? set->algos[form] : FCCL_ALGO_IDS; /* no such form: an id the call refuses */
}

size_t moveSendElems(int kind, size_t count, int nranks) {
  return kind == MOVE_REDUCESCATTER ? count * (size_t)nranks : count;
}

size_t moveRecvElems(int kind, size_t count, int nranks) {
  return kind == MOVE_ALLGATHER ? count * (size_t)nranks : count;
}

static fcclSlotLayout envLayout(int nranks) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, fcclDeviceStagingBytes(), &layout);
  return layout;
}

int moveFormApplicable(int kind, int form, int nranks, size_t blockBytes, int registered) {
  if (form == MOVE_AUTO) return 1;
  /* The reduce-scatter has no copy form: no kernel of its own to force, at any count. */
  if (form == FCCL_MOVE_COPY && kind == MOVE_REDUCESCATTER) return 0;
  if (blockBytes == 0) return 1;
  const fcclSlotLayout layout = envLayout(nranks);
  switch (form) {
    case FCCL_MOVE_LL: return blockBytes <= layout.llBytes;
    case FCCL_MOVE_DIRECT:
    case FCCL_MOVE_COPY: return registered;
    case FCCL_MOVE_STAGED: {
      const uint64_t roundUnits = layout.chunkBytes / FCCL_UNIT_BYTES;
      const uint64_t units = (blockBytes + FCCL_UNIT_BYTES - 1) / FCCL_UNIT_BYTES;
      return roundUnits > 0 && (units + roundUnits - 1) / roundUnits + 2 <= FCCL_MAX_STEPS;
    }
    default: return 0;
  }
}

int moveAutoForm(int kind, int nranks, size_t blockBytes, int registered) {
  if (blockBytes == 0 || nranks == 1) return MOVE_AUTO;
  const fcclSlotLayout layout = envLayout(nranks);
  fcclAlgoQuery q = fcclAlgoQueryMake(blockBytes, nranks, registered, 0, 132, &layout, fcclDeviceLL128Auto(),
                                      fcclDeviceCopyScatterMin());
  q.copyMoveMin = fcclDeviceCopyMoveMin();
  fcclAlgoChoice choice;
  if (fcclMoveSelect(&q, moveSet(kind), &choice) != fcclSuccess) return MOVE_AUTO;
  return fcclAlgoSetForm(moveSet(kind), choice.algo);
}

void moveDescribe(const struct moveCase* c, uint64_t call, char* out, size_t size) {
  char root[16] = "-";
  if (c->kind == MOVE_BROADCAST) snprintf(root, sizeof(root), "%d%s", c->root, c->nullSend ? " (NULL send)" : "");
  snprintf(out, size, "call %llu: %s %s%s%s x %zu, %s, %s, offsets %zu/%zu, root %s", (unsigned long long)call,
           moveName(c->kind), refTypeName(c->type), c->kind == MOVE_REDUCESCATTER ? " " : "",
           c->kind == MOVE_REDUCESCATTER ? refOpName(c->op) : "", c->count, moveFormName(c->form),
           c->inPlace ? "in place" : "out of place", c->sendOffset, c->inPlace ? c->sendOffset : c->recvOffset, root);
}

static size_t maxSize(size_t a, size_t b) { return a > b ? a : b; }

size_t moveSendBytes(const struct moveCase* c, int nranks) {
  const size_t size = fcclTypeSize(c->type);
  const size_t send = moveSendElems(c->kind, c->count, nranks), recv = moveRecvElems(c->kind, c->count, nranks);
  return c->sendOffset + (c->inPlace ? maxSize(send, recv) : send) * size;
}

size_t moveRecvBytes(const struct moveCase* c, int nranks) {
  return c->inPlace ? 0 : c->recvOffset + moveRecvElems(c->kind, c->count, nranks) * fcclTypeSize(c->type);
}

void movePlaceIn(char* sendRegion, char* recvRegion, const struct moveCase* c, int rank, int nranks, char** sendbuf,
                 char** recvbuf, char** whole, size_t* wholeBytes) {
  const size_t size = fcclTypeSize(c->type);
  const size_t block = c->count * size;
  const size_t ownBlock = (size_t)rank * block;
  if (c->inPlace) {
    char* base = sendRegion + c->sendOffset;
    *whole = base;
    switch (c->kind) {
      case MOVE_ALLGATHER: /* our contribution is our block of the output */
        *recvbuf = base;
        *sendbuf = base + ownBlock;
        *wholeBytes = block * (size_t)nranks;
        break;
      case MOVE_REDUCESCATTER: /* our result is our block of the input */
        *sendbuf = base;
        *recvbuf = base + ownBlock;
        *wholeBytes = block * (size_t)nranks;
        break;
      default:
        *sendbuf = *recvbuf = base;
        *wholeBytes = block;
        break;
    }
    return;
  }
  *sendbuf = sendRegion + c->sendOffset;
  *recvbuf = recvRegion + c->recvOffset;
  if (c->kind == MOVE_BROADCAST && c->nullSend && rank != c->root) *sendbuf = NULL;
  *whole = *recvbuf;
  *wholeBytes = moveRecvElems(c->kind, c->count, nranks) * size;
}

void movePlace(const struct collContext* ctx, const struct moveCase* c, char** sendbuf, char** recvbuf, char** whole,
               size_t* wholeBytes) {
  movePlaceIn(ctx->send.base + COLL_GUARD, ctx->recv.base + COLL_GUARD, c, ctx->rank, ctx->nranks, sendbuf, recvbuf,
              whole, wholeBytes);
}

fcclResult_t moveCall(const struct moveCase* c, const void* sendbuf, void* recvbuf, fcclComm_t comm,
                      cudaStream_t stream) {
  const int algo = moveAlgo(c->kind, c->form);
  switch (c->kind) {
    case MOVE_ALLGATHER: return fcclAllGatherAlgo(sendbuf, recvbuf, c->count, c->type, comm, stream, algo);
    case MOVE_REDUCESCATTER:
      return fcclReduceScatterAlgo(sendbuf, recvbuf, c->count, c->type, c->op, comm, stream, algo);
    default: return fcclBroadcastAlgo(sendbuf, recvbuf, c->count, c->type, c->root, comm, stream, algo);
  }
}

/* Appends "element j = got, expected want; " to message for the first few wrong elements. */
static void describeWrong(const struct moveCase* c, size_t bad, size_t j, uint64_t got, uint64_t want, char* message,
                          size_t messageSize) {
  if (bad >= 4 || !message || messageSize == 0) return;
  const size_t used = strlen(message);
  if (used + 1 >= messageSize) return;
  char a[64], b[64];
  snprintf(message + used, messageSize - used, "%s[%zu] = %s, expected %s; ", bad ? "" : "element", j,
           refFormat(c->type, got, a, sizeof(a)), refFormat(c->type, want, b, sizeof(b)));
}

size_t moveCheckOutput(const struct moveCase* c, uint64_t seed, uint64_t call, uint64_t first, int rank, int nranks,
                       const void* out, char* message, size_t messageSize) {
  size_t bad = 0;
  if (message && messageSize) message[0] = '\0';
  switch (c->kind) {
    case MOVE_ALLGATHER:
      /* Element q x count + i is rank q's input element i, bit for bit (NaN payloads, -0.0 and subnormals too). */
      for (int q = 0; q < nranks; q++) {
        for (size_t i = 0; i < c->count; i++) {
          const size_t j = (size_t)q * c->count + i;
          const uint64_t want = refInputBits(c->type, seed, call, q, first + i, NULL);
          const uint64_t got = refLoadBits(c->type, out, j);
          if (got != want) describeWrong(c, bad++, j, got, want, message, messageSize);
        }
      }
      break;
    case MOVE_BROADCAST:
      for (size_t i = 0; i < c->count; i++) {
        const uint64_t want = refInputBits(c->type, seed, call, c->root, first + i, NULL);
        const uint64_t got = refLoadBits(c->type, out, i);
        if (got != want) describeWrong(c, bad++, i, got, want, message, messageSize);
      }
      break;
    default: {
      /* Element i reduces element rank x count + i of every rank's input, by the all-reduce's rules. */
      uint64_t in[REF_MAX_RANKS];
      for (size_t i = 0; i < c->count; i++) {
        for (int q = 0; q < nranks; q++)
          in[q] = refInputBits(c->type, seed, call, q, first + (uint64_t)rank * c->count + i, NULL);
        const uint64_t got = refLoadBits(c->type, out, i);
        if (!refCheckElement(c->type, c->op, got, in, nranks))
          describeWrong(c, bad++, i, got, refReduceBits(c->type, c->op, in, nranks), message, messageSize);
      }
      break;
    }
  }
  return bad;
}

static int guardsIntact(const unsigned char* before, const unsigned char* after) {
  for (int i = 0; i < COLL_GUARD; i++)
    if (before[i] != COLL_POISON || after[i] != COLL_POISON) return 0;
  return 1;
}

static int checking = 1;

void moveSetChecking(int on) { checking = on; }

int moveRunCase(struct collContext* ctx, const struct moveCase* c, uint64_t call) {
  const int rank = ctx->rank, nranks = ctx->nranks;
  const size_t size = fcclTypeSize(c->type);
  const size_t sendElems = moveSendElems(c->kind, c->count, nranks);
  char what[192];
  moveDescribe(c, call, what, sizeof(what));
  if (moveSendBytes(c, nranks) > ctx->send.capacity || moveRecvBytes(c, nranks) > ctx->recv.capacity) {
    testFail(__FILE__, __LINE__, "%s: does not fit the test buffers", what);
    return 1;
  }
  if (collVerbose()) fprintf(stderr, "rank %d: %s\n", rank, what);
  char *sendbuf = NULL, *recvbuf = NULL, *whole = NULL;
  size_t wholeBytes = 0;
  movePlace(ctx, c, &sendbuf, &recvbuf, &whole, &wholeBytes);

  COLL_CHECK_CUDA(what, cudaMemsetAsync(ctx->send.base, COLL_POISON, ctx->send.capacity + 2 * COLL_GUARD, ctx->stream));
  COLL_CHECK_CUDA(what, cudaMemsetAsync(ctx->recv.base, COLL_POISON, ctx->recv.capacity + 2 * COLL_GUARD, ctx->stream));
  /* This rank's input: its contribution (all-gather), its nranks blocks (reduce-scatter), its count elements
   * (broadcast: root's is the message; another rank's lies where it receives in place, or in its ignored send
   * region, which must stay as it was). */
  refFillInput(c->type, ctx->seed, call, rank, 0, ctx->hostIn, sendElems);
  if (sendbuf && sendElems)
    COLL_CHECK_CUDA(what, 
        cudaMemcpyAsync(sendbuf, ctx->hostIn, sendElems * size, cudaMemcpyHostToDevice, ctx->stream));

  fcclResult_t res = moveCall(c, sendbuf, recvbuf, ctx->comm, ctx->stream);
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
  COLL_CHECK_CUDA(what, cudaMemcpy(host, whole - COLL_GUARD, wholeBytes + 2 * COLL_GUARD, cudaMemcpyDeviceToHost));
  if (!guardsIntact(host, host + COLL_GUARD + wholeBytes)) {
    testFail(__FILE__, __LINE__, "rank %d: %s: bytes next to the output were overwritten", rank, what);
    problems++;
  }
  const unsigned char* out = host + COLL_GUARD;
  const size_t ownBlock = (size_t)rank * c->count * size;
  if (c->inPlace && c->kind == MOVE_REDUCESCATTER) {
    /* The other ranks' blocks of our input are read only. */
    const size_t blockBytes = c->count * size;
    if (memcmp(out, ctx->hostIn, ownBlock) != 0 ||
        memcmp(out + ownBlock + blockBytes, (const char*)ctx->hostIn + ownBlock + blockBytes,
               wholeBytes - ownBlock - blockBytes) != 0) {
      testFail(__FILE__, __LINE__, "rank %d: %s: the input blocks of the other ranks changed", rank, what);
      problems++;
    }
    out += ownBlock;
  }
  char message[512];
  const size_t bad = moveCheckOutput(c, ctx->seed, call, 0, rank, nranks, out, message, sizeof(message));
  if (bad) {
    testFail(__FILE__, __LINE__, "rank %d: %s: %zu of %zu elements wrong: %s", rank, what, bad,
             moveRecvElems(c->kind, c->count, nranks), message);
    problems++;
  } else {
    testPassed++;
  }
  if (c->kind != MOVE_REDUCESCATTER && call < COLL_MAX_HASHES)
    ctx->shared->hashes[call][rank] = refHash(out, moveRecvElems(c->kind, c->count, nranks) * size) | 1;
  if (!c->inPlace && sendbuf) {
    COLL_CHECK_CUDA(what,
                    cudaMemcpy(host, sendbuf - COLL_GUARD, sendElems * size + 2 * COLL_GUARD, cudaMemcpyDeviceToHost));
    if (memcmp(host + COLL_GUARD, ctx->hostIn, sendElems * size) != 0 ||
        !guardsIntact(host, host + COLL_GUARD + sendElems * size)) {
      testFail(__FILE__, __LINE__, "rank %d: %s: the input buffer (or its guards) changed", rank, what);
      problems++;
    }
  }
  return problems;
}

void moveSetEpoch(struct collContext* ctx, uint64_t epoch) {
  EXPECT_EQ_INT(fcclBarrier(ctx->comm, ctx->stream), fcclSuccess);
  EXPECT_EQ_INT(cudaStreamSynchronize(ctx->stream), cudaSuccess);
  EXPECT_EQ_INT(fcclDeviceSetEpochForTest(ctx->comm, epoch), fcclSuccess);
}
