/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hierarchical path (hier.h): a host communicator of the host's ranks on fccl's kernels, a rail of the ranks of
 * this local rank across the hosts on NCCL, and the all-reduce over both. Made at init through the communicator's
 * own bootstrap: the host communicator's unique id (a root on the loopback interface of the host's first rank) and
 * the rail's NCCL unique id (made by host 0's rank of the rail) travel in its all-gathers. docs/paths.md.
 */
#include "hier.h"

#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "debug.h"
#include "device.h"
#include "enqueue.h"
#include "nccl_path.h"
#include "path.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

struct fcclHier {
  struct fcclHierLayout layout;
  int* hostOf;     /* every rank's host (its rank on its rail) */
  int* localOf;    /* every rank's local rank */
  int consecutive; /* every rank r is host(r) x localRanks + localRank(r) */
  const struct fcclHierHostOps* hostOps; /* how comm/ makes, destroys and reads the host communicator */
  struct fcclComm* host;     /* the host's ranks, fccl path; shares comm's abort flag */
  struct fcclNcclComm* rail; /* NCCL: the ranks of this local rank, one per host, ranked by host */
  void* scratch;             /* the reduce-scatter's partials between its two steps (device memory) */
  size_t scratchBytes;
  void** retired; /* scratch buffers outgrown: graphs captured with them may replay until the communicator ends */
  int nRetired;
};

/* The smallest scratch made; it grows in powers of two. */
#define FCCL_HIER_SCRATCH_MIN ((size_t)1 << 20)

/* What a host's first rank sends the others of its host: whether it made the id, and the id. */
struct hostIdRecord {
  int32_t result;
  int32_t reserved;
  fcclUniqueId id;
};

/* The host communicator: made by every rank, every rank told whether every rank has its own. */
static fcclResult_t createHost(struct fcclComm* comm, struct fcclHier* h) {
  const struct fcclHierLayout* l = &h->layout;
  struct hostIdRecord* ids = calloc((size_t)comm->nranks, sizeof(*ids));
  int32_t* results = calloc((size_t)comm->nranks, sizeof(*results));
  fcclResult_t res = fcclSuccess;
  if (!ids || !results) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of host memory for the host communicator");
    goto exit;
  }
  if (comm->rank == l->hostLeader)
    ids[comm->rank].result = (int32_t)fcclBootstrapGetLocalUniqueId(&ids[comm->rank].id, comm->timeoutMs);
  FCCLCHECKGOTO(fcclBootstrapAllGather(comm->bootstrap, ids, sizeof(*ids)), res, exit);
  fcclResult_t local = (fcclResult_t)ids[l->hostLeader].result;
  if (local != fcclSuccess && comm->rank != l->hostLeader)
    (void)FCCL_ERROR(local, FCCL_SUBSYS_INIT, "rank %d could not make its host communicator's unique id (%s)",
                     l->hostLeader, fcclGetErrorString(local));
  if (local == fcclSuccess) {
    local = h->hostOps->create(comm, &ids[l->hostLeader].id, l->localRanks, l->localRank, &h->host);
    /* A failed host communicator was torn down with the abort flag the two share set: this rank's exchanges stop
     * at once, so it leaves with its own cause, and the others learn of it when its bootstrap closes. */
    if (local != fcclSuccess) {
      res = local;
      goto exit;
    }
  }
  results[comm->rank] = (int32_t)local;
  FCCLCHECKGOTO(fcclBootstrapAllGather(comm->bootstrap, results, sizeof(*results)), res, exit);
  for (int r = 0; r < comm->nranks; r++) {
    if (results[r] == fcclSuccess || r == comm->rank) continue;
    res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_INIT, "rank %d could not make its host communicator (%s)", r,
                     fcclGetErrorString((fcclResult_t)results[r]));
    break;
  }
  if (local != fcclSuccess) res = local; /* the host's first rank could not make the id: said above */
exit:
  free(ids);
  free(results);
  return res;
}

