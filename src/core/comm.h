/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The communicator as the library sees it. Core owns this struct; bootstrap, transport and device state hang off
 * it through their own opaque types so each layer keeps its internals to itself.
 */
#ifndef FCCL_COMM_H_
#define FCCL_COMM_H_

#include "check.h"
#include "fccl.h"

#include <pthread.h>
#include <stdint.h>

#define FCCL_COMM_MAGIC 0x6663636c636f6d6dull /* "fcclcomm": catches stale or foreign handles */
/* destroyed by the user, teardown deferred (core/comm/local_group.h) */
#define FCCL_COMM_MAGIC_DEFERRED 0x6663636c64656164ull
#define FCCL_COMM_NAME_MAX 64

struct fcclBootstrap;     /* src/include/bootstrap.h: out-of-band exchange (owned by the bootstrap layer) */
struct fcclPeerInfo;      /* src/include/bootstrap.h: what each rank told the others at init */
struct fcclTransport;     /* src/include/transport.h: peer mappings of this communicator (transport layer) */
struct fcclDeviceState;   /* src/include/device_host.h / collectives: device-side state (device layer) */
struct fcclNcclComm;      /* core/engine/nccl_path.h: the NCCL communicator fccl created and owns */
struct fcclHier;          /* core/engine/hier.h: the hierarchical path's host communicator and rail */
struct fcclRedOps;        /* core/coll/redop.h: the reduction ops the communicator made */

struct fcclComm {
  uint64_t magic;
  int rank;
  int nranks;
  int cudaDev;
  char name[FCCL_COMM_NAME_MAX];
  int timeoutMs;          /* bound on every host-side wait for peers */
  int allowSharedDevice;  /* config: ranks may share a GPU (tests) */
  int blocking;           /* config: 0 runs fcclCommFinalize on a thread, and a split of this one inherits it */
  int splitShare;         /* config (NCCL's): 0, 1, or FCCL_CONFIG_UNDEF_INT; a split of this one inherits it */
  int minCtas, maxCtas;   /* config: the SM budget as given (FCCL_CONFIG_UNDEF_INT: not set); the device state
                           * resolves it with FCCL_MIN_CTAS and FCCL_MAX_CTAS */

  /* Set by fcclCommAbort from any thread; every bounded wait polls it (host) and kernels read it (mapped). */
  volatile int* abortFlag;
  struct fcclComm* hierParent; /* the hierarchical communicator this is the host communicator of, or NULL; then
                                * abortFlag is the parent's (so that aborting it stops this one's kernels) */
  fcclResult_t asyncError; /* read/written with __atomic builtins */

  struct fcclBootstrap* bootstrap;
  struct fcclPeerInfo* peerInfo; /* nranks entries, indexed by rank */
  struct fcclTransport* transport;
  struct fcclDeviceState* device; /* NULL on the NCCL path: fccl's kernels never run there */

  /* ---- paths (core/engine/path.c, core/engine/nccl_path.c; docs/paths.md) ---- */
  fcclPath_t path;                   /* which engine carries the collectives, decided at init */
  char pathReason[256];              /* why (fcclCommGetPath) */
  char ncclMissing[256];             /* why there is no NCCL communicator, when nccl is NULL */
  struct fcclNcclComm* nccl;         /* NCCL path always; fccl path for send/recv/all-to-all (FCCL_NCCL_COMM);
                                      * hier path for every call but the all-reduce (and its remainder) */
  struct fcclHier* hier;             /* hier path: the host's fccl communicator and the NCCL rail
                                      * (core/engine/hier.c) */
  struct fcclRedOps* redOps;         /* fcclRedOpCreatePreMulSum's ops (core/coll/redop.c), NULL until the first */

  /* ---- communicators (core/comm/init_task.c, teardown.c) ---- */
  struct fcclInitJob* initJob; /* what the init runs (kept for a non-blocking init's thread); freed at destroy */
  pthread_t initThread;        /* non-blocking init's thread, valid while initThreadActive */
  int initThreadActive;        /* the thread must still be joined (by destroy or abort) */
  struct fcclLocalGroup* localGroup; /* fcclCommInitAll's group (core/comm/local_group.h), or NULL */

  unsigned forkGeneration; /* fcclForkGeneration() when it was made: a fork() since makes it its parent's */
  int finalized;           /* atomic: fcclCommFinalize was called (1) and has finished (2) (core/comm/finalize.c) */

  /* ---- fcclCommSplit of this communicator (core/comm/split.c) ---- */
  int splitActive;          /* atomic: a split's exchange over this communicator runs (its asyncError reads
                             * fcclInProgress meanwhile); destroy and abort wait for it to end */
  volatile int* splitAbort; /* while the exchange runs for a child: the child's abort flag, which the exchange
                             * waits on and which aborting this communicator sets too; errorLock */
  pthread_t splitThread;    /* a non-blocking split's exchange on a rank that joins no child (FCCL_SPLIT_NOCOLOR) */
  int splitThreadActive;    /* it must still be joined */
  unsigned shrinks;         /* fcclCommShrink calls made on it: part of each one's rendezvous name
                             * (core/comm/shrink.c) */

  pthread_mutex_t errorLock;
  char lastError[FCCL_LAST_ERROR_MAX]; /* guarded by errorLock */
  char failure[FCCL_LAST_ERROR_MAX];   /* why the communicator failed (fcclCommFail), "" while it works; errorLock */
  fcclResult_t failureResult;          /* the result fcclCommFail gave with failure; errorLock */
};

/* Whether comm looks like a live communicator handle (non-NULL, magic intact). */
int fcclCommIsValid(const struct fcclComm* comm);

/* How many fork()s this process is away from the one that loaded fccl (0 there): a communicator made at another
 * generation belongs to an ancestor process, whose peer mappings, pinned memory and sockets a child does not own. */
unsigned fcclForkGeneration(void);

/* fcclInvalidUsage (reported with caller's name) when comm was made by an ancestor of this process (a fork() came
 * between): the only thing a child may do with it is nothing. */
fcclResult_t fcclCommCheckOwner(const struct fcclComm* comm, const char* caller);

/*
 * For entry points that use a communicator after init: fcclInvalidArgument for a bad handle (NULL, freed),
 * fcclInvalidUsage while a non-blocking init, a split of it or its finalize is still running and once it was
 * finalized, and the init's error when it failed. Reports the failure with caller's name.
 */
fcclResult_t fcclCommEnsureReady(struct fcclComm* comm, const char* caller);

/*
 * The communicator cannot go on: a peer died, a kernel gave up. The first call sets its async error to result
 * (unless init is still running or it failed already) and keeps text as the failure's cause, which every later
 * call's error quotes and fcclGetLastError(comm) returns; with abort the abort flag is set as well, so that
 * kernels stop at the abort word and host waits give up. Any thread; never blocks beyond the error lock.
 */
void fcclCommFail(struct fcclComm* comm, fcclResult_t result, const char* text, int abort);

/* The failure's cause ("" while the communicator works), copied into text; returns its result (fcclSuccess while
 * the communicator works), which an init that was still running when it came has not taken as its async error. */
fcclResult_t fcclCommFailure(struct fcclComm* comm, char* text, size_t size);

/* Copies the calling thread's last error into the communicator, so any thread can read it later (core/comm/comm.c,
 * which also answers fcclGetLastError(comm)). */
void fcclCommRecordThreadError(struct fcclComm* comm);

/* The communicator's asynchronous state as fcclCommGetAsyncError reports it (core/comm/query.c). */
fcclResult_t fcclCommAsyncState(struct fcclComm* comm);

#endif /* FCCL_COMM_H_ */
