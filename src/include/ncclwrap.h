/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL reached at run time (dlopen of libnccl.so.2), so that libfccl never links it and loads on machines without
 * it (test/abi/check_deps.sh). One table of every NCCL function fccl calls, for the NCCL bootstrap
 * (bootstrap_nccl.c) and the NCCL path (core/engine/nccl_path.c). Builds without nccl.h (FCCL_HAVE_NCCL 0) have no
 * table: fcclNcclLoaded says so.
 */
#ifndef FCCL_NCCLWRAP_H_
#define FCCL_NCCLWRAP_H_

#include "fccl_build_config.h"

#if FCCL_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

/* Every NCCL function fccl uses: X(name, return-type, parameter list). ncclCommRegister (2.19) is the newest;
 * ncclCommSplit came in 2.18. */
#define FCCL_NCCL_FUNCTIONS(X)                                                                                         \
  X(ncclGetVersion, ncclResult_t, (int* version))                                                                      \
  X(ncclGetErrorString, const char*, (ncclResult_t result))                                                            \
  X(ncclGetLastError, const char*, (ncclComm_t comm))                                                                  \
  X(ncclGetUniqueId, ncclResult_t, (ncclUniqueId * uniqueId))                                                          \
  X(ncclCommInitRankConfig, ncclResult_t,                                                                              \
    (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config))                              \
  X(ncclCommSplit, ncclResult_t, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))     \
  X(ncclCommFinalize, ncclResult_t, (ncclComm_t comm))                                                                 \
  X(ncclCommDestroy, ncclResult_t, (ncclComm_t comm))                                                                  \
  X(ncclCommAbort, ncclResult_t, (ncclComm_t comm))                                                                    \
  X(ncclCommCount, ncclResult_t, (const ncclComm_t comm, int* count))                                                  \
  X(ncclCommUserRank, ncclResult_t, (const ncclComm_t comm, int* rank))                                                \
  X(ncclCommCuDevice, ncclResult_t, (const ncclComm_t comm, int* device))                                              \
  X(ncclCommGetAsyncError, ncclResult_t, (ncclComm_t comm, ncclResult_t * asyncError))                                 \
  X(ncclCommRegister, ncclResult_t, (const ncclComm_t comm, void* buff, size_t size, void** handle))                   \
  X(ncclCommDeregister, ncclResult_t, (const ncclComm_t comm, void* handle))                                           \
  X(ncclAllReduce, ncclResult_t,                                                                                       \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,     \
     cudaStream_t stream))                                                                                             \
  X(ncclAllGather, ncclResult_t,                                                                                       \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,                 \
     cudaStream_t stream))                                                                                             \
  X(ncclReduceScatter, ncclResult_t,                                                                                   \
    (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, \
     cudaStream_t stream))                                                                                             \
  X(ncclBroadcast, ncclResult_t,                                                                                       \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,           \
     cudaStream_t stream))                                                                                             \
  X(ncclSend, ncclResult_t,                                                                                            \
    (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream))     \
  X(ncclRecv, ncclResult_t,                                                                                            \
    (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream))           \
  X(ncclGroupStart, ncclResult_t, (void))                                                                              \
  X(ncclGroupEnd, ncclResult_t, (void))

/* The same for the reduce and the pre-multiplied sums' ops (NCCL 2.11), a list of their own. */
#define FCCL_NCCL_ROOTED_FUNCTIONS(X)                                                                       \
  X(ncclReduce, ncclResult_t,                                                                               \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, \
     ncclComm_t comm, cudaStream_t stream))                                                                 \
  X(ncclRedOpCreatePreMulSum, ncclResult_t,                                                                 \
    (ncclRedOp_t * op, void* scalar, ncclDataType_t type, ncclScalarResidence_t where, ncclComm_t comm))    \
  X(ncclRedOpDestroy, ncclResult_t, (ncclRedOp_t op, ncclComm_t comm))

#define FCCL_NCCL_DECLARE(name, ret, params) extern ret(*pfn_##name) params;
FCCL_NCCL_FUNCTIONS(FCCL_NCCL_DECLARE)
FCCL_NCCL_ROOTED_FUNCTIONS(FCCL_NCCL_DECLARE)
#undef FCCL_NCCL_DECLARE
#endif /* FCCL_HAVE_NCCL */

/*
 * Loads NCCL once (any thread; later calls return at once): the libnccl.so.2 already in the process first (the one
 * that made an application's communicator), else libnccl.so.2 from the loader's path. 1 when every function of the
 * table resolved; 0 otherwise, with *why (when why is not NULL) set to a static sentence saying what is missing.
 */
int fcclNcclLoaded(const char** why);

#endif /* FCCL_NCCLWRAP_H_ */
