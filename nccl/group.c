/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Groups, per thread as NCCL's. ncclGroupStart and ncclGroupEnd always reach the real NCCL too, so that every call
 * of the group this library does not see (a device-API call, a call another library makes) finds NCCL's group
 * open. Inside the group the collectives fccl carries are recorded; at the outermost ncclGroupEnd they are launched
 * on fccl, in order, after NCCL's group ended (empty of them). As soon as the group holds a call NCCL carries (a
 * send, an all-to-all, a collective of another communicator or type), the recorded calls go to NCCL first, in
 * order, and every later call of the group follows: a group is one engine's, so that it stays one fused operation
 * whose parts cannot wait for each other across engines. Nothing in a group blocks; what needs the peers (attaching
 * fccl to communicators the group created, registering windows with fccl) runs after the outermost end, on one
 * thread per communicator when there are several. An op of ncclRedOpCreatePreMulSum destroyed while a recorded call
 * still uses it is destroyed after the outermost end too (redop.c).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

int fncclInGroup(void) { return fncclSelf()->groupDepth > 0; }

void fncclGroupNoteError(ncclResult_t result) {
  struct fncclThread* t = fncclSelf();
  if (t->groupDepth > 0 && t->groupError == ncclSuccess && result != ncclSuccess && result != ncclInProgress)
    t->groupError = result;
}

ncclResult_t fncclGroupRecord(struct fncclComm* comm, const struct fncclOp* op) {
  struct fncclThread* t = fncclSelf();
  if (t->opCount == t->opCapacity) {
    int capacity = t->opCapacity ? 2 * t->opCapacity : 16;
    struct fncclGroupOp* grown = realloc(t->ops, (size_t)capacity * sizeof(*grown));
    if (!grown) return fncclSetError(ncclSystemError, "out of host memory for a group of %d calls", t->opCount + 1);
    t->ops = grown;
    t->opCapacity = capacity;
  }
  t->ops[t->opCount++] = (struct fncclGroupOp){.op = *op, .comm = comm};
  return ncclSuccess;
}

int fncclGroupUsesOp(const struct fncclComm* comm, ncclRedOp_t op) {
  const struct fncclThread* t = fncclSelf();
  if (t->groupDepth == 0) return 0;
  for (int i = 0; i < t->opCount; i++)
    if (t->ops[i].comm == comm && (FNCCL_REDUCING_COLLS & (1u << t->ops[i].op.coll)) && t->ops[i].op.op == op) return 1;
  return 0;
}

ncclResult_t fncclGroupDefer(const struct fncclDeferred* work) {
  struct fncclThread* t = fncclSelf();
  if (t->deferredCount == t->deferredCapacity) {
    int capacity = t->deferredCapacity ? 2 * t->deferredCapacity : 8;
    struct fncclDeferred* grown = realloc(t->deferred, (size_t)capacity * sizeof(*grown));
    if (!grown) return fncclSetError(ncclSystemError, "out of host memory for a group");
    t->deferred = grown;
    t->deferredCapacity = capacity;
  }
  t->deferred[t->deferredCount++] = *work;
  return ncclSuccess;
}

ncclResult_t fncclGroupToNccl(void) {
  struct fncclThread* t = fncclSelf();
  if (t->groupToNccl) return ncclSuccess;
  t->groupToNccl = 1;
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < t->opCount; i++) {
    ncclResult_t result = fncclCollToNccl(t->ops[i].comm, &t->ops[i].op);
    if (first == ncclSuccess && result != ncclSuccess && result != ncclInProgress) first = result;
  }
  t->opCount = 0;
  return first;
}

/* The communicators created inside the group: entries made and fccl attached (blocking ones now, together). */
static void attachCreated(struct fncclThread* t, ncclResult_t ended) {
  struct fncclComm** ready = calloc((size_t)t->deferredCount + 1, sizeof(*ready));
  int readyCount = 0;
  for (int i = 0; i < t->deferredCount; i++) {
    struct fncclDeferred* d = &t->deferred[i];
    if (d->kind != FNCCL_DEFER_CREATED || d->where == NULL) continue;
    ncclComm_t made = *d->where;
    if (made == NULL) continue; /* NCCL_SPLIT_NOCOLOR, or the creation failed */
    struct fncclComm* comm = fncclTableAdd(made, &d->config, d->clique);
    if (!comm) {
      FNCCL_WARN("comm %p: out of host memory for its entry; NCCL carries it", (void*)made);
      continue;
    }
    /* A blocking communicator is ready once the group ended; a non-blocking one when NCCL says so, which the
     * application asks ncclCommGetAsyncError (its attach starts there). */
    if (ended == ncclSuccess && comm->blocking && ready) {
      ready[readyCount++] = comm;
    } else {
      __atomic_store_n(&comm->state, FNCCL_COMM_WAITING, __ATOMIC_RELEASE);
    }
  }
  if (readyCount > 0) fncclAttachNow(ready, readyCount);
  free(ready);
}

/* Windows registered or deregistered inside the group, now that NCCL has done so: fccl's side, in order for each
 * communicator, the communicators side by side (fccl's registration is collective). */
struct windowWork {
  const struct fncclDeferred* deferred;
  int count;
};

static void windowsOfComm(struct fncclComm* comm, void* context) {
  const struct windowWork* work = context;
  for (int i = 0; i < work->count; i++) {
    const struct fncclDeferred* d = &work->deferred[i];
    if (d->comm != comm->nccl) continue;
    if (d->kind == FNCCL_DEFER_WINDOW_REGISTER && d->window)
      fncclWindowAttach(comm, d->buff, d->size, *d->window);
    else if (d->kind == FNCCL_DEFER_WINDOW_DEREGISTER)
      fncclWindowDetach(comm, d->windowValue);
  }
}

