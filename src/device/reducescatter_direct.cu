/* SPDX-License-Identifier: Apache-2.0 */
/* The reduce-scatter's direct form (reducescatter_ll.cu describes the three). */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceScatterDirect(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBeginOp<TT, OpTraits<OP>>(c, a);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, FCCL_KERNEL_REDUCESCATTER_DIRECT,
                FCCL_PHASE_READY, epoch)) {
    epochEnd(c, epoch);
    return;
  }
  /* Our block of every rank's input (constant indices keep the array in registers). */
  uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
  const uint64_t at = (uint64_t)me * a.bytes;
#pragma unroll
  for (int w = 0; w < NR; w++)
    if (w < n) bases[w] = a.peerSend[w] + at;
  reducePulled<TT, OpTraits<OP>, NR>(bases, n, 0, units, first, stride, a.bytes,
                                     [&](uint64_t u, const Unit& out) { IO::store(a.recvbuf, u, a.bytes, out); });
  __syncthreads();
  postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
  (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true, FCCL_KERNEL_REDUCESCATTER_DIRECT,
                  FCCL_PHASE_DONE, epoch);
  epochEnd(c, epoch);
}

FCCL_RANKED_KERNEL_TABLE(reduceScatterDirect)

}  // namespace fccl
