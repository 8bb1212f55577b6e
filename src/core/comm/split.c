/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclCommSplit: the ranks of a communicator that pass the same color make a new one (ncclCommSplit's semantics),
 * the parent carrying the rendezvous. Over the parent's bootstrap every rank says its color, key, state and a fresh
 * salt; each color's first rank makes a unique id (a root of its own where the parent's ranks already reach each
 * other: split.h) and every rank learns it in a second all-gather; where the parent has an NCCL communicator, a
 * third meets every rank before ncclCommSplit of it, once each child's path is known. The child itself is made by
 * the task every init runs (init_task.c), with these steps handed to it as hooks: its bootstrap through that id;
 * its peers' information taken from the parent's (no exchange, no CUDA queries); its path decided as at init; an
 * arena slot of the parent's size where that fits, so that a slot in a chunk the parent's peers mapped is the
 * child's too and maps nothing new (with a chunk per slot, FCCL_ARENA_SLOTS=1, a slot no earlier communicator held
 * is in the chunk each arena grows by, which the child's transport init maps); its NCCL communicator the split one.
 * While the exchange runs the parent reads fcclInProgress, and waits on the child's abort flag (aborting either ends
 * it). docs/design.md.
 */
#include "split.h"

#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "debug.h"
#include "device_state.h"
#include "init.h"
#include "nccl_path.h"
#include "path.h"
#include "transport.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

static const char kCaller[] = "fcclCommSplit";

/* ---- the exchange over the parent (split.h) ---- */

/* What every rank of the parent says first. */
struct splitRecord {
  int32_t color; /* >= 0, or FCCL_SPLIT_NOCOLOR */
  int32_t key;
  int32_t status; /* fcclResult_t: a rank that failed already takes part, so that nobody waits for it */
  uint32_t salt;
};

/* What each color's first rank says next: the unique id of its child's rendezvous. */
struct splitIdRecord {
  int32_t status;
  int32_t reserved;
  fcclUniqueId id;
};

static uint32_t freshSalt(void) {
  uint32_t salt = 0;
  ssize_t got;
  do {
    got = getrandom(&salt, sizeof(salt), 0);
  } while (got == -1 && errno == EINTR);
  if (got != (ssize_t)sizeof(salt)) salt = (uint32_t)(uintptr_t)&salt ^ (uint32_t)getpid() << 16;
  return salt;
}

void fcclSplitPlanFree(struct fcclSplitPlan* plan) {
  free(plan->members);
  free(plan->salts);
  plan->members = NULL;
  plan->salts = NULL;
}

/* plan->members: the ranks of color, by key, then by parent rank (an insertion sort keeps equal keys in rank
 * order); plan->rank, nranks, salts and local from them. */
static void placeMembers(const struct fcclComm* parent, const struct splitRecord* records, struct fcclSplitPlan* plan) {
  int count = 0;
  for (int r = 0; r < parent->nranks; r++)
    if (records[r].color == plan->color) plan->members[count++] = r;
  for (int i = 1; i < count; i++) {
    const int moving = plan->members[i];
    int j = i;
    for (; j > 0 && records[plan->members[j - 1]].key > records[moving].key; j--)
      plan->members[j] = plan->members[j - 1];
    plan->members[j] = moving;
  }
  plan->nranks = count;
  plan->local = 1;
  for (int i = 0; i < count; i++) {
    const int r = plan->members[i];
    if (r == parent->rank) plan->rank = i;
    plan->salts[i] = records[r].salt;
    plan->local &= parent->peerInfo[r].hostHash == parent->peerInfo[parent->rank].hostHash;
  }
}

