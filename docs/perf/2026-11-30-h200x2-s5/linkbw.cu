// Bidirectional NVLink bandwidth by method, 2 GPUs in one process. The record of an experiment (fifth session,
// linkbw.txt), not part of the build: nvcc -O3 -arch=sm_90 -o linkbw linkbw.cu && ./linkbw [name filter]
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

__device__ __forceinline__ void st16(void* p, int4 v) { asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory"); }
__device__ __forceinline__ int4 ld16(const void* p) { int4 v; asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)); return v; }

// SM copy: 8 loads in flight per thread
__global__ void __launch_bounds__(512) smCopy(const int4* src, int4* dst, size_t n16) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 7 * stride < n16; i += 8 * stride) {
    int4 v[8];
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = ld16(src + i + k * stride);
#pragma unroll
    for (int k = 0; k < 8; k++) st16(dst + i + k * stride, v[k]);
  }
  for (; i < n16; i += stride) st16(dst + i, ld16(src + i));
}

__device__ __forceinline__ uint32_t smemAddr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbarInit(uint64_t* m, int count) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smemAddr(m)), "r"(count)); }
__device__ __forceinline__ void mbarExpect(uint64_t* m, uint32_t bytes) { asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smemAddr(m)), "r"(bytes) : "memory"); }
__device__ __forceinline__ void mbarWait(uint64_t* m, uint32_t parity) {
  asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" :: "r"(smemAddr(m)), "r"(parity) : "memory");
}
__device__ __forceinline__ void tmaLoad(void* dstSmem, const void* src, uint32_t bytes, uint64_t* m) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" :: "r"(smemAddr(dstSmem)), "l"(src), "r"(bytes), "r"(smemAddr(m)) : "memory");
}
__device__ __forceinline__ void tmaStore(void* dst, const void* srcSmem, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(dst), "r"(smemAddr(srcSmem)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void tmaWaitRead() { asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory"); }
__device__ __forceinline__ void tmaWaitAll() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// TMA copy: one thread per block drives S stages of C bytes; chunk i of block b is chunk b + i * gridDim.
__global__ void tmaCopy(const char* src, char* dst, size_t bytes, uint32_t C, int S) {
  extern __shared__ __align__(128) char smem[];
  __shared__ uint64_t mbar[16];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < S; s++) mbarInit(&mbar[s], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  size_t chunks = bytes / C;
  size_t mine = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  auto chunkOff = [&](size_t i) { return (blockIdx.x + i * gridDim.x) * (size_t)C; };
  for (size_t i = 0; i < (size_t)S && i < mine; i++) { mbarExpect(&mbar[i], C); tmaLoad(smem + i * C, src + chunkOff(i), C, &mbar[i]); }
  for (size_t i = 0; i < mine; i++) {
    int s = i % S;
    mbarWait(&mbar[s], (i / S) & 1);
    tmaStore(dst + chunkOff(i), smem + s * C, C);
    if (i >= 1 && i - 1 + S < mine) {
      tmaWaitRead<1>();
      int sp = (i - 1) % S;
      mbarExpect(&mbar[sp], C);
      tmaLoad(smem + sp * C, src + chunkOff(i - 1 + S), C, &mbar[sp]);
    }
  }
  tmaWaitAll();
}

int main(int argc, char** argv) {
  size_t bytes = (size_t)256 << 20;
  int iters = 10;
  char* buf[2][2];  // [gpu][src,dst]
  cudaStream_t st[2];
  cudaEvent_t ev[2][2];
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CK(cudaMalloc(&buf[g][0], bytes)); CK(cudaMalloc(&buf[g][1], bytes));
    CK(cudaMemset(buf[g][0], g + 1, bytes));
    CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
    CK(cudaEventCreate(&ev[g][0])); CK(cudaEventCreate(&ev[g][1]));
    CK(cudaFuncSetAttribute(tmaCopy, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  }
  // method: push = local src -> peer dst; pull = peer src -> local dst
  struct Cfg { const char* name; int tma; int pull; int blocks; int threads; uint32_t C; int S; int both; };
  Cfg cfgs[] = {
    {"sm push 132x512", 0, 0, 132, 512, 0, 0, 1}, {"sm push 264x512", 0, 0, 264, 512, 0, 0, 1},
    {"sm pull 132x512", 0, 1, 132, 512, 0, 0, 1}, {"sm pull 264x512", 0, 1, 264, 512, 0, 0, 1},
    {"sm push 132x512 one-dir", 0, 0, 132, 512, 0, 0, 0},
    {"tma push 132 C4K S8", 1, 0, 132, 32, 4096, 8, 1}, {"tma push 132 C8K S8", 1, 0, 132, 32, 8192, 8, 1},
    {"tma push 132 C16K S8", 1, 0, 132, 32, 16384, 8, 1}, {"tma push 132 C32K S4", 1, 0, 132, 32, 32768, 4, 1},
    {"tma push 264 C16K S4", 1, 0, 264, 32, 16384, 4, 1}, {"tma push 66 C16K S8", 1, 0, 66, 32, 16384, 8, 1},
    {"tma push 132 C16K S8 one-dir", 1, 0, 132, 32, 16384, 8, 0},
    {"tma pull 132 C16K S8", 1, 1, 132, 32, 16384, 8, 1}, {"tma pull 132 C32K S4", 1, 1, 132, 32, 32768, 4, 1},
    {"tma pull 264 C16K S4", 1, 1, 264, 32, 16384, 4, 1},
    {"ce memcpy", 2, 0, 0, 0, 0, 0, 1}, {"ce memcpy one-dir", 2, 0, 0, 0, 0, 0, 0},
  };
  for (const Cfg& c : cfgs) {
    if (argc > 1 && !strstr(c.name, argv[1])) continue;
    float best = 1e30f;
    for (int rep = 0; rep < 3; rep++) {
      for (int g = 0; g < 2; g++) { CK(cudaSetDevice(g)); CK(cudaDeviceSynchronize()); }
      for (int g = 0; g < 2; g++) {
        if (!c.both && g == 1) continue;
        CK(cudaSetDevice(g));
        const char* src = c.pull ? buf[1 - g][0] : buf[g][0];
        char* dst = c.pull ? buf[g][1] : buf[1 - g][1];
        CK(cudaEventRecord(ev[g][0], st[g]));
        for (int it = 0; it < iters; it++) {
          if (c.tma == 0) smCopy<<<c.blocks, c.threads, 0, st[g]>>>((const int4*)src, (int4*)dst, bytes / 16);
          else if (c.tma == 1) tmaCopy<<<c.blocks, c.threads, c.C * c.S, st[g]>>>(src, dst, bytes, c.C, c.S);
          else CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st[g]));
        }
        CK(cudaEventRecord(ev[g][1], st[g]));
        CK(cudaGetLastError());
      }
      float worst = 0;
      for (int g = 0; g < 2; g++) {
        if (!c.both && g == 1) continue;
        CK(cudaSetDevice(g)); CK(cudaEventSynchronize(ev[g][1]));
        float ms; CK(cudaEventElapsedTime(&ms, ev[g][0], ev[g][1])); if (ms > worst) worst = ms;
      }
      if (worst < best) best = worst;
    }
    // check: dst on the receiving side holds the sender's fill
    int g = 0; char* dst = c.pull ? buf[0][1] : buf[1][1]; int want = c.pull ? 2 : 1;
    (void)g; unsigned char probe[4]; CK(cudaMemcpy(probe, dst + bytes - 4, 4, cudaMemcpyDefault));
    printf("%-32s %8.1f GB/s per direction  (%.1f us per 256 MiB)%s\n", c.name, bytes * iters / (best * 1e-3) / 1e9, best * 1e3 / iters, probe[3] == want ? "" : "  WRONG DATA");
    for (int gg = 0; gg < 2; gg++) { CK(cudaSetDevice(gg)); CK(cudaMemset(buf[gg][1], 0, bytes)); }
  }
  return 0;
}
