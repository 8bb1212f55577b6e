/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ncclRedOpCreatePreMulSum and ncclRedOpDestroy: NCCL makes the op first (so that NCCL holds it for every call it
 * carries), then, where fccl carries the communicator's reductions, the engine makes its twin with the same scalar,
 * datatype and residence, and the communicator keeps NCCL's op value -> the twin. A reduction with the op goes to
 * fccl exactly when the twin exists (coll.c), which must be so on every rank or on none:
 *  - whether a twin is made at all depends on what every rank shares: the communicator (attached or not, what it
 *    carries: agreed at the attach) and the datatype (types the engine cannot pre-multiply, 8-bit floats, stay NCCL's
 *    alone). The ranks of a collective pass the same datatype with the op, as NCCL requires;
 *  - a twin the engine fails to make on one rank (its device scalar in memory fccl's kernels do not read, host
 *    memory exhausted) fails ncclRedOpCreatePreMulSum on that rank, NCCL's op destroyed again: the creation is local,
 *    there is no exchange at which the ranks could agree to leave the op to NCCL, and an op NCCL alone held on one
 *    rank while the others' twins exist would send its calls to different engines, which would never meet. A failed
 *    creation is an error NCCL's own can return too (ncclInvalidArgument, ncclSystemError), and the application sees
 *    it on the rank where it happened.
 * ncclRedOpDestroy destroys the twin, then NCCL's op. NCCL lets an op be destroyed once the last call that uses it
 * returned, which inside a group is before the group ends; while this thread's group holds a recorded call with the
 * op (launched on fccl at the outermost ncclGroupEnd, or given to NCCL should the group turn to it), both are
 * destroyed after the group's end instead. The twins go with the engine's communicator (teardown, abort, revoke),
 * and NCCL's ops with NCCL's.
 */
#include "internal.h"

#include <stdlib.h>

struct fncclPreMulSum {
  struct fncclPreMulSum* next;
  ncclRedOp_t op; /* NCCL's */
  ncclDataType_t datatype;
  int engineOp; /* the engine's twin */
};

int fncclPreMulSumTwin(struct fncclComm* comm, ncclRedOp_t op, ncclDataType_t datatype, int* engineOp) {
  int found = 0;
  pthread_mutex_lock(&comm->lock);
  for (const struct fncclPreMulSum* p = comm->preMulSums; p && !found; p = p->next) {
    if (p->op != op) continue;
    found = p->datatype == datatype; /* another type: NCCL's call, and NCCL's error */
    if (found) *engineOp = p->engineOp;
    break;
  }
  pthread_mutex_unlock(&comm->lock);
  return found;
}

/* Unlinks and returns comm's twin of op (NULL: none); under comm->lock. */
static struct fncclPreMulSum* unlinkTwin(struct fncclComm* comm, ncclRedOp_t op) {
  struct fncclPreMulSum** link = &comm->preMulSums;
  while (*link && (*link)->op != op) link = &(*link)->next;
  struct fncclPreMulSum* found = *link;
  if (found) *link = found->next;
  return found;
}

void fncclPreMulSumsForget(struct fncclComm* comm) {
  pthread_mutex_lock(&comm->lock);
  struct fncclPreMulSum* p = comm->preMulSums;
  comm->preMulSums = NULL;
  pthread_mutex_unlock(&comm->lock);
  while (p) {
    struct fncclPreMulSum* next = p->next;
    free(p);
    p = next;
  }
}

