/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every collective kernel shares: epochs, signal pads, unit loads and stores that handle any alignment and
 * the tail, and the reduction of one unit across ranks.
 *
 * Epochs. fcclDevState.epochs holds one counter per block index, all equal between kernels: the epoch of the next
 * call. Block b reads counter b when it starts, and at its end writes the next epoch into every counter j with
 * j % gridDim == b, so whatever the grid size, each counter advances exactly once per call and they stay equal.
 * Kernels advance them, the host never passes an epoch: a call captured in a CUDA graph is right on every replay.
 *
 * Signals. Each slot has two pad arrays, [block][writer]. Writer w's block b posts into the reader's slot,
 * the reader's block b spins on its own memory (local polls, remote stores), waiting for >= the expected value.
 * Each (block, writer) pad is written by one thread of one block, in program order, so its values only grow.
 *
 * Fingerprints. A pad holds the signal value and beside it the writer's call tag, (epoch << FCCL_PRINT_BITS) |
 * print; LL packets carry the tag's low 32 bits as their flag and LL128 lines the whole tag. A waiter keeps its one
 * compare per poll; once a pad's value is reached it compares the tag with its own (one compare, off the loop),
 * and the slow path of a wait (Spin, after a millisecond) decodes the last flag seen. A flag of this epoch with
 * another print means the peer runs another call in this call's place: the kernel stops with fcclInvalidUsage
 * (docs/errors.md#out-of-step). A peer legitimately ahead posts a later epoch and is not checked.
 */
#ifndef FCCL_DEVICE_COMMON_CUH_
#define FCCL_DEVICE_COMMON_CUH_

#include "device_host.h"
#include "primitives.cuh"
#include "reduce.cuh"

namespace fccl {

__device__ __forceinline__ char* slotPtr(const fcclDevComm& c, int rank, uint64_t offset) {
  return ptr<char>(c.slots[rank] + offset);
}

/* Where `writer` stages data for `receiver` in the staging area at areaOffset (inbox or result) of the receiver's
 * slot, for one parity. */
__device__ __forceinline__ uint64_t stagingRegion(const fcclDevComm& c, uint64_t areaOffset, uint64_t parity,
                                                  int writer, int receiver) {
  return c.slots[receiver] + areaOffset + fcclPeerRegion(c.nranks, parity, writer, receiver) * c.layout.chunkBytes;
}

/* The per-peer regions of one parity in the staging area at areaOffset, as addresses: ours in each peer's slot
 * (outbound[p], where we write to p) and each writer's in our slot (inbound[w], where w writes to us), for ranks
 * below the kernel's rank bound NR. Entries for ourselves and for ranks past n are 0. Computed once per call or
 * round, before the loops, so no peer index arithmetic runs per unit. */
template <int NR>
__device__ __forceinline__ void peerRegionsOutbound(const fcclDevComm& c, uint64_t areaOffset, uint64_t parity,
                                                    uint64_t (&outbound)[FCCL_DEVICE_MAX_RANKS]) {
#pragma unroll
  for (int p = 0; p < NR; p++)
    outbound[p] = p < c.nranks && p != c.rank ? stagingRegion(c, areaOffset, parity, c.rank, p) : 0;
}

template <int NR>
__device__ __forceinline__ void peerRegionsInbound(const fcclDevComm& c, uint64_t areaOffset, uint64_t parity,
                                                   uint64_t (&inbound)[FCCL_DEVICE_MAX_RANKS]) {
#pragma unroll
  for (int w = 0; w < NR; w++)
    inbound[w] = w < c.nranks && w != c.rank ? stagingRegion(c, areaOffset, parity, w, c.rank) : 0;
}

/* Reads this block's epoch (one load, shared with the block), keeps the call's tag (epoch and print, callTag) for
 * the block's flags and, from block 0, records the epoch in our slot header. Call after gridDependencyEnter. */
__device__ __forceinline__ uint64_t epochBegin(const fcclDevComm& c, uint32_t print) {
  __shared__ uint64_t blockEpoch; /* the whole epoch: the tag keeps its low 44 bits */
  if (threadIdx.x == 0) {
    uint64_t epoch = devState(c)->epochs[blockIdx.x];
    blockEpoch = epoch;
    fcclBlockTag = (epoch << FCCL_PRINT_BITS) | (print & FCCL_PRINT_MASK);
    if (blockIdx.x == 0) ptr<fcclSlotHeader>(c.slots[c.rank])->lastEpoch = epoch;
  }
  __syncthreads();
  return blockEpoch;
}

/* epochBegin for a reducing kernel of type TT and op OT: a pre-multiplied sum's block also gets its scalar
 * (fcclBlockScalar), from the argument or, for a scalar in device memory, from there: read after
 * gridDependencyEnter, so that a value the kernel before wrote is the one used; the epoch's __syncthreads publishes
 * it. Every other op costs nothing more than epochBegin. */
template <class TT, class OT>
__device__ __forceinline__ uint64_t epochBeginOp(const fcclDevComm& c, const fcclDevArgs& a) {
  if constexpr (OpPreMul<OT>::value) {
    if (threadIdx.x == 0)
      fcclBlockScalar = a.scalarPtr != 0 ? (uint64_t)*ptr<const typename TT::Bits>(a.scalarPtr) : a.scalar;
  }
  return epochBegin(c, a.print);
}

/*
 * Block 0 of a kernel that posts no signal pads (LL, LL128) writes the call's tag into its entry of every peer's
 * call board (FCCL_SLOT_BOARD_OFFSET), so that a peer waiting in another protocol's area meets our print there
 * (Spin::check). One relaxed store per peer, nothing waits for it. Call after epochBegin.
 */
__device__ __forceinline__ void announceCall(const fcclDevComm& c) {
  const int p = threadIdx.x;
  if (blockIdx.x == 0 && p < c.nranks && p != c.rank)
    st_relaxed_sys(ptr<uint64_t>(c.slots[p] + FCCL_SLOT_BOARD_OFFSET) + c.rank, callTag());
}

/*
 * Clears our LL area of one parity. Run when the epoch bits of the LL flag (FCCL_LL_EPOCH_BITS) are about to wrap, by
 * the kernels of the two calls before the wrap: flags left by calls 2^12 epochs ago can then never equal a new one, nor
 * pass for another print of the current epoch (a flag is never 0, the cleared value: prints are not). Safe: nobody
 * writes this parity until every rank has passed the next call, which needs us. Thread g clears the packets with index
 * == g modulo the grid, the same ones the LL kernel had it consume.
 */
static __device__ __noinline__ void llClean(uint64_t llBase, uint64_t llBytes, int nranks, uint64_t parity) {
  const uint64_t perWriter = llBytes / FCCL_LL_DATA_BYTES * FCCL_LL_PACKET_BYTES;
  const uint64_t packets = llBytes / FCCL_LL_DATA_BYTES;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (int w = 0; w < nranks; w++) {
    char* region = ptr<char>(llBase + (parity * nranks + w) * perWriter);
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < packets; i += stride)
      st_ll_packet(region + i * FCCL_LL_PACKET_BYTES, 0, 0);
  }
}

/* Advances the counters this block owns (see the file comment); the LL area is cleaned before a flag wrap (one
 * call in 2^11 cleans half of it: about a microsecond per SM for each MiB). */
__device__ __forceinline__ void epochEnd(const fcclDevComm& c, uint64_t epoch) {
  const uint64_t next = fcclEpochNext(epoch);
  uint64_t* epochs = devState(c)->epochs;
  for (uint32_t j = blockIdx.x + threadIdx.x * gridDim.x; j < FCCL_DEVICE_MAX_BLOCKS; j += blockDim.x * gridDim.x)
    epochs[j] = next;
  if ((epoch & FCCL_LL_EPOCH_MASK) >= FCCL_LL_EPOCH_MASK - 1u)
    llClean(c.slots[c.rank] + c.layout.llOffset, c.layout.llBytes, c.nranks, epoch & 1);
}

/* The pad [this block][writer] of slotRank's pad array at areaOffset: its value, then its tag. */
__device__ __forceinline__ uint64_t* signalPad(const fcclDevComm& c, int slotRank, uint64_t areaOffset, int writer) {
  return ptr<uint64_t>(c.slots[slotRank] + areaOffset +
                       ((uint64_t)blockIdx.x * FCCL_DEVICE_MAX_RANKS + writer) * FCCL_PAD_BYTES);
}

/*
 * Posts value, with the call's tag, to the pad [this block][our rank] of every peer in mask (bit p: rank p; our own bit
 * is ignored): thread p signals peer p. With release, call it after a __syncthreads so that everything the block stored
 * (and loaded) before is ordered before the flag. The collectives whose flags do not go between every pair (a
 * broadcast's "done" goes to or from the root only) pass a mask; postPeers is every peer.
 */
__device__ __forceinline__ void postPeersIn(const fcclDevComm& c, uint64_t areaOffset, uint64_t value, bool release,
                                            uint32_t mask) {
  const int p = threadIdx.x;
  if (p < c.nranks && p != c.rank && ((mask >> p) & 1u)) {
    uint64_t* pad = signalPad(c, p, areaOffset, c.rank);
    if (release)
      st_pad_release_sys(pad, value, callTag());
    else
      st_pad_relaxed_sys(pad, value, callTag());
  }
}

__device__ __forceinline__ void postPeers(const fcclDevComm& c, uint64_t areaOffset, uint64_t value, bool release) {
  postPeersIn(c, areaOffset, value, release, ~0u);
}

/*
 * Waits until every peer in mask posted >= value to our pad [this block][peer]: thread p waits for peer p
 * (relaxed polls; with acquire, one acquire load once seen). All threads of the block must call it. Returns true,
 * on every thread, when the block has to give up (timeout, abort, an earlier failure, or a peer whose call of this
 * epoch has another print); the cause is already recorded. waitPeers is every peer.
 *
 * The pad's tag is checked once its value is reached: equal to ours, the fast path. Otherwise it is either older
 * than the value (the 16-byte pad need not arrive whole: read it again until it is this epoch's or later), later
 * (a peer ahead), or this epoch's with another print: out of step.
 */
__device__ __forceinline__ bool waitPeersIn(const fcclDevComm& c, uint64_t areaOffset, uint64_t value, bool acquire,
                                            int kernel, int phase, uint64_t epoch, uint32_t mask) {
  bool failed = false;
  const int p = threadIdx.x;
  if (p < c.nranks && p != c.rank && ((mask >> p) & 1u)) {
    const uint64_t* pad = signalPad(c, c.rank, areaOffset, p);
    const uint64_t expected = callTag();
    Spin spin(c, kernel, phase, p, epoch);
    uint64_t seen, tag;
    ld_pad_relaxed_sys(pad, seen, tag);
    while (seen < value) {
      if (spin.spin(tag, expected)) {
        failed = true;
        break;
      }
      ld_pad_relaxed_sys(pad, seen, tag);
    }
    if (!failed && acquire) ld_pad_acquire_sys(pad, seen, tag);
    if (!failed && tag != expected) {
      while (!failed && (tag >> FCCL_PRINT_BITS) < (expected >> FCCL_PRINT_BITS)) {
        failed = spin.spin();
        ld_pad_relaxed_sys(pad, seen, tag);
      }
      if (!failed && printMismatch(tag, expected)) {
        spin.outOfStep(tag);
        failed = true;
      }
    }
  }
  return __syncthreads_or(failed) != 0;
}

__device__ __forceinline__ bool waitPeers(const fcclDevComm& c, uint64_t areaOffset, uint64_t value, bool acquire,
                                          int kernel, int phase, uint64_t epoch) {
  return waitPeersIn(c, areaOffset, value, acquire, kernel, phase, epoch, ~0u);
}

/* ---- LL packets: 8 data bytes as {4 data bytes, 4-byte flag} x 2; the flag is the call tag's low word -------- */

/* The flag of the block's call (epoch is the block's, from epochBegin), in the high word of a packet's halves. */
__device__ __forceinline__ uint64_t llFlag(uint64_t epoch) {
  return (uint64_t)(((uint32_t)epoch << FCCL_PRINT_BITS) | callPrint()) << 32;
}

struct LLPacket {
  uint64_t lo, hi;
};

__device__ __forceinline__ LLPacket llPack(uint64_t word, uint64_t flag) {
  return {(word & 0xffffffffull) | flag, (word >> 32) | flag};
}

/* Polls packet until both halves carry flag, then returns true with its data in word; false when the wait gives
 * up (spin's timeout or abort, or the writer's flag of this epoch with another print: already recorded). */
__device__ __forceinline__ bool llWait(const char* packet, uint64_t flag, Spin& spin, uint64_t& word) {
  uint64_t lo, hi;
  for (;;) {
    ld_ll_packet(packet, lo, hi);
    if ((lo & 0xffffffff00000000ull) == flag && (hi & 0xffffffff00000000ull) == flag) break;
    if (spin.spin(lo >> 32, flag >> 32)) return false;
  }
  word = (lo & 0xffffffffull) | (hi << 32);
  return true;
}

/* Round k of a staged call of `units` units in rounds of at most `cap`: its first unit, its length and the
 * staging parity it uses. */
struct StagedRound {
  uint64_t start, len, parity;
  __device__ __forceinline__ StagedRound(uint64_t k, uint64_t units, uint64_t cap, uint64_t epoch)
      : start(k * cap), len(units - k * cap < cap ? units - k * cap : cap), parity((epoch + k) & 1) {}
};

/*
 * The staged forms' rounds (the all-gather's, the reduce-scatter's and the fused norm's): fill(k) stores round k
 * into the inbox regions of parity (epoch + k) & 1 that this rank writes, after every peer posted that it consumed
 * round k - 2 of that parity (pad B step k - 1); pad A step k + 1 (release) announces it. Once every peer's round k
 * arrived (acquire), round k + 1 is pushed, so that it crosses while consume(k) reads round k; pad B step k + 1
 * (release) then says round k was consumed. The call ends once every peer consumed our last round, so that the next
 * call's rounds find every inbox free, whatever that call is. All threads of the block call it; a failed wait
 * (recorded) ends the rounds.
 */
template <class Fill, class Consume>
__device__ __forceinline__ void stagedRounds(const fcclDevComm& c, uint64_t rounds, uint64_t epoch, int kernel,
                                             Fill&& fill, Consume&& consume) {
  auto push = [&](uint64_t k) -> bool {
    if (k >= 2 && waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k - 1), true, kernel,
                            FCCL_PHASE_CONSUMED, epoch))
      return false;
    fill(k);
    __syncthreads();
    postPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 1), true);
    return true;
  };

  bool ok = rounds == 0 || push(0);
  for (uint64_t k = 0; ok && k < rounds; k++) {
    if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 1), true, kernel, FCCL_PHASE_INBOX,
                  epoch))
      break;
    if (k + 1 < rounds && !push(k + 1)) break;
    consume(k);
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k + 1), true);
    if (k + 1 == rounds)
      (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)rounds), true, kernel,
                      FCCL_PHASE_CONSUMED, epoch);
  }
}

