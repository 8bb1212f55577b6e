/* SPDX-License-Identifier: Apache-2.0 */
/*
 * All-gather: rank r's block (a.bytes bytes) lands at recvbuf + r * a.bytes on every rank. The data is moved, not
 * reduced, so the kernels are instantiated per element size (the tail of a misaligned block goes element by
 * element) rather than per type and op.
 *
 *   LL      every rank pushes its block as LL packets into its region [parity][me] of every peer's LL area, then
 *           reads the peers' packets from its own slot into its output: one hop, no barrier (allreduce_ll.cu's argument
 *           for the parity).
 *   direct  (registered output) ready (pad A, relaxed, one acquire once seen): every peer reached the call, so
 *           its output may be written; every rank stores its block into every peer's output with 16-byte stores;
 *           done (pad B, release, acquire): every peer's block is in our output.
 *   staged  (plain buffers) in rounds of a.roundUnits units: round k (staging parity (epoch + k) & 1) goes into
 *           our inbox region of every peer's slot, announced by pad A step k + 1; the receiver copies it out and
 *           posts pad B step k + 1 ("consumed"), which the writer waits for before round k + 2 reuses the parity.
 *           Round k + 1 is pushed while round k is copied out. The call ends once every peer consumed our last
 *           round, so that the next call's rounds find every inbox free, whatever the next call is.
 * Every form hears from every peer within the call (packets or flags a peer sent after it finished its previous
 * call): the argument by which every kernel may reuse the LL and staging areas.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allGatherLL(fcclDevComm c, fcclDevArgs a) {
  using IO = UnitIO<MoveTraits<ES>, 8>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t packets = divUp(a.bytes, FCCL_LL_DATA_BYTES);
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  Unit mine;
  if (first < packets) IO::load(a.sendbuf, first, a.bytes, mine);
  const uint64_t epoch = epochBegin(c, a.print);
  const uint64_t flag = llFlag(epoch);
  announceCall(c); /* for a peer in a call of another protocol (Spin::check) */
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t perWriter = c.layout.llBytes / FCCL_LL_DATA_BYTES * FCCL_LL_PACKET_BYTES;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t ownRecv = a.recvbuf + (uint64_t)me * a.bytes;
  const bool copyOwn = a.sendbuf != ownRecv; /* in place: our block is in our output already */

  const uint64_t pushOffset = c.layout.llOffset + (parity * n + me) * perWriter;
  for (uint64_t i = first; i < packets; i += stride) {
    Unit d = mine;
    if (i != first) IO::load(a.sendbuf, i, a.bytes, d);
    const LLPacket packet = llPack(d.words[0], flag);
#pragma unroll
    for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
      if (p < n && p != me) st_ll_packet(slotPtr(c, p, pushOffset) + i * FCCL_LL_PACKET_BYTES, packet.lo, packet.hi);
    if (copyOwn) IO::store(ownRecv, i, a.bytes, d);
  }

  const char* inbox = slotPtr(c, me, c.layout.llOffset + parity * n * perWriter);
  bool failed = false;
  for (uint64_t i = first; i < packets && !failed; i += stride) {
    for (int w = 0; w < n; w++) {
      if (w == me) continue;
      Spin spin(c, FCCL_KERNEL_ALLGATHER_LL, FCCL_PHASE_LL, w, epoch);
      Unit d;
      if (!llWait(inbox + (uint64_t)w * perWriter + i * FCCL_LL_PACKET_BYTES, flag, spin, d.words[0])) {
        failed = true;
        break;
      }
      IO::store(a.recvbuf + (uint64_t)w * a.bytes, i, a.bytes, d);
    }
  }
  epochEnd(c, epoch);
}

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allGatherDirect(fcclDevComm c, fcclDevArgs a) {
  using IO = UnitIO<MoveTraits<ES>, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c, a.print);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t at = (uint64_t)me * a.bytes;
  const bool copyOwn = a.sendbuf != a.recvbuf + at;

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, FCCL_KERNEL_ALLGATHER_DIRECT, FCCL_PHASE_READY,
                epoch)) {
    epochEnd(c, epoch);
    return;
  }
  for (uint64_t u = first; u < units; u += stride) {
    Unit v;
    IO::load(a.sendbuf, u, a.bytes, v);
#pragma unroll
    for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
      if (p < n && (p != me || copyOwn)) IO::store(a.peerRecv[p] + at, u, a.bytes, v);
  }
  __syncthreads();
  postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
  (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true, FCCL_KERNEL_ALLGATHER_DIRECT, FCCL_PHASE_DONE,
                  epoch);
  epochEnd(c, epoch);
}

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allGatherStaged(fcclDevComm c, fcclDevArgs a) {
  using IO = UnitIO<MoveTraits<ES>, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c, a.print);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t roundCap = a.roundUnits;
  const uint64_t rounds = divUp(units, roundCap);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t ownRecv = a.recvbuf + (uint64_t)me * a.bytes;
  const bool copyOwn = a.sendbuf != ownRecv;
  const int kernel = FCCL_KERNEL_ALLGATHER_STAGED;

  /* Round k of our block into our inbox region of every peer (and our own output); round k of every peer's block
   * out of our inbox into our output. */
  auto fill = [&](uint64_t k) {
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
      if (copyOwn) IO::store(ownRecv, r.start + j, a.bytes, v);
    }
  };
  auto consume = [&](uint64_t k) {
    const StagedRound r(k, units, roundCap, epoch);
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
  stagedRounds(c, rounds, epoch, kernel, fill, consume);
  epochEnd(c, epoch);
}

/* The three forms' instantiations, one per element size (1, 2, 4 or 8 bytes). */
FCCL_SIZED_KERNEL_TABLE(allGatherLL)
FCCL_SIZED_KERNEL_TABLE(allGatherDirect)
FCCL_SIZED_KERNEL_TABLE(allGatherStaged)

}  // namespace fccl
