/* SPDX-License-Identifier: Apache-2.0 */
/*
 * All-reduce and barrier captured in a CUDA graph and replayed (1,000 times; FCCLTEST_QUICK=1: 50), with fresh
 * input copied in before every replay and every output checked after it, on forked ranks (exits 77 without a
 * GPU). One graph holds one call of every algorithm (registered buffers for the registered ones) and two
 * barriers, so the epochs advanced by the kernels themselves are exercised within a replay and across replays;
 * eager calls are interleaved between replays to check that both share the same counters.
 *   test_graph [nranks]
 */
#include "algo.h"
#include "device.h"
#include "enqueue.h"
#include "test_allreduce_common.h"

#include <unistd.h>

struct node {
  int algo;
  fcclDataType_t type;
  fcclRedOp_t op;
  size_t count;
  int inPlace;
  size_t sendOffset; /* into the node's own region (nodes never overlap) */
  size_t recvOffset;
};

#define NODES 8
static const struct node kNodes[NODES] = {
    {FCCL_ALGO_LL, fcclFloat32, fcclSum, 1000, 0, 0, 4},
    {FCCL_ALGO_ONESHOT_PUSH, fcclBfloat16, fcclSum, 5001, 1, 2, 2},
    {FCCL_ALGO_TWOSHOT_STAGED, fcclFloat32, fcclMax, 70001, 0, 4, 0},
    {FCCL_ALGO_ONESHOT_PULL, fcclFloat16, fcclAvg, 20000, 0, 0, 0},
    {FCCL_ALGO_TWOSHOT_REG, fcclInt32, fcclSum, 30001, 1, 0, 0},
    {-1, fcclFloat32, fcclProd, 333, 0, 8, 12},
    {FCCL_ALGO_LL128, fcclBfloat16, fcclSum, 100003, 1, 2, 2},
    /* Out of place: its reduce-scatter by pull, or by the copy engines under FCCL_COPY_SCATTER_MIN=1 (graph_copy). */
    {FCCL_ALGO_TWOSHOT_REG, fcclBfloat16, fcclMax, 40003, 0, 6, 10},
};
#define REGION (1u << 20) /* bytes of each node's region in the shared buffers */

static int rankMain(int rank, int nranks, void* arg) {
  const struct collReplayArgs* args = arg;
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct collBuffer send, recv;
  if (!collBufferCreate(comm, &send, NODES * REGION, 1) || !collBufferCreate(comm, &recv, NODES * REGION, 1)) return 1;
  void *hostIn = NULL, *hostOut = NULL;
  EXPECT_EQ_INT(cudaMallocHost(&hostIn, NODES * REGION), cudaSuccess);
  EXPECT_EQ_INT(cudaMallocHost(&hostOut, NODES * REGION), cudaSuccess);
  cudaStream_t stream;
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);

  char* sendAt[NODES];
  char* recvAt[NODES];
  for (int n = 0; n < NODES; n++) {
    sendAt[n] = send.base + COLL_GUARD + (size_t)n * REGION + kNodes[n].sendOffset;
    recvAt[n] = kNodes[n].inPlace ? sendAt[n] : recv.base + COLL_GUARD + (size_t)n * REGION + kNodes[n].recvOffset;
  }

  /* Capture: barrier, the all-reduces, barrier. */
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  EXPECT_EQ_INT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ_INT(fcclBarrier(comm, stream), fcclSuccess);
  for (int n = 0; n < NODES; n++)
    EXPECT_EQ_INT(fcclAllReduceAlgo(sendAt[n], recvAt[n], kNodes[n].count, kNodes[n].type, kNodes[n].op, comm, stream,
                                    kNodes[n].algo),
                  fcclSuccess);
  EXPECT_EQ_INT(fcclBarrier(comm, stream), fcclSuccess);
  EXPECT_EQ_INT(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ_INT(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  if (testFailed) return 1;

  struct collContext eager;
  if (!collContextInit(&eager, args->shared, comm, rank, nranks, args->seed ^ 0x5555, 1u << 20, 0)) return 1;
  const int replays = collQuick() ? 50 : 1000;
  uint64_t eagerCall = 0;
  int bad = 0;
  const int64_t start = collNowNs();
  for (int replay = 0; replay < replays && bad < 5; replay++) {
    /* Fresh inputs: call id replay * NODES + n. */
    for (int n = 0; n < NODES; n++) {
      const size_t bytes = kNodes[n].count * fcclTypeSize(kNodes[n].type);
      char* host = (char*)hostIn + (size_t)n * REGION;
      refFillInput(kNodes[n].type, args->seed, (uint64_t)replay * NODES + n, rank, 0, host, kNodes[n].count);
      EXPECT_EQ_INT(cudaMemcpyAsync(sendAt[n], host, bytes, cudaMemcpyHostToDevice, stream), cudaSuccess);
      if (!kNodes[n].inPlace) EXPECT_EQ_INT(cudaMemsetAsync(recvAt[n], COLL_POISON, bytes, stream), cudaSuccess);
    }
    EXPECT_EQ_INT(cudaGraphLaunch(exec, stream), cudaSuccess);
    for (int n = 0; n < NODES; n++) {
      const size_t bytes = kNodes[n].count * fcclTypeSize(kNodes[n].type);
      EXPECT_EQ_INT(cudaMemcpyAsync((char*)hostOut + (size_t)n * REGION, recvAt[n], bytes, cudaMemcpyDeviceToHost,
                                    stream),
                    cudaSuccess);
    }
    EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
    for (int n = 0; n < NODES; n++) {
      char message[512];
      const uint64_t call = (uint64_t)replay * NODES + n;
      const char* out = (const char*)hostOut + (size_t)n * REGION;
      size_t wrong = refCheckBuffer(kNodes[n].type, kNodes[n].op, args->seed, call, nranks, out, kNodes[n].count,
                                    message, sizeof(message));
      EXPECT_MSG(wrong == 0, "rank %d replay %d node %d (%s): %zu wrong: %s", rank, replay, n,
                 kNodes[n].algo < 0 ? "auto" : fcclAlgoName(kNodes[n].algo), wrong, message);
      bad += wrong != 0;
      if (call < COLL_MAX_HASHES)
        args->shared->hashes[call][rank] = refHash(out, kNodes[n].count * fcclTypeSize(kNodes[n].type)) | 1;
    }
    /* Every 100 replays an eager call on another stream: graph and eager calls share the epoch counters. */
    if (replay % 100 == 99) {
      struct collCase c = {fcclFloat32, fcclSum, replay % 200 == 99 ? FCCL_ALGO_LL : FCCL_ALGO_TWOSHOT_STAGED,
                           0, 4097, 0, 0};
      collRunCase(&eager, &c, 1000000 + eagerCall++);
    }
  }
  if (rank == 0)
    printf("%d replays of %d nodes checked in %.2f s\n", replays, NODES + 2, (double)(collNowNs() - start) / 1e9);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  args->shared->flags[0] = replays * NODES;

  collContextFini(&eager);
  EXPECT_EQ_INT(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ_INT(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
  cudaFreeHost(hostIn);
  cudaFreeHost(hostOut);
  collBufferDestroy(comm, &send);
  collBufferDestroy(comm, &recv);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  char name[32];
  snprintf(name, sizeof(name), "graph rank %d", rank);
  return testSummary(name);
}

int main(int argc, char** argv) { return collReplayMain(argc, argv, "graph", rankMain, 600); }
