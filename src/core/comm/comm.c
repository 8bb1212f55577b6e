/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator handles: validation shared by every public entry point, and the communicator's last error. */
#include "comm.h"

#include "check.h"

#include <pthread.h>
#include <stdio.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

int fcclCommIsValid(const struct fcclComm* comm) { return comm != NULL && comm->magic == FCCL_COMM_MAGIC; }

static unsigned forkGeneration;
static void countFork(void) { __atomic_add_fetch(&forkGeneration, 1, __ATOMIC_RELAXED); }
__attribute__((constructor)) static void registerForkCounter(void) { pthread_atfork(NULL, NULL, countFork); }

unsigned fcclForkGeneration(void) { return __atomic_load_n(&forkGeneration, __ATOMIC_RELAXED); }

fcclResult_t fcclCommCheckOwner(const struct fcclComm* comm, const char* caller) {
  if (comm->forkGeneration == fcclForkGeneration()) return fcclSuccess;
  return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                    "%s: communicator %p was created by a parent of this process (a fork() came between): a child "
                    "cannot use it, nor destroy it (create a communicator of its own)", caller, (const void*)comm);
}

fcclResult_t fcclCommEnsureReady(struct fcclComm* comm, const char* caller) {
  if (!fcclCommIsValid(comm))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "%s: invalid communicator handle %p", caller,
                      (void*)comm);
  FCCLCHECK(fcclCommCheckOwner(comm, caller));
  fcclResult_t state = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  if (state == fcclInProgress)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                      "%s: the communicator's %s has not finished (poll fcclCommGetAsyncError)", caller,
                      __atomic_load_n(&comm->splitActive, __ATOMIC_ACQUIRE) ? "split (fcclCommSplit)"
                      : __atomic_load_n(&comm->finalized, __ATOMIC_ACQUIRE) ? "finalize (fcclCommFinalize)"
                                                                            : "non-blocking init");
  if (__atomic_load_n(&comm->finalized, __ATOMIC_ACQUIRE))
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                      "%s: the communicator was finalized (fcclCommFinalize): only destroy or abort it now", caller);
  if (state != fcclSuccess) {
    char failure[FCCL_LAST_ERROR_MAX];
    fcclCommFailure(comm, failure, sizeof(failure));
    return FCCL_ERROR(state, FCCL_SUBSYS_INIT, "%s: the communicator failed earlier (%s); destroy or abort it",
                      caller, failure[0] ? failure : fcclGetErrorString(state));
  }
  return fcclSuccess;
}

void fcclCommRecordThreadError(struct fcclComm* comm) {
  const char* text = fcclThreadLastError();
  if (!comm || text[0] == '\0') return;
  pthread_mutex_lock(&comm->errorLock);
  snprintf(comm->lastError, sizeof(comm->lastError), "%s", text);
  pthread_mutex_unlock(&comm->errorLock);
}

FCCL_API const char* fcclGetLastError(fcclComm_t comm) {
  if (comm == NULL) return fcclThreadLastError();
  if (!fcclCommIsValid(comm)) return "invalid communicator handle";
  /* Copied to the thread's buffer: the comm's text may change under another thread right after we return. */
  static _Thread_local char snapshot[FCCL_LAST_ERROR_MAX];
  pthread_mutex_lock(&comm->errorLock);
  snprintf(snapshot, sizeof(snapshot), "%s", comm->lastError);
  pthread_mutex_unlock(&comm->errorLock);
  return snapshot;
}

void fcclCommFail(struct fcclComm* comm, fcclResult_t result, const char* text, int abort) {
  pthread_mutex_lock(&comm->errorLock);
  if (comm->failure[0] == '\0') {
    snprintf(comm->failure, sizeof(comm->failure), "%s", text);
    comm->failureResult = result;
    snprintf(comm->lastError, sizeof(comm->lastError), "%s", text);
  }
  pthread_mutex_unlock(&comm->errorLock);
  fcclResult_t expected = fcclSuccess;
  __atomic_compare_exchange_n(&comm->asyncError, &expected, result, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  if (abort) __atomic_store_n(comm->abortFlag, 1, __ATOMIC_RELEASE);
}

fcclResult_t fcclCommFailure(struct fcclComm* comm, char* text, size_t size) {
  pthread_mutex_lock(&comm->errorLock);
  snprintf(text, size, "%s", comm->failure);
  const fcclResult_t result = comm->failure[0] ? comm->failureResult : fcclSuccess;
  pthread_mutex_unlock(&comm->errorLock);
  return result;
}
