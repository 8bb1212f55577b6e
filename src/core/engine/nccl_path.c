/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The communicator's NCCL communicator (nccl_path.h): creation through fccl's bootstrap, the calls NCCL carries,
 * groups, registration, asynchronous errors and teardown. The NCCL communicators are non-blocking: NCCL works on a
 * thread of its own, the communicator reading ncclInProgress until it is done, and every wait for it is fccl's
 * (waitNccl), bounded by the communicator's timeout, abort flag and peer monitor. A call's answer is not always that
 * state: ncclCommSplit answers ncclSuccess while its parent still reads ncclInProgress (fcclNcclSplitCall). NCCL is
 * reached through base's loader (ncclwrap.h); a build without nccl.h keeps only what reports that NCCL is missing.
 * docs/paths.md.
 */
#include "nccl_path.h"

#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "debug.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"
#include "ncclwrap.h"
#include "param.h"

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_COLL

#if FCCL_HAVE_NCCL

#include <cuda_runtime.h>

/* fccl's result, type and op values are NCCL's: they pass through unchanged. */
_Static_assert((int)ncclInProgress == (int)fcclInProgress && (int)ncclRemoteError == (int)fcclRemoteError,
               "fccl's result codes 0-7 are NCCL's");
_Static_assert((int)ncclBfloat16 == (int)fcclBfloat16 && (int)ncclFloat16 == (int)fcclFloat16 &&
                   (int)ncclUint64 == (int)fcclUint64,
               "fccl's datatypes are NCCL's");
_Static_assert((int)ncclAvg == (int)fcclAvg && (int)ncclMin == (int)fcclMin, "fccl's reduction ops are NCCL's");
_Static_assert((int)ncclScalarDevice == (int)fcclScalarDevice &&
                   (int)ncclScalarHostImmediate == (int)fcclScalarHostImmediate,
               "fccl's scalar residences are NCCL's");

struct fcclNcclReg {
  struct fcclNcclReg* next;
  void* handle; /* ncclCommRegister's */
};

struct fcclNcclComm {
  ncclComm_t comm;
  int broken;          /* a wait on NCCL failed or timed out: teardown aborts instead of finalizing */
  int waiters;         /* atomic: threads inside waitNccl, which an fcclCommAbort from another thread waits out */
  float* barrierWord;  /* device word of the barrier's all-reduce */
  /* atomic: where ncclCommSplit of comm writes the new communicator (fcclNcclSplitCall). NCCL writes it from its
   * own thread when the new one's init ends, which may come after a wait that gave up: it lives as long as comm,
   * whose abort ends that init, and what is found here then is aborted too (releaseNccl). */
  ncclComm_t splitLanding;
  struct fcclNcclReg* regs;
  unsigned long regCount; /* atomic: read by fcclCommGetMemStats from any thread */
};

static fcclResult_t fromNccl(ncclResult_t result) {
  return (int)result >= 0 && (int)result <= (int)fcclInProgress ? (fcclResult_t)result : fcclInternalError;
}

/* How long a wait on NCCL polls without sleeping: a call's launch on NCCL's thread takes tens of microseconds, and
 * the shortest sleep takes the timer's slack (50 us by default) on top. */
#define FCCL_NCCL_SPIN_NS 200000

static int64_t nowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/*
 * Waits while NCCL reports ncclInProgress on comm: a non-blocking communicator's init, every call's launch on NCCL's
 * thread, a group's end, a finalize. Bounded by the fccl communicator's timeout and abort flag, which its peer
 * monitor sets when a peer is gone (the failure it recorded is then the error). A failure marks the NCCL
 * communicator broken: it is aborted, never finalized.
 */
static fcclResult_t waitLoop(struct fcclComm* owner, ncclComm_t comm, struct fcclNcclComm* nc, const char* what) {
  const int64_t start = nowNs();
  const int64_t deadline = start + (int64_t)owner->timeoutMs * 1000000;
  long sleepNs = 1000;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t queried = pfn_ncclCommGetAsyncError(comm, &state);
    if (queried != ncclSuccess) state = queried;
    if (state == ncclSuccess) return fcclSuccess;
    if (state != ncclInProgress) {
      if (nc) nc->broken = 1;
      return FCCL_ERROR(fromNccl(state), FCCL_SUBSYS_COLL, "rank %d: %s: NCCL failed: %s (%s)", owner->rank, what,
                        pfn_ncclGetErrorString(state), pfn_ncclGetLastError(comm));
    }
    if (__atomic_load_n(owner->abortFlag, __ATOMIC_ACQUIRE)) {
      if (nc) nc->broken = 1;
      char failure[FCCL_LAST_ERROR_MAX - 128]; /* room for the words around it */
      const fcclResult_t cause = fcclCommFailure(owner, failure, sizeof(failure));
      if (cause != fcclSuccess)
        return FCCL_ERROR(cause, FCCL_SUBSYS_COLL, "rank %d: %s: stopped while NCCL worked: %s", owner->rank, what,
                          failure);
      return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL, "rank %d: %s: aborted (fcclCommAbort) while NCCL worked",
                        owner->rank, what);
    }
    const int64_t now = nowNs();
    if (now >= deadline) {
      if (nc) nc->broken = 1;
      return FCCL_ERROR(fcclTimeout, FCCL_SUBSYS_COLL,
                        "rank %d: %s: NCCL did not finish within %d ms (a rank has not made the call?)", owner->rank,
                        what, owner->timeoutMs);
    }
    if (now - start < FCCL_NCCL_SPIN_NS) {
      sched_yield(); /* NCCL's thread may need this core */
      continue;
    }
    struct timespec pause = {.tv_sec = 0, .tv_nsec = sleepNs};
    nanosleep(&pause, NULL);
    if (sleepNs < 1000000) sleepNs *= 2;
  }
}

