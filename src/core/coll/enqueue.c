/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one path from a collective's public call to the stream: the checks every call shares (a live communicator
 * whose init finished and no kernel failed, datatype and op, buffers of the comm's device and aligned, the stream
 * of its device), registered buffers looked up (or registered for a captured graph), the algorithm chosen by the
 * collective's table and its work enqueued. Nothing is launched when a check fails; nothing here waits for the
 * GPU or for peers (except the host exchange of a graph registration at capture, bounded by the timeout).
 */
#include "enqueue.h"

#include "check.h"
#include "comm.h"
#include "cudawrap.h"
#include "datatype.h"
#include "debug.h"
#include "device.h"
#include "device_state.h"
#include "fingerprint.h"
#include "redop.h"
#include "transport.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_COLL

fcclResult_t fcclEnqueueEnterDevice(struct fcclComm* comm, struct fcclCallDevice* cd) {
  CUDACHECK(cudaGetDevice(&cd->saved));
  if (cd->saved != comm->cudaDev) CUDACHECK(cudaSetDevice(comm->cudaDev));
  return fcclSuccess;
}

void fcclEnqueueLeaveDevice(struct fcclComm* comm, const struct fcclCallDevice* cd) {
  if (cd->saved >= 0 && cd->saved != comm->cudaDev) CUDACHECKIGNORE(cudaSetDevice(cd->saved));
}

fcclResult_t fcclEnqueueCheckStream(struct fcclComm* comm, void* stream, const char* caller, int* capturing) {
  /* While a stream is captured (global mode) most queries, cudaStreamGetDevice included, are refused and would
   * invalidate the capture; cudaStreamIsCapturing is the one made for it. A captured stream of another device is
   * then refused by the launch itself (no node is added). */
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing((cudaStream_t)stream, &capture);
  *capturing = err == cudaSuccess && capture == cudaStreamCaptureStatusActive;
  if (*capturing) return fcclSuccess;
  int dev = -1;
  if (err == cudaSuccess) err = cudaStreamGetDevice((cudaStream_t)stream, &dev);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: stream %p is not a valid CUDA stream here (%s)",
                      caller, stream, cudaGetErrorName(err));
  }
  if (dev != comm->cudaDev)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: stream %p belongs to device %d, the communicator (rank %d) to device %d", caller, stream,
                      dev, comm->rank, comm->cudaDev);
  return fcclSuccess;
}

fcclResult_t fcclEnqueueCheckBuffer(struct fcclComm* comm, const void* buf, const char* name, const char* caller) {
  /* One driver query for what the check needs: about half the host time of cudaPointerGetAttributes, paid on every
   * call (fccl-call-cost). Memory the driver does not know reads as type 0 rather than failing. */
  CUpointer_attribute attributes[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                       CU_POINTER_ATTRIBUTE_IS_MANAGED};
  unsigned int memoryType = 0, managed = 0;
  int ordinal = -1;
  void* values[3] = {&memoryType, &ordinal, &managed};
  CUresult err = pfn_cuPointerGetAttributes(3, attributes, values, (CUdeviceptr)(uintptr_t)buf);
  if (err != CUDA_SUCCESS) {
    const char* errorName = "unknown";
    (void)pfn_cuGetErrorName(err, &errorName);
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %p is not a CUDA pointer (%s)", caller, name,
                      buf, errorName);
  }
  if (managed) return fcclSuccess;
  if (memoryType != CU_MEMORYTYPE_DEVICE)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %p is %s memory, not device memory", caller, name,
                      buf, memoryType == CU_MEMORYTYPE_HOST ? "host" : "unregistered host");
  if (ordinal != comm->cudaDev)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: %s %p is memory of device %d, the communicator (rank %d) uses device %d", caller, name, buf,
                      ordinal, comm->rank, comm->cudaDev);
  return fcclSuccess;
}

