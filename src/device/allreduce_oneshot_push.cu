/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One-shot all-reduce through staging, for buffers that are not registered: every rank pushes its whole input
 * (16-byte stores over NVLink) into its region of every peer's inbox, posts one release flag per (block, peer),
 * waits for the peers' flags (acquire) and reduces its own input with the inbox regions, in rank order.
 * One flag hop plus the data; no unit is moved twice.
 *
 * Double buffering by epoch parity, as for LL: inbox [e & 1] at call e. Two-shot rounds use parity (e + round) & 1
 * and take care of their own reuse (allreduce_twoshot_staged.cu).
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allReduceOneshotPush(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBeginOp<TT, OpTraits<OP>>(c, a);
  const uint64_t parity = epoch & 1;
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

  /* Our inbox region [parity] in each peer's slot (pushBases), and rank w's data for the reduction (bases): our
   * input for w == me, else inbox [parity][w] of our slot. Computed once, before the flag, so that no peer-region
   * arithmetic runs per unit and peer. */
  uint64_t pushBases[FCCL_DEVICE_MAX_RANKS] = {};
  uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
  peerRegionsOutbound<NR>(c, c.layout.inboxOffset, parity, pushBases);
  peerRegionsInbound<NR>(c, c.layout.inboxOffset, parity, bases);
#pragma unroll
  for (int w = 0; w < NR; w++)
    if (w == me) bases[w] = a.sendbuf; /* constant indices: a bases[me] store would put the array on the stack */
  for (uint64_t u = first; u < units; u += stride) {
    Unit v;
    IO::load(a.sendbuf, u, a.bytes, v);
#pragma unroll
    for (int p = 0; p < NR; p++)
      if (p < n && p != me) st_data16(ptr<void>(pushBases[p] + u * FCCL_UNIT_BYTES), v.words[0], v.words[1]);
  }
  __syncthreads();
  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true);
  if (!waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, FCCL_ALGO_ONESHOT_PUSH, FCCL_PHASE_INBOX,
                 epoch)) {
    /* The pulling loop's batches (all loads of PullDepth units before the first add): one unit at a time, each
     * iteration would wait a load latency. */
    reducePulled<TT, OpTraits<OP>, NR>(bases, n, 0, units, first, stride, a.bytes,
                                       [&](uint64_t u, const Unit& out) { IO::store(a.recvbuf, u, a.bytes, out); });
  }
  epochEnd(c, epoch);
}

FCCL_RANKED_KERNEL_TABLE(allReduceOneshotPush)

}  // namespace fccl
