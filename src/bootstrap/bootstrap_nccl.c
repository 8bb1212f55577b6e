/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bootstrap through an existing NCCL communicator: all-gathers run as ncclAllGather on a device buffer, on a
 * stream of our own, and are waited for by polling (bounded by the timeout and the abort flag, and stopped by an
 * NCCL asynchronous error). NCCL is reached through base's loader (ncclwrap.h), which prefers the libnccl.so.2
 * the application already loaded: the one that made the communicator. The one method of this layer that uses
 * CUDA (device buffers are what NCCL moves).
 */
#include "bootstrap.h"

#include "check.h"
#include "fccl_build_config.h"
#include "ncclwrap.h"
#include "socket.h"

#if FCCL_HAVE_NCCL

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_BOOT

struct ncclState {
  ncclComm_t comm;
  cudaStream_t stream;
  fcclResult_t broken;
};

#define NCCLCHECKGOTO(call, what, res, label)                                                               \
  do {                                                                                                      \
    ncclResult_t ncclRes_ = (call);                                                                         \
    if (ncclRes_ != ncclSuccess && ncclRes_ != ncclInProgress) {                                            \
      (res) = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT, "%s failed: %s", (what),                        \
                         pfn_ncclGetErrorString(ncclRes_));                                                   \
      goto label;                                                                                           \
    }                                                                                                       \
  } while (0)

/* Waits for the stream: bounded by the deadline and the abort flag, and ended by an NCCL asynchronous error. On a
 * non-blocking NCCL communicator the all-gather answers ncclInProgress and reaches the stream only once NCCL's state
 * is ncclSuccess again: until then the stream's being idle says nothing. */
static fcclResult_t waitStream(struct fcclBootstrap* b, struct ncclState* st, int64_t deadline) {
  long sleepNs = 2000;
  for (;;) {
    ncclResult_t asyncError = ncclSuccess;
    if (pfn_ncclCommGetAsyncError(st->comm, &asyncError) == ncclSuccess && asyncError != ncclSuccess &&
        asyncError != ncclInProgress)
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT, "rank %d: the NCCL communicator failed: %s", b->rank,
                        pfn_ncclGetErrorString(asyncError));
    cudaError_t status = asyncError == ncclInProgress ? cudaErrorNotReady : cudaStreamQuery(st->stream);
    if (status == cudaSuccess) return fcclSuccess;
    if (status != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_BOOT, "rank %d: NCCL bootstrap all-gather failed: %s",
                        b->rank, cudaGetErrorString(status));
    }
    if (fcclAborted(b->abortFlag))
      return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT,
                        "rank %d: aborted (fcclCommAbort) during an NCCL all-gather", b->rank);
    if (fcclTimeMs() >= deadline)
      return FCCL_ERROR(fcclTimeout, FCCL_SUBSYS_BOOT,
                        "rank %d: an NCCL bootstrap all-gather did not finish within %d ms (a rank has not called "
                        "it?)",
                        b->rank, b->timeoutMs);
    struct timespec pause = {.tv_sec = 0, .tv_nsec = sleepNs};
    nanosleep(&pause, NULL);
    if (sleepNs < 1000000) sleepNs *= 2;
  }
}

static fcclResult_t ncclAllGatherOp(struct fcclBootstrap* b, void* allData, size_t bytesPerRank) {
  struct ncclState* st = b->impl;
  if (st->broken != fcclSuccess)
    return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                      "bootstrap all-gather after an earlier NCCL bootstrap failure: the communicator cannot be used");
  size_t chunk = bytesPerRank ? bytesPerRank : 1; /* NCCL all-gathers of 0 bytes synchronise nothing */
  size_t total = chunk * (size_t)b->nranks;
  int64_t deadline = fcclTimeMs() + b->timeoutMs;
  fcclResult_t res = fcclSuccess;
  char* dev = NULL;
  CUDACHECKGOTO(cudaMalloc((void**)&dev, total), res, out);
  if (bytesPerRank)
    CUDACHECKGOTO(cudaMemcpyAsync(dev + (size_t)b->rank * chunk, (char*)allData + (size_t)b->rank * chunk, chunk,
                                  cudaMemcpyHostToDevice, st->stream),
                  res, out);
  NCCLCHECKGOTO(pfn_ncclAllGather(dev + (size_t)b->rank * chunk, dev, chunk, ncclUint8, st->comm, st->stream),
                "ncclAllGather", res, out);
  res = waitStream(b, st, deadline);
  if (res != fcclSuccess) {
    /* The collective may still run and write dev: freeing it (or waiting for it) is not safe. Keep it. */
    FCCL_WARN(FCCL_SUBSYS_BOOT, "rank %d: keeping %zu bytes of device memory an unfinished NCCL all-gather may write",
              b->rank, total);
    st->broken = res;
    return res;
  }
  /* The stream is idle, so this copy into pageable memory cannot wait on anything else. */
  if (bytesPerRank) CUDACHECKGOTO(cudaMemcpyAsync(allData, dev, total, cudaMemcpyDeviceToHost, st->stream), res, out);
  CUDACHECKGOTO(cudaStreamSynchronize(st->stream), res, out);
