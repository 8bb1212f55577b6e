/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory-ordering primitives and the bounded wait. Every access to a flag, an LL packet or a host-mapped word goes
 * through one of these named functions, so the ordering each one gives is written down once, here:
 *
 *   relaxed.sys  the access reaches the point of coherence shared by all GPUs and the CPU (a poll never spins on
 *                a stale L1 line) but orders nothing else. Enough for pure rendezvous, and for data that carries
 *                its own flag (LL packets), where the flag and the data arrive in one single-copy-atomic word.
 *   release.sys  every earlier load and store of this thread (and, through a preceding __syncthreads, of its
 *                block) is visible system-wide before the flag is. Used where a flag hands over data written in
 *                the same kernel. Costs a system fence (docs/perf/notes/link.md has the price per hop).
 *   acquire.sys  later loads of this thread (and, after a __syncthreads, of its block) see what the releasing
 *                writer wrote before its flag. Polls spin relaxed and make one acquire load once the flag is
 *                seen, so the L1 invalidation an acquire implies is paid once, not per iteration.
 *
 * No __threadfence_system() on the hot path; the only fence sits on the error path.
 */
#ifndef FCCL_DEVICE_PRIMITIVES_CUH_
#define FCCL_DEVICE_PRIMITIVES_CUH_

#include "device_host.h"
#include "fccl.h"

#include <stdint.h>

