/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL engine (--compare nccl): NCCL in the same processes, on the same GPUs and streams, so that its numbers
 * stand beside fccl's. The one file of the benchmark that knows NCCL; a build without NCCL has no NCCL table.
 */
#include "runtime_internal.h"

#include "fccl_build_config.h"

#if FCCL_HAVE_NCCL

#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ncclMemAlloc and ncclCommRegister came with NCCL 2.19, symmetric windows with 2.27. */
#define BENCH_NCCL_REGISTER (NCCL_VERSION_CODE >= NCCL_VERSION(2, 19, 0))
#define BENCH_NCCL_WINDOWS (NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0))

#define BENCH_CHECK_NCCL(agent, comm, call)                                                         \
  do {                                                                                              \
    ncclResult_t benchRes_ = (call);                                                                \
    if (benchRes_ != ncclSuccess) {                                                                 \
      benchFail((agent), "%s failed: %s: %s", #call, ncclGetErrorString(benchRes_),                 \
                ncclGetLastError(comm));                                                            \
      return -1;                                                                                    \
    }                                                                                               \
  } while (0)

static ncclComm_t commOf(const benchAgent_t* agent, int engine, int gpu) {
  return (ncclComm_t)agent->engines[engine].comms[gpu];
}

/* NVLink SHARP (multicast) stays off for NCCL in every rank: multicast objects can take a host's GPUs out of
 * service, and fccl does not use them either, so the comparison is like for like. */
static void ncclPrepareProcess(void) { setenv("NCCL_NVLS_ENABLE", "0", 1); }

static int ncclVersion(void) {
  int version = 0;
  ncclGetVersion(&version);
  return version;
}

static int ncclUniqueIdOp(benchAgent_t* agent, int engine, void* id) {
  (void)engine;
  ncclUniqueId unique;
  BENCH_CHECK_NCCL(agent, NULL, ncclGetUniqueId(&unique));
  memcpy(id, &unique, sizeof(unique));
  return 0;
}

static int ncclCreate(benchAgent_t* agent, int engine, int gpu, const void* id) {
  if (!id) {
    benchFail(agent, "NCCL needs a unique id to create a communicator");
    return -1;
  }
  ncclUniqueId unique;
  memcpy(&unique, id, sizeof(unique));
  ncclComm_t comm = NULL;
  if (agent->maxCtas > 0) {
    /* --max-ctas: NCCL under the same SM budget (config.maxCTAs: NCCL 2.17 and newer). */
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 17, 0)
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.maxCTAs = agent->maxCtas;
    BENCH_CHECK_NCCL(agent, NULL,
                     ncclCommInitRankConfig(&comm, agent->nranks, unique, agent->firstRank + gpu, &config));
#else
    benchFail(agent, "--max-ctas: this NCCL (headers %d) has no ncclConfig_t.maxCTAs (2.17 and newer)",
              NCCL_VERSION_CODE);
    return -1;
#endif
  } else {
    BENCH_CHECK_NCCL(agent, NULL, ncclCommInitRank(&comm, agent->nranks, unique, agent->firstRank + gpu));
  }
  agent->engines[engine].comms[gpu] = comm;
  return 0;
}

static double ncclSelfReportedBytes(benchAgent_t* agent, int engine, int gpu) {
  (void)agent;
  (void)engine;
  (void)gpu;
  return -1; /* NCCL does not say */
}

static int ncclDestroy(benchAgent_t* agent, int engine, int gpu) {
  ncclComm_t comm = commOf(agent, engine, gpu);
  if (!comm) return 0;
  ncclResult_t res = ncclCommDestroy(comm);
  agent->engines[engine].comms[gpu] = NULL;
  if (res != ncclSuccess) {
    benchFail(agent, "ncclCommDestroy failed: %s", ncclGetErrorString(res));
    return -1;
  }
  return 0;
}

static void ncclAbort(benchAgent_t* agent, int engine, int gpu) {
  ncclComm_t comm = commOf(agent, engine, gpu);
  if (!comm) return;
  ncclCommAbort(comm);
  agent->engines[engine].comms[gpu] = NULL;
}

static int ncclAsyncError(benchAgent_t* agent, int engine, int gpu, char* text, size_t len) {
  ncclComm_t comm = commOf(agent, engine, gpu);
  ncclResult_t error = ncclSuccess;
  if (comm && ncclCommGetAsyncError(comm, &error) == ncclSuccess && error != ncclSuccess && error != ncclInProgress) {
    snprintf(text, len, "%s: %s", ncclGetErrorString(error), ncclGetLastError(comm));
    return 1;
  }
  return 0;
}