fcclResult_t fcclSplitExchange(struct fcclComm* parent, int color, int key, fcclResult_t status, int childTimeoutMs,
                               struct fcclSplitPlan* plan) {
  const int n = parent->nranks, me = parent->rank;
  memset(plan, 0, sizeof(*plan));
  plan->color = color;
  plan->key = key;
  plan->rank = -1;
  struct splitRecord* records = calloc((size_t)n, sizeof(*records));
  struct splitIdRecord* ids = calloc((size_t)n, sizeof(*ids));
  plan->members = calloc((size_t)n, sizeof(*plan->members));
  plan->salts = calloc((size_t)n, sizeof(*plan->salts));
  fcclResult_t res = fcclSuccess;
  if (!records || !ids || !plan->members || !plan->salts) {
    plan->exchangeFailed = 1; /* the other ranks go on to an all-gather this rank cannot join */
    res = FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "%s: out of host memory for %d ranks", kCaller, n);
    goto exit;
  }
  records[me] = (struct splitRecord){.color = color, .key = key, .status = (int32_t)status, .salt = freshSalt()};
  res = fcclBootstrapAllGather(parent->bootstrap, records, sizeof(*records));
  if (res != fcclSuccess) {
    plan->exchangeFailed = 1;
    goto exit;
  }
  fcclResult_t local = status;
  int culprit = -1;
  if (color != FCCL_SPLIT_NOCOLOR) {
    placeMembers(parent, records, plan);
    for (int i = 0; i < plan->nranks && culprit < 0; i++)
      if (records[plan->members[i]].status != fcclSuccess) culprit = plan->members[i];
    if (local == fcclSuccess && culprit >= 0)
      local = FCCL_ERROR(fcclRemoteError, FCCL_LOG_SUBSYS,
                         "%s: rank %d of the parent, of the same color %d, failed before the exchange (%s; its log has "
                         "the cause)",
                         kCaller, culprit, color, fcclGetErrorString((fcclResult_t)records[culprit].status));
  }
  /* The color's first rank serves its rendezvous; a color with a failed rank makes none. */
  const int leader = plan->nranks > 0 ? plan->members[0] : -1;
  int idMade = 0;
  if (leader == me) {
    if (local == fcclSuccess)
      local = fcclBootstrapGetUniqueIdNear(parent->bootstrap, plan->local, childTimeoutMs, &ids[me].id);
    idMade = local == fcclSuccess;
    ids[me].status = (int32_t)local;
  }
  res = fcclBootstrapAllGather(parent->bootstrap, ids, sizeof(*ids));
  if (res != fcclSuccess) {
    plan->exchangeFailed = 1;
    if (idMade) fcclBootstrapStopRoot(&ids[me].id);
    goto exit;
  }
  if (leader >= 0 && local == fcclSuccess && ids[leader].status != fcclSuccess)
    local = FCCL_ERROR(fcclRemoteError, FCCL_LOG_SUBSYS,
                       "%s: rank %d of the parent, the new communicator's rank 0, could not serve its rendezvous (%s; "
                       "its log has the cause)",
                       kCaller, leader, fcclGetErrorString((fcclResult_t)ids[leader].status));
  if (leader >= 0) plan->id = ids[leader].id;
  res = local;
exit:
  free(records);
  free(ids);
  return res;
}

fcclResult_t fcclSplitPeerInfo(const struct fcclComm* parent, const struct fcclSplitPlan* plan, int allowSharedDevice,
                               struct fcclPeerInfo** out) {
  struct fcclPeerInfo* infos = calloc((size_t)plan->nranks, sizeof(*infos));
  if (!infos)
    return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "out of memory for %d ranks' peer information", plan->nranks);
  for (int i = 0; i < plan->nranks; i++) {
    infos[i] = parent->peerInfo[plan->members[i]];
    infos[i].rank = i;
    infos[i].nranks = plan->nranks;
    infos[i].salt = plan->salts[i];
  }
  fcclResult_t res = fcclPeerInfoValidate(infos, plan->nranks, allowSharedDevice);
  if (res != fcclSuccess) {
    free(infos);
    return res;
  }
  *out = infos;
  return fcclSuccess;
}

/* ---- the parent's hold ---- */

/* The parent is the split's until releaseParent: its state reads fcclInProgress (its other calls are refused) and
 * destroy and abort wait for the exchange (teardown.c). */
