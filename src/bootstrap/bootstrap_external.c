/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bootstrap through the application's own all-gather and barrier (an inference server's process group). fccl
 * cannot bound a callback's wait: the callbacks must return (with an error if need be) on their own. The abort
 * flag is checked before each call, and b->inCallback says while one runs, so that fcclCommAbort need not wait
 * for it (docs/bootstrap.md#the-external-and-nccl-methods).
 */
#include "bootstrap.h"

#include "check.h"
#include "socket.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct externalState {
  fcclBootstrapCallbacks_t callbacks;
};

static fcclResult_t callbackResult(fcclResult_t result, const char* name, int rank) {
  if (result == fcclSuccess) return fcclSuccess;
  if ((int)result > 0 && result < fcclNumResults && result != fcclInProgress)
    return FCCL_ERROR(result, FCCL_SUBSYS_BOOT, "rank %d: the application's bootstrap %s callback failed: %s", rank,
                      name, fcclGetErrorString(result));
  return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT,
                    "rank %d: the application's bootstrap %s callback returned %d, which is not an fcclResult_t "
                    "error code",
                    rank, name, (int)result);
}

static fcclResult_t externalAllGather(struct fcclBootstrap* b, void* allData, size_t bytesPerRank) {
  struct externalState* st = b->impl;
  if (fcclAborted(b->abortFlag))
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT, "rank %d: aborted (fcclCommAbort) before an all-gather",
                      b->rank);
  /* A separate send buffer: the application's all-gather need not support in-place operation. */
  uint8_t* mine = (uint8_t*)allData + (size_t)b->rank * bytesPerRank;
  uint8_t* send = calloc(bytesPerRank ? bytesPerRank : 1, 1);
  if (!send)
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for a %zu-byte all-gather", bytesPerRank);
  if (bytesPerRank) memcpy(send, mine, bytesPerRank);
  __atomic_store_n(&b->inCallback, 1, __ATOMIC_RELEASE);
  fcclResult_t called = st->callbacks.allgather(st->callbacks.userContext, send, allData, bytesPerRank);
  __atomic_store_n(&b->inCallback, 0, __ATOMIC_RELEASE);
  fcclResult_t res = callbackResult(called, "allgather", b->rank);
  if (res == fcclSuccess && bytesPerRank && memcmp(send, mine, bytesPerRank) != 0)
    res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT,
                     "rank %d: the application's allgather callback did not put this rank's bytes at position %d: it "
                     "must gather in rank order, and rank must be the process group's rank",
                     b->rank, b->rank);
  free(send);
  return res;
}

static fcclResult_t externalBarrier(struct fcclBootstrap* b) {
  struct externalState* st = b->impl;
  if (fcclAborted(b->abortFlag))
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT, "rank %d: aborted (fcclCommAbort) before a barrier",
                      b->rank);
  if (st->callbacks.barrier) {
    __atomic_store_n(&b->inCallback, 1, __ATOMIC_RELEASE);
    fcclResult_t called = st->callbacks.barrier(st->callbacks.userContext);
    __atomic_store_n(&b->inCallback, 0, __ATOMIC_RELEASE);
    return callbackResult(called, "barrier", b->rank);
  }
  /* No barrier callback: an all-gather of one byte is one. */
  uint8_t* token = calloc((size_t)b->nranks, 1);
  if (!token) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for a barrier");
  fcclResult_t res = externalAllGather(b, token, 1);
  free(token);
  return res;
}

static void externalDestroy(struct fcclBootstrap* b) {
  free(b->impl);
  free(b);
}

static const struct fcclBootstrapOps externalOps = {
    .name = "external", .allGather = externalAllGather, .barrier = externalBarrier, .destroy = externalDestroy};

fcclResult_t fcclBootstrapExternalInit(const fcclBootstrapCallbacks_t* callbacks, int rank, int nranks,
                                       volatile int* abortFlag, struct fcclBootstrap** bootstrap) {
  if (callbacks == NULL || callbacks->allgather == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "bootstrap callbacks%s are NULL",
                      callbacks ? "' allgather" : "");
  if (nranks < 1 || nranks > FCCL_BOOTSTRAP_MAX_RANKS)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "nranks %d outside 1..%d", nranks,
                      FCCL_BOOTSTRAP_MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "rank %d outside 0..%d", rank, nranks - 1);
  struct fcclBootstrap* b = calloc(1, sizeof(*b));
  struct externalState* st = calloc(1, sizeof(*st));
  if (!b || !st) {
    free(b);
    free(st);
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for the bootstrap");
  }
  st->callbacks = *callbacks;
  b->ops = &externalOps;
  b->rank = rank;
  b->nranks = nranks;
  b->timeoutMs = 0;
  b->abortFlag = abortFlag;
  b->pid = (int)getpid();
  b->impl = st;
  *bootstrap = b;
  return fcclSuccess;
}
