/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Variable all-gather: rank r's block (v.bytes[r] bytes of its sendbuf) lands at recvbuf + v.offset[r] on every
 * rank, the blocks back to back in rank order (variable.cuh reads them). The forms are the all-gather's
 * (allgather.cu) with a size per writer; instantiated per element size.
 *
 *   LL      every rank pushes its block as LL packets (an empty block: one token packet) into its region
 *           [parity][me] of every peer's LL area, then reads each peer's packets, as many as that peer's block
 *           takes, from its own slot into its output.
 *   direct  (registered output) ready, then every rank stores its block into every peer's output at its offset,
 *           then done (allgather.cu).
 *   staged  (plain buffers) in rounds of a.roundUnits units of the largest block (one round at least): round k of
 *           our block into our inbox region of every peer, round k of each writer's block out of our inbox; the
 *           flags of stagedRounds (common.cuh) whatever the blocks' sizes.
 * In place (sendbuf == recvbuf + v.offset[rank]) the own block is not copied.
 */
#include "kernels.cuh"
#include "variable.cuh"

namespace fccl {

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allGatherVLL(fcclDevComm c, fcclDevVArgs a) {
  using IO = UnitIO<MoveTraits<ES>, 8>;
  using Unit = typename IO::Unit;
  __shared__ VariableBlocks v;
  gridDependencyEnter();
  const uint64_t epoch = variableBegin(c, a, ES, a.sendCapacity, a.recvCapacity, v);
  const uint64_t flag = llFlag(epoch);
  announceCall(c); /* for a peer in a call of another protocol (Spin::check) */
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t perWriter = c.layout.llBytes / FCCL_LL_DATA_BYTES * FCCL_LL_PACKET_BYTES;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t mine = v.bytes[me];
  const uint64_t ownRecv = a.recvbuf + v.offset[me];
  const bool copyOwn = a.sendbuf != ownRecv; /* in place: our block is in our output already */

  const uint64_t pushOffset = c.layout.llOffset + (parity * n + me) * perWriter;
  const uint64_t myPackets = variablePackets(mine);
  for (uint64_t i = first; i < myPackets; i += stride) {
    Unit d = {};
    if (i * FCCL_LL_DATA_BYTES < mine) IO::load(a.sendbuf, i, mine, d);
    const LLPacket packet = llPack(d.words[0], flag);
#pragma unroll
    for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
      if (p < n && p != me) st_ll_packet(slotPtr(c, p, pushOffset) + i * FCCL_LL_PACKET_BYTES, packet.lo, packet.hi);
    if (copyOwn && i * FCCL_LL_DATA_BYTES < mine) IO::store(ownRecv, i, mine, d);
  }

  const char* inbox = slotPtr(c, me, c.layout.llOffset + parity * n * perWriter);
  bool failed = false;
  for (int w = 0; w < n && !failed; w++) {
    if (w == me) continue;
    const uint64_t theirs = v.bytes[w];
    const uint64_t out = a.recvbuf + v.offset[w];
    const uint64_t packets = variablePackets(theirs);
    for (uint64_t i = first; i < packets; i += stride) {
      Spin spin(c, FCCL_KERNEL_ALLGATHERV_LL, FCCL_PHASE_LL, w, epoch);
      Unit d;
      if (!llWait(inbox + (uint64_t)w * perWriter + i * FCCL_LL_PACKET_BYTES, flag, spin, d.words[0])) {
        failed = true;
        break;
      }
      if (i * FCCL_LL_DATA_BYTES < theirs) IO::store(out, i, theirs, d);
    }
  }
  variableEnd(c, v, FCCL_KERNEL_ALLGATHERV_LL, epoch);
  epochEnd(c, epoch);
}

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allGatherVDirect(fcclDevComm c, fcclDevVArgs a) {
  using IO = UnitIO<MoveTraits<ES>, 16>;
  using Unit = typename IO::Unit;
  __shared__ VariableBlocks v;
  gridDependencyEnter();
  const uint64_t epoch = variableBegin(c, a, ES, a.sendCapacity, a.recvCapacity, v);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t mine = v.bytes[me];
  const uint64_t units = divUp(mine, FCCL_UNIT_BYTES);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t at = v.offset[me];
  const bool copyOwn = a.sendbuf != a.recvbuf + at;
  const int kernel = FCCL_KERNEL_ALLGATHERV_DIRECT;

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_READY, epoch)) {
    variableEnd(c, v, kernel, epoch);
    epochEnd(c, epoch);
    return;
  }
  for (uint64_t u = first; u < units; u += stride) {
    Unit x;
    IO::load(a.sendbuf, u, mine, x);
#pragma unroll
    for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
      if (p < n && (p != me || copyOwn)) IO::store(a.peerRecv[p] + at, u, mine, x);
  }
  __syncthreads();
  postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
  (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_DONE, epoch);
  variableEnd(c, v, kernel, epoch);
  epochEnd(c, epoch);
}

