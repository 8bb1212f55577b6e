/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclCommShrink: the ranks of a communicator that remain make a new one of their own, without the application
 * handing out a new unique id (ncclCommShrink's shape). It serves a communicator that failed because a peer died:
 * the survivors' bootstrap is broken there, so the lowest surviving rank makes a fresh unique id and hands it to the
 * others over a socket of this host (bootstrap/local_share.c), and every survivor makes the new communicator with it.
 */
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "debug.h"
#include "init.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

static const char kCaller[] = "fcclCommShrink";

/* The arguments, against the communicator: excluded ranks in range, unique, not this rank; every survivor a process
 * of this host and pid namespace (the rendezvous is local). */
static fcclResult_t checkShrink(const struct fcclComm* comm, const int* exclude, int count, const fcclComm_t* newcomm,
                                int flags, char* excluded) {
  FCCL_REQUIRE(newcomm != NULL, "%s: newcomm is NULL", kCaller);
  FCCL_REQUIRE(flags == FCCL_SHRINK_DEFAULT || flags == FCCL_SHRINK_ABORT, "%s: unknown flags %d", kCaller, flags);
  FCCL_REQUIRE(count >= 0 && count < comm->nranks, "%s: excludeCount %d outside 0..%d", kCaller, count,
               comm->nranks - 1);
  FCCL_REQUIRE(count == 0 || exclude != NULL, "%s: excludeRanks is NULL with excludeCount %d", kCaller, count);
  for (int i = 0; i < count; i++) {
    FCCL_REQUIRE(exclude[i] >= 0 && exclude[i] < comm->nranks, "%s: excluded rank %d outside 0..%d", kCaller,
                 exclude[i], comm->nranks - 1);
    FCCL_REQUIRE(!excluded[exclude[i]], "%s: rank %d is excluded twice", kCaller, exclude[i]);
    FCCL_REQUIRE(exclude[i] != comm->rank, "%s: rank %d excludes itself (an excluded rank does not call it)",
                 kCaller, comm->rank);
    excluded[exclude[i]] = 1;
  }
  if (comm->peerInfo == NULL) /* its init did not get as far as the peers' information */
    return FCCL_ERROR(fcclInvalidUsage, FCCL_LOG_SUBSYS, "%s: the communicator's init has not finished", kCaller);
  if (comm->path != fcclPathFccl)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_LOG_SUBSYS, "%s: not available on the %s path (%s)", kCaller,
                      fcclGetPathName(comm->path), comm->pathReason);
  const struct fcclPeerInfo* mine = &comm->peerInfo[comm->rank];
  for (int r = 0; r < comm->nranks; r++) {
    const struct fcclPeerInfo* info = &comm->peerInfo[r];
    if (!excluded[r] && (info->hostHash != mine->hostHash || info->pidNs != mine->pidNs))
      return FCCL_ERROR(fcclInvalidUsage, FCCL_LOG_SUBSYS,
                        "%s: rank %d (host %s, pid %d) is not a process of this host and pid namespace", kCaller, r,
                        info->hostname, info->pid);
  }
  return fcclSuccess;
}

/* A name the survivors of this communicator agree on, no other communicator shares, and a process that is not one of
 * its ranks cannot compute: a MAC keyed with the communicator's secret over every rank's init salt (handed round
 * only among its ranks), the excluded ranks and the count of earlier shrinks of it, so that a stranger who saw a
 * failed attempt's name cannot take the retry's first (bootstrap.h, fcclBootstrapShareName). */
static fcclResult_t rendezvousName(const struct fcclComm* comm, const char* excluded, char* name, size_t size) {
  uint8_t* context = malloc((size_t)comm->nranks * 5);
  if (!context) return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "out of host memory");
  for (int r = 0; r < comm->nranks; r++) {
    for (int b = 0; b < 4; b++) context[5 * r + b] = (uint8_t)(comm->peerInfo[r].salt >> (8 * b));
    context[5 * r + 4] = excluded[r] != 0;
  }
  fcclResult_t res = fcclBootstrapShareName(comm->bootstrap, context, (size_t)comm->nranks * 5, comm->shrinks, name,
                                            size);
  free(context);
  return res;
}

FCCL_API fcclResult_t fcclCommShrink(fcclComm_t comm, const int* excludeRanks, int excludeCount, fcclComm_t* newcomm,
                                     const fcclConfig_t* config, int flags) {
  fcclClearError();
  if (!fcclCommIsValid(comm))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_LOG_SUBSYS, "%s: invalid communicator handle %p", kCaller,
                      (void*)comm);
  FCCLCHECK(fcclCommCheckOwner(comm, kCaller));
  /* A failed communicator is what this is for; one whose init is still running is not. */
  if (__atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE) == fcclInProgress)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_LOG_SUBSYS, "%s: the communicator's init has not finished", kCaller);
  char* excluded = calloc((size_t)comm->nranks, 1);
  int32_t* pids = calloc((size_t)comm->nranks, sizeof(*pids));
  int32_t* ranks = calloc((size_t)comm->nranks, sizeof(*ranks));
  fcclResult_t res = excluded && pids && ranks ? fcclSuccess
                                               : FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "out of host memory");
  if (res == fcclSuccess) res = checkShrink(comm, excludeRanks, excludeCount, newcomm, flags, excluded);
  int n = 0, me = -1;
  char name[64] = "";
  if (res == fcclSuccess) {
    for (int r = 0; r < comm->nranks; r++) {
      if (excluded[r]) continue;
      if (r == comm->rank) me = n;
      pids[n] = comm->peerInfo[r].pid;
      ranks[n++] = r;
    }
    res = rendezvousName(comm, excluded, name, sizeof(name));
    comm->shrinks++;
    /* The parent's kernels still waiting for an excluded rank stop now rather than at FCCL_TIMEOUT. */
    if (flags == FCCL_SHRINK_ABORT) fcclCommFail(comm, fcclInvalidUsage, "aborted by fcclCommShrink", 1);
  }
  fcclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (res == fcclSuccess && me == 0) res = fcclBootstrapGetUniqueId(&id, comm->timeoutMs);
  if (res == fcclSuccess) res = fcclBootstrapLocalShare(name, pids, ranks, n, me, &id, comm->timeoutMs);
  if (res == fcclSuccess) {
    /* comm's options, as a split's child inherits them (split.c), but blocking: fcclCommShrink returns the new
     * communicator ready. */
    fcclConfig_t inherited;
    fcclCommInheritedConfig(comm, &inherited);
    inherited.blocking = 1;
    int saved = -1;
    res = fcclCommUseDevice(comm, kCaller, &saved);
    if (res == fcclSuccess) {
      res = fcclCommInitRankConfig(newcomm, n, id, me, config ? config : &inherited);
      fcclCommRestoreDevice(comm, saved);
    }
  }
  free(excluded);
  free(pids);
  free(ranks);
  if (res != fcclSuccess) fcclCommRecordThreadError(comm);
  return res;
}
