/*
 * Two-shot all-reduce over registered buffers: rank r owns units [r * share, (r + 1) * share). It reads its units
 * from every rank's input in place (reduce-scatter by pull), reduces in rank order, and stores the result into
 * every rank's output (all-gather by push). Each unit crosses NVLink twice, whatever the rank count.
 *
 *   ready  (pad A, relaxed post, one acquire load once seen) a peer reached the call: its input is final and
 *          its output may be written.
 *   done   (pad B, release, waited with acquire) a peer finished reading our input and writing our output.
 * In place is safe: only the owner of a unit reads or writes it, the reads before the writes, in one thread.
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

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (!waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, FCCL_ALGO_TWOSHOT_REG, FCCL_PHASE_READY,
                 epoch)) {
    const uint64_t begin = (uint64_t)me * share;
    const uint64_t end = begin + share < units ? begin + share : units;
    reducePulled<TT, OpTraits<OP>>(a.peerSend, n, begin, end, first, stride, a.bytes,
                                   [&](auto bound, uint64_t u, const Unit& out) {
#pragma unroll
                                     for (int p = 0; p < decltype(bound)::value; p++)
                                       if (p < n) IO::store(a.peerRecv[p], u, a.bytes, out);
                                   });
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
    (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true, FCCL_ALGO_TWOSHOT_REG, FCCL_PHASE_DONE,
                    epoch);
  }
  epochEnd(c, epoch);
}

#define FCCL_TABLE_KERNEL allReduceTwoshotReg
FCCL_KERNEL_TABLE(twoshotRegKernel)
#undef FCCL_TABLE_KERNEL

}  // namespace fccl
