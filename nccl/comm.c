/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The communicators' life. Every creator calls the real NCCL with the caller's arguments, config included, untouched,
 * and hands the caller NCCL's own communicator; this library's state for it is an entry of the table, attached to
 * fccl once NCCL has made it ready (attach.c). Teardown takes fccl's state down first (its teardown exchanges over
 * the NCCL communicator), then NCCL's. Errors the engine records come out of ncclCommGetAsyncError, which stays a
 * cheap query for a watchdog thread, with their words in ncclGetLastError.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fccl_nccl.h"

/* ---- statistics ------------------------------------------------------------------------------------------------ */

static uint64_t statComms, statCommsWithFccl, statCommsWithBudget, statFccl[FNCCL_NUM_COLLS],
    statNccl[FNCCL_NUM_COLLS], statFcclPreMulSum, statNcclPreMulSum, statPreMulSumOps;

void fncclStatsNoteComm(int attached, int budgeted) {
  __atomic_add_fetch(&statComms, 1, __ATOMIC_RELAXED);
  if (attached) __atomic_add_fetch(&statCommsWithFccl, 1, __ATOMIC_RELAXED);
  if (budgeted) __atomic_add_fetch(&statCommsWithBudget, 1, __ATOMIC_RELAXED);
}

void fncclStatsNoteCall(const struct fncclOp* op, int byFccl) {
  __atomic_add_fetch(byFccl ? &statFccl[op->coll] : &statNccl[op->coll], 1, __ATOMIC_RELAXED);
  if ((FNCCL_REDUCING_COLLS & (1u << op->coll)) && (int)op->op >= (int)ncclNumOps)
    __atomic_add_fetch(byFccl ? &statFcclPreMulSum : &statNcclPreMulSum, 1, __ATOMIC_RELAXED);
}

void fncclStatsNotePreMulSum(void) { __atomic_add_fetch(&statPreMulSumOps, 1, __ATOMIC_RELAXED); }

_Static_assert(FNCCL_NUM_COLLS == FCCL_NCCL_ALL_COLLS && FNCCL_REDUCE == FCCL_NCCL_REDUCE &&
                   FNCCL_BROADCAST == FCCL_NCCL_BROADCAST && FNCCL_GATHER == FCCL_NCCL_GATHER &&
                   FNCCL_SCATTER == FCCL_NCCL_SCATTER && FCCL_NCCL_COLLS <= FNCCL_NUM_COLLS,
               "fccl_nccl.h's indices are enum fncclColl's");

/* The first version of the struct ended at ncclCalls: its members never move, later ones are appended. */
_Static_assert(offsetof(fcclNcclStats_t, fcclCallsAll) == sizeof(size_t) + 12 * sizeof(uint64_t),
               "fcclNcclStats_t's first version keeps its layout");

FNCCL_API int fcclNcclGetStats(fcclNcclStats_t* stats) {
  if (stats == NULL || stats->size < offsetof(fcclNcclStats_t, commsWithFccl)) return ncclInvalidArgument;
  fcclNcclStats_t now;
  memset(&now, 0, sizeof(now));
  /* A caller's struct of an older fccl_nccl.h is shorter: only its bytes are written, and size says how many were;
   * one of a newer header is longer: its fields past this library's are left as they are. */
  const size_t filled = stats->size < sizeof(now) ? stats->size : sizeof(now);
  now.size = filled;
  now.comms = __atomic_load_n(&statComms, __ATOMIC_RELAXED);
  now.commsWithFccl = __atomic_load_n(&statCommsWithFccl, __ATOMIC_RELAXED);
  for (int c = 0; c < FNCCL_NUM_COLLS; c++) {
    now.fcclCallsAll[c] = __atomic_load_n(&statFccl[c], __ATOMIC_RELAXED);
    now.ncclCallsAll[c] = __atomic_load_n(&statNccl[c], __ATOMIC_RELAXED);
  }
  for (int c = 0; c < FCCL_NCCL_COLLS; c++) {
    now.fcclCalls[c] = now.fcclCallsAll[c];
    now.ncclCalls[c] = now.ncclCallsAll[c];
  }
  now.fcclPreMulSumCalls = __atomic_load_n(&statFcclPreMulSum, __ATOMIC_RELAXED);
  now.ncclPreMulSumCalls = __atomic_load_n(&statNcclPreMulSum, __ATOMIC_RELAXED);
  now.preMulSumOps = __atomic_load_n(&statPreMulSumOps, __ATOMIC_RELAXED);
  now.commsWithBudget = __atomic_load_n(&statCommsWithBudget, __ATOMIC_RELAXED);
  memcpy(stats, &now, filled);
  return ncclSuccess;
}

