/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Buffers of captured CUDA graphs: a collective captured with unregistered buffers, at a size where registered ones
 * run another algorithm, registers them with every rank for the graph's lifetime (FCCL_GRAPH_REGISTER;
 * docs/collectives.md#graph-registration), so that every replay reads the peers' copies in place.
 */
#include "transport_internal.h"

#include "check.h"
#include "debug.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_IPC

/*
 * The buffers one captured all-reduce registered, owned by its graph through a CUDA user object. CUDA destroys the
 * object on a thread of its own once the graph and every instantiation and launch of it are gone; no CUDA call may
 * be made there, so the destructor only marks the holder and the communicator's next call releases the mappings.
 * graphLock guards every holder's fields and the transports' lists (holders outlive their communicator when it is
 * destroyed first: the destructor then just frees the holder).
 */
struct fcclGraphHolder {
  struct fcclGraphHolder* next;
  struct fcclTransport* transport; /* NULL: the communicator is gone */
  int graphGone;
  struct fcclRegistration* regs[2];
};

static pthread_mutex_t graphLock = PTHREAD_MUTEX_INITIALIZER;

static void CUDART_CB graphHolderDestroy(void* arg) {
  struct fcclGraphHolder* holder = arg;
  pthread_mutex_lock(&graphLock);
  struct fcclTransport* t = holder->transport;
  if (t) {
    holder->graphGone = 1;
    __atomic_store_n(&t->graphsGone, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&graphLock);
  if (!t) free(holder);
}

/* The calling thread may be capturing (global mode): mapping and unmapping are not stream work, so they are made
 * in relaxed mode rather than invalidating the capture. */
static enum cudaStreamCaptureMode relaxCapture(void) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaStreamCaptureModeRelaxed;
  }
  return mode;
}

static void restoreCapture(enum cudaStreamCaptureMode mode) {
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) (void)cudaGetLastError();
}

static fcclResult_t releaseGraphHolders(struct fcclTransport* t, int all) {
  if (!all && !__atomic_load_n(&t->graphsGone, __ATOMIC_ACQUIRE)) return fcclSuccess;
  /* Taken under the lock (graph registrations are chained through their unused next), released outside it: the
   * destructor thread never waits on a CUDA call. */
  struct fcclRegistration* regs = NULL;
  struct fcclGraphHolder* gone = NULL;
  int n = 0;
  pthread_mutex_lock(&graphLock);
  __atomic_store_n(&t->graphsGone, 0, __ATOMIC_RELAXED);
  struct fcclGraphHolder** link = &t->graphHolders;
  while (*link) {
    struct fcclGraphHolder* holder = *link;
    if (!holder->graphGone && !all) {
      link = &holder->next;
      continue;
    }
    *link = holder->next;
    for (int i = 0; i < 2; i++) {
      if (!holder->regs[i]) continue;
      holder->regs[i]->next = regs;
      regs = holder->regs[i];
      holder->regs[i] = NULL;
      n++;
    }
    if (holder->graphGone) {
      holder->next = gone;
      gone = holder;
    } else {
      holder->transport = NULL; /* the graph lives on: its destructor frees the holder */
    }
  }
  pthread_mutex_unlock(&graphLock);
  fcclResult_t res = fcclSuccess;
  if (n > 0) {
    const enum cudaStreamCaptureMode mode = relaxCapture();
    while (regs) {
      struct fcclRegistration* next = regs->next;
      fcclResult_t released = fcclTransportReleaseRegistration(t, regs);
      if (res == fcclSuccess) res = released;
      regs = next;
    }
    restoreCapture(mode);
    __atomic_sub_fetch(&t->nGraphRegistrations, (uint64_t)n, __ATOMIC_RELAXED);
    FCCL_INFO(FCCL_SUBSYS_IPC, "%s: released %d buffer registration(s) held by %s", t->cfg.name, n,
              all ? "captured graphs (teardown)" : "destroyed graphs");
  }
  while (gone) {
    struct fcclGraphHolder* next = gone->next;
    free(gone);
    gone = next;
  }
  return res;
}

fcclResult_t fcclTransportReleaseGraphRegistrations(struct fcclTransport* t, int all) {
  if (!t) return fcclSuccess;
  return releaseGraphHolders(t, all);
}

