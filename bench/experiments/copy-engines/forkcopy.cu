/* SPDX-License-Identifier: Apache-2.0 */
// Could the copy-engine reduce-scatter hide its copy-to-kernel edge? A call of the library is, on one stream, a
// barrier kernel (B), a copy of N bytes into the peer (C) and the two-shot kernel (K). The fork runs C on a second
// stream and ends it with a stream memory write of the peer's flag (W); K starts right after B on the first stream,
// beside the copy, and spins (bounded) until the flag arrives; the second stream joins the first at the end of the
// op. Two ranks, each a stream pair on GPU r % (number of GPUs): on one GPU the copies stay in its memory, so the
// edges are timed but not NVLink. The "pull" shapes copy the other way: each rank's copy reads the peer's buffer
// into its own memory (what a reduce-scatter by copies pulled by the owner does), to see whether a copy that writes
// locally ends sooner. us per op, graphs of 10 ops replayed at once on both ranks, best of 3 turns of 5 replays, the
// slower rank (graph_harness.cuh). docs/perf/notes/copy-engines.md has the results.
//   usage: forkcopy
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
constexpr int kBlocks = 132;
constexpr int kThreads = 512;
constexpr unsigned long long kSpinNs = 200000000ull;  // 0.2 s: a stuck shape shows at once

typedef CUresult (*WriteValue64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
WriteValue64 writeValue64;

// Cross-rank barrier: epoch in our memory, our flag (the peer posts), the peer's flag (we post).
__global__ void barrierKernel(uint64_t* epoch, uint64_t* mine, uint64_t* peers, int* failed) {
  const uint64_t e = *epoch + 1;
  *epoch = e;
  st_relaxed_sys(peers, e);
  const uint64_t start = globaltimer_ns();
  while (ld_relaxed_sys(mine) < e)
    if (globaltimer_ns() - start > kSpinNs) {
      *failed = 1;
      return;
    }
}

// Stands for the two-shot kernel's launch: a full grid. With wait, every block spins until the peer's stream wrote
// 1 into copied (its copy into our memory completed); the last block to see it sets it back to 0 for the next op
// (the peer writes again only after the next barrier, which this kernel's end precedes).
__global__ void gridKernel(uint64_t* copied, unsigned* arrived, int wait, int* failed) {
  if (!wait || threadIdx.x != 0) return;
  const uint64_t start = globaltimer_ns();
  while (ld_relaxed_sys(copied) != 1)
    if (globaltimer_ns() - start > kSpinNs) {
      *failed = 2;
      return;
    }
  if (atomicAdd(arrived, 1u) == gridDim.x - 1) {
    st_relaxed_sys(copied, 0);
    *arrived = 0;
  }
}

struct Rank : GraphRank {
  cudaStream_t side;
  cudaEvent_t fork, join;
  uint64_t* epoch;
  uint64_t* flag;    // barrier flag, posted by the peer
  uint64_t* copied;  // "your copy arrived", written by the peer's side stream
  unsigned* arrived;
  int* failed;
  char* src;
  char* dst;      // in the peer's memory
  char* local;    // in ours: where a pulled copy lands
};

enum Shape { kSerial, kForkJoinFirst, kForkSpin, kCopyOnly, kCopyKernel, kPullOnly, kPullKernel, kPullSerial };

void enqueue(Rank* r, Rank* peer, Shape shape, size_t bytes) {
  cudaStream_t s = r->stream;
  const bool pull = shape == kPullOnly || shape == kPullKernel || shape == kPullSerial;
  char* to = pull ? r->local : r->dst;
  const char* from = pull ? peer->src : r->src;
  if (shape == kCopyOnly || shape == kCopyKernel || shape == kPullOnly || shape == kPullKernel) {
    CK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, s));
    if (shape == kCopyKernel || shape == kPullKernel)
      gridKernel<<<kBlocks, kThreads, 0, s>>>(r->copied, r->arrived, 0, r->failed);
    return;
  }
  barrierKernel<<<1, 32, 0, s>>>(r->epoch, r->flag, peer->flag, r->failed);
  if (shape == kSerial || shape == kPullSerial) {
    CK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, s));
    gridKernel<<<kBlocks, kThreads, 0, s>>>(r->copied, r->arrived, 0, r->failed);
    return;
  }
  CK(cudaEventRecord(r->fork, s));
  CK(cudaStreamWaitEvent(r->side, r->fork, 0));
  CK(cudaMemcpyAsync(r->dst, r->src, bytes, cudaMemcpyDeviceToDevice, r->side));
  if (shape == kForkSpin &&
      writeValue64((CUstream)r->side, (CUdeviceptr)peer->copied, 1, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
    fprintf(stderr, "cuStreamWriteValue64 failed\n");
    exit(3);
  }
  CK(cudaEventRecord(r->join, r->side));
  if (shape == kForkJoinFirst) CK(cudaStreamWaitEvent(s, r->join, 0));  // the copy, then the kernel
  gridKernel<<<kBlocks, kThreads, 0, s>>>(r->copied, r->arrived, shape == kForkSpin, r->failed);
  if (shape == kForkSpin) CK(cudaStreamWaitEvent(s, r->join, 0));
}

