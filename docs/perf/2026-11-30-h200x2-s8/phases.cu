// Where the time of a 2-rank bf16 all-reduce goes, 4-64 MiB: per-block phase timestamps (%globaltimer) of
// stripped-down one-shot push and two-shot variants, 2 GPUs in one process, CUDA graphs of 20 calls. The record of
// an experiment (eighth session, phases.txt), not part of the build:
//   nvcc -O3 -arch=sm_90 -o phases phases.cu && ./phases
// Variants (all: bf16 sum in fp32, 16-byte units, one flag pad per block, epochs advanced by the kernels):
//   push K B T    one-shot push into the peer's inbox (the library's oneshot_push); the first K units of each thread
//                 stay in registers from the push to the reduction, so the reduction reads only the inbox for them.
//   ts P B T      two-shot, reduce-scatter by push into the peer's output (the library's registered push scatter),
//                 each block's share in P parts, each part with its own "sent" flag.
//   tsw P B T     ts, but each warp posts and waits its own flags (no block barrier between parts).
//   pushb         push with the reduction's loads batched (4 units of both ranks before the first add).
//   tsp, tsb      ts with programmatic dependent launch (as the library), with the all-gather's loads batched.
//   lib-*         the library's kernels (src/device, built in with WITH_LIBRARY_KERNELS) on a slot made here:
//                 lib-push (oneshot_push), lib-ts (twoshot_reg, reduce-scatter by push), lib-tspull (by pull).
// B blocks of T threads.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));        \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

constexpr int kMaxBlocks = 1024;
constexpr int kWarpsMax = 32;
constexpr int kSteps = 4;        // flag arrays: 0 ready, 1 sent, 2 done
constexpr int kPhases = 8;       // timestamps per block and call
constexpr int kCalls = 20;       // calls per graph
constexpr uint64_t kSpinLimit = 1ull << 26;

struct Args {
  const uint4* send;
  uint4* recv;
  uint4* peerRecv;
  uint4* peerInbox;   // our region in the peer's inbox: [2 parities][inboxUnits]
  const uint4* inbox; // the peer's region in ours
  uint64_t inboxUnits;
  uint64_t* peerFlags;  // [kSteps][kMaxBlocks * kWarpsMax] in the peer's memory
  uint64_t* flags;      // ours
  uint64_t* epochs;     // [kMaxBlocks]
  uint64_t* trace;      // [kCalls][kMaxBlocks][kPhases]
  int* failed;
  uint64_t units;
  int rank;
  int parts;
};