/* A live communicator whose init finished and whose engine has not failed: device state and kernels that have not
 * failed when fccl's kernels carry the call (viaNccl 0), an NCCL communicator without an asynchronous error when
 * NCCL does. */
fcclResult_t fcclEnqueueCheckReady(struct fcclComm* comm, const char* caller, int viaNccl) {
  fcclResult_t state = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  if (state == fcclInProgress)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "%s: the communicator's non-blocking init has not finished (poll fcclCommGetAsyncError)",
                      caller);
  if (__atomic_load_n(&comm->finalized, __ATOMIC_ACQUIRE))
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "%s: the communicator was finalized (fcclCommFinalize): only destroy or abort it now", caller);
  if (viaNccl && comm->nccl == NULL)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL, "%s: the communicator has no NCCL communicator (%s)", caller,
                      comm->ncclMissing[0] ? comm->ncclMissing : "its init failed");
  if (!viaNccl && comm->device == NULL)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL, "%s: the communicator has no device state (its init failed)",
                      caller);
  /* describes a kernel's or NCCL's failure the first time it is seen */
  fcclResult_t engine = viaNccl ? fcclNcclAsyncError(comm) : fcclDeviceAsyncError(comm);
  if (state == fcclSuccess) state = engine;
  if (state != fcclSuccess) {
    char failure[FCCL_LAST_ERROR_MAX];
    fcclCommFailure(comm, failure, sizeof(failure));
    return FCCL_ERROR(state, FCCL_SUBSYS_COLL, "%s: the communicator failed earlier (%s); destroy or abort it",
                      caller, failure[0] ? failure : fcclGetErrorString(state));
  }
  return fcclSuccess;
}

/* The call's arguments, before anything touches the device. *sendBytes and *recvBytes: the two buffers' sizes. */
static fcclResult_t checkArguments(const struct fcclComm* comm, const struct fcclCall* call, uint64_t* sendBytes,
                                   uint64_t* recvBytes) {
  const struct fcclCollective* coll = call->coll;
  const char* caller = coll->name;
  *sendBytes = *recvBytes = 0;
  if (!coll->moves) return fcclSuccess;
  if ((int)call->datatype < 0 || call->datatype >= fcclNumTypes)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: unknown datatype %d", caller, (int)call->datatype);
  /* FP8 is an output type of the fused norm only: no collective kernel is built for it. */
  if (call->datatype == fcclFloat8e4m3)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: datatype float8e4m3 is not supported by collectives",
                      caller);
  /* Ops from fcclNumOps up are the communicator's own (fcclRedOpCreatePreMulSum): fcclEnqueue resolves them. */
  if (coll->reduces && (int)call->op < 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: unknown reduction op %d", caller, (int)call->op);
  if ((coll->rooted || coll->rootedRecv || coll->peered) && (call->root < 0 || call->root >= comm->nranks))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %d outside 0..%d", caller,
                      coll->peered ? "peer" : "root", call->root, comm->nranks - 1);
  /* recvbuf named first: off a rooted collective's root, sendbuf stands for it (a receive's one buffer too). */
  if (call->count > 0 && (call->sendbuf == NULL || call->recvbuf == NULL))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s is NULL with count %zu", caller,
                      call->sendbuf != NULL || (coll->rooted && comm->rank != call->root) ||
                              coll->oneBuffer == FCCL_ONE_RECV
                          ? "recvbuf"
                          : "sendbuf",
                      call->count);
  const uint64_t size = fcclTypeSize(call->datatype);
  /* Both buffers' bytes must fit a size: count times the larger of their elements per counted element. */
  const uint64_t perSend = coll->sendPerRank ? (uint64_t)comm->nranks : 1;
  const uint64_t perRecv = coll->recvPerRank ? (uint64_t)comm->nranks : 1;
  if (call->count > SIZE_MAX / size / (perSend > perRecv ? perSend : perRecv))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: count %zu of %s overflows a size", caller,
                      call->count, fcclTypeName(call->datatype));
  *sendBytes = call->count * perSend * size;
  *recvBytes = call->count * perRecv * size;
  if (coll->disjoint && call->count > 0) {
    const uintptr_t send = (uintptr_t)call->sendbuf, recv = (uintptr_t)call->recvbuf;
    if (send < recv + *recvBytes && recv < send + *sendBytes)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: sendbuf %p and recvbuf %p overlap (%llu and %llu "
                        "bytes): give it separate buffers", caller, call->sendbuf, (void*)call->recvbuf,
                        (unsigned long long)*sendBytes, (unsigned long long)*recvBytes);
  }
  if ((uintptr_t)call->sendbuf % size != 0 || (uintptr_t)call->recvbuf % size != 0) {
    const int send = (uintptr_t)call->sendbuf % size != 0;
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %p is not aligned to its %s elements (%zu bytes)",
                      caller, send ? "sendbuf" : "recvbuf", send ? call->sendbuf : (const void*)call->recvbuf,
                      fcclTypeName(call->datatype), (size_t)size);
  }
  if (call->algo != -1 && fcclAlgoSetForm(coll->algos, call->algo) < 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: unknown algorithm %d", caller, call->algo);
  return fcclSuccess;
}