static fcclResult_t claimParent(struct fcclComm* parent) {
  /* The thread of an earlier FCCL_SPLIT_NOCOLOR split that has finished is joined now. */
  if (parent->splitThreadActive && !__atomic_load_n(&parent->splitActive, __ATOMIC_ACQUIRE)) {
    pthread_join(parent->splitThread, NULL);
    parent->splitThreadActive = 0;
  }
  FCCLCHECK(fcclCommEnsureReady(parent, kCaller));
  if (!parent->bootstrap || !parent->peerInfo)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_LOG_SUBSYS, "%s: the communicator's init has not finished", kCaller);
  fcclResult_t expected = fcclSuccess;
  if (!__atomic_compare_exchange_n(&parent->asyncError, &expected, fcclInProgress, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return FCCL_ERROR(expected == fcclInProgress ? fcclInvalidUsage : expected, FCCL_LOG_SUBSYS,
                      "%s: the communicator %s", kCaller,
                      expected == fcclInProgress ? "is busy with another split or its init" : "failed meanwhile");
  __atomic_store_n(&parent->splitActive, 1, __ATOMIC_RELEASE);
  return fcclSuccess;
}

/*
 * Ends the split's hold on the parent: its bootstrap waits on its own abort flag again, and its state is what it
 * was, or failed when an all-gather over it failed (broken: its bootstrap is out of step for good) or a failure
 * (a peer's death) came meanwhile.
 */
static void releaseParent(struct fcclComm* parent, fcclResult_t broken, const char* why) {
  parent->bootstrap->abortFlag = parent->abortFlag;
  pthread_mutex_lock(&parent->errorLock);
  parent->splitAbort = NULL;
  if (broken != fcclSuccess && parent->failure[0] == '\0') {
    snprintf(parent->failure, sizeof(parent->failure),
             "%s: the exchange over this communicator failed, which leaves its bootstrap unusable (%s)", kCaller,
             why && why[0] ? why : fcclGetErrorString(broken));
    parent->failureResult = broken;
    snprintf(parent->lastError, sizeof(parent->lastError), "%s", parent->failure);
  }
  const fcclResult_t state = parent->failure[0] ? parent->failureResult : fcclSuccess;
  __atomic_store_n(&parent->asyncError, state, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&parent->errorLock);
  __atomic_store_n(&parent->splitActive, 0, __ATOMIC_RELEASE);
}

/* ---- the NCCL step ---- */

struct splitNcclRecord {
  int32_t color; /* the color this rank asks ncclCommSplit for, or FCCL_SPLIT_NOCOLOR */
  int32_t reserved;
};

/*
 * Where the parent has an NCCL communicator, every rank of the parent meets in an all-gather of the color it will
 * ask ncclCommSplit for (its child's when the child wants NCCL's communicator and every rank of its color asks for
 * it too, else FCCL_SPLIT_NOCOLOR), then calls it: every rank has arrived, so NCCL's split, which fcclNcclCommSplit
 * waits for, does not wait for a missing one. *out: this rank's new NCCL communicator (NULL without); *broken: the
 * all-gather failed.
 */
static fcclResult_t splitNccl(struct fcclComm* parent, struct fcclComm* owner, const struct fcclSplitPlan* plan,
                              int want, int splitShare, struct fcclNcclComm** out, int* broken) {
  *out = NULL;
  *broken = 0;
  if (!parent->nccl) return fcclSuccess;
  struct splitNcclRecord* records = calloc((size_t)parent->nranks, sizeof(*records));
  if (!records) {
    *broken = 1;
    return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "%s: out of host memory", kCaller);
  }
  records[parent->rank].color = want && plan->nranks > 0 ? plan->color : FCCL_SPLIT_NOCOLOR;
  fcclResult_t res = fcclBootstrapAllGather(parent->bootstrap, records, sizeof(*records));
  if (res != fcclSuccess) {
    *broken = 1;
    free(records);
    return res;
  }
  int ask = records[parent->rank].color, culprit = -1;
  for (int i = 0; ask != FCCL_SPLIT_NOCOLOR && i < plan->nranks; i++)
    if (records[plan->members[i]].color != ask) culprit = plan->members[i];
  if (culprit >= 0) ask = FCCL_SPLIT_NOCOLOR;
  free(records);
  res = fcclNcclCommSplit(owner, parent, ask, plan->key, plan->nranks, plan->rank, splitShare, out);
  if (res == fcclSuccess && culprit >= 0)
    res = FCCL_ERROR(fcclRemoteError, FCCL_LOG_SUBSYS,
                     "%s: rank %d of the parent, of the same color %d, did not come to ncclCommSplit for the new "
                     "communicator (its part failed: its log has the cause)",
                     kCaller, culprit, plan->color);
  return res;
}

