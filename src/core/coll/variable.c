/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one path of the variable all-gather and reduce-scatter from their public calls to the stream (variable.h):
 * the checks fcclEnqueue makes, with a count per rank (on the host, or in device memory with the capacities of the
 * buffers); then on fccl's kernels the registered buffer the peers reach (or one registered for a captured graph),
 * the form from the largest block (fcclMoveSelect over the collective's set), the print and the launch; on the NCCL
 * and hierarchical paths NCCL's grouped broadcasts or reduces (nccl_path.c). Nothing is launched when a check fails.
 * docs/collectives.md#variable-all-gather-and-reduce-scatter.
 */
#include "variable.h"

#include "algo.h"
#include "check.h"
#include "comm.h"
#include "datatype.h"
#include "debug.h"
#include "device_state.h"
#include "device_variable.h"
#include "enqueue.h"
#include "fingerprint.h"
#include "nccl_path.h"
#include "transport.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_COLL

/* What the argument checks work out. */
struct variableSizes {
  uint64_t elemBytes;
  uint64_t sendBytes;  /* what the call may read of this rank's sendbuf (device counts: its capacity) */
  uint64_t recvBytes;  /* what it may write of its recvbuf (likewise) */
  uint64_t blockBytes; /* the largest block (device counts: the capacity of each): what selects the form */
  uint64_t total;      /* host counts: the elements of all blocks */
};

/* The capacity each count must fit (the buffer of one block) and the one their sum must fit. */
static size_t perRankCapacity(const struct fcclVariableCall* call) {
  return call->reduces ? call->recvCapacity : call->sendCapacity;
}
static size_t totalCapacity(const struct fcclVariableCall* call) {
  return call->reduces ? call->sendCapacity : call->recvCapacity;
}

/* Host counts: their sum into *total, fcclInvalidArgument when a count or the sum overflows a size in bytes. */
static fcclResult_t sumCounts(const char* caller, const size_t* counts, int nranks, uint64_t elemBytes,
                              uint64_t* total) {
  uint64_t sum = 0;
  for (int r = 0; r < nranks; r++) {
    if (counts[r] > SIZE_MAX / elemBytes - sum)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: counts[%d] = %zu: the counts overflow a size",
                        caller, r, counts[r]);
    sum += counts[r];
  }
  *total = sum;
  return fcclSuccess;
}

/* Every argument, before anything touches the device. */
static fcclResult_t checkArguments(const struct fcclComm* comm, const struct fcclVariableCall* call,
                                   struct variableSizes* z) {
  const char* caller = call->name;
  memset(z, 0, sizeof(*z));
  if ((int)call->datatype < 0 || call->datatype >= fcclNumTypes)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: unknown datatype %d", caller, (int)call->datatype);
  if (call->datatype == fcclFloat8e4m3)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: datatype float8e4m3 is not supported by collectives",
                      caller);
  if (call->reduces && (int)call->op < 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: unknown reduction op %d", caller, (int)call->op);
  /* Ops from fcclNumOps up are a communicator's pre-multiplied sums: valid elsewhere, not here (docs/errors.md). */
  if (call->reduces && call->op >= fcclNumOps)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: reduction op %d is not a built-in op (sum, prod, max, min, avg): pre-multiplied sums "
                      "(fcclRedOpCreatePreMulSum) are not supported by the variable reduce-scatter",
                      caller, (int)call->op);
  const uint64_t size = fcclTypeSize(call->datatype);
  const uint64_t n = (uint64_t)comm->nranks;
  z->elemBytes = size;
  if (call->deviceCounts == NULL) {
    if (call->counts == NULL)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: counts is NULL (it holds one count per rank)",
                        caller);
    FCCLCHECK(sumCounts(caller, call->counts, comm->nranks, size, &z->total));
    uint64_t largest = 0;
    for (int r = 0; r < comm->nranks; r++) largest = call->counts[r] > largest ? call->counts[r] : largest;
    const uint64_t mine = call->counts[comm->rank] * size, all = z->total * size;
    z->sendBytes = call->reduces ? all : mine;
    z->recvBytes = call->reduces ? mine : all;
    z->blockBytes = largest * size;
  } else {
    if ((uintptr_t)call->deviceCounts % sizeof(int64_t) != 0)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: counts %p is not aligned to its int64 elements",
                        caller, (const void*)call->deviceCounts);
    /* Every block within its capacity, all of them within theirs: the kernel's sums never overflow. */
    if (perRankCapacity(call) > SIZE_MAX / size / n || totalCapacity(call) > SIZE_MAX / size)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                        "%s: sendcapacity %zu or recvcapacity %zu of %s overflows a size", caller, call->sendCapacity,
                        call->recvCapacity, fcclTypeName(call->datatype));
    z->sendBytes = call->sendCapacity * size;
    z->recvBytes = call->recvCapacity * size;
    z->blockBytes = perRankCapacity(call) * size;
  }
  if ((z->sendBytes > 0 && call->sendbuf == NULL) || (z->recvBytes > 0 && call->recvbuf == NULL)) {
    const int send = z->sendBytes > 0 && call->sendbuf == NULL;
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s is NULL with %llu bytes to %s", caller,
                      send ? "sendbuf" : "recvbuf", (unsigned long long)(send ? z->sendBytes : z->recvBytes),
                      send ? "read" : "write");
  }
  if ((uintptr_t)call->sendbuf % size != 0 || (uintptr_t)call->recvbuf % size != 0) {
    const int send = (uintptr_t)call->sendbuf % size != 0;
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s %p is not aligned to its %s elements (%zu bytes)",
                      caller, send ? "sendbuf" : "recvbuf", send ? call->sendbuf : (const void*)call->recvbuf,
                      fcclTypeName(call->datatype), (size_t)size);
  }
  /* In place needs the offset of this rank's block, which device counts move from call to call (a replayed graph
   * keeps the pointers it captured): with them the two buffers must not overlap. */
  if (call->deviceCounts != NULL && z->sendBytes > 0 && z->recvBytes > 0) {
    const uintptr_t send = (uintptr_t)call->sendbuf, recv = (uintptr_t)call->recvbuf;
    if (send < recv + z->recvBytes && recv < send + z->sendBytes)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                        "%s: sendbuf %p (%llu bytes) overlaps recvbuf %p (%llu bytes): in place is for host counts "
                        "only, device counts move each rank's block",
                        caller, call->sendbuf, (unsigned long long)z->sendBytes, (const void*)call->recvbuf,
                        (unsigned long long)z->recvBytes);
  }
  const fcclAlgoSet* set = call->reduces ? &fcclReduceScatterVAlgos : &fcclAllGatherVAlgos;
  if (call->algo != -1 && fcclAlgoSetForm(set, call->algo) < 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: unknown algorithm %d", caller, call->algo);
  return fcclSuccess;
}

