/*
 * Two-shot all-reduce over registered buffers: rank r owns units [r * share, (r + 1) * share). It reduces its units
 * in rank order and stores the result into every rank's output (all-gather by push). Each unit crosses NVLink twice,
 * whatever the rank count. The reduce-scatter takes one of three forms (a.scatter, fcclScatter_t):
 *
 *   pull (any rank count, in place or not) the owner reads its units from every rank's input in place.
 *     ready  (pad A step 1, relaxed post, one acquire load once seen) a peer reached the call: its input is final
 *            and its output may be written.
 *     done   (pad B, release, waited with acquire) a peer finished reading our input and writing our output.
 *   push into the inbox (2 ranks, the share fits one staging chunk) each rank first stores its units of the peer's
 *     share into its inbox region of this call's parity in the peer's slot; the owner reduces its input with them.
 *     sent   (pad A step 1, release, acquire) the peer's units of our share are in our inbox, and the peer has
 *            reached the call, so its output may be written: no separate "ready" crossing.
 *     done   as above.
 *   push into the output (2 ranks, out of place) the same, into the peer's output at the units' own place, which the
 *     owner then reduces in place with its input; no chunk limit, one more crossing:
 *     ready, then sent (pad A step 2), then done.
 * Only stores cross NVLink in the push forms: on 2x H200, stores in both directions at once move 365 GB/s per
 * direction, loads 335 (docs/perf/2026-11-30-h200x2-s5/linkbw.txt). 64 MiB: 189.5 us by push into the output
 * against 202 by pull.
 * In place is safe: in the pull form only the owner reads or writes a unit, the reads before the writes, in one
 * thread; in the inbox form a peer writes our units of its share only after our "sent", posted after we read them.
 * The inbox is reused across calls by parity, as by the one-shot push (oneshot_push.cu).
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allReduceTwoshotReg(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t share = divUp(units, (uint64_t)n);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

  const uint64_t begin = (uint64_t)me * share;
  const uint64_t end = begin + share < units ? begin + share : units;
  /* Stores a reduced unit of our share into every rank's output (ours included). */
  auto storeAll = [&](auto bound, uint64_t u, const Unit& out) {
#pragma unroll
    for (int p = 0; p < decltype(bound)::value; p++)
      if (p < n) IO::store(a.peerRecv[p], u, a.bytes, out);
  };
  if (a.scatter == FCCL_SCATTER_PUSH_INBOX) {
    const int peer = 1 - me;
    const uint64_t parity = epoch & 1;
    const uint64_t peerBegin = (uint64_t)peer * share;
    const uint64_t peerEnd = peerBegin + share < units ? peerBegin + share : units;
    char* peerInbox = slotPtr(c, peer, c.layout.inboxOffset + fcclPeerRegion(n, parity, me, peer) *
                                                                  c.layout.chunkBytes);
    for (uint64_t u = peerBegin + first; u < peerEnd; u += stride) {
      Unit v;
      IO::load(a.sendbuf, u, a.bytes, v);
      st_data16(peerInbox + (u - peerBegin) * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
    }
    __syncthreads();
    postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true);
    if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, FCCL_ALGO_TWOSHOT_REG, FCCL_PHASE_INBOX,
                  epoch)) {
      epochEnd(c, epoch);
      return;
    }
    uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
    bases[me] = a.sendbuf;
    /* The inbox holds our share from its first unit: shift the base so that unit index u addresses it. */
    bases[peer] = c.slots[me] + c.layout.inboxOffset + fcclPeerRegion(n, parity, peer, me) * c.layout.chunkBytes -
                  begin * FCCL_UNIT_BYTES;
    reducePulled<TT, OpTraits<OP>>(bases, n, begin, end, first, stride, a.bytes, storeAll);
  } else {
    postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
    if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, FCCL_ALGO_TWOSHOT_REG, FCCL_PHASE_READY,
                  epoch)) {
      epochEnd(c, epoch);
      return;
    }
    if (a.scatter == FCCL_SCATTER_PUSH_RECV) { /* 2 ranks, out of place: fcclAlgoSelect */
      const int peer = 1 - me;
      const uint64_t peerBegin = (uint64_t)peer * share;
      const uint64_t peerEnd = peerBegin + share < units ? peerBegin + share : units;
      for (uint64_t u = peerBegin + first; u < peerEnd; u += stride) {
        Unit v;
        IO::load(a.sendbuf, u, a.bytes, v);
        IO::store(a.peerRecv[peer], u, a.bytes, v);
      }
      __syncthreads();
      postPeers(c, c.layout.signalAOffset, sigValue(epoch, 2), true);
      if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 2), true, FCCL_ALGO_TWOSHOT_REG, FCCL_PHASE_INBOX,
                    epoch)) {
        epochEnd(c, epoch);
        return;
      }
      uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
      bases[me] = a.sendbuf;
      bases[peer] = a.recvbuf; /* the peer's units of our share, stored in place */
      reducePulled<TT, OpTraits<OP>>(bases, n, begin, end, first, stride, a.bytes, storeAll);
    } else {
      reducePulled<TT, OpTraits<OP>>(a.peerSend, n, begin, end, first, stride, a.bytes, storeAll);
    }
  }
  __syncthreads();
  postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
  (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true, FCCL_ALGO_TWOSHOT_REG, FCCL_PHASE_DONE, epoch);
  epochEnd(c, epoch);
}

#define FCCL_TABLE_KERNEL allReduceTwoshotReg
FCCL_KERNEL_TABLE(twoshotRegKernel)
#undef FCCL_TABLE_KERNEL

}  // namespace fccl