/* ---- units: 16 bytes (vector paths) and 8 bytes (LL), any alignment, any tail ------------------------------- */

/* The 8-byte words of one unit, as the element-by-element paths pass them (by value: in registers). */
template <int B>
struct UnitWords {
  uint64_t w[B / 8];
};

/*
 * The element-by-element paths of UnitIO (a misaligned buffer, the tail), out of line: one copy per element size
 * and unit size, called from every access. Inlined at every access (up to 8 ranks x 4 units per loop, in three rank
 * bounds), they doubled the kernels' code for no gain in time. Missing elements read as zero bits and are never
 * stored.
 */
template <class Bits, int B>
struct UnitTail {
  static constexpr int kElems = B / (int)sizeof(Bits);

  /* Assembled into the 8-byte words, never written element by element into the unit: with per-element writes,
   * types narrower than 4 bytes had the vector path's result split into 16- or 8-bit registers where the two
   * paths join, and the thread waited for that load right there (docs/perf/notes/small-messages.md). */
  static __device__ __noinline__ UnitWords<B> load(uint64_t base, uint64_t offset, uint64_t bytes) {
    UnitWords<B> x = {};
#pragma unroll
    for (int i = 0; i < kElems; i++) {
      const uint64_t at = offset + (uint64_t)i * sizeof(Bits);
      if (at < bytes) {
        const int byteInUnit = i * (int)sizeof(Bits);
        x.w[byteInUnit / 8] |= (uint64_t)*ptr<const Bits>(base + at) << (8 * (byteInUnit % 8));
      }
    }
    return x;
  }