/* ---- cliques: which communicators of this process are ranks of one NCCL communicator ---------------------------- */

static uint64_t hashBytes(uint64_t hash, const void* data, size_t size) {
  const unsigned char* bytes = data;
  for (size_t i = 0; i < size; i++) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

static uint64_t cliqueOfIds(const ncclUniqueId* ids, int count) {
  return hashBytes(0xcbf29ce484222325ull, ids, (size_t)count * sizeof(*ids));
}

/* A clique of its own (ncclCommInitAll's communicators are its only ranks in any process). */
static uint64_t cliqueFresh(void) {
  static uint64_t counter;
  uint64_t value[3] = {__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED), (uint64_t)getpid(),
                       (uint64_t)time(NULL)};
  return hashBytes(0xcbf29ce484222325ull, value, sizeof(value));
}

/* The n-th split of a clique with one color is one clique in every process: splits are collective, in order. */
static uint64_t cliqueOfChild(struct fncclComm* parent, int color) {
  if (!parent) return cliqueFresh();
  uint64_t value[3] = {parent->clique, __atomic_fetch_add(&parent->splits, 1, __ATOMIC_RELAXED), (uint64_t)color};
  return hashBytes(0xcbf29ce484222325ull, value, sizeof(value));
}

/* ---- creation -------------------------------------------------------------------------------------------------- */

/*
 * After NCCL made *where: the entry and fccl's attach, or, inside a group, both deferred to the group's end. A
 * non-blocking communicator answers ncclInProgress until NCCL and the attach are both done.
 */
static ncclResult_t created(ncclResult_t result, ncclComm_t* where, const struct fncclConfigView* config,
                            uint64_t clique, int inGroup) {
  if (result != ncclSuccess && result != ncclInProgress) return result;
  if (inGroup) {
    struct fncclDeferred work = {.kind = FNCCL_DEFER_CREATED, .where = where, .config = *config, .clique = clique};
    ncclResult_t deferred = fncclGroupDefer(&work);
    return deferred != ncclSuccess ? deferred : result;
  }
  if (where == NULL || *where == NULL) return result; /* NCCL_SPLIT_NOCOLOR: no communicator */
  struct fncclComm* comm = fncclTableAdd(*where, config, clique);
  if (!comm) {
    FNCCL_WARN("comm %p: out of host memory for its entry; NCCL carries it", (void*)*where);
    return result;
  }
  if (result == ncclSuccess && comm->blocking) {
    fncclAttachNow(&comm, 1);
    return ncclSuccess;
  }
  __atomic_store_n(&comm->state, FNCCL_COMM_WAITING, __ATOMIC_RELEASE);
  return ncclInProgress;
}

FNCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                              ncclConfig_t* config) {
  FNCCL_NEED_REAL(CommInitRankConfig);
  ncclResult_t result;
  if (FNCCL_PASSTHROUGH()) {
    FNCCL_REAL(result, CommInitRankConfig, (comm, nranks, commId, rank, config));
    return result;
  }
  struct fncclConfigView view;
  fncclConfigRead(config, &view);
  const int inGroup = fncclInGroup();
  if (inGroup) (void)fncclGroupToNccl();
  FNCCL_REAL(result, CommInitRankConfig, (comm, nranks, commId, rank, config));
  fncclGroupNoteError(result);
  return created(result, comm, &view, cliqueOfIds(&commId, 1), inGroup);
}
FNCCL_TWIN(ncclCommInitRankConfig);

