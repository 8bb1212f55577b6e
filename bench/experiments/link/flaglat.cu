/* SPDX-License-Identifier: Apache-2.0 */
// What a flag costs between GPUs 0 and 1 of one process, with the library's flag accesses (primitives.cuh): the
// one-way time of a flag ping-pong (one thread per GPU, each flag written into the reader's memory, so every poll
// reads local memory and every store crosses NVLink once, as in the library), relaxed and release/acquire; and per
// op, both GPUs at once, a graph-replayed empty kernel, a graph-replayed cross-GPU barrier kernel (relaxed and
// release/acquire) and an eager empty kernel launch. Every wait gives up after a second. docs/perf/notes/link.md
// has the results.
//   usage: flaglat
#include <chrono>
#include <cstdint>

#include "graph_harness.cuh"
#include "primitives.cuh"

using fccl::globaltimer_ns;
using fccl::ld_acquire_sys;
using fccl::ld_relaxed_sys;
using fccl::st_relaxed_sys;
using fccl::st_release_sys;

namespace {

constexpr uint64_t kGiveUpNs = 1000000000ull;
constexpr int kRoundTrips = 10000;

// Waits until *flag >= value: relaxed polls, then (release mode) one acquire load, as the library's waits do.
// False when it gave up.
__device__ __forceinline__ bool waitFlag(const uint64_t* flag, uint64_t value, bool acquire) {
  const uint64_t start = globaltimer_ns();
  while (ld_relaxed_sys(flag) < value)
    if (globaltimer_ns() - start > kGiveUpNs) return false;
  if (acquire) (void)ld_acquire_sys(flag);
  return true;
}

__device__ __forceinline__ void postFlag(uint64_t* flag, uint64_t value, bool release) {
  if (release)
    st_release_sys(flag, value);
  else
    st_relaxed_sys(flag, value);
}

// Ping (GPU 0) posts round trip i into the pong's flag and waits for the pong's answer in its own; the pong answers
// each one. Values start past `base`, so runs need no clearing. ns of the whole loop on the ping's side.
__global__ void pingPong(uint64_t* mine, uint64_t* peers, uint64_t base, bool ping, bool ordered, uint64_t* ns,
                         int* failed) {
  const uint64_t start = globaltimer_ns();
  for (int i = 1; i <= kRoundTrips; i++) {
    if (ping) postFlag(peers, base + i, ordered);
    if (!waitFlag(mine, base + i, ordered)) {
      *failed = 1;
      return;
    }
    if (!ping) postFlag(peers, base + i, ordered);
  }
  *ns = globaltimer_ns() - start;
}

__global__ void emptyKernel() {}

// Cross-GPU barrier of one thread: the epoch in our own memory, our flag (the peer posts), the peer's flag.
__global__ void barrierKernel(uint64_t* epoch, uint64_t* mine, uint64_t* peers, bool ordered, int* failed) {
  const uint64_t e = *epoch + 1;
  *epoch = e;
  postFlag(peers, e, ordered);
  if (!waitFlag(mine, e, ordered)) *failed = 1;
}

struct Gpu : GraphRank {
  uint64_t* flag;   // posted by the peer
  uint64_t* epoch;  // the barrier's
  uint64_t* ns;
  int* failed;
};

void checkFailed(Gpu* g, const char* what) {
  for (int d = 0; d < 2; d++) {
    int failed = 0;
    CK(cudaSetDevice(g[d].device));
    CK(cudaMemcpy(&failed, g[d].failed, sizeof(int), cudaMemcpyDeviceToHost));
    if (failed) {
      fprintf(stderr, "%s: a wait on GPU %d gave up\n", what, d);
      exit(1);
    }
  }
}

// One-way us of a flag: best of 3 ping-pong runs.
float oneWay(Gpu* g, bool ordered, uint64_t* base) {
  float best = 1e30f;
  for (int run = 0; run < 3; run++) {
    for (int d = 1; d >= 0; d--) {  // the pong first, so that it polls before the first ping lands
      CK(cudaSetDevice(d));
      pingPong<<<1, 1, 0, g[d].stream>>>(g[d].flag, g[1 - d].flag, *base, d == 0, ordered, g[d].ns, g[d].failed);
      CK(cudaGetLastError());
    }
    for (int d = 0; d < 2; d++) {
      CK(cudaSetDevice(d));
      CK(cudaStreamSynchronize(g[d].stream));
    }
    checkFailed(g, "ping-pong");
    *base += kRoundTrips;
    uint64_t ns = 0;
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(&ns, g[0].ns, sizeof(ns), cudaMemcpyDeviceToHost));
    const float us = ns / 1000.0f / (2 * kRoundTrips);
    if (us < best) best = us;
  }
  return best;
}

}  // namespace

int main() {
  needGpus(2);
  Gpu g[2];
  for (int d = 0; d < 2; d++) {
    g[d].device = d;
    CK(cudaSetDevice(d));
    CK(cudaStreamCreateWithFlags(&g[d].stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g[d].start));
    CK(cudaEventCreate(&g[d].stop));
    CK(cudaMalloc(&g[d].flag, 8));
    CK(cudaMalloc(&g[d].epoch, 8));
    CK(cudaMalloc(&g[d].ns, 8));
    CK(cudaMalloc(&g[d].failed, sizeof(int)));
    CK(cudaMemset(g[d].flag, 0, 8));
    CK(cudaMemset(g[d].epoch, 0, 8));
    CK(cudaMemset(g[d].failed, 0, sizeof(int)));
    CK(cudaDeviceSynchronize());
  }
  uint64_t base = 0;
  printf("flag one-way, relaxed                      %8.2f us\n", oneWay(g, false, &base));
  printf("flag one-way, release/acquire              %8.2f us\n", oneWay(g, true, &base));

  // The barrier's epochs and flags continue from the ping-pong's values, so nothing needs clearing.
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    CK(cudaMemcpy(g[d].epoch, &base, 8, cudaMemcpyHostToDevice));
  }
  GraphRank* ranks[2] = {&g[0], &g[1]};
  const int ops = 20, replays = 50;
  printf("graph-replayed empty kernel                %8.2f us per kernel\n",
         timeGraphs(ranks, 2, ops, replays, [&](int d) { emptyKernel<<<1, 32, 0, g[d].stream>>>(); }));
  for (int ordered = 0; ordered < 2; ordered++) {
    const float us = timeGraphs(ranks, 2, ops, replays, [&](int d) {
      barrierKernel<<<1, 1, 0, g[d].stream>>>(g[d].epoch, g[d].flag, g[1 - d].flag, ordered != 0, g[d].failed);
    });
    checkFailed(g, "barrier");
    printf("graph-replayed barrier kernel, %-15s %8.2f us per op\n", ordered ? "release/acq" : "relaxed", us);
  }

  // Eager launches of an empty kernel on one stream of GPU 0: the host's launch rate once the queue is full.
  const int launches = 20000;
  CK(cudaSetDevice(0));
  for (int i = 0; i < 1000; i++) emptyKernel<<<1, 32, 0, g[0].stream>>>();
  CK(cudaStreamSynchronize(g[0].stream));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; i++) emptyKernel<<<1, 32, 0, g[0].stream>>>();
  CK(cudaStreamSynchronize(g[0].stream));
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  printf("eager empty kernel launches, one stream    %8.2f us per kernel\n", us / launches);
  return 0;
}