/* ---- the child's part, as hooks of the init task (init.h) ---- */

/* A child's split, kept in its job (hookState) until the task ends. */
struct splitChild {
  struct fcclComm* parent;
  int color, key;
  struct fcclSplitPlan plan;
  int exchanged; /* fcclSplitExchange ran */
  int released;  /* releaseParent ran */
};

/* struct fcclInitHooks.join: the exchange, then the child's place, peers and bootstrap. */
static fcclResult_t childJoin(struct fcclComm* child) {
  struct fcclInitJob* job = child->initJob;
  struct splitChild* sc = job->hookState;
  struct fcclComm* parent = sc->parent;
  fcclResult_t res = fcclSplitExchange(parent, sc->color, sc->key, fcclSuccess, child->timeoutMs, &sc->plan);
  sc->exchanged = 1;
  if (sc->plan.exchangeFailed) {
    releaseParent(parent, res, fcclThreadLastError());
    sc->released = 1;
  }
  FCCLCHECK(res);
  /* Until now fcclCommCount and fcclCommUserRank said 0 and -1 (fccl.h). */
  __atomic_store_n(&child->nranks, sc->plan.nranks, __ATOMIC_RELEASE);
  __atomic_store_n(&child->rank, sc->plan.rank, __ATOMIC_RELEASE);
  fcclLogSetContext(child->rank, child->cudaDev);
  FCCLCHECK(fcclSplitPeerInfo(parent, &sc->plan, child->allowSharedDevice, &child->peerInfo));
  /* The parent's slot size where it holds the child's layout (with nearly all its staging: sizes differ by rank
   * count only by rounding): the child's slot then comes from the parent's arenas, whose chunks every peer keeps
   * mapped while the parent lives (or from the chunk an arena grows by, mapped by the child's transport init). The
   * same on every rank: the parent's ranks agreed on their slot and FCCL_STAGING_BYTES. */
  if (parent->transport) {
    const size_t parentSlot = fcclTransportSlotBytes(parent->transport);
    if (fcclDeviceSlotHolds(child->nranks, parentSlot)) job->slotBytes = parentSlot;
  }
  return fcclBootstrapTcpInit(&sc->plan.id, child->rank, child->nranks, child->timeoutMs, child->abortFlag,
                              &child->bootstrap);
}

