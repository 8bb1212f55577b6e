/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Scatter: block r of the root's sendbuf (a.bytes bytes at sendbuf + r * a.bytes) lands in rank r's recvbuf; the other
 * ranks' sendbuf is never read. Moved, not reduced: instantiated per element size. The three forms are the
 * broadcast's (broadcast.cu) with one block per receiver where the broadcast sends one message to all:
 *
 *   LL      the root pushes block p as LL packets into its region [parity][root] of rank p's LL area; every other
 *           rank sends a token (a flag, no data) to every rank, the root included, and every rank waits for the
 *           token of every other rank but the root: every rank hears from every peer within the call.
 *   direct  (registered outputs) ready (pad A step 1, between every pair), then the root stores block p into rank
 *           p's output and posts done (pad B, release) to each; the others wait for the root's done (acquire).
 *   staged  (plain buffers) ready as above; then the root pushes round k (parity (epoch + k) & 1) of block p into its
 *           inbox region of rank p, announced by pad A step k + 2; each rank copies it out and posts pad B step k + 1
 *           to the root, which waits for it before round k + 2 reuses the parity, and once more after the last round.
 * In place (the root's recvbuf == sendbuf + root * a.bytes): the root's own block is not copied.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) scatterLL(fcclDevComm c, fcclDevArgs a) {
  using IO = UnitIO<MoveTraits<ES>, 8>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t packets = divUp(a.bytes, FCCL_LL_DATA_BYTES);
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int me = c.rank;
  const int root = a.root;
  const uint64_t epoch = epochBegin(c, a.print);
  const uint64_t flag = llFlag(epoch);
  announceCall(c); /* for a peer in a call of another protocol (Spin::check) */
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const uint64_t perWriter = c.layout.llBytes / FCCL_LL_DATA_BYTES * FCCL_LL_PACKET_BYTES;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t pushOffset = c.layout.llOffset + (parity * n + me) * perWriter;
  const char* inbox = slotPtr(c, me, c.layout.llOffset + parity * n * perWriter);

  bool failed = false;
  if (me == root) {
    const uint64_t ownBlock = a.sendbuf + (uint64_t)me * a.bytes;
    const bool copyOwn = a.recvbuf != ownBlock;
    for (uint64_t i = first; i < packets; i += stride) {
#pragma unroll
      for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++) {
        if (p >= n || p == me) continue;
        Unit d;
        IO::load(a.sendbuf + (uint64_t)p * a.bytes, i, a.bytes, d);
        const LLPacket packet = llPack(d.words[0], flag);
        st_ll_packet(slotPtr(c, p, pushOffset) + i * FCCL_LL_PACKET_BYTES, packet.lo, packet.hi);
      }
      if (copyOwn) {
        Unit d;
        IO::load(ownBlock, i, a.bytes, d);
        IO::store(a.recvbuf, i, a.bytes, d);
      }
    }
  } else {
    /* Our token to every other rank, the root included. */
    if (blockIdx.x == 0) {
      const int p = threadIdx.x;
      if (p < n && p != me) st_ll_packet(slotPtr(c, p, pushOffset), flag, flag);
    }
    const char* region = inbox + (uint64_t)root * perWriter;
    for (uint64_t i = first; i < packets && !failed; i += stride) {
      Spin spin(c, FCCL_KERNEL_SCATTER_LL, FCCL_PHASE_LL, root, epoch);
      Unit d;
      if (!llWait(region + i * FCCL_LL_PACKET_BYTES, flag, spin, d.words[0])) {
        failed = true;
        break;
      }
      IO::store(a.recvbuf, i, a.bytes, d);
    }
  }
  if (blockIdx.x == 0 && !failed) {
    /* Every other rank's token but the root's (its data stands for it). */
    const int w = threadIdx.x;
    if (w < n && w != me && w != root) {
      Spin spin(c, FCCL_KERNEL_SCATTER_LL, FCCL_PHASE_LL, w, epoch);
      uint64_t token;
      (void)llWait(inbox + (uint64_t)w * perWriter, flag, spin, token);
    }
  }
  /* Every wait of the block is over before the LL area may be cleaned at a flag wrap (epochEnd). */
  __syncthreads();
  epochEnd(c, epoch);
}

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) scatterDirect(fcclDevComm c, fcclDevArgs a) {
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
  const int kernel = FCCL_KERNEL_SCATTER_DIRECT;

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_READY, epoch)) {
    epochEnd(c, epoch);
    return;
  }
  if (me == root) {
    const bool copyOwn = a.recvbuf != a.sendbuf + (uint64_t)me * a.bytes;
    for (uint64_t u = first; u < units; u += stride) {
      /* Every receiver's unit loaded before the first store: n loads in flight per thread. */
      Unit v[FCCL_DEVICE_MAX_RANKS];
#pragma unroll
      for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
        if (p < n && (p != me || copyOwn)) IO::load(a.sendbuf + (uint64_t)p * a.bytes, u, a.bytes, v[p]);
#pragma unroll
      for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
        if (p < n && (p != me || copyOwn)) IO::store(a.peerRecv[p], u, a.bytes, v[p]);
    }
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
  } else {
    (void)waitPeersIn(c, c.layout.signalBOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_DONE, epoch, 1u << root);
  }
  epochEnd(c, epoch);
}

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) scatterStaged(fcclDevComm c, fcclDevArgs a) {
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
  const int kernel = FCCL_KERNEL_SCATTER_STAGED;
  const uint32_t rootOnly = 1u << root;

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_READY, epoch)) {
    epochEnd(c, epoch);
    return;
  }
  if (me == root) {
    const uint64_t ownBlock = a.sendbuf + (uint64_t)me * a.bytes;
    const bool copyOwn = a.recvbuf != ownBlock;
    for (uint64_t k = 0; k < rounds; k++) {
      if (k >= 2 && waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k - 1), true, kernel,
                              FCCL_PHASE_CONSUMED, epoch))
        break;
      const StagedRound r(k, units, roundCap, epoch);
      for (int p = 0; p < n; p++) {
        if (p == me) continue;
        char* outbound = ptr<char>(stagingRegion(c, c.layout.inboxOffset, r.parity, me, p));
        const uint64_t block = a.sendbuf + (uint64_t)p * a.bytes;
        for (uint64_t j = first; j < r.len; j += stride) {
          Unit v;
          IO::load(block, r.start + j, a.bytes, v);
          st_data16(outbound + j * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
        }
      }
      if (copyOwn) {
        for (uint64_t j = first; j < r.len; j += stride) {
          Unit v;
          IO::load(ownBlock, r.start + j, a.bytes, v);
          IO::store(a.recvbuf, r.start + j, a.bytes, v);
        }
      }
      __syncthreads();
      postPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 2), true);
      if (k + 1 == rounds)
        (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)rounds), true, kernel, FCCL_PHASE_CONSUMED,
                        epoch);
    }
  } else {
    for (uint64_t k = 0; k < rounds; k++) {
      if (waitPeersIn(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 2), true, kernel, FCCL_PHASE_INBOX,
                      epoch, rootOnly))
        break;
      const StagedRound r(k, units, roundCap, epoch);
      const char* inbox = ptr<const char>(stagingRegion(c, c.layout.inboxOffset, r.parity, root, me));
      for (uint64_t j = first; j < r.len; j += stride) {
        Unit v;
        ld_data16(inbox + j * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
        IO::store(a.recvbuf, r.start + j, a.bytes, v);
      }
      __syncthreads();
      postPeersIn(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k + 1), true, rootOnly);
    }
  }
  epochEnd(c, epoch);
}

/* The three forms' instantiations, one per element size (1, 2, 4 or 8 bytes). */
FCCL_SIZED_KERNEL_TABLE(scatterLL)
FCCL_SIZED_KERNEL_TABLE(scatterDirect)
FCCL_SIZED_KERNEL_TABLE(scatterStaged)

}  // namespace fccl