float timeOp(Rank* ranks, Shape shape, size_t bytes) {
  GraphRank* graphRanks[2] = {&ranks[0], &ranks[1]};
  const float us = timeGraphs(graphRanks, 2, kOpsPerGraph, kReplays,
                              [&](int d) { enqueue(&ranks[d], &ranks[1 - d], shape, bytes); });
  for (int d = 0; d < 2; d++) {
    int failed = 0;
    CK(cudaSetDevice(ranks[d].device));
    CK(cudaMemcpy(&failed, ranks[d].failed, sizeof(int), cudaMemcpyDeviceToHost));
    if (failed) {
      fprintf(stderr, "rank %d: a spin gave up (%s)\n", d, failed == 1 ? "barrier" : "copied flag");
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
  setvbuf(stdout, nullptr, _IONBF, 0);
  int gpus = 0;
  CK(cudaGetDeviceCount(&gpus));
  Rank ranks[2];
  for (int d = 0; d < 2; d++) {
    Rank* r = &ranks[d];
    r->device = d % gpus;
    CK(cudaSetDevice(r->device));
    if (gpus > 1) CK(cudaDeviceEnablePeerAccess((d + 1) % gpus, 0));
    CK(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&r->side, cudaStreamNonBlocking));
    CK(cudaEventCreate(&r->start));
    CK(cudaEventCreate(&r->stop));
    CK(cudaEventCreateWithFlags(&r->fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&r->join, cudaEventDisableTiming));
    CK(cudaMalloc(&r->epoch, 8));
    CK(cudaMalloc(&r->flag, 8));
    CK(cudaMalloc(&r->copied, 8));
    CK(cudaMalloc(&r->arrived, sizeof(unsigned)));
    CK(cudaMalloc(&r->failed, sizeof(int)));
    CK(cudaMemset(r->epoch, 0, 8));
    CK(cudaMemset(r->flag, 0, 8));
    CK(cudaMemset(r->copied, 0, 8));
    CK(cudaMemset(r->arrived, 0, sizeof(unsigned)));
    CK(cudaMemset(r->failed, 0, sizeof(int)));
    CK(cudaMalloc(&r->src, maxBytes));
    CK(cudaMemset(r->src, d + 1, maxBytes));
    CK(cudaMalloc(&r->local, maxBytes));
  }
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(ranks[1 - d].device));
    CK(cudaMalloc(&ranks[d].dst, maxBytes));  // rank d writes into its peer's memory
  }
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(ranks[d].device));
    CK(cudaDeviceSynchronize());
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("# %d rank(s) per GPU, %d GPU(s) (%s); us per op, graphs of %d ops, best of 3 x %d replays, slower rank\n",
         gpus > 1 ? 1 : 2, gpus, prop.name, kOpsPerGraph, kReplays);
  printf("%-44s %12s %12s\n", "op", "1 MiB", "128 MiB");
  const struct {
    const char* name;
    Shape shape;
  } ops[] = {
      {"copy", kCopyOnly},
      {"copy + kernel", kCopyKernel},
      {"barrier + copy + kernel (the library now)", kSerial},
      {"barrier + fork(copy) + join + kernel", kForkJoinFirst},
      {"pull", kPullOnly},
      {"pull + kernel", kPullKernel},
      {"barrier + pull + kernel", kPullSerial},
      {"barrier + fork(copy + write) + spinning kernel", kForkSpin},
  };
  for (auto& op : ops) {
    printf("%-44s", op.name);
    printf(" %12.2f", timeOp(ranks, op.shape, 1ull << 20));
    printf(" %12.2f\n", timeOp(ranks, op.shape, maxBytes));
  }
  return 0;
}
