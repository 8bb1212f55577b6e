/* SPDX-License-Identifier: Apache-2.0 */
// NVLink bandwidth per direction by method, between GPUs 0 and 1 of one process: SM 16-byte stores into the peer
// (push) and loads from it (pull), both with the library's data accesses (ld_data16 / st_data16, primitives.cuh);
// TMA bulk copies through shared memory; and the copy engines (cudaMemcpyAsync). Both GPUs send 256 MiB at the same
// time unless the name says one-dir; best of 3 runs of 10 copies. docs/perf/notes/link.md has the results.
//   usage: linkbw [name filter]
#include <cstdint>
#include <cstring>

#include "graph_harness.cuh"
#include "primitives.cuh"

using fccl::ld_data16;
using fccl::st_data16;

namespace {

// SM copy of 16-byte units, 8 loads in flight per thread (as the library's pulling loops).
__global__ void __launch_bounds__(512) smCopy(const char* src, char* dst, size_t units) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 7 * stride < units; i += 8 * stride) {
    uint64_t lo[8], hi[8];
#pragma unroll
    for (int k = 0; k < 8; k++) ld_data16(src + (i + k * stride) * 16, lo[k], hi[k]);
#pragma unroll
    for (int k = 0; k < 8; k++) st_data16(dst + (i + k * stride) * 16, lo[k], hi[k]);
  }
  for (; i < units; i += stride) {
    uint64_t lo, hi;
    ld_data16(src + i * 16, lo, hi);
    st_data16(dst + i * 16, lo, hi);
  }
}

// Bulk-copy (TMA) helpers: not in the library, which does not use the TMA. The bulk copies and mbarrier
// transactions exist from sm_90 on; an older target compiles a kernel that traps, and main() skips its rows.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define LINKBW_TMA 1
#endif

