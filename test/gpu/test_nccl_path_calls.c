/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL path's test (test_nccl_path.c): one rank's calls, each on random data uploaded, run, downloaded and
 * checked (test_nccl_path_ref.c): the four collectives, send/recv in a group, all-to-all, the barrier, registered
 * buffers, graph capture, the argument checks, and the hierarchical path's extras.
 */
#include "test_nccl_path.h"

#include "param.h"
#include "test.h"
#include "test_allreduce_common.h"
#include "test_allreduce_ref.h"
#include "test_shm.h"
#include "test_wire.h"

#include <cuda_runtime.h>
#include <fccl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- one rank's calls ---- */

#define CHECK_FCCL(what, call)                                                                                \
  do {                                                                                                        \
    fcclResult_t r_ = (call);                                                                                 \
    if (r_ != fcclSuccess) {                                                                                  \
      testFail(__FILE__, __LINE__, "rank %d: %s: %s: %s: %s", s->rank, (what), #call, fcclGetErrorString(r_), \
               fcclGetLastError(NULL));                                                                       \
      return 1;                                                                                               \
    }                                                                                                         \
  } while (0)

#define CHECK_CUDA(what, call)                                                                             \
  do {                                                                                                     \
    cudaError_t e_ = (call);                                                                               \
    if (e_ != cudaSuccess) {                                                                               \
      testFail(__FILE__, __LINE__, "rank %d: %s: %s: %s", s->rank, (what), #call, cudaGetErrorString(e_)); \
      return 1;                                                                                            \
    }                                                                                                      \
  } while (0)

static size_t typeBytes(fcclDataType_t type) {
  switch (type) {
    case fcclInt8:
    case fcclUint8: return 1;
    case fcclFloat16:
    case fcclBfloat16: return 2;
    case fcclInt32:
    case fcclUint32:
    case fcclFloat32: return 4;
    default: return 8;
  }
}

/* This rank's input of the current call (elements [first, first + count)) into dst on the device, on the call's
 * stream, so that the call is ordered after it (the host buffer is not touched again before download syncs). */
static int upload(struct rankState* s, fcclDataType_t type, void* dst, uint64_t first, size_t count) {
  refFillInput(type, s->seed, s->call, s->rank, first, s->host, count);
  CHECK_CUDA("upload", cudaMemcpyAsync(dst, s->host, count * typeBytes(type), cudaMemcpyHostToDevice, s->stream));
  return 0;
}

/* Poisons a device buffer, on the call's stream, so that elements a call does not write show. */
static int poison(struct rankState* s, void* dst, size_t bytes) {
  CHECK_CUDA("poison", cudaMemsetAsync(dst, 0xa5, bytes, s->stream));
  return 0;
}

static int download(struct rankState* s, const void* src, size_t bytes) {
  CHECK_CUDA("sync", cudaStreamSynchronize(s->stream));
  CHECK_CUDA("download", cudaMemcpy(s->host, src, bytes, cudaMemcpyDeviceToHost));
  return 0;
}

static int report(struct rankState* s, const char* what, fcclDataType_t type, fcclRedOp_t op, size_t count, size_t bad,
                  const char* msg) {
  EXPECT_MSG(bad == 0, "rank %d: call %llu: %s %s %s x %zu: %zu wrong: %s", s->rank, (unsigned long long)s->call, what,
             refTypeName(type), refOpName(op), count, bad, msg);
  return bad != 0;
}

int runAllReduce(struct rankState* s, fcclDataType_t type, fcclRedOp_t op, size_t count, int inPlace) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  void* out = inPlace ? s->send : s->recv;
  if (poison(s, s->recv, bytes) || upload(s, type, s->send, 0, count)) return 1;
  CHECK_FCCL("all-reduce", fcclAllReduce(s->send, out, count, type, op, s->comm, s->stream));
  if (download(s, out, bytes)) return 1;
  const size_t bad = checkReduced(type, op, s->seed, s->call, s->nranks, s->hostRanks, s->hostsInterleaved, 0, s->host,
                                  count, msg, sizeof(msg));
  s->call++;
  return report(s, inPlace ? "all-reduce in place" : "all-reduce", type, op, count, bad, msg);
}