static fcclResult_t waitNccl(struct fcclComm* owner, ncclComm_t comm, struct fcclNcclComm* nc, const char* what) {
  if (nc) __atomic_add_fetch(&nc->waiters, 1, __ATOMIC_ACQ_REL);
  fcclResult_t res = waitLoop(owner, comm, nc, what);
  if (nc) __atomic_sub_fetch(&nc->waiters, 1, __ATOMIC_ACQ_REL);
  return res;
}

/* ---- groups: per thread, as NCCL's ---- */

static _Thread_local int groupDepth;
static _Thread_local struct fcclComm** groupComms; /* the communicators whose NCCL calls the group holds */
static _Thread_local int groupCount, groupCapacity;

static fcclResult_t groupRemember(struct fcclComm* comm) {
  for (int i = 0; i < groupCount; i++)
    if (groupComms[i] == comm) return fcclSuccess;
  if (groupCount == groupCapacity) {
    int capacity = groupCapacity ? 2 * groupCapacity : 8;
    struct fcclComm** grown = realloc(groupComms, (size_t)capacity * sizeof(*grown));
    if (!grown) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_COLL, "out of host memory for a group");
    groupComms = grown;
    groupCapacity = capacity;
  }
  groupComms[groupCount++] = comm;
  return fcclSuccess;
}

/* The result of an NCCL call on nc, an NCCL communicator of comm's: in a group it is held until the group ends (on
 * comm->nccl: a rail's calls are never made in a group); else ncclInProgress is waited for. */
static fcclResult_t issuedOn(struct fcclComm* comm, struct fcclNcclComm* nc, ncclResult_t result, const char* caller,
                             const char* nccl) {
  if (result != ncclSuccess && result != ncclInProgress)
    return FCCL_ERROR(fromNccl(result), FCCL_SUBSYS_COLL, "%s: %s failed: %s (%s)", caller, nccl,
                      pfn_ncclGetErrorString(result), pfn_ncclGetLastError(nc->comm));
  if (groupDepth > 0) return groupRemember(comm);
  if (result == ncclInProgress) return waitNccl(comm, nc->comm, nc, caller);
  return fcclSuccess;
}

int fcclNcclGroupActive(void) { return groupDepth > 0; }

static fcclResult_t ncclUnavailable(const char* caller) {
  const char* why = NULL;
  if (fcclNcclLoaded(&why)) return fcclSuccess;
  return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL, "%s: NCCL is needed: %s; install NCCL 2.x (libnccl.so.2)",
                    caller, why);
}

FCCL_API fcclResult_t fcclGroupStart(void) {
  fcclClearError();
  FCCLCHECK(ncclUnavailable("fcclGroupStart"));
  ncclResult_t result = pfn_ncclGroupStart();
  if (result != ncclSuccess)
    return FCCL_ERROR(fromNccl(result), FCCL_SUBSYS_COLL, "fcclGroupStart: ncclGroupStart failed: %s",
                      pfn_ncclGetErrorString(result));
  groupDepth++;
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclGroupEnd(void) {
  fcclClearError();
  if (groupDepth == 0)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "fcclGroupEnd: no group was started on this thread (fcclGroupStart)");
  ncclResult_t result = pfn_ncclGroupEnd();
  groupDepth--;
  if (groupDepth > 0) {
    if (result == ncclSuccess || result == ncclInProgress) return fcclSuccess;
    return FCCL_ERROR(fromNccl(result), FCCL_SUBSYS_COLL, "fcclGroupEnd: ncclGroupEnd failed: %s",
                      pfn_ncclGetErrorString(result));
  }
  /* The outermost end: the grouped calls are issued; each communicator's setup is waited for. */
  fcclResult_t res = fcclSuccess;
  if (result != ncclSuccess && result != ncclInProgress)
    res = FCCL_ERROR(fromNccl(result), FCCL_SUBSYS_COLL, "fcclGroupEnd: ncclGroupEnd failed: %s (%s)",
                     pfn_ncclGetErrorString(result), pfn_ncclGetLastError(NULL));
  for (int i = 0; i < groupCount && res == fcclSuccess; i++) {
    struct fcclComm* comm = groupComms[i];
    if (fcclCommIsValid(comm) && comm->nccl) {
      res = waitNccl(comm, comm->nccl->comm, comm->nccl, "fcclGroupEnd");
      if (res != fcclSuccess) fcclCommRecordThreadError(comm);
    }
  }
  free(groupComms);
  groupComms = NULL;
  groupCount = groupCapacity = 0;
  return res;
}

/* ---- the calls ---- */

/* Ends the group that a call made of several NCCL calls opened, whatever happened (NCCL's group state is per thread
 * and must not stay open); res is the calls' result, whose message is kept. */
static fcclResult_t endOwnGroup(fcclResult_t res) {
  char cause[FCCL_LAST_ERROR_MAX];
  snprintf(cause, sizeof(cause), "%s", fcclThreadLastError());
  fcclResult_t ended = fcclGroupEnd();
  if (res != fcclSuccess) {
    fcclRestoreThreadError(cause);
    return res;
  }
  return ended;
}

/* A gather or a scatter as NCCL's sends and receives in one group (any NCCL 2.x, not only 2.28's ncclGather and
 * ncclScatter): the root's own block goes through a send to itself unless the call is in place. */