out:
  if (res != fcclSuccess) st->broken = res;
  if (dev) cudaFree(dev);
  return res;
}

static fcclResult_t ncclBarrierOp(struct fcclBootstrap* b) { return ncclAllGatherOp(b, NULL, 0); }

static void ncclDestroyOp(struct fcclBootstrap* b) {
  struct ncclState* st = b->impl;
  if (st) {
    if (st->stream) cudaStreamDestroy(st->stream); /* returns at once; pending work still completes */
    free(st);
  }
  free(b);
}

static const struct fcclBootstrapOps ncclOps = {
    .name = "nccl", .allGather = ncclAllGatherOp, .barrier = ncclBarrierOp, .destroy = ncclDestroyOp};

fcclResult_t fcclBootstrapNcclInit(void* ncclComm, int timeoutMs, volatile int* abortFlag,
                                   struct fcclBootstrap** bootstrap) {
  if (ncclComm == NULL || bootstrap == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "NCCL bootstrap: NULL ncclComm or output");
  if (timeoutMs <= 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "bootstrap timeout %d ms is not positive", timeoutMs);
  const char* why = NULL;
  if (!fcclNcclLoaded(&why)) return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT, "NCCL bootstrap: %s", why);
  ncclComm_t comm = (ncclComm_t)ncclComm;
  int nranks = 0, rank = -1, ncclDev = -1, current = -1, version = 0;
  fcclResult_t res = fcclSuccess;
  struct fcclBootstrap* b = NULL;
  struct ncclState* st = NULL;
  NCCLCHECKGOTO(pfn_ncclGetVersion(&version), "ncclGetVersion", res, fail);
  NCCLCHECKGOTO(pfn_ncclCommCount(comm, &nranks), "ncclCommCount", res, fail);
  NCCLCHECKGOTO(pfn_ncclCommUserRank(comm, &rank), "ncclCommUserRank", res, fail);
  NCCLCHECKGOTO(pfn_ncclCommCuDevice(comm, &ncclDev), "ncclCommCuDevice", res, fail);
  CUDACHECKGOTO(cudaGetDevice(&current), res, fail);
  if (ncclDev != current) {
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT,
                     "the NCCL communicator uses device %d but the current device is %d: cudaSetDevice(%d) first",
                     ncclDev, current, ncclDev);
    goto fail;
  }
  if (nranks < 1 || nranks > FCCL_BOOTSTRAP_MAX_RANKS || rank < 0 || rank >= nranks) {
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "the NCCL communicator reports rank %d of %d", rank,
                     nranks);
    goto fail;
  }
  b = calloc(1, sizeof(*b));
  st = calloc(1, sizeof(*st));
  if (!b || !st) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for the bootstrap");
    goto fail;
  }
  st->comm = comm;
  CUDACHECKGOTO(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking), res, fail);
  b->ops = &ncclOps;
  b->rank = rank;
  b->nranks = nranks;
  b->timeoutMs = timeoutMs;
  b->abortFlag = abortFlag;
  b->pid = (int)getpid();
  b->impl = st;
  FCCL_INFO(FCCL_SUBSYS_BOOT, "rank %d of %d: bootstrap through NCCL %d on device %d", rank, nranks, version, ncclDev);
  *bootstrap = b;
  return fcclSuccess;
fail:
  free(st);
  free(b);
  return res;
}

#else /* !FCCL_HAVE_NCCL */

fcclResult_t fcclBootstrapNcclInit(void* ncclComm, int timeoutMs, volatile int* abortFlag,
                                   struct fcclBootstrap** bootstrap) {
  (void)ncclComm;
  (void)timeoutMs;
  (void)abortFlag;
  (void)bootstrap;
  return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT,
                    "fcclCommInitFromNccl: this fccl was built without NCCL (meson -Dnccl=enabled needs nccl.h)");
}

#endif
