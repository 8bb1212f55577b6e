/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The calls this library passes to the real NCCL as they are: nothing of fccl's is involved (memory NCCL allocates,
 * unique ids, a communicator's shape).
 * They exist here so that a loader that binds NCCL's names on this library's handle (VLLM_NCCL_SO_PATH) finds
 * every function of nccl.h.
 */
#include "internal.h"

#define FORWARD(name, params, args)                 \
  FNCCL_API ncclResult_t nccl##name params {        \
    FNCCL_NEED_REAL(name);                          \
    ncclResult_t result;                            \
    FNCCL_REAL(result, name, args);                 \
    return result;                                  \
  }                                                 \
  FNCCL_TWIN(nccl##name)

FORWARD(MemAlloc, (void** ptr, size_t size), (ptr, size));
FORWARD(MemFree, (void* ptr), (ptr));
FORWARD(GetUniqueId, (ncclUniqueId * uniqueId), (uniqueId));
FORWARD(CommCount, (const ncclComm_t comm, int* count), (comm, count));
FORWARD(CommCuDevice, (const ncclComm_t comm, int* device), (comm, device));
FORWARD(CommUserRank, (const ncclComm_t comm, int* rank), (comm, rank));

/* Deprecated in nccl.h, still exported by NCCL: passed through. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
FNCCL_API void ncclResetDebugInit(void) {
  if (fncclRealLoad() == ncclSuccess && fncclReal.ResetDebugInit) fncclReal.ResetDebugInit();
}
FNCCL_TWIN(ncclResetDebugInit);
#pragma GCC diagnostic pop
