/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The barrier kernel and the extern "C" launchers. Kernels take the device communicator and the call's arguments
 * by value: a CUDA graph captures them as they were, and everything that changes from call to call (epochs)
 * lives in device memory.
 */
#include "common.cuh"
#include "kernels.cuh"

extern "C" {
#include "check.h"
}

namespace fccl {

/* Rendezvous of all ranks: thread p posts to peer p and waits for peer p's post. Relaxed: the barrier hands over
 * no data written in this kernel; work before it on each stream completed before the kernel started. print is
 * FCCL_PRINT_BARRIER for fcclBarrier, the all-reduce's for the barrier before a copy-engine scatter. */
__global__ void __launch_bounds__(FCCL_DEVICE_BARRIER_THREADS, 1) barrierKernel(fcclDevComm c, uint32_t print) {
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c, print);
  postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
  (void)waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false, FCCL_KERNEL_BARRIER, FCCL_PHASE_BARRIER,
                  epoch);
  epochEnd(c, epoch);
}

/* The kernel for (type, op) and the communicator's rank count; NULL when none. */
static const void* dataKernel(fcclDevKernel_t algo, fcclDataType_t type, fcclRedOp_t op, int nranks) {
  const int rankBound = fcclRankBound(nranks);
  const int elemSize = (int)fcclTypeSize(type);
  switch (algo) {
    case FCCL_ALGO_LL: return llKernel(type, op);
    case FCCL_ALGO_ONESHOT_PUSH: return oneshotPushKernel(type, op, rankBound);
    case FCCL_ALGO_ONESHOT_PULL: return oneshotPullKernel(type, op, rankBound);
    case FCCL_ALGO_TWOSHOT_STAGED: return twoshotStagedKernel(type, op, rankBound);
    case FCCL_ALGO_TWOSHOT_REG: return twoshotRegKernel(type, op, rankBound);
    case FCCL_ALGO_LL128: return ll128Kernel(type, op);
    case FCCL_KERNEL_ALLGATHER_LL:
    case FCCL_KERNEL_ALLGATHER_DIRECT:
    case FCCL_KERNEL_ALLGATHER_STAGED: return allGatherKernel(algo, elemSize);
    case FCCL_KERNEL_REDUCESCATTER_LL: return reduceScatterLLKernel(type, op);
    case FCCL_KERNEL_REDUCESCATTER_DIRECT: return reduceScatterDirectKernel(type, op, rankBound);
    case FCCL_KERNEL_REDUCESCATTER_STAGED: return reduceScatterStagedKernel(type, op, rankBound);
    case FCCL_KERNEL_BROADCAST_LL:
    case FCCL_KERNEL_BROADCAST_DIRECT:
    case FCCL_KERNEL_BROADCAST_STAGED: return broadcastKernel(algo, elemSize);
    default: return nullptr;
  }
}

/* With pdl, the kernel may be scheduled while the kernel before it on the stream finishes; every kernel waits for
 * that one's memory before touching anything (gridDependencyEnter), so only the launch latency is overlapped. */
static fcclResult_t launch(const void* kernel, dim3 grid, dim3 block, void** args, int pdl, cudaStream_t stream,
                           const char* what) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {}; /* value-initialized: dim3 members make memset a -Wclass-memaccess warning */
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = pdl ? 1 : 0;
  cudaError_t err = cudaLaunchKernelExC(&config, kernel, args);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_COLL, "launching the %s kernel (%u x %u%s) failed: %s (%s)",
                      what, grid.x, block.x, pdl ? ", programmatic dependent launch" : "", cudaGetErrorName(err),
                      cudaGetErrorString(err));
  }
  return fcclSuccess;
}

}  // namespace fccl