FNCCL_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  FNCCL_NEED_REAL(CommInitRank);
  ncclResult_t result;
  if (FNCCL_PASSTHROUGH()) {
    FNCCL_REAL(result, CommInitRank, (comm, nranks, commId, rank));
    return result;
  }
  struct fncclConfigView view;
  fncclConfigRead(NULL, &view);
  const int inGroup = fncclInGroup();
  if (inGroup) (void)fncclGroupToNccl();
  FNCCL_REAL(result, CommInitRank, (comm, nranks, commId, rank));
  fncclGroupNoteError(result);
  return created(result, comm, &view, cliqueOfIds(&commId, 1), inGroup);
}
FNCCL_TWIN(ncclCommInitRank);

FNCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                ncclUniqueId* commIds, ncclConfig_t* config) {
  FNCCL_NEED_REAL(CommInitRankScalable);
  ncclResult_t result;
  if (FNCCL_PASSTHROUGH()) {
    FNCCL_REAL(result, CommInitRankScalable, (newcomm, nranks, myrank, nId, commIds, config));
    return result;
  }
  struct fncclConfigView view;
  fncclConfigRead(config, &view);
  const int inGroup = fncclInGroup();
  if (inGroup) (void)fncclGroupToNccl();
  FNCCL_REAL(result, CommInitRankScalable, (newcomm, nranks, myrank, nId, commIds, config));
  fncclGroupNoteError(result);
  const uint64_t clique = commIds && nId > 0 ? cliqueOfIds(commIds, nId) : cliqueFresh();
  return created(result, newcomm, &view, clique, inGroup);
}
FNCCL_TWIN(ncclCommInitRankScalable);

FNCCL_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  FNCCL_NEED_REAL(CommInitAll);
  ncclResult_t result;
  if (FNCCL_PASSTHROUGH()) {
    FNCCL_REAL(result, CommInitAll, (comms, ndev, devlist));
    return result;
  }
  const int inGroup = fncclInGroup();
  if (inGroup) (void)fncclGroupToNccl();
  FNCCL_REAL(result, CommInitAll, (comms, ndev, devlist));
  fncclGroupNoteError(result);
  if (result != ncclSuccess || comms == NULL || ndev < 1) return result;
  struct fncclConfigView view;
  fncclConfigRead(NULL, &view);
  const uint64_t clique = cliqueFresh();
  if (inGroup) {
    for (int i = 0; i < ndev; i++) (void)created(result, &comms[i], &view, clique, 1);
    return result;
  }
  struct fncclComm** entries = calloc((size_t)ndev, sizeof(*entries));
  int count = 0;
  for (int i = 0; i < ndev && entries; i++) {
    if (comms[i] == NULL) continue;
    entries[count] = fncclTableAdd(comms[i], &view, clique);
    if (entries[count]) count++;
  }
  if (count > 0) fncclAttachNow(entries, count); /* together: each attach waits for the others */
  free(entries);
  return result;
}
FNCCL_TWIN(ncclCommInitAll);

/* A child's configuration: its own, or with none given, its parent's (as NCCL has it). */
static void childConfig(const ncclConfig_t* config, const struct fncclComm* parent, struct fncclConfigView* view) {
  if (config == NULL && parent) {
    *view = parent->config;
    view->blocking = parent->blocking;
    return;
  }
  fncclConfigRead(config, view);
}

FNCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  FNCCL_NEED_REAL(CommSplit);
  ncclResult_t result;
  if (FNCCL_PASSTHROUGH()) {
    FNCCL_REAL(result, CommSplit, (comm, color, key, newcomm, config));
    return result;
  }
  struct fncclConfigView view;
  struct fncclComm* parent = fncclTableFind(comm);
  childConfig(config, parent, &view);
  const uint64_t clique = cliqueOfChild(parent, color);
  if (parent) fncclTableRelease();
  const int inGroup = fncclInGroup();
  if (inGroup) (void)fncclGroupToNccl();
  FNCCL_REAL(result, CommSplit, (comm, color, key, newcomm, config));
  fncclGroupNoteError(result);
  return created(result, newcomm, &view, clique, inGroup);
}
FNCCL_TWIN(ncclCommSplit);