  static __device__ __noinline__ void store(uint64_t base, uint64_t offset, uint64_t bytes, UnitWords<B> x) {
#pragma unroll
    for (int i = 0; i < kElems; i++) {
      const uint64_t at = offset + (uint64_t)i * sizeof(Bits);
      if (at < bytes) {
        const int byteInUnit = i * (int)sizeof(Bits);
        *ptr<Bits>(base + at) = (Bits)(x.w[byteInUnit / 8] >> (8 * (byteInUnit % 8)));
      }
    }
  }
};

/*
 * Unit u of a buffer is bytes [u * B, u * B + B) of it, clipped to `bytes`. A full unit at an aligned address is
 * one vector access; anything else goes element by element (UnitTail; the buffer is element-aligned), never
 * touching bytes past the end.
 */
template <class TT, int B>
struct UnitIO {
  using Bits = typename TT::Bits;
  using Unit = UnitBits<Bits, B>;
  using Tail = UnitTail<Bits, B>;

  __device__ __forceinline__ static void load(uint64_t base, uint64_t u, uint64_t bytes, Unit& x) {
    const uint64_t offset = u * B;
    if ((base & (B - 1)) == 0 && offset + B <= bytes) {
      if constexpr (B == 16)
        ld_data16(ptr<const void>(base + offset), x.words[0], x.words[1]);
      else
        x.words[0] = ld_data8(ptr<const void>(base + offset));
      return;
    }
    const UnitWords<B> words = Tail::load(base, offset, bytes);
#pragma unroll
    for (int i = 0; i < B / 8; i++) x.words[i] = words.w[i];
  }