static fcclResult_t rootedGroup(struct fcclComm* comm, struct fcclNcclComm* nc, const struct fcclCall* call,
                                cudaStream_t stream) {
  const char* caller = call->coll->name;
  const ncclDataType_t type = (ncclDataType_t)call->datatype;
  const size_t count = call->count;
  const size_t block = count * fcclTypeSize(call->datatype);
  const int root = call->root, me = comm->rank;
  const int gather = call->coll->ncclForm == FCCL_NCCL_GATHER;
  const int inPlace = me == root && (gather ? (const char*)call->sendbuf == (char*)call->recvbuf + root * block
                                            : (char*)call->recvbuf == (const char*)call->sendbuf + root * block);
  FCCLCHECK(fcclGroupStart());
  fcclResult_t res = fcclSuccess;
  if (gather) {
    if (!inPlace)
      res = issuedOn(comm, nc, pfn_ncclSend(call->sendbuf, count, type, root, nc->comm, stream), caller, "ncclSend");
    for (int p = 0; me == root && p < comm->nranks && res == fcclSuccess; p++)
      if (p != me || !inPlace)
        res = issuedOn(comm, nc,
                       pfn_ncclRecv((char*)call->recvbuf + (size_t)p * block, count, type, p, nc->comm, stream), caller,
                       "ncclRecv");
  } else {
    for (int p = 0; me == root && p < comm->nranks && res == fcclSuccess; p++)
      if (p != me || !inPlace)
        res = issuedOn(comm, nc,
                       pfn_ncclSend((const char*)call->sendbuf + (size_t)p * block, count, type, p, nc->comm, stream),
                       caller, "ncclSend");
    if (res == fcclSuccess && !inPlace)
      res = issuedOn(comm, nc, pfn_ncclRecv(call->recvbuf, count, type, root, nc->comm, stream), caller, "ncclRecv");
  }
  return endOwnGroup(res);
}

fcclResult_t fcclNcclLaunch(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream) {
  return fcclNcclLaunchOn(comm, comm->nccl, call, stream);
}

fcclResult_t fcclNcclLaunchOn(struct fcclComm* comm, struct fcclNcclComm* nc, const struct fcclCall* call,
                              cudaStream_t stream) {
  const char* caller = call->coll->name;
  const ncclDataType_t type = (ncclDataType_t)call->datatype;
  const ncclRedOp_t op = (ncclRedOp_t)call->op;
  const size_t count = call->count;
  switch (call->coll->ncclForm) {
    case FCCL_NCCL_ALLREDUCE:
      return issuedOn(comm, nc, pfn_ncclAllReduce(call->sendbuf, call->recvbuf, count, type, op, nc->comm, stream),
                      caller, "ncclAllReduce");
    case FCCL_NCCL_ALLGATHER:
      return issuedOn(comm, nc, pfn_ncclAllGather(call->sendbuf, call->recvbuf, count, type, nc->comm, stream),
                      caller, "ncclAllGather");
    case FCCL_NCCL_REDUCESCATTER:
      return issuedOn(comm, nc,
                      pfn_ncclReduceScatter(call->sendbuf, call->recvbuf, count, type, op, nc->comm, stream), caller,
                      "ncclReduceScatter");
    case FCCL_NCCL_BROADCAST:
      return issuedOn(comm, nc,
                      pfn_ncclBroadcast(call->sendbuf, call->recvbuf, count, type, call->root, nc->comm, stream),
                      caller, "ncclBroadcast");
    case FCCL_NCCL_BARRIER:
      return issuedOn(comm, nc,
                      pfn_ncclAllReduce(nc->barrierWord, nc->barrierWord, 1, ncclFloat32, ncclSum, nc->comm, stream),
                      caller, "ncclAllReduce");
    case FCCL_NCCL_SEND:
      return issuedOn(comm, nc, pfn_ncclSend(call->sendbuf, count, type, call->root, nc->comm, stream), caller,
                      "ncclSend");
    case FCCL_NCCL_RECV:
      return issuedOn(comm, nc, pfn_ncclRecv(call->recvbuf, count, type, call->root, nc->comm, stream), caller,
                      "ncclRecv");
    case FCCL_NCCL_ALLTOALL: {
      const size_t block = count * fcclTypeSize(call->datatype);
      FCCLCHECK(fcclGroupStart());
      fcclResult_t res = fcclSuccess;
      for (int p = 0; p < comm->nranks && res == fcclSuccess; p++) {
        res = issuedOn(comm, nc,
                       pfn_ncclSend((const char*)call->sendbuf + (size_t)p * block, count, type, p, nc->comm, stream),
                       caller, "ncclSend");
        if (res == fcclSuccess)
          res = issuedOn(comm, nc,
                         pfn_ncclRecv((char*)call->recvbuf + (size_t)p * block, count, type, p, nc->comm, stream),
                         caller, "ncclRecv");
      }
      return endOwnGroup(res);
    }
    case FCCL_NCCL_REDUCE: /* recvbuf is the root's only (NCCL takes NULL elsewhere) */
      return issuedOn(comm, nc,
                      pfn_ncclReduce(call->sendbuf, comm->rank == call->root ? call->recvbuf : NULL, count, type, op,
                                     call->root, nc->comm, stream),
                      caller, "ncclReduce");
    case FCCL_NCCL_GATHER:
    case FCCL_NCCL_SCATTER: return rootedGroup(comm, nc, call, stream);
    default:
      return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_COLL, "%s has no NCCL form", caller);
  }
}

fcclResult_t fcclNcclAsyncError(struct fcclComm* comm) { return fcclNcclAsyncErrorOn(comm, comm->nccl); }

/* ---- pre-multiplied sums ---- */

fcclResult_t fcclNcclRedOpCreatePreMulSum(struct fcclComm* comm, void* scalar, fcclDataType_t datatype,
                                          fcclScalarResidence_t residence, int* ncclOp) {
  static const char* const caller = "fcclRedOpCreatePreMulSum";
  struct fcclNcclComm* nc = comm->nccl;
  if (!nc)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL, "%s: the communicator has no NCCL communicator (%s)", caller,
                      comm->ncclMissing[0] ? comm->ncclMissing : "its init failed");
  ncclRedOp_t made = ncclSum;
  ncclResult_t result = pfn_ncclRedOpCreatePreMulSum(&made, scalar, (ncclDataType_t)datatype,
                                                     (ncclScalarResidence_t)residence, nc->comm);
  if (result != ncclSuccess && result != ncclInProgress)
    return FCCL_ERROR(fromNccl(result), FCCL_SUBSYS_COLL, "%s: ncclRedOpCreatePreMulSum failed: %s (%s)", caller,
                      pfn_ncclGetErrorString(result), pfn_ncclGetLastError(nc->comm));
  if (result == ncclInProgress) FCCLCHECK(waitNccl(comm, nc->comm, nc, caller));
  *ncclOp = (int)made;
  return fcclSuccess;
}

