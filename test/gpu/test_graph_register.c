/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Graph registration (FCCL_GRAPH_REGISTER): all-reduces captured into a CUDA graph with buffers that are not
 * registered are registered with every rank for the graph's lifetime and read in place by every replay; on forked
 * ranks (exits 77 without a GPU).
 *   - what registers: calls above the LL / LL128 sizes (cudaMalloc and fcclMemAlloc memory, in and out of place,
 *     odd counts, offsets not 16-byte aligned), but not a small call, and not a call whose ranks disagree on in
 *     place (it stages), counted by fcclCommGetMemStats' commGraphRegistrations (0 with FCCL_GRAPH_REGISTER=0);
 *   - replays with fresh data checked against the float64 reference and bitwise across ranks, with eager calls on
 *     the same buffers in between (they stage: a graph registration is not seen outside its graph);
 *   - destroying the graph releases every registration and every mapping (bounded polling: CUDA runs the release
 *     on its own thread, the communicator's next call finishes it);
 *   - a communicator destroyed before its graph releases the graph's registrations itself, and the graph's later
 *     destruction is harmless.
 *   test_graph_register [nranks]
 */
#include "test_allreduce_common.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MEM_CUDA_MALLOC = 0, MEM_FCCL = 1 };
enum { PLACE_OUT = 0, PLACE_IN = 1, PLACE_RANK0_IN = 2 };

struct node {
  fcclDataType_t type;
  fcclRedOp_t op;
  size_t count;
  int place;
  int memory;
  size_t sendOffset; /* bytes into the node's region of its memory's send / recv buffer */
  size_t recvOffset;
  int registers;     /* buffers the node registers (recv, and send when out of place) */
};

#define NODES 5
static const struct node kNodes[NODES] = {
    {fcclBfloat16, fcclSum, 1500003, PLACE_OUT, MEM_CUDA_MALLOC, 2, 6, 2},
    {fcclFloat32, fcclMax, 2000001, PLACE_IN, MEM_FCCL, 4, 4, 1},
    {fcclBfloat16, fcclSum, 9000000, PLACE_OUT, MEM_FCCL, 0, 0, 2}, /* 2 ranks: the reduce-scatter by push */
    {fcclFloat32, fcclSum, 1000, PLACE_OUT, MEM_CUDA_MALLOC, 0, 8, 0},      /* LL: stages */
    {fcclFloat16, fcclSum, 1200001, PLACE_RANK0_IN, MEM_CUDA_MALLOC, 2, 2, 0}, /* in place on rank 0 only */
};
#define REGION (20u << 20) /* bytes of each node's region in its memory's buffers */

static uint64_t graphRegistrations(fcclComm_t comm, uint64_t* openMappings) {
  fcclMemStats_t stats;
  memset(&stats, 0, sizeof(stats));
  stats.size = sizeof(stats);
  EXPECT_EQ_INT(fcclCommGetMemStats(comm, &stats), fcclSuccess);
  if (openMappings) *openMappings = stats.openMappings;
  return stats.commGraphRegistrations;
}

/* Bounded: CUDA destroys a graph's user objects on a thread of its own, soon after the graph goes. */
static int waitReleased(fcclComm_t comm, cudaStream_t stream, uint64_t* openMappings) {
  for (int attempt = 0; attempt < 1000; attempt++) {
    /* Any call releases what destroyed graphs held; a count of 0 moves nothing. */
    EXPECT_EQ_INT(fcclAllReduce(NULL, NULL, 0, fcclFloat32, fcclSum, comm, stream), fcclSuccess);
    if (graphRegistrations(comm, openMappings) == 0) return 1;
    usleep(10000);
  }
  return 0;
}

static int rankMain(int rank, int nranks, void* arg) {
  const struct collReplayArgs* args = arg;
  const char* setting = getenv("FCCL_GRAPH_REGISTER");
  const int enabled = setting == NULL || atoi(setting) != 0;
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  cudaStream_t stream;
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  uint64_t mappingsBefore = 0;
  EXPECT_EQ_INT(graphRegistrations(comm, &mappingsBefore), 0);

  /* Plain buffers of both kinds: cudaMalloc (legacy IPC) and fcclMemAlloc (cuMem), never fcclCommRegister'ed. */
  char *send[2] = {NULL, NULL}, *recv[2] = {NULL, NULL};
  EXPECT_EQ_INT(cudaMalloc((void**)&send[MEM_CUDA_MALLOC], NODES * REGION), cudaSuccess);
  EXPECT_EQ_INT(cudaMalloc((void**)&recv[MEM_CUDA_MALLOC], NODES * REGION), cudaSuccess);
  EXPECT_EQ_INT(fcclMemAlloc((void**)&send[MEM_FCCL], NODES * REGION), fcclSuccess);
  EXPECT_EQ_INT(fcclMemAlloc((void**)&recv[MEM_FCCL], NODES * REGION), fcclSuccess);
  void *hostIn = NULL, *hostOut = NULL;
  EXPECT_EQ_INT(cudaMallocHost(&hostIn, NODES * REGION), cudaSuccess);
  EXPECT_EQ_INT(cudaMallocHost(&hostOut, NODES * REGION), cudaSuccess);
  if (testFailed) return 1;
  char* sendAt[NODES];
  char* recvAt[NODES];
  int expected = 0;
  for (int n = 0; n < NODES; n++) {
    const struct node* node = &kNodes[n];
    const int inPlace = node->place == PLACE_IN || (node->place == PLACE_RANK0_IN && rank == 0);
    sendAt[n] = send[node->memory] + (size_t)n * REGION + node->sendOffset;
    recvAt[n] = inPlace ? sendAt[n] : recv[node->memory] + (size_t)n * REGION + node->recvOffset;
    expected += enabled ? node->registers : 0;
  }

  /* Capture, in global mode as PyTorch does: the registration's CUDA calls must not invalidate it. */
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  EXPECT_EQ_INT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  for (int n = 0; n < NODES; n++)
    EXPECT_EQ_INT(fcclAllReduce(sendAt[n], recvAt[n], kNodes[n].count, kNodes[n].type, kNodes[n].op, comm, stream),
                  fcclSuccess);
  EXPECT_EQ_INT(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ_INT(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ_INT(graphRegistrations(comm, NULL), (uint64_t)expected);
  if (testFailed) return 1;

  const int replays = collQuick() ? 20 : 60; /* large calls: the host reference dominates */
  uint64_t call = 0;
  int bad = 0;
  for (int replay = 0; replay < replays && bad < 5; replay++) {
    const int eager = replay % 10 == 9; /* the same calls without the graph: they stage */
    for (int n = 0; n < NODES; n++) {
      const size_t bytes = kNodes[n].count * fcclTypeSize(kNodes[n].type);
      char* host = (char*)hostIn + (size_t)n * REGION;
      refFillInput(kNodes[n].type, args->seed, call + n, rank, 0, host, kNodes[n].count);
      EXPECT_EQ_INT(cudaMemcpyAsync(sendAt[n], host, bytes, cudaMemcpyHostToDevice, stream), cudaSuccess);
      if (recvAt[n] != sendAt[n]) EXPECT_EQ_INT(cudaMemsetAsync(recvAt[n], COLL_POISON, bytes, stream), cudaSuccess);
    }
    if (eager) {
      for (int n = 0; n < NODES; n++)
        EXPECT_EQ_INT(fcclAllReduce(sendAt[n], recvAt[n], kNodes[n].count, kNodes[n].type, kNodes[n].op, comm,
                                    stream),
                      fcclSuccess);
    } else {
      EXPECT_EQ_INT(cudaGraphLaunch(exec, stream), cudaSuccess);
    }
    for (int n = 0; n < NODES; n++)
      EXPECT_EQ_INT(cudaMemcpyAsync((char*)hostOut + (size_t)n * REGION, recvAt[n],
                                    kNodes[n].count * fcclTypeSize(kNodes[n].type), cudaMemcpyDeviceToHost, stream),
                    cudaSuccess);
    EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
    for (int n = 0; n < NODES; n++) {
      char message[512];
      const char* out = (const char*)hostOut + (size_t)n * REGION;
      size_t wrong = refCheckBuffer(kNodes[n].type, kNodes[n].op, args->seed, call + n, nranks, out, kNodes[n].count,
                                    message, sizeof(message));
      EXPECT_MSG(wrong == 0, "rank %d replay %d node %d (%s): %zu wrong: %s", rank, replay, n,
                 eager ? "eager" : "graph", wrong, message);
      bad += wrong != 0;
      if (call + n < COLL_MAX_HASHES)
        args->shared->hashes[call + n][rank] = refHash(out, kNodes[n].count * fcclTypeSize(kNodes[n].type)) | 1;
    }
    call += NODES;
  }
  if (rank == 0) printf("%d replays of %d calls checked, %d buffer registrations held by the graph\n", replays, NODES,
                        expected);
  args->shared->flags[0] = (int)call;
  EXPECT_EQ_INT(graphRegistrations(comm, NULL), (uint64_t)expected); /* eager calls did not release them */

  /* The graph's end releases its registrations and their mappings. */
  EXPECT_EQ_INT(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ_INT(cudaGraphDestroy(graph), cudaSuccess);
  uint64_t mappingsAfter = 0;
  EXPECT_MSG(waitReleased(comm, stream, &mappingsAfter), "rank %d: graph registrations still held 10 s after the "
             "graph was destroyed", rank);
  EXPECT_EQ_INT(mappingsAfter, mappingsBefore);

  /* A communicator destroyed before its graph: it releases the graph's registrations itself. */
  EXPECT_EQ_INT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ_INT(fcclAllReduce(sendAt[0], recvAt[0], kNodes[0].count, kNodes[0].type, kNodes[0].op, comm, stream),
                fcclSuccess);
  EXPECT_EQ_INT(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ_INT(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ_INT(graphRegistrations(comm, NULL), enabled ? (uint64_t)kNodes[0].registers : 0);
  EXPECT_EQ_INT(cudaGraphLaunch(exec, stream), cudaSuccess);
  EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  fcclMemStats_t process;
  memset(&process, 0, sizeof(process));
  process.size = sizeof(process);
  EXPECT_EQ_INT(fcclCommGetMemStats(NULL, &process), fcclSuccess);
  EXPECT_MSG(process.openMappings == 0, "rank %d: %llu mappings open after the last communicator was destroyed",
             rank, (unsigned long long)process.openMappings);
  EXPECT_EQ_INT(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ_INT(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ_INT(cudaDeviceSynchronize(), cudaSuccess);

  EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
  cudaFreeHost(hostIn);
  cudaFreeHost(hostOut);
  EXPECT_EQ_INT(cudaFree(send[MEM_CUDA_MALLOC]), cudaSuccess);
  EXPECT_EQ_INT(cudaFree(recv[MEM_CUDA_MALLOC]), cudaSuccess);
  EXPECT_EQ_INT(fcclMemFree(send[MEM_FCCL]), fcclSuccess);
  EXPECT_EQ_INT(fcclMemFree(recv[MEM_FCCL]), fcclSuccess);
  char name[48];
  snprintf(name, sizeof(name), "graph_register rank %d", rank);
  return testSummary(name);
}

int main(int argc, char** argv) { return collReplayMain(argc, argv, "graph_register", rankMain, 300); }
