/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One-shot all-reduce with LL packets: every rank pushes its whole input, as 16-byte packets of {4 data bytes,
 * 4-byte flag} x 2, into its region of every peer's LL area, then reads the packets the peers pushed into its own
 * slot and reduces in rank order. The flag is the low word of the epoch: a packet is there exactly when its flags
 * say so, so there is no barrier and no fence, one NVLink hop in all.
 *
 * Double buffering: call e uses parity e & 1. A rank writes parity p again at call e + 2 only after finishing
 * call e + 1, which needed every peer's packets of e + 1, which each peer sent after it had read all of call e.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allReduceLL(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using OT = OpTraits<OP>;
  using IO = UnitIO<TT, 8>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t packets = divUp(a.bytes, FCCL_LL_DATA_BYTES);
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  /* The thread's first packet of input is loaded before the epoch: both loads are on the way to the first packet
   * store and neither needs the other, so they overlap. The reduction reuses it. */
  Unit mine;
  if (first < packets) IO::load(a.sendbuf, first, a.bytes, mine);
  const uint64_t epoch = epochBeginOp<TT, OpTraits<OP>>(c, a);
  const uint64_t flag = llFlag(epoch);
  announceCall(c); /* for a peer in a call of another protocol (Spin::check) */
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t perWriter = c.layout.llBytes / FCCL_LL_DATA_BYTES * FCCL_LL_PACKET_BYTES;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;

  /* Push: our region in each peer's slot is [parity][me]. */
  const uint64_t pushOffset = c.layout.llOffset + (parity * n + me) * perWriter;
  for (uint64_t i = first; i < packets; i += stride) {
    Unit d = mine;
    if (i != first) IO::load(a.sendbuf, i, a.bytes, d);
    const LLPacket packet = llPack(d.words[0], flag);
#pragma unroll
    for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
      if (p < n && p != me) st_ll_packet(slotPtr(c, p, pushOffset) + i * FCCL_LL_PACKET_BYTES, packet.lo, packet.hi);
  }

  /* Receive and reduce in rank order; our own contribution is the first packet loaded above, or read again from
   * sendbuf (same thread, same bytes, not yet overwritten in place). */
  const char* inbox = slotPtr(c, me, c.layout.llOffset + parity * n * perWriter);
  bool failed = false;
  for (uint64_t i = first; i < packets && !failed; i += stride) {
    UnitReducer<TT, OT, 8> acc;
    for (int w = 0; w < n; w++) {
      Unit d;
      if (w == me) {
        d = mine;
        if (i != first) IO::load(a.sendbuf, i, a.bytes, d);
      } else {
        Spin spin(c, FCCL_ALGO_LL, FCCL_PHASE_LL, w, epoch);
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

FCCL_KERNEL_TABLE(allReduceLL)

}  // namespace fccl