fcclResult_t fcclNcclRedOpDestroy(struct fcclComm* comm, int ncclOp) {
  static const char* const caller = "fcclRedOpDestroy";
  struct fcclNcclComm* nc = comm->nccl;
  if (!nc) return fcclSuccess; /* gone with the NCCL communicator */
  ncclResult_t result = pfn_ncclRedOpDestroy((ncclRedOp_t)ncclOp, nc->comm);
  if (result != ncclSuccess && result != ncclInProgress)
    return FCCL_ERROR(fromNccl(result), FCCL_SUBSYS_COLL, "%s: ncclRedOpDestroy of op %d failed: %s (%s)", caller,
                      ncclOp, pfn_ncclGetErrorString(result), pfn_ncclGetLastError(nc->comm));
  if (result == ncclInProgress) FCCLCHECK(waitNccl(comm, nc->comm, nc, caller));
  return fcclSuccess;
}

fcclResult_t fcclNcclAsyncErrorOn(struct fcclComm* comm, struct fcclNcclComm* nc) {
  if (!nc) return fcclSuccess;
  ncclResult_t state = ncclSuccess;
  ncclResult_t queried = pfn_ncclCommGetAsyncError(nc->comm, &state);
  if (queried != ncclSuccess) state = queried;
  if (state == ncclSuccess || state == ncclInProgress) return fcclSuccess;
  char text[FCCL_LAST_ERROR_MAX];
  snprintf(text, sizeof(text), "rank %d: NCCL reported an asynchronous error: %s (%s)", comm->rank,
           pfn_ncclGetErrorString(state), pfn_ncclGetLastError(nc->comm));
  nc->broken = 1;
  fcclCommFail(comm, fromNccl(state), text, 0);
  return fromNccl(state);
}

/* NCCL has no variable all-gather or reduce-scatter: a group of one ncclBroadcast (ncclReduce) per rank whose block
 * is not empty, that rank the root, its block at its place in the buffer of every block. Every rank skips the same
 * empty blocks, since every rank has the same counts. Off the root, the block's own place stands for the buffer NCCL
 * ignores there. */
fcclResult_t fcclNcclLaunchVariable(struct fcclComm* comm, struct fcclNcclComm* nc, const char* caller, int reduces,
                                    const void* sendbuf, void* recvbuf, const size_t* counts, fcclDataType_t datatype,
                                    fcclRedOp_t op, cudaStream_t stream) {
  const size_t size = fcclTypeSize(datatype);
  const ncclDataType_t type = (ncclDataType_t)datatype;
  FCCLCHECK(fcclGroupStart());
  fcclResult_t res = fcclSuccess;
  size_t at = 0;
  for (int root = 0; root < comm->nranks && res == fcclSuccess; root++) {
    const size_t count = counts[root];
    char* block = (reduces ? (char*)(uintptr_t)sendbuf : (char*)recvbuf) + at * size;
    at += count;
    if (count == 0) continue;
    const int mine = root == comm->rank;
    if (reduces)
      res = issuedOn(comm, nc,
                     pfn_ncclReduce(block, mine ? recvbuf : block, count, type, (ncclRedOp_t)op, root, nc->comm,
                                    stream),
                     caller, "ncclReduce");
    else
      res = issuedOn(comm, nc, pfn_ncclBroadcast(mine ? sendbuf : block, block, count, type, root, nc->comm, stream),
                     caller, "ncclBroadcast");
  }
  /* The group is ended whatever happened: NCCL's group state is per thread and must not stay open. */
  char cause[FCCL_LAST_ERROR_MAX];
  snprintf(cause, sizeof(cause), "%s", fcclThreadLastError());
  fcclResult_t ended = fcclGroupEnd();
  if (res != fcclSuccess) {
    fcclRestoreThreadError(cause);
    return res;
  }
  return ended;
}

/* ---- registration ---- */

fcclResult_t fcclNcclRegister(struct fcclComm* comm, void* buf, size_t size, fcclRegHandle_t* handle) {
  struct fcclNcclComm* nc = comm->nccl;
  struct fcclNcclReg* reg = calloc(1, sizeof(*reg));
  if (!reg) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "fcclCommRegister: out of host memory");
  ncclResult_t result = pfn_ncclCommRegister(nc->comm, buf, size, &reg->handle);
  fcclResult_t res = fcclSuccess;
  if (result == ncclInProgress)
    res = waitNccl(comm, nc->comm, nc, "fcclCommRegister");
  else if (result != ncclSuccess)
    res = FCCL_ERROR(fromNccl(result), FCCL_SUBSYS_IPC, "fcclCommRegister: ncclCommRegister of %zu bytes at %p "
                     "failed: %s (%s)", size, buf, pfn_ncclGetErrorString(result), pfn_ncclGetLastError(nc->comm));
  if (res != fcclSuccess) {
    free(reg);
    return res;
  }
  reg->next = nc->regs;
  nc->regs = reg;
  __atomic_add_fetch(&nc->regCount, 1, __ATOMIC_RELAXED);
  *handle = (fcclRegHandle_t)(void*)reg;
  return fcclSuccess;
}

fcclResult_t fcclNcclDeregister(struct fcclComm* comm, fcclRegHandle_t handle) {
  struct fcclNcclComm* nc = comm->nccl;
  struct fcclNcclReg** link = &nc->regs;
  while (*link && (void*)*link != (void*)handle) link = &(*link)->next;
  if (!*link)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                      "fcclCommDeregister: %p is not a live registration of this communicator", (void*)handle);
  struct fcclNcclReg* reg = *link;
  ncclResult_t result = pfn_ncclCommDeregister(nc->comm, reg->handle);
  *link = reg->next;
  free(reg);
  __atomic_sub_fetch(&nc->regCount, 1, __ATOMIC_RELAXED);
  if (result == ncclInProgress) return waitNccl(comm, nc->comm, nc, "fcclCommDeregister");
  if (result != ncclSuccess)
    return FCCL_ERROR(fromNccl(result), FCCL_SUBSYS_IPC, "fcclCommDeregister: ncclCommDeregister failed: %s",
                      pfn_ncclGetErrorString(result));
  return fcclSuccess;
}

