/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The end of a communicator: fcclCommDestroy, fcclCommAbort, and the release of everything a communicator holds
 * (fcclCommFree), which a failed init, a destroy and an abort share: first what it shares with its peers
 * (fcclCommReleaseShared, which is fcclCommFinalize's work too), then what is its own; with the abort flag set (an
 * abort, a failed init) no layer's teardown waits for a peer. A non-blocking init's (or finalize's) thread is joined
 * first, or, while an application's callback holds it, left to free its comm itself; a split's exchange over the
 * communicator is waited for (split.c). Communicators of fcclCommInitAll are torn down together when the last of
 * them is destroyed (local_group.h).
 */
#include "init.h"

#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "debug.h"
#include "device_state.h"
#include "hier.h"
#include "local_group.h"
#include "monitor.h"
#include "nccl_path.h"
#include "redop.h"
#include "transport.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

fcclResult_t fcclCommReleaseShared(struct fcclComm* comm) {
  fcclResult_t res = fcclSuccess;
  /* First: once this returns the peer monitor never touches the communicator again. A destroy says goodbye on
   * the peer links, so that peers elsewhere let this rank go; an abort or a failure does not: they see it end. */
  fcclMonitorForget(comm, !__atomic_load_n(comm->abortFlag, __ATOMIC_ACQUIRE));
  /* Layers in reverse order of setup; each is a no-op for a layer that was not set up and none waits for peers
   * when *comm->abortFlag is set. The first error is kept in res. */

  /* hierarchical: the rail (NCCL, aborted when the communicator was: it stops the kernel that waits for the other
   * hosts), then the host communicator (fccl's kernels). Before the world's NCCL communicator: NCCL's teardown
   * frees device memory, which waits for every kernel of the device, the rail's waiting one included. */
  fcclResult_t hierRes = fcclHierFree(comm);
  if (res == fcclSuccess) res = hierRes;

  /* NCCL: finalized and destroyed, or aborted when the communicator was (it stops NCCL's kernels) */
  fcclResult_t ncclRes = fcclNcclCommFree(comm);
  if (res == fcclSuccess) res = ncclRes;

  /* collectives: wait for this device's work (our kernels end on their own or on the abort flag), free the state */
  fcclResult_t deviceRes = fcclDeviceFini(comm);
  if (res == fcclSuccess) res = deviceRes;

  /* peer memory: barrier, release mappings, barrier, give the slot back (no peer traffic once aborted) */
  struct fcclTransport* transport = comm->transport;
  __atomic_store_n(&comm->transport, NULL, __ATOMIC_RELEASE); /* fcclCommGetMemStats may read it from any thread */
  fcclResult_t transportRes = fcclTransportFini(transport);
  if (res == fcclSuccess) res = transportRes;
  return res;
}

/* Releases everything the comm holds, in reverse order of setup. Local only when *abortFlag is set. */
fcclResult_t fcclCommFree(struct fcclComm* comm) {
  fcclResult_t res = fcclCommReleaseShared(comm); /* nothing left to release after fcclCommFinalize */

  fcclBootstrapDestroy(comm->bootstrap);
  comm->bootstrap = NULL;
  fcclRedOpFreeAll(comm); /* their NCCL ops went with the NCCL communicator */
  free(comm->peerInfo);
  free(comm->initJob);
  if (!comm->hierParent) free((void*)comm->abortFlag); /* a host communicator's is its parent's */
  pthread_mutex_destroy(&comm->errorLock);
  comm->magic = 0; /* a stale handle is refused rather than used */
  free(comm);
  return res;
}

/* Frees a communicator whose init failed; the init's error, not a teardown step's, stays the thread's last error. */
void fcclCommFreeAfterFailure(struct fcclComm* comm) {
  char cause[FCCL_LAST_ERROR_MAX];
  snprintf(cause, sizeof(cause), "%s", fcclThreadLastError());
  __atomic_store_n(comm->abortFlag, 1, __ATOMIC_RELEASE);
  (void)fcclCommFree(comm);
  fcclRestoreThreadError(cause);
}

/*
 * A split's exchange over comm uses comm's bootstrap and NCCL communicator (split.c): it is waited for, bounded by
 * its own timeouts; with abort set, it is told to stop first (through the child's abort flag it waits on, or comm's
 * own for a rank that joins no child), so that it ends within a poll slice. Then a FCCL_SPLIT_NOCOLOR rank's thread
 * is joined.
 */
static void settleSplit(struct fcclComm* comm, int abort) {
  if (abort) {
    pthread_mutex_lock(&comm->errorLock);
    if (comm->splitAbort) __atomic_store_n(comm->splitAbort, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&comm->errorLock);
  }
  while (__atomic_load_n(&comm->splitActive, __ATOMIC_ACQUIRE)) {
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&pause, NULL);
  }
  if (comm->splitThreadActive) {
    pthread_join(comm->splitThread, NULL);
    comm->splitThreadActive = 0;
  }
}