/* In place: recvbuf is this rank's block of sendbuf. On the hierarchical path with consecutive hosts the
 * reduce-scatter is hierarchical (its max/min take both levels' rules); with interleaved hosts it is NCCL's. */
static int runReduceScatter(struct rankState* s, fcclDataType_t type, fcclRedOp_t op, size_t count, int inPlace) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  char* recv = inPlace ? (char*)s->send + (size_t)s->rank * bytes : s->recv;
  if (poison(s, s->recv, bytes) || upload(s, type, s->send, 0, count * (size_t)s->nranks)) return 1;
  CHECK_FCCL("reduce-scatter", fcclReduceScatter(s->send, recv, count, type, op, s->comm, s->stream));
  if (download(s, recv, bytes)) return 1;
  const int hostRanks = s->hostsInterleaved ? 0 : s->hostRanks;
  const size_t bad = checkReduced(type, op, s->seed, s->call, s->nranks, hostRanks, 0, (uint64_t)s->rank * count,
                                  s->host, count, msg, sizeof(msg));
  s->call++;
  return report(s, inPlace ? "reduce-scatter in place" : "reduce-scatter", type, op, count, bad, msg);
}

/* In place: this rank's block is recvbuf's block of this rank. */
static int runAllGather(struct rankState* s, fcclDataType_t type, size_t count, int inPlace) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  char* send = inPlace ? (char*)s->recv + (size_t)s->rank * bytes : s->send;
  if (poison(s, s->recv, bytes * (size_t)s->nranks) || upload(s, type, send, 0, count)) return 1;
  CHECK_FCCL("all-gather", fcclAllGather(send, s->recv, count, type, s->comm, s->stream));
  if (download(s, s->recv, bytes * (size_t)s->nranks)) return 1;
  size_t bad = 0;
  for (int r = 0; r < s->nranks; r++)
    bad += checkMoved(type, s->seed, s->call, r, 0, (char*)s->host + (size_t)r * bytes, count, msg, sizeof(msg));
  s->call++;
  return report(s, inPlace ? "all-gather in place" : "all-gather", type, fcclSum, count, bad, msg);
}

/* In place: the root's input is in recvbuf. */
static int runBroadcast(struct rankState* s, fcclDataType_t type, size_t count, int root, int inPlace) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  void* send = inPlace ? s->recv : s->send;
  if (poison(s, s->recv, bytes) || upload(s, type, send, 0, count)) return 1;
  CHECK_FCCL("broadcast", fcclBroadcast(send, s->recv, count, type, root, s->comm, s->stream));
  if (download(s, s->recv, bytes)) return 1;
  const size_t bad = checkMoved(type, s->seed, s->call, root, 0, s->host, count, msg, sizeof(msg));
  s->call++;
  return report(s, inPlace ? "broadcast in place" : "broadcast", type, fcclSum, count, bad, msg);
}

/* A ring exchange in a group: send to rank + 1, receive from rank - 1 (nested groups, as a pipeline stage's). */
static int runSendRecv(struct rankState* s, fcclDataType_t type, size_t count) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  const int next = (s->rank + 1) % s->nranks, prev = (s->rank + s->nranks - 1) % s->nranks;
  if (poison(s, s->recv, bytes) || upload(s, type, s->send, 0, count)) return 1;
  CHECK_FCCL("group", fcclGroupStart());
  CHECK_FCCL("group", fcclGroupStart());
  CHECK_FCCL("send", fcclSend(s->send, count, type, next, s->comm, s->stream));
  CHECK_FCCL("group", fcclGroupEnd());
  CHECK_FCCL("recv", fcclRecv(s->recv, count, type, prev, s->comm, s->stream));
  CHECK_FCCL("group", fcclGroupEnd());
  if (download(s, s->recv, bytes)) return 1;
  const size_t bad = checkMoved(type, s->seed, s->call, prev, 0, s->host, count, msg, sizeof(msg));
  s->call++;
  return report(s, "send/recv", type, fcclSum, count, bad, msg);
}

