/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One-shot all-reduce over registered buffers: every rank reads every rank's input in place (16-byte loads over
 * NVLink, all ranks' loads in flight before the first add) and reduces in rank order into its own output.
 *
 *   ready  (pad A, relaxed post, one acquire load once seen) a peer reached the call: its input is final
 *          (written by earlier stream work) and its output may be written. The acquire drops stale L1 lines.
 *   done   (pad B, release) a peer finished reading our input; we may return (and the application may then
 *          overwrite it).
 * In place, a rank must not overwrite its buffer while peers still read it: the data moves in passes of one unit
 * per thread, each pass held in registers until every peer posted that it has read the pass.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allReduceOneshotPull(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBeginOp<TT, OpTraits<OP>>(c, a);
  const int n = c.nranks;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, FCCL_ALGO_ONESHOT_PULL, FCCL_PHASE_READY, epoch)) {
    epochEnd(c, epoch);
    return;
  }

  if (!a.inPlace) {
    reducePulled<TT, OpTraits<OP>, NR>(a.peerSend, n, 0, units, first, stride, a.bytes,
                                       [&](uint64_t u, const Unit& out) { IO::store(a.recvbuf, u, a.bytes, out); });
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
    (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), false, FCCL_ALGO_ONESHOT_PULL, FCCL_PHASE_DONE,
                    epoch);
  } else {
    const uint64_t passes = divUp(units, stride);
    for (uint64_t pass = 0; pass < passes; pass++) {
      const uint64_t u = pass * stride + first;
      Unit out;
      if (u < units) reduceRanks16<TT, OpTraits<OP>, NR>(a.peerSend, n, u, a.bytes, out);
      __syncthreads();
      postPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)pass + 1), true);
      if (waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)pass + 1), false, FCCL_ALGO_ONESHOT_PULL,
                    FCCL_PHASE_DONE, epoch))
        break;
      if (u < units) IO::store(a.recvbuf, u, a.bytes, out);
    }
  }
  epochEnd(c, epoch);
}

FCCL_RANKED_KERNEL_TABLE(allReduceOneshotPull)

}  // namespace fccl
