/*
 * One-shot all-reduce whose data crosses NVLink by the copy engines (FCCL_ALGO_CE). The copy engines move more
 * than SM loads and stores when both directions are busy (2x H200: about 390 GB/s each way against 359), and
 * a large 2-rank all-reduce is bound by exactly that. The host (collectives.c) puts three things on the streams:
 *
 *   ceStart kernel (the call's stream)  resets our CE flags, then a barrier: every peer has left its previous
 *                                       call, so the staging areas the rings overlay are free.
 *   copy stream (forked after it)       per chunk k (entry s = k % entries, use j = k / entries): wait until every
 *                                       peer freed entry s j times (cuStreamWaitValue32, when j > 0), copy the
 *                                       chunk into each peer's ring (cudaMemcpyAsync), then write arrived = j + 1
 *                                       into each peer's flags (cuStreamWriteValue32, which fences the copy
 *                                       first), and sent = j + 1 into ours.
 *   reduction kernel (the call's stream) per chunk: wait for every peer's arrived (acquire), reduce our input
 *                                       with the peers' ring entries in rank order, store; the block that finishes
 *                                       an entry last frees it in every writer's flags. Then a closing barrier,
 *                                       so that no peer still reads its ring when a later call reuses the staging.
 *
 * The copy stream joins the call's stream again, so the call ends when both have. Its waits are not bounded by
 * themselves: the reduction kernel is their watchdog. Whenever it gives up (timeout, abort, an earlier failure) it
 * poisons our freed words, which satisfies every wait the copy stream may still have, so nothing hangs; and when it
 * succeeds, every peer has passed the closing barrier, i.e. freed every entry we filled. In place, a chunk's
 * result overwrites our input only after our copy stream sent that chunk (sent >= j + 1).
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

namespace {

__device__ __forceinline__ uint32_t* ceWords(const fcclDevComm& c, int rank, uint64_t offset) {
  return ptr<uint32_t>(c.slots[rank] + offset);
}

__device__ __forceinline__ uint32_t ld_acquire_sys_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint32_t ld_relaxed_sys_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_sys_u32(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* Waits until *word >= value (thread-local; relaxed polls, one acquire load). True when the wait gave up. */
__device__ __forceinline__ bool waitWord(const fcclDevComm& c, const uint32_t* word, uint32_t value, int phase,
                                         int peer, uint64_t epoch) {
  Spin spin(c, FCCL_ALGO_CE, phase, peer, epoch);
  while (ld_relaxed_sys_u32(word) < value)
    if (spin.spin()) return true;
  (void)ld_acquire_sys_u32(word);
  return false;
}

/* Lets every wait of our copy stream pass: the kernel gave up, so it will not free entries any more. */
__device__ __forceinline__ void poisonFreed(const fcclDevComm& c) {
  uint32_t* freed = ceWords(c, c.rank, FCCL_CE_FREED_OFFSET);
  for (int i = threadIdx.x; i < FCCL_DEVICE_MAX_RANKS * FCCL_CE_MAX_ENTRIES; i += blockDim.x)
    st_relaxed_sys(reinterpret_cast<int32_t*>(freed + i), (int32_t)FCCL_CE_POISON);
}

/* The closing barrier's pad: row 0 of signal B whichever block gets there (only one block per rank does). */
__device__ __forceinline__ uint64_t* closePad(const fcclDevComm& c, int slotRank, int writer) {
  return ptr<uint64_t>(c.slots[slotRank] + c.layout.signalBOffset) + writer;
}

}  // namespace

/* One warp. Our arrived, count and sent words are reset before the barrier (nobody writes them until we pass it),
 * our freed words after it (a peer's previous call may have freed entries late, but it has now ended). */
__global__ void __launch_bounds__(FCCL_DEVICE_BARRIER_THREADS, 1) ceStartKernel(fcclDevComm c) {
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c);
  uint32_t* arrived = ceWords(c, c.rank, FCCL_CE_ARRIVED_OFFSET);
  for (int i = threadIdx.x; i < FCCL_DEVICE_MAX_RANKS * FCCL_CE_MAX_ENTRIES; i += blockDim.x) arrived[i] = 0;
  for (int i = threadIdx.x; i < FCCL_CE_MAX_ENTRIES; i += blockDim.x) {
    ceWords(c, c.rank, FCCL_CE_COUNT_OFFSET)[i] = 0;
    ceWords(c, c.rank, FCCL_CE_SENT_OFFSET)[i] = 0;
  }
  __syncthreads();
  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true);
  if (!waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, FCCL_ALGO_CE, FCCL_PHASE_BARRIER, epoch)) {
    uint32_t* freed = ceWords(c, c.rank, FCCL_CE_FREED_OFFSET);
    for (int i = threadIdx.x; i < FCCL_DEVICE_MAX_RANKS * FCCL_CE_MAX_ENTRIES; i += blockDim.x) freed[i] = 0;
  }
  epochEnd(c, epoch);
}