template <int ES>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allGatherVStaged(fcclDevComm c, fcclDevVArgs a) {
  using IO = UnitIO<MoveTraits<ES>, 16>;
  using Unit = typename IO::Unit;
  __shared__ VariableBlocks v;
  gridDependencyEnter();
  const uint64_t epoch = variableBegin(c, a, ES, a.sendCapacity, a.recvCapacity, v);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t cap = a.roundUnits;
  const uint64_t rounds = variableRounds(v, cap);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t mine = v.bytes[me];
  const uint64_t myUnits = divUp(mine, FCCL_UNIT_BYTES);
  const uint64_t ownRecv = a.recvbuf + v.offset[me];
  const bool copyOwn = a.sendbuf != ownRecv;
  const int kernel = FCCL_KERNEL_ALLGATHERV_STAGED;

  /* Round k of our block into our inbox region of every peer (and our own output); round k of each peer's block
   * out of our inbox into our output. */
  auto fill = [&](uint64_t k) {
    const uint64_t parity = (epoch + k) & 1;
    const uint64_t start = k * cap;
    const uint64_t len = roundLength(myUnits, k, cap);
    uint64_t outbound[FCCL_DEVICE_MAX_RANKS] = {};
#pragma unroll
    for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
      if (p < n && p != me) outbound[p] = stagingRegion(c, c.layout.inboxOffset, parity, me, p);
    for (uint64_t j = first; j < len; j += stride) {
      Unit x;
      IO::load(a.sendbuf, start + j, mine, x);
#pragma unroll
      for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
        if (p < n && p != me) st_data16(ptr<void>(outbound[p] + j * FCCL_UNIT_BYTES), x.words[0], x.words[1]);
      if (copyOwn) IO::store(ownRecv, start + j, mine, x);
    }
  };
  auto consume = [&](uint64_t k) {
    const uint64_t parity = (epoch + k) & 1;
    const uint64_t start = k * cap;
    for (int w = 0; w < n; w++) {
      if (w == me) continue;
      const uint64_t theirs = v.bytes[w];
      const uint64_t len = roundLength(divUp(theirs, FCCL_UNIT_BYTES), k, cap);
      const char* inbox = ptr<const char>(stagingRegion(c, c.layout.inboxOffset, parity, w, me));
      const uint64_t out = a.recvbuf + v.offset[w];
      for (uint64_t j = first; j < len; j += stride) {
        Unit x;
        ld_data16(inbox + j * FCCL_UNIT_BYTES, x.words[0], x.words[1]);
        IO::store(out, start + j, theirs, x);
      }
    }
  };
  stagedRounds(c, rounds, epoch, kernel, fill, consume);
  variableEnd(c, v, kernel, epoch);
  epochEnd(c, epoch);
}

/* The three forms' instantiations, one per element size (1, 2, 4 or 8 bytes). */
FCCL_SIZED_KERNEL_TABLE(allGatherVLL)
FCCL_SIZED_KERNEL_TABLE(allGatherVDirect)
FCCL_SIZED_KERNEL_TABLE(allGatherVStaged)

}  // namespace fccl