fcclResult_t fcclHierCreate(struct fcclComm* comm, const struct fcclHierHostOps* hostOps) {
  struct fcclHier* h = calloc(1, sizeof(*h));
  if (!h) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of host memory for the hierarchical path");
  h->hostOps = hostOps;
  comm->hier = h; /* from here on commFree releases what was made */
  FCCLCHECK(fcclPathHierLayout(comm->peerInfo, comm->nranks, comm->rank, &h->layout));
  const struct fcclHierLayout* l = &h->layout;
  h->hostOf = calloc((size_t)comm->nranks, sizeof(*h->hostOf));
  h->localOf = calloc((size_t)comm->nranks, sizeof(*h->localOf));
  if (!h->hostOf || !h->localOf)
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of host memory for the hierarchical path");
  FCCLCHECK(fcclPathHierRanks(comm->peerInfo, comm->nranks, h->hostOf, h->localOf, &h->consecutive));
  FCCLCHECK(createHost(comm, h));
  FCCLCHECK(fcclNcclRailCreate(comm, l->hosts, l->host, l->railLeader, &h->rail));
  FCCL_INFO(FCCL_SUBSYS_INIT,
            "comm %p rank %d: hierarchical: host %d of %d, local rank %d of %d; host communicator %p, NCCL rail of %d "
            "ranks led by rank %d",
            (void*)comm, comm->rank, l->host, l->hosts, l->localRank, l->localRanks, (void*)h->host, l->hosts,
            l->railLeader);
  return fcclSuccess;
}

fcclResult_t fcclHierFree(struct fcclComm* comm) {
  struct fcclHier* h = comm->hier;
  if (!h) return fcclSuccess;
  comm->hier = NULL;
  /* NCCL first: an aborted rail stops its kernels, which fccl's on the same streams may be queued behind. */
  fcclNcclRailFree(comm, h->rail);
  fcclResult_t res = h->host ? h->hostOps->destroy(h->host) : fcclSuccess;
  if (h->scratch || h->nRetired > 0) {
    struct fcclCallDevice cd = {-1};
    fcclResult_t entered = fcclEnqueueEnterDevice(comm, &cd);
    if (entered != fcclSuccess && res == fcclSuccess) res = entered;
    if (h->scratch) CUDACHECKKEEP(cudaFree(h->scratch), res);
    for (int i = 0; i < h->nRetired; i++) CUDACHECKKEEP(cudaFree(h->retired[i]), res);
    fcclEnqueueLeaveDevice(comm, &cd);
  }
  free(h->retired);
  free(h->hostOf);
  free(h->localOf);
  free(h);
  return res;
}

fcclResult_t fcclHierAsyncError(struct fcclComm* comm) {
  struct fcclHier* h = comm->hier;
  if (!h) return fcclSuccess;
  if (h->host) {
    const fcclResult_t state = h->hostOps->state(h->host);
    if (state != fcclSuccess && state != fcclInProgress) {
      char failure[FCCL_LAST_ERROR_MAX - 128], text[FCCL_LAST_ERROR_MAX]; /* room for the words around it */
      fcclCommFailure(h->host, failure, sizeof(failure));
      snprintf(text, sizeof(text), "rank %d: its host communicator (local rank %d of %d) failed: %s", comm->rank,
               h->layout.localRank, h->layout.localRanks, failure[0] ? failure : fcclGetErrorString(state));
      fcclCommFail(comm, state, text, 0);
      return state;
    }
  }
  return fcclNcclAsyncErrorOn(comm, h->rail);
}

struct fcclTransport* fcclHierTransport(struct fcclComm* comm) {
  struct fcclHier* h = comm ? comm->hier : NULL;
  return h && h->host ? __atomic_load_n(&h->host->transport, __ATOMIC_ACQUIRE) : NULL;
}

/* One NCCL call of collective coll on nc (the rail, or the world's NCCL communicator), as part of a hierarchical
 * call: errors are named by coll's public call. */
static fcclResult_t ncclStep(struct fcclComm* comm, struct fcclNcclComm* nc, const struct fcclCollective* coll,
                             const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                             fcclRedOp_t op, int root, cudaStream_t stream) {
  const struct fcclCall step = {.coll = coll, .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                                .datatype = datatype, .op = op, .root = root, .stream = stream, .algo = -1};
  return fcclNcclLaunchOn(comm, nc, &step, stream);
}

/* One step of a hierarchical call on the host communicator: coll's call there, checked and enqueued by fcclEnqueue
 * as any caller's (a collective's hierLaunch -> here -> fcclEnqueue: the recursion docs/design.md declares). */
