/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL path's test (test_nccl_path.c): fcclReduce, fcclBcast, fcclGather, fcclScatter and pre-multiplied sums
 * (fcclRedOpCreatePreMulSum: the NCCL op made beside fccl's) on the engine the mode's communicator runs (NCCL, the
 * hierarchical path's world NCCL communicator, or fccl's kernels), against the float64 host reference: reductions
 * within NCCL's or fccl's rules, moves bit for bit, the buffers only the root uses left alone elsewhere; one reduce
 * with a device scalar, a gather and a scatter captured in a graph and replayed with a new scalar each time.
 */
#include "test_nccl_path.h"

#include "test.h"
#include "test_allreduce_ref.h"

#include <cuda_runtime.h>
#include <fccl.h>
#include <string.h>

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

#define POISON 0xa5

static void* deviceScalar; /* 8 bytes of device memory: the device scalars' */

/* A pre-multiplied sum's scalar of type: a third (negative for bfloat16) for floats, a small integer otherwise. */
static uint64_t scalarOf(fcclDataType_t type) {
  switch (type) {
    case fcclFloat16: return 0x3555;
    case fcclBfloat16: return 0xbeab;
    case fcclFloat32: {
      const float third = 1.0f / 3.0f;
      uint32_t bits;
      memcpy(&bits, &third, sizeof(bits));
      return bits;
    }
    case fcclFloat64: {
      const double third = 1.0 / 3.0;
      uint64_t bits;
      memcpy(&bits, &third, sizeof(bits));
      return bits;
    }
    case fcclInt8: return 0xfd;
    case fcclInt32: return 0xfffffffbu;
    case fcclInt64: return 0xfffffffffffffffdull;
    default: return 3;
  }
}

static int upload(struct rankState* s, fcclDataType_t type, void* dst, size_t count) {
  refFillInput(type, s->seed, s->call, s->rank, 0, s->host, count);
  CHECK_CUDA("upload", cudaMemcpyAsync(dst, s->host, count * fcclTypeSize(type), cudaMemcpyHostToDevice, s->stream));
  return 0;
}

static int poisonBoth(struct rankState* s) {
  CHECK_CUDA("poison", cudaMemsetAsync(s->send, POISON, s->capacity, s->stream));
  CHECK_CUDA("poison", cudaMemsetAsync(s->recv, POISON, s->capacity, s->stream));
  return 0;
}

static int download(struct rankState* s, const void* src, size_t bytes) {
  CHECK_CUDA("sync", cudaStreamSynchronize(s->stream));
  CHECK_CUDA("download", cudaMemcpy(s->host, src, bytes, cudaMemcpyDeviceToHost));
  return 0;
}

static int untouched(struct rankState* s, const void* src, size_t bytes, const char* what) {
  if (download(s, src, bytes)) return 1;
  const unsigned char* host = s->host;
  for (size_t i = 0; i < bytes; i++)
    if (host[i] != POISON) {
      testFail(__FILE__, __LINE__, "rank %d: call %llu: %s: byte %zu written", s->rank, (unsigned long long)s->call,
               what, i);
      return 1;
    }
  return 0;
}

static int report(struct rankState* s, const char* what, fcclDataType_t type, size_t count, size_t bad,
                  const char* msg) {
  EXPECT_MSG(bad == 0, "rank %d: call %llu: %s %s x %zu: %zu wrong: %s", s->rank, (unsigned long long)s->call, what,
             refTypeName(type), count, bad, msg);
  return bad != 0;
}

/* A pre-multiplied sum of type: from the host, or a device scalar written after the op was made. */
static int makePreMul(struct rankState* s, fcclDataType_t type, int onDevice, fcclRedOp_t* op) {
  const uint64_t scalar = scalarOf(type);
  if (!onDevice) {
    CHECK_FCCL("premul", fcclRedOpCreatePreMulSum(op, (void*)&scalar, type, fcclScalarHostImmediate, s->comm));
    return 0;
  }
  CHECK_CUDA("premul", cudaMemsetAsync(deviceScalar, 0x7f, 8, s->stream));
  CHECK_FCCL("premul", fcclRedOpCreatePreMulSum(op, deviceScalar, type, fcclScalarDevice, s->comm));
  CHECK_CUDA("premul", cudaMemcpyAsync(deviceScalar, &scalar, fcclTypeSize(type), cudaMemcpyHostToDevice, s->stream));
  return 0;
}

/* premul: 0 the built-in op, 1 a pre-multiplied sum from the host, 2 with a device scalar. Off the root recvbuf is
 * NULL on odd calls, else a buffer that must stay as it was. */
static int runReduce(struct rankState* s, fcclDataType_t type, fcclRedOp_t op, size_t count, int root, int inPlace,
                     int premul) {
  char msg[256];
  const size_t bytes = count * fcclTypeSize(type);
  const int isRoot = s->rank == root;
  void* recv = inPlace ? s->send : !isRoot && s->call % 2 ? NULL : s->recv;
  if (poisonBoth(s) || upload(s, type, s->send, count)) return 1;
  if (premul && makePreMul(s, type, premul == 2, &op)) return 1;
  CHECK_FCCL("reduce", fcclReduce(s->send, recv, count, type, op, root, s->comm, s->stream));
  if (premul) CHECK_FCCL("premul", fcclRedOpDestroy(op, s->comm)); /* the enqueued work keeps what it needs */
  int failed = 0;
  if (isRoot) {
    if (download(s, recv, bytes)) return 1;
    const size_t bad = premul ? checkPreMulSum(type, scalarOf(type), s->seed, s->call, s->nranks, 0, s->host, count,
                                               msg, sizeof(msg))
                              : checkReduced(type, op, s->seed, s->call, s->nranks, 0, 0, 0, s->host, count, msg,
                                             sizeof(msg));
    failed = report(s, premul ? "reduce (pre-multiplied)" : "reduce", type, count, bad, msg);
  } else if (recv && !inPlace) {
    failed = untouched(s, recv, bytes, "a reduce's recvbuf off the root");
  }
  s->call++;
  return failed;
}

static int runGather(struct rankState* s, fcclDataType_t type, size_t count, int root, int inPlace) {
  char msg[256];
  const size_t bytes = count * fcclTypeSize(type);
  const int isRoot = s->rank == root;
  char* send = inPlace ? (char*)s->recv + (size_t)s->rank * bytes : s->send;
  void* recv = !isRoot && !inPlace && s->call % 2 ? NULL : s->recv;
  if (poisonBoth(s) || upload(s, type, send, count)) return 1;
  CHECK_FCCL("gather", fcclGather(send, recv, count, type, root, s->comm, s->stream));
  int failed = 0;
  if (isRoot) {
    if (download(s, s->recv, bytes * (size_t)s->nranks)) return 1;
    size_t bad = 0;
    for (int r = 0; r < s->nranks; r++)
      bad += checkMoved(type, s->seed, s->call, r, 0, (char*)s->host + (size_t)r * bytes, count, msg, sizeof(msg));
    failed = report(s, inPlace ? "gather in place" : "gather", type, count, bad, msg);
  } else if (recv && !inPlace) {
    failed = untouched(s, recv, bytes * (size_t)s->nranks, "a gather's recvbuf off the root");
  }
  s->call++;
  return failed;
}

static int runScatter(struct rankState* s, fcclDataType_t type, size_t count, int root, int inPlace) {
  char msg[256];
  const size_t bytes = count * fcclTypeSize(type);
  const int isRoot = s->rank == root;
  char* recv = inPlace ? (char*)s->send + (size_t)s->rank * bytes : s->recv;
  void* send = !isRoot && s->call % 2 ? NULL : s->send;
  if (poisonBoth(s) || (isRoot && upload(s, type, s->send, count * (size_t)s->nranks))) return 1;
  CHECK_FCCL("scatter", fcclScatter(send, recv, count, type, root, s->comm, s->stream));
  if (download(s, recv, bytes)) return 1;
  const size_t bad = checkMoved(type, s->seed, s->call, root, (uint64_t)s->rank * count, s->host, count, msg,
                                sizeof(msg));
  const int failed = report(s, inPlace ? "scatter in place" : "scatter", type, count, bad, msg);
  s->call++;
  return failed;
}

static int runBcast(struct rankState* s, fcclDataType_t type, size_t count, int root) {
  char msg[256];
  if (poisonBoth(s) || upload(s, type, s->send, count)) return 1;
  CHECK_FCCL("bcast", fcclBcast(s->send, count, type, root, s->comm, s->stream));
  if (download(s, s->send, count * fcclTypeSize(type))) return 1;
  const size_t bad = checkMoved(type, s->seed, s->call, root, 0, s->host, count, msg, sizeof(msg));
  const int failed = report(s, "bcast", type, count, bad, msg);
  s->call++;
  return failed;
}

/* The all-reduce's and the reduce-scatter's pre-multiplied sums. */
static int runPreMul(struct rankState* s, fcclDataType_t type, size_t count, int reduceScatter, int onDevice) {
  char msg[256];
  const size_t bytes = count * fcclTypeSize(type);
  fcclRedOp_t op = fcclSum;
  if (poisonBoth(s) || upload(s, type, s->send, reduceScatter ? count * (size_t)s->nranks : count)) return 1;
  if (makePreMul(s, type, onDevice, &op)) return 1;
  if (reduceScatter)
    CHECK_FCCL("reduce-scatter", fcclReduceScatter(s->send, s->recv, count, type, op, s->comm, s->stream));
  else
    CHECK_FCCL("all-reduce", fcclAllReduce(s->send, s->recv, count, type, op, s->comm, s->stream));
  CHECK_FCCL("premul", fcclRedOpDestroy(op, s->comm));
  if (download(s, s->recv, bytes)) return 1;
  const size_t bad = checkPreMulSum(type, scalarOf(type), s->seed, s->call, s->nranks,
                                    reduceScatter ? (uint64_t)s->rank * count : 0, s->host, count, msg, sizeof(msg));
  const int failed = report(s, reduceScatter ? "reduce-scatter (pre-multiplied)" : "all-reduce (pre-multiplied)", type,
                            count, bad, msg);
  s->call++;
  return failed;
}

/* A reduce with a device scalar, a gather and a scatter captured once; each replay with new inputs and a new scalar
 * (the kernel, fccl's or NCCL's, reads it when it runs). */
static int runRootedGraph(struct rankState* s) {
  const size_t count = 2049, bytes = count * sizeof(float);
  const int root = s->nranks - 1;
  char* gathered = (char*)s->recv + 2 * bytes;                  /* nranks blocks */
  char* scattered = gathered + (size_t)s->nranks * bytes + 256; /* one block */
  char* scatterSend = (char*)s->send + 2 * bytes;               /* the root's nranks blocks */
  fcclRedOp_t op = fcclSum;
  CHECK_FCCL("graph premul", fcclRedOpCreatePreMulSum(&op, deviceScalar, fcclFloat32, fcclScalarDevice, s->comm));
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CHECK_CUDA("capture", cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeGlobal));
  fcclResult_t r1 = fcclReduce(s->send, s->recv, count, fcclFloat32, op, root, s->comm, s->stream);
  fcclResult_t r2 = fcclGather(s->send, gathered, count, fcclFloat32, 0, s->comm, s->stream);
  fcclResult_t r3 = fcclScatter(scatterSend, scattered, count, fcclFloat32, root, s->comm, s->stream);
  CHECK_CUDA("capture", cudaStreamEndCapture(s->stream, &graph));
  EXPECT_MSG(r1 == fcclSuccess && r2 == fcclSuccess && r3 == fcclSuccess,
             "rank %d: captured calls returned %d %d %d: %s", s->rank, r1, r2, r3, fcclGetLastError(NULL));
  CHECK_FCCL("graph premul", fcclRedOpDestroy(op, s->comm));
  CHECK_CUDA("instantiate", cudaGraphInstantiate(&exec, graph, 0));
  int failed = 0;
  for (int replay = 0; replay < 3; replay++) {
    char msg[256];
    const float value = 0.25f * (float)(replay + 1);
    uint32_t bits;
    memcpy(&bits, &value, sizeof(bits));
    if (poisonBoth(s) || upload(s, fcclFloat32, s->send, count)) return 1;
    if (s->rank == root) {                                    /* the scatter's input: the next call number's elements */
      CHECK_CUDA("upload", cudaStreamSynchronize(s->stream)); /* the host buffer is the upload's source */
      refFillInput(fcclFloat32, s->seed, s->call + 1, s->rank, 0, s->host, count * (size_t)s->nranks);
      CHECK_CUDA("upload",
                 cudaMemcpyAsync(scatterSend, s->host, (size_t)s->nranks * bytes, cudaMemcpyHostToDevice, s->stream));
    }
    CHECK_CUDA("scalar", cudaMemcpyAsync(deviceScalar, &bits, 4, cudaMemcpyHostToDevice, s->stream));
    CHECK_CUDA("replay", cudaGraphLaunch(exec, s->stream));
    size_t bad = 0;
    if (s->rank == root) {
      if (download(s, s->recv, bytes)) return 1;
      bad += checkPreMulSum(fcclFloat32, bits, s->seed, s->call, s->nranks, 0, s->host, count, msg, sizeof(msg));
    }
    if (s->rank == 0) {
      if (download(s, gathered, bytes * (size_t)s->nranks)) return 1;
      for (int r = 0; r < s->nranks; r++)
        bad += checkMoved(fcclFloat32, s->seed, s->call, r, 0, (char*)s->host + (size_t)r * bytes, count, msg,
                          sizeof(msg));
    }
    if (download(s, scattered, bytes)) return 1;
    bad += checkMoved(fcclFloat32, s->seed, s->call + 1, root, (uint64_t)s->rank * count, s->host, count, msg,
                      sizeof(msg));
    failed |= report(s, "graph reduce/gather/scatter", fcclFloat32, count, bad, msg);
    s->call += 2;
  }
  CHECK_CUDA("graph", cudaGraphExecDestroy(exec));
  CHECK_CUDA("graph", cudaGraphDestroy(graph));
  return failed;
}

