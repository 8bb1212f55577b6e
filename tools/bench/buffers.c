/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A data program's buffers: a send and a receive buffer per local rank and measured engine. Plain ones (-R 0)
 * are cudaMalloc'ed once and shared by the engines, so both move the same memory; registered ones (-R 1, 2) come
 * from each engine's allocator and are registered with its communicator, as an application tuned for it would.
 */
#include "runtime_internal.h"

#include <math.h>
#include <string.h>

static int allocOne(benchAgent_t* agent, int gpu, void* arg) {
  const size_t* sizes = (const size_t*)arg; /* send, recv */
  const int kind = agent->args.localRegister;
  for (int engine = 0; engine < agent->nEngines; engine++) {
    const benchEngineOps_t* ops = agent->engines[engine].ops;
    benchBuffers_t* b = &agent->buffers[gpu][engine];
    b->sendBytes = sizes[0];
    b->recvBytes = sizes[1];
    if (kind == BENCH_BUFFERS_PLAIN && engine > 0) {
      *b = agent->buffers[gpu][0];
      b->kind = BENCH_ALLOC_ALIAS;
      continue;
    }
    char** ptrs[2] = {&b->send, &b->recv};
    for (int i = 0; i < 2; i++) {
      const size_t bytes = sizes[i];
      void* ptr = NULL;
      if (kind == BENCH_BUFFERS_PLAIN) {
        BENCH_CHECK_CUDA(agent, cudaMalloc(&ptr, bytes));
        b->kind = BENCH_ALLOC_CUDA;
      } else {
        if (ops->memAlloc(agent, engine, gpu, bytes, &ptr) != 0) return -1;
        b->kind = BENCH_ALLOC_ENGINE;
      }
      *ptrs[i] = (char*)ptr;
      BENCH_CHECK_CUDA(agent, cudaMemset(ptr, 0, bytes));
      if (kind != BENCH_BUFFERS_PLAIN && ops->registerBuffer(agent, engine, gpu, kind, ptr, bytes, &b->reg[i]) != 0)
        return -1;
    }
  }
  return 0;
}

static int freeOne(benchAgent_t* agent, int gpu, void* arg) {
  (void)arg;
  int status = 0;
  for (int engine = agent->nEngines - 1; engine >= 0; engine--) {
    const benchEngineOps_t* ops = agent->engines[engine].ops;
    benchBuffers_t* b = &agent->buffers[gpu][engine];
    if (b->kind == BENCH_ALLOC_ALIAS || b->kind == BENCH_ALLOC_NONE) {
      memset(b, 0, sizeof(*b));
      continue;
    }
    char* ptrs[2] = {b->send, b->recv};
    for (int i = 0; i < 2; i++) {
      if (b->reg[i] && ops->deregisterBuffer(agent, engine, gpu, agent->args.localRegister, b->reg[i]) != 0)
        status = -1;
      if (!ptrs[i]) continue;
      if (b->kind == BENCH_ALLOC_CUDA && cudaFree(ptrs[i]) != cudaSuccess) status = -1;
      if (b->kind == BENCH_ALLOC_ENGINE && ops->memFree(agent, engine, gpu, ptrs[i]) != 0) status = -1;
    }
    memset(b, 0, sizeof(*b));
  }
  return status;
}

/* Shrinks maxBytes, like nccl-tests, when send + receive buffers of every engine would not fit (1 GiB kept free). */
int benchFitMaxBytes(benchAgent_t* agent, int buffersPerSize) {
  size_t freeBytes = 0, totalBytes = 0;
  double fit = INFINITY;
  int sets = (agent->args.localRegister > 0 ? agent->nEngines : 1) * buffersPerSize;
  int sharing = agent->sharedGpus ? (agent->nranks + agent->nDevices - 1) / agent->nDevices : 1;
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    if (benchUseDevice(agent, gpu) != 0) return -1;
    BENCH_CHECK_CUDA(agent, cudaMemGetInfo(&freeBytes, &totalBytes));
    double usable = ((double)freeBytes - (double)(1u << 30)) / sharing;
    fit = fmin(fit, usable / sets - (double)agent->args.unalign * 8 - 4096);
  }
  if (agent->nLocal > 1) BENCH_CHECK_CUDA(agent, cudaSetDevice(agent->devices[0]));
  double limit = fit > 0 ? fit : 0;
  if (benchReduce(agent, &limit, 1, BENCH_REDUCE_MIN) != 0) return -1;
  if ((double)agent->args.maxBytes > limit) {
    agent->args.maxBytes = (size_t)limit;
    if (agent->args.minBytes > agent->args.maxBytes) agent->args.minBytes = agent->args.maxBytes;
    if (agent->output) printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", agent->args.maxBytes);
  }
  return 0;
}

int benchAllocBuffers(benchAgent_t* agent, size_t sendBytes, size_t recvBytes) {
  size_t sizes[2] = {sendBytes, recvBytes};
  return benchForEachGpu(agent, allocOne, sizes);
}

int benchFreeBuffers(benchAgent_t* agent) { return benchForEachGpu(agent, freeOne, NULL); }