static fcclResult_t hostStep(struct fcclHier* h, const struct fcclCollective* coll, const void* sendbuf, void* recvbuf,
                             size_t count, fcclDataType_t datatype, fcclRedOp_t op, int root, cudaStream_t stream) {
  const struct fcclCall step = {.coll = coll,
                                .sendbuf = sendbuf,
                                .recvbuf = recvbuf,
                                .count = count,
                                .datatype = datatype,
                                .op = op,
                                .root = root,
                                .stream = stream,
                                .algo = -1};
  return fcclEnqueue(h->host, &step);
}

/* A failure seen earlier on either part, as the call's error. */
static fcclResult_t checkParts(struct fcclComm* comm, const char* caller) {
  const fcclResult_t state = fcclHierAsyncError(comm);
  if (state == fcclSuccess) return fcclSuccess;
  char failure[FCCL_LAST_ERROR_MAX];
  fcclCommFailure(comm, failure, sizeof(failure));
  return FCCL_ERROR(state, FCCL_SUBSYS_COLL, "%s: the communicator failed earlier (%s); destroy or abort it", caller,
                    failure[0] ? failure : fcclGetErrorString(state));
}

/*
 * count = localRanks x shard + tail. The shards: the host's reduce-scatter leaves this rank's shard, reduced over
 * the host, in its place in recvbuf (in place for the reduce-scatter when the all-reduce is); the rail reduces it
 * over the hosts in place; the host's all-gather (in place) gives every rank every shard. The tail (fewer elements
 * than local ranks) is one all-reduce of the world NCCL communicator. avg is a sum at both levels divided once by
 * the world's rank count, as one kernel's avg is (a per-level avg would round, or truncate integers, twice).
 * Nothing here waits for the host or the GPU: the steps are enqueued on stream in order, so the call can be
 * captured in a CUDA graph.
 */
fcclResult_t fcclHierAllReduce(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream) {
  struct fcclHier* h = comm->hier;
  const char* caller = call->coll->name;
  if (fcclNcclGroupActive())
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "%s: inside fcclGroupStart/fcclGroupEnd on the hierarchical path: NCCL would hold its step "
                      "across hosts until the group's end, behind the all-gather inside the host that needs it; make "
                      "the all-reduce outside the group",
                      caller);
  FCCLCHECK(checkParts(comm, caller));
  const size_t size = fcclTypeSize(call->datatype);
  const size_t shard = call->count / (size_t)h->layout.localRanks;
  const size_t hierCount = shard * (size_t)h->layout.localRanks;
  const fcclRedOp_t op = call->op == fcclAvg ? fcclSum : call->op;
  const char* send = call->sendbuf;
  char* recv = call->recvbuf;
  if (shard > 0) {
    char* mine = recv + (size_t)h->layout.localRank * shard * size;
    FCCLCHECK(hostStep(h, &fcclCollReduceScatter, send, mine, shard, call->datatype, op, -1, stream));
    FCCLCHECK(ncclStep(comm, h->rail, call->coll, mine, mine, shard, call->datatype, op, -1, stream));
    if (call->op == fcclAvg) FCCLCHECK(fcclDeviceLaunchDivide(call->datatype, mine, shard, comm->nranks, stream));
    FCCLCHECK(hostStep(h, &fcclCollAllGather, mine, recv, shard, call->datatype, fcclSum, -1, stream));
  }
  if (call->count > hierCount)
    FCCLCHECK(ncclStep(comm, comm->nccl, call->coll, send + hierCount * size, recv + hierCount * size,
                       call->count - hierCount, call->datatype, call->op, -1, stream));
  return fcclSuccess;
}

/*
 * Each host's ranks consecutive: the host's all-gather puts its ranks' blocks in their places in the
 * host's part of recvbuf, and the rail's all-gather, in place, gives every rank every host's part. In a group (NCCL
 * would enqueue the rail's step at the group's end, after what the group enqueues later on the stream) or with
 * hosts interleaved (a host's blocks are not one part of recvbuf), the world NCCL communicator carries it.
 */
fcclResult_t fcclHierAllGather(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream) {
  struct fcclHier* h = comm->hier;
  if (fcclNcclGroupActive() || !h->consecutive) return fcclNcclLaunch(comm, call, stream);
  const char* caller = call->coll->name;
  FCCLCHECK(checkParts(comm, caller));
  const size_t part = call->count * (size_t)h->layout.localRanks;
  char* mine = (char*)call->recvbuf + (size_t)h->layout.host * part * fcclTypeSize(call->datatype);
  FCCLCHECK(hostStep(h, &fcclCollAllGather, call->sendbuf, mine, call->count, call->datatype, fcclSum, -1, stream));
  return ncclStep(comm, h->rail, call->coll, mine, call->recvbuf, part, call->datatype, fcclSum, -1, stream);
}