/* struct fcclInitHooks.pathChosen: the NCCL step, which releases the parent, and the child's NCCL communicator. */
static fcclResult_t childPathChosen(struct fcclComm* child, const struct fcclPathDecision* decision) {
  struct fcclInitJob* job = child->initJob;
  struct splitChild* sc = job->hookState;
  struct fcclComm* parent = sc->parent;
  const int fromParent = parent->nccl != NULL;
  struct fcclNcclComm* nc = NULL;
  fcclResult_t res = fcclSuccess;
  if (!sc->released) {
    int broken = 0;
    res = splitNccl(parent, child, &sc->plan, decision->ncclComm, child->splitShare, &nc, &broken);
    releaseParent(parent, broken ? res : fcclSuccess, fcclThreadLastError());
    sc->released = 1;
  }
  if (!decision->ncclComm || !fromParent) return res;
  /* Every rank learns whether every rank has its NCCL communicator, so that all keep theirs or none does. */
  const int n = child->nranks;
  int32_t* have = calloc((size_t)n, sizeof(*have));
  if (!have) {
    fcclNcclCommDiscard(child, nc);
    return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "out of host memory");
  }
  have[child->rank] = res == fcclSuccess && nc != NULL;
  char cause[FCCL_LAST_ERROR_MAX];
  snprintf(cause, sizeof(cause), "%s", fcclThreadLastError());
  fcclResult_t gathered = fcclBootstrapAllGather(child->bootstrap, have, sizeof(*have));
  int missing = -1;
  for (int r = 0; gathered == fcclSuccess && r < n && missing < 0; r++)
    if (!have[r]) missing = r;
  free(have);
  if (gathered == fcclSuccess && missing < 0) {
    __atomic_store_n(&child->nccl, nc, __ATOMIC_RELEASE);
    job->ncclSettled = 1;
    return fcclSuccess;
  }
  fcclNcclCommDiscard(child, nc);
  if (gathered != fcclSuccess) return gathered;
  if (res != fcclSuccess) { /* this rank's own failure, described already */
    fcclRestoreThreadError(cause);
    if (decision->ncclRequired) return res;
  } else if (decision->ncclRequired) {
    return FCCL_ERROR(fcclRemoteError, FCCL_LOG_SUBSYS,
                      "rank %d could not get its NCCL communicator from ncclCommSplit (its log has the cause)",
                      missing);
  }
  /* Only send, receive and all-to-all needed it: the child goes on without, as init does. */
  snprintf(child->ncclMissing, sizeof(child->ncclMissing), "ncclCommSplit did not give rank %d its NCCL communicator",
           missing);
  FCCL_INFO(FCCL_LOG_SUBSYS, "rank %d: going on without an NCCL communicator: %s", child->rank, child->ncclMissing);
  fcclClearError();
  job->ncclSettled = 1;
  return fcclSuccess;
}

/*
 * struct fcclInitHooks.finish: whatever of the parent's steps this rank has not taken yet, it takes now as a rank
 * that failed (so that neither the parent's other ranks nor this color's wait for it), the parent is released, and
 * a failed color's rank 0 stops its rendezvous's root (nobody else will come).
 */
static void childFinish(struct fcclComm* child, fcclResult_t result) {
  struct fcclInitJob* job = child->initJob;
  struct splitChild* sc = job->hookState;
  if (!sc) return;
  struct fcclComm* parent = sc->parent;
  char cause[FCCL_LAST_ERROR_MAX];
  snprintf(cause, sizeof(cause), "%s", fcclThreadLastError());
  if (!sc->exchanged) {
    const fcclResult_t failed = result != fcclSuccess ? result : fcclInternalError;
    const fcclResult_t res = fcclSplitExchange(parent, sc->color, sc->key, failed, child->timeoutMs, &sc->plan);
    sc->exchanged = 1;
    if (sc->plan.exchangeFailed) {
      releaseParent(parent, res, fcclThreadLastError());
      sc->released = 1;
    }
  }
  if (!sc->released) {
    int broken = 0;
    struct fcclNcclComm* nc = NULL;
    const fcclResult_t res = splitNccl(parent, child, &sc->plan, 0, child->splitShare, &nc, &broken);
    fcclNcclCommDiscard(child, nc);
    releaseParent(parent, broken ? res : fcclSuccess, fcclThreadLastError());
    sc->released = 1;
  }
  if (result != fcclSuccess && sc->plan.rank == 0) fcclBootstrapStopRoot(&sc->plan.id);
  fcclRestoreThreadError(cause);
  fcclSplitPlanFree(&sc->plan);
  free(sc);
  job->hookState = NULL;
}

static const struct fcclInitHooks kSplitHooks = {.join = childJoin,
                                                 .pathChosen = childPathChosen,
                                                 .finish = childFinish};

/* ---- a rank of FCCL_SPLIT_NOCOLOR: the parent's steps only ---- */