/* The buffers the call touches are device memory of the communicator's device (an empty one is not looked at). */
static fcclResult_t checkBuffers(struct fcclComm* comm, const struct fcclVariableCall* call,
                                 const struct variableSizes* z) {
  if (z->sendBytes > 0) FCCLCHECK(fcclEnqueueCheckBuffer(comm, call->sendbuf, "sendbuf", call->name));
  if (z->recvBytes > 0 && call->recvbuf != call->sendbuf)
    FCCLCHECK(fcclEnqueueCheckBuffer(comm, call->recvbuf, "recvbuf", call->name));
  if (call->deviceCounts) FCCLCHECK(fcclEnqueueCheckBuffer(comm, call->deviceCounts, "counts", call->name));
  return fcclSuccess;
}

/*
 * NCCL takes its counts on the host: counts in device memory are read back first (the host waits for the stream to
 * reach the call), which a captured graph could not repeat at its replays, and which must not wait for NCCL calls a
 * group still holds.
 */
static fcclResult_t readCounts(struct fcclComm* comm, const struct fcclVariableCall* call, int capturing,
                               size_t* counts) {
  const char* caller = call->name;
  if (capturing)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "%s: counts in device memory cannot be captured in a CUDA graph on the %s path, where NCCL takes "
                      "the counts when the call is made (pass host counts, or capture on the fccl path)",
                      caller, fcclGetPathName(comm->path));
  if (fcclNcclGroupActive())
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "%s: counts in device memory are read before NCCL's calls on the %s path, which cannot wait for "
                      "the calls a group holds: make the call outside fcclGroupStart/fcclGroupEnd",
                      caller, fcclGetPathName(comm->path));
  const int n = comm->nranks;
  int64_t* raw = malloc((size_t)n * sizeof(*raw));
  if (!raw) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_COLL, "%s: out of host memory", caller);
  fcclResult_t res = fcclSuccess;
  cudaStream_t stream = (cudaStream_t)call->stream;
  CUDACHECKGOTO(cudaMemcpyAsync(raw, call->deviceCounts, (size_t)n * sizeof(*raw), cudaMemcpyDeviceToHost, stream), res,
                out);
  CUDACHECKGOTO(cudaStreamSynchronize(stream), res, out);
  uint64_t total = 0;
  for (int r = 0; r < n && res == fcclSuccess; r++) {
    if (raw[r] < 0 || (uint64_t)raw[r] > perRankCapacity(call))
      res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                       "%s: counts[%d] = %lld in device memory is negative or "
                       "above the capacity of a block (%zu elements)",
                       caller, r, (long long)raw[r], perRankCapacity(call));
    else
      total += (uint64_t)raw[r], counts[r] = (size_t)raw[r];
  }
  if (res == fcclSuccess && total > totalCapacity(call))
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                     "%s: the counts in device memory add up to %llu elements, "
                     "above the capacity of the buffer of all blocks (%zu)",
                     caller, (unsigned long long)total, totalCapacity(call));