/*
 * The root's host broadcasts inside the host (fccl's kernels); then every rail broadcasts from the root's host, in
 * place. The other hosts' ranks make only the rail's step. In a group the world NCCL communicator carries it, as
 * the all-gather's.
 */
fcclResult_t fcclHierBroadcast(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream) {
  struct fcclHier* h = comm->hier;
  if (fcclNcclGroupActive()) return fcclNcclLaunch(comm, call, stream);
  const char* caller = call->coll->name;
  FCCLCHECK(checkParts(comm, caller));
  const int rootHost = h->hostOf[call->root];
  if (rootHost == h->layout.host)
    FCCLCHECK(hostStep(h, &fcclCollBroadcast, call->sendbuf, call->recvbuf, call->count, call->datatype, fcclSum,
                       h->localOf[call->root], stream));
  return ncclStep(comm, h->rail, call->coll, call->recvbuf, call->recvbuf, call->count, call->datatype, fcclSum,
                  rootHost, stream);
}

/* A scratch of at least bytes. An outgrown one is kept (a graph may hold it) until the communicator is freed. Called
 * with the comm's device current, maybe while the stream is captured: an allocation is no stream work, so it is
 * made in relaxed capture mode rather than invalidating a capture in global mode. */
static fcclResult_t scratchAtLeast(struct fcclHier* h, size_t bytes, const char* caller) {
  if (bytes <= h->scratchBytes) return fcclSuccess;
  size_t want = FCCL_HIER_SCRATCH_MIN;
  while (want < bytes && want <= SIZE_MAX / 2) want *= 2;
  if (want < bytes) want = bytes;
  void** retired = realloc(h->retired, (size_t)(h->nRetired + 1) * sizeof(*retired));
  if (!retired) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_COLL, "%s: out of host memory", caller);
  h->retired = retired;
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CUDACHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  void* scratch = NULL;
  const cudaError_t err = cudaMalloc(&scratch, want);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_COLL,
                      "%s: no %zu bytes of device memory for the hierarchical reduce-scatter's partials: %s", caller,
                      want, cudaGetErrorString(err));
  }
  if (h->scratch) h->retired[h->nRetired++] = h->scratch;
  h->scratch = scratch;
  h->scratchBytes = want;
  return fcclSuccess;
}

/*
 * Each host's ranks consecutive: for each host H, the host's reduce-scatter of H's part of sendbuf (its ranks'
 * blocks) leaves this rank the sum over its host of block (H, local rank) in the scratch, at H; the rail's
 * reduce-scatter of the scratch then sums over the hosts, and gives this rank its block. The order of the sums is
 * the hierarchical all-reduce's (inside the host, then across); avg is a sum divided once by the rank count, as
 * there. The scratch holds hosts x recvcount elements. In a group or with hosts interleaved, the world NCCL
 * communicator carries the call, as the all-gather's.
 */
fcclResult_t fcclHierReduceScatter(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream) {
  struct fcclHier* h = comm->hier;
  if (fcclNcclGroupActive() || !h->consecutive) return fcclNcclLaunch(comm, call, stream);
  const char* caller = call->coll->name;
  FCCLCHECK(checkParts(comm, caller));
  const size_t size = fcclTypeSize(call->datatype), block = call->count * size;
  const size_t part = block * (size_t)h->layout.localRanks;
  FCCLCHECK(scratchAtLeast(h, block * (size_t)h->layout.hosts, caller));
  const fcclRedOp_t op = call->op == fcclAvg ? fcclSum : call->op;
  const char* send = call->sendbuf;
  char* scratch = h->scratch;
  for (int host = 0; host < h->layout.hosts; host++)
    FCCLCHECK(hostStep(h, &fcclCollReduceScatter, send + (size_t)host * part, scratch + (size_t)host * block,
                       call->count, call->datatype, op, -1, stream));
  FCCLCHECK(ncclStep(comm, h->rail, call->coll, scratch, call->recvbuf, call->count, call->datatype, op, -1, stream));
  if (call->op == fcclAvg)
    FCCLCHECK(fcclDeviceLaunchDivide(call->datatype, call->recvbuf, call->count, comm->nranks, stream));
  return fcclSuccess;
}