static fcclResult_t noColorRun(struct fcclComm* parent, int key) {
  struct fcclSplitPlan plan;
  fcclResult_t res = fcclSplitExchange(parent, FCCL_SPLIT_NOCOLOR, key, fcclSuccess, parent->timeoutMs, &plan);
  int broken = plan.exchangeFailed;
  if (!broken) {
    struct fcclNcclComm* nc = NULL;
    res = splitNccl(parent, parent, &plan, 0, FCCL_CONFIG_UNDEF_INT, &nc, &broken);
    fcclNcclCommDiscard(parent, nc);
  }
  releaseParent(parent, broken ? res : fcclSuccess, fcclThreadLastError());
  fcclSplitPlanFree(&plan);
  return res;
}

struct noColorJob {
  struct fcclComm* parent;
  int key;
};

static void* noColorThread(void* arg) {
  struct noColorJob* job = arg;
  struct fcclComm* parent = job->parent;
  const int key = job->key;
  free(job);
  fcclClearError();
  fcclLogSetContext(parent->rank, parent->cudaDev);
  fcclResult_t res = fcclSuccess;
  if (cudaSetDevice(parent->cudaDev) != cudaSuccess) {
    (void)cudaGetLastError();
    res = FCCL_ERROR(fcclUnhandledCudaError, FCCL_LOG_SUBSYS, "%s: cannot make device %d current", kCaller,
                     parent->cudaDev);
  }
  /* Even after a failure this rank takes part, so that the other ranks do not wait for it. */
  const fcclResult_t ran = noColorRun(parent, key);
  if (res == fcclSuccess) res = ran;
  if (res != fcclSuccess) fcclCommRecordThreadError(parent);
  return NULL;
}

/* ---- what a child of a split or a shrink takes from its parent (init.h) ---- */

void fcclCommInheritedConfig(const struct fcclComm* parent, fcclConfig_t* out) {
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.blocking = parent->blocking;
  config.timeoutMs = parent->timeoutMs;
  config.commName = parent->name;
  config.allowSharedDevice = parent->allowSharedDevice;
  config.splitShare = parent->splitShare;
  /* The budget as the parent was given it; a parent that had none (or a handle without one) gives none. */
  config.minCTAs = parent->minCtas > 0 ? parent->minCtas : FCCL_CONFIG_UNDEF_INT;
  config.maxCTAs = parent->maxCtas > 0 ? parent->maxCtas : FCCL_CONFIG_UNDEF_INT;
  *out = config;
}

fcclResult_t fcclCommUseDevice(const struct fcclComm* comm, const char* caller, int* saved) {
  *saved = -1;
  if (cudaGetDevice(saved) != cudaSuccess || (*saved != comm->cudaDev && cudaSetDevice(comm->cudaDev) != cudaSuccess)) {
    (void)cudaGetLastError();
    return FCCL_ERROR(fcclUnhandledCudaError, FCCL_LOG_SUBSYS, "%s: cannot make device %d current", caller,
                      comm->cudaDev);
  }
  return fcclSuccess;
}

void fcclCommRestoreDevice(const struct fcclComm* comm, int saved) {
  if (saved >= 0 && saved != comm->cudaDev && cudaSetDevice(saved) != cudaSuccess) (void)cudaGetLastError();
}

/* ---- the public call ---- */

