/* SPDX-License-Identifier: Apache-2.0 */
// Does NVLink carry more per direction when SM stores share it with SM loads or with the copy engines? GPUs 0 and 1
// move 256 MiB towards each other at once, split between methods running at the same time: a kernel whose first
// blocks store into the peer (push) while the others load from it (pull), with the library's data accesses
// (primitives.cuh), and a cudaMemcpyAsync on a second stream. GB/s per direction, best of 3 runs of 10.
// docs/perf/notes/link.md has the results.
//   usage: linkmix
#include <cstdint>

#include "graph_harness.cuh"
#include "primitives.cuh"

using fccl::ld_data16;
using fccl::st_data16;

namespace {

// Blocks [0, pushBlocks) copy pushUnits from the local source into the peer's destination (remote stores); the
// other blocks copy the rest of totalUnits from the peer's source into the local destination (remote loads).
// 4 loads in flight per thread.
__global__ void __launch_bounds__(512) mixCopy(const char* localSrc, char* peerDst, const char* peerSrc, char* localDst,
                                               size_t pushUnits, size_t totalUnits, int pushBlocks) {
  const bool push = (int)blockIdx.x < pushBlocks;
  const int blocks = push ? pushBlocks : (int)gridDim.x - pushBlocks;
  const int block = push ? (int)blockIdx.x : (int)blockIdx.x - pushBlocks;
  const char* src = push ? localSrc : peerSrc + pushUnits * 16;
  char* dst = push ? peerDst : localDst + pushUnits * 16;
  const size_t n = push ? pushUnits : totalUnits - pushUnits;
  const size_t stride = (size_t)blocks * blockDim.x;
  size_t i = (size_t)block * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint64_t lo[4], hi[4];
#pragma unroll
    for (int k = 0; k < 4; k++) ld_data16(src + (i + k * stride) * 16, lo[k], hi[k]);
#pragma unroll
    for (int k = 0; k < 4; k++) st_data16(dst + (i + k * stride) * 16, lo[k], hi[k]);
  }
  for (; i < n; i += stride) {
    uint64_t lo, hi;
    ld_data16(src + i * 16, lo, hi);
    st_data16(dst + i * 16, lo, hi);
  }
}

struct Config {
  const char* name;
  double sm;    // fraction of the bytes moved by the kernel (the rest by cudaMemcpyAsync on a second stream)
  double push;  // fraction of the kernel's bytes moved by remote stores (the rest by remote loads)
  int blocks;   // the kernel's grid
};

}  // namespace

int main() {
  const size_t bytes = (size_t)256 << 20;
  const int iters = 10;
  needGpus(2);
  char* buf[2][2];  // [gpu][source, destination]
  cudaStream_t st[2][2];
  cudaEvent_t ev[2][3];
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaMalloc(&buf[g][0], bytes));
    CK(cudaMalloc(&buf[g][1], bytes));
    CK(cudaMemset(buf[g][0], g + 1, bytes));
    for (int s = 0; s < 2; s++) CK(cudaStreamCreateWithFlags(&st[g][s], cudaStreamNonBlocking));
    for (int e = 0; e < 3; e++) CK(cudaEventCreate(&ev[g][e]));
  }
  const Config configs[] = {
      {"sm push 132", 1, 1, 132},
      {"sm pull 132", 1, 0, 132},
      {"sm push 0.85 pull 0.15 132", 1, 0.85, 132},
      {"sm push 0.7 pull 0.3 132", 1, 0.7, 132},
      {"sm push 0.5 pull 0.5 132", 1, 0.5, 132},
      {"sm push 0.5 pull 0.5 264", 1, 0.5, 264},
      {"ce only", 0, 1, 0},
      {"sm push 0.8 + ce 0.2", 0.8, 1, 132},
      {"sm push 0.6 + ce 0.4", 0.6, 1, 132},
      {"sm push 0.4 + ce 0.6", 0.4, 1, 132},
      {"sm push 0.8 + ce 0.2 (100 blk)", 0.8, 1, 100},
      {"sm push 0.6 + ce 0.4 (66 blk)", 0.6, 1, 66},
  };
  for (const Config& c : configs) {
    const size_t units = bytes / 16;
    const size_t smUnits = (size_t)(units * c.sm) / 4096 * 4096;
    const size_t pushUnits = (size_t)(smUnits * c.push) / 4096 * 4096;
    const int pushBlocks = c.push >= 1 ? c.blocks : c.push <= 0 ? 0 : (int)(c.blocks * c.push + 0.5);
    float best = 1e30f;
    for (int rep = 0; rep < 3; rep++) {
      for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaDeviceSynchronize());
      }
      for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaEventRecord(ev[g][0], st[g][0]));
        CK(cudaStreamWaitEvent(st[g][1], ev[g][0], 0));
        for (int it = 0; it < iters; it++) {
          if (smUnits > 0)
            mixCopy<<<c.blocks, 512, 0, st[g][0]>>>(buf[g][0], buf[1 - g][1], buf[1 - g][0], buf[g][1], pushUnits,
                                                     smUnits, pushBlocks);
          if (smUnits < units)
            CK(cudaMemcpyAsync(buf[1 - g][1] + smUnits * 16, buf[g][0] + smUnits * 16, (units - smUnits) * 16,
                               cudaMemcpyDefault, st[g][1]));
        }
        CK(cudaEventRecord(ev[g][2], st[g][1]));
        CK(cudaStreamWaitEvent(st[g][0], ev[g][2], 0));
        CK(cudaEventRecord(ev[g][1], st[g][0]));
        CK(cudaGetLastError());
      }
      float worst = 0;
      for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaEventSynchronize(ev[g][1]));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[g][0], ev[g][1]));
        if (ms > worst) worst = ms;
      }
      if (worst < best) best = worst;
    }
    // Every byte of GPU 1's destination must hold GPU 0's fill (1) and vice versa: probe the first and last byte
    // of each part.
    bool ok = true;
    for (int g = 0; g < 2; g++) {
      const size_t probes[] = {0, pushUnits * 16, smUnits * 16, bytes - 1};
      for (size_t at : probes) {
        if (at >= bytes) continue;
        unsigned char v = 0;
        CK(cudaMemcpy(&v, buf[g][1] + at, 1, cudaMemcpyDefault));
        if (v != (unsigned char)(2 - g)) ok = false;
      }
      CK(cudaSetDevice(g));
      CK(cudaMemset(buf[g][1], 0, bytes));
    }
    printf("%-34s %7.1f GB/s per direction  (%.1f us per 256 MiB)%s\n", c.name, bytes * iters / (best * 1e-3) / 1e9,
           best * 1e3 / iters, ok ? "" : "  WRONG DATA");
  }
  return 0;
}