  __device__ __forceinline__ static void store(uint64_t base, uint64_t u, uint64_t bytes, const Unit& x) {
    const uint64_t offset = u * B;
    if ((base & (B - 1)) == 0 && offset + B <= bytes) {
      if constexpr (B == 16)
        st_data16(ptr<void>(base + offset), x.words[0], x.words[1]);
      else
        st_data8(ptr<void>(base + offset), x.words[0]);
      return;
    }
    UnitWords<B> words;
#pragma unroll
    for (int i = 0; i < B / 8; i++) words.w[i] = x.words[i];
    Tail::store(base, offset, bytes, words);
  }
};

template <class TT>
using Unit16 = typename UnitIO<TT, 16>::Unit;

/* The element bits of an element size: the kernels that move data without reducing it are instantiated per element
 * size (UnitIO's tail goes element by element), not per type and op. */
template <int ES>
struct MoveTraits;
template <>
struct MoveTraits<1> {
  using Bits = uint8_t;
};
template <>
struct MoveTraits<2> {
  using Bits = uint16_t;
};
template <>
struct MoveTraits<4> {
  using Bits = uint32_t;
};
template <>
struct MoveTraits<8> {
  using Bits = uint64_t;
};


/*
 * Reduces K units of every rank's buffer (bases[r], r < n <= NR) in rank order: units u0 + k * step, k < K, those
 * below end. All ranks' loads of all K units are issued before the first add, so a thread keeps K * n 16-byte
 * loads in flight: remote loads need many bytes in flight to fill NVLink (PullDepth).
 */
