/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fccl engine: the library under test, through its public API only (include/fccl.h).
 */
#include "runtime_internal.h"

#include "collective.h"

#include "fccl.h"

#include <stdio.h>
#include <string.h>

#define BENCH_CHECK_FCCL(agent, comm, call)                                                         \
  do {                                                                                              \
    fcclResult_t benchRes_ = (call);                                                                \
    if (benchRes_ != fcclSuccess) {                                                                 \
      benchFail((agent), "%s failed: %s: %s", #call, fcclGetErrorString(benchRes_),                 \
                fcclGetLastError(comm));                                                            \
      return -1;                                                                                    \
    }                                                                                               \
  } while (0)

static fcclComm_t commOf(const benchAgent_t* agent, int engine, int gpu) {
  return (fcclComm_t)agent->engines[engine].comms[gpu];
}

static int fcclVersion(void) {
  int version = 0;
  fcclGetVersion(&version);
  return version;
}

static int fcclUniqueIdOp(benchAgent_t* agent, int engine, void* id) {
  (void)engine;
  fcclUniqueId unique;
  BENCH_CHECK_FCCL(agent, NULL, fcclGetUniqueId(&unique));
  memcpy(id, &unique, sizeof(unique));
  return 0;
}

static int fcclCreate(benchAgent_t* agent, int engine, int gpu, const void* id) {
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.commName = agent->test->program;
  config.allowSharedDevice = agent->args.shareGpu ? 1 : 0;
  if (agent->args.timeoutSec > 0) config.timeoutMs = agent->args.timeoutSec * 1000;
  if (agent->maxCtas > 0) config.maxCTAs = agent->maxCtas; /* --max-ctas */
  fcclComm_t comm = NULL;
  if (!id) {
    BENCH_CHECK_FCCL(agent, NULL, fcclCommInitFromEnv(&comm, &config));
  } else {
    fcclUniqueId unique;
    memcpy(&unique, id, sizeof(unique));
    BENCH_CHECK_FCCL(agent, NULL,
                     fcclCommInitRankConfig(&comm, agent->nranks, unique, agent->firstRank + gpu, &config));
  }
  agent->engines[engine].comms[gpu] = comm;
  return 0;
}

static int fcclDescribe(benchAgent_t* agent, int engine, int gpu, char* text, size_t len) {
  fcclPath_t path;
  const char* reason = NULL;
  if (fcclCommGetPath(commOf(agent, engine, gpu), &path, &reason) != fcclSuccess) return -1;
  snprintf(text, len, "path %s (%s)", fcclGetPathName(path), reason);
  return 0;
}

static double fcclSelfReportedBytes(benchAgent_t* agent, int engine, int gpu) {
  fcclMemStats_t stats;
  memset(&stats, 0, sizeof(stats));
  stats.size = sizeof(stats);
  return fcclCommGetMemStats(commOf(agent, engine, gpu), &stats) == fcclSuccess ? (double)stats.commDeviceBytes : -1;
}

static int fcclDestroy(benchAgent_t* agent, int engine, int gpu) {
  fcclComm_t comm = commOf(agent, engine, gpu);
  if (!comm) return 0;
  fcclResult_t res = fcclCommDestroy(comm);
  agent->engines[engine].comms[gpu] = NULL;
  if (res != fcclSuccess) {
    benchFail(agent, "fcclCommDestroy failed: %s", fcclGetErrorString(res));
    return -1;
  }
  return 0;
}

static void fcclAbort(benchAgent_t* agent, int engine, int gpu) {
  fcclComm_t comm = commOf(agent, engine, gpu);
  if (!comm) return;
  fcclCommAbort(comm);
  agent->engines[engine].comms[gpu] = NULL;
}

static int fcclAsyncError(benchAgent_t* agent, int engine, int gpu, char* text, size_t len) {
  fcclComm_t comm = commOf(agent, engine, gpu);
  fcclResult_t error = fcclSuccess;
  if (comm && fcclCommGetAsyncError(comm, &error) == fcclSuccess && error != fcclSuccess && error != fcclInProgress) {
    snprintf(text, len, "%s: %s", fcclGetErrorString(error), fcclGetLastError(comm));
    return 1;
  }
  return 0;
}

static int fcclMemAllocOp(benchAgent_t* agent, int engine, int gpu, size_t bytes, void** ptr) {
  BENCH_CHECK_FCCL(agent, commOf(agent, engine, gpu), fcclMemAlloc(ptr, bytes));
  return 0;
}

static int fcclMemFreeOp(benchAgent_t* agent, int engine, int gpu, void* ptr) {
  (void)agent;
  (void)engine;
  (void)gpu;
  return fcclMemFree(ptr) == fcclSuccess ? 0 : -1;
}

