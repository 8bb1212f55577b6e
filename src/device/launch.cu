/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The extern "C" launchers of the kernels, which live in the collectives' files. Kernels take the device
 * communicator and the call's arguments by value: a CUDA graph captures them as they were, and everything that
 * changes from call to call (epochs) lives in device memory.
 */
#include "device_variable.h"
#include "fused_norm_shape.h"
#include "kernels.cuh"

extern "C" {
#include "check.h"
}

namespace fccl {

/* The calling thread's last launch (fcclDeviceLastLaunchForTest). */
static __thread int lastKernel = -1, lastBlocks = 0, lastThreads = 0;

static void recordLaunch(int kernel, int blocks, int threads) {
  lastKernel = kernel;
  lastBlocks = blocks;
  lastThreads = threads;
}

/* The launch table: the instantiation of a KERNEL row of kernel_list.h for (type, op) and the communicator's rank
 * count; NULL when there is none. */
static const void* dataKernel(fcclDevKernel_t kernel, fcclDataType_t type, fcclRedOp_t op, int nranks) {
  const int rankBound = fcclRankBound(nranks);
  switch (kernel) {
#define FCCL_LAUNCH_CASE_(id, request, name, templ) \
  case id: return templ##Instance(type, op, rankBound);
    FCCL_KERNEL_LIST(FCCL_LAUNCH_CASE_, FCCL_LIST_SKIP3_, FCCL_LIST_SKIP2_)
#undef FCCL_LAUNCH_CASE_
    default: return nullptr; /* the OWN rows: the barrier and the fused norm have launchers of their own */
  }
}

/* fcclAllReduceAddRMSNorm's kernel for a call of input type `type` (fp16, bf16, fp32), FP8 output or the input's
 * type, on nranks ranks, in args.form, with its threads per block and the most blocks it takes (the kernels with
 * flags: one epoch counter per block); kernel NULL when there is none. */
struct FusedLaunch {
  const void* kernel;
  unsigned threads;
  int maxBlocks;
};
static FusedLaunch fusedNormLaunch(fcclDataType_t type, bool fp8, int nranks, const fcclFusedArgs& args) {
  const int bound = fcclRankBound(nranks);
  if (args.form == FCCL_FUSED_ONESHOT_LEGACY)
    return {fusedNormLegacyInstance(type, fp8, bound), kFusedLegacyThreads, FCCL_DEVICE_MAX_BLOCKS};
  const uint64_t rowBytes = args.hidden * fcclTypeSize(type);
  const uint32_t rowThreads = fcclFusedShapeOf(rowBytes).rowThreads;
  const fcclFusedShape shape = fcclFusedShapeMake(rowBytes, rowThreads, rowThreads * args.rowsPerBlock);
  if (shape.rowThreads == 0) return {nullptr, 0, 0};
  const bool vec = fcclFusedVectorizable(&args, rowBytes, nranks) != 0;
  const int vecBound = vec ? bound : FCCL_DEVICE_MAX_RANKS;
  /* One rank: no flags, so no epoch counter per block; any grid CUDA takes. */
  if (args.form == FCCL_FUSED_ONESHOT && nranks == 1)
    return {fusedNormLocalInstance(type, fp8, vec), shape.blockThreads, 0x7fffffff};
  if (args.form == FCCL_FUSED_ONESHOT)
    return {fusedNormInstance(type, fp8, vecBound, vec), shape.blockThreads, FCCL_DEVICE_MAX_BLOCKS};
  if (args.form == FCCL_FUSED_TWOSHOT)
    return {fusedNormTwoshotInstance(type, fp8, vecBound, vec), shape.blockThreads, FCCL_DEVICE_MAX_BLOCKS};
  return {nullptr, 0, 0};
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
    /* args, when given, are the call's whose copy-engine copies the barrier opens or closes (the all-reduce's copy
     * scatter, the copy forms): its print, so that a peer in another call meets this one's. */
    uint32_t print = args != nullptr ? args->print : FCCL_PRINT_BARRIER;
    void* params[] = {&c, &print};
    FCCLCHECK(fccl::launch(fccl::barrierInstance(), dim3(1), dim3(FCCL_DEVICE_BARRIER_THREADS), params, pdl, stream,
                           "barrier"));
    fccl::recordLaunch(kernel, 1, FCCL_DEVICE_BARRIER_THREADS);
    return fcclSuccess;
  }
  /* The variable collectives' kernels take other arguments (fcclDeviceLaunchVariable). */
  const void* function = fcclKernelIsVariable(kernel) ? nullptr : fccl::dataKernel(kernel, type, op, comm->nranks);
  if (function == nullptr || args == nullptr)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "no kernel for algorithm %d, type %d, op %d",
                      (int)kernel, (int)type, (int)op);
  if (blocks < 1 || blocks > FCCL_DEVICE_MAX_BLOCKS || threads < 32 || threads > FCCL_DEVICE_THREADS ||
      threads % 32 != 0 || threads < comm->nranks)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "kernel grid %d x %d outside [1, %d] x [32, %d]", blocks,
                      threads, FCCL_DEVICE_MAX_BLOCKS, FCCL_DEVICE_THREADS);
  fcclDevArgs a = *args;
  void* params[] = {&c, &a};
  FCCLCHECK(fccl::launch(function, dim3(blocks), dim3(threads), params, pdl, stream, "collective"));
  fccl::recordLaunch(kernel, blocks, threads);
  return fcclSuccess;
}

