/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclCommFinalize (ncclCommFinalize's semantics): the part of a communicator's end that involves its peers, ahead
 * of fcclCommDestroy, which is then local and quick. It is the first half of the release every end runs
 * (fcclCommReleaseShared, teardown.c: the kernels' and NCCL's work waited for, then NCCL's communicator, the host
 * communicator of the hierarchical path and the peer memory released with the peers), and a barrier, so that no
 * rank leaves before every rank has released what they share. A non-blocking communicator runs it on the thread a
 * non-blocking init uses (comm->initThread), which destroy and abort join as they join an init's.
 */
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "debug.h"
#include "init.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

static const char kCaller[] = "fcclCommFinalize";

/* The work itself; leaves the communicator's state alone. */
static fcclResult_t finalizeNow(struct fcclComm* comm) {
  int saved = -1;
  fcclResult_t res = fcclCommUseDevice(comm, kCaller, &saved);
  if (res == fcclSuccess) res = fcclCommReleaseShared(comm);
  if (res == fcclSuccess) res = fcclBootstrapBarrier(comm->bootstrap);
  fcclCommRestoreDevice(comm, saved);
  __atomic_store_n(&comm->finalized, 2, __ATOMIC_RELEASE);
  return res;
}

/* A failed finalize leaves the communicator failed: its destroy is then local (it aborts what is left). */
static void recordFailure(struct fcclComm* comm, fcclResult_t res) {
  fcclCommRecordThreadError(comm);
  pthread_mutex_lock(&comm->errorLock);
  if (comm->failure[0] == '\0') {
    snprintf(comm->failure, sizeof(comm->failure), "%s", fcclThreadLastError());
    comm->failureResult = res;
  }
  __atomic_store_n(&comm->asyncError, res, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&comm->errorLock);
}

static void* finalizeThread(void* arg) {
  struct fcclComm* comm = arg;
  fcclClearError();
  fcclLogSetContext(comm->rank, comm->cudaDev);
  const fcclResult_t res = finalizeNow(comm);
  if (res != fcclSuccess)
    recordFailure(comm, res);
  else
    __atomic_store_n(&comm->asyncError, fcclSuccess, __ATOMIC_RELEASE);
  /* fcclCommAbort returned while an application's callback held this thread (teardown.c): the comm is ours. */
  if (__atomic_exchange_n(&comm->initJob->threadState, INIT_THREAD_DONE, __ATOMIC_ACQ_REL) == INIT_THREAD_ABANDONED) {
    __atomic_store_n(comm->abortFlag, 1, __ATOMIC_RELEASE);
    (void)fcclCommFree(comm);
  }
  return NULL;
}

FCCL_API fcclResult_t fcclCommFinalize(fcclComm_t comm) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "%s: invalid communicator handle %p", kCaller, (void*)comm);
  FCCLCHECK(fcclCommCheckOwner(comm, kCaller));
  FCCLCHECK(fcclCommEnsureReady(comm, kCaller)); /* refuses a finalized one too */
  if (!comm->bootstrap || !comm->initJob)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_LOG_SUBSYS, "%s: the communicator's init has not finished", kCaller);
  int fresh = 0;
  if (!__atomic_compare_exchange_n(&comm->finalized, &fresh, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return FCCL_ERROR(fcclInvalidUsage, FCCL_LOG_SUBSYS, "%s: the communicator was finalized already", kCaller);

  if (comm->localGroup) {
    /* Its work with its peers is its group's, done together at the last destroy (local_group.h), so that one thread
     * may finalize and destroy the group's members in turn: here its own work is waited for. */
    int saved = -1;
    fcclResult_t res = fcclCommUseDevice(comm, kCaller, &saved);
    if (res == fcclSuccess) CUDACHECKGOTO(cudaDeviceSynchronize(), res, restore);
  restore:
    fcclCommRestoreDevice(comm, saved);
    __atomic_store_n(&comm->finalized, 2, __ATOMIC_RELEASE);
    return res;
  }

  if (!comm->blocking) {
    /* From here the state reads fcclInProgress: the communicator's calls are refused, and a peer's failure meanwhile
     * is kept as its cause (fcclCommFail) without taking the state. */
    fcclResult_t expected = fcclSuccess;
    if (!__atomic_compare_exchange_n(&comm->asyncError, &expected, fcclInProgress, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
      __atomic_store_n(&comm->finalized, 0, __ATOMIC_RELEASE);
      return FCCL_ERROR(expected, FCCL_LOG_SUBSYS, "%s: the communicator failed meanwhile; destroy or abort it",
                        kCaller);
    }
    if (comm->initThreadActive) { /* a non-blocking init's thread, done (the state was fcclSuccess) */
      pthread_join(comm->initThread, NULL);
      comm->initThreadActive = 0;
    }
    __atomic_store_n(&comm->initJob->threadState, INIT_THREAD_RUNNING, __ATOMIC_RELEASE);
    fcclResult_t started = fcclSuccess;
    PTHREADCHECKGOTO(pthread_create(&comm->initThread, NULL, finalizeThread, comm), "starting the finalize thread",
                     started, noThread);
    comm->initThreadActive = 1;
    return fcclInProgress;
  noThread:
    __atomic_store_n(&comm->finalized, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&comm->asyncError, fcclSuccess, __ATOMIC_RELEASE);
    return started;
  }

  const fcclResult_t res = finalizeNow(comm);
  if (res != fcclSuccess) recordFailure(comm, res);
  return res;
}