static int runAllToAll(struct rankState* s, fcclDataType_t type, size_t count) {
  char msg[256];
  const size_t bytes = count * typeBytes(type);
  const size_t total = bytes * (size_t)s->nranks;
  if (poison(s, s->recv, total) || upload(s, type, s->send, 0, count * (size_t)s->nranks)) return 1;
  CHECK_FCCL("all-to-all", fcclAllToAll(s->send, s->recv, count, type, s->comm, s->stream));
  if (download(s, s->recv, total)) return 1;
  size_t bad = 0;
  for (int p = 0; p < s->nranks; p++) /* block p came from rank p's block for us */
    bad += checkMoved(type, s->seed, s->call, p, (uint64_t)s->rank * count, (char*)s->host + (size_t)p * bytes, count,
                      msg, sizeof(msg));
  s->call++;
  return report(s, "all-to-all", type, fcclSum, count, bad, msg);
}

/* Every rank enters the barrier; rank 0 enters late: nobody's stream passes it before rank 0's host entered. */
static int runBarrier(struct rankState* s, struct collShared* shared) {
  if (s->rank == 0) {
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 200 * 1000000};
    nanosleep(&pause, NULL);
    __atomic_store_n(&shared->stamps[0][0], collNowNs(), __ATOMIC_RELEASE);
  }
  CHECK_FCCL("barrier", fcclBarrier(s->comm, s->stream));
  CHECK_CUDA("barrier", cudaStreamSynchronize(s->stream));
  const int64_t passed = collNowNs();
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  const int64_t entered = __atomic_load_n(&shared->stamps[0][0], __ATOMIC_ACQUIRE);
  EXPECT_MSG(entered != 0 && passed >= entered, "rank %d: passed the barrier at %lld, rank 0 entered at %lld", s->rank,
             (long long)passed, (long long)entered);
  return 0;
}

/* Registration: a registered buffer works in a call, is counted, and a handle is released once only. */
static int runRegistered(struct rankState* s) {
  fcclRegHandle_t a = NULL, b = NULL;
  fcclMemStats_t before = {.size = sizeof(fcclMemStats_t)}, during = {.size = sizeof(fcclMemStats_t)};
  CHECK_FCCL("stats", fcclCommGetMemStats(s->comm, &before));
  CHECK_FCCL("register", fcclCommRegister(s->comm, s->send, s->capacity, &a));
  CHECK_FCCL("register", fcclCommRegister(s->comm, s->recv, s->capacity, &b));
  CHECK_FCCL("stats", fcclCommGetMemStats(s->comm, &during));
  EXPECT_EQ_INT(during.commRegistrations, before.commRegistrations + 2);
  int failed = runAllReduce(s, fcclFloat32, fcclSum, 4099, 0);
  CHECK_FCCL("deregister", fcclCommDeregister(s->comm, a));
  CHECK_FCCL("deregister", fcclCommDeregister(s->comm, b));
  /* Every rank makes the same bad call: refused on each (fcclRemoteError where the fccl path's exchange tells a
   * rank of its peers' refusal first). */
  fcclResult_t bad = fcclCommRegister(s->comm, s->send, 0, &a);
  EXPECT_MSG(bad == fcclInvalidArgument || bad == fcclRemoteError, "rank %d: register of 0 bytes returned %d", s->rank,
             bad);
  bad = fcclCommRegister(s->comm, s->send, 64, NULL);
  EXPECT_MSG(bad == fcclInvalidArgument || bad == fcclRemoteError, "rank %d: register without a handle returned %d",
             s->rank, bad);
  return failed;
}