out:
  free(raw);
  return res;
}

/* The NCCL and hierarchical paths: the world NCCL communicator's grouped calls. */
static fcclResult_t enqueueNccl(struct fcclComm* comm, const struct fcclVariableCall* call,
                                const struct variableSizes* z, int capturing) {
  FCCLCHECK(checkBuffers(comm, call, z));
  const size_t* counts = call->counts;
  size_t* read = NULL;
  fcclResult_t res = fcclSuccess;
  if (call->deviceCounts) {
    read = calloc((size_t)comm->nranks, sizeof(*read));
    if (!read) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_COLL, "%s: out of host memory", call->name);
    FCCLCHECKGOTO(readCounts(comm, call, capturing, read), res, out);
    counts = read;
  }
  uint64_t total = 0;
  for (int r = 0; r < comm->nranks; r++) total += counts[r];
  if (total > 0)
    res = fcclNcclLaunchVariable(comm, comm->nccl, call->name, call->reduces, call->sendbuf, call->recvbuf, counts,
                                 call->datatype, call->op, (cudaStream_t)call->stream);
out:
  free(read);
  return res;
}

/*
 * The peers' copies of the buffer they reach in the direct forms (the all-gather's recvbuf, the reduce-scatter's
 * sendbuf) when it lies in registered memory, registered by the application or, for a call being captured where the
 * registered form runs, for the graph. *registered says which; the same on every rank when the buffers are registered
 * alike (the other buffer, which only this rank touches, plays no part).
 */
static fcclResult_t findPeerBuffer(struct fcclComm* comm, const struct fcclVariableCall* call,
                                   const struct variableSizes* z, int capturing, const fcclAlgoQuery* registeredQuery,
                                   fcclDevVArgs* args, int* registered) {
  const struct fcclDeviceState* s = comm->device;
  const fcclAlgoSet* set = call->reduces ? &fcclReduceScatterVAlgos : &fcclAllGatherVAlgos;
  void* buf = call->reduces ? (void*)(uintptr_t)call->sendbuf : call->recvbuf;
  const uint64_t bytes = call->reduces ? z->sendBytes : z->recvBytes;
  uint64_t* peerCopies = call->reduces ? args->peerSend : args->peerRecv;
  void* peers[FCCL_DEVICE_MAX_RANKS];
  *registered = 0;
  if (bytes == 0) return fcclSuccess;
  *registered = fcclTransportLookup(comm->transport, buf, bytes, peers);
  if (!*registered && capturing && s->graphRegister && call->algo < 0 && fcclMoveRegisteredPays(registeredQuery, set)) {
    /* Captured plain buffers: registered for the graph's lifetime, every replay reaches them in place. */
    void* peerSend[FCCL_DEVICE_MAX_RANKS];
    void* peerRecv[FCCL_DEVICE_MAX_RANKS];
    FCCLCHECK(fcclTransportGraphRegister(comm->transport, call->stream, call->reduces ? buf : NULL,
                                         call->reduces ? bytes : 0, call->reduces ? NULL : buf,
                                         call->reduces ? 0 : bytes, 0, peerSend, peerRecv, registered));
    memcpy(peers, call->reduces ? peerSend : peerRecv, sizeof(peers));
  }
  for (int r = 0; *registered && r < comm->nranks; r++) peerCopies[r] = (uint64_t)(uintptr_t)peers[r];
  return fcclSuccess;
}