static int ncclMemAllocOp(benchAgent_t* agent, int engine, int gpu, size_t bytes, void** ptr) {
#if BENCH_NCCL_REGISTER
  BENCH_CHECK_NCCL(agent, commOf(agent, engine, gpu), ncclMemAlloc(ptr, bytes));
#else
  (void)engine;
  (void)gpu;
  BENCH_CHECK_CUDA(agent, cudaMalloc(ptr, bytes)); /* NCCL before 2.19 registers nothing */
#endif
  return 0;
}

static int ncclMemFreeOp(benchAgent_t* agent, int engine, int gpu, void* ptr) {
  (void)agent;
  (void)engine;
  (void)gpu;
#if BENCH_NCCL_REGISTER
  return ncclMemFree(ptr) == ncclSuccess ? 0 : -1;
#else
  return cudaFree(ptr) == cudaSuccess ? 0 : -1;
#endif
}

#if BENCH_NCCL_WINDOWS
/* Whether kind is registered as a symmetric window: -R 2, with a library of 2.27 or later loaded. */
static int usesWindow(const benchAgent_t* agent, int engine, int kind) {
  return kind == BENCH_BUFFERS_SYMMETRIC && agent->engines[engine].version >= NCCL_VERSION(2, 27, 0);
}
#endif

static int ncclRegister(benchAgent_t* agent, int engine, int gpu, int kind, void* ptr, size_t bytes, void** handle) {
#if BENCH_NCCL_REGISTER
  ncclComm_t comm = commOf(agent, engine, gpu);
#if BENCH_NCCL_WINDOWS
  if (usesWindow(agent, engine, kind)) {
    ncclWindow_t window = NULL;
    BENCH_CHECK_NCCL(agent, comm, ncclCommWindowRegister(comm, ptr, bytes, &window, NCCL_WIN_COLL_SYMMETRIC));
    *handle = window;
    return 0;
  }
#endif
  BENCH_CHECK_NCCL(agent, comm, ncclCommRegister(comm, ptr, bytes, handle));
#else
  (void)agent;
  (void)engine;
  (void)gpu;
  (void)kind;
  (void)ptr;
  (void)bytes;
  (void)handle;
#endif
  return 0;
}

static int ncclDeregister(benchAgent_t* agent, int engine, int gpu, int kind, void* handle) {
#if BENCH_NCCL_REGISTER
  ncclComm_t comm = commOf(agent, engine, gpu);
  if (!comm) return 0;
  ncclResult_t res = ncclSuccess;
#if BENCH_NCCL_WINDOWS
  if (usesWindow(agent, engine, kind))
    res = ncclCommWindowDeregister(comm, (ncclWindow_t)handle);
  else
#endif
    res = ncclCommDeregister(comm, handle);
  if (res != ncclSuccess) {
    benchFail(agent, "NCCL deregistration failed: %s", ncclGetErrorString(res));
    return -1;
  }
#else
  (void)agent;
  (void)engine;
  (void)gpu;
  (void)kind;
  (void)handle;
#endif
  return 0;
}

/* A thread that drives several GPUs must group their launches: each would otherwise wait for ranks whose launch
 * this same thread has not made yet. */
static int ncclGroupStartOp(benchAgent_t* agent, int engine) {
  (void)engine;
  if (agent->nLocal > 1) BENCH_CHECK_NCCL(agent, NULL, ncclGroupStart());
  return 0;
}

static int ncclGroupEndOp(benchAgent_t* agent, int engine) {
  (void)engine;
  if (agent->nLocal > 1) BENCH_CHECK_NCCL(agent, NULL, ncclGroupEnd());
  return 0;
}

static int ncclAllReduceOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                           int type, int op, int root) {
  (void)root;
  ncclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_NCCL(agent, comm,
                   ncclAllReduce(send, recv, count, (ncclDataType_t)type, (ncclRedOp_t)op, comm, agent->streams[gpu]));
  return 0;
}

static int ncclAllGatherOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                           int type, int op, int root) {
  (void)op;
  (void)root;
  ncclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_NCCL(agent, comm, ncclAllGather(send, recv, count, (ncclDataType_t)type, comm, agent->streams[gpu]));
  return 0;
}

static int ncclReduceScatterOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                               int type, int op, int root) {
  (void)root;
  ncclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_NCCL(agent, comm,
                   ncclReduceScatter(send, recv, count, (ncclDataType_t)type, (ncclRedOp_t)op, comm,
                                     agent->streams[gpu]));
  return 0;
}

