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

typedef enum { INIT_TCP, INIT_ENV, INIT_PREMADE } fcclInitKind_t;

/* Who frees a communicator whose non-blocking init thread runs: the thread's joiner, or the thread itself. */
typedef enum { INIT_THREAD_RUNNING = 0, INIT_THREAD_DONE, INIT_THREAD_ABANDONED } fcclInitThreadState_t;

/* What commInitTask needs beyond the comm: how to bring the bootstrap up. */
struct fcclInitJob {
  fcclInitKind_t kind;
  fcclUniqueId id;             /* INIT_TCP */
  struct fcclEnvLaunch launch; /* INIT_ENV */
                               /* INIT_PREMADE: comm->bootstrap was made by the caller (external, NCCL) */
  int threadState;             /* fcclInitThreadState_t, atomic: see fcclCommAbortNow */
};

struct fcclCommSettings {
  int blocking;
  int timeoutMs;
  int allowSharedDevice;
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

/* ---- init_peers.c: the task's steps with its peers (each collective over the bootstrap) ---- */

fcclResult_t fcclCommExchangePeerInfo(struct fcclComm* comm);
fcclResult_t fcclCommWatchPeers(struct fcclComm* comm);
fcclResult_t fcclCommChoosePath(struct fcclComm* comm, struct fcclPathDecision* decision);

/* ---- teardown.c: the end of a communicator ---- */

/* Releases everything the comm holds, in reverse order of setup; local only when its abort flag is set. */
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