/* Graph capture: an all-reduce, a barrier and a ring exchange captured once, replayed with new inputs. */
static int runGraph(struct rankState* s) {
  const size_t count = 3001;
  const size_t bytes = count * sizeof(float);
  const int next = (s->rank + 1) % s->nranks, prev = (s->rank + s->nranks - 1) % s->nranks;
  char* recvExchange = (char*)s->recv + ((bytes + 255) / 256 * 256);
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CHECK_CUDA("capture", cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeGlobal));
  fcclResult_t r1 = fcclAllReduce(s->send, s->recv, count, fcclFloat32, fcclSum, s->comm, s->stream);
  fcclResult_t r2 = fcclBarrier(s->comm, s->stream);
  fcclResult_t r3 = fcclGroupStart();
  fcclResult_t r4 = fcclSend(s->send, count, fcclFloat32, next, s->comm, s->stream);
  fcclResult_t r5 = fcclRecv(recvExchange, count, fcclFloat32, prev, s->comm, s->stream);
  fcclResult_t r6 = fcclGroupEnd();
  CHECK_CUDA("capture", cudaStreamEndCapture(s->stream, &graph));
  EXPECT_MSG(r1 == fcclSuccess && r2 == fcclSuccess && r3 == fcclSuccess && r4 == fcclSuccess && r5 == fcclSuccess &&
                 r6 == fcclSuccess,
             "rank %d: captured calls returned %d %d %d %d %d %d: %s", s->rank, r1, r2, r3, r4, r5, r6,
             fcclGetLastError(NULL));
  CHECK_CUDA("instantiate", cudaGraphInstantiate(&exec, graph, 0));
  int failed = 0;
  for (int replay = 0; replay < 3 && !failed; replay++) {
    char msg[256];
    if (poison(s, s->recv, 2 * bytes + 256) || upload(s, fcclFloat32, s->send, 0, count)) return 1;
    CHECK_CUDA("replay", cudaGraphLaunch(exec, s->stream));
    if (download(s, s->recv, bytes)) return 1;
    size_t bad = checkReduced(fcclFloat32, fcclSum, s->seed, s->call, s->nranks, s->hostRanks, s->hostsInterleaved, 0,
                              s->host, count, msg, sizeof(msg));
    failed |= report(s, "graph all-reduce", fcclFloat32, fcclSum, count, bad, msg);
    if (download(s, recvExchange, bytes)) return 1;
    bad = checkMoved(fcclFloat32, s->seed, s->call, prev, 0, s->host, count, msg, sizeof(msg));
    failed |= report(s, "graph send/recv", fcclFloat32, fcclSum, count, bad, msg);
    s->call++;
  }
  CHECK_CUDA("graph", cudaGraphExecDestroy(exec));
  CHECK_CUDA("graph", cudaGraphDestroy(graph));
  return failed;
}

