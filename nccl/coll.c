/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The collectives and where each call goes. A call goes to fccl when its communicator has fccl attached, fccl
 * carries that collective there (FCCL_NCCL_API_DISABLE, what every rank agreed at the attach) and the engine takes
 * its type and op: a built-in op, or an op of ncclRedOpCreatePreMulSum whose fccl twin exists (redop.c), which is so
 * on every rank or on none. Every part of that decision is the same on every rank of the communicator (buffers and
 * streams play no part), so that all ranks' calls meet in the same engine. Everything else goes to the real NCCL, as
 * do the calls NCCL makes into its own exported names (its ncclBcast calls ncclBroadcast).
 *
 * The route of each collective is one row of the engine's table (engine_fccl.c).
 */
#include "internal.h"

#include <string.h>

ncclResult_t fncclCollToNccl(struct fncclComm* comm, const struct fncclOp* op) {
  ncclResult_t result = ncclInvalidUsage;
  switch (op->coll) {
    case FNCCL_ALLREDUCE:
      FNCCL_REAL(result, AllReduce,
                 (op->sendbuff, op->recvbuff, op->count, op->datatype, op->op, op->comm, op->stream));
      break;
    case FNCCL_ALLGATHER:
      FNCCL_REAL(result, AllGather, (op->sendbuff, op->recvbuff, op->count, op->datatype, op->comm, op->stream));
      break;
    case FNCCL_REDUCESCATTER:
      FNCCL_REAL(result, ReduceScatter,
                 (op->sendbuff, op->recvbuff, op->count, op->datatype, op->op, op->comm, op->stream));
      break;
    case FNCCL_BROADCAST:
      FNCCL_REAL(result, Broadcast,
                 (op->sendbuff, op->recvbuff, op->count, op->datatype, op->root, op->comm, op->stream));
      break;
    case FNCCL_REDUCE:
      if (fncclReal.Reduce == NULL) return fncclRealMissing("ncclReduce");
      FNCCL_REAL(result, Reduce,
                 (op->sendbuff, op->recvbuff, op->count, op->datatype, op->op, op->root, op->comm, op->stream));
      break;
    case FNCCL_GATHER:
      if (fncclReal.Gather == NULL) return fncclRealMissing("ncclGather");
      FNCCL_REAL(result, Gather,
                 (op->sendbuff, op->recvbuff, op->count, op->datatype, op->root, op->comm, op->stream));
      break;
    case FNCCL_SCATTER:
      if (fncclReal.Scatter == NULL) return fncclRealMissing("ncclScatter");
      FNCCL_REAL(result, Scatter,
                 (op->sendbuff, op->recvbuff, op->count, op->datatype, op->root, op->comm, op->stream));
      break;
    default: return fncclSetError(ncclInternalError, "collective %d has no NCCL form", (int)op->coll);
  }
  if (comm) __atomic_add_fetch(&comm->ncclCalls[op->coll], 1, __ATOMIC_RELAXED);
  fncclStatsNoteCall(op, 0);
  return result;
}

ncclResult_t fncclCollToFccl(struct fncclComm* comm, const struct fncclOp* op) {
  /* Under the entry's lock: a revoke or finalize from another thread releases the engine only between launches. */
  pthread_mutex_lock(&comm->lock);
  if (comm->engine == NULL) { /* released since the call was routed: NCCL carries it */
    pthread_mutex_unlock(&comm->lock);
    return fncclCollToNccl(comm, op);
  }
  ncclResult_t result = fncclEngineLaunch(comm->engine, op);
  pthread_mutex_unlock(&comm->lock);
  if (result != ncclSuccess)
    return fncclSetError(result, "%s on communicator %p (rank %d) through fccl: %s", fncclCollName(op->coll),
                         (void*)op->comm, comm->rank, fncclEngineThreadError());
  __atomic_add_fetch(&comm->fcclCalls[op->coll], 1, __ATOMIC_RELAXED);
  fncclStatsNoteCall(op, 1);
  return ncclSuccess;
}

