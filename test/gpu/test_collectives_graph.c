/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The all-gather, reduce-scatter and broadcast test (test_collectives.c): the three and an all-reduce captured in one
 * CUDA graph and replayed, fresh inputs before every replay, eager calls between replays, and the buffers the library
 * registers for the graph.
 */
#include "test_collectives.h"

#include "algo.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"
#include "test_collectives_common.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- graph ----------------------------------------------------------------------------------------------------- */

/* A node of the captured sequence: a move, or an all-reduce of count elements (allReduce; out of place). */
struct graphNode {
  int registered;
  int allReduce;
  struct moveCase c;
};

#define ROOT_LAST (-1)
/* Plain buffers of auto nodes above the LL sizes are registered for the graph at capture (out of place: receive and
 * send buffer), where every rank agrees on in place. */
static const struct graphNode kGraphNodes[] = {
    {1, 0, {MOVE_ALLGATHER, fcclFloat32, fcclSum, FCCL_MOVE_LL, 0, 1000, 0, 0, 4, 0}},
    {0, 0, {MOVE_ALLGATHER, fcclBfloat16, fcclSum, MOVE_AUTO, 0, 300001, 0, 2, 6, 0}}, /* graph-registered */
    {0, 0, {MOVE_ALLGATHER, fcclInt8, fcclSum, FCCL_MOVE_STAGED, 1, 70001, 0, 3, 0, 0}},
    {0, 0, {MOVE_ALLGATHER, fcclBfloat16, fcclSum, MOVE_AUTO, 1, 200001, 0, 2, 0, 0}},
    {0, 0, {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, MOVE_AUTO, 0, 100003, 0, 4, 8, 0}}, /* graph-registered */
    {1, 0, {MOVE_REDUCESCATTER, fcclBfloat16, fcclMax, FCCL_MOVE_DIRECT, 1, 5001, 0, 2, 0, 0}},
    {0, 0, {MOVE_REDUCESCATTER, fcclFloat16, fcclAvg, FCCL_MOVE_LL, 0, 2047, 0, 6, 2, 0}},
    {0, 0, {MOVE_BROADCAST, fcclFloat32, fcclSum, MOVE_AUTO, 0, 200000, ROOT_LAST, 0, 4, 1}},
    {1, 0, {MOVE_BROADCAST, fcclInt32, fcclSum, FCCL_MOVE_DIRECT, 1, 30001, 0, 4, 0, 0}},
    {0, 0, {MOVE_BROADCAST, fcclBfloat16, fcclSum, FCCL_MOVE_LL, 0, 777, 1, 2, 2, 0}},
    {0, 0, {MOVE_BROADCAST, fcclFloat32, fcclSum, MOVE_AUTO, 1, 150000, 0, 0, 0, 0}},    /* graph-registered */
    {0, 1, {MOVE_REDUCESCATTER, fcclFloat32, fcclSum, MOVE_AUTO, 0, 5000, 0, 0, 12, 0}}, /* all-reduce */
    /* the copy engines: memcpy nodes between barrier kernels, in and out of place */
    {1, 0, {MOVE_ALLGATHER, fcclBfloat16, fcclSum, FCCL_MOVE_COPY, 0, 100001, 0, 2, 6, 0}},
    {1, 0, {MOVE_ALLGATHER, fcclInt8, fcclSum, FCCL_MOVE_COPY, 1, 777, 0, 3, 0, 0}},
    {1, 0, {MOVE_BROADCAST, fcclFloat64, fcclSum, FCCL_MOVE_COPY, 0, 30001, ROOT_LAST, 8, 0, 1}},
    {1, 0, {MOVE_BROADCAST, fcclFloat16, fcclSum, FCCL_MOVE_COPY, 1, 4097, 1, 2, 0, 0}},
};
#define GRAPH_NODES ((int)(sizeof(kGraphNodes) / sizeof(kGraphNodes[0])))
#define GRAPH_SETS 3 /* input sets in turn: each replay's inputs differ from the previous replay's */