unsigned long fcclNcclRegistrations(struct fcclComm* comm) {
  struct fcclNcclComm* nc = comm ? __atomic_load_n(&comm->nccl, __ATOMIC_ACQUIRE) : NULL;
  return nc ? __atomic_load_n(&nc->regCount, __ATOMIC_RELAXED) : 0;
}

/* ---- lifecycle ---- */

/* What rank 0 sends every rank: whether it made an id, and the id. Every rank's slot has this size. */
struct idRecord {
  int32_t result; /* fcclResult_t of rank 0's ncclGetUniqueId */
  int32_t reserved;
  ncclUniqueId id;
};

static void releaseNccl(struct fcclComm* owner, struct fcclNcclComm* nc) {
  /* fcclCommAbort from another thread while a call waits for NCCL: the abort flag is set, so the waiter leaves
   * within one poll slice (at most 1 ms); it must be gone before the NCCL communicator is. */
  while (__atomic_load_n(&nc->waiters, __ATOMIC_ACQUIRE) > 0) {
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 100000};
    nanosleep(&pause, NULL);
  }
  if (nc->comm) {
    ncclResult_t state = ncclSuccess;
    const int failed = pfn_ncclCommGetAsyncError(nc->comm, &state) != ncclSuccess ||
                       (state != ncclSuccess && state != ncclInProgress);
    /* A failed NCCL communicator's work may never finish: only an abort ends it without waiting. */
    const int aborting = nc->broken || failed || __atomic_load_n(owner->abortFlag, __ATOMIC_ACQUIRE);
    while (nc->regs) {
      struct fcclNcclReg* reg = nc->regs;
      nc->regs = reg->next;
      if (!aborting) (void)pfn_ncclCommDeregister(nc->comm, reg->handle); /* an abort releases them itself */
      free(reg);
    }
    int destroyed = 0;
    if (!aborting) {
      ncclResult_t result = pfn_ncclCommFinalize(nc->comm);
      if ((result == ncclSuccess || result == ncclInProgress) &&
          waitNccl(owner, nc->comm, nc, "ncclCommFinalize") == fcclSuccess)
        destroyed = pfn_ncclCommDestroy(nc->comm) == ncclSuccess;
    }
    /* Aborted, or the finalize did not complete: NCCL stops its kernels and threads and frees the rest. */
    if (!destroyed) (void)pfn_ncclCommAbort(nc->comm);
    nc->comm = NULL;
    /* A split whose wait gave up: the abort above ended the new communicator's init, which wrote it here (a failed
     * communicator, NCCL's to free through its abort). */
    ncclComm_t late = __atomic_exchange_n(&nc->splitLanding, NULL, __ATOMIC_ACQ_REL);
    if (late) (void)pfn_ncclCommAbort(late);
  }
  if (nc->barrierWord) CUDACHECKIGNORE(cudaFree(nc->barrierWord));
  free(nc);
}

fcclResult_t fcclNcclCommFree(struct fcclComm* comm) {
  struct fcclNcclComm* nc = comm->nccl;
  if (!nc) return fcclSuccess;
  __atomic_store_n(&comm->nccl, NULL, __ATOMIC_RELEASE);
  fcclNcclRailFree(comm, nc); /* released the same way: the comm's device current, then the caller's back */
  return fcclSuccess;
}

/*
 * This rank's start of the creation: rank of an NCCL communicator of nranks, non-blocking, so that NCCL's init runs
 * on a thread of NCCL's and every wait for it is fccl's, bounded (finishLocal). What fails here fails at once (NCCL
 * without a usable interface, a bad argument): the peers learn of it before any of them waits for this rank inside
 * NCCL's rendezvous, where no peer's failure would reach them.
 */
static fcclResult_t startLocal(struct fcclComm* comm, const ncclUniqueId* id, int nranks, int rank,
                               struct fcclNcclComm* nc) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (comm->name[0]) config.commName = comm->name;
  /* The SM budget carries over to NCCL's kernels (NCCL caps it at its channel count; its own NCCL_MIN_CTAS and
   * NCCL_MAX_CTAS still override it, as they override any config). */
  const int minCtas = fcclDeviceCtaBound(comm->minCtas, FCCL_PARAM_MIN_CTAS);
  const int maxCtas = fcclDeviceCtaBound(comm->maxCtas, FCCL_PARAM_MAX_CTAS);
  if (minCtas > 0) config.minCTAs = minCtas;
  if (maxCtas > 0) config.maxCTAs = maxCtas;
  ncclResult_t result = pfn_ncclCommInitRankConfig(&nc->comm, nranks, *id, rank, &config);
  if (result == ncclSuccess || result == ncclInProgress) return fcclSuccess;
  if (nc->comm) nc->broken = 1;
  return FCCL_ERROR(fromNccl(result), FCCL_SUBSYS_INIT, "rank %d: ncclCommInitRankConfig failed: %s (%s)", comm->rank,
                    pfn_ncclGetErrorString(result), pfn_ncclGetLastError(NULL));
}

/* The rest of this rank's creation: NCCL's init waited for (bounded by the timeout, the abort flag and the peer
 * monitor, which sets it), then the barrier's device word. */
static fcclResult_t finishLocal(struct fcclComm* comm, struct fcclNcclComm* nc) {
  FCCLCHECK(waitNccl(comm, nc->comm, nc, "ncclCommInitRankConfig"));
  CUDACHECK(cudaMalloc((void**)&nc->barrierWord, sizeof(float)));
  CUDACHECK(cudaMemset(nc->barrierWord, 0, sizeof(float)));
  return fcclSuccess;
}