/* The engine's twin of NCCL's new op; ncclSuccess also where no twin is wanted (NCCL's alone, on every rank). */
static ncclResult_t makeTwin(struct fncclComm* comm, ncclRedOp_t op, void* scalar, ncclDataType_t datatype,
                             ncclScalarResidence_t residence) {
  pthread_mutex_lock(&comm->lock);
  if (comm->engine == NULL || !(comm->carried & FNCCL_REDUCING_COLLS) || !fncclEngineTakesPreMulSum(datatype)) {
    pthread_mutex_unlock(&comm->lock);
    return ncclSuccess;
  }
  struct fncclPreMulSum* twin = calloc(1, sizeof(*twin));
  ncclResult_t made = ncclSystemError;
  if (twin) made = fncclEngineRedOpCreatePreMulSum(comm->engine, scalar, datatype, residence, &twin->engineOp);
  struct fncclPreMulSum* stale = NULL;
  if (made == ncclSuccess) {
    twin->op = op;
    twin->datatype = datatype;
    /* NCCL gives a destroyed op's value to the next op made: a twin still listed under it is no longer any op's. */
    stale = unlinkTwin(comm, op);
    if (stale && comm->engine) (void)fncclEngineRedOpDestroy(comm->engine, stale->engineOp);
    twin->next = comm->preMulSums;
    comm->preMulSums = twin;
  }
  pthread_mutex_unlock(&comm->lock);
  free(stale);
  if (made != ncclSuccess) {
    const char* words = twin ? fncclEngineThreadError() : "out of host memory";
    free(twin);
    return fncclSetError(made, "ncclRedOpCreatePreMulSum on communicator %p (rank %d): fccl, which carries its "
                         "reductions, could not make the op: %s. NCCL's op is destroyed again: an op NCCL alone "
                         "held here would send this rank's reductions to NCCL while the other ranks' go to fccl",
                         (void*)comm->nccl, comm->rank, words);
  }
  fncclStatsNotePreMulSum();
  return ncclSuccess;
}

FNCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                ncclScalarResidence_t residence, ncclComm_t comm) {
  FNCCL_NEED_REAL(RedOpCreatePreMulSum);
  ncclResult_t result;
  struct fncclComm* entry = FNCCL_PASSTHROUGH() ? NULL : fncclTableFind(comm);
  if (entry == NULL) { /* from inside NCCL, or a communicator this library never saw */
    FNCCL_REAL(result, RedOpCreatePreMulSum, (op, scalar, datatype, residence, comm));
    return result;
  }
  if (__atomic_load_n(&entry->state, __ATOMIC_ACQUIRE) != FNCCL_COMM_READY) {
    /* Whether fccl will carry the communicator is not known yet, so neither is whether the op needs a twin; NCCL too
     * takes no call on a communicator before it reported ncclSuccess. */
    fncclTableRelease();
    return fncclSetError(ncclInvalidArgument, "ncclRedOpCreatePreMulSum on communicator %p before "
                         "ncclCommGetAsyncError returned ncclSuccess: its initialisation has not finished",
                         (void*)comm);
  }
  const ncclRedOp_t before = op ? *op : ncclSum;
  FNCCL_REAL(result, RedOpCreatePreMulSum, (op, scalar, datatype, residence, comm));
  if (result == ncclSuccess) {
    result = makeTwin(entry, *op, scalar, datatype, residence);
    if (result != ncclSuccess) {
      ncclResult_t undone;
      FNCCL_REAL(undone, RedOpDestroy, (*op, comm));
      (void)undone;
      *op = before; /* the output is written on success only */
    }
  }
  fncclTableRelease();
  return result;
}
FNCCL_TWIN(ncclRedOpCreatePreMulSum);

ncclResult_t fncclRedOpDestroyNow(struct fncclComm* comm, ncclRedOp_t op) {
  pthread_mutex_lock(&comm->lock);
  struct fncclPreMulSum* twin = unlinkTwin(comm, op);
  ncclResult_t destroyed = ncclSuccess;
  if (twin && comm->engine) destroyed = fncclEngineRedOpDestroy(comm->engine, twin->engineOp);
  pthread_mutex_unlock(&comm->lock);
  if (destroyed != ncclSuccess)
    FNCCL_WARN("comm %p rank %d: fccl's twin %d of op %d could not be destroyed: %s (it goes with the communicator)",
               (void*)comm->nccl, comm->rank, twin->engineOp, (int)op, fncclEngineThreadError());
  free(twin);
  ncclResult_t result;
  FNCCL_REAL(result, RedOpDestroy, (op, comm->nccl));
  return result;
}

FNCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  FNCCL_NEED_REAL(RedOpDestroy);
  ncclResult_t result;
  struct fncclComm* entry = FNCCL_PASSTHROUGH() ? NULL : fncclTableFind(comm);
  if (entry == NULL) {
    FNCCL_REAL(result, RedOpDestroy, (op, comm));
    return result;
  }
  if (fncclGroupUsesOp(entry, op)) {
    struct fncclDeferred work = {.kind = FNCCL_DEFER_REDOP_DESTROY, .comm = comm, .op = op};
    result = fncclGroupDefer(&work);
  } else {
    result = fncclRedOpDestroyNow(entry, op);
  }
  fncclTableRelease();
  return result;
}
FNCCL_TWIN(ncclRedOpDestroy);