/* Peers' copies of the buffers the collective's peers reach (coll->peerBuffers) when each lies in registered
 * memory: registered by the application, or (a call being captured, where registered buffers pay) for the graph
 * being captured. A buffer only this rank touches plays no part, so that the answer is the same on every rank
 * whenever the buffers the peers reach are registered alike. */
static fcclResult_t findPeerBuffers(struct fcclComm* comm, const struct fcclCall* call, uint64_t sendBytes,
                                    uint64_t recvBytes, int capturing, const fcclAlgoQuery* registeredQuery,
                                    fcclDevArgs* args, int* registered) {
  const struct fcclDeviceState* s = comm->device;
  const int wantSend = (call->coll->peerBuffers & FCCL_PEERS_SEND) != 0;
  const int wantRecv = (call->coll->peerBuffers & FCCL_PEERS_RECV) != 0;
  void* peers[FCCL_DEVICE_MAX_RANKS];
  /* A buffer of one block that the peers reach (the gather's input, the scatter's output) is, in place, block `rank`
   * of this rank's whole buffer, and a peer's block is block `peer` of its own: found through the whole buffer, as
   * nccl-tests and NCCL's in-place definition lay them out on every rank. Found by its own address, a peer's block
   * would be taken at this rank's block's offset. Only the root reaches its peers' blocks: elsewhere the block
   * stands for the other buffer (fcclEnqueue), which looks in place on rank 0, and the whole buffer is not there. */
  const uint64_t block = (uint64_t)call->count * fcclTypeSize(call->datatype);
  const int root = (call->coll->rooted || call->coll->rootedRecv) && call->root == comm->rank;
  const int sendInWhole = root && wantSend && args->inPlace && call->coll->recvPerRank && !call->coll->sendPerRank;
  const int recvInWhole = root && wantRecv && args->inPlace && call->coll->sendPerRank && !call->coll->recvPerRank;
  *registered = 1;
  if (wantSend) {
    *registered = sendInWhole ? fcclTransportLookup(comm->transport, call->recvbuf, recvBytes, peers)
                              : fcclTransportLookup(comm->transport, call->sendbuf, sendBytes, peers);
    for (int r = 0; *registered && r < comm->nranks; r++)
      args->peerSend[r] = (uint64_t)(uintptr_t)peers[r] + (sendInWhole ? (uint64_t)r * block : 0);
  }
  if (wantRecv && *registered) {
    if (recvInWhole)
      *registered = fcclTransportLookup(comm->transport, call->sendbuf, sendBytes, peers);
    else if (!wantSend || call->recvbuf != call->sendbuf) /* in place: the lookup above found it */
      *registered = fcclTransportLookup(comm->transport, call->recvbuf, recvBytes, peers);
    for (int r = 0; *registered && r < comm->nranks; r++)
      args->peerRecv[r] = (uint64_t)(uintptr_t)peers[r] + (recvInWhole ? (uint64_t)r * block : 0);
  }
  if (*registered) return fcclSuccess;
  if (!capturing || !s->graphRegister || call->algo >= 0 || !call->coll->registeredPays ||
      !call->coll->registeredPays(call->coll, registeredQuery))
    return fcclSuccess;
  /* Captured plain buffers: registered for the graph's lifetime, every replay reads them in place. */
  void* peerSend[FCCL_DEVICE_MAX_RANKS];
  void* peerRecv[FCCL_DEVICE_MAX_RANKS];
  FCCLCHECK(fcclTransportGraphRegister(comm->transport, call->stream,
                                       wantSend ? (void*)(uintptr_t)call->sendbuf : NULL, sendBytes,
                                       wantRecv ? call->recvbuf : NULL, recvBytes,
                                       wantSend && wantRecv && call->sendbuf == call->recvbuf, peerSend, peerRecv,
                                       registered));
  for (int r = 0; *registered && r < comm->nranks; r++) {
    args->peerSend[r] = (uint64_t)(uintptr_t)peerSend[r];
    args->peerRecv[r] = (uint64_t)(uintptr_t)peerRecv[r];
  }
  return fcclSuccess;
}