/* An all-gather of every rank's result of a step of the creation (results: a slot per rank of comm). *failedRank:
 * the first rank that failed, or -1. The exchange's own failure is returned. */
static fcclResult_t gatherResults(struct fcclComm* comm, int32_t* results, fcclResult_t local, int* failedRank) {
  *failedRank = -1;
  results[comm->rank] = (int32_t)local;
  FCCLCHECK(fcclBootstrapAllGather(comm->bootstrap, results, sizeof(*results)));
  for (int r = 0; r < comm->nranks && *failedRank < 0; r++)
    if (results[r] != fcclSuccess) *failedRank = r;
  return fcclSuccess;
}

/* A rank that failed a step: this rank's own cause (kept in cause), or fcclRemoteError naming the other. */
static fcclResult_t failedStep(struct fcclComm* comm, const int32_t* results, int failed, fcclResult_t local,
                               const char* cause, const char* what) {
  if (failed == comm->rank) {
    fcclRestoreThreadError(cause);
    return local;
  }
  return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_INIT, "rank %d could not create its %s (%s)", failed, what,
                    fcclGetErrorString((fcclResult_t)results[failed]));
}

/*
 * Makes an NCCL communicator of nranks in which this rank is rank, over every rank of comm's bootstrap: the ranks
 * whose leader (a rank of comm) is the same form one NCCL communicator, the leader its NCCL rank 0 and maker of its
 * unique id. Collective over comm. Every rank learns whether every rank made its own: *out is set on every rank or
 * on none. *failedRank: the first rank that could not (-1 when all could).
 * Three exchanges of fccl's bootstrap: the ids; whether every rank started NCCL's init (so that no rank waits in
 * NCCL's rendezvous for one that failed at once: those that started abort theirs); whether every rank finished it.
 * A rank whose init fails while it runs aborts it before the last exchange, which closes its NCCL connections:
 * peers waiting for it inside NCCL see them close, or give up at the timeout.
 */
static fcclResult_t createGroup(struct fcclComm* comm, int nranks, int rank, int leader, const char* what,
                                struct fcclNcclComm** out, int* failedRank) {
  *out = NULL;
  *failedRank = -1;
  const char* why = NULL;
  if (!fcclNcclLoaded(&why)) /* the path decision saw every rank load it: this is a bug if reached */
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_INIT, "NCCL vanished after the path decision: %s", why);
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  struct idRecord* ids = calloc((size_t)comm->nranks, sizeof(*ids));
  int32_t* results = calloc((size_t)comm->nranks, sizeof(*results));
  struct fcclNcclComm* nc = calloc(1, sizeof(*nc));
  fcclResult_t res = fcclSuccess;
  char cause[FCCL_LAST_ERROR_MAX];
  if (!ids || !results || !nc) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of host memory for the NCCL communicator");
    goto exit;
  }
  if (comm->rank == leader) {
    ncclResult_t result = pfn_ncclGetUniqueId(&ids[comm->rank].id);
    ids[comm->rank].result = (int32_t)fromNccl(result);
    if (result != ncclSuccess)
      (void)FCCL_ERROR(fromNccl(result), FCCL_SUBSYS_INIT, "rank %d: ncclGetUniqueId failed: %s (%s)", comm->rank,
                       pfn_ncclGetErrorString(result), pfn_ncclGetLastError(NULL));
  }
  /* fccl's bootstrap carries NCCL's ids: an all-gather of which each rank reads its leader's slot. */
  FCCLCHECKGOTO(fcclBootstrapAllGather(comm->bootstrap, ids, sizeof(*ids)), res, exit);
  fcclResult_t local = (fcclResult_t)ids[leader].result;
  if (local != fcclSuccess && comm->rank != leader)
    (void)FCCL_ERROR(local, FCCL_SUBSYS_INIT, "rank %d could not make NCCL's unique id (%s)", leader,
                     fcclGetErrorString(local));
  if (local == fcclSuccess) local = startLocal(comm, &ids[leader].id, nranks, rank, nc);
  snprintf(cause, sizeof(cause), "%s", fcclThreadLastError());
  FCCLCHECKGOTO(gatherResults(comm, results, local, failedRank), res, exit);
  if (*failedRank < 0) {
    local = finishLocal(comm, nc);
    if (local != fcclSuccess) {
      snprintf(cause, sizeof(cause), "%s", fcclThreadLastError());
      nc->broken = 1;
      releaseNccl(comm, nc); /* its connections close now, not after the exchange below */
      nc = NULL;
    }
    /* Every rank learns whether every rank has its NCCL communicator, so that all keep it or none does. */
    FCCLCHECKGOTO(gatherResults(comm, results, local, failedRank), res, exit);
  }
  if (*failedRank >= 0) {
    res = failedStep(comm, results, *failedRank, local, cause, what);
    goto exit;
  }
  int version = 0;
  (void)pfn_ncclGetVersion(&version);
  clock_gettime(CLOCK_MONOTONIC, &end);
  FCCL_INFO(FCCL_SUBSYS_INIT, "rank %d: %s %p (NCCL %d, rank %d of %d) ready in %.1f ms", comm->rank, what,
            (void*)nc->comm, version, rank, nranks,
            (double)(end.tv_sec - start.tv_sec) * 1e3 + (double)(end.tv_nsec - start.tv_nsec) / 1e6);
  *out = nc;
  nc = NULL;
exit:
  if (nc) {
    nc->broken = 1; /* not every rank has one: aborted, never finalized against peers that may not be there */
    releaseNccl(comm, nc);
  }
  free(ids);
  free(results);
  return res;
}

