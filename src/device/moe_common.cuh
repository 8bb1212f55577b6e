/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the mixture-of-experts kernels share (moe_dispatch.cu, moe_combine.cu; docs/moe.md): their flags in the
 * layout's workspace, the grid barrier, the block-wide scan and the split of rows among warps.
 *
 * Flags. A workspace's pads [kind][writer] hold {value, the writer's call tag}, as the slots' signal pads do
 * (common.cuh); the value is the writer's epoch, which only grows. COUNTS, DATA and RESULT are posted once per
 * call by block 0 of the writer, after a grid barrier, with release semantics; the reader polls its own memory and
 * checks the tag like waitPeersIn: a flag of this epoch with another print is a peer out of step. FREE says that the
 * writer has read its staging of the call whose epoch it holds: a rank writes into a peer's counts or staging only
 * once the peer's FREE reached the epoch of the layout's previous call (fcclMoeScratchHeader.lastEpoch), so that
 * dispatch and combine share the staging bytes and calls follow each other with no host synchronisation.
 *
 * Grid barrier. The blocks of one kernel meet through a counter and a generation word in the layout's scratch
 * (every block is resident: the host launches at most one per SM). Arriving is a system-scope fence and an
 * acquire-release add; the last block to arrive resets the counter and releases the next generation. Everything a
 * block stored before the barrier (its pushes into peers' staging too) is then ordered before what any block does
 * after it, such as block 0's release of a flag to the peers.
 */
#ifndef FCCL_DEVICE_MOE_COMMON_CUH_
#define FCCL_DEVICE_MOE_COMMON_CUH_

#include "common.cuh"
#include "moe_shape.h"

namespace fccl {

/* ---- ordering primitives of the grid barrier (device scope: the blocks of one kernel) -------------------- */

/* Orders this thread's earlier loads and stores (and, after a __syncthreads, its block's) before its later ones,
 * for every observer in the system: what the block pushed into peers' memory before the barrier. */
__device__ __forceinline__ void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

__device__ __forceinline__ uint32_t atom_add_acq_rel_gpu(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void st_relaxed_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* ---- the layout's buffers ------------------------------------------------------------------------------------ */

__device__ __forceinline__ fcclMoeScratchHeader* moeHeader(const fcclMoeArgs& a) {
  return ptr<fcclMoeScratchHeader>(a.scratch);
}

template <typename T>
__device__ __forceinline__ T* moeScratch(const fcclMoeArgs& a, uint64_t offset) {
  return ptr<T>(a.scratch + offset);
}

/* The pad [kind][writer] of rank's workspace. */
__device__ __forceinline__ uint64_t* moeFlag(const fcclMoeArgs& a, int rank, int kind, int writer) {
  return ptr<uint64_t>(a.workspace[rank] + ((uint64_t)kind * FCCL_DEVICE_MAX_RANKS + writer) * FCCL_PAD_BYTES);
}

/* Source's counts row in rank's workspace. */
__device__ __forceinline__ int32_t* moeCounts(const fcclMoeArgs& a, int rank, int source) {
  return ptr<int32_t>(a.workspace[rank] + a.shape.countsOffset + (uint64_t)source * a.shape.countStride * 4);
}

/* ---- error reports --------------------------------------------------------------------------------------------- */

/*
 * Records that rank source's dispatch found invalid routing (fcclInvalidArgument; detail: fcclMoeBadEntry of the
 * first entry), as recordError records a failed wait: the first report of the communicator claims the words, the
 * code is written last. The kernel itself goes on (the entry is dropped), so that no peer waits for it.
 */
static __device__ __noinline__ void moeRecordInvalid(uint64_t stateAddr, uint64_t hostAddr, int rank, int source,
                                                     uint64_t epoch, uint64_t detail) {
  if (atomicCAS(&ptr<fcclDevState>(stateAddr)->errorClaim, 0, 1) != 0) return;
  fcclDevHostWords* h = ptr<fcclDevHostWords>(hostAddr);
  st_relaxed_sys(&h->errorPeer, source);
  st_relaxed_sys(&h->errorBlock, (int32_t)blockIdx.x);
  st_relaxed_sys(&h->errorPhase, FCCL_PHASE_MOE_ROUTING);
  st_relaxed_sys(&h->errorKernel, FCCL_KERNEL_MOE);
  st_relaxed_sys(&h->errorRank, rank);
  st_relaxed_sys_u64(&h->errorEpoch, epoch);
  st_relaxed_sys_u64(&h->errorWaitedNs, 0);
  st_relaxed_sys_u64(&h->errorDetail, detail);
  st_relaxed_sys(reinterpret_cast<int32_t*>(&h->errorPrint), (int32_t)callPrint());
  st_relaxed_sys(reinterpret_cast<int32_t*>(&h->errorPeerPrint), 0);
  __threadfence_system();
  st_relaxed_sys(&h->errorCode, (int32_t)fcclInvalidArgument);
}

/* ---- flags --------------------------------------------------------------------------------------------------- */

/*
 * Thread p < nranks of the calling block posts value with the call's tag into the pad [kind][our rank] of rank p's
 * workspace (our own included). With release, call it after a grid barrier or a __syncthreads, so that what the
 * kernel stored before is ordered before the flag.
 */
__device__ __forceinline__ void moePostAll(const fcclDevComm& c, const fcclMoeArgs& a, int kind, uint64_t value,
                                           bool release) {
  const int p = threadIdx.x;
  if (p < c.nranks) {
    uint64_t* pad = moeFlag(a, p, kind, c.rank);
    if (release)
      st_pad_release_sys(pad, value, callTag());
    else
      st_pad_relaxed_sys(pad, value, callTag());
  }
}

/*
 * Waits until the pad [kind][writer] of our workspace holds >= value, then loads it once with acquire. With
 * checkTag the pad's tag must be this call's (as waitPeersIn: an older one is read again, one of this epoch with
 * another print is a peer out of step); FREE pads hold an earlier call's tag and are not checked. Returns true when
 * the wait gives up (already recorded). One thread's wait.
 */
__device__ __forceinline__ bool moeWaitFlag(const fcclDevComm& c, const fcclMoeArgs& a, int kind, int writer,
                                            uint64_t value, bool checkTag, int phase, uint64_t epoch) {
  const uint64_t* pad = moeFlag(a, c.rank, kind, writer);
  const uint64_t expected = checkTag ? callTag() : 0;
  Spin spin(c, FCCL_KERNEL_MOE, phase, writer, epoch);
  uint64_t seen, tag;
  ld_pad_relaxed_sys(pad, seen, tag);
  while (seen < value) {
    if (spin.spin(checkTag ? tag : 0, expected)) return true;
    ld_pad_relaxed_sys(pad, seen, tag);
  }
  ld_pad_acquire_sys(pad, seen, tag);
  if (checkTag && tag != expected) {
    while ((tag >> FCCL_PRINT_BITS) < (expected >> FCCL_PRINT_BITS)) {
      if (spin.spin()) return true;
      ld_pad_relaxed_sys(pad, seen, tag);
    }
    if (printMismatch(tag, expected)) {
      spin.outOfStep(tag);
      return true;
    }
  }
  return false;
}

/* Every thread p < nranks waits for writer p's pad of kind (moeWaitFlag); all threads of the block call it. True, on
 * every thread, when the block has to give up. */
__device__ __forceinline__ bool moeWaitAll(const fcclDevComm& c, const fcclMoeArgs& a, int kind, uint64_t value,
                                           bool checkTag, int phase, uint64_t epoch) {
  bool failed = false;
  if ((int)threadIdx.x < c.nranks && value > 0)
    failed = moeWaitFlag(c, a, kind, threadIdx.x, value, checkTag, phase, epoch);
  return __syncthreads_or(failed) != 0;
}

/* ---- grid barrier (see the file comment) --------------------------------------------------------------------- */

__device__ __forceinline__ bool moeGridSync(const fcclDevComm& c, const fcclMoeArgs& a, uint64_t epoch) {
  __shared__ int gridFailed;
  __syncthreads();
  if (threadIdx.x == 0) {
    gridFailed = 0;
    fence_acq_rel_sys();
    if (gridDim.x > 1) {
      fcclMoeScratchHeader* h = moeHeader(a);
      const uint32_t generation = ld_acquire_gpu(&h->barrierGeneration);
      const uint32_t arrived = atom_add_acq_rel_gpu(&h->barrierCount, 1u);
      if (arrived == gridDim.x - 1) {
        st_relaxed_gpu(&h->barrierCount, 0u);
        st_release_gpu(&h->barrierGeneration, generation + 1u);
      } else {
        Spin spin(c, FCCL_KERNEL_MOE, FCCL_PHASE_MOE_GRID, c.rank, epoch);
        while (ld_acquire_gpu(&h->barrierGeneration) == generation)
          if (spin.spin()) {
            gridFailed = 1;
            break;
          }
      }
    }
  }
  __syncthreads();
  return gridFailed != 0;
}

/* ---- block-wide exclusive scan of up to 2 x FCCL_MOE_THREADS values in shared memory, in place ----------------- */

__device__ __forceinline__ int moeWarpInclusiveScan(int v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int other = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += other;
  }
  return v;
}

/* data[0..n) becomes its exclusive prefix sum; returns the total on every thread. n <= 2 * blockDim.x; all threads
 * of the block call it. */
__device__ __forceinline__ int moeBlockExclusiveScan(int* data, int n) {
  __shared__ int warpTotals[FCCL_MOE_WARPS];
  __shared__ int blockTotal;
  const int i0 = 2 * threadIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int a = i0 < n ? data[i0] : 0, b = i0 + 1 < n ? data[i0 + 1] : 0;
  const int inclusive = moeWarpInclusiveScan(a + b);
  if (lane == 31) warpTotals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int total = lane < FCCL_MOE_WARPS ? warpTotals[lane] : 0;
    const int scanned = moeWarpInclusiveScan(total);
    if (lane < FCCL_MOE_WARPS) warpTotals[lane] = scanned - total;
    if (lane == FCCL_MOE_WARPS - 1) blockTotal = scanned;
  }
  __syncthreads();
  const int before = warpTotals[warp] + inclusive - (a + b);
  if (i0 < n) data[i0] = before;
  if (i0 + 1 < n) data[i0 + 1] = before + a;
  __syncthreads();
  return blockTotal;
}

/* ---- rows among warps ------------------------------------------------------------------------------------------ */

/*
 * items rows of units 16-byte units each, shared by `warps` warps: when rows are fewer than warps, each row is split
 * into parts of consecutive units (at least 32 units, a unit per lane, per part), so that every warp has work. Item
 * i of items x parts is row i / parts, units [begin, end) of it.
 */
struct MoeSplit {
  uint64_t parts;
  __device__ __forceinline__ MoeSplit(uint64_t items, uint64_t units, uint64_t warps) {
    const uint64_t most = units / 32 > 0 ? units / 32 : 1;
    uint64_t p = items > 0 ? warps / items : 1;
    parts = p < 1 ? 1 : (p > most ? most : p);
  }
  __device__ __forceinline__ uint64_t total(uint64_t items) const { return items * parts; }
  __device__ __forceinline__ void range(uint64_t item, uint64_t units, uint64_t& row, uint64_t& begin,
                                        uint64_t& end) const {
    row = item / parts;
    const uint64_t part = item % parts;
    begin = units * part / parts;
    end = units * (part + 1) / parts;
  }
};

/* Lane masks below this lane. */
__device__ __forceinline__ uint32_t lanesBelow() {
  uint32_t m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

}  // namespace fccl

#endif /* FCCL_DEVICE_MOE_COMMON_CUH_ */