int runRooted(struct rankState* s) {
  static const fcclDataType_t types[] = {fcclFloat32, fcclBfloat16, fcclFloat16, fcclFloat64,
                                         fcclInt32,   fcclUint8,    fcclInt64};
  static const fcclRedOp_t ops[] = {fcclSum, fcclProd, fcclMax, fcclMin, fcclAvg};
  static const size_t counts[] = {1, 7, 1023, 65537};
  if (cudaMalloc(&deviceScalar, 8) != cudaSuccess) {
    testFail(__FILE__, __LINE__, "rank %d: cudaMalloc of the scalar failed", s->rank);
    return 1;
  }
  int failed = 0;
  unsigned k = 0;
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++, k++) {
      const int root = (int)(k % (unsigned)s->nranks), inPlace = (int)(k % 3 == 1);
      for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
        failed += runReduce(s, types[t], ops[o], counts[c], root, inPlace, 0);
      failed += runReduce(s, types[t], fcclSum, counts[c], root, inPlace, 1 + (int)(k % 2));
      failed += runPreMul(s, types[t], counts[c], 0, (int)(k % 2));
      if (c < 3) failed += runPreMul(s, types[t], counts[c], 1, (int)((k + 1) % 2));
      failed += runGather(s, types[t], counts[c], root, inPlace);
      failed += runScatter(s, types[t], counts[c], (root + 1) % s->nranks, inPlace);
      failed += runBcast(s, types[t], counts[c], root);
    }
  failed += runRootedGraph(s);
  cudaFree(deviceScalar);
  deviceScalar = NULL;
  return failed;
}