fcclResult_t fcclNcclCommCreate(struct fcclComm* comm, int required) {
  struct fcclNcclComm* nc = NULL;
  int failed = -1;
  fcclResult_t res = createGroup(comm, comm->nranks, comm->rank, 0, "NCCL communicator", &nc, &failed);
  if (res == fcclSuccess) {
    __atomic_store_n(&comm->nccl, nc, __ATOMIC_RELEASE);
    return fcclSuccess;
  }
  if (required || failed < 0) return res; /* failed < 0: the exchange itself failed, which fails the init */
  snprintf(comm->ncclMissing, sizeof(comm->ncclMissing), "NCCL's communicator could not be created: %s",
           fcclThreadLastError());
  FCCL_INFO(FCCL_SUBSYS_INIT, "rank %d: going on without an NCCL communicator: %s", comm->rank, comm->ncclMissing);
  fcclClearError();
  return fcclSuccess;
}

fcclResult_t fcclNcclRailCreate(struct fcclComm* comm, int nranks, int rank, int leader, struct fcclNcclComm** out) {
  int failed = -1;
  return createGroup(comm, nranks, rank, leader, "NCCL communicator across hosts", out, &failed);
}

fcclResult_t fcclNcclSplitCall(struct fcclComm* owner, ncclComm_t parent, int parentRank, int color, int key,
                               int splitShare, ncclComm_t* landing, ncclComm_t* made, int* parentBroken) {
  *made = NULL;
  *parentBroken = 0;
  /* Non-blocking, as every NCCL communicator of fccl's (startLocal): a blocking one would wait inside NCCL, with no
   * bound, in its later calls and in releaseNccl's ncclCommFinalize. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (color >= 0 && owner->name[0]) config.commName = owner->name; /* owner is the new communicator */
  if (splitShare != FCCL_CONFIG_UNDEF_INT) config.splitShare = splitShare;
  /* The new communicator's SM budget, as startLocal gives it to a communicator NCCL creates (owner is the child, or
   * the parent for a rank of no color, which gets no communicator). */
  const int minCtas = fcclDeviceCtaBound(owner->minCtas, FCCL_PARAM_MIN_CTAS);
  const int maxCtas = fcclDeviceCtaBound(owner->maxCtas, FCCL_PARAM_MAX_CTAS);
  if (minCtas > 0) config.minCTAs = minCtas;
  if (maxCtas > 0) config.maxCTAs = maxCtas;
  __atomic_store_n(landing, NULL, __ATOMIC_RELEASE);
  ncclResult_t result = pfn_ncclCommSplit(parent, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, landing, &config);
  fcclResult_t res = fcclSuccess;
  if (result != ncclSuccess && result != ncclInProgress) {
    res = FCCL_ERROR(fromNccl(result), FCCL_SUBSYS_INIT, "rank %d: ncclCommSplit (color %d, key %d) failed: %s (%s)",
                     parentRank, color, key, pfn_ncclGetErrorString(result), pfn_ncclGetLastError(parent));
  } else {
    /* Even after ncclSuccess: that says the init was started, and the parent reads ncclInProgress until it ends. */
    res = waitLoop(owner, parent, NULL, "ncclCommSplit");
    *parentBroken = res != fcclSuccess;
  }
  /* Once the parent's state has left ncclInProgress the init has ended and NCCL has written *landing (a failed
   * communicator after a failure): it is the caller's. Before that it is NCCL's, and stays in landing. */
  ncclResult_t state = ncclInProgress;
  if (pfn_ncclCommGetAsyncError(parent, &state) == ncclSuccess && state != ncclInProgress)
    *made = __atomic_exchange_n(landing, NULL, __ATOMIC_ACQ_REL);
  return res;
}

fcclResult_t fcclNcclCommSplit(struct fcclComm* owner, struct fcclComm* parent, int color, int key, int nranks,
                               int rank, int splitShare, struct fcclNcclComm** out) {
  *out = NULL;
  struct fcclNcclComm* from = parent->nccl;
  if (!from) return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_INIT, "ncclCommSplit of a communicator without NCCL's");
  if (from->broken)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                      "rank %d: ncclCommSplit: the communicator's NCCL communicator failed earlier (a wait on it did "
                      "not complete): destroy or abort the communicator",
                      parent->rank);
  struct fcclNcclComm* nc = calloc(1, sizeof(*nc));
  if (!nc) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of host memory for the NCCL communicator");
  const int nocolor = color < 0;
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  ncclComm_t made = NULL;
  int parentBroken = 0;
  __atomic_add_fetch(&from->waiters, 1, __ATOMIC_ACQ_REL);
  fcclResult_t res = fcclNcclSplitCall(owner, from->comm, parent->rank, color, key, splitShare, &from->splitLanding,
                                       &made, &parentBroken);
  __atomic_sub_fetch(&from->waiters, 1, __ATOMIC_ACQ_REL);
  if (parentBroken) {
    /* NCCL's parent is failed (its split failed) or still busy with the split (the wait gave up): no later call of
     * it can run, and only its abort ends it. The parent says so from now on. */
    from->broken = 1;
    fcclCommFail(parent, res, fcclThreadLastError(), 0);
  }
  if (res == fcclSuccess && !nocolor && made == NULL)
    res = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_INIT, "rank %d: ncclCommSplit (color %d) made no communicator",
                     parent->rank, color);
  nc->comm = made;
  if (res == fcclSuccess && made) res = waitNccl(owner, made, nc, "ncclCommSplit's new communicator");
  int count = -1, placed = -1;
  if (res == fcclSuccess && made &&
      (pfn_ncclCommCount(made, &count) != ncclSuccess || pfn_ncclCommUserRank(made, &placed) != ncclSuccess ||
       count != nranks || placed != rank))
    res = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_INIT,
                     "rank %d: ncclCommSplit made rank %d of %d where fccl's split made rank %d of %d", parent->rank,
                     placed, count, rank, nranks);
  if (res == fcclSuccess && made) {
    if (cudaMalloc((void**)&nc->barrierWord, sizeof(float)) != cudaSuccess ||
        cudaMemset(nc->barrierWord, 0, sizeof(float)) != cudaSuccess) {
      (void)cudaGetLastError();
      res = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_INIT, "rank %d: the NCCL barrier's device word",
                       parent->rank);
    }
  }
  if (res != fcclSuccess || !made) {
    nc->broken = res != fcclSuccess; /* a failed new communicator is aborted */
    releaseNccl(owner, nc);
    return res;
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  FCCL_INFO(FCCL_SUBSYS_INIT, "rank %d: NCCL communicator %p split from %p (rank %d of %d) in %.1f ms", parent->rank,
            (void*)made, (void*)from->comm, rank, nranks,
            (double)(end.tv_sec - start.tv_sec) * 1e3 + (double)(end.tv_nsec - start.tv_nsec) / 1e6);
  *out = nc;
  return fcclSuccess;
}