/* Whether NCCL would refuse a call on comm now: a non-blocking communicator whose last call NCCL has not finished
 * (NCCL answers ncclInvalidArgument: the application must wait for ncclSuccess first), or an NCCL communicator
 * with an asynchronous error, which NCCL reports instead of running the call. */
static ncclResult_t ncclWouldRefuse(struct fncclComm* comm) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t queried;
  FNCCL_REAL(queried, CommGetAsyncError, (comm->nccl, &state));
  if (queried != ncclSuccess) return queried;
  if (state == ncclInProgress)
    return fncclSetError(ncclInvalidArgument, "communicator %p used before its previous operation returned "
                         "ncclSuccess (poll ncclCommGetAsyncError)", (void*)comm->nccl);
  if (state != ncclSuccess)
    return fncclSetError(state, "communicator %p has an asynchronous error: %s", (void*)comm->nccl,
                         fncclReal.GetErrorString(state));
  return ncclSuccess;
}

/* Whether op goes to the engine of comm (attached and ready); sets op->engineOp when it does. */
static int toEngine(struct fncclComm* comm, struct fncclOp* op) {
  if (comm->engine == NULL || !(comm->carried & (1u << op->coll))) return 0;
  int twinned = 0;
  op->engineOp = (int)op->op;
  if ((FNCCL_REDUCING_COLLS & (1u << op->coll)) && (int)op->op >= (int)ncclNumOps)
    twinned = fncclPreMulSumTwin(comm, op->op, op->datatype, &op->engineOp);
  return fncclEngineTakes(op->coll, op->datatype, op->op, twinned);
}

/* The one path of the seven collectives (ncclBcast is the broadcast). */
static ncclResult_t collective(struct fncclOp* op) {
  struct fncclThread* t = fncclSelf();
  struct fncclComm* comm = fncclTableFind(op->comm);
  if (comm == NULL) {
    /* A communicator this library never saw (made before it was loaded, or by another path): NCCL's. */
    if (t->groupDepth > 0) (void)fncclGroupToNccl();
    return fncclCollToNccl(NULL, op);
  }
  ncclResult_t result;
  int state = __atomic_load_n(&comm->state, __ATOMIC_ACQUIRE);
  if (state != FNCCL_COMM_READY) {
    /* fccl is still being attached (a non-blocking communicator): NCCL too refuses calls before ncclSuccess. */
    result = fncclSetError(ncclInvalidArgument, "communicator %p used before ncclCommGetAsyncError returned "
                           "ncclSuccess: its initialisation has not finished", (void*)op->comm);
    fncclGroupNoteError(result);
    fncclTableRelease();
    return result;
  }
  const int toFccl = toEngine(comm, op);
  if (!toFccl || (t->groupDepth > 0 && t->groupToNccl)) {
    if (t->groupDepth > 0) (void)fncclGroupToNccl();
    result = fncclCollToNccl(comm, op);
  } else if (t->groupDepth > 0) {
    result = comm->blocking ? ncclSuccess : ncclWouldRefuse(comm);
    if (result == ncclSuccess) result = fncclGroupRecord(comm, op);
    fncclGroupNoteError(result);
  } else {
    result = ncclWouldRefuse(comm);
    if (result == ncclSuccess) result = fncclCollToFccl(comm, op);
  }
  fncclTableRelease();
  return result;
}

/* The call as made, straight to NCCL: from inside NCCL, or before any communicator exists. */
#define PASS(name, args)                          \
  do {                                            \
    FNCCL_NEED_REAL(name);                        \
    if (FNCCL_PASSTHROUGH()) {                    \
      ncclResult_t passed_;                       \
      FNCCL_REAL(passed_, name, args);            \
      return passed_;                             \
    }                                             \
  } while (0)

FNCCL_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  PASS(AllReduce, (sendbuff, recvbuff, count, datatype, op, comm, stream));
  struct fncclOp call = {.coll = FNCCL_ALLREDUCE, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count,
                         .datatype = datatype, .op = op, .comm = comm, .stream = stream};
  return collective(&call);
}
FNCCL_TWIN(ncclAllReduce);