struct graphPlace {
  struct moveCase c; /* the root resolved for the rank count */
  char* sendbuf;
  char* recvbuf;
  char* whole;
  size_t wholeBytes;
  size_t sendElems;
  void* hostIn[GRAPH_SETS];
  void* hostOut; /* whole + its guards */
};

static uint64_t graphRegistrations(fcclComm_t comm) {
  fcclMemStats_t stats;
  memset(&stats, 0, sizeof(stats));
  stats.size = sizeof(stats);
  EXPECT_EQ_INT(fcclCommGetMemStats(comm, &stats), fcclSuccess);
  return stats.commGraphRegistrations;
}

/* Checks node j's output in p->hostOut against input set `set`; returns 1 when it is wrong. */
static int graphCheckNode(int rank, int nranks, uint64_t seed, int j, const struct graphPlace* p, int set, int replay,
                          uint64_t hashIndex, struct collShared* shared) {
  const unsigned char* host = p->hostOut;
  const unsigned char* out = host + COLL_GUARD;
  const size_t size = fcclTypeSize(p->c.type);
  int bad = 0;
  for (int i = 0; i < COLL_GUARD; i++)
    bad |= host[i] != COLL_POISON || host[COLL_GUARD + p->wholeBytes + i] != COLL_POISON;
  EXPECT_MSG(!bad, "rank %d replay %d node %d: bytes next to the output were overwritten", rank, replay, j);
  const uint64_t call = (uint64_t)set * GRAPH_NODES + (uint64_t)j;
  char message[512];
  size_t wrong;
  size_t outBytes;
  if (kGraphNodes[j].allReduce) {
    /* An all-reduce's element i reduces element i of every rank: the reduce-scatter check of rank 0's block. */
    wrong = moveCheckOutput(&p->c, seed, call, 0, 0, nranks, out, message, sizeof(message));
    outBytes = p->c.count * size;
  } else {
    if (p->c.inPlace && p->c.kind == MOVE_REDUCESCATTER) {
      const size_t own = (size_t)rank * p->c.count * size, blockBytes = p->c.count * size;
      const char* in = p->hostIn[set];
      EXPECT_MSG(memcmp(out, in, own) == 0 &&
                     memcmp(out + own + blockBytes, in + own + blockBytes, p->wholeBytes - own - blockBytes) == 0,
                 "rank %d replay %d node %d: the other ranks' input blocks changed", rank, replay, j);
      out += own;
    }
    wrong = moveCheckOutput(&p->c, seed, call, 0, rank, nranks, out, message, sizeof(message));
    outBytes = moveRecvElems(p->c.kind, p->c.count, nranks) * size;
  }
  char what[192];
  moveDescribe(&p->c, call, what, sizeof(what));
  EXPECT_MSG(wrong == 0, "rank %d replay %d node %d (%s%s): %zu wrong: %s", rank, replay, j,
             kGraphNodes[j].allReduce ? "all-reduce; " : "", what, wrong, message);
  if ((kGraphNodes[j].allReduce || p->c.kind != MOVE_REDUCESCATTER) && hashIndex < COLL_MAX_HASHES)
    shared->hashes[hashIndex][rank] = refHash(out, outBytes) | 1;
  return bad || wrong != 0;
}