void fcclNcclCommDiscard(struct fcclComm* comm, struct fcclNcclComm* nc) {
  if (!nc) return;
  nc->broken = 1;
  fcclNcclRailFree(comm, nc);
}

void fcclNcclRailFree(struct fcclComm* comm, struct fcclNcclComm* rail) {
  if (!rail) return;
  int saved = -1;
  if (cudaGetDevice(&saved) != cudaSuccess) saved = -1;
  (void)cudaGetLastError();
  if (saved != comm->cudaDev) CUDACHECKIGNORE(cudaSetDevice(comm->cudaDev));
  releaseNccl(comm, rail);
  if (saved >= 0 && saved != comm->cudaDev) CUDACHECKIGNORE(cudaSetDevice(saved));
}

#else /* !FCCL_HAVE_NCCL: no NCCL communicator can exist; these say so. */

static fcclResult_t notBuilt(const char* caller) {
  const char* why = NULL;
  (void)fcclNcclLoaded(&why);
  return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL, "%s: %s; install NCCL 2.x (libnccl.so.2 and nccl.h)",
                    caller, why);
}

FCCL_API fcclResult_t fcclGroupStart(void) {
  fcclClearError();
  return notBuilt("fcclGroupStart");
}

FCCL_API fcclResult_t fcclGroupEnd(void) {
  fcclClearError();
  return notBuilt("fcclGroupEnd");
}

fcclResult_t fcclNcclCommCreate(struct fcclComm* comm, int required) {
  (void)comm;
  (void)required;
  return notBuilt("the NCCL path");
}

fcclResult_t fcclNcclCommFree(struct fcclComm* comm) {
  (void)comm;
  return fcclSuccess;
}

fcclResult_t fcclNcclLaunch(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream) {
  (void)comm;
  (void)stream;
  return notBuilt(call->coll->name);
}

fcclResult_t fcclNcclLaunchOn(struct fcclComm* comm, struct fcclNcclComm* nc, const struct fcclCall* call,
                              cudaStream_t stream) {
  (void)comm;
  (void)nc;
  (void)stream;
  return notBuilt(call->coll->name);
}

fcclResult_t fcclNcclAsyncError(struct fcclComm* comm) {
  (void)comm;
  return fcclSuccess;
}

fcclResult_t fcclNcclRedOpCreatePreMulSum(struct fcclComm* comm, void* scalar, fcclDataType_t datatype,
                                          fcclScalarResidence_t residence, int* ncclOp) {
  (void)comm;
  (void)scalar;
  (void)datatype;
  (void)residence;
  (void)ncclOp;
  return notBuilt("fcclRedOpCreatePreMulSum");
}

fcclResult_t fcclNcclRedOpDestroy(struct fcclComm* comm, int ncclOp) {
  (void)comm;
  (void)ncclOp;
  return fcclSuccess;
}

fcclResult_t fcclNcclLaunchVariable(struct fcclComm* comm, struct fcclNcclComm* nc, const char* caller, int reduces,
                                    const void* sendbuf, void* recvbuf, const size_t* counts, fcclDataType_t datatype,
                                    fcclRedOp_t op, cudaStream_t stream) {
  (void)comm;
  (void)nc;
  (void)reduces;
  (void)sendbuf;
  (void)recvbuf;
  (void)counts;
  (void)datatype;
  (void)op;
  (void)stream;
  return notBuilt(caller);
}

fcclResult_t fcclNcclRegister(struct fcclComm* comm, void* buf, size_t size, fcclRegHandle_t* handle) {
  (void)comm;
  (void)buf;
  (void)size;
  (void)handle;
  return notBuilt("fcclCommRegister");
}

fcclResult_t fcclNcclDeregister(struct fcclComm* comm, fcclRegHandle_t handle) {
  (void)comm;
  (void)handle;
  return notBuilt("fcclCommDeregister");
}

unsigned long fcclNcclRegistrations(struct fcclComm* comm) {
  (void)comm;
  return 0;
}

int fcclNcclGroupActive(void) { return 0; }

fcclResult_t fcclNcclAsyncErrorOn(struct fcclComm* comm, struct fcclNcclComm* nc) {
  (void)comm;
  (void)nc;
  return fcclSuccess;
}

fcclResult_t fcclNcclRailCreate(struct fcclComm* comm, int nranks, int rank, int leader, struct fcclNcclComm** out) {
  (void)comm;
  (void)nranks;
  (void)rank;
  (void)leader;
  *out = NULL;
  return notBuilt("the hierarchical path");
}

void fcclNcclRailFree(struct fcclComm* comm, struct fcclNcclComm* rail) {
  (void)comm;
  (void)rail;
}

fcclResult_t fcclNcclCommSplit(struct fcclComm* owner, struct fcclComm* parent, int color, int key, int nranks,
                               int rank, int splitShare, struct fcclNcclComm** out) {
  (void)owner;
  (void)parent;
  (void)color;
  (void)key;
  (void)nranks;
  (void)rank;
  (void)splitShare;
  *out = NULL;
  return notBuilt("ncclCommSplit");
}

void fcclNcclCommDiscard(struct fcclComm* comm, struct fcclNcclComm* nc) {
  (void)comm;
  (void)nc;
}

#endif