FNCCL_API ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                      ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  FNCCL_NEED_REAL(CommShrink);
  ncclResult_t result;
  if (FNCCL_PASSTHROUGH()) {
    FNCCL_REAL(result, CommShrink, (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
    return result;
  }
  struct fncclConfigView view;
  struct fncclComm* parent = fncclTableFind(comm);
  childConfig(config, parent, &view);
  const uint64_t clique = cliqueOfChild(parent, -2);
  if (parent) fncclTableRelease();
  struct fncclRelease* aborting = NULL;
  if (parent && (shrinkFlags & NCCL_SHRINK_ABORT)) {
    /* NCCL first stops the parent's work: fccl's kernels on it stop too, at once. The application does not use
     * the parent concurrently with its shrink. */
    fncclAttachJoin(parent, 1);
    aborting = fncclDetachBegin(parent);
  }
  const int inGroup = fncclInGroup();
  if (inGroup) (void)fncclGroupToNccl();
  FNCCL_REAL(result, CommShrink, (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
  fncclDetachFinish(aborting);
  fncclGroupNoteError(result);
  return created(result, newcomm, &view, clique, inGroup);
}
FNCCL_TWIN(ncclCommShrink);

/* ---- teardown --------------------------------------------------------------------------------------------------- */

static void logCounts(const struct fncclComm* comm, const char* how) {
  if (!fncclLogOn(FNCCL_LOG_INFO)) return;
  char counts[768];
  int used = 0;
  for (int c = 0; c < FNCCL_NUM_COLLS && used >= 0 && (size_t)used < sizeof(counts); c++)
    used += snprintf(counts + used, sizeof(counts) - (size_t)used, "%s%s fccl %llu nccl %llu", c ? ", " : "",
                     fncclCollName((enum fncclColl)c), (unsigned long long)comm->fcclCalls[c],
                     (unsigned long long)comm->ncclCalls[c]);
  fncclLog(FNCCL_LOG_INFO, "comm %p rank %d %s; calls: %s", (void*)comm->nccl, comm->rank, how, counts);
}

FNCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  FNCCL_NEED_REAL(CommFinalize);
  ncclResult_t result;
  if (!FNCCL_PASSTHROUGH()) {
    struct fncclComm* entry = fncclTableFind(comm);
    if (entry) {
      fncclTableRelease(); /* finalize is not concurrent with other calls on comm, but for queries */
      /* fccl's teardown exchanges over the NCCL communicator: before NCCL's finalize. An attach still running is
       * given up: every rank is tearing the communicator down. */
      fncclAttachJoin(entry, 1);
      fncclDetach(entry, 0);
      logCounts(entry, "finalized");
    }
  }
  FNCCL_REAL(result, CommFinalize, (comm));
  return result;
}
FNCCL_TWIN(ncclCommFinalize);

FNCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  FNCCL_NEED_REAL(CommDestroy);
  ncclResult_t result;
  if (!FNCCL_PASSTHROUGH()) {
    struct fncclComm* entry = fncclTableRemove(comm);
    if (entry) {
      fncclAttachJoin(entry, 1); /* as in finalize */
      fncclDetach(entry, 0);
      logCounts(entry, "destroyed");
      fncclCommFree(entry);
    }
  }
  FNCCL_REAL(result, CommDestroy, (comm));
  return result;
}
FNCCL_TWIN(ncclCommDestroy);

FNCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  FNCCL_NEED_REAL(CommAbort);
  ncclResult_t result;
  if (!FNCCL_PASSTHROUGH()) {
    /* Removal waits for a watchdog's query in progress; then nothing waits for a stream or a peer: the attach
     * gives up within a poll slice, fccl's kernels stop at once, and NCCL aborts its own. */
    struct fncclComm* entry = fncclTableRemove(comm);
    if (entry) {
      fncclAttachJoin(entry, 1);
      struct fncclRelease* aborting = fncclDetachBegin(entry);
      FNCCL_REAL(result, CommAbort, (comm));
      fncclDetachFinish(aborting);
      logCounts(entry, "aborted");
      fncclCommFree(entry);
      return result;
    }
  }
  FNCCL_REAL(result, CommAbort, (comm));
  return result;
}
FNCCL_TWIN(ncclCommAbort);