FNCCL_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                     ncclComm_t comm, cudaStream_t stream) {
  PASS(AllGather, (sendbuff, recvbuff, sendcount, datatype, comm, stream));
  struct fncclOp call = {.coll = FNCCL_ALLGATHER, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = sendcount,
                         .datatype = datatype, .comm = comm, .stream = stream};
  return collective(&call);
}
FNCCL_TWIN(ncclAllGather);

FNCCL_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
  PASS(ReduceScatter, (sendbuff, recvbuff, recvcount, datatype, op, comm, stream));
  struct fncclOp call = {.coll = FNCCL_REDUCESCATTER, .sendbuff = sendbuff, .recvbuff = recvbuff,
                         .count = recvcount, .datatype = datatype, .op = op, .comm = comm, .stream = stream};
  return collective(&call);
}
FNCCL_TWIN(ncclReduceScatter);

FNCCL_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                     int root, ncclComm_t comm, cudaStream_t stream) {
  PASS(Broadcast, (sendbuff, recvbuff, count, datatype, root, comm, stream));
  struct fncclOp call = {.coll = FNCCL_BROADCAST, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count,
                         .datatype = datatype, .root = root, .comm = comm, .stream = stream};
  return collective(&call);
}
FNCCL_TWIN(ncclBroadcast);

/* In place: the broadcast of buff into itself (NCCL's ncclBcast is that call too). */
FNCCL_API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream) {
  PASS(Bcast, (buff, count, datatype, root, comm, stream));
  struct fncclOp call = {.coll = FNCCL_BROADCAST, .sendbuff = buff, .recvbuff = buff, .count = count,
                         .datatype = datatype, .root = root, .comm = comm, .stream = stream};
  return collective(&call);
}
FNCCL_TWIN(ncclBcast);

FNCCL_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  PASS(Reduce, (sendbuff, recvbuff, count, datatype, op, root, comm, stream));
  struct fncclOp call = {.coll = FNCCL_REDUCE, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count,
                         .datatype = datatype, .op = op, .root = root, .comm = comm, .stream = stream};
  return collective(&call);
}
FNCCL_TWIN(ncclReduce);

FNCCL_API ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  int root, ncclComm_t comm, cudaStream_t stream) {
  PASS(Gather, (sendbuff, recvbuff, count, datatype, root, comm, stream));
  struct fncclOp call = {.coll = FNCCL_GATHER, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count,
                         .datatype = datatype, .root = root, .comm = comm, .stream = stream};
  return collective(&call);
}
FNCCL_TWIN(ncclGather);

FNCCL_API ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                   int root, ncclComm_t comm, cudaStream_t stream) {
  PASS(Scatter, (sendbuff, recvbuff, count, datatype, root, comm, stream));
  struct fncclOp call = {.coll = FNCCL_SCATTER, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count,
                         .datatype = datatype, .root = root, .comm = comm, .stream = stream};
  return collective(&call);
}
FNCCL_TWIN(ncclScatter);

/* ---- the calls NCCL always carries, that a group must know of -------------------------------------------------- */

/* Inside a group, a call NCCL carries makes the whole group NCCL's (group.c). */
#define NCCL_ONLY(name, args)                      \
  do {                                             \
    PASS(name, args);                              \
    if (fncclInGroup()) (void)fncclGroupToNccl();  \
    ncclResult_t result_;                          \
    FNCCL_REAL(result_, name, args);               \
    fncclGroupNoteError(result_);                  \
    return result_;                                \
  } while (0)

FNCCL_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                ncclComm_t comm, cudaStream_t stream) {
  NCCL_ONLY(Send, (sendbuff, count, datatype, peer, comm, stream));
}
FNCCL_TWIN(ncclSend);

FNCCL_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                cudaStream_t stream) {
  NCCL_ONLY(Recv, (recvbuff, count, datatype, peer, comm, stream));
}
FNCCL_TWIN(ncclRecv);

FNCCL_API ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclComm_t comm, cudaStream_t stream) {
  NCCL_ONLY(AlltoAll, (sendbuff, recvbuff, count, datatype, comm, stream));
}
FNCCL_TWIN(ncclAlltoAll);