extern "C" fcclResult_t fcclDeviceLaunchVariable(fcclDevKernel_t kernel, fcclDataType_t type, fcclRedOp_t op,
                                                 const fcclDevComm* comm, const fcclDevVArgs* args, int blocks,
                                                 int threads, int pdl, cudaStream_t stream) {
  if (comm == nullptr || args == nullptr)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "variable collective launch without comm or args");
  if ((args->print & ((1u << FCCL_PRINT_FORM_BITS) - 1u)) == 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "kernel launch without the call's fingerprint");
  const void* function = fcclKernelIsVariable(kernel) ? fccl::dataKernel(kernel, type, op, comm->nranks) : nullptr;
  if (function == nullptr)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "no variable collective kernel for algorithm %d, type %d, "
                      "op %d",
                      (int)kernel, (int)type, (int)op);
  if (blocks < 1 || blocks > FCCL_DEVICE_MAX_BLOCKS || threads < 32 || threads > FCCL_DEVICE_THREADS ||
      threads % 32 != 0 || threads < comm->nranks)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "kernel grid %d x %d outside [1, %d] x [32, %d]", blocks,
                      threads, FCCL_DEVICE_MAX_BLOCKS, FCCL_DEVICE_THREADS);
  fcclDevComm c = *comm;
  fcclDevVArgs a = *args;
  void* params[] = {&c, &a};
  FCCLCHECK(fccl::launch(function, dim3(blocks), dim3(threads), params, pdl, stream, "variable collective"));
  fccl::recordLaunch(kernel, blocks, threads);
  return fcclSuccess;
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
  FCCLCHECK(fccl::launch(kernel.kernel, dim3(blocks), dim3(kernel.threads), params, pdl, stream, "fused norm"));
  fccl::recordLaunch(FCCL_KERNEL_FUSED_NORM, blocks, kernel.threads);
  return fcclSuccess;
}

extern "C" void fcclDeviceLastLaunchForTest(int* kernel, int* blocks, int* threads) {
  if (kernel) *kernel = fccl::lastKernel;
  if (blocks) *blocks = fccl::lastBlocks;
  if (threads) *threads = fccl::lastThreads;
}

extern "C" fcclResult_t fcclDeviceKernelsLoadable(void) {
  cudaFuncAttributes attributes;
  cudaError_t err = cudaFuncGetAttributes(&attributes, fccl::barrierInstance());
  if (err == cudaSuccess) return fcclSuccess;
  (void)cudaGetLastError();
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "this GPU cannot load fccl's kernels (%s): the build has no code for its compute capability "
                      "(rebuild with -Dgpu_archs)", cudaGetErrorName(err));
  return FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_COLL, "cudaFuncGetAttributes of the barrier kernel failed: %s",
                    cudaGetErrorString(err));
}