static void windowsAfterGroup(struct fncclThread* t) {
  struct fncclComm** comms = calloc((size_t)t->deferredCount, sizeof(*comms));
  if (!comms) return;
  int count = 0;
  for (int i = 0; i < t->deferredCount; i++) {
    const struct fncclDeferred* d = &t->deferred[i];
    if (d->kind == FNCCL_DEFER_CREATED) continue;
    struct fncclComm* comm = fncclTableFind(d->comm);
    if (!comm) continue;
    fncclTableRelease(); /* the application does not destroy a communicator while it registers with it */
    int seen = 0;
    for (int j = 0; j < count && !seen; j++) seen = comms[j] == comm;
    if (!seen) comms[count++] = comm;
  }
  struct windowWork work = {.deferred = t->deferred, .count = t->deferredCount};
  if (count > 0) fncclEachComm(comms, count, windowsOfComm, &work);
  free(comms);
}

/* The ops destroyed inside the group while its recorded calls used them: now that those calls are launched (or
 * were given to NCCL, inside NCCL's group, which has ended), the ops go. */
static void destroyDeferredOps(struct fncclThread* t) {
  for (int i = 0; i < t->deferredCount; i++) {
    const struct fncclDeferred* d = &t->deferred[i];
    if (d->kind != FNCCL_DEFER_REDOP_DESTROY) continue;
    struct fncclComm* comm = fncclTableFind(d->comm);
    if (!comm) continue; /* destroyed since: its ops went with it */
    ncclResult_t result = fncclRedOpDestroyNow(comm, d->op);
    fncclTableRelease();
    if (result != ncclSuccess)
      FNCCL_WARN("comm %p: ncclRedOpDestroy of op %d, made at the end of the group that used it, failed: %s",
                 (void*)d->comm, (int)d->op, fncclReal.GetErrorString(result));
  }
}

FNCCL_API ncclResult_t ncclGroupStart(void) {
  FNCCL_NEED_REAL(GroupStart);
  if (FNCCL_PASSTHROUGH()) {
    ncclResult_t result;
    FNCCL_REAL(result, GroupStart, ());
    return result;
  }
  ncclResult_t result;
  FNCCL_REAL(result, GroupStart, ());
  if (result != ncclSuccess) return result;
  struct fncclThread* t = fncclSelf();
  if (t->groupDepth++ == 0) {
    t->groupToNccl = 0;
    t->groupError = ncclSuccess;
    t->opCount = 0;
    t->deferredCount = 0;
  }
  return ncclSuccess;
}
FNCCL_TWIN(ncclGroupStart);

/* The outermost end, after NCCL's: the recorded calls on fccl, then the deferred work. */
static ncclResult_t groupFinish(struct fncclThread* t, ncclResult_t ended) {
  ncclResult_t result = ended;
  if (result == ncclSuccess || result == ncclInProgress) {
    if (t->groupError != ncclSuccess) {
      result = t->groupError; /* described when it happened */
    } else {
      for (int i = 0; i < t->opCount; i++) {
        ncclResult_t launched = fncclCollToFccl(t->ops[i].comm, &t->ops[i].op);
        if (launched != ncclSuccess) {
          /* The rest of the group is not launched: its peers' calls would wait for the one that failed. */
          result = launched;
          break;
        }
      }
    }
  }
  t->opCount = 0;
  t->groupToNccl = 0;
  if (t->deferredCount > 0) {
    destroyDeferredOps(t);
    attachCreated(t, ended);
    if (ended == ncclSuccess) windowsAfterGroup(t);
  }
  t->deferredCount = 0;
  if (t->opCapacity > 64) { /* a large group's memory is not kept for the thread's life */
    free(t->ops);
    t->ops = NULL;
    t->opCapacity = 0;
  }
  return result;
}

FNCCL_API ncclResult_t ncclGroupEnd(void) {
  FNCCL_NEED_REAL(GroupEnd);
  struct fncclThread* t = fncclSelf();
  ncclResult_t ended;
  if (FNCCL_PASSTHROUGH() || t->groupDepth == 0) {
    FNCCL_REAL(ended, GroupEnd, ()); /* NCCL's own nesting, or no group of ours: NCCL says what it is */
    return ended;
  }
  FNCCL_REAL(ended, GroupEnd, ());
  if (--t->groupDepth > 0) return ended;
  return groupFinish(t, ended);
}
FNCCL_TWIN(ncclGroupEnd);

FNCCL_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  FNCCL_NEED_REAL(GroupSimulateEnd);
  struct fncclThread* t = fncclSelf();
  ncclResult_t result;
  if (FNCCL_PASSTHROUGH() || t->groupDepth == 0) {
    FNCCL_REAL(result, GroupSimulateEnd, (simInfo));
    return result;
  }
  /* NCCL's estimate is for the group as NCCL would run it: the recorded calls go to it first. The group ends
   * without running anything, as in NCCL. */
  (void)fncclGroupToNccl();
  FNCCL_REAL(result, GroupSimulateEnd, (simInfo));
  if (--t->groupDepth == 0) {
    t->groupToNccl = 0;
    t->opCount = 0;
    destroyDeferredOps(t); /* the calls that used them went to NCCL's simulation */
    t->deferredCount = 0;
  }
  return result;
}
FNCCL_TWIN(ncclGroupSimulateEnd);
