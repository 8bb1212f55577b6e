/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Gather: rank r's block (a.bytes bytes) lands at recvbuf + r * a.bytes on the root; the other ranks' recvbuf is never
 * touched. Moved, not reduced: instantiated per element size like the all-gather. The three forms are the reduce's
 * (reduce_ll.cu) with a copy where the reduce adds:
 *
 *   LL      every rank but the root pushes its block as LL packets into its region [parity][me] of the root's LL area,
 *           and the root copies the packets out; tokens (a flag, no data) from the root to every other rank and
 *           between those, so that every rank hears from every peer within the call.
 *   direct  (registered inputs) ready (pad A step 1, between every pair); the root copies every rank's input in place
 *           into its output, then posts done (pad B, release) to every rank, which waits for it before it lets its
 *           input go.
 *   staged  (plain buffers) the all-gather's rounds (stagedRounds): round k of every other rank's block into its
 *           inbox region of the root, copied out by the root.
 * In place (the root's sendbuf == recvbuf + root * a.bytes): the root's own block is not copied.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) gatherLL(fcclDevComm c, fcclDevArgs a) {
  using IO = UnitIO<MoveTraits<ES>, 8>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t packets = divUp(a.bytes, FCCL_LL_DATA_BYTES);
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int me = c.rank;
  const int root = a.root;
  Unit mine;
  if (first < packets) IO::load(a.sendbuf, first, a.bytes, mine);
  const uint64_t epoch = epochBegin(c, a.print);
  const uint64_t flag = llFlag(epoch);
  announceCall(c); /* for a peer in a call of another protocol (Spin::check) */
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const uint64_t perWriter = c.layout.llBytes / FCCL_LL_DATA_BYTES * FCCL_LL_PACKET_BYTES;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t pushOffset = c.layout.llOffset + (parity * n + me) * perWriter;
  const char* inbox = slotPtr(c, me, c.layout.llOffset + parity * n * perWriter);

  /* Tokens: the root's to every other rank, the others' to every rank but the root. */
  if (blockIdx.x == 0) {
    const int p = threadIdx.x;
    if (p < n && p != me && p != root) st_ll_packet(slotPtr(c, p, pushOffset), flag, flag);
  }
  if (me != root) {
    char* region = slotPtr(c, root, pushOffset);
    for (uint64_t i = first; i < packets; i += stride) {
      Unit d = mine;
      if (i != first) IO::load(a.sendbuf, i, a.bytes, d);
      const LLPacket packet = llPack(d.words[0], flag);
      st_ll_packet(region + i * FCCL_LL_PACKET_BYTES, packet.lo, packet.hi);
    }
    if (blockIdx.x == 0) {
      const int w = threadIdx.x;
      if (w < n && w != me) {
        Spin spin(c, FCCL_KERNEL_GATHER_LL, FCCL_PHASE_LL, w, epoch);
        uint64_t token;
        (void)llWait(inbox + (uint64_t)w * perWriter, flag, spin, token);
      }
    }
  } else {
    const uint64_t ownOut = a.recvbuf + (uint64_t)me * a.bytes;
    const bool copyOwn = a.sendbuf != ownOut;
    bool failed = false;
    for (uint64_t i = first; i < packets && !failed; i += stride) {
      if (copyOwn) {
        Unit d = mine;
        if (i != first) IO::load(a.sendbuf, i, a.bytes, d);
        IO::store(ownOut, i, a.bytes, d);
      }
      for (int w = 0; w < n; w++) {
        if (w == me) continue;
        Spin spin(c, FCCL_KERNEL_GATHER_LL, FCCL_PHASE_LL, w, epoch);
        Unit d;
        if (!llWait(inbox + (uint64_t)w * perWriter + i * FCCL_LL_PACKET_BYTES, flag, spin, d.words[0])) {
          failed = true;
          break;
        }
        IO::store(a.recvbuf + (uint64_t)w * a.bytes, i, a.bytes, d);
      }
    }
  }
  /* Every wait of the block is over before the LL area may be cleaned at a flag wrap (epochEnd). */
  __syncthreads();
  epochEnd(c, epoch);
}

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) gatherDirect(fcclDevComm c, fcclDevArgs a) {
  using IO = UnitIO<MoveTraits<ES>, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c, a.print);
  const int n = c.nranks;
  const int me = c.rank;
  const int root = a.root;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int kernel = FCCL_KERNEL_GATHER_DIRECT;

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_READY, epoch)) {
    epochEnd(c, epoch);
    return;
  }
  if (me == root) {
    const bool copyOwn = a.sendbuf != a.recvbuf + (uint64_t)me * a.bytes;
    for (uint64_t u = first; u < units; u += stride) {
      /* Every rank's unit loaded before the first store: n loads in flight per thread. */
      Unit v[FCCL_DEVICE_MAX_RANKS];
#pragma unroll
      for (int w = 0; w < FCCL_DEVICE_MAX_RANKS; w++)
        if (w < n && (w != me || copyOwn)) IO::load(a.peerSend[w], u, a.bytes, v[w]);
#pragma unroll
      for (int w = 0; w < FCCL_DEVICE_MAX_RANKS; w++)
        if (w < n && (w != me || copyOwn)) IO::store(a.recvbuf + (uint64_t)w * a.bytes, u, a.bytes, v[w]);
    }
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
  } else {
    (void)waitPeersIn(c, c.layout.signalBOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_DONE, epoch, 1u << root);
  }
  epochEnd(c, epoch);
}

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) gatherStaged(fcclDevComm c, fcclDevArgs a) {
  using IO = UnitIO<MoveTraits<ES>, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c, a.print);
  const int n = c.nranks;
  const int me = c.rank;
  const int root = a.root;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t roundCap = a.roundUnits;
  const uint64_t rounds = divUp(units, roundCap);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t ownOut = a.recvbuf + (uint64_t)me * a.bytes;

  /* Round k of our block into our inbox region of the root; on the root, round k of every writer's region (and of
   * its own block, out of place) into its output. */
  auto fill = [&](uint64_t k) {
    if (me == root) return;
    const StagedRound r(k, units, roundCap, epoch);
    char* inbox = ptr<char>(stagingRegion(c, c.layout.inboxOffset, r.parity, me, root));
    for (uint64_t j = first; j < r.len; j += stride) {
      Unit v;
      IO::load(a.sendbuf, r.start + j, a.bytes, v);
      st_data16(inbox + j * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
    }
  };
  auto consume = [&](uint64_t k) {
    if (me != root) return;
    const StagedRound r(k, units, roundCap, epoch);
    if (a.sendbuf != ownOut) {
      for (uint64_t j = first; j < r.len; j += stride) {
        Unit v;
        IO::load(a.sendbuf, r.start + j, a.bytes, v);
        IO::store(ownOut, r.start + j, a.bytes, v);
      }
    }
    for (int w = 0; w < n; w++) {
      if (w == me) continue;
      const char* inbox = ptr<const char>(stagingRegion(c, c.layout.inboxOffset, r.parity, w, me));
      const uint64_t out = a.recvbuf + (uint64_t)w * a.bytes;
      for (uint64_t j = first; j < r.len; j += stride) {
        Unit v;
        ld_data16(inbox + j * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
        IO::store(out, r.start + j, a.bytes, v);
      }
    }
  };
  stagedRounds(c, rounds, epoch, FCCL_KERNEL_GATHER_STAGED, fill, consume);
  epochEnd(c, epoch);
}

/* The three forms' instantiations, one per element size (1, 2, 4 or 8 bytes). */
FCCL_SIZED_KERNEL_TABLE(gatherLL)
FCCL_SIZED_KERNEL_TABLE(gatherDirect)
FCCL_SIZED_KERNEL_TABLE(gatherStaged)

}  // namespace fccl
