/* SPDX-License-Identifier: Apache-2.0 */
// The graph harness the experiment programs share: a CUDA error check that exits, a check for peer-connected GPUs,
// and the timing of one op replayed in CUDA graphs by several ranks (GPUs of this process) at once. Device code
// comes from the library's own headers (primitives.cuh), so an experiment makes the accesses the kernels make.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

// Exits with a message unless the process sees at least `want` GPUs, each with peer access to the others.
static inline int needGpus(int want) {
  int gpus = 0;
  CK(cudaGetDeviceCount(&gpus));
  if (gpus < want) {
    fprintf(stderr, "needs %d GPUs, found %d\n", want, gpus);
    exit(2);
  }
  for (int d = 0; d < want; d++) {
    CK(cudaSetDevice(d));
    for (int p = 0; p < want; p++) {
      if (p == d) continue;
      int can = 0;
      CK(cudaDeviceCanAccessPeer(&can, d, p));
      if (!can) {
        fprintf(stderr, "GPU %d cannot access GPU %d\n", d, p);
        exit(2);
      }
      CK(cudaDeviceEnablePeerAccess(p, 0));
    }
  }
  return gpus;
}

struct GraphRank {
  int device;
  cudaStream_t stream;
  cudaEvent_t start, stop;
};

// us per op: every rank captures opsPerGraph calls of enqueue(rank) into one graph; the graphs are launched on all
// ranks at once (one warm-up, then `replays` timed), best of 3 turns, the slower rank's time.
template <class Enqueue>
float timeGraphs(GraphRank* const* ranks, int nranks, int opsPerGraph, int replays, Enqueue enqueue) {
  cudaGraphExec_t exec[8];
  for (int d = 0; d < nranks; d++) {
    CK(cudaSetDevice(ranks[d]->device));
    cudaGraph_t graph;
    CK(cudaStreamBeginCapture(ranks[d]->stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < opsPerGraph; i++) enqueue(d);
    CK(cudaStreamEndCapture(ranks[d]->stream, &graph));
    CK(cudaGraphInstantiate(&exec[d], graph, 0));
    CK(cudaGraphDestroy(graph));
  }
  float best = 1e30f;
  for (int turn = 0; turn < 3; turn++) {
    for (int d = 0; d < nranks; d++) {
      CK(cudaSetDevice(ranks[d]->device));
      CK(cudaGraphLaunch(exec[d], ranks[d]->stream));
    }
    for (int d = 0; d < nranks; d++) {
      CK(cudaSetDevice(ranks[d]->device));
      CK(cudaStreamSynchronize(ranks[d]->stream));
    }
    for (int d = 0; d < nranks; d++) {
      CK(cudaSetDevice(ranks[d]->device));
      CK(cudaEventRecord(ranks[d]->start, ranks[d]->stream));
      for (int r = 0; r < replays; r++) CK(cudaGraphLaunch(exec[d], ranks[d]->stream));
      CK(cudaEventRecord(ranks[d]->stop, ranks[d]->stream));
    }
    float slowest = 0;
    for (int d = 0; d < nranks; d++) {
      CK(cudaSetDevice(ranks[d]->device));
      CK(cudaEventSynchronize(ranks[d]->stop));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, ranks[d]->start, ranks[d]->stop));
      if (ms > slowest) slowest = ms;
    }
    if (slowest < best) best = slowest;
  }
  for (int d = 0; d < nranks; d++) {
    CK(cudaSetDevice(ranks[d]->device));
    CK(cudaGraphExecDestroy(exec[d]));
  }
  return best * 1000.0f / (opsPerGraph * replays);
}