template <class TT, class OT, int NR, int K>
__device__ __forceinline__ void reduceRanksUnits(const uint64_t (&bases)[FCCL_DEVICE_MAX_RANKS], int n, uint64_t u0,
                                                 uint64_t step, uint64_t end, uint64_t bytes, Unit16<TT> (&out)[K]) {
  using IO = UnitIO<TT, 16>;
  Unit16<TT> v[K][NR];
#pragma unroll
  for (int k = 0; k < K; k++) {
    const uint64_t u = u0 + (uint64_t)k * step;
#pragma unroll
    for (int r = 0; r < NR; r++)
      if (r < n && u < end) IO::load(bases[r], u, bytes, v[k][r]);
  }
  /* Only the units below end: the last pass of a loop often has fewer than K, and the others are not worth their
   * instructions. */
#pragma unroll
  for (int k = 0; k < K; k++) {
    if (u0 + (uint64_t)k * step >= end) break;
    UnitReducer<TT, OT, 16> acc;
    acc.first(v[k][0]);
#pragma unroll
    for (int r = 1; r < NR; r++)
      if (r < n) acc.add(v[k][r]);
    acc.result(out[k], n);
  }
}

/* Reduces unit u of every rank's buffer (bases[r], r < nranks <= NR) in rank order into out. */
template <class TT, class OT, int NR>
__device__ __forceinline__ void reduceRanks16(const uint64_t (&bases)[FCCL_DEVICE_MAX_RANKS], int nranks,
                                              uint64_t u, uint64_t bytes, Unit16<TT>& out) {
  Unit16<TT> outs[1];
  reduceRanksUnits<TT, OT, NR, 1>(bases, nranks, u, 0, u + 1, bytes, outs);
  out = outs[0];
}

