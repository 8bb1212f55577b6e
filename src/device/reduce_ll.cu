/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reduce: every rank's count elements reduced in rank order into the root's output, with the all-reduce's reducers,
 * so that the root gets the bits fcclAllReduce gives. Every rank but the root only sends; the others' recvbuf is
 * never touched.
 *
 *   LL      every rank but the root pushes its input as LL packets into its region [parity][me] of the root's LL
 *           area; the root reduces its own input with the peers' packets: one hop, no barrier. The rule every kernel
 *           keeps for the reuse of the LL and staging areas (within a call, each rank hears from every peer something
 *           the peer sent after finishing its previous call) is kept by tokens, packets of a flag and no data, as in
 *           the broadcast: the root sends one to every other rank, and each of those to every rank but the root
 *           (which hears from them through their data).
 *   direct  (registered inputs, reduce_direct.cu) ready (pad A step 1, between every pair); the root pulls every
 *           rank's input in place (all ranks' loads in flight before the first add) into its output and posts done
 *           (pad B, release) to every rank, which waits for it before it lets its input go.
 *   staged  (plain buffers, reduce_staged.cu) the all-gather's rounds (stagedRounds): round k of every other rank's
 *           input into its inbox region of the root, reduced there with the root's own input.
 * In place (the root's sendbuf == recvbuf) is safe: the root reads a unit of its input before it writes it, in the
 * same thread.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceLL(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using OT = OpTraits<OP>;
  using IO = UnitIO<TT, 8>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t packets = divUp(a.bytes, FCCL_LL_DATA_BYTES);
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int me = c.rank;
  const int root = a.root;
  /* The thread's first packet of input, loaded before the epoch (the two loads overlap). */
  Unit mine;
  if (first < packets) IO::load(a.sendbuf, first, a.bytes, mine);
  const uint64_t epoch = epochBeginOp<TT, OT>(c, a);
  const uint64_t flag = llFlag(epoch);
  announceCall(c); /* for a peer in a call of another protocol (Spin::check) */
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const uint64_t perWriter = c.layout.llBytes / FCCL_LL_DATA_BYTES * FCCL_LL_PACKET_BYTES;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t pushOffset = c.layout.llOffset + (parity * n + me) * perWriter;
  const char* inbox = slotPtr(c, me, c.layout.llOffset + parity * n * perWriter);

  /* Tokens (packet 0 of our region, flag only): the root's to every other rank, the others' to every rank but the
   * root. */
  if (blockIdx.x == 0) {
    const int p = threadIdx.x;
    if (p < n && p != me && p != root) st_ll_packet(slotPtr(c, p, pushOffset), flag, flag);
  }
  bool failed = false;
  if (me != root) {
    char* region = slotPtr(c, root, pushOffset);
    for (uint64_t i = first; i < packets; i += stride) {
      Unit d = mine;
      if (i != first) IO::load(a.sendbuf, i, a.bytes, d);
      const LLPacket packet = llPack(d.words[0], flag);
      st_ll_packet(region + i * FCCL_LL_PACKET_BYTES, packet.lo, packet.hi);
    }
    /* Every other rank's token, the root's included. */
    if (blockIdx.x == 0) {
      const int w = threadIdx.x;
      if (w < n && w != me) {
        Spin spin(c, FCCL_KERNEL_REDUCE_LL, FCCL_PHASE_LL, w, epoch);
        uint64_t token;
        (void)llWait(inbox + (uint64_t)w * perWriter, flag, spin, token);
      }
    }
  } else {
    for (uint64_t i = first; i < packets && !failed; i += stride) {
      UnitReducer<TT, OT, 8> acc;
      for (int w = 0; w < n; w++) {
        Unit d;
        if (w == me) {
          d = mine;
          if (i != first) IO::load(a.sendbuf, i, a.bytes, d);
        } else {
          Spin spin(c, FCCL_KERNEL_REDUCE_LL, FCCL_PHASE_LL, w, epoch);
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
  }
  /* Every wait of the block is over before any thread may clean the LL area at a flag wrap (epochEnd): a token is
   * read by another thread than the one that cleans its packet. */
  __syncthreads();
  epochEnd(c, epoch);
}

FCCL_KERNEL_TABLE(reduceLL)

}  // namespace fccl