static int ncclBroadcastOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                           int type, int op, int root) {
  (void)op;
  ncclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_NCCL(agent, comm,
                   ncclBroadcast(send, recv, count, (ncclDataType_t)type, root, comm, agent->streams[gpu]));
  return 0;
}

static int ncclSendRecvOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                          int type, int op, int root) {
  (void)op;
  (void)root;
  ncclComm_t comm = commOf(agent, engine, gpu);
  const int rank = agent->firstRank + gpu, nranks = agent->nranks;
  BENCH_CHECK_NCCL(agent, NULL, ncclGroupStart());
  ncclResult_t sent = ncclSend(send, count, (ncclDataType_t)type, (rank + 1) % nranks, comm, agent->streams[gpu]);
  ncclResult_t received = sent == ncclSuccess ? ncclRecv(recv, count, (ncclDataType_t)type,
                                                         (rank + nranks - 1) % nranks, comm, agent->streams[gpu])
                                              : ncclSuccess;
  ncclResult_t ended = ncclGroupEnd(); /* whatever happened inside: no group left open on this thread */
  if (sent != ncclSuccess || received != ncclSuccess || ended != ncclSuccess) {
    ncclResult_t failed = sent != ncclSuccess ? sent : received != ncclSuccess ? received : ended;
    benchFail(agent, "%s failed: %s: %s",
              sent != ncclSuccess       ? "ncclSend"
              : received != ncclSuccess ? "ncclRecv"
                                        : "ncclGroupEnd",
              ncclGetErrorString(failed), ncclGetLastError(comm));
    return -1;
  }
  return 0;
}

/* NCCL has no variable all-gather or reduce-scatter: a group of one ncclBroadcast (ncclReduce) per rank whose block
 * is not empty, that rank the root, the block at its place in the buffer of every block (vLLM's all_gatherv and
 * reduce_scatterv are this group). */
static int ncclVariableOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                          int type, int op, int reduces) {
  ncclComm_t comm = commOf(agent, engine, gpu);
  const int rank = agent->firstRank + gpu;
  const size_t size = benchTypeSize(type);
  BENCH_CHECK_NCCL(agent, NULL, ncclGroupStart());
  ncclResult_t res = ncclSuccess;
  size_t offset = 0;
  for (int root = 0; root < agent->nranks && res == ncclSuccess; root++) {
    const size_t block = benchVariableCount(count, root, agent->nranks);
    char* at = (reduces ? (char*)(uintptr_t)send : (char*)recv) + offset * size;
    offset += block;
    if (block == 0) continue;
    if (reduces)
      res = ncclReduce(at, root == rank ? recv : at, block, (ncclDataType_t)type, (ncclRedOp_t)op, root, comm,
                       agent->streams[gpu]);
    else
      res = ncclBroadcast(root == rank ? send : at, at, block, (ncclDataType_t)type, root, comm, agent->streams[gpu]);
  }
  ncclResult_t ended = ncclGroupEnd(); /* whatever happened inside: no group left open on this thread */
  if (res != ncclSuccess || ended != ncclSuccess) {
    benchFail(agent, "NCCL %s (a group of %s) failed: %s: %s", reduces ? "reduce-scatter-v" : "all-gather-v",
              reduces ? "ncclReduce" : "ncclBroadcast", ncclGetErrorString(res != ncclSuccess ? res : ended),
              ncclGetLastError(comm));
    return -1;
  }
  return 0;
}

static int ncclAllGatherVOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                            int type, int op, int root) {
  (void)op;
  (void)root;
  return ncclVariableOp(agent, engine, gpu, send, recv, count, type, 0, 0);
}

static int ncclReduceScatterVOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                                int type, int op, int root) {
  (void)root;
  return ncclVariableOp(agent, engine, gpu, send, recv, count, type, op, 1);
}

/* ncclAlltoAll, ncclGather and ncclScatter came with NCCL 2.28; before, the all-to-all is nccl-tests' group of a send
 * and a receive per peer, and the other two are missing. */
#define BENCH_NCCL_ALLTOALL (NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0))

