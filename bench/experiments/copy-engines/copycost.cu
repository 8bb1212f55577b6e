/* SPDX-License-Identifier: Apache-2.0 */
// Where the fixed cost of the copy-engine reduce-scatter goes: CUDA graphs on GPUs 0 and 1 of one process,
// replayed at once, us per op (the slower GPU). An op is some of: a cross-GPU barrier kernel (B), a peer copy of N
// bytes into the other GPU's memory (C), an empty kernel after it (K). The library's call is B + C + the two-shot
// kernel; comparing B, B + C, C + K, B + C + K and C alone at 1 MiB and 128 MiB splits its fixed cost into the
// barrier and the kernel-to-copy and copy-to-kernel edges. The last two ops put stream memory operations (a write of
// the peer's flag, and a wait that is always satisfied) before the copy instead of a kernel. Every wait gives up
// after 2 s. docs/perf/notes/copy-engines.md has the results.
//   usage: copycost
#include <cuda.h>

#include <cstdint>

#include "graph_harness.cuh"
#include "primitives.cuh"

using fccl::globaltimer_ns;
using fccl::ld_relaxed_sys;
using fccl::st_relaxed_sys;

namespace {

constexpr int kOpsPerGraph = 10;
constexpr int kReplays = 5;
constexpr uint64_t kGiveUpNs = 2000000000ull;

// Stream memory operations (driver API, reached through the runtime's entry points, as the library reaches the
// driver).
typedef CUresult (*WriteValue64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
typedef CUresult (*WaitValue64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
WriteValue64 writeValue64;
WaitValue64 waitValue64;

// Cross-GPU barrier: the epoch in our own memory (advanced here), our flag (the peer posts), the peer's flag.
__global__ void barrierKernel(uint64_t* epoch, uint64_t* mine, uint64_t* peers, int* failed) {
  const uint64_t e = *epoch + 1;
  *epoch = e;
  st_relaxed_sys(peers, e);
  const uint64_t start = globaltimer_ns();
  while (ld_relaxed_sys(mine) < e)
    if (globaltimer_ns() - start > kGiveUpNs) {
      *failed = 1;
      return;
    }
}

__global__ void emptyKernel() {}

struct Gpu : GraphRank {
  uint64_t* epoch;
  uint64_t* flag;
  int* failed;
  char* src;
  char* dst;  // on the other GPU
};

struct Op {
  const char* name;
  bool barrier, kernelAfter, copy;
  int memops;  // 1: a write of the peer's flag before the copy; 2: and a wait on our epoch (always satisfied)
};

void enqueue(Gpu* g, int d, const Op& op, size_t copyBytes) {
  cudaStream_t s = g[d].stream;
  if (op.barrier) barrierKernel<<<1, 32, 0, s>>>(g[d].epoch, g[d].flag, g[1 - d].flag, g[d].failed);
  if (op.memops >= 1 && writeValue64((CUstream)s, (CUdeviceptr)g[1 - d].flag, 0, CU_STREAM_WRITE_VALUE_DEFAULT) !=
                            CUDA_SUCCESS)
    exit(3);
  if (op.memops >= 2 &&
      waitValue64((CUstream)s, (CUdeviceptr)g[d].epoch, 0, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
    exit(3);
  if (copyBytes) CK(cudaMemcpyAsync(g[d].dst, g[d].src, copyBytes, cudaMemcpyDeviceToDevice, s));
  if (op.kernelAfter) emptyKernel<<<1, 32, 0, s>>>();
}

float timeOp(Gpu* g, const Op& op, size_t copyBytes) {
  GraphRank* ranks[2] = {&g[0], &g[1]};
  const float us = timeGraphs(ranks, 2, kOpsPerGraph, kReplays, [&](int d) { enqueue(g, d, op, copyBytes); });
  for (int d = 0; d < 2; d++) {
    int failed = 0;
    CK(cudaSetDevice(d));
    CK(cudaMemcpy(&failed, g[d].failed, sizeof(int), cudaMemcpyDeviceToHost));
    if (failed) {
      fprintf(stderr, "%s: the barrier on GPU %d gave up\n", op.name, d);
      exit(1);
    }
  }
  return us;
}

}  // namespace

int main() {
  const size_t maxBytes = 128ull << 20;
  cudaDriverEntryPointQueryResult found;
  CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", (void**)&writeValue64, 12000, cudaEnableDefault,
                                      &found));
  CK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", (void**)&waitValue64, 12000, cudaEnableDefault, &found));
  if (!writeValue64 || !waitValue64) {
    fprintf(stderr, "no stream memory operations in this driver\n");
    return 2;
  }
  needGpus(2);
  Gpu g[2];
  for (int d = 0; d < 2; d++) {
    g[d].device = d;
    CK(cudaSetDevice(d));
    CK(cudaStreamCreateWithFlags(&g[d].stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g[d].start));
    CK(cudaEventCreate(&g[d].stop));
    CK(cudaMalloc(&g[d].epoch, 8));
    CK(cudaMalloc(&g[d].flag, 8));
    CK(cudaMalloc(&g[d].failed, sizeof(int)));
    CK(cudaMemset(g[d].epoch, 0, 8));
    CK(cudaMemset(g[d].flag, 0, 8));
    CK(cudaMemset(g[d].failed, 0, sizeof(int)));
    CK(cudaMalloc(&g[d].src, maxBytes));
    CK(cudaMemset(g[d].src, d + 1, maxBytes));
  }
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(1 - d));
    CK(cudaMalloc(&g[d].dst, maxBytes));  // GPU d copies into the other GPU's memory
  }
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }
  printf("# us per op, both GPUs at once, graphs of %d ops, best of 3 x %d replays (slower GPU)\n", kOpsPerGraph,
         kReplays);
  printf("%-28s %12s %12s %12s\n", "op", "0 B", "1 MiB", "128 MiB");
  const Op ops[] = {
      {"kernel", false, true, false, 0},
      {"barrier", true, false, false, 0},
      {"barrier + kernel", true, true, false, 0},
      {"copy", false, false, true, 0},
      {"barrier + copy", true, false, true, 0},
      {"copy + kernel", false, true, true, 0},
      {"barrier + copy + kernel", true, true, true, 0},
      {"write + copy + kernel", false, true, true, 1},
      {"write + wait + copy + kernel", false, true, true, 2},
  };
  for (const Op& op : ops) {
    printf("%-28s", op.name);
    if (!op.copy) {
      printf(" %12.2f %12s %12s\n", timeOp(g, op, 0), "-", "-");
      continue;
    }
    printf(" %12s %12.2f %12.2f\n", "-", timeOp(g, op, 1ull << 20), timeOp(g, op, maxBytes));
  }
  return 0;
}