extern "C" fcclResult_t fcclDeviceLaunch(fcclDevKernel_t kernel, fcclDataType_t type, fcclRedOp_t op,
                                         const fcclDevComm* comm, const fcclDevArgs* args, int blocks, int threads,
                                         int pdl, cudaStream_t stream) {
  if (comm == nullptr) return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "kernel launch without comm");
  /* A print's form field is never 0: with it, flags could be 0, which is what a cleared LL packet holds. */
  if (args != nullptr && (args->print & ((1u << FCCL_PRINT_FORM_BITS) - 1u)) == 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "kernel launch without the call's fingerprint");
  fcclDevComm c = *comm;
  if (kernel == FCCL_KERNEL_BARRIER) {
    if (blocks != 1 || threads != FCCL_DEVICE_BARRIER_THREADS)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "barrier grid %d x %d is not 1 x %d", blocks, threads,
                        FCCL_DEVICE_BARRIER_THREADS);
    /* args, when given, are the call's that the barrier opens (the copy-engine scatter): its print, so that a peer
     * in another call meets this one's. */
    uint32_t print = args != nullptr ? args->print : FCCL_PRINT_BARRIER;
    void* params[] = {&c, &print};
    return fccl::launch(reinterpret_cast<const void*>(&fccl::barrierKernel), dim3(1),
                        dim3(FCCL_DEVICE_BARRIER_THREADS), params, pdl, stream, "barrier");
  }
  const void* function = fccl::dataKernel(kernel, type, op, comm->nranks);
  if (function == nullptr || args == nullptr)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "no kernel for algorithm %d, type %d, op %d",
                      (int)kernel, (int)type, (int)op);
  if (blocks < 1 || blocks > FCCL_DEVICE_MAX_BLOCKS || threads < 32 || threads > FCCL_DEVICE_THREADS ||
      threads % 32 != 0 || threads < comm->nranks)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "kernel grid %d x %d outside [1, %d] x [32, %d]", blocks,
                      threads, FCCL_DEVICE_MAX_BLOCKS, FCCL_DEVICE_THREADS);
  fcclDevArgs a = *args;
  void* params[] = {&c, &a};
  return fccl::launch(function, dim3(blocks), dim3(threads), params, pdl, stream, "collective");
}

extern "C" fcclResult_t fcclDeviceLaunchFusedNorm(fcclDataType_t datatype, fcclDataType_t outtype,
                                                  const fcclDevComm* comm, const fcclFusedArgs* args, int blocks,
                                                  int pdl, cudaStream_t stream) {
  if (comm == nullptr || args == nullptr)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "fused norm launch without comm or args");
  if ((args->print & ((1u << FCCL_PRINT_FORM_BITS) - 1u)) == 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "fused norm launch without the call's fingerprint");
  const bool fp8 = outtype == fcclFloat8e4m3;
  fccl::FusedLaunch kernel = {nullptr, 0, 0};
  if (fp8 || outtype == datatype) kernel = fccl::fusedNormLaunch(datatype, fp8, comm->nranks, *args);
  if (kernel.kernel == nullptr)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "no fused norm kernel for type %d, output type %d, form %d", (int)datatype, (int)outtype,
                      (int)args->form);
  if (blocks < 1 || blocks > kernel.maxBlocks)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "fused norm grid %d outside [1, %d]", blocks,
                      kernel.maxBlocks);
  fcclDevComm c = *comm;
  fcclFusedArgs a = *args;
  void* params[] = {&c, &a};
  return fccl::launch(kernel.kernel, dim3(blocks), dim3(kernel.threads), params, pdl, stream, "fused norm");
}

extern "C" fcclResult_t fcclDeviceKernelsLoadable(void) {
  cudaFuncAttributes attributes;
  cudaError_t err = cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&fccl::barrierKernel));
  if (err == cudaSuccess) return fcclSuccess;
  (void)cudaGetLastError();
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "this GPU cannot load fccl's kernels (%s): the build has no code for its compute capability "
                      "(rebuild with -Dgpu_archs)", cudaGetErrorName(err));
  return FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_COLL, "cudaFuncGetAttributes of the barrier kernel failed: %s",
                    cudaGetErrorString(err));
}
