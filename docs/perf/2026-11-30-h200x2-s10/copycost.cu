// Where the copy-engine reduce-scatter's fixed cost goes (#5, 256 MiB): CUDA graphs on both GPUs of one process,
// replayed at once, each op timed per GPU with events. An op is some of: a cross-GPU barrier kernel (B), a peer copy
// of N bytes into the other GPU's memory (C), an empty kernel after it (K). Comparing B, B+C, B+C+K and C alone at
// 1 MiB and 128 MiB splits the fixed cost into the barrier, the kernel-to-copy and copy-to-kernel edges and the
// copy's own start. The last two ops put stream memory operations (a write of the peer's flag, and a wait that is
// always satisfied) before the copy instead of a kernel: are those transitions cheaper? Spins are bounded (2 s).
//   nvcc -O3 -arch=sm_90 -o /tmp/copycost copycost.cu && /tmp/copycost
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));        \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

constexpr int kOpsPerGraph = 10;

// Stream memory operations (driver API, reached through the runtime): a write of the peer's flag and a wait on ours
// that is always satisfied (>= 0), to time memop nodes before a copy instead of a kernel.
typedef CUresult (*WriteValue64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
typedef CUresult (*WaitValue64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
static WriteValue64 writeValue64;
static WaitValue64 waitValue64;
constexpr int kReplays = 5;

// Epoch in our own memory (advanced here), our flag (the peer posts), the peer's flag (we post).
__global__ void barrierKernel(uint64_t* epoch, volatile uint64_t* mine, volatile uint64_t* peers, int* failed) {
  const uint64_t e = *epoch + 1;
  *epoch = e;
  *peers = e;
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (*mine < e) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > 2000000000ull) {
      *failed = 1;
      return;
    }
  }
}

__global__ void emptyKernel() {}

struct Gpu {
  cudaStream_t stream;
  cudaEvent_t start, stop;
  uint64_t* epoch;
  uint64_t* flag;
  int* failed;
  char* src;
  char* dst;  // on the other GPU
};

static float timeOp(Gpu* g, bool barrier, size_t copyBytes, bool kernelAfter, int memops = 0) {
  cudaGraphExec_t exec[2];
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    cudaGraph_t graph;
    CK(cudaStreamBeginCapture(g[d].stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kOpsPerGraph; i++) {
      if (barrier) barrierKernel<<<1, 32, 0, g[d].stream>>>(g[d].epoch, g[d].flag, g[1 - d].flag, g[d].failed);
      if (memops >= 1 && writeValue64((CUstream)g[d].stream, (CUdeviceptr)g[1 - d].flag + 0, 0, 0) != CUDA_SUCCESS)
        exit(3);
      if (memops >= 2 && waitValue64((CUstream)g[d].stream, (CUdeviceptr)g[d].epoch, 0, CU_STREAM_WAIT_VALUE_GEQ) !=
                             CUDA_SUCCESS)
        exit(3);
      if (copyBytes) CK(cudaMemcpyAsync(g[d].dst, g[d].src, copyBytes, cudaMemcpyDeviceToDevice, g[d].stream));
      if (kernelAfter) emptyKernel<<<1, 32, 0, g[d].stream>>>();
    }
    CK(cudaStreamEndCapture(g[d].stream, &graph));
    CK(cudaGraphInstantiate(&exec[d], graph, 0));
    CK(cudaGraphDestroy(graph));
  }
  float best = 1e30f;
  for (int turn = 0; turn < 3; turn++) {
    for (int d = 0; d < 2; d++) {
      CK(cudaSetDevice(d));
      CK(cudaGraphLaunch(exec[d], g[d].stream));  // warm
    }
    for (int d = 0; d < 2; d++) {
      CK(cudaSetDevice(d));
      CK(cudaStreamSynchronize(g[d].stream));
    }
    for (int d = 0; d < 2; d++) {
      CK(cudaSetDevice(d));
      CK(cudaEventRecord(g[d].start, g[d].stream));
      for (int r = 0; r < kReplays; r++) CK(cudaGraphLaunch(exec[d], g[d].stream));
      CK(cudaEventRecord(g[d].stop, g[d].stream));
    }
    float slowest = 0;
    for (int d = 0; d < 2; d++) {
      CK(cudaSetDevice(d));
      CK(cudaEventSynchronize(g[d].stop));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, g[d].start, g[d].stop));
      if (ms > slowest) slowest = ms;
    }
    if (slowest < best) best = slowest;
  }
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    CK(cudaGraphExecDestroy(exec[d]));
    int failed = 0;
    CK(cudaMemcpy(&failed, g[d].failed, sizeof(int), cudaMemcpyDeviceToHost));
    if (failed) {
      fprintf(stderr, "barrier spin gave up on GPU %d\n", d);
      exit(1);
    }
  }
  return best * 1000.0f / (kOpsPerGraph * kReplays);
}

int main() {
  const size_t maxBytes = 128ull << 20;
  cudaDriverEntryPointQueryResult found;
  CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", (void**)&writeValue64, 12000, cudaEnableDefault, &found));
  CK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", (void**)&waitValue64, 12000, cudaEnableDefault, &found));
  Gpu g[2];
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceEnablePeerAccess(1 - d, 0));
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
    CK(cudaMalloc(&g[d].dst, maxBytes));  // rank d writes into the other GPU
  }
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }
  printf("# us per op, both GPUs at once, graphs of %d ops, best of 3 x %d replays (slower GPU)\n", kOpsPerGraph,
         kReplays);
  printf("%-28s %12s %12s %12s\n", "op", "0 B", "1 MiB", "128 MiB");
  struct {
    const char* name;
    bool barrier, kernelAfter, copy;
    int memops;
  } ops[] = {
      {"kernel", false, true, false},
      {"barrier", true, false, false},
      {"barrier + kernel", true, true, false},
      {"copy", false, false, true},
      {"barrier + copy", true, false, true},
      {"copy + kernel", false, true, true},
      {"barrier + copy + kernel", true, true, true},
      {"write + copy + kernel", false, true, true, 1},
      {"write + wait + copy + kernel", false, true, true, 2},
  };
  for (auto& op : ops) {
    printf("%-28s", op.name);
    if (!op.copy) {
      printf(" %12.2f %12s %12s\n", timeOp(g, op.barrier, 0, op.kernelAfter, op.memops), "-", "-");
      continue;
    }
    printf(" %12s %12.2f %12.2f\n", "-", timeOp(g, op.barrier, 1ull << 20, op.kernelAfter, op.memops),
           timeOp(g, op.barrier, maxBytes, op.kernelAfter, op.memops));
  }
  return 0;
}