/* fccl has one kind of registration: -R 2 registers like -R 1. */
static int fcclRegister(benchAgent_t* agent, int engine, int gpu, int kind, void* ptr, size_t bytes, void** handle) {
  (void)kind;
  fcclComm_t comm = commOf(agent, engine, gpu);
  fcclRegHandle_t reg = NULL;
  BENCH_CHECK_FCCL(agent, comm, fcclCommRegister(comm, ptr, bytes, &reg));
  *handle = reg;
  return 0;
}

static int fcclDeregister(benchAgent_t* agent, int engine, int gpu, int kind, void* handle) {
  (void)kind;
  fcclComm_t comm = commOf(agent, engine, gpu);
  if (!comm || fcclCommDeregister(comm, (fcclRegHandle_t)handle) == fcclSuccess) return 0;
  benchFail(agent, "fcclCommDeregister failed: %s", fcclGetLastError(comm));
  return -1;
}

static int fcclBarrierOp(benchAgent_t* agent, int engine, int gpu, void* scratch) {
  (void)scratch;
  fcclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_FCCL(agent, comm, fcclBarrier(comm, (void*)agent->streams[gpu]));
  return 0;
}

static int fcclAllReduceOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                           int type, int op, int root) {
  (void)root;
  fcclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_FCCL(agent, comm,
                   fcclAllReduce(send, recv, count, (fcclDataType_t)type, (fcclRedOp_t)op, comm,
                                 (void*)agent->streams[gpu]));
  return 0;
}

static int fcclAllGatherOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                           int type, int op, int root) {
  (void)op;
  (void)root;
  fcclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_FCCL(agent, comm,
                   fcclAllGather(send, recv, count, (fcclDataType_t)type, comm, (void*)agent->streams[gpu]));
  return 0;
}

static int fcclReduceScatterOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                               int type, int op, int root) {
  (void)root;
  fcclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_FCCL(agent, comm,
                   fcclReduceScatter(send, recv, count, (fcclDataType_t)type, (fcclRedOp_t)op, comm,
                                     (void*)agent->streams[gpu]));
  return 0;
}

/* The variable calls' counts: benchVariableCount's skew, the same on every rank. */
#define BENCH_VARIABLE_MAX_RANKS 4096

static int variableCounts(benchAgent_t* agent, size_t count, size_t* counts) {
  if (agent->nranks > BENCH_VARIABLE_MAX_RANKS) {
    benchFail(agent, "the variable calls take at most %d ranks here", BENCH_VARIABLE_MAX_RANKS);
    return -1;
  }
  for (int q = 0; q < agent->nranks; q++) counts[q] = benchVariableCount(count, q, agent->nranks);
  return 0;
}

static int fcclAllGatherVOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                            int type, int op, int root) {
  (void)op;
  (void)root;
  static _Thread_local size_t counts[BENCH_VARIABLE_MAX_RANKS];
  if (variableCounts(agent, count, counts) != 0) return -1;
  fcclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_FCCL(agent, comm,
                   fcclAllGatherV(send, recv, counts, (fcclDataType_t)type, comm, (void*)agent->streams[gpu]));
  return 0;
}

static int fcclReduceScatterVOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                                int type, int op, int root) {
  (void)root;
  static _Thread_local size_t counts[BENCH_VARIABLE_MAX_RANKS];
  if (variableCounts(agent, count, counts) != 0) return -1;
  fcclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_FCCL(agent, comm,
                   fcclReduceScatterV(send, recv, counts, (fcclDataType_t)type, (fcclRedOp_t)op, comm,
                                      (void*)agent->streams[gpu]));
  return 0;
}

static int fcclBroadcastOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                           int type, int op, int root) {
  (void)op;
  fcclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_FCCL(agent, comm,
                   fcclBroadcast(send, recv, count, (fcclDataType_t)type, root, comm, (void*)agent->streams[gpu]));
  return 0;
}

static int fcclReduceOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count, int type,
                        int op, int root) {
  fcclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_FCCL(agent, comm,
                   fcclReduce(send, recv, count, (fcclDataType_t)type, (fcclRedOp_t)op, root, comm,
                              (void*)agent->streams[gpu]));
  return 0;
}

static int fcclGatherOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count, int type,
                        int op, int root) {
  (void)op;
  fcclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_FCCL(agent, comm,
                   fcclGather(send, recv, count, (fcclDataType_t)type, root, comm, (void*)agent->streams[gpu]));
  return 0;
}

static int fcclScatterOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count, int type,
                         int op, int root) {
  (void)op;
  fcclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_FCCL(agent, comm,
                   fcclScatter(send, recv, count, (fcclDataType_t)type, root, comm, (void*)agent->streams[gpu]));
  return 0;
}

/* nccl-tests' ring: a send to the next rank and a receive from the previous one, in one group (fcclSend and fcclRecv
 * go to the communicator's NCCL communicator: on the fccl path FCCL_NCCL_COMM must ask for it; the program sets it). */
