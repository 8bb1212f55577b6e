/* SPDX-License-Identifier: Apache-2.0 */
/* The reduce's direct form (reduce_ll.cu describes the three). */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

template <int DT, int OP, int NR>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) reduceDirect(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBeginOp<TT, OpTraits<OP>>(c, a);
  const int n = c.nranks;
  const int me = c.rank;
  const int root = a.root;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int kernel = FCCL_KERNEL_REDUCE_DIRECT;

  /* ready: every rank's input is final (the root may read it) and every rank left its previous call. */
  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_READY, epoch)) {
    epochEnd(c, epoch);
    return;
  }
  if (me == root) {
    reducePulled<TT, OpTraits<OP>, NR>(a.peerSend, n, 0, units, first, stride, a.bytes,
                                       [&](uint64_t u, const Unit& out) { IO::store(a.recvbuf, u, a.bytes, out); });
    /* done: the root's loads of every input are over (release orders them before the flag). */
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
  } else {
    (void)waitPeersIn(c, c.layout.signalBOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_DONE, epoch, 1u << root);
  }
  epochEnd(c, epoch);
}

FCCL_RANKED_KERNEL_TABLE(reduceDirect)

}  // namespace fccl