static int ncclAllToAllOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                          int type, int op, int root) {
  (void)op;
  (void)root;
  ncclComm_t comm = commOf(agent, engine, gpu);
#if BENCH_NCCL_ALLTOALL
  BENCH_CHECK_NCCL(agent, comm, ncclAlltoAll(send, recv, count, (ncclDataType_t)type, comm, agent->streams[gpu]));
#else
  const size_t blockBytes = count * benchTypeSize(type);
  BENCH_CHECK_NCCL(agent, NULL, ncclGroupStart());
  ncclResult_t res = ncclSuccess;
  for (int peer = 0; peer < agent->nranks && res == ncclSuccess; peer++) {
    res = ncclSend((const char*)send + peer * blockBytes, count, (ncclDataType_t)type, peer, comm, agent->streams[gpu]);
    if (res == ncclSuccess)
      res = ncclRecv((char*)recv + peer * blockBytes, count, (ncclDataType_t)type, peer, comm, agent->streams[gpu]);
  }
  ncclResult_t ended = ncclGroupEnd();
  if (res != ncclSuccess || ended != ncclSuccess) {
    benchFail(agent, "NCCL all-to-all (send/recv group) failed: %s: %s",
              ncclGetErrorString(res != ncclSuccess ? res : ended), ncclGetLastError(comm));
    return -1;
  }
#endif
  return 0;
}

static int ncclReduceOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count, int type,
                        int op, int root) {
  ncclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_NCCL(agent, comm,
                   ncclReduce(send, recv, count, (ncclDataType_t)type, (ncclRedOp_t)op, root, comm,
                              agent->streams[gpu]));
  return 0;
}

#if BENCH_NCCL_ALLTOALL
static int ncclGatherOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count, int type,
                        int op, int root) {
  (void)op;
  ncclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_NCCL(agent, comm, ncclGather(send, recv, count, (ncclDataType_t)type, root, comm, agent->streams[gpu]));
  return 0;
}

static int ncclScatterOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count, int type,
                         int op, int root) {
  (void)op;
  ncclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_NCCL(agent, comm, ncclScatter(send, recv, count, (ncclDataType_t)type, root, comm, agent->streams[gpu]));
  return 0;
}

#endif

/* NCCL has no barrier call; an all-reduce of one element is the usual stand-in. */
static int ncclBarrierOp(benchAgent_t* agent, int engine, int gpu, void* scratch) {
  return ncclAllReduceOp(agent, engine, gpu, scratch, scratch, 1, benchFloat32, benchSum, 0);
}

static const benchEngineOps_t ncclOps = {
    .name = "nccl",
    .uniqueIdBytes = sizeof(ncclUniqueId),
    .headersVersion = NCCL_VERSION_CODE,
    .symmetricWindows = BENCH_NCCL_WINDOWS,
    .prepareProcess = ncclPrepareProcess,
    .libraryVersion = ncclVersion,
    .uniqueId = ncclUniqueIdOp,
    .create = ncclCreate,
    .selfReportedBytes = ncclSelfReportedBytes,
    .destroy = ncclDestroy,
    .abort = ncclAbort,
    .asyncError = ncclAsyncError,
    .memAlloc = ncclMemAllocOp,
    .memFree = ncclMemFreeOp,
    .registerBuffer = ncclRegister,
    .deregisterBuffer = ncclDeregister,
    .groupStart = ncclGroupStartOp,
    .groupEnd = ncclGroupEndOp,
    .barrier = ncclBarrierOp,
    .calls =
        {
            [BENCH_CALL_ALL_REDUCE] = ncclAllReduceOp,
            [BENCH_CALL_ALL_GATHER] = ncclAllGatherOp,
            [BENCH_CALL_REDUCE_SCATTER] = ncclReduceScatterOp,
            [BENCH_CALL_BROADCAST] = ncclBroadcastOp,
            [BENCH_CALL_SEND_RECV] = ncclSendRecvOp,
            [BENCH_CALL_ALL_TO_ALL] = ncclAllToAllOp,
            [BENCH_CALL_REDUCE] = ncclReduceOp,
            [BENCH_CALL_ALL_GATHER_V] = ncclAllGatherVOp,
            [BENCH_CALL_REDUCE_SCATTER_V] = ncclReduceScatterVOp,
#if BENCH_NCCL_ALLTOALL
            [BENCH_CALL_GATHER] = ncclGatherOp,
            [BENCH_CALL_SCATTER] = ncclScatterOp,
#endif
        },
};

_Static_assert(sizeof(ncclUniqueId) <= BENCH_UNIQUE_ID_BYTES, "NCCL's unique id must fit the exchange");

const benchEngineOps_t* const benchNcclEngine = &ncclOps;

#else

const benchEngineOps_t* const benchNcclEngine = NULL;

#endif /* FCCL_HAVE_NCCL */
