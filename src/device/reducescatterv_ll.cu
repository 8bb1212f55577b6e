/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Variable reduce-scatter: rank r's output is the reduction of block r (v.bytes[r] bytes at sendbuf + v.offset[r],
 * the blocks back to back in rank order) of every rank's input, in rank order with the all-reduce's reducers, so
 * that with equal counts its bits are fcclReduceScatter's. The forms are the reduce-scatter's
 * (reducescatter_ll.cu) with a size per block:
 *
 *   LL      every rank pushes its block p as LL packets (an empty block: one token packet) into its region
 *           [parity][me] of rank p's LL area, then reduces its own block from its input and the peers' packets.
 *   direct  (registered input) ready; the owner pulls its block from every rank's input in place; done
 *           (reducescatterv_direct.cu).
 *   staged  (plain buffers) rounds of the largest block (one round at least): round k of block p into rank p's inbox,
 *           reduced there from our own input and every writer's inbox region (reducescatterv_staged.cu).
 * In place (recvbuf == sendbuf + v.offset[rank]) is safe: a rank writes only its own block, which only it reads.
 */
#include "kernels.cuh"
#include "variable.cuh"

namespace fccl {

template <int DT, int OP>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceScatterVLL(fcclDevComm c, fcclDevVArgs a) {
  using TT = TypeTraits<DT>;
  using OT = OpTraits<OP>;
  using IO = UnitIO<TT, 8>;
  using Unit = typename IO::Unit;
  __shared__ VariableBlocks v;
  gridDependencyEnter();
  /* Device counts: each block within the output's capacity, all of them within the input's. */
  const uint64_t epoch = variableBegin(c, a, sizeof(typename TT::Bits), a.recvCapacity, a.sendCapacity, v);
  const uint64_t flag = llFlag(epoch);
  announceCall(c); /* for a peer in a call of another protocol (Spin::check) */
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t perWriter = c.layout.llBytes / FCCL_LL_DATA_BYTES * FCCL_LL_PACKET_BYTES;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

  const uint64_t pushOffset = c.layout.llOffset + (parity * n + me) * perWriter;
  for (int p = 0; p < n; p++) {
    if (p == me) continue;
    const uint64_t bytes = v.bytes[p];
    const uint64_t block = a.sendbuf + v.offset[p];
    const uint64_t packets = variablePackets(bytes);
    char* region = slotPtr(c, p, pushOffset);
    for (uint64_t i = first; i < packets; i += stride) {
      Unit d = {};
      if (i * FCCL_LL_DATA_BYTES < bytes) IO::load(block, i, bytes, d);
      const LLPacket packet = llPack(d.words[0], flag);
      st_ll_packet(region + i * FCCL_LL_PACKET_BYTES, packet.lo, packet.hi);
    }
  }

  const uint64_t mine = v.bytes[me];
  const uint64_t ownBlock = a.sendbuf + v.offset[me];
  const uint64_t packets = variablePackets(mine);
  const char* inbox = slotPtr(c, me, c.layout.llOffset + parity * n * perWriter);
  bool failed = false;
  for (uint64_t i = first; i < packets && !failed; i += stride) {
    UnitReducer<TT, OT, 8> acc;
    for (int w = 0; w < n; w++) {
      Unit d = {};
      if (w == me) {
        if (i * FCCL_LL_DATA_BYTES < mine) IO::load(ownBlock, i, mine, d);
      } else {
        Spin spin(c, FCCL_KERNEL_REDUCESCATTERV_LL, FCCL_PHASE_LL, w, epoch);
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
    if (i * FCCL_LL_DATA_BYTES < mine) IO::store(a.recvbuf, i, mine, out);
  }
  variableEnd(c, v, FCCL_KERNEL_REDUCESCATTERV_LL, epoch);
  epochEnd(c, epoch);
}

FCCL_KERNEL_TABLE(reduceScatterVLL)

}  // namespace fccl