/* Destroy of one communicator, the part that may talk to its peers (collective unless aborted). */
fcclResult_t fcclCommDestroyNow(struct fcclComm* comm) {
  fcclLogSetContext(comm->rank, comm->cudaDev);
  settleSplit(comm, 0);
  if (comm->initThreadActive) {
    pthread_join(comm->initThread, NULL); /* the init is bounded by its timeout */
    comm->initThreadActive = 0;
  }
  if (__atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE) != fcclSuccess)
    __atomic_store_n(comm->abortFlag, 1, __ATOMIC_RELEASE); /* a failed comm only frees what it has */
  return fcclCommFree(comm);
}

/* struct fcclHierHostOps.destroy (hier.h). */
fcclResult_t fcclCommFreeHostPart(struct fcclComm* comm) {
  const int parentRank = comm->hierParent->rank, dev = comm->cudaDev;
  fcclResult_t res = fcclCommDestroyNow(comm);
  fcclLogSetContext(parentRank, dev);
  return res;
}

/*
 * With the abort flag set, waits for a non-blocking init's thread to finish: every wait of fccl's own polls the flag
 * and ends within a poll slice. An application's callback (fcclCommInitExternal) is the one wait fccl cannot bound:
 * while the thread is inside one, it is left to finish, and to free the comm itself once the callback returns
 * (no callback starts after that: the flag is checked before each). Returns 1 when the thread was left so; the comm
 * must not be touched then.
 */
static int commAbortInitThread(struct fcclComm* comm) {
  struct fcclInitJob* job = comm->initJob;
  const pthread_t thread = comm->initThread; /* read first: once the thread owns the comm it may free it at once */
  /* The bootstraps of application callbacks the thread may be inside: comm's own, set before the thread started
   * (fcclCommInitExternal), and for a split's child its parent's, over which it runs the split's exchange. */
  const struct fcclBootstrap* own = job->kind == INIT_PREMADE ? comm->bootstrap : NULL;
  const struct fcclBootstrap* outer = job->outerBootstrap;
  for (;;) {
    if (__atomic_load_n(&job->threadState, __ATOMIC_ACQUIRE) == INIT_THREAD_DONE) break;
    if (fcclBootstrapInCallback(own) || fcclBootstrapInCallback(outer)) {
      comm->magic = FCCL_COMM_MAGIC_DEFERRED; /* dead to the caller now; refused while the thread keeps it */
      int running = INIT_THREAD_RUNNING;
      if (__atomic_compare_exchange_n(&job->threadState, &running, INIT_THREAD_ABANDONED, 0, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE)) {
        pthread_detach(thread);
        return 1;
      }
      break; /* it finished meanwhile */
    }
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&pause, NULL);
  }
  pthread_join(thread, NULL);
  comm->initThreadActive = 0;
  return 0;
}

/* fcclCommAbort after the handle was checked; leaves the thread's last error alone (internal callers report). */
void fcclCommAbortNow(struct fcclComm* comm) {
  __atomic_store_n(comm->abortFlag, 1, __ATOMIC_RELEASE);
  settleSplit(comm, 1);
  if (comm->localGroup) {
    fcclLocalGroupAbort(comm->localGroup, comm); /* the members share a process: they all give up */
    comm->localGroup = NULL;
  }
  if (comm->initThreadActive && commAbortInitThread(comm)) return; /* the init thread frees it */
  (void)fcclCommFree(comm);
}

FCCL_API fcclResult_t fcclCommDestroy(fcclComm_t comm) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommDestroy: invalid communicator handle %p", (void*)comm);
  FCCLCHECK(fcclCommCheckOwner(comm, "fcclCommDestroy"));
  if (comm->localGroup) {
    /* The handle is dead for the caller now; the members are torn down together by the last destroy. */
    comm->magic = FCCL_COMM_MAGIC_DEFERRED;
    return fcclLocalGroupRelease(comm->localGroup, comm, NULL);
  }
  return fcclCommDestroyNow(comm);
}

FCCL_API fcclResult_t fcclCommAbort(fcclComm_t comm) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommAbort: invalid communicator handle %p", (void*)comm);
  FCCLCHECK(fcclCommCheckOwner(comm, "fcclCommAbort"));
  fcclCommAbortNow(comm);
  return fcclSuccess;
}