/* fccl's kernels, after the device is current and the stream checked. */
static fcclResult_t enqueueKernels(struct fcclComm* comm, const struct fcclVariableCall* call,
                                   const struct variableSizes* z, int capturing) {
  const struct fcclDeviceState* s = comm->device;
  cudaStream_t stream = (cudaStream_t)call->stream;
  const fcclAlgoSet* set = call->reduces ? &fcclReduceScatterVAlgos : &fcclAllGatherVAlgos;
  FCCLCHECK(checkBuffers(comm, call, z));
  /* Host counts that are all 0: nothing to move, no epoch used (every rank has the same counts). Device counts
   * always launch: only the kernel knows them. */
  if (!call->deviceCounts && z->total == 0) return fcclSuccess;
  const int request = call->algo >= 0
                          ? call->algo
                          : fcclMoveResolveRequest(call->reduces ? s->reduceScatterRequest : s->allGatherRequest, set);
  /* One rank: its block copied, unless a form is forced (tests); counts in device memory run the kernel. */
  if (!call->deviceCounts && fcclAlgoIsCopy(comm->nranks, request)) {
    if (call->sendbuf != call->recvbuf && call->counts[0] > 0)
      CUDACHECK(cudaMemcpyAsync(call->recvbuf, call->sendbuf, call->counts[0] * z->elemBytes, cudaMemcpyDeviceToDevice,
                                stream));
    return fcclSuccess;
  }
  fcclDevVArgs args;
  memset(&args, 0, sizeof(args));
  args.sendbuf = (uint64_t)(uintptr_t)call->sendbuf;
  args.recvbuf = (uint64_t)(uintptr_t)call->recvbuf;
  if (call->deviceCounts) {
    args.deviceCounts = (uint64_t)(uintptr_t)call->deviceCounts;
    args.sendCapacity = call->sendCapacity;
    args.recvCapacity = call->recvCapacity;
    args.fold = fcclVariableFold(fcclVariableFold(FCCL_VARIABLE_DEVICE_SEED, call->sendCapacity), call->recvCapacity);
  } else {
    args.fold = FCCL_VARIABLE_HOST_SEED;
    for (int r = 0; r < comm->nranks; r++) {
      args.counts[r] = call->counts[r];
      args.fold = fcclVariableFold(args.fold, call->counts[r]);
    }
  }
  /* The form follows the largest block (device counts: the capacity of one; at least an element, so that a call
   * whose capacities are 0 still runs and reports counts that do not fit). */
  const uint64_t blockBytes = z->blockBytes > 0 ? z->blockBytes : z->elemBytes;
  fcclAlgoQuery query = fcclAlgoQueryMake(blockBytes, comm->nranks, 1, 0, s->smCount, &s->dev.layout, s->ll128Auto,
                                          s->copyScatterMin);
  /* The communicator's SM budget bounds the grid, as every collective's (docs/collectives.md#sm-budget). */
  query.minCtas = s->minCtas;
  query.maxCtas = s->maxCtas;
  query.forced = request;
  int registered = 0;
  FCCLCHECK(findPeerBuffer(comm, call, z, capturing, &query, &args, &registered));
  query.registered = registered;
  query.strict = call->algo >= 0;
  fcclAlgoChoice choice;
  FCCLCHECK(fcclMoveSelect(&query, set, &choice));
  args.roundUnits = choice.roundUnits;
  /* Every flag of the kernel carries it (docs/errors.md#out-of-step): the form, type, op and the fold of every
   * rank's count, the same on every rank; with device counts the kernel folds in the counts it reads. */
  args.print = fcclCallPrint(fcclPrintForm(choice.algo, 0), call->datatype, call->reduces ? (int)call->op : 0,
                             args.fold);
  FCCL_TRACE(FCCL_SUBSYS_COLL, "%s %s counts, largest block %llu bytes, %s op %d %s: %s, %d x %d, stream %p",
             call->name, call->deviceCounts ? "device" : "host", (unsigned long long)blockBytes,
             fcclTypeName(call->datatype), (int)call->op, registered ? "registered" : "staged",
             fcclAlgoName(choice.algo), choice.blocks, choice.threads, call->stream);
  return fcclDeviceLaunchVariable((fcclDevKernel_t)choice.algo, call->datatype, call->op, &s->dev, &args, choice.blocks,
                                  choice.threads, s->pdl, stream);
}

fcclResult_t fcclEnqueueVariable(struct fcclComm* comm, const struct fcclVariableCall* call) {
  if (!fcclCommIsValid(comm))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: invalid communicator handle %p", call->name,
                      (void*)comm);
  fcclResult_t res = fcclCommCheckOwner(comm, call->name);
  if (res != fcclSuccess) return res;
  /* NCCL carries every call of a communicator on the NCCL path and, on the hierarchical path, these calls, which
   * have no hierarchical form: the world NCCL communicator's grouped broadcasts or reduces. */
  const int viaNccl = comm->path != fcclPathFccl;
  struct variableSizes z;
  res = checkArguments(comm, call, &z);
  if (res == fcclSuccess) res = fcclEnqueueCheckReady(comm, call->name, viaNccl);
  struct fcclCallDevice cd = {-1};
  if (res == fcclSuccess) res = fcclEnqueueEnterDevice(comm, &cd);
  if (res == fcclSuccess) {
    int capturing = 0;
    res = fcclEnqueueCheckStream(comm, call->stream, call->name, &capturing);
    /* Graphs destroyed since the last call: release the buffers they registered (their destructor cannot). */
    if (res == fcclSuccess) res = fcclTransportReleaseGraphRegistrations(comm->transport, 0);
    if (res == fcclSuccess)
      res = viaNccl ? enqueueNccl(comm, call, &z, capturing) : enqueueKernels(comm, call, &z, capturing);
    fcclEnqueueLeaveDevice(comm, &cd);
  }
  if (res != fcclSuccess) fcclCommRecordThreadError(comm);
  return res;
}