/* The new calls' argument checks (local: nothing reaches NCCL, so the ranks stay in step). */
static void runInvalid(struct rankState* s) {
  EXPECT_EQ_INT(fcclSend(s->send, 4, fcclFloat32, s->nranks, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "peer");
  EXPECT_EQ_INT(fcclRecv(s->recv, 4, fcclFloat32, -1, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclSend(NULL, 4, fcclFloat32, 0, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "sendbuf is NULL");
  EXPECT_EQ_INT(fcclRecv(NULL, 4, fcclFloat32, 0, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "recvbuf is NULL");
  EXPECT_EQ_INT(fcclSend(s->send, 4, (fcclDataType_t)42, 0, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclAllToAll(s->send, (char*)s->send + 4, 4, fcclFloat32, s->comm, s->stream), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "overlap");
  EXPECT_EQ_INT(fcclSend(s->send, 4, fcclFloat32, 0, NULL, s->stream), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclGroupEnd(), fcclInvalidUsage);
  EXPECT_EQ_INT(fcclAllReduce(s->send, s->recv, 4, fcclFloat32, (fcclRedOp_t)9, s->comm, s->stream),
                fcclInvalidArgument);
  EXPECT_EQ_INT(fcclSend(s->send, 0, fcclFloat32, 0, s->comm, s->stream), fcclSuccess); /* count 0: nothing */
  fcclPath_t path;
  EXPECT_EQ_INT(fcclCommGetPath(s->comm, NULL, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommGetPath(NULL, &path, NULL), fcclInvalidArgument);
}

int stateInit(struct rankState* s, fcclComm_t comm, int rank, int nranks, uint64_t seed) {
  memset(s, 0, sizeof(*s));
  s->comm = comm;
  s->rank = rank;
  s->nranks = nranks;
  s->seed = seed;
  s->capacity = (size_t)65537 * 8 * REF_MAX_RANKS + 4096;
  CHECK_CUDA("init", cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  CHECK_CUDA("init", cudaMalloc(&s->send, s->capacity));
  CHECK_CUDA("init", cudaMalloc(&s->recv, s->capacity));
  CHECK_CUDA("init", cudaMallocHost(&s->host, s->capacity));
  return 0;
}

void stateFini(struct rankState* s) {
  if (s->stream) cudaStreamDestroy(s->stream);
  cudaFree(s->send);
  cudaFree(s->recv);
  cudaFreeHost(s->host);
}

/* Every call on random data. Every rank makes the same calls in the same order. */
int runEverything(struct rankState* s, struct collShared* shared) {
  static const fcclDataType_t types[] = {fcclFloat32, fcclBfloat16, fcclFloat16, fcclFloat64,
                                         fcclInt32,   fcclUint8,    fcclInt64};
  static const fcclRedOp_t ops[] = {fcclSum, fcclProd, fcclMax, fcclMin, fcclAvg};
  static const size_t counts[] = {1, 7, 1023, 65537};
  int failed = 0;
  runInvalid(s);
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
      for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        failed += runAllReduce(s, types[t], ops[o], counts[c], (int)(c % 2));
        if (c < 3) failed += runReduceScatter(s, types[t], ops[o], counts[c], 0);
      }
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
      failed += runAllGather(s, types[t], counts[c], 0);
      failed += runBroadcast(s, types[t], counts[c], (int)(c % (size_t)s->nranks), 0);
      failed += runSendRecv(s, types[t], counts[c]);
      failed += runAllToAll(s, types[t], counts[c]);
    }
  failed += runBarrier(s, shared);
  failed += runGraph(s);
  failed += runRooted(s);
  failed += runRegistered(s); /* last: it ends with refused registrations */
  return failed;
}

/* The hierarchical all-gather, broadcast and reduce-scatter captured once, replayed with new inputs: the
 * all-gather out of place, then a broadcast from the last rank (on the second host) in place, in another part of
 * recvbuf, then a reduce-scatter large enough that its scratch grows while the stream is captured. */
static int runHierGraph(struct rankState* s) {
  const size_t count = 3001;
  const size_t bytes = count * sizeof(float);
  const int root = s->nranks - 1;
  char* broadcastBuf = (char*)s->recv + ((bytes * (size_t)s->nranks + 255) / 256 * 256);
  const size_t scatterCount = 300001, scatterBytes = scatterCount * sizeof(float);
  char* scatterIn = (char*)s->send + (bytes + 255) / 256 * 256;
  char* scatterOut = broadcastBuf + (bytes + 255) / 256 * 256;
  if ((size_t)(scatterIn - (char*)s->send) + scatterBytes * (size_t)s->nranks > s->capacity ||
      (size_t)(scatterOut - (char*)s->recv) + scatterBytes > s->capacity) {
    testFail(__FILE__, __LINE__, "rank %d: the graph's buffers do not fit", s->rank);
    return 1;
  }
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CHECK_CUDA("capture", cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeGlobal));
  fcclResult_t gathered = fcclAllGather(s->send, s->recv, count, fcclFloat32, s->comm, s->stream);
  fcclResult_t broadcast = fcclBroadcast(broadcastBuf, broadcastBuf, count, fcclFloat32, root, s->comm, s->stream);
  fcclResult_t scattered = fcclReduceScatter(scatterIn, scatterOut, scatterCount, fcclFloat32, fcclSum, s->comm,
                                             s->stream);
  CHECK_CUDA("capture", cudaStreamEndCapture(s->stream, &graph));
  EXPECT_MSG(gathered == fcclSuccess && broadcast == fcclSuccess && scattered == fcclSuccess,
             "rank %d: captured calls returned %d %d %d: %s", s->rank, gathered, broadcast, scattered,
             fcclGetLastError(NULL));
  CHECK_CUDA("instantiate", cudaGraphInstantiate(&exec, graph, 0));
  int failed = 0;
  for (int replay = 0; replay < 3 && !failed; replay++) {
    char msg[256];
    if (poison(s, s->recv, bytes * (size_t)s->nranks) || upload(s, fcclFloat32, s->send, 0, count)) return 1;
    CHECK_CUDA("sync", cudaStreamSynchronize(s->stream)); /* upload stages through s->host */
    if (upload(s, fcclFloat32, broadcastBuf, count, count)) return 1;
    CHECK_CUDA("sync", cudaStreamSynchronize(s->stream));
    if (upload(s, fcclFloat32, scatterIn, 0, scatterCount * (size_t)s->nranks)) return 1;
    CHECK_CUDA("replay", cudaGraphLaunch(exec, s->stream));
    if (download(s, s->recv, bytes * (size_t)s->nranks)) return 1;
    size_t bad = 0;
    for (int r = 0; r < s->nranks; r++)
      bad += checkMoved(fcclFloat32, s->seed, s->call, r, 0, (char*)s->host + (size_t)r * bytes, count, msg,
                        sizeof(msg));
    failed |= report(s, "graph all-gather", fcclFloat32, fcclSum, count, bad, msg);
    if (download(s, broadcastBuf, bytes)) return 1;
    bad = checkMoved(fcclFloat32, s->seed, s->call, root, count, s->host, count, msg, sizeof(msg));
    failed |= report(s, "graph broadcast in place", fcclFloat32, fcclSum, count, bad, msg);
    if (download(s, scatterOut, scatterBytes)) return 1;
    bad = checkReduced(fcclFloat32, fcclSum, s->seed, s->call, s->nranks, s->hostsInterleaved ? 0 : s->hostRanks, 0,
                       (uint64_t)s->rank * scatterCount, s->host, scatterCount, msg, sizeof(msg));
    failed |= report(s, "graph reduce-scatter", fcclFloat32, fcclSum, scatterCount, bad, msg);
    s->call++;
  }
  CHECK_CUDA("graph", cudaGraphExecDestroy(exec));
  CHECK_CUDA("graph", cudaGraphDestroy(graph));
  return failed;
}

/* The hierarchical all-reduce's own cases: every type and op at counts that the 2 local ranks divide (no remainder
 * for the world NCCL communicator), at 2 (one element per local rank) and odd counts around a shard boundary, in
 * place and out of place; inside a group it is refused on every rank before anything is enqueued. */
int runHierExtras(struct rankState* s) {
  static const fcclDataType_t types[] = {fcclFloat32, fcclBfloat16, fcclFloat16, fcclFloat64, fcclInt8,
                                         fcclUint8,   fcclInt32,    fcclUint32,  fcclInt64,   fcclUint64};
  static const fcclRedOp_t ops[] = {fcclSum, fcclProd, fcclMax, fcclMin, fcclAvg};
  static const size_t counts[] = {2, 3, 4096, 65535, 65536};
  int failed = 0;
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
      for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        failed += runAllReduce(s, types[t], ops[o], counts[c], (int)((t + c) % 2));
  CHECK_FCCL("group", fcclGroupStart());
  EXPECT_EQ_INT(fcclAllReduce(s->send, s->recv, 64, fcclFloat32, fcclSum, s->comm, s->stream), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "inside fcclGroupStart/fcclGroupEnd on the hierarchical path");
  CHECK_FCCL("group", fcclGroupEnd());
  /* The communicator goes on after the refusal. */
  failed += runAllReduce(s, fcclFloat32, fcclSum, 1001, 0);
  /* The hierarchical all-gather and broadcast: in place and not, every root, counts 1 to past a staging round. */
  static const fcclDataType_t moved[] = {fcclFloat32, fcclBfloat16, fcclInt8, fcclFloat64};
  static const size_t movedCounts[] = {1, 7, 4097, 65537};
  for (size_t t = 0; t < sizeof(moved) / sizeof(moved[0]); t++)
    for (size_t c = 0; c < sizeof(movedCounts) / sizeof(movedCounts[0]); c++) {
      failed += runAllGather(s, moved[t], movedCounts[c], (int)((t + c) % 2));
      for (int root = 0; root < s->nranks; root++)
        failed += runBroadcast(s, moved[t], movedCounts[c], root, (int)((t + c + (size_t)root) % 2));
    }
  /* The hierarchical reduce-scatter: every op, in place and not, counts 1 to past a staging round (its scratch
   * grows on the way). */
  static const fcclDataType_t reduced[] = {fcclFloat32, fcclBfloat16, fcclFloat16, fcclInt32, fcclUint8};
  static const fcclRedOp_t reducedOps[] = {fcclSum, fcclProd, fcclMax, fcclMin, fcclAvg};
  for (size_t t = 0; t < sizeof(reduced) / sizeof(reduced[0]); t++)
    for (size_t o = 0; o < sizeof(reducedOps) / sizeof(reducedOps[0]); o++)
      for (size_t c = 0; c < sizeof(movedCounts) / sizeof(movedCounts[0]); c++)
        failed += runReduceScatter(s, reduced[t], reducedOps[o], movedCounts[c], (int)((t + o + c) % 2));
  /* In a group the all-gather goes to the world NCCL communicator, and stays correct. */
  const size_t groupCount = 1031, groupBytes = groupCount * sizeof(float);
  char msg[256];
  if (poison(s, s->recv, groupBytes * (size_t)s->nranks) || upload(s, fcclFloat32, s->send, 0, groupCount)) return 1;
  CHECK_FCCL("group", fcclGroupStart());
  CHECK_FCCL("all-gather in a group", fcclAllGather(s->send, s->recv, groupCount, fcclFloat32, s->comm, s->stream));
  CHECK_FCCL("group", fcclGroupEnd());
  if (download(s, s->recv, groupBytes * (size_t)s->nranks)) return 1;
  size_t bad = 0;
  for (int r = 0; r < s->nranks; r++)
    bad += checkMoved(fcclFloat32, s->seed, s->call, r, 0, (char*)s->host + (size_t)r * groupBytes, groupCount, msg,
                      sizeof(msg));
  s->call++;
  failed += report(s, "all-gather in a group", fcclFloat32, fcclSum, groupCount, bad, msg);
  failed += runHierGraph(s);
  return failed;
}

int expectPath(struct rankState* s, fcclPath_t want, const char* reasonPart) {
  fcclPath_t path = fcclNumPaths;
  const char* reason = NULL;
  CHECK_FCCL("path", fcclCommGetPath(s->comm, &path, &reason));
  EXPECT_MSG(path == want, "rank %d: path %s (%s), expected %s", s->rank, fcclGetPathName(path), reason ? reason : "",
             fcclGetPathName(want));
  if (reasonPart) EXPECT_STR_CONTAINS(reason, reasonPart);
  return path != want;
}
