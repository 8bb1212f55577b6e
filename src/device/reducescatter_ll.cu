/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reduce-scatter: rank r's output is the reduction of block r (a.bytes bytes at sendbuf + r * a.bytes) of every
 * rank's input, in rank order with the all-reduce's reducers, so that its bits are the all-reduce's.
 *
 *   LL      every rank pushes its block p as LL packets into its region [parity][me] of rank p's LL area, then
 *           reduces its own block from its input and the peers' packets: one hop, no barrier.
 *   direct  (registered input) ready (pad A, relaxed, one acquire once seen): every peer's input is final; the
 *           owner pulls its block from every rank's input in place (all ranks' loads in flight before the first
 *           add) into its output; done (pad B, release, acquire): no peer reads our input any more.
 *   staged  (plain buffers) as the all-gather's staged form, with round k of block p pushed into rank p's inbox
 *           and reduced there from our own input and every writer's inbox region.
 * In place (recvbuf == sendbuf + rank * a.bytes) is safe: a rank writes only its own block, which only it reads.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceScatterLL(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using OT = OpTraits<OP>;
  using IO = UnitIO<TT, 8>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t packets = divUp(a.bytes, FCCL_LL_DATA_BYTES);
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int me = c.rank;
  const uint64_t ownBlock = a.sendbuf + (uint64_t)me * a.bytes;
  Unit mine;
  if (first < packets) IO::load(ownBlock, first, a.bytes, mine);
  const uint64_t epoch = epochBeginOp<TT, OpTraits<OP>>(c, a);
  const uint64_t flag = llFlag(epoch);
  announceCall(c); /* for a peer in a call of another protocol (Spin::check) */
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const uint64_t perWriter = c.layout.llBytes / FCCL_LL_DATA_BYTES * FCCL_LL_PACKET_BYTES;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;

  const uint64_t pushOffset = c.layout.llOffset + (parity * n + me) * perWriter;
  for (uint64_t i = first; i < packets; i += stride) {
#pragma unroll
    for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++) {
      if (p >= n || p == me) continue;
      Unit d;
      IO::load(a.sendbuf + (uint64_t)p * a.bytes, i, a.bytes, d);
      const LLPacket packet = llPack(d.words[0], flag);
      st_ll_packet(slotPtr(c, p, pushOffset) + i * FCCL_LL_PACKET_BYTES, packet.lo, packet.hi);
    }
  }

  const char* inbox = slotPtr(c, me, c.layout.llOffset + parity * n * perWriter);
  bool failed = false;
  for (uint64_t i = first; i < packets && !failed; i += stride) {
    UnitReducer<TT, OT, 8> acc;
    for (int w = 0; w < n; w++) {
      Unit d;
      if (w == me) {
        d = mine;
        if (i != first) IO::load(ownBlock, i, a.bytes, d);
      } else {
        Spin spin(c, FCCL_KERNEL_REDUCESCATTER_LL, FCCL_PHASE_LL, w, epoch);
        if (!llWait(inbox + (uint64_t)w * perWriter + i * FCCL_LL_PACKET_BYTES, flag, spin, d.words[0])) {
          failed = true;
          break;
        }
      }
      if (w == 0)
        acc.first(d);
      else
        acc.add(d);
    }
    if (failed) break;
    Unit out;
    acc.result(out, n);
    IO::store(a.recvbuf, i, a.bytes, out);
  }
  epochEnd(c, epoch);
}

FCCL_KERNEL_TABLE(reduceScatterLL)

}  // namespace fccl