#ifdef LINKBW_TMA
__device__ __forceinline__ uint32_t smemAddr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbarInit(uint64_t* m, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smemAddr(m)), "r"(count));
}
__device__ __forceinline__ void mbarExpect(uint64_t* m, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smemAddr(m)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbarWait(uint64_t* m, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(smemAddr(m)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tmaLoad(void* dstSmem, const void* src, uint32_t bytes, uint64_t* m) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smemAddr(dstSmem)),
               "l"(src), "r"(bytes), "r"(smemAddr(m))
               : "memory");
}
__device__ __forceinline__ void tmaStore(void* dst, const void* srcSmem, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smemAddr(srcSmem)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void tmaWaitReadAllButOne() { asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory"); }
__device__ __forceinline__ void tmaWaitAll() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
#endif

// TMA copy: one thread per block drives S stages of C bytes; chunk i of block b is chunk b + i * gridDim.
__global__ void tmaCopy(const char* src, char* dst, size_t bytes, uint32_t C, int S) {
#ifndef LINKBW_TMA
  __trap();
#else
  extern __shared__ __align__(128) char smem[];
  __shared__ uint64_t mbar[16];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < S; s++) mbarInit(&mbar[s], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const size_t chunks = bytes / C;
  const size_t mine = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  auto chunkOff = [&](size_t i) { return (blockIdx.x + i * gridDim.x) * (size_t)C; };
  for (size_t i = 0; i < (size_t)S && i < mine; i++) {
    mbarExpect(&mbar[i], C);
    tmaLoad(smem + i * C, src + chunkOff(i), C, &mbar[i]);
  }
  for (size_t i = 0; i < mine; i++) {
    const int s = (int)(i % S);
    mbarWait(&mbar[s], (uint32_t)((i / S) & 1));
    tmaStore(dst + chunkOff(i), smem + s * C, C);
    if (i >= 1 && i - 1 + S < mine) {
      tmaWaitReadAllButOne();
      const int sp = (int)((i - 1) % S);
      mbarExpect(&mbar[sp], C);
      tmaLoad(smem + sp * C, src + chunkOff(i - 1 + S), C, &mbar[sp]);
    }
  }
  tmaWaitAll();
#endif
}

enum Method { kSm, kTma, kCopyEngine };

struct Config {
  const char* name;
  Method method;
  bool pull;  // push: local source into the peer's destination; pull: the peer's source into the local destination
  int blocks;
  int threads;
  uint32_t chunk;
  int stages;
  bool bothDirections;
};

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = (size_t)256 << 20;
  const int iters = 10;
  needGpus(2);
  int major = 0;
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  char* buf[2][2];  // [gpu][source, destination]
  cudaStream_t st[2];
  cudaEvent_t ev[2][2];
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaMalloc(&buf[g][0], bytes));
    CK(cudaMalloc(&buf[g][1], bytes));
    CK(cudaMemset(buf[g][0], g + 1, bytes));
    CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
    CK(cudaEventCreate(&ev[g][0]));
    CK(cudaEventCreate(&ev[g][1]));
    CK(cudaFuncSetAttribute(tmaCopy, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  }
  const Config configs[] = {
      {"sm push 132x512", kSm, false, 132, 512, 0, 0, true},
      {"sm push 264x512", kSm, false, 264, 512, 0, 0, true},
      {"sm pull 132x512", kSm, true, 132, 512, 0, 0, true},
      {"sm pull 264x512", kSm, true, 264, 512, 0, 0, true},
      {"sm push 132x512 one-dir", kSm, false, 132, 512, 0, 0, false},
      {"tma push 132 C4K S8", kTma, false, 132, 32, 4096, 8, true},
      {"tma push 132 C16K S8", kTma, false, 132, 32, 16384, 8, true},
      {"tma push 132 C32K S4", kTma, false, 132, 32, 32768, 4, true},
      {"tma push 66 C16K S8", kTma, false, 66, 32, 16384, 8, true},
      {"tma push 132 C16K S8 one-dir", kTma, false, 132, 32, 16384, 8, false},
      {"tma pull 132 C16K S8", kTma, true, 132, 32, 16384, 8, true},
      {"ce memcpy", kCopyEngine, false, 0, 0, 0, 0, true},
      {"ce memcpy one-dir", kCopyEngine, false, 0, 0, 0, 0, false},
  };
  for (const Config& c : configs) {
    if (argc > 1 && !strstr(c.name, argv[1])) continue;
    if (c.method == kTma && major < 9) {
      printf("%-32s skipped: bulk copies need compute capability 9.0\n", c.name);
      continue;
    }
    float best = 1e30f;
    for (int rep = 0; rep < 3; rep++) {
      for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaDeviceSynchronize());
      }
      for (int g = 0; g < 2; g++) {
        if (!c.bothDirections && g == 1) continue;
        CK(cudaSetDevice(g));
        const char* src = c.pull ? buf[1 - g][0] : buf[g][0];
        char* dst = c.pull ? buf[g][1] : buf[1 - g][1];
        CK(cudaEventRecord(ev[g][0], st[g]));
        for (int it = 0; it < iters; it++) {
          if (c.method == kSm)
            smCopy<<<c.blocks, c.threads, 0, st[g]>>>(src, dst, bytes / 16);
          else if (c.method == kTma)
            tmaCopy<<<c.blocks, c.threads, c.chunk * c.stages, st[g]>>>(src, dst, bytes, c.chunk, c.stages);
          else
            CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st[g]));
        }
        CK(cudaEventRecord(ev[g][1], st[g]));
        CK(cudaGetLastError());
      }
      float worst = 0;
      for (int g = 0; g < 2; g++) {
        if (!c.bothDirections && g == 1) continue;
        CK(cudaSetDevice(g));
        CK(cudaEventSynchronize(ev[g][1]));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[g][0], ev[g][1]));
        if (ms > worst) worst = ms;
      }
      if (worst < best) best = worst;
    }
    // GPU 0's transfer landed: pushed into GPU 1's destination with GPU 0's fill (1), or pulled into GPU 0's
    // destination with GPU 1's fill (2).
    unsigned char probe[4];
    CK(cudaMemcpy(probe, buf[c.pull ? 0 : 1][1] + bytes - 4, 4, cudaMemcpyDefault));
    const unsigned char want = c.pull ? 2 : 1;
    printf("%-32s %8.1f GB/s per direction  (%.1f us per 256 MiB)%s\n", c.name, bytes * iters / (best * 1e-3) / 1e9,
           best * 1e3 / iters, probe[3] == want ? "" : "  WRONG DATA");
    for (int g = 0; g < 2; g++) {
      CK(cudaSetDevice(g));
      CK(cudaMemset(buf[g][1], 0, bytes));
    }
  }
  return 0;
}