/* A holder owned by the graph being captured on stream, linked into t's list. */
static fcclResult_t holderForCapture(struct fcclTransport* t, cudaStream_t stream, struct fcclGraphHolder** out) {
  *out = NULL;
  enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = NULL;
#if CUDART_VERSION >= 13000
  CUDACHECK(cudaStreamGetCaptureInfo(stream, &status, NULL, &graph, NULL, NULL, NULL));
#else
  CUDACHECK(cudaStreamGetCaptureInfo(stream, &status, NULL, &graph, NULL, NULL));
#endif
  if (status != cudaStreamCaptureStatusActive || graph == NULL)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC, "stream %p is no longer being captured", (void*)stream);
  struct fcclGraphHolder* holder = calloc(1, sizeof(*holder));
  if (!holder) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
  cudaUserObject_t object;
  fcclResult_t res = fcclSuccess;
  CUDACHECKKEEP(cudaUserObjectCreate(&object, holder, graphHolderDestroy, 1, cudaUserObjectNoDestructorSync), res);
  if (res != fcclSuccess) {
    free(holder);
    return res;
  }
  /* Linked before the graph owns it: from then on only the destructor or teardown frees it. */
  pthread_mutex_lock(&graphLock);
  holder->transport = t;
  holder->next = t->graphHolders;
  t->graphHolders = holder;
  pthread_mutex_unlock(&graphLock);
  CUDACHECKKEEP(cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove), res);
  if (res != fcclSuccess) {
    /* Our reference is the only one: releasing it runs the destructor, which marks the (empty) holder gone. */
    CUDACHECKIGNORE(cudaUserObjectRelease(object, 1));
    return res;
  }
  *out = holder;
  return fcclSuccess;
}

/* What each rank says before a captured call registers: whether it can, and whether its call is in place. */
struct graphRegRecord {
  int32_t status;
  int32_t inPlace;
};

fcclResult_t fcclTransportGraphRegister(struct fcclTransport* t, void* stream, void* sendbuf, size_t sendBytes,
                                        void* recvbuf, size_t recvBytes, int inPlace, void* peerSend[],
                                        void* peerRecv[], int* registered) {
  *registered = 0;
  /* Ranks of one process may be driven by one thread (fcclCommInitAll, the benchmark's -g): the first rank's call
   * would wait in the exchange for calls that thread has not made yet. Every rank skips alike. */
  if (!t || fcclTransportRanksShareProcess(t)) return fcclSuccess;
  const int nranks = t->cfg.nranks, me = t->cfg.rank;
  struct graphRegRecord* records = calloc((size_t)nranks, sizeof(*records));
  if (!records) {
    t->outOfStep = 1; /* the peers go on to the all-gather without us */
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
  }
  const enum cudaStreamCaptureMode mode = relaxCapture();
  struct fcclGraphHolder* holder = NULL;
  fcclResult_t local = holderForCapture(t, (cudaStream_t)stream, &holder);
  records[me].status = local;
  records[me].inPlace = inPlace;
  fcclResult_t res = fcclTransportAllGather(t, records, sizeof(*records));
  int agree = res == fcclSuccess;
  for (int r = 0; agree && r < nranks; r++)
    agree = records[r].status == fcclSuccess && records[r].inPlace == records[me].inPlace;
  if (res != fcclSuccess) {
    /* The exchange itself failed (dead peer, timeout, abort): the ranks no longer meet. */
  } else if (!agree) {
    /* Every rank knows it from the exchange and stages alike, a local failure included (the call still works). */
    FCCL_INFO(FCCL_SUBSYS_IPC, "%s: a captured call of %zu bytes stages: %s", t->cfg.name,
              recvbuf ? recvBytes : sendBytes,
              local != fcclSuccess ? "this rank could not attach a registration to its graph"
                                   : "a rank could not attach a registration to its graph, or the ranks disagree on "
                                     "in place");
  } else {
    /* Every rank registers the same buffers in the same order; every rank fails alike. */
    struct fcclRegistration* regs[2] = {NULL, NULL}; /* recvbuf's, sendbuf's (when it is another buffer) */
    if (recvbuf) res = fcclTransportRegisterBuffer(t, recvbuf, recvBytes, 0, &regs[0]);
    if (res == fcclSuccess && sendbuf && sendbuf != recvbuf) {
      res = fcclTransportRegisterBuffer(t, sendbuf, sendBytes, 0, &regs[1]);
      if (res != fcclSuccess && regs[0]) {
        (void)fcclTransportReleaseRegistration(t, regs[0]); /* every rank drops it: the peers failed alike */
        __atomic_sub_fetch(&t->nGraphRegistrations, 1, __ATOMIC_RELAXED);
        regs[0] = NULL;
      }
    }
    if (res == fcclSuccess) {
      pthread_mutex_lock(&graphLock);
      holder->regs[0] = regs[0];
      holder->regs[1] = regs[1];
      pthread_mutex_unlock(&graphLock);
      const struct fcclRegistration* send = regs[1] ? regs[1] : sendbuf ? regs[0] : NULL;
      for (int r = 0; r < nranks; r++) {
        peerRecv[r] = regs[0] ? regs[0]->peerBufs[r] : NULL;
        peerSend[r] = send ? send->peerBufs[r] : NULL;
      }
      *registered = 1;
    } else if (fcclTransportInStep(t)) {
      /* Memory that cannot be shared (every rank learned it in the exchange): the call stages instead. */
      FCCL_INFO(FCCL_SUBSYS_IPC, "%s: a captured call of %zu bytes stages: its buffers cannot be registered (%s)",
                t->cfg.name, recvBytes, fcclGetErrorString(res));
      res = fcclSuccess;
    }
  }
  restoreCapture(mode);
  free(records);
  return res;
}
