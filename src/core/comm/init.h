/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of a communicator's creation and end share (core/comm/): how an init brings its bootstrap up, the
 * settings from its config, the common task (init_task.c), its steps with the peers (init_peers.c) and the release
 * of what a communicator holds (teardown.c). Read by those files and the public creators (init.c) only.
 */
#ifndef FCCL_COMM_INIT_H_
#define FCCL_COMM_INIT_H_

#include "bootstrap.h"
#include "comm.h"
#include "fccl.h"

struct fcclPathDecision;

/* INIT_SPLIT: fcclCommSplit's child, whose bootstrap comes through its parent (split.c, by job->hooks). */
typedef enum { INIT_TCP, INIT_ENV, INIT_PREMADE, INIT_SPLIT } fcclInitKind_t;

/* Who frees a communicator whose non-blocking init thread runs: the thread's joiner, or the thread itself. */
typedef enum { INIT_THREAD_RUNNING = 0, INIT_THREAD_DONE, INIT_THREAD_ABANDONED } fcclInitThreadState_t;

/*
 * What a creator outside init_task.c adds to the task (fcclCommSplit's child, split.c), handed down in the job so
 * that the task never calls back into its creator's file.
 */
struct fcclInitHooks {
  /* Instead of a rendezvous of the task's own: brings comm->bootstrap up, and fills comm->peerInfo when it knows it
   * (the task then skips its exchange). */
  fcclResult_t (*join)(struct fcclComm* comm);
  /* After the path decision, before the layers: may make comm->nccl (then sets job->ncclSettled). */
  fcclResult_t (*pathChosen)(struct fcclComm* comm, const struct fcclPathDecision* decision);
  /* When the task has ended, with its result; also after a failure before join. */
  void (*finish)(struct fcclComm* comm, fcclResult_t result);
};

/* What commInitTask needs beyond the comm: how to bring the bootstrap up. */
struct fcclInitJob {
  fcclInitKind_t kind;
  fcclUniqueId id;                   /* INIT_TCP */
  struct fcclEnvLaunch launch;       /* INIT_ENV */
                                     /* INIT_PREMADE: comm->bootstrap was made by the caller (external, NCCL) */
  const struct fcclInitHooks* hooks; /* INIT_SPLIT */
  void* hookState;                   /* the hooks' own (split.c's), freed by them in finish */
  const struct fcclBootstrap* outerBootstrap; /* INIT_SPLIT: the parent's, whose callbacks the task may be inside */
  size_t slotBytes;                           /* the arena slot to ask for; 0: what the comm's rank count needs */
  int ncclSettled; /* hooks->pathChosen decided the NCCL communicator (comm->nccl, or why not) */
  int threadState; /* fcclInitThreadState_t, atomic: see fcclCommAbortNow */
};

struct fcclCommSettings {
  int blocking;
  int timeoutMs;
  int allowSharedDevice;
  int splitShare;
  int minCtas, maxCtas; /* the SM budget as configured; FCCL_CONFIG_UNDEF_INT: not set */
  char name[FCCL_COMM_NAME_MAX];
};

/* ---- init_task.c: the task every creator runs ---- */

/* config (NULL: the defaults) checked and read into *out; caller names the public call in messages. */
fcclResult_t fcclCommResolveConfig(const fcclConfig_t* config, const char* caller, struct fcclCommSettings* out);
/* nranks within the bootstrap's bounds and rank one of them. */
fcclResult_t fcclCommCheckRanks(const char* caller, int nranks, int rank);
/* A new communicator (not yet initialised) that owns job, freed on failure. */
fcclResult_t fcclCommNew(const struct fcclCommSettings* settings, int rank, int nranks, int cudaDev,
                         struct fcclInitJob* job, struct fcclComm** out);
/* The caller's current device. */
fcclResult_t fcclCommCurrentDevice(int* dev);
/* The config, the unknown FCCL_* variables, the device, and a comm with an empty job of kind. */
fcclResult_t fcclCommPrepare(const fcclConfig_t* config, const char* caller, int rank, int nranks, fcclInitKind_t kind,
                             struct fcclCommSettings* settings, struct fcclComm** out);
/* Runs the init task, here or on a thread of its own; fcclInProgress for a non-blocking one. */
fcclResult_t fcclCommStart(struct fcclComm* comm, int blocking, fcclComm_t* out);

/* ---- split.c: what a child of fcclCommSplit or fcclCommShrink takes from its parent ---- */

/* The parent's options as a config (NCCL's rule for a NULL config): blocking, timeout, name (a pointer into
 * parent: resolve it while parent lives), allowSharedDevice, splitShare, the SM budget (minCTAs, maxCTAs). */
void fcclCommInheritedConfig(const struct fcclComm* parent, fcclConfig_t* out);
/* Makes comm's device current; *saved receives the caller's, for fcclCommRestoreDevice. */
fcclResult_t fcclCommUseDevice(const struct fcclComm* comm, const char* caller, int* saved);
void fcclCommRestoreDevice(const struct fcclComm* comm, int saved);

/* ---- init_peers.c: the task's steps with its peers (each collective over the bootstrap) ---- */

fcclResult_t fcclCommExchangePeerInfo(struct fcclComm* comm);
fcclResult_t fcclCommWatchPeers(struct fcclComm* comm);
fcclResult_t fcclCommChoosePath(struct fcclComm* comm, struct fcclPathDecision* decision);

/* ---- teardown.c: the end of a communicator ---- */

/* Releases what the comm shares with its peers (peer monitor, hierarchical and NCCL communicators, device state,
 * peer memory), in reverse order of setup; local only when its abort flag is set. A released layer is not
 * released again. */
fcclResult_t fcclCommReleaseShared(struct fcclComm* comm);
/* Releases everything the comm holds (fcclCommReleaseShared, then its own), in reverse order of setup; local only
 * when its abort flag is set. */
fcclResult_t fcclCommFree(struct fcclComm* comm);
/* fcclCommFree of a comm whose init failed, the init's error kept as the thread's last error. */
void fcclCommFreeAfterFailure(struct fcclComm* comm);
/* Destroy of one communicator: joins its init thread, then fcclCommFree (collective unless aborted). */
fcclResult_t fcclCommDestroyNow(struct fcclComm* comm);
/* A hierarchical communicator's host communicator destroyed (struct fcclHierHostOps.destroy). */
fcclResult_t fcclCommFreeHostPart(struct fcclComm* comm);
/* fcclCommAbort after the handle was checked; leaves the thread's last error alone. */
void fcclCommAbortNow(struct fcclComm* comm);

#endif /* FCCL_COMM_INIT_H_ */
