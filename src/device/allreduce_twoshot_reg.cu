/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two-shot all-reduce over registered buffers: rank r owns units [r * share, (r + 1) * share). It reduces its units
 * in rank order and stores the result into every rank's output (all-gather by push). Each unit crosses NVLink twice,
 * whatever the rank count. The reduce-scatter comes in these forms (fcclScatter_t, chosen by fcclAlgoSelect):
 *
 *   pull (any rank count, in place or not) the owner reads its units from every rank's input in place.
 *     ready  (pad A step 1, relaxed post, one acquire load once seen) a peer reached the call: its input is final
 *            and its output may be written.
 *     done   (pad B, release, waited with acquire) a peer finished reading our input and writing our output.
 *   push (2 ranks, out of place) each rank first stores its input units of the peer's share into the peer's
 *     output, at their own place, which the owner then reduces in place with its input. Only stores cross NVLink,
 *     which move more than loads with both directions busy, at the price of one more flag hop: chosen for large
 *     messages only (FCCL_PUSH_SCATTER_MIN_2RANKS). Each release after remote stores costs a fence, so the scatter
 *     goes in at most two parts.
 *     ready  as above.
 *     sent   (pad A steps 2 and 3, release, acquire) the peer's units of our share are in our output: one step
 *            per part (two up to kTwoPartRows rows per block), so that part 0 is reduced while part 1 crosses.
 *     done   as above. The peer's result goes to the other share of our output, which nothing else touches.
 *   inbox (2 ranks, out of place, while a share fits one staging chunk) as push, but into the owner's inbox region
 *     (staging, parity epoch & 1), whose reuse follows from the epochs as for the staged algorithms: no "ready" to
 *     post or wait for. The all-gather still writes the peer's output, but only after the peer's "sent", which it
 *     posted from inside the call.
 *     sent, done   as push.
 *   copy (2 ranks, out of place, from FCCL_COPY_SCATTER_MIN) as push, but the host enqueued a barrier and a
 *     copy-engine copy of the peer's units before the kernel (core/coll/allreduce.c): the copy engines move more than
 *     SM stores. When the kernel starts, our units of the peer's share are in the peer's output and the barrier
 *     stood for "ready".
 *     sent   (pad A step 2, release, acquire) the peer's copy into our output completed.
 *     done   as above.
 * In place is safe (pull): only the owner of a unit reads or writes it, the reads before the writes, in one thread.
 * Measurements behind these choices: docs/perf/notes/selection.md, docs/perf/notes/copy-engines.md.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

/* The reduce-scatter by push goes in two parts while a block's share is at most kTwoPartRows grid rows (128 MiB
 * on 132 blocks of 512 threads; tuning.h), in one part beyond. */
constexpr uint64_t kTwoPartRows = FCCL_TWO_PART_ROWS;

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allReduceTwoshotReg(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBeginOp<TT, OpTraits<OP>>(c, a);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t share = divUp(units, (uint64_t)n);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

  const uint64_t begin = (uint64_t)me * share;
  const uint64_t end = begin + share < units ? begin + share : units;
  /* Stores a reduced unit of our share into every rank's output (ours included). */
  auto storeAll = [&](uint64_t u, const Unit& out) {
#pragma unroll
    for (int p = 0; p < NR; p++)
      if (p < n) IO::store(a.peerRecv[p], u, a.bytes, out);
  };
  if (a.scatter == FCCL_SCATTER_PULL || a.scatter == FCCL_SCATTER_PUSH) {
    postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
    if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, FCCL_ALGO_TWOSHOT_REG, FCCL_PHASE_READY,
                  epoch)) {
      epochEnd(c, epoch);
      return;
    }
  }
  if (a.scatter != FCCL_SCATTER_PULL) { /* push, inbox or copy: 2 ranks, out of place (fcclAlgoSelect) */
    const int peer = 1 - me;
    const uint64_t peerBegin = (uint64_t)peer * share;
    const uint64_t peerEnd = peerBegin + share < units ? peerBegin + share : units;
    const uint64_t peerRecv = me == 0 ? a.peerRecv[1] : a.peerRecv[0]; /* constant indices: no stack copy */
    /* Where our units of the peer's share go, and where the peer's units of ours arrive, as bases indexed by the
     * unit's place in the message: the peer's output and ours, or the inbox regions (from the share's start). */
    const bool inbox = a.scatter == FCCL_SCATTER_INBOX;
    const uint64_t parity = epoch & 1;
    const uint64_t pushBase = inbox ? stagingRegion(c, c.layout.inboxOffset, parity, me, peer) -
                                          peerBegin * FCCL_UNIT_BYTES
                                    : peerRecv;
    const uint64_t arrivedBase = inbox ? stagingRegion(c, c.layout.inboxOffset, parity, peer, me) -
                                             begin * FCCL_UNIT_BYTES
                                       : a.recvbuf;
    const bool copied = a.scatter == FCCL_SCATTER_COPY;
    /* In parts of whole grid rows, each with its own "sent" step: the owner reduces and all-gathers part 0 while
     * part 1 is still on the link. Each part costs a release fence after remote stores. */
    const uint64_t rows = divUp(share, stride);
    const int parts = !copied && rows <= kTwoPartRows ? 2 : 1;
    const uint64_t partUnits = divUp(rows, (uint64_t)parts) * stride;
    for (int part = 0; part < parts; part++) {
      const uint64_t partBegin = peerBegin + part * partUnits;
      const uint64_t partEnd = partBegin + partUnits < peerEnd ? partBegin + partUnits : peerEnd;
      if (!copied) {
        for (uint64_t u = partBegin + first; u < partEnd; u += stride) {
          Unit v;
          IO::load(a.sendbuf, u, a.bytes, v);
          IO::store(pushBase, u, a.bytes, v);
        }
        __syncthreads();
      }
      postPeers(c, c.layout.signalAOffset, sigValue(epoch, 2 + part), true);
    }
    /* Rank order: our input at [me], the peer's units of our share (in our output at their place, or in our
     * inbox) at [peer]. */
    uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
    bases[0] = me == 0 ? a.sendbuf : arrivedBase;
    bases[1] = me == 0 ? arrivedBase : a.sendbuf;
    for (int part = 0; part < parts; part++) {
      if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 2 + part), true, FCCL_ALGO_TWOSHOT_REG, FCCL_PHASE_INBOX,
                    epoch)) {
        epochEnd(c, epoch);
        return;
      }
      const uint64_t partBegin = begin + part * partUnits;
      const uint64_t partEnd = partBegin + partUnits < end ? partBegin + partUnits : end;
      if (partBegin < partEnd)
        reducePulled<TT, OpTraits<OP>, NR>(bases, n, partBegin, partEnd, first, stride, a.bytes, storeAll);
    }
  } else {
    reducePulled<TT, OpTraits<OP>, NR>(a.peerSend, n, begin, end, first, stride, a.bytes, storeAll);
  }
  __syncthreads();
  postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
  (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true, FCCL_ALGO_TWOSHOT_REG, FCCL_PHASE_DONE, epoch);
  epochEnd(c, epoch);
}

FCCL_RANKED_KERNEL_TABLE(allReduceTwoshotReg)

}  // namespace fccl
