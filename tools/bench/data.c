/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The data on the GPUs: a rank's inputs written from the host pattern (check.c), results poisoned before a checked
 * run and read back to be counted, and the hidden --inject-corruption. Everything goes through the agent's pinned
 * staging chunk, so gigabytes move at copy speed with bounded host memory.
 */
#include "runtime_internal.h"

int benchUpload(benchAgent_t* agent, int gpu, void* dst, size_t count, int type, int op, uint64_t seed) {
  size_t size = benchTypeSize(type);
  size_t chunk = agent->stagingBytes / size;
  if (benchUseDevice(agent, gpu) != 0) return -1;
  for (size_t first = 0; first < count; first += chunk) {
    size_t n = count - first < chunk ? count - first : chunk;
    benchFillInput(agent->staging, n, first, type, op, agent->firstRank + gpu, agent->nranks, seed);
    BENCH_CHECK_CUDA(agent, cudaMemcpyAsync((char*)dst + first * size, agent->staging, n * size,
                                            cudaMemcpyHostToDevice, agent->streams[gpu]));
    BENCH_CHECK_CUDA(agent, cudaStreamSynchronize(agent->streams[gpu]));
  }
  return 0;
}

int benchCheck(benchAgent_t* agent, int gpu, const benchChecker_t* checker, const void* src, size_t count,
               int64_t* wrong) {
  size_t size = checker->elemSize;
  size_t chunk = agent->stagingBytes / size;
  int64_t total = 0;
  int status = benchUseDevice(agent, gpu);
  for (size_t first = 0; first < count && status == 0; first += chunk) {
    size_t n = count - first < chunk ? count - first : chunk;
    cudaError_t copied = cudaMemcpyAsync(agent->staging, (const char*)src + first * size, n * size,
                                         cudaMemcpyDeviceToHost, agent->streams[gpu]);
    if (copied == cudaSuccess) copied = cudaStreamSynchronize(agent->streams[gpu]);
    if (copied != cudaSuccess) {
      (void)cudaGetLastError();
      benchFail(agent, "reading back rank %d's result failed: %s", agent->firstRank + gpu,
                cudaGetErrorString(copied));
      status = -1;
      break;
    }
    total += benchCheckerCount(checker, agent->staging, n, first);
  }
  *wrong = total;
  return status;
}

int benchPoison(benchAgent_t* agent, int gpu, void* dst, size_t bytes) {
  if (benchUseDevice(agent, gpu) != 0) return -1;
  BENCH_CHECK_CUDA(agent, cudaMemsetAsync(dst, BENCH_POISON_BYTE, bytes, agent->streams[gpu]));
  return 0;
}

int benchCorrupt(benchAgent_t* agent, int gpu, void* ptr, size_t index, int type) {
  unsigned char byte = 0;
  char* where = (char*)ptr + (index + 1) * benchTypeSize(type) - 1; /* the top byte (little-endian) */
  if (benchUseDevice(agent, gpu) != 0) return -1;
  /* On the rank's stream, waited for: a cudaMemcpy from pageable memory may return before its copy lands, and the
   * check reads back on this (non-blocking) stream, which does not wait for the legacy stream. */
  BENCH_CHECK_CUDA(agent, cudaMemcpyAsync(&byte, where, 1, cudaMemcpyDeviceToHost, agent->streams[gpu]));
  BENCH_CHECK_CUDA(agent, cudaStreamSynchronize(agent->streams[gpu]));
  byte ^= 0x40;
  BENCH_CHECK_CUDA(agent, cudaMemcpyAsync(where, &byte, 1, cudaMemcpyHostToDevice, agent->streams[gpu]));
  BENCH_CHECK_CUDA(agent, cudaStreamSynchronize(agent->streams[gpu]));
  return 0;
}
