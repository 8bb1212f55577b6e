/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Exportable device allocations and the CUDA side of peer mappings (internal to the transport layer).
 *
 * fccl's own shared buffers and fcclMemAlloc memory are cuMem allocations (cuMemCreate with POSIX file-descriptor
 * export, granularity aligned, access set for the owning GPU and every GPU of this process that can reach it);
 * where the device cannot export cuMem memory (or FCCL_CUMEM_ENABLE=0) they are cudaMalloc allocations shared
 * with legacy CUDA IPC. The process's mappings (mappings.h) map peers' allocations with the operations here.
 */
#ifndef FCCL_TRANSPORT_IPC_H_
#define FCCL_TRANSPORT_IPC_H_

#include "fccl.h"
#include "mappings.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* Who this process is, as the keys of its exports name it. A child made by fork() gets a fresh nonce and its own
 * pid, so parent and child never take each other for the same process. */
struct fcclProcessId {
  uint64_t hostHash; /* host name and boot id */
  uint64_t nonce;    /* random, drawn once per process */
  int32_t pid;
};
const struct fcclProcessId* fcclProcessIdentity(void);

/* An allocation of this process that peers may map. */
struct fcclIpcAlloc {
  int kind; /* FCCL_MAPPING_CUMEM or FCCL_MAPPING_LEGACY_IPC; 0: none */
  int dev;
  void* ptr;
  size_t size;
  uint64_t serial;                    /* per-process counter: the allocation id in cuMem keys */
  CUmemGenericAllocationHandle handle; /* cuMem */
  int exportFd;                       /* cuMem: the exported POSIX descriptor once exported, else -1 */
  cudaIpcMemHandle_t legacyHandle;    /* legacy: valid once exported */
  int exported;
};

/* Whether dev can allocate exportable cuMem memory (and FCCL_CUMEM_ENABLE allows it). */
fcclResult_t fcclIpcCuMemSupported(int dev, int* supported);

/* Allocates at least minBytes on dev (rounded up to the allocation granularity, 2 MiB on current GPUs) with the kind
 * given (FCCL_MAPPING_CUMEM or FCCL_MAPPING_LEGACY_IPC). cuMem memory is accessible from dev and every device of this
 * process that can access dev's memory. Not zeroed. The current device is left as it was. fcclInvalidArgument when
 * minBytes cannot be rounded up without overflowing. */
fcclResult_t fcclIpcAllocCreate(int dev, size_t minBytes, int kind, struct fcclIpcAlloc* alloc);

/* Creates the shareable handle (cuMem: a POSIX descriptor kept open until free; legacy: the IPC handle).
 * Call only once the memory holds what peers may see first (zeroed and synchronised). Idempotent. */
fcclResult_t fcclIpcAllocExport(struct fcclIpcAlloc* alloc);

/* Frees the allocation (closing its exported descriptor). Peers' cuMem mappings stay valid until they unmap;
 * legacy mappings must be closed first (teardown's barrier sees to it). */
fcclResult_t fcclIpcAllocFree(struct fcclIpcAlloc* alloc);

/* The mapping key under which a process maps, for its device importDev, alloc: one of fccl's own allocations
 * (an arena chunk) made by process owner (legacy: its IPC handle; cuMem: owner, device, serial, base and size).
 * The exporter and every importer build it from the same fields, so they all name the chunk alike. */
void fcclIpcAllocKey(const struct fcclProcessId* owner, const struct fcclIpcAlloc* alloc, int importDev,
                     struct fcclMappingKey* key);

/* What the cuMem open of the process's mappings needs: one imported descriptor per piece, mapped back to back. The
 * descriptors stay owned by the caller. */
struct fcclCuMemImport {
  int pieces;
  const int* fds;
  const uint64_t* sizes;
};

/* The process's mappings when something created them already, else NULL (statistics must not load the driver). */
struct fcclMappings* fcclMappingsProcessIfCreated(void);

/* Makes the current device dev for the lifetime of a call and restores the previous one. */
fcclResult_t fcclIpcSetDevice(int dev, int* previous);
void fcclIpcRestoreDevice(int previous);

#endif /* FCCL_TRANSPORT_IPC_H_ */
