/* SPDX-License-Identifier: Apache-2.0 */
/* The variable reduce-scatter's direct form (reducescatterv_ll.cu describes the three). */
#include "kernels.cuh"
#include "variable.cuh"

namespace fccl {

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceScatterVDirect(fcclDevComm c, fcclDevVArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  __shared__ VariableBlocks v;
  gridDependencyEnter();
  const uint64_t epoch = variableBegin(c, a, sizeof(typename TT::Bits), a.recvCapacity, a.sendCapacity, v);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t mine = v.bytes[me];
  const uint64_t units = divUp(mine, FCCL_UNIT_BYTES);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int kernel = FCCL_KERNEL_REDUCESCATTERV_DIRECT;

  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_READY, epoch)) {
    variableEnd(c, v, kernel, epoch);
    epochEnd(c, epoch);
    return;
  }
  /* Our block of every rank's input (constant indices keep the array in registers). */
  uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
  const uint64_t at = v.offset[me];
#pragma unroll
  for (int w = 0; w < NR; w++)
    if (w < n) bases[w] = a.peerSend[w] + at;
  reducePulled<TT, OpTraits<OP>, NR>(bases, n, 0, units, first, stride, mine,
                                     [&](uint64_t u, const Unit& out) { IO::store(a.recvbuf, u, mine, out); });
  __syncthreads();
  postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
  (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_DONE, epoch);
  variableEnd(c, v, kernel, epoch);
  epochEnd(c, epoch);
}

FCCL_RANKED_KERNEL_TABLE(reduceScatterVDirect)

}  // namespace fccl