/* Whether the call is in place on this rank (struct fcclCollective's sendPerRank and recvPerRank). */
static int callInPlace(const struct fcclCall* call, int rank) {
  const size_t block = (size_t)rank * call->count * fcclTypeSize(call->datatype);
  if (call->coll->recvPerRank) return (const char*)call->sendbuf == (const char*)call->recvbuf + block;
  if (call->coll->sendPerRank) return (const char*)call->recvbuf == (const char*)call->sendbuf + block;
  return call->sendbuf == call->recvbuf;
}

/* Everything after the device is current and the stream checked. */
/* The kernel an FCCL_*_ALGO variable forces, or -1 (also for a collective without one). */
static int forcedAlgo(const struct fcclCollective* coll, const struct fcclDeviceState* s, int registered) {
  return coll->request ? coll->request(s, registered) : -1;
}

static fcclResult_t enqueueData(struct fcclComm* comm, const struct fcclCall* call, uint64_t sendBytes,
                                uint64_t recvBytes, int capturing) {
  const struct fcclCollective* coll = call->coll;
  const struct fcclDeviceState* s = comm->device;
  cudaStream_t stream = (cudaStream_t)call->stream;
  FCCLCHECK(fcclEnqueueCheckBuffer(comm, call->sendbuf, "sendbuf", coll->name));
  if (call->recvbuf != call->sendbuf) FCCLCHECK(fcclEnqueueCheckBuffer(comm, call->recvbuf, "recvbuf", coll->name));

  const uint64_t bytes = (uint64_t)call->count * fcclTypeSize(call->datatype);
  /* One rank: a copy, unless an algorithm is forced (FCCL_ALGO, tests), which still runs its kernel, or the op
   * multiplies (a pre-multiplied sum of one rank is not its input). Whether a request is forced does not depend on
   * registration. */
  const int request = call->algo >= 0 ? call->algo : forcedAlgo(coll, s, 0);
  if (fcclAlgoIsCopy(comm->nranks, request) && !(coll->reduces && call->op == FCCL_DEVICE_OP_PREMULSUM)) {
    if (call->recvbuf != call->sendbuf)
      CUDACHECK(cudaMemcpyAsync(call->recvbuf, call->sendbuf, sendBytes, cudaMemcpyDeviceToDevice, stream));
    return fcclSuccess;
  }
  struct fcclPlan plan;
  memset(&plan, 0, sizeof(plan));
  fcclDevArgs* args = &plan.args;
  args->sendbuf = (uint64_t)(uintptr_t)call->sendbuf;
  args->recvbuf = (uint64_t)(uintptr_t)call->recvbuf;
  args->count = call->count;
  args->bytes = bytes;
  args->inPlace = callInPlace(call, comm->rank);
  args->root = call->root;
  args->scalar = call->scalar;
  args->scalarPtr = call->scalarPtr;

  fcclAlgoQuery query = fcclAlgoQueryMake(bytes, comm->nranks, 1, args->inPlace, s->smCount, &s->dev.layout,
                                          s->ll128Auto, s->copyScatterMin);
  query.copyMoveMin = s->copyMoveMin;
  query.minCtas = s->minCtas;
  query.maxCtas = s->maxCtas;
  query.forced = forcedAlgo(coll, s, 1);
  FCCLCHECK(findPeerBuffers(comm, call, sendBytes, recvBytes, capturing, &query, args, &plan.registered));

  query.registered = plan.registered;
  query.forced = call->algo >= 0 ? call->algo : forcedAlgo(coll, s, plan.registered);
  query.strict = call->algo >= 0;
  FCCLCHECK(coll->select(coll, &query, &plan.choice));
  args->roundUnits = plan.choice.roundUnits;
  args->scatter = plan.choice.scatter;
  /* Every flag of the kernel carries it: a peer in another call (or in this one with other arguments, or another
   * algorithm) stops with fcclInvalidUsage instead of a hang or a wrong result (docs/errors.md#out-of-step). */
  const int rooted = coll->rooted || coll->rootedRecv;
  /* A reduction with a root (the reduce) has the op in its print's arg and the root with the count in its hash. */
  const uint64_t printCount = coll->reduces && rooted ? call->count ^ ((uint64_t)call->root << 58) : call->count;
  args->print = fcclCallPrint(fcclPrintForm(plan.choice.algo, plan.choice.scatter), call->datatype,
                              coll->reduces ? (int)call->op
                              : rooted      ? call->root
                                            : 0,
                              printCount);
  FCCL_TRACE(FCCL_SUBSYS_COLL, "%s %zu x %s op %d %s: %s, %d x %d, stream %p", coll->name, call->count,
             fcclTypeName(call->datatype), (int)call->op, plan.registered ? "registered" : "staged",
             fcclAlgoName(plan.choice.algo), plan.choice.blocks, plan.choice.threads, call->stream);
  return coll->launch(comm, call, &plan, stream);
}