/* Units a thread of a pulling kernel loads at once for a rank bound NR: 8 loads in flight whatever the rank count
 * (one unit per rank left about 1 MB in flight across the GPU, near what NVLink's latency needs under load). The
 * 2-rank depth is in tuning.h. */
template <int NR>
struct PullDepth {
  static constexpr int kUnits = NR <= 2 ? FCCL_PULL_DEPTH_2RANKS : NR <= 4 ? 2 : 1;
};

/*
 * The reducing loop of every kernel but LL's and LL128's: units [begin, end) of every rank's buffer (bases),
 * this thread's share (first, first + stride, ...), reduced in rank order PullDepth units at a time; n <= NR, the
 * kernel's rank bound (fcclRankBound). store(u, out) writes each result wherever the algorithm needs it.
 */
template <class TT, class OT, int NR, class Store>
__device__ __forceinline__ void reducePulled(const uint64_t (&bases)[FCCL_DEVICE_MAX_RANKS], int n, uint64_t begin,
                                             uint64_t end, uint64_t first, uint64_t stride, uint64_t bytes,
                                             Store&& store) {
  constexpr int K = PullDepth<NR>::kUnits;
  for (uint64_t u = begin + first; u < end; u += K * stride) {
    Unit16<TT> out[K];
    reduceRanksUnits<TT, OT, NR, K>(bases, n, u, stride, end, bytes, out);
#pragma unroll
    for (int k = 0; k < K; k++)
      if (u + k * stride < end) store(u + k * stride, out[k]);
  }
}

__device__ __forceinline__ uint64_t divUp(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace fccl

#endif /* FCCL_DEVICE_COMMON_CUH_ */