__device__ __forceinline__ uint64_t now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint4 ld16(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st16(uint4* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ uint64_t ldRelaxed(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t ldAcquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void stRelaxed(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void stRelease(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

#ifdef WITH_LIBRARY_KERNELS
// The library's own kernels run by this harness (configurations named lib-*), with their phase marks
// (FCCL_PHASE_MARK in src/device) recorded like this file's:
//   nvcc -O3 -arch=sm_90 -DWITH_LIBRARY_KERNELS -I../../../src/device -I../../../src/include -I../../../include ...
__device__ uint64_t* gLibraryTrace;
#define FCCL_PHASE_MARK(epoch, phase)                                                                 \
  do {                                                                                                \
    if (threadIdx.x == 0) gLibraryTrace[(((epoch) % kCalls) * kMaxBlocks + blockIdx.x) * kPhases + (phase)] = now(); \
  } while (0)
#include "oneshot_push.cu"
#include "twoshot_reg.cu"
#endif

// x0 + x1 in rank order, bf16 accumulated in fp32.
__device__ __forceinline__ uint4 add8(uint4 a, uint4 b) {
  uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w}, r[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&av[i]);
    __nv_bfloat162 y = *reinterpret_cast<__nv_bfloat162*>(&bv[i]);
    float2 fx = __bfloat1622float2(x), fy = __bfloat1622float2(y);
    __nv_bfloat162 s = __float22bfloat162_rn(make_float2(__fadd_rn(fx.x, fy.x), __fadd_rn(fx.y, fy.y)));
    r[i] = *reinterpret_cast<uint32_t*>(&s);
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}
__device__ __forceinline__ uint4 addRanks(int rank, uint4 mine, uint4 peer) {
  return rank == 0 ? add8(mine, peer) : add8(peer, mine);
}

__device__ __forceinline__ uint64_t umin(uint64_t x, uint64_t y) { return x < y ? x : y; }

__device__ __forceinline__ uint64_t* flagAt(uint64_t* base, int step, int index) {
  return base + (uint64_t)step * kMaxBlocks * kWarpsMax + index;
}

// Bounded wait; thread-level.
__device__ __forceinline__ void waitFlag(const Args& a, const uint64_t* f, uint64_t value) {
  uint64_t spins = 0;
  while (ldRelaxed(f) < value) {
    if (++spins > kSpinLimit) {
      atomicExch(a.failed, 1);
      return;
    }
  }
  (void)ldAcquire(f);
}

struct Trace {
  uint64_t* row;
  __device__ Trace(const Args& a, uint64_t epoch) : row(a.trace + ((epoch % kCalls) * kMaxBlocks + blockIdx.x) * kPhases) {}
  __device__ __forceinline__ void mark(int i) {
    if (threadIdx.x == 0) row[i] = now();
  }
};

__device__ __forceinline__ uint64_t epochBegin(const Args& a) {
  __shared__ uint64_t e;
  if (threadIdx.x == 0) e = a.epochs[blockIdx.x];
  __syncthreads();
  return e;
}
__device__ __forceinline__ void epochEnd(const Args& a, uint64_t epoch) {
  __syncthreads();
  if (threadIdx.x == 0) a.epochs[blockIdx.x] = epoch + 1;
}

// One-shot push; phases: 0 start, 1 pushed (this thread 0), 2 block pushed, 3 flag posted, 4 peer's seen,
// 5 reduced.
template <int K, bool kBatch = false>
__global__ void __launch_bounds__(512) pushKernel(Args a) {
  const uint64_t epoch = epochBegin(a);
  Trace tr(a, epoch);
  tr.mark(0);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint4* peerInbox = a.peerInbox + (epoch & 1) * a.inboxUnits;
  const uint4* inbox = a.inbox + (epoch & 1) * a.inboxUnits;
  uint4 kept[K > 0 ? K : 1];
#pragma unroll
  for (int k = 0; k < K; k++)
    if (first + k * stride < a.units) kept[k] = ld16(a.send + first + k * stride);
#pragma unroll
  for (int k = 0; k < K; k++)
    if (first + k * stride < a.units) st16(peerInbox + first + k * stride, kept[k]);
  for (uint64_t u = first + K * stride; u < a.units; u += stride) st16(peerInbox + u, ld16(a.send + u));
  tr.mark(1);
  __syncthreads();
  tr.mark(2);
  if (threadIdx.x == 0) stRelease(flagAt(a.peerFlags, 1, blockIdx.x), epoch);
  tr.mark(3);
  if (threadIdx.x == 0) waitFlag(a, flagAt(a.flags, 1, blockIdx.x), epoch);
  __syncthreads();
  tr.mark(4);
#pragma unroll
  for (int k = 0; k < K; k++) {
    const uint64_t u = first + k * stride;
    if (u < a.units) st16(a.recv + u, addRanks(a.rank, kept[k], ld16(inbox + u)));
  }
  if (kBatch) {
    // 4 units of both ranks loaded before the first add, as the library's pulling loop does.
    for (uint64_t u = first + K * stride; u < a.units; u += 4 * stride) {
      uint4 x[4], y[4];
#pragma unroll
      for (int k = 0; k < 4; k++)
        if (u + k * stride < a.units) x[k] = ld16(a.send + u + k * stride), y[k] = ld16(inbox + u + k * stride);
#pragma unroll
      for (int k = 0; k < 4; k++)
        if (u + k * stride < a.units) st16(a.recv + u + k * stride, addRanks(a.rank, x[k], y[k]));
    }
  } else {
    for (uint64_t u = first + K * stride; u < a.units; u += stride)
      st16(a.recv + u, addRanks(a.rank, ld16(a.send + u), ld16(inbox + u)));
  }
  __syncthreads();
  tr.mark(5);
  epochEnd(a, epoch);
}

// Two-shot with the reduce-scatter by push into the peer's output; phases: 0 start, 1 ready seen, 2 all parts
// pushed and flagged, 3 first part's "sent" seen, 4 reduced and all-gathered, 5 "done" posted, 6 "done" seen.
// Part p of this block's share of owner s: units [s * share + p * partLen ...) strided by the grid.
template <bool kWarpFlags, bool kPdl = false, bool kBatch = false>
__global__ void __launch_bounds__(512, 1) tsKernel(Args a) {
  if (kPdl) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  const uint64_t epoch = epochBegin(a);
  Trace tr(a, epoch);
  tr.mark(0);
  const int me = a.rank, peer = 1 - me;
  const uint64_t share = (a.units + 1) / 2;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int P = a.parts;
  // Steps per part in units of the grid stride.
  const uint64_t rows = (share + stride - 1) / stride;
  const uint64_t rowsPerPart = (rows + P - 1) / P;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int flagIndex = kWarpFlags ? blockIdx.x * kWarpsMax + warp : blockIdx.x;
  const bool poster = kWarpFlags ? lane == 0 : threadIdx.x == 0;
  auto sync = [&]() {
    if (kWarpFlags)
      __syncwarp();
    else
      __syncthreads();
  };
  if (poster) stRelaxed(flagAt(a.peerFlags, 0, flagIndex), epoch);
  if (poster) waitFlag(a, flagAt(a.flags, 0, flagIndex), epoch);
  sync();
  tr.mark(1);
  const uint64_t peerBegin = peer * share, peerEnd = umin(a.units, peerBegin + share);
  const uint64_t myBegin = me * share, myEnd = umin(a.units, myBegin + share);
  for (int p = 0; p < P; p++) {
    for (uint64_t r = p * rowsPerPart; r < (p + 1) * rowsPerPart && r < rows; r++) {
      const uint64_t u = peerBegin + first + r * stride;
      if (u < peerEnd) st16(a.peerRecv + u, ld16(a.send + u));
    }
    sync();
    if (poster) stRelease(flagAt(a.peerFlags, 1, flagIndex), epoch * 64 + p + 1);
  }
  tr.mark(2);
  for (int p = 0; p < P; p++) {
    if (poster) waitFlag(a, flagAt(a.flags, 1, flagIndex), epoch * 64 + p + 1);
    sync();
    if (p == 0) tr.mark(3);
    const uint64_t rEnd = (p + 1) * rowsPerPart < rows ? (p + 1) * rowsPerPart : rows;
    for (uint64_t r = p * rowsPerPart; r < rEnd; r += kBatch ? 4 : 1) {
      constexpr int B = kBatch ? 4 : 1;
      uint4 x[B], y[B];
#pragma unroll
      for (int k = 0; k < B; k++) {
        const uint64_t u = myBegin + first + (r + k) * stride;
        if (r + k < rEnd && u < myEnd) x[k] = ld16(a.send + u), y[k] = ld16(a.recv + u);
      }
#pragma unroll
      for (int k = 0; k < B; k++) {
        const uint64_t u = myBegin + first + (r + k) * stride;
        if (r + k < rEnd && u < myEnd) {
          const uint4 out = addRanks(me, x[k], y[k]);
          st16(a.recv + u, out);
          st16(a.peerRecv + u, out);
        }
      }
    }
  }
  sync();
  tr.mark(4);
  if (poster) stRelease(flagAt(a.peerFlags, 2, flagIndex), epoch);
  tr.mark(5);
  if (poster) waitFlag(a, flagAt(a.flags, 2, flagIndex), epoch);
  __syncthreads();
  tr.mark(6);
  epochEnd(a, epoch);
}

struct Gpu {
  uint4 *send, *recv, *inbox;
  uint64_t *flags, *epochs, *trace;
  int* failed;
  cudaStream_t stream;
  cudaEvent_t start, stop;
};

static uint16_t toBf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
static float fromBf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : "";
  const uint64_t maxBytes = 64ull << 20;
  Gpu g[2];
  std::vector<uint64_t> ones(kMaxBlocks, 1);
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    CK(cudaMalloc(&g[d].send, maxBytes));
    CK(cudaMalloc(&g[d].recv, maxBytes));
    CK(cudaMalloc(&g[d].inbox, 2 * maxBytes));
    CK(cudaMalloc(&g[d].flags, sizeof(uint64_t) * kSteps * kMaxBlocks * kWarpsMax));
    CK(cudaMemset(g[d].flags, 0, sizeof(uint64_t) * kSteps * kMaxBlocks * kWarpsMax));
    CK(cudaMalloc(&g[d].epochs, sizeof(uint64_t) * kMaxBlocks));
    CK(cudaMemcpy(g[d].epochs, ones.data(), sizeof(uint64_t) * kMaxBlocks, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&g[d].trace, sizeof(uint64_t) * kCalls * kMaxBlocks * kPhases));
    CK(cudaMalloc(&g[d].failed, sizeof(int)));
    CK(cudaMemset(g[d].failed, 0, sizeof(int)));
    CK(cudaStreamCreateWithFlags(&g[d].stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g[d].start));
    CK(cudaEventCreate(&g[d].stop));
  }
  // Random bf16 inputs in [-1, 1), never zero-filled.
  const uint64_t maxElems = maxBytes / 2;
  std::vector<std::vector<uint16_t>> host(2, std::vector<uint16_t>(maxElems));
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int d = 0; d < 2; d++) {
    for (uint64_t i = 0; i < maxElems; i++) {
      seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
      host[d][i] = toBf16((float)((seed >> 11) % 2000001) / 1000000.0f - 1.0f);
    }
    CK(cudaSetDevice(d));
    CK(cudaMemcpy(g[d].send, host[d].data(), maxBytes, cudaMemcpyHostToDevice));
  }

  struct Config {
    std::string name;
    const void* kernel;
    int K, parts, blocks, threads;
    bool pdl;
    int library; /* 0: this file's kernel; 1 oneshot_push, 2 twoshot_reg by push, 3 twoshot_reg by pull */
  };
  std::vector<Config> configs = {
      {"push K=0 132x512", (const void*)pushKernel<0>, 0, 1, 132, 512, false},
      {"pushb K=0 132x512", (const void*)pushKernel<0, true>, 0, 1, 132, 512, false},
      {"pushb K=0 264x256", (const void*)pushKernel<0, true>, 0, 1, 264, 256, false},
      {"ts P=1 132x512", (const void*)tsKernel<false>, 0, 1, 132, 512, false},
      {"ts P=2 132x512", (const void*)tsKernel<false>, 0, 2, 132, 512, false},
      {"tsp P=1 132x512", (const void*)tsKernel<false, true>, 0, 1, 132, 512, true},
      {"tsp P=2 132x512", (const void*)tsKernel<false, true>, 0, 2, 132, 512, true},
      {"tsb P=1 132x512", (const void*)tsKernel<false, false, true>, 0, 1, 132, 512, false},
      {"tsb P=2 132x512", (const void*)tsKernel<false, false, true>, 0, 2, 132, 512, false},
      {"tspb P=2 132x512", (const void*)tsKernel<false, true, true>, 0, 2, 132, 512, true},
      {"tsp P=3 132x512", (const void*)tsKernel<false, true>, 0, 3, 132, 512, true},
#ifdef WITH_LIBRARY_KERNELS
      {"lib-push 132x512", (const void*)fccl::allReduceOneshotPush<fcclBfloat16, fcclSum, 2>, 0, 1, 132, 512, true, 1},
      {"lib-ts 132x512", (const void*)fccl::allReduceTwoshotReg<fcclBfloat16, fcclSum, 2>, 0, 1, 132, 512, true, 2},
      {"lib-tspull 132x512", (const void*)fccl::allReduceTwoshotReg<fcclBfloat16, fcclSum, 2>, 0, 1, 132, 512, true, 3},
#endif
  };
#ifdef WITH_LIBRARY_KERNELS
  // The library's device communicator over slots allocated here (peer access instead of IPC).
  fcclDevComm libComm[2];
  {
    fcclSlotLayout layout;
    fcclSlotLayoutCompute(2, 32ull << 20, &layout);
    uint64_t slots[2];
    for (int d = 0; d < 2; d++) {
      CK(cudaSetDevice(d));
      void* slot;
      CK(cudaMalloc(&slot, layout.totalBytes));
      CK(cudaMemset(slot, 0, layout.totalBytes));
      slots[d] = (uint64_t)(uintptr_t)slot;
    }
    for (int d = 0; d < 2; d++) {
      CK(cudaSetDevice(d));
      fcclDevComm& c = libComm[d];
      memset(&c, 0, sizeof(c));
      c.slots[0] = slots[0];
      c.slots[1] = slots[1];
      fcclDevState* state;
      CK(cudaMalloc(&state, sizeof(fcclDevState)));
      std::vector<uint64_t> first(FCCL_DEVICE_MAX_BLOCKS, 1);
      CK(cudaMemset(state, 0, sizeof(fcclDevState)));
      CK(cudaMemcpy(state->epochs, first.data(), 8 * FCCL_DEVICE_MAX_BLOCKS, cudaMemcpyHostToDevice));
      c.state = (uint64_t)(uintptr_t)state;
      void* host;
      CK(cudaHostAlloc(&host, 4096, cudaHostAllocMapped));
      memset(host, 0, 4096);
      void* hostDev;
      CK(cudaHostGetDevicePointer(&hostDev, host, 0));
      c.hostWords = (uint64_t)(uintptr_t)hostDev;
      c.abortFlag = (uint64_t)(uintptr_t)hostDev + 2048;
      c.timeoutNs = 10ull * 1000 * 1000 * 1000;
      c.layout = layout;
      c.rank = d;
      c.nranks = 2;
      CK(cudaMemcpyToSymbol(gLibraryTrace, &g[d].trace, sizeof(uint64_t*)));
    }
  }
#endif
  const uint64_t sizes[] = {1ull << 20, 4ull << 20, 8ull << 20, 16ull << 20, 64ull << 20};
  printf("# %d calls per graph, best of 3 x 5 replays; phases: max over blocks (median) of the time since the\n"
         "# earliest block's start on that GPU, averaged over the graph's calls; GPU 0\n",
         kCalls);
  for (const Config& cfg : configs) {
    bool wanted = filter[0] == '\0';
    for (const char* f = filter; *f && !wanted;) { /* comma-separated name prefixes */
      const char* end = strchr(f, ',');
      const size_t len = end ? (size_t)(end - f) : strlen(f);
      wanted = strncmp(cfg.name.c_str(), f, len) == 0;
      f += len + (end ? 1 : 0);
    }
    if (!wanted) continue;
    int occupancy = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy, cfg.kernel, cfg.threads, 0));
    for (uint64_t bytes : sizes) {
      if (cfg.library == 1 && bytes > (8ull << 20)) continue; /* one staging chunk */
      const uint64_t units = bytes / 16;
      cudaGraphExec_t exec[2];
      for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        Args a;
        a.send = g[d].send;
        a.recv = g[d].recv;
        a.peerRecv = g[1 - d].recv;
        a.peerInbox = g[1 - d].inbox;
        a.inbox = g[d].inbox;
        a.peerFlags = g[1 - d].flags;
        a.flags = g[d].flags;
        a.epochs = g[d].epochs;
        a.trace = g[d].trace;
        a.failed = g[d].failed;
        a.inboxUnits = maxBytes / 16;
        a.units = units;
        a.rank = d;
        a.parts = cfg.parts;
        void* params[] = {&a};
#ifdef WITH_LIBRARY_KERNELS
        fcclDevArgs la;
        memset(&la, 0, sizeof(la));
        la.sendbuf = (uint64_t)(uintptr_t)g[d].send;
        la.recvbuf = (uint64_t)(uintptr_t)g[d].recv;
        for (int r = 0; r < 2; r++) {
          la.peerSend[r] = (uint64_t)(uintptr_t)g[r].send;
          la.peerRecv[r] = (uint64_t)(uintptr_t)g[r].recv;
        }
        la.count = bytes / 2;
        la.bytes = bytes;
        la.scatter = cfg.library == 2 ? FCCL_SCATTER_PUSH : FCCL_SCATTER_PULL; // s10: the field is an enum now
        void* libParams[] = {&libComm[d], &la};
        if (cfg.library) params[0] = nullptr;
#endif
        cudaGraph_t graph;
        CK(cudaStreamBeginCapture(g[d].stream, cudaStreamCaptureModeThreadLocal));
        cudaLaunchAttribute attribute = {};
        attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute.val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t launch = {};
        launch.gridDim = dim3(cfg.blocks);
        launch.blockDim = dim3(cfg.threads);
        launch.stream = g[d].stream;
        launch.attrs = &attribute;
        launch.numAttrs = cfg.pdl ? 1 : 0;
#ifdef WITH_LIBRARY_KERNELS
        if (cfg.library) {
          for (int i = 0; i < kCalls; i++) CK(cudaLaunchKernelExC(&launch, cfg.kernel, libParams));
        } else
#endif
          for (int i = 0; i < kCalls; i++) CK(cudaLaunchKernelExC(&launch, cfg.kernel, params));
        CK(cudaStreamEndCapture(g[d].stream, &graph));
        CK(cudaGraphInstantiate(&exec[d], graph, 0));
        CK(cudaGraphDestroy(graph));
        CK(cudaMemset(g[d].recv, 0xff, bytes));
        /* Fresh flags and epochs: the variants use the pads differently. */
        CK(cudaMemset(g[d].flags, 0, sizeof(uint64_t) * kSteps * kMaxBlocks * kWarpsMax));
        CK(cudaMemcpy(g[d].epochs, ones.data(), sizeof(uint64_t) * kMaxBlocks, cudaMemcpyHostToDevice));
      }
      for (int d = 0; d < 2; d++) { CK(cudaSetDevice(d)); CK(cudaDeviceSynchronize()); }
      float best = 1e30f;
      for (int rep = 0; rep < 4; rep++) {
        for (int d = 0; d < 2; d++) {
          CK(cudaSetDevice(d));
          CK(cudaEventRecord(g[d].start, g[d].stream));
          for (int r = 0; r < (rep == 0 ? 1 : 5); r++) CK(cudaGraphLaunch(exec[d], g[d].stream));
          CK(cudaEventRecord(g[d].stop, g[d].stream));
        }
        for (int d = 0; d < 2; d++) { CK(cudaSetDevice(d)); CK(cudaEventSynchronize(g[d].stop)); }
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, g[0].start, g[0].stop));
        if (rep > 0) best = std::min(best, ms * 1000.0f / (5 * kCalls));
      }
      int failed[2];
      for (int d = 0; d < 2; d++) { CK(cudaSetDevice(d)); CK(cudaMemcpy(&failed[d], g[d].failed, sizeof(int), cudaMemcpyDeviceToHost)); }
      if (failed[0] || failed[1]) {
        printf("%s %llu: a wait timed out\n", cfg.name.c_str(), (unsigned long long)bytes);
        return 1;
      }
      // Check: both GPUs' outputs equal bitwise and near the float64 sum.
      const uint64_t elems = bytes / 2;
      std::vector<uint16_t> out0(elems), out1(elems);
      CK(cudaSetDevice(0));
      CK(cudaMemcpy(out0.data(), g[0].recv, bytes, cudaMemcpyDeviceToHost));
      CK(cudaSetDevice(1));
      CK(cudaMemcpy(out1.data(), g[1].recv, bytes, cudaMemcpyDeviceToHost));
      uint64_t bad = 0;
      for (uint64_t i = 0; i < elems; i++) {
        const double ref = (double)fromBf16(host[0][i]) + (double)fromBf16(host[1][i]);
        if (out0[i] != out1[i] || std::fabs(fromBf16(out0[i]) - ref) > 1e-2 * std::max(1.0, std::fabs(ref))) bad++;
      }
      // Phases of GPU 0.
      std::vector<uint64_t> tr((size_t)kCalls * kMaxBlocks * kPhases);
      CK(cudaSetDevice(0));
      CK(cudaMemcpy(tr.data(), g[0].trace, tr.size() * 8, cudaMemcpyDeviceToHost));
      const int nph = cfg.library == 1 || strncmp(cfg.name.c_str(), "push", 4) == 0 ? 6 : 7;
      double maxSum[kPhases] = {}, medSum[kPhases] = {};
      for (int call = 0; call < kCalls; call++) {
        const uint64_t* rowc = tr.data() + (size_t)call * kMaxBlocks * kPhases;
        uint64_t t0 = UINT64_MAX;
        for (int b = 0; b < cfg.blocks; b++) t0 = std::min(t0, rowc[b * kPhases]);
        for (int ph = 0; ph < nph; ph++) {
          std::vector<double> v;
          for (int b = 0; b < cfg.blocks; b++) v.push_back((double)(rowc[b * kPhases + ph] - t0) / 1000.0);
          std::sort(v.begin(), v.end());
          maxSum[ph] += v.back();
          medSum[ph] += v[v.size() / 2];
        }
      }
      printf("%-20s occ %d %5llu KiB %8.2f us%s |", cfg.name.c_str(), occupancy, (unsigned long long)(bytes >> 10),
             best, bad ? " WRONG" : "");
      for (int ph = 0; ph < nph; ph++) printf(" %6.2f (%5.2f)", maxSum[ph] / kCalls, medSum[ph] / kCalls);
      printf("\n");
      fflush(stdout);
      for (int d = 0; d < 2; d++) { CK(cudaSetDevice(d)); CK(cudaGraphExecDestroy(exec[d])); }
    }
  }
  return 0;
}