template <int DT, int OP>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allReduceCe(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t chunkUnits = a.roundUnits;
  const uint64_t chunkBytes = chunkUnits * FCCL_UNIT_BYTES;
  const uint64_t chunks = divUp(units, chunkUnits);
  const uint32_t entries = (uint32_t)a.ceEntries;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t* arrived = ceWords(c, me, FCCL_CE_ARRIVED_OFFSET);
  const uint32_t* sent = ceWords(c, me, FCCL_CE_SENT_OFFSET);
  uint32_t* count = ceWords(c, me, FCCL_CE_COUNT_OFFSET);
  __shared__ bool lastBlock;
  bool failed = false;

  for (uint64_t k = 0; k < chunks && !failed; k++) {
    const uint32_t entry = (uint32_t)(k % entries);
    const uint32_t use = (uint32_t)(k / entries);
    /* Thread p waits for peer p's chunk; thread n waits for our own copy stream (in place only). */
    const int t = threadIdx.x;
    bool gaveUp = false;
    if (t < n && t != me)
      gaveUp = waitWord(c, arrived + t * FCCL_CE_MAX_ENTRIES + entry, use + 1, FCCL_PHASE_CHUNK, t, epoch);
    else if (t == n && a.inPlace)
      gaveUp = waitWord(c, sent + entry, use + 1, FCCL_PHASE_SENT, me, epoch);
    if (__syncthreads_or(gaveUp)) {
      failed = true;
      break;
    }
    /* Rank w's units of this chunk: our input, or its ring entry (based so that unit index u addresses it). */
    const uint64_t begin = k * chunkUnits;
    const uint64_t end = begin + chunkUnits < units ? begin + chunkUnits : units;
    uint64_t bases[FCCL_DEVICE_MAX_RANKS];
#pragma unroll
    for (int w = 0; w < FCCL_DEVICE_MAX_RANKS; w++)
      bases[w] = w == me || w >= n ? a.sendbuf
                                   : c.slots[me] + fcclCeRingOffset(&c.layout, n, w, me) +
                                         (uint64_t)entry * chunkBytes - begin * FCCL_UNIT_BYTES;
    withRankBound(n, [&](auto bound) {
      constexpr int NR = decltype(bound)::value;
      constexpr int K = PullDepth<NR>::kUnits;
      for (uint64_t u = begin + first; u < end; u += K * stride) {
        Unit out[K];
        reduceRanksUnits<TT, OpTraits<OP>, NR, K>(bases, n, u, stride, end, a.bytes, out);
#pragma unroll
        for (int i = 0; i < K; i++)
          if (u + i * stride < end) IO::store(a.recvbuf, u + i * stride, a.bytes, out[i]);
      }
    });
    /* The last block through this entry frees it in every writer's flags: all blocks' loads of it are done. */
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      lastBlock = atomicAdd(count + entry, 1u) == (use + 1) * gridDim.x - 1;
      if (lastBlock) __threadfence();
    }
    __syncthreads();
    if (lastBlock && t < n && t != me)
      st_release_sys_u32(ceWords(c, t, FCCL_CE_FREED_OFFSET) + me * FCCL_CE_MAX_ENTRIES + entry, use + 1);
  }

  /* The last block through the last chunk knows that every block is done with every chunk: it closes the call
   * with the peers. */
  if (!failed && lastBlock) {
    const int p = threadIdx.x;
    bool gaveUp = false;
    if (p < n && p != me) {
      st_release_sys(closePad(c, p, me), sigValue(epoch, 1));
      Spin spin(c, FCCL_ALGO_CE, FCCL_PHASE_DONE, p, epoch);
      while (ld_relaxed_sys(closePad(c, me, p)) < sigValue(epoch, 1))
        if (spin.spin()) {
          gaveUp = true;
          break;
        }
    }
    failed = __syncthreads_or(gaveUp) != 0;
  }
  if (failed) poisonFreed(c);
  epochEnd(c, epoch);
}

#define FCCL_TABLE_KERNEL allReduceCe
FCCL_KERNEL_TABLE(ceKernel)
#undef FCCL_TABLE_KERNEL

}  // namespace fccl