FNCCL_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  FNCCL_NEED_REAL(CommRevoke);
  ncclResult_t result;
  if (!FNCCL_PASSTHROUGH()) {
    struct fncclComm* entry = fncclTableFind(comm);
    if (entry) {
      fncclTableRelease();
      /* Revoked work stops: fccl's kernels too; what is left of the communicator (shrink, destroy) is NCCL's. */
      fncclAttachJoin(entry, 1);
      struct fncclRelease* aborting = fncclDetachBegin(entry);
      FNCCL_REAL(result, CommRevoke, (comm, revokeFlags));
      fncclDetachFinish(aborting);
      return result;
    }
  }
  FNCCL_REAL(result, CommRevoke, (comm, revokeFlags));
  return result;
}
FNCCL_TWIN(ncclCommRevoke);

/* ---- state and errors -------------------------------------------------------------------------------------------- */

FNCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  FNCCL_NEED_REAL(CommGetAsyncError);
  ncclResult_t result;
  if (FNCCL_PASSTHROUGH() || asyncError == NULL) {
    FNCCL_REAL(result, CommGetAsyncError, (comm, asyncError));
    return result;
  }
  struct fncclComm* entry = fncclTableFind(comm);
  if (!entry) {
    FNCCL_REAL(result, CommGetAsyncError, (comm, asyncError));
    return result;
  }
  /* Read-locked: an abort or destroy from another thread waits until this query is done. */
  int state = __atomic_load_n(&entry->state, __ATOMIC_ACQUIRE);
  if (state == FNCCL_COMM_WAITING) {
    ncclResult_t nccl = ncclSuccess;
    FNCCL_REAL(result, CommGetAsyncError, (comm, &nccl));
    if (result != ncclSuccess || nccl != ncclSuccess) {
      if (result == ncclSuccess) *asyncError = nccl;
      fncclTableRelease();
      return result;
    }
    pthread_mutex_lock(&entry->lock);
    if (__atomic_load_n(&entry->state, __ATOMIC_ACQUIRE) == FNCCL_COMM_WAITING) fncclAttachStart(entry);
    pthread_mutex_unlock(&entry->lock);
    state = __atomic_load_n(&entry->state, __ATOMIC_ACQUIRE);
  }
  if (state == FNCCL_COMM_ATTACHING) {
    if (!__atomic_load_n(&entry->attachDone, __ATOMIC_ACQUIRE)) {
      *asyncError = ncclInProgress;
      fncclTableRelease();
      return ncclSuccess;
    }
    fncclAttachJoin(entry, 0); /* finished: the join returns at once */
  }
  ncclResult_t engine = ncclSuccess;
  pthread_mutex_lock(&entry->lock);
  if (entry->engine) engine = fncclEngineAsyncError(entry->engine);
  pthread_mutex_unlock(&entry->lock);
  if (engine != ncclSuccess) {
    *asyncError = engine;
    fncclTableRelease();
    return ncclSuccess;
  }
  FNCCL_REAL(result, CommGetAsyncError, (comm, asyncError));
  fncclTableRelease();
  return result;
}
FNCCL_TWIN(ncclCommGetAsyncError);

FNCCL_API const char* ncclGetLastError(ncclComm_t comm) {
  if (fncclRealLoad() != ncclSuccess) return fncclSelf()->lastError;
  if (FNCCL_PASSTHROUGH()) return fncclReal.GetLastError(comm);
  struct fncclThread* t = fncclSelf();
  struct fncclComm* entry = comm ? fncclTableFind(comm) : NULL;
  if (entry) {
    pthread_mutex_lock(&entry->lock);
    if (entry->engine && fncclEngineAsyncError(entry->engine) != ncclSuccess) {
      snprintf(t->lastError, sizeof(t->lastError), "fccl: %s", fncclEngineCommError(entry->engine));
      t->lastErrorOurs = 1;
    }
    pthread_mutex_unlock(&entry->lock);
    fncclTableRelease();
  }
  if (t->lastErrorOurs) return t->lastError;
  return fncclReal.GetLastError(comm);
}
FNCCL_TWIN(ncclGetLastError);