namespace fccl {

/* Relaxed system-scope 64-bit load: the poll of a signal pad that guards nothing written in this kernel. */
__device__ __forceinline__ uint64_t ld_relaxed_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/* Relaxed system-scope 32-bit load: host-mapped words (abort) and the device error claim. */
__device__ __forceinline__ int32_t ld_relaxed_sys(const int32_t* p) {
  int32_t v;
  asm volatile("ld.relaxed.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* Acquire system-scope load: made once a relaxed poll saw the flag, so that this thread's later loads (and its
 * block's, after a __syncthreads) observe the data the writer released with the flag. */
__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/* Relaxed system-scope 64-bit store: a signal that hands over no data (rendezvous, "my buffers are ready"). */
__device__ __forceinline__ void st_relaxed_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Relaxed system-scope 32-bit store: the error details written to host-mapped memory. */
__device__ __forceinline__ void st_relaxed_sys(int32_t* p, int32_t v) {
  asm volatile("st.relaxed.sys.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed_sys_u64(uint64_t* p, uint64_t v) { st_relaxed_sys(p, v); }

/* Release system-scope store: a signal that hands over data this block stored before it (call after
 * __syncthreads so the whole block's stores are ordered before the flag, by cumulativity). */
__device__ __forceinline__ void st_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Signal pad accesses: {signal value, call tag} in one 16-byte access (FCCL_PAD_BYTES). Each 8-byte word is single-copy
 * atomic, the pair is not: a poll may see a new value beside the previous tag (never the tag without its value
 * being written too), which waitPeersIn allows for. Orderings as for the scalar flags above. */
__device__ __forceinline__ void st_pad_relaxed_sys(uint64_t* p, uint64_t value, uint64_t tag) {
  asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(value), "l"(tag) : "memory");
}
__device__ __forceinline__ void st_pad_release_sys(uint64_t* p, uint64_t value, uint64_t tag) {
  asm volatile("st.release.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(value), "l"(tag) : "memory");
}
__device__ __forceinline__ void ld_pad_relaxed_sys(const uint64_t* p, uint64_t& value, uint64_t& tag) {
  asm volatile("ld.relaxed.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(value), "=l"(tag) : "l"(p) : "memory");
}
__device__ __forceinline__ void ld_pad_acquire_sys(const uint64_t* p, uint64_t& value, uint64_t& tag) {
  asm volatile("ld.acquire.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(value), "=l"(tag) : "l"(p) : "memory");
}

/* LL packet store: two 8-byte words, each {4 data bytes, 4-byte flag}. Each 8-byte element is single-copy atomic,
 * so a reader that sees the flag in a word also sees that word's data; the vector only saves an instruction.
 * volatile is relaxed at system scope: it goes straight to the peer's memory. */
__device__ __forceinline__ void st_ll_packet(void* p, uint64_t lo, uint64_t hi) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(lo), "l"(hi) : "memory");
}

/* LL packet poll: relaxed system-scope load of both words (never a stale L1 line). */
__device__ __forceinline__ void ld_ll_packet(const void* p, uint64_t& lo, uint64_t& hi) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(lo), "=l"(hi) : "l"(p) : "memory");
}

/* Plain (weak) 16-byte load of data: ordered by the flags around it, never used to poll. p is 16-byte aligned. */
__device__ __forceinline__ void ld_data16(const void* p, uint64_t& lo, uint64_t& hi) {
  asm volatile("ld.global.v2.u64 {%0, %1}, [%2];" : "=l"(lo), "=l"(hi) : "l"(p) : "memory");
}

/* Plain (weak) 16-byte store of data (local or to a peer over NVLink); a later release flag publishes it. */
__device__ __forceinline__ void st_data16(void* p, uint64_t lo, uint64_t hi) {
  asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(lo), "l"(hi) : "memory");
}

/* Plain (weak) 8-byte load and store of data (LL inputs and outputs). p is 8-byte aligned. */
__device__ __forceinline__ uint64_t ld_data8(const void* p) {
  uint64_t v;
  asm volatile("ld.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_data8(void* p, uint64_t v) {
  asm volatile("st.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/*
 * Programmatic dependent launch (launch.cu sets the attribute when FCCL_PDL=1; both instructions are no-ops for a
 * launch without it). First thing in every kernel: let the next kernel on the stream be scheduled now (it cannot
 * start work before this grid has finished: it waits here in turn), then wait until the kernel before this one
 * has finished and its memory is visible. Nothing a kernel reads (inputs, epochs, flags) may be read before.
 */
__device__ __forceinline__ void gridDependencyEnter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Nanoseconds of the GPU's global timer (the same clock on every SM). */
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <typename T>
__device__ __forceinline__ T* ptr(uint64_t address) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(address));
}

__device__ __forceinline__ fcclDevState* devState(const fcclDevComm& c) { return ptr<fcclDevState>(c.state); }

/* The block's call: its print in the low FCCL_PRINT_BITS, its epoch above (epochBegin writes it, every thread reads
 * it after the __syncthreads there). */
static __shared__ uint64_t fcclBlockTag;

__device__ __forceinline__ uint64_t callTag() { return fcclBlockTag; }
__device__ __forceinline__ uint32_t callPrint() { return (uint32_t)fcclBlockTag & FCCL_PRINT_MASK; }

/*
 * Whether a flag seen while waiting for `expected` names the same call slot (epoch) with another print: the peer
 * runs another call at this epoch. Tags and LL flags alike: the print in the low FCCL_PRINT_BITS, (part of) the
 * epoch above. 0 (nothing seen, or a cleared LL packet) never matches.
 */
__device__ __forceinline__ bool printMismatch(uint64_t seen, uint64_t expected) {
  return seen != expected && seen != 0 && (seen >> FCCL_PRINT_BITS) == (expected >> FCCL_PRINT_BITS);
}

/* Signal value of step `step` (>= 1) of the call with epoch `epoch`. */
__device__ __forceinline__ uint64_t sigValue(uint64_t epoch, uint32_t step) {
  return (epoch << FCCL_STEP_BITS) | step;
}

/*
 * Records why this kernel gives up. The first failure of the communicator claims the report with a device-scope
 * atomic on device memory (atomics on host memory need PCIe atomics, which not every host has), writes the
 * details to the host-mapped words and the code last, after a system fence: error path only. Arguments by value:
 * a reference to the kernel's parameters would make every kernel copy them to its stack.
 */
static __device__ __noinline__ void recordError(uint64_t stateAddr, uint64_t hostAddr, int32_t code, int rank,
                                                int kernel, int phase, int peer, uint64_t epoch, uint64_t waitedNs,
                                                uint32_t peerPrint) {
  if (atomicCAS(&ptr<fcclDevState>(stateAddr)->errorClaim, 0, 1) != 0) return;
  fcclDevHostWords* h = ptr<fcclDevHostWords>(hostAddr);
  st_relaxed_sys(&h->errorPeer, peer);
  st_relaxed_sys(&h->errorBlock, (int32_t)blockIdx.x);
  st_relaxed_sys(&h->errorPhase, phase);
  st_relaxed_sys(&h->errorKernel, kernel);
  st_relaxed_sys(&h->errorRank, rank);
  st_relaxed_sys_u64(&h->errorEpoch, epoch);
  st_relaxed_sys_u64(&h->errorWaitedNs, waitedNs);
  st_relaxed_sys(reinterpret_cast<int32_t*>(&h->errorPrint), (int32_t)callPrint());
  st_relaxed_sys(reinterpret_cast<int32_t*>(&h->errorPeerPrint), (int32_t)peerPrint);
  __threadfence_system();
  st_relaxed_sys(&h->errorCode, code);
}

/*
 * The bound of every spin loop. Call spin() once per unsuccessful poll; it returns true when the wait must stop:
 * the host set the abort word, another wait of this communicator already failed, the flag last seen (spin(seen,
 * expected)) names this epoch with another print (recorded as fcclInvalidUsage: ranks out of step), or
 * FCCL_TIMEOUT passed (recorded as fcclTimeout). The clock is read every 256 polls; the abort word and the error claim
 * only once a wait has lasted kQuietNs. The abort word lives in host memory: when every waiting block of a large
 * grid read it at once, the reads went over PCIe one after another, so that a short wait (a peer that started
 * late) grew many times longer and then made the peer late in turn. An abort is still seen about a millisecond
 * into a wait.
 */
struct Spin {
  static constexpr uint64_t kQuietNs = 1000000; /* 1 ms: far longer than any skew a healthy call absorbs */
  uint64_t stateAddr;
  uint64_t hostAddr;
  uint64_t abortAddr;
  uint64_t timeoutNs;
  uint64_t ownSlot;       /* our slot: the peer's board entry and pad A [0] tag, read in the slow path */
  uint64_t signalAOffset;
  uint64_t start;
  uint64_t epoch;
  uint32_t polls;
  int rank;
  int kernel;
  int phase;
  int peer;

  __device__ __forceinline__ Spin(const fcclDevComm& c, int kernelId, int phaseId, int peerRank, uint64_t e)
      : stateAddr(c.state), hostAddr(c.hostWords), abortAddr(c.abortFlag), timeoutNs(c.timeoutNs),
        ownSlot(c.slots[c.rank]), signalAOffset(c.layout.signalAOffset), start(0), epoch(e), polls(0), rank(c.rank),
        kernel(kernelId), phase(phaseId), peer(peerRank) {}

  __device__ __forceinline__ bool spin() { return spin(0, 0); }

  __device__ __forceinline__ bool spin(uint64_t seen, uint64_t expected) {
    if ((++polls & 255u) != 0) return false;
    const uint64_t now = globaltimer_ns();
    if (start == 0) start = now;
    if (now - start < kQuietNs) return false;
    return !check(stateAddr, hostAddr, abortAddr, timeoutNs, ownSlot, signalAOffset, start, now, rank, kernel, phase,
                  peer, epoch, seen, expected);
  }

  /* Records that the peer's flag `seen` names this epoch with another print (printMismatch). */
  __device__ __forceinline__ void outOfStep(uint64_t seen) {
    recordError(stateAddr, hostAddr, fcclInvalidUsage, rank, kernel, phase, peer, epoch, 0,
                (uint32_t)seen & FCCL_PRINT_MASK);
  }

  /*
   * Whether the wait may go on (false: aborted, failed elsewhere, out of step or timed out; the last two are
   * recorded here). Out of step: the flag seen, or the peer's call as its board entry (LL, LL128) or its pad A of
   * block 0 (every other kernel posts it first) in our slot tells it, is this epoch's with another print. The last
   * two catch a peer whose call of this epoch posts nothing where we poll.
   */
  __device__ __noinline__ static bool check(uint64_t stateAddr, uint64_t hostAddr, uint64_t abortAddr,
                                            uint64_t timeoutNs, uint64_t ownSlot, uint64_t signalAOffset,
                                            uint64_t start, uint64_t now, int rank, int kernel, int phase, int peer,
                                            uint64_t epoch, uint64_t seen, uint64_t expected) {
    if (ld_relaxed_sys(ptr<const int32_t>(abortAddr)) != 0) return false;
    if (ld_relaxed_sys(&ptr<fcclDevState>(stateAddr)->errorClaim) != 0) return false;
    const uint64_t tag = callTag();
    const uint64_t board = ld_relaxed_sys(ptr<const uint64_t>(ownSlot + FCCL_SLOT_BOARD_OFFSET) + peer);
    const uint64_t padTag = ld_relaxed_sys(ptr<const uint64_t>(ownSlot + signalAOffset) + 2 * peer + 1);
    uint64_t other = 0;
    if (printMismatch(seen, expected))
      other = seen;
    else if (printMismatch(board, tag))
      other = board;
    else if (printMismatch(padTag, tag))
      other = padTag;
    if (other != 0) {
      recordError(stateAddr, hostAddr, fcclInvalidUsage, rank, kernel, phase, peer, epoch, now - start,
                  (uint32_t)other & FCCL_PRINT_MASK);
      return false;
    }
    if (now - start > timeoutNs) {
      recordError(stateAddr, hostAddr, fcclTimeout, rank, kernel, phase, peer, epoch, now - start, 0);
      return false;
    }
    return true;
  }
};

}  // namespace fccl

#endif /* FCCL_DEVICE_PRIMITIVES_CUH_ */