static fcclResult_t splitColored(struct fcclComm* parent, int color, int key, const struct fcclCommSettings* settings,
                                 fcclComm_t* newcomm) {
  struct splitChild* sc = calloc(1, sizeof(*sc));
  struct fcclInitJob* job = calloc(1, sizeof(*job));
  if (!sc || !job) {
    free(sc);
    free(job);
    releaseParent(parent, fcclSuccess, NULL);
    return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "%s: out of host memory", kCaller);
  }
  *sc = (struct splitChild){.parent = parent, .color = color, .key = key};
  sc->plan.rank = -1;
  job->kind = INIT_SPLIT;
  job->hooks = &kSplitHooks;
  job->hookState = sc;
  job->outerBootstrap = parent->bootstrap;
  struct fcclComm* child = NULL;
  /* rank and nranks are known once the exchange has placed this rank (childJoin) */
  fcclResult_t res = fcclCommNew(settings, -1, 0, parent->cudaDev, job, &child);
  if (res != fcclSuccess) { /* job freed */
    free(sc);
    releaseParent(parent, fcclSuccess, NULL);
    return res;
  }
  /* The exchange waits on the child's abort flag: aborting the child ends it at once, and aborting the parent sets
   * the child's flag too (splitAbort, teardown.c). Nobody else uses the parent's bootstrap until it is released. */
  pthread_mutex_lock(&parent->errorLock);
  parent->splitAbort = child->abortFlag;
  pthread_mutex_unlock(&parent->errorLock);
  parent->bootstrap->abortFlag = child->abortFlag;
  /* A blocking split runs the init on this thread, which makes the parent's device current: the caller's comes
   * back after. */
  int saved = -1;
  if (settings->blocking && cudaGetDevice(&saved) != cudaSuccess) {
    (void)cudaGetLastError();
    saved = -1;
  }
  res = fcclCommStart(child, settings->blocking, newcomm);
  if (settings->blocking) fcclCommRestoreDevice(parent, saved);
  return res;
}

FCCL_API fcclResult_t fcclCommSplit(fcclComm_t comm, int color, int key, fcclComm_t* newcomm,
                                    const fcclConfig_t* config) {
  fcclClearError();
  if (!fcclCommIsValid(comm))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_LOG_SUBSYS, "%s: invalid communicator handle %p", kCaller, (void*)comm);
  FCCLCHECK(fcclCommCheckOwner(comm, kCaller));
  FCCL_REQUIRE(newcomm != NULL, "%s: newcomm is NULL", kCaller);
  FCCL_REQUIRE(color >= 0 || color == FCCL_SPLIT_NOCOLOR,
               "%s: color %d is negative: give a color >= 0, or FCCL_SPLIT_NOCOLOR (%d) to join no communicator",
               kCaller, color, FCCL_SPLIT_NOCOLOR);
  fcclConfig_t inherited;
  if (!config) fcclCommInheritedConfig(comm, &inherited);
  struct fcclCommSettings settings;
  FCCLCHECK(fcclCommResolveConfig(config ? config : &inherited, kCaller, &settings));
  FCCLCHECK(claimParent(comm));
  if (color != FCCL_SPLIT_NOCOLOR) return splitColored(comm, color, key, &settings, newcomm);

  if (settings.blocking) {
    int saved = -1;
    fcclResult_t res = fcclCommUseDevice(comm, kCaller, &saved);
    /* Even after a failure this rank takes part, so that the other ranks do not wait for it. */
    const fcclResult_t ran = noColorRun(comm, key);
    fcclCommRestoreDevice(comm, saved);
    if (res == fcclSuccess) res = ran;
    if (res == fcclSuccess) *newcomm = FCCL_COMM_NULL;
    return res;
  }
  struct noColorJob* job = malloc(sizeof(*job));
  fcclResult_t res = fcclSuccess;
  if (!job) {
    res = FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "%s: out of host memory", kCaller);
  } else {
    *job = (struct noColorJob){.parent = comm, .key = key};
    PTHREADCHECKGOTO(pthread_create(&comm->splitThread, NULL, noColorThread, job), "starting the split's thread", res,
                     noThread);
    comm->splitThreadActive = 1;
    *newcomm = FCCL_COMM_NULL;
    return fcclInProgress;
  }
noThread:
  free(job);
  /* Run here, then, so that the other ranks do not wait for this one. */
  char cause[FCCL_LAST_ERROR_MAX];
  snprintf(cause, sizeof(cause), "%s", fcclThreadLastError());
  int saved = -1;
  if (fcclCommUseDevice(comm, kCaller, &saved) == fcclSuccess) {
    (void)noColorRun(comm, key);
    fcclCommRestoreDevice(comm, saved);
  } else {
    releaseParent(comm, fcclSuccess, NULL);
  }
  fcclRestoreThreadError(cause);
  return res;
}