int modeGraph(int rank, int nranks, const struct collTestArgs* args) {
  const char* setting = getenv("FCCL_GRAPH_REGISTER");
  const int graphRegister = setting == NULL || atoi(setting) != 0;
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct graphPlace place[GRAPH_NODES];
  memset(place, 0, sizeof(place));
  size_t region = 0;
  for (int j = 0; j < GRAPH_NODES; j++) {
    struct moveCase c = kGraphNodes[j].c;
    c.root = c.root == ROOT_LAST ? nranks - 1 : c.root % nranks;
    place[j].c = c;
    const size_t send = kGraphNodes[j].allReduce ? c.sendOffset + c.count * fcclTypeSize(c.type)
                                                 : moveSendBytes(&c, nranks);
    const size_t recv = kGraphNodes[j].allReduce ? c.recvOffset + c.count * fcclTypeSize(c.type)
                                                 : moveRecvBytes(&c, nranks);
    region = send > region ? send : region;
    region = recv > region ? recv : region;
  }
  region = alignUp(region + 2 * COLL_GUARD, 4096);
  /* [plain, registered] send and receive buffers; node j uses region j of its kind's. */
  struct collBuffer send[2], recv[2];
  for (int r = 0; r < 2; r++)
    if (!collBufferCreate(comm, &send[r], GRAPH_NODES * region, r) ||
        !collBufferCreate(comm, &recv[r], GRAPH_NODES * region, r))
      return 1;
  cudaStream_t stream;
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ_INT(cudaMemset(send[r].base, COLL_POISON, send[r].capacity + 2 * COLL_GUARD), cudaSuccess);
    EXPECT_EQ_INT(cudaMemset(recv[r].base, COLL_POISON, recv[r].capacity + 2 * COLL_GUARD), cudaSuccess);
  }
  for (int j = 0; j < GRAPH_NODES; j++) {
    struct graphPlace* p = &place[j];
    const int reg = kGraphNodes[j].registered;
    char* sendRegion = send[reg].base + COLL_GUARD + (size_t)j * region + COLL_GUARD;
    char* recvRegion = recv[reg].base + COLL_GUARD + (size_t)j * region + COLL_GUARD;
    const size_t size = fcclTypeSize(p->c.type);
    if (kGraphNodes[j].allReduce) {
      p->sendbuf = sendRegion + p->c.sendOffset;
      p->recvbuf = p->whole = recvRegion + p->c.recvOffset;
      p->wholeBytes = p->c.count * size;
      p->sendElems = p->c.count;
    } else {
      movePlaceIn(sendRegion, recvRegion, &p->c, rank, nranks, &p->sendbuf, &p->recvbuf, &p->whole, &p->wholeBytes);
      p->sendElems = moveSendElems(p->c.kind, p->c.count, nranks);
    }
    for (int s = 0; s < GRAPH_SETS; s++) {
      EXPECT_EQ_INT(cudaMallocHost(&p->hostIn[s], p->sendElems * size + 16), cudaSuccess);
      refFillInput(p->c.type, args->seed, (uint64_t)s * GRAPH_NODES + (uint64_t)j, rank, 0, p->hostIn[s], p->sendElems);
    }
    EXPECT_EQ_INT(cudaMallocHost(&p->hostOut, p->wholeBytes + 2 * COLL_GUARD), cudaSuccess);
  }
  if (testFailed) return 1;

  /* Capture (global mode, as PyTorch captures): barrier, the nodes, barrier. */
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  EXPECT_EQ_INT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ_INT(fcclBarrier(comm, stream), fcclSuccess);
  for (int j = 0; j < GRAPH_NODES; j++) {
    const struct graphPlace* p = &place[j];
    fcclResult_t res = kGraphNodes[j].allReduce
                           ? fcclAllReduce(p->sendbuf, p->recvbuf, p->c.count, p->c.type, p->c.op, comm, stream)
                           : moveCall(&p->c, p->sendbuf, p->recvbuf, comm, stream);
    EXPECT_MSG(res == fcclSuccess, "rank %d: capturing node %d: %s: %s", rank, j, fcclGetErrorString(res),
               fcclGetLastError(NULL));
  }
  EXPECT_EQ_INT(fcclBarrier(comm, stream), fcclSuccess);
  EXPECT_EQ_INT(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ_INT(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  if (testFailed) return 1;
  /* The out-of-place all-gather and reduce-scatter above the LL sizes register their two buffers each. */
  const uint64_t registrations = graphRegistrations(comm);
  if (graphRegister)
    EXPECT_MSG(registrations >= 4, "rank %d: %llu buffers registered for the graph, want at least 4", rank,
               (unsigned long long)registrations);
  else
    EXPECT_EQ_INT(registrations, 0);

  struct collContext eager;
  if (!collContextInit(&eager, args->shared, comm, rank, nranks, args->seed ^ 0x5555, 1u << 20, 0)) return 1;
  const int replays = collQuick() ? 50 : 1000;
  uint64_t eagerCall = 0, checks = 0;
  int bad = 0;
  const int64_t start = collNowNs();
  for (int replay = 0; replay < replays; replay++) { /* every replay, whatever it finds: the peers wait for them */
    const int set = replay % GRAPH_SETS;
    for (int j = 0; j < GRAPH_NODES; j++) {
      const struct graphPlace* p = &place[j];
      EXPECT_EQ_INT(cudaMemsetAsync(p->whole - COLL_GUARD, COLL_POISON, p->wholeBytes + 2 * COLL_GUARD, stream),
                    cudaSuccess);
      if (p->sendbuf)
        EXPECT_EQ_INT(cudaMemcpyAsync(p->sendbuf, p->hostIn[set], p->sendElems * fcclTypeSize(p->c.type),
                                      cudaMemcpyHostToDevice, stream),
                      cudaSuccess);
    }
    EXPECT_EQ_INT(cudaGraphLaunch(exec, stream), cudaSuccess);
    if ((replay % 10 == 9 || replay == replays - 1) && bad < 5) {
      for (int j = 0; j < GRAPH_NODES; j++)
        EXPECT_EQ_INT(cudaMemcpyAsync(place[j].hostOut, place[j].whole - COLL_GUARD,
                                      place[j].wholeBytes + 2 * COLL_GUARD, cudaMemcpyDeviceToHost, stream),
                      cudaSuccess);
      EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
      for (int j = 0; j < GRAPH_NODES; j++)
        bad += graphCheckNode(rank, nranks, args->seed, j, &place[j], set, replay, checks * GRAPH_NODES + j,
                              args->shared);
      checks++;
    }
    /* Every 100 replays eager calls on another stream: graph and eager calls share the epoch counters. */
    if (replay % 100 == 99) {
      const struct moveCase staged = {MOVE_ALLGATHER, fcclFloat32, fcclSum, FCCL_MOVE_STAGED, 0, 4097, 0, 4, 0, 0};
      const struct moveCase ll =
          {MOVE_BROADCAST, fcclBfloat16, fcclSum, FCCL_MOVE_LL, 0, 1000, (replay / 100) % nranks, 2, 2, 1};
      EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
      bad += moveRunCase(&eager, &staged, 1000000 + eagerCall++);
      bad += moveRunCase(&eager, &ll, 1000000 + eagerCall++);
    }
  }
  EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
  if (rank == 0)
    printf("%d replays of %d nodes (+ 2 barriers), %llu checked, %llu buffers registered for the graph, %.2f s\n",
           replays, GRAPH_NODES, (unsigned long long)checks, (unsigned long long)registrations,
           (double)(collNowNs() - start) / 1e9);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  args->shared->flags[0] = (int)(checks * GRAPH_NODES);

  /* The graph's end releases its registrations (CUDA runs the release on a thread of its own; the communicator's
   * next call finishes it): bounded polling. */
  EXPECT_EQ_INT(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ_INT(cudaGraphDestroy(graph), cudaSuccess);
  int released = 0;
  for (int attempt = 0; attempt < 1000 && !released; attempt++) {
    EXPECT_EQ_INT(fcclAllGather(NULL, NULL, 0, fcclFloat32, comm, stream), fcclSuccess);
    released = graphRegistrations(comm) == 0;
    if (!released) usleep(10000);
  }
  EXPECT_MSG(released, "rank %d: graph registrations still held 10 s after the graph was destroyed", rank);

  collContextFini(&eager);
  EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
  for (int j = 0; j < GRAPH_NODES; j++) {
    for (int s = 0; s < GRAPH_SETS; s++) cudaFreeHost(place[j].hostIn[s]);
    cudaFreeHost(place[j].hostOut);
  }
  for (int r = 0; r < 2; r++) {
    collBufferDestroy(comm, &send[r]);
    collBufferDestroy(comm, &recv[r]);
  }
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}
