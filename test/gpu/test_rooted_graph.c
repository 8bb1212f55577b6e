/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rooted's graph mode: pre-multiplied sums (a device scalar and a host one), a reduce, a gather, a scatter and a
 * bcast captured in one CUDA graph (global capture mode, PyTorch's), the ops destroyed right after the capture (the
 * graph keeps what it needs, as NCCL allows), then replayed with fresh inputs and new device scalars before every
 * replay: a kernel reads its device scalar when it runs, so every replay's result has that replay's scalar.
 */
#include "test_rooted_common.h"

#include "device.h"

#include <stdlib.h>
#include <string.h>

#define ROOT_LAST (-1)
static const struct rootedCase kNodes[] = {
    {ROOTED_ALLREDUCE, fcclFloat32, ROOTED_PREMUL, ROOTED_AUTO, 0, 100003, 0, 4, 8, 0, 1},
    {ROOTED_REDUCESCATTER, fcclBfloat16, ROOTED_PREMUL, ROOTED_AUTO, 0, 40001, 0, 2, 6, 0, 1},
    {ROOTED_REDUCE, fcclFloat16, ROOTED_PREMUL, ROOTED_AUTO, 1, 5001, 0, 2, 0, 0, 0},
    {ROOTED_REDUCE, fcclBfloat16, fcclAvg, ROOTED_AUTO, 0, 70001, ROOT_LAST, 2, 4, 1, 0},
    {ROOTED_GATHER, fcclInt32, fcclSum, ROOTED_AUTO, 1, 30001, 0, 4, 0, 0, 0},
    {ROOTED_SCATTER, fcclFloat64, fcclSum, FCCL_MOVE_STAGED, 0, 20001, ROOT_LAST, 8, 0, 1, 0},
    {ROOTED_BCAST, fcclUint8, fcclSum, ROOTED_AUTO, 1, 123457, 1, 3, 0, 0, 0},
};
#define NODES ((int)(sizeof(kNodes) / sizeof(kNodes[0])))

struct node {
  struct rootedCase c;
  char* send; /* guard + region + guard */
  char* recv;
  size_t capacity;
  char *sendbuf, *recvbuf, *out, *in;
  size_t outBytes, inElems;
  fcclRedOp_t op;
  void* scalar; /* device memory of a device scalar */
};

/* A device scalar of type for replay r: values that are exact in every float type and differ from replay to replay. */
static uint64_t replayScalar(fcclDataType_t type, int r) {
  const float value = 0.25f * (float)(r % 7 + 1) * (r % 2 ? -1.0f : 1.0f);
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  if (type == fcclFloat32) return bits;
  if (type == fcclBfloat16) return bits >> 16;
  return 0;
}

static int setUp(struct node* n, const struct rootedCase* c, int rank, int nranks, fcclComm_t comm) {
  n->c = *c;
  if (n->c.root == ROOT_LAST) n->c.root = nranks - 1;
  n->c.root %= nranks;
  n->capacity = rootedCapacity(&n->c, nranks);
  const size_t total = n->capacity + 2 * COLL_GUARD;
  if (cudaMalloc((void**)&n->send, total) != cudaSuccess || cudaMalloc((void**)&n->recv, total) != cudaSuccess)
    return 0;
  rootedPlace(n->send + COLL_GUARD, n->recv + COLL_GUARD, &n->c, rank, nranks, &n->sendbuf, &n->recvbuf, &n->out,
              &n->outBytes, &n->in, &n->inElems);
  n->op = (fcclRedOp_t)(n->c.op < 0 ? fcclSum : n->c.op);
  if (n->c.op != ROOTED_PREMUL) return 1;
  if (n->c.scalarOnDevice) {
    if (cudaMalloc(&n->scalar, 8) != cudaSuccess) return 0;
    return fcclRedOpCreatePreMulSum(&n->op, n->scalar, n->c.type, fcclScalarDevice, comm) == fcclSuccess;
  }
  const uint64_t scalar = rootedScalar(n->c.type);
  return fcclRedOpCreatePreMulSum(&n->op, (void*)&scalar, n->c.type, fcclScalarHostImmediate, comm) == fcclSuccess;
}

int rootedModeGraph(int rank, int nranks, struct collShared* shared, uint64_t seed, int gpus);

