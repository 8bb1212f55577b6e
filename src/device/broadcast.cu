/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Broadcast: root's block (a.bytes bytes of its sendbuf) lands in every rank's recvbuf. Moved, not reduced:
 * instantiated per element size like the all-gather.
 *
 *   LL      root pushes its block as LL packets into its region [parity][root] of every peer's LL area; every
 *           other rank pushes one packet (a token: its flag, no data) into its region of every peer but root, and
 *           every rank waits for a token from every other non-root. The tokens cost nothing on the critical path
 *           (they cross beside the data) and keep the rule every kernel relies on to reuse the LL and staging
 *           areas: within a call, each rank hears from every peer something the peer sent after finishing its
 *           previous call.
 *   direct  (registered output) ready (pad A step 1, relaxed, between every pair: the same rule), then root
 *           stores its block into every peer's output and posts done (pad B, release) to each; the others wait
 *           for root's done (acquire).
 *   staged  (plain buffers) ready as above; then root pushes round k (parity (epoch + k) & 1) into its inbox region
 *           of every peer, announced by pad A step k + 2; each peer copies it out and posts pad B step k + 1 to
 *           root, which waits for it before round k + 2 reuses the parity, and once more after the last round.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) broadcastLL(fcclDevComm c, fcclDevArgs a) {
  using IO = UnitIO<MoveTraits<ES>, 8>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t packets = divUp(a.bytes, FCCL_LL_DATA_BYTES);
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int me = c.rank;
  const int root = a.root;
  Unit mine;
  if (me == root && first < packets) IO::load(a.sendbuf, first, a.bytes, mine);
  const uint64_t epoch = epochBegin(c, a.print);
  const uint64_t flag = llFlag(epoch);
  announceCall(c); /* for a peer in a call of another protocol (Spin::check) */
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const uint64_t perWriter = c.layout.llBytes / FCCL_LL_DATA_BYTES * FCCL_LL_PACKET_BYTES;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t pushOffset = c.layout.llOffset + (parity * n + me) * perWriter;
  const char* inbox = slotPtr(c, me, c.layout.llOffset + parity * n * perWriter);

  if (me == root) {
    const bool copy = a.sendbuf != a.recvbuf;
    for (uint64_t i = first; i < packets; i += stride) {
      Unit d = mine;
      if (i != first) IO::load(a.sendbuf, i, a.bytes, d);
      const LLPacket packet = llPack(d.words[0], flag);
#pragma unroll
      for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
        if (p < n && p != me)
          st_ll_packet(slotPtr(c, p, pushOffset) + i * FCCL_LL_PACKET_BYTES, packet.lo, packet.hi);
      if (copy) IO::store(a.recvbuf, i, a.bytes, d);
    }
  } else if (blockIdx.x == 0) {
    /* Our token to every other rank, root included: packet 0 of our region, flag only. */
    const int p = threadIdx.x;
    if (p < n && p != me) st_ll_packet(slotPtr(c, p, pushOffset), flag, flag);
  }

  bool failed = false;
  if (me != root) {
    const char* region = inbox + (uint64_t)root * perWriter;
    for (uint64_t i = first; i < packets && !failed; i += stride) {
      Spin spin(c, FCCL_KERNEL_BROADCAST_LL, FCCL_PHASE_LL, root, epoch);
      Unit d;
      if (!llWait(region + i * FCCL_LL_PACKET_BYTES, flag, spin, d.words[0])) {
        failed = true;
        break;
      }
      IO::store(a.recvbuf, i, a.bytes, d);
    }
  }
  if (blockIdx.x == 0 && !failed) {
    /* Every other non-root's token (root's data stands for its own). */
    const int w = threadIdx.x;
    if (w < n && w != me && w != root) {
      Spin spin(c, FCCL_KERNEL_BROADCAST_LL, FCCL_PHASE_LL, w, epoch);
      uint64_t token;
      (void)llWait(inbox + (uint64_t)w * perWriter, flag, spin, token);
    }
  }
  /* Every wait of the block is over before the LL area may be cleaned at a flag wrap (epochEnd): thread w of block 0
   * waits for rank w's token in packet 0 of its region, which thread 0 cleans. */
  __syncthreads();
  epochEnd(c, epoch);
}

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) broadcastDirect(fcclDevComm c, fcclDevArgs a) {
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
  const int kernel = FCCL_KERNEL_BROADCAST_DIRECT;

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_READY, epoch)) {
    epochEnd(c, epoch);
    return;
  }
  if (me == root) {
    const bool copy = a.sendbuf != a.recvbuf;
    for (uint64_t u = first; u < units; u += stride) {
      Unit v;
      IO::load(a.sendbuf, u, a.bytes, v);
#pragma unroll
      for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
        if (p < n && (p != me || copy)) IO::store(a.peerRecv[p], u, a.bytes, v);
    }
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
  } else {
    (void)waitPeersIn(c, c.layout.signalBOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_DONE, epoch,
                      1u << root);
  }
  epochEnd(c, epoch);
}

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) broadcastStaged(fcclDevComm c, fcclDevArgs a) {
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
  const int kernel = FCCL_KERNEL_BROADCAST_STAGED;
  const uint32_t rootOnly = 1u << root;

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_READY, epoch)) {
    epochEnd(c, epoch);
    return;
  }
  if (me == root) {
    const bool copy = a.sendbuf != a.recvbuf;
    for (uint64_t k = 0; k < rounds; k++) {
      if (k >= 2 && waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k - 1), true, kernel,
                              FCCL_PHASE_CONSUMED, epoch))
        break;
      const StagedRound r(k, units, roundCap, epoch);
      uint64_t outbound[FCCL_DEVICE_MAX_RANKS] = {};
#pragma unroll
      for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
        if (p < n && p != me) outbound[p] = stagingRegion(c, c.layout.inboxOffset, r.parity, me, p);
      for (uint64_t j = first; j < r.len; j += stride) {
        Unit v;
        IO::load(a.sendbuf, r.start + j, a.bytes, v);
#pragma unroll
        for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
          if (p < n && p != me) st_data16(ptr<void>(outbound[p] + j * FCCL_UNIT_BYTES), v.words[0], v.words[1]);
        if (copy) IO::store(a.recvbuf, r.start + j, a.bytes, v);
      }
      __syncthreads();
      postPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 2), true);
      if (k + 1 == rounds)
        (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)rounds), true, kernel,
                        FCCL_PHASE_CONSUMED, epoch);
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
FCCL_SIZED_KERNEL_TABLE(broadcastLL)
FCCL_SIZED_KERNEL_TABLE(broadcastDirect)
FCCL_SIZED_KERNEL_TABLE(broadcastStaged)

}  // namespace fccl
