/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The barrier kernel: fcclBarrier, and the rendezvous around the copy-engine forms (the all-reduce's copy scatter,
 * the all-gather's and the broadcast's copy forms), which launch it with the print of the call they open.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

/* Rendezvous of all ranks: thread p posts to peer p and waits for peer p's post. Relaxed: the barrier hands over
 * no data written in this kernel; work before it on each stream completed before the kernel started. print is
 * FCCL_PRINT_BARRIER for fcclBarrier, else the print of the call whose copies it opens or closes. */
__global__ void __launch_bounds__(FCCL_DEVICE_BARRIER_THREADS, 1) barrierKernel(fcclDevComm c, uint32_t print) {
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c, print);
  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  (void)waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false, FCCL_KERNEL_BARRIER, FCCL_PHASE_BARRIER, epoch);
  epochEnd(c, epoch);
}

const void* barrierInstance() { return reinterpret_cast<const void*>(&barrierKernel); }

}  // namespace fccl