int rootedModeGraph(int rank, int nranks, struct collShared* shared, uint64_t seed, int gpus) {
  fcclComm_t comm = collCommCreate(shared, rank, nranks, gpus, 0);
  if (!comm) return 1;
  struct node nodes[NODES];
  memset(nodes, 0, sizeof(nodes));
  size_t hostBytes = 0;
  for (int j = 0; j < NODES; j++) {
    if (!setUp(&nodes[j], &kNodes[j], rank, nranks, comm)) {
      testFail(__FILE__, __LINE__, "rank %d: node %d: setup failed: %s", rank, j, fcclGetLastError(NULL));
      return 1;
    }
    if (nodes[j].capacity + 2 * COLL_GUARD > hostBytes) hostBytes = nodes[j].capacity + 2 * COLL_GUARD;
  }
  unsigned char* host = malloc(hostBytes);
  unsigned char* input = malloc(hostBytes);
  cudaStream_t stream;
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);

  /* Capture every node, then destroy the ops: the graph holds the scalars (or their addresses) by value. */
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  EXPECT_EQ_INT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  for (int j = 0; j < NODES; j++) {
    fcclResult_t res = rootedCall(&nodes[j].c, nodes[j].sendbuf, nodes[j].recvbuf, nodes[j].op, comm, stream);
    EXPECT_MSG(res == fcclSuccess, "rank %d: capturing node %d (%s): %s", rank, j, rootedName(nodes[j].c.kind),
               fcclGetLastError(NULL));
  }
  EXPECT_EQ_INT(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  for (int j = 0; j < NODES; j++)
    if (nodes[j].c.op == ROOTED_PREMUL) EXPECT_EQ_INT(fcclRedOpDestroy(nodes[j].op, comm), fcclSuccess);
  EXPECT_EQ_INT(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  const int replays = collQuick() ? 20 : 200;
  int wrong = 0;
  for (int r = 0; r < replays && exec; r++) {
    for (int j = 0; j < NODES; j++) {
      struct node* n = &nodes[j];
      const size_t size = fcclTypeSize(n->c.type);
      const uint64_t call = (uint64_t)r * NODES + (uint64_t)j;
      /* On the graph's stream: ordered before the replay (pageable sources are staged before the calls return). */
      EXPECT_EQ_INT(cudaMemsetAsync(n->send, COLL_POISON, n->capacity + 2 * COLL_GUARD, stream), cudaSuccess);
      EXPECT_EQ_INT(cudaMemsetAsync(n->recv, COLL_POISON, n->capacity + 2 * COLL_GUARD, stream), cudaSuccess);
      refFillInput(n->c.type, seed, call, rank, 0, input, n->inElems);
      if (n->in && n->inElems)
        EXPECT_EQ_INT(cudaMemcpyAsync(n->in, input, n->inElems * size, cudaMemcpyHostToDevice, stream), cudaSuccess);
      if (n->scalar) {
        const uint64_t scalar = replayScalar(n->c.type, r);
        EXPECT_EQ_INT(cudaMemcpyAsync(n->scalar, &scalar, size, cudaMemcpyHostToDevice, stream), cudaSuccess);
      }
    }
    EXPECT_EQ_INT(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ_INT(cudaStreamSynchronize(stream), cudaSuccess);
    for (int j = 0; j < NODES; j++) {
      struct node* n = &nodes[j];
      if (!n->out) continue;
      const uint64_t call = (uint64_t)r * NODES + (uint64_t)j;
      const uint64_t scalar = n->scalar ? replayScalar(n->c.type, r) : rootedScalar(n->c.type);
      EXPECT_EQ_INT(cudaMemcpy(host, n->out - COLL_GUARD, n->outBytes + 2 * COLL_GUARD, cudaMemcpyDeviceToHost),
                    cudaSuccess);
      int guards = 1;
      for (int i = 0; i < COLL_GUARD; i++)
        guards &= host[i] == COLL_POISON && host[COLL_GUARD + n->outBytes + i] == COLL_POISON;
      char message[512];
      const size_t bad = rootedCheckOutput(&n->c, seed, call, rank, nranks, scalar, host + COLL_GUARD, message,
                                           sizeof(message));
      if ((bad || !guards) && wrong++ < 10)
        testFail(__FILE__, __LINE__, "rank %d: replay %d, node %d (%s %s): %zu elements wrong%s: %s", rank, r, j,
                 rootedName(n->c.kind), refTypeName(n->c.type), bad, guards ? "" : ", guards overwritten", message);
      else if (!bad && guards)
        testPassed++;
    }
  }
  fcclResult_t async = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
  EXPECT_EQ_INT(async, fcclSuccess);
  if (rank == 0) printf("%d replays of %d nodes: %d wrong outputs on rank 0\n", replays, NODES, wrong);
  if (exec) EXPECT_EQ_INT(cudaGraphExecDestroy(exec), cudaSuccess);
  if (graph) EXPECT_EQ_INT(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
  for (int j = 0; j < NODES; j++) {
    cudaFree(nodes[j].send);
    cudaFree(nodes[j].recv);
    if (nodes[j].scalar) cudaFree(nodes[j].scalar);
  }
  free(host);
  free(input);
  shared->flags[0] = 0;
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return 0;
}