static int fcclSendRecvOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                          int type, int op, int root) {
  (void)op;
  (void)root;
  fcclComm_t comm = commOf(agent, engine, gpu);
  const int rank = agent->firstRank + gpu, nranks = agent->nranks;
  void* stream = (void*)agent->streams[gpu];
  BENCH_CHECK_FCCL(agent, NULL, fcclGroupStart());
  fcclResult_t sent = fcclSend(send, count, (fcclDataType_t)type, (rank + 1) % nranks, comm, stream);
  fcclResult_t received = sent == fcclSuccess
                              ? fcclRecv(recv, count, (fcclDataType_t)type, (rank + nranks - 1) % nranks, comm, stream)
                              : fcclSuccess;
  /* The group is ended whatever happened inside it, so that this thread has none left open. */
  fcclResult_t ended = fcclGroupEnd();
  if (sent != fcclSuccess || received != fcclSuccess || ended != fcclSuccess) {
    fcclResult_t failed = sent != fcclSuccess ? sent : received != fcclSuccess ? received : ended;
    benchFail(agent, "%s failed: %s: %s",
              sent != fcclSuccess       ? "fcclSend"
              : received != fcclSuccess ? "fcclRecv"
                                        : "fcclGroupEnd",
              fcclGetErrorString(failed), fcclGetLastError(comm));
    return -1;
  }
  return 0;
}

static int fcclAllToAllOp(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv, size_t count,
                          int type, int op, int root) {
  (void)op;
  (void)root;
  fcclComm_t comm = commOf(agent, engine, gpu);
  BENCH_CHECK_FCCL(agent, comm,
                   fcclAllToAll(send, recv, count, (fcclDataType_t)type, comm, (void*)agent->streams[gpu]));
  return 0;
}

/* One thread driving several GPUs: on the fccl path the collectives only enqueue (fccl.h: Blocks: no), so no
 * bracket is needed; on the NCCL path, and for the calls NCCL carries on every path (send/recv, all-to-all), NCCL's
 * first call between ranks connects them and needs every rank's call, so the launches of all local GPUs go in one
 * group, as with NCCL itself. */
static int ncclPathGroup(benchAgent_t* agent, int engine) {
  if (agent->nLocal < 2) return 0;
  const benchCollective_t* collective = agent->test->collective;
  if (collective && (collective->call == BENCH_CALL_SEND_RECV || collective->call == BENCH_CALL_ALL_TO_ALL)) return 1;
  fcclPath_t path;
  return fcclCommGetPath(commOf(agent, engine, 0), &path, NULL) == fcclSuccess && path == fcclPathNccl;
}

static int fcclGroupStartOp(benchAgent_t* agent, int engine) {
  if (!ncclPathGroup(agent, engine)) return 0;
  BENCH_CHECK_FCCL(agent, NULL, fcclGroupStart());
  return 0;
}

static int fcclGroupEndOp(benchAgent_t* agent, int engine) {
  if (!ncclPathGroup(agent, engine)) return 0;
  BENCH_CHECK_FCCL(agent, NULL, fcclGroupEnd());
  return 0;
}

const benchEngineOps_t benchFcclEngine = {
    .name = "fccl",
    .uniqueIdBytes = sizeof(fcclUniqueId),
    .headersVersion = FCCL_VERSION_CODE,
    .symmetricWindows = 0,
    .prepareProcess = NULL,
    .libraryVersion = fcclVersion,
    .uniqueId = fcclUniqueIdOp,
    .create = fcclCreate,
    .describe = fcclDescribe,
    .selfReportedBytes = fcclSelfReportedBytes,
    .destroy = fcclDestroy,
    .abort = fcclAbort,
    .asyncError = fcclAsyncError,
    .memAlloc = fcclMemAllocOp,
    .memFree = fcclMemFreeOp,
    .registerBuffer = fcclRegister,
    .deregisterBuffer = fcclDeregister,
    .groupStart = fcclGroupStartOp,
    .groupEnd = fcclGroupEndOp,
    .barrier = fcclBarrierOp,
    .calls =
        {
            [BENCH_CALL_ALL_REDUCE] = fcclAllReduceOp,
            [BENCH_CALL_ALL_GATHER] = fcclAllGatherOp,
            [BENCH_CALL_REDUCE_SCATTER] = fcclReduceScatterOp,
            [BENCH_CALL_BROADCAST] = fcclBroadcastOp,
            [BENCH_CALL_SEND_RECV] = fcclSendRecvOp,
            [BENCH_CALL_ALL_TO_ALL] = fcclAllToAllOp,
            [BENCH_CALL_REDUCE] = fcclReduceOp,
            [BENCH_CALL_GATHER] = fcclGatherOp,
            [BENCH_CALL_SCATTER] = fcclScatterOp,
            [BENCH_CALL_ALL_GATHER_V] = fcclAllGatherVOp,
            [BENCH_CALL_REDUCE_SCATTER_V] = fcclReduceScatterVOp,
        },
};

_Static_assert(sizeof(fcclUniqueId) <= BENCH_UNIQUE_ID_BYTES, "fccl's unique id must fit the exchange");