fcclResult_t fcclEnqueueMoveSelect(const struct fcclCollective* coll, const fcclAlgoQuery* query,
                                   fcclAlgoChoice* choice) {
  return fcclMoveSelect(query, coll->algos, choice);
}

int fcclEnqueueMoveRegisteredPays(const struct fcclCollective* coll, const fcclAlgoQuery* query) {
  return fcclMoveRegisteredPays(query, coll->algos);
}

fcclResult_t fcclEnqueueKernel(struct fcclComm* comm, const struct fcclCall* call, const struct fcclPlan* plan,
                               cudaStream_t stream) {
  return fcclDeviceLaunch(plan->choice.algo, call->datatype, call->op, &comm->device->dev, &plan->args,
                          plan->choice.blocks, plan->choice.threads, comm->device->pdl, stream);
}

fcclResult_t fcclEnqueue(struct fcclComm* comm, const struct fcclCall* userCall) {
  const struct fcclCollective* coll = userCall->coll;
  if (!fcclCommIsValid(comm))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: invalid communicator handle %p", coll->name,
                      (void*)comm);
  fcclResult_t owner = fcclCommCheckOwner(comm, coll->name);
  if (owner != fcclSuccess) return owner;
  /* A rooted collective reads sendbuf on the root only: elsewhere it stands for recvbuf. A send's or receive's
   * one buffer stands for both. */
  struct fcclCall rooted = *userCall;
  if (coll->rooted && comm->rank != rooted.root) rooted.sendbuf = rooted.recvbuf;
  if (coll->rootedRecv && comm->rank != rooted.root) rooted.recvbuf = (void*)(uintptr_t)rooted.sendbuf;
  if (coll->oneBuffer == FCCL_ONE_SEND) rooted.recvbuf = (void*)(uintptr_t)rooted.sendbuf;
  if (coll->oneBuffer == FCCL_ONE_RECV) rooted.sendbuf = rooted.recvbuf;
  rooted.scalar = rooted.scalarPtr = 0;
  const struct fcclCall* call = &rooted;
  /* NCCL carries the calls fccl has no kernels for, every call of a communicator on the NCCL path, and on the
   * hierarchical path every call without a hierarchical form and every pre-multiplied sum; one with such a form also
   * needs the NCCL communicator (its remainder runs there). */
  const int premul = coll->reduces && (int)userCall->op >= fcclNumOps;
  const int hier = comm->path == fcclPathHier && !coll->ncclOnly && coll->hierLaunch != NULL && !premul;
  const int viaNccl = coll->ncclOnly || comm->path != fcclPathFccl;
  uint64_t sendBytes = 0, recvBytes = 0;
  fcclResult_t res = checkArguments(comm, call, &sendBytes, &recvBytes);
  if (res == fcclSuccess && premul) {
    /* The communicator's own op: NCCL's op made with it, or fccl's kernels' with its scalar. */
    struct fcclRedOpUse use;
    res = fcclRedOpResolve(comm, userCall->op, userCall->datatype, coll->name, &use);
    if (res == fcclSuccess && viaNccl && use.ncclOp < 0)
      res = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_COLL, "%s: op %d has no NCCL op on this %s-path communicator",
                       coll->name, (int)userCall->op, fcclGetPathName(comm->path));
    if (res == fcclSuccess) {
      rooted.op = viaNccl ? (fcclRedOp_t)use.ncclOp : use.kernelOp;
      rooted.scalar = viaNccl ? 0 : use.scalar;
      rooted.scalarPtr = viaNccl ? 0 : use.scalarPtr;
    }
  }
  if (res == fcclSuccess) res = fcclEnqueueCheckReady(comm, coll->name, viaNccl);
  struct fcclCallDevice cd = {-1};
  if (res == fcclSuccess) res = fcclEnqueueEnterDevice(comm, &cd);
  if (res == fcclSuccess) {
    int capturing = 0;
    res = fcclEnqueueCheckStream(comm, call->stream, coll->name, &capturing);
    /* Graphs destroyed since the last call: release the buffers they registered (their destructor cannot). */
    if (res == fcclSuccess) res = fcclTransportReleaseGraphRegistrations(comm->transport, 0);
    if (res == fcclSuccess && viaNccl) {
      if (coll->moves && call->count > 0) {
        res = fcclEnqueueCheckBuffer(comm, call->sendbuf, "sendbuf", coll->name);
        if (res == fcclSuccess && call->recvbuf != call->sendbuf)
          res = fcclEnqueueCheckBuffer(comm, call->recvbuf, "recvbuf", coll->name);
      }
      if (res == fcclSuccess && (!coll->moves || call->count > 0))
        res = hier ? coll->hierLaunch(comm, call, (cudaStream_t)call->stream)
                   : fcclNcclLaunch(comm, call, (cudaStream_t)call->stream);
    } else if (res == fcclSuccess) {
      if (!coll->moves) {
        /* No data: one rank has nobody to wait for. */
        if (comm->nranks > 1) res = coll->launch(comm, call, NULL, (cudaStream_t)call->stream);
      } else if (call->count > 0) { /* every rank has count 0: nothing to move, no epoch used */
        res = enqueueData(comm, call, sendBytes, recvBytes, capturing);
      }
    }
    fcclEnqueueLeaveDevice(comm, &cd);
  }
  if (res != fcclSuccess) fcclCommRecordThreadError(comm);
  return res;
}
