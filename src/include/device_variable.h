/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The variable all-gather and reduce-scatter (fcclAllGatherV, fcclReduceScatterV and their forms with counts in
 * device memory) as host C and their kernels share them: the arguments every kernel of theirs takes by value, the
 * fold of the counts that goes into a call's fingerprint, and their launcher. Their kernels are rows of the one
 * kernel list (FCCL_ALLGATHERV_FORMS, FCCL_REDUCESCATTERV_FORMS in kernel_list.h), but they take fcclDevVArgs
 * instead of fcclDevArgs, so fcclDeviceLaunchVariable launches them and fcclDeviceLaunch refuses them.
 * docs/collectives.md#variable-all-gather-and-reduce-scatter.
 */
#ifndef FCCL_DEVICE_VARIABLE_H_
#define FCCL_DEVICE_VARIABLE_H_

#include "device_host.h"
#include "fccl.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

/*
 * Arguments of one variable call, passed by value. Rank r's block holds counts[r] elements: in the all-gather's
 * recvbuf and the reduce-scatter's sendbuf the blocks lie back to back in rank order; the all-gather's sendbuf and
 * the reduce-scatter's recvbuf hold this rank's block. With deviceCounts set the kernel reads the counts from device
 * memory when it runs (every replay of a captured graph reads them again) and checks them against the capacities
 * (elements of each rank's buffers, the same on every rank); otherwise counts[] holds them, checked by the host.
 */
typedef struct {
  uint64_t sendbuf;
  uint64_t recvbuf;
  uint64_t peerSend[FCCL_DEVICE_MAX_RANKS]; /* direct reduce-scatter: every rank's sendbuf, mapped here */
  uint64_t peerRecv[FCCL_DEVICE_MAX_RANKS]; /* direct all-gather: every rank's recvbuf, mapped here */
  uint64_t counts[FCCL_DEVICE_MAX_RANKS];   /* elements of each rank's block (host counts) */
  uint64_t deviceCounts;                    /* const int64_t[nranks] in device memory; 0: counts[] */
  uint64_t sendCapacity;                    /* device counts: elements each rank's sendbuf holds */
  uint64_t recvCapacity;                    /* device counts: elements each rank's recvbuf holds */
  uint64_t fold;       /* host counts: their fold (fcclVariableFold); device counts: the capacities', which the
                        * kernel continues with the counts it reads for the call's print */
  uint64_t roundUnits; /* staged: 16-byte units per writer and round */
  uint32_t print;      /* the call's fingerprint; with device counts the kernel puts the counts' hash in it */
  int32_t reserved;
} fcclDevVArgs;
FCCL_STATIC_ASSERT(sizeof(fcclDevVArgs) == 24 * FCCL_DEVICE_MAX_RANKS + 5 * 8 + 24, "fcclDevVArgs layout");

/* Where a fold starts: the host's counts, or the capacities of a call whose counts are in device memory. Different,
 * so that two ranks that call the two forms with the same numbers still differ in their prints. */
#define FCCL_VARIABLE_HOST_SEED 0x76636f6c686f7374ull   /* "vcolhost" */
#define FCCL_VARIABLE_DEVICE_SEED 0x76636f6c64657663ull /* "vcoldevc" */

/* One value more into a fold of counts: any change of any value, or of their order, changes the fold. */
static inline FCCL_HOST_DEVICE uint64_t fcclVariableFold(uint64_t fold, uint64_t value) {
  return fold ^ (value + 0x9e3779b97f4a7c15ull + (fold << 6) + (fold >> 2));
}

/* print with its count field (fcclPrintMake's hash of the count) made the hash of fold instead. */
static inline FCCL_HOST_DEVICE uint32_t fcclVariablePrint(uint32_t print, uint64_t fold) {
  const uint32_t countBits = FCCL_PRINT_MASK & ~((1u << FCCL_PRINT_COUNT_SHIFT) - 1u);
  return (print & ~countBits) | ((fcclPrintCountHash(fold) << FCCL_PRINT_COUNT_SHIFT) & countBits);
}

/* Whether a kernel id is one of the variable collectives' (they take fcclDevVArgs). */
#define FCCL_VARIABLE_KERNEL_CASE_(id, request, name, kernel) case id:
static inline int fcclKernelIsVariable(int kernel) {
  switch (kernel) {
    FCCL_ALLGATHERV_FORMS(FCCL_VARIABLE_KERNEL_CASE_, FCCL_LIST_SKIP3_)
    FCCL_REDUCESCATTERV_FORMS(FCCL_VARIABLE_KERNEL_CASE_, FCCL_LIST_SKIP3_)
    return 1;
    default: return 0;
  }
}
#undef FCCL_VARIABLE_KERNEL_CASE_

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Launches a variable collective's kernel (fcclKernelIsVariable) for (type, op) with blocks x threads on stream, the
 * current device comm's; pdl as for fcclDeviceLaunch (src/include/device.h). args->print must be the call's
 * fingerprint. fcclInvalidArgument for another kernel, an unknown type or op, a grid outside
 * [1, FCCL_DEVICE_MAX_BLOCKS] x [32, FCCL_DEVICE_THREADS] or args without a print; fcclUnhandledCudaError when the
 * launch fails.
 */
fcclResult_t fcclDeviceLaunchVariable(fcclDevKernel_t kernel, fcclDataType_t type, fcclRedOp_t op,
                                      const fcclDevComm* comm, const fcclDevVArgs* args, int blocks, int threads,
                                      int pdl, cudaStream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FCCL_DEVICE_VARIABLE_H_ */
