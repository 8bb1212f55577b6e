/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Exportable allocations (cuMem with POSIX descriptors, or cudaMalloc + legacy IPC) and the process's mappings'
 * CUDA operations: open = import and map a peer allocation for one device, close = unmap it.
 */
#include "ipc.h"

#include "check.h"
#include "cudawrap.h"
#include "debug.h"
#include "fdpass.h"
#include "param.h"
#include "transport.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_IPC

#define LEGACY_GRANULARITY (2u << 20) /* cudaMalloc memory is handed out in 2 MiB blocks: never share one */

static pthread_once_t identityOnce = PTHREAD_ONCE_INIT;
static struct fcclProcessId processId;

/* In a child of fork(): another process, so another pid and nonce (the host stays). Runs single-threaded. */
static void identityAfterFork(void) {
  processId.nonce = fcclRandom64();
  processId.pid = (int32_t)getpid();
}

static void initIdentity(void) {
  char text[512] = "";
  if (gethostname(text, 256) != 0) text[0] = '\0';
  text[255] = '\0';
  size_t length = strlen(text);
  FILE* boot = fopen("/proc/sys/kernel/random/boot_id", "re");
  if (boot) {
    if (!fgets(text + length, (int)(sizeof(text) - length), boot)) text[length] = '\0';
    fclose(boot);
  }
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char* p = text; *p; p++) hash = (hash ^ (uint8_t)*p) * 0x100000001b3ull;
  processId.hostHash = hash;
  identityAfterFork();
  /* Failure (ENOMEM) only loses the refresh in children, which then look like their parent, as before. */
  (void)pthread_atfork(NULL, NULL, identityAfterFork);
}

const struct fcclProcessId* fcclProcessIdentity(void) {
  pthread_once(&identityOnce, initIdentity);
  return &processId;
}

fcclResult_t fcclIpcSetDevice(int dev, int* previous) {
  CUDACHECK(cudaGetDevice(previous));
  if (*previous != dev) CUDACHECK(cudaSetDevice(dev));
  return fcclSuccess;
}

void fcclIpcRestoreDevice(int previous) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

fcclResult_t fcclIpcCuMemSupported(int dev, int* supported) {
  *supported = 0;
  if (fcclParamInt(FCCL_PARAM_CUMEM_ENABLE) == 0) return fcclSuccess;
  FCCLCHECK(fcclCudaDriverLoad());
  CUdevice cuDev;
  int vmm = 0, posixFd = 0;
  CUCHECK(cuDeviceGet(&cuDev, dev));
  CUCHECK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cuDev));
  CUCHECK(cuDeviceGetAttribute(&posixFd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, cuDev));
  *supported = vmm && posixFd;
  return fcclSuccess;
}

static void cuMemProp(int dev, CUmemAllocationProp* prop) {
  memset(prop, 0, sizeof(*prop));
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = dev;
  prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

/* Read-write access for dev and for every device of this process that can reach dev's memory. */
static fcclResult_t setAccessAll(int dev, CUdeviceptr va, size_t size) {
  int count = 0;
  CUDACHECK(cudaGetDeviceCount(&count));
  CUmemAccessDesc descs[64];
  int n = 0;
  for (int d = 0; d < count && n < 64; d++) {
    int canAccess = d == dev;
    if (!canAccess && cudaDeviceCanAccessPeer(&canAccess, d, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      canAccess = 0;
    }
    if (!canAccess) continue;
    descs[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    descs[n].location.id = d;
    descs[n].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    n++;
  }
  CUCHECK(cuMemSetAccess(va, size, descs, (size_t)n));
  return fcclSuccess;
}

/* bytes rounded up to a multiple of granularity; fcclInvalidArgument when that overflows. */
static fcclResult_t roundToGranularity(size_t bytes, size_t granularity, size_t* rounded) {
  if (bytes > SIZE_MAX - (granularity - 1))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                      "%zu bytes cannot be rounded up to the allocation granularity (%zu bytes)", bytes, granularity);
  *rounded = (bytes + granularity - 1) / granularity * granularity;
  return fcclSuccess;
}

static uint64_t nextSerial(void) {
  static uint64_t serial;
  return __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED);
}

static fcclResult_t cuMemAllocCreate(int dev, size_t minBytes, struct fcclIpcAlloc* alloc) {
  fcclResult_t res = fcclSuccess;
  CUmemAllocationProp prop;
  cuMemProp(dev, &prop);
  size_t granularity = 0;
  CUCHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  if (granularity == 0) granularity = LEGACY_GRANULARITY;
  size_t size = 0;
  FCCLCHECK(roundToGranularity(minBytes, granularity, &size));
  CUmemGenericAllocationHandle handle;
  CUdeviceptr va = 0;
  CUCHECK(cuMemCreate(&handle, size, &prop, 0));
  CUCHECKGOTO(cuMemAddressReserve(&va, size, granularity, 0, 0), res, release);
  CUCHECKGOTO(cuMemMap(va, size, 0, handle, 0), res, addressFree);
  FCCLCHECKGOTO(setAccessAll(dev, va, size), res, unmap);
  alloc->handle = handle;
  alloc->ptr = (void*)va;
  alloc->size = size;
  return fcclSuccess;
unmap:
  (void)pfn_cuMemUnmap(va, size);
addressFree:
  (void)pfn_cuMemAddressFree(va, size);
release:
  (void)pfn_cuMemRelease(handle);
  return res;
}

fcclResult_t fcclIpcAllocCreate(int dev, size_t minBytes, int kind, struct fcclIpcAlloc* alloc) {
  fcclResult_t res = fcclSuccess;
  memset(alloc, 0, sizeof(*alloc));
  alloc->exportFd = -1;
  if (minBytes == 0) minBytes = 1;
  FCCLCHECK(fcclCudaDriverLoad());
  int previous;
  FCCLCHECK(fcclIpcSetDevice(dev, &previous));
  if (kind == FCCL_MAPPING_CUMEM) {
    FCCLCHECKGOTO(cuMemAllocCreate(dev, minBytes, alloc), res, restore);
  } else {
    size_t size = 0;
    FCCLCHECKGOTO(roundToGranularity(minBytes, LEGACY_GRANULARITY, &size), res, restore);
    CUDACHECKGOTO(cudaMalloc(&alloc->ptr, size), res, restore);
    alloc->size = size;
  }
  alloc->kind = kind;
  alloc->dev = dev;
  alloc->serial = nextSerial();
  FCCL_INFO(FCCL_SUBSYS_IPC, "allocated %s buffer %" PRIu64 ": %zu bytes at %p on device %d",
            kind == FCCL_MAPPING_CUMEM ? "cuMem" : "cudaMalloc", alloc->serial, alloc->size, alloc->ptr, dev);
restore:
  fcclIpcRestoreDevice(previous);
  return res;
}

fcclResult_t fcclIpcAllocExport(struct fcclIpcAlloc* alloc) {
  if (alloc->exported) return fcclSuccess;
  if (alloc->kind == FCCL_MAPPING_CUMEM) {
    int fd = -1;
    CUCHECK(cuMemExportToShareableHandle(&fd, alloc->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    alloc->exportFd = fd;
  } else {
    int previous;
    FCCLCHECK(fcclIpcSetDevice(alloc->dev, &previous));
    fcclResult_t res = fcclSuccess;
    CUDACHECKKEEP(cudaIpcGetMemHandle(&alloc->legacyHandle, alloc->ptr), res);
    fcclIpcRestoreDevice(previous);
    FCCLCHECK(res);
  }
  alloc->exported = 1;
  return fcclSuccess;
}

fcclResult_t fcclIpcAllocFree(struct fcclIpcAlloc* alloc) {
  fcclResult_t res = fcclSuccess;
  if (alloc->kind == 0) return fcclSuccess;
  if (alloc->exportFd >= 0) close(alloc->exportFd);
  alloc->exportFd = -1;
  if (alloc->kind == FCCL_MAPPING_CUMEM) {
    CUdeviceptr va = (CUdeviceptr)alloc->ptr;
    CUresult unmapped = pfn_cuMemUnmap(va, alloc->size);
    CUresult freed = pfn_cuMemAddressFree(va, alloc->size);
    CUresult released = pfn_cuMemRelease(alloc->handle);
    CUresult first = unmapped != CUDA_SUCCESS ? unmapped : freed != CUDA_SUCCESS ? freed : released;
    if (first != CUDA_SUCCESS)
      res = fcclCuError(first, "cuMemUnmap/cuMemAddressFree/cuMemRelease", FCCL_LOG_SUBSYS, __FILE__, __LINE__);
  } else {
    int previous;
    FCCLCHECK(fcclIpcSetDevice(alloc->dev, &previous));
    CUDACHECKKEEP(cudaFree(alloc->ptr), res);
    fcclIpcRestoreDevice(previous);
  }
  FCCL_INFO(FCCL_SUBSYS_IPC, "freed buffer %" PRIu64 ": %zu bytes at %p on device %d", alloc->serial, alloc->size,
            alloc->ptr, alloc->dev);
  alloc->kind = 0;
  alloc->ptr = NULL;
  return res;
}

void fcclIpcAllocKey(const struct fcclProcessId* owner, const struct fcclIpcAlloc* alloc, int importDev,
                     struct fcclMappingKey* key) {
  memset(key, 0, sizeof(*key));
  key->kind = (uint32_t)alloc->kind;
  key->importDev = importDev;
  if (alloc->kind == FCCL_MAPPING_LEGACY_IPC) {
    memcpy(key->id, &alloc->legacyHandle, sizeof(alloc->legacyHandle));
    return;
  }
  struct fcclCuMemId id;
  memset(&id, 0, sizeof(id));
  id.hostHash = owner->hostHash;
  id.processNonce = owner->nonce;
  id.pid = owner->pid;
  id.dev = alloc->dev;
  id.serial = alloc->serial;
  id.base = (uint64_t)(uintptr_t)alloc->ptr;
  id.size = alloc->size;
  id.pieces = 1;
  memcpy(key->id, &id, sizeof(id));
}

/* ---- the operations of the process's mappings ---- */

static fcclResult_t cuMemOpen(const struct fcclMappingKey* key, size_t size, const struct fcclCuMemImport* import,
                              void** base) {
  fcclResult_t res = fcclSuccess;
  char text[160];
  uint64_t total = 0;
  for (int i = 0; i < import->pieces; i++) total += import->sizes[i];
  if (import->pieces <= 0 || total != size)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "%s: %d pieces of %" PRIu64 " bytes for %zu bytes",
                      fcclMappingKeyDescribe(key, text, sizeof(text)), import->pieces, total, size);
  CUmemAllocationProp prop;
  cuMemProp(key->importDev, &prop);
  size_t granularity = 0;
  CUCHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUdeviceptr va = 0;
  CUCHECK(cuMemAddressReserve(&va, size, granularity, 0, 0));
  size_t mapped = 0;
  for (int i = 0; i < import->pieces; i++) {
    CUmemGenericAllocationHandle handle;
    CUCHECKGOTO(cuMemImportFromShareableHandle(&handle, (void*)(uintptr_t)import->fds[i],
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                res, unmap);
    CUresult err = pfn_cuMemMap(va + mapped, import->sizes[i], 0, handle, 0);
    (void)pfn_cuMemRelease(handle); /* the mapping holds the allocation from here on */
    if (err != CUDA_SUCCESS) {
      res = fcclCuError(err, "cuMemMap", FCCL_LOG_SUBSYS, __FILE__, __LINE__);
      goto unmap;
    }
    mapped += import->sizes[i];
  }
  CUmemAccessDesc access;
  memset(&access, 0, sizeof(access));
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = key->importDev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUCHECKGOTO(cuMemSetAccess(va, size, &access, 1), res, unmap);
  *base = (void*)va;
  return fcclSuccess;
unmap:
  for (size_t offset = 0, i = 0; offset < mapped; offset += import->sizes[i], i++)
    (void)pfn_cuMemUnmap(va + offset, import->sizes[i]);
  (void)pfn_cuMemAddressFree(va, size);
  return res;
}

static fcclResult_t cudaMappingOpen(void* ctx, const struct fcclMappingKey* key, size_t size, const void* arg,
                                    void** base, void** opaque) {
  (void)ctx;
  *opaque = NULL;
  fcclResult_t res = fcclSuccess;
  int previous;
  FCCLCHECK(fcclIpcSetDevice(key->importDev, &previous));
  if (key->kind == FCCL_MAPPING_CUMEM) {
    res = cuMemOpen(key, size, (const struct fcclCuMemImport*)arg, base);
  } else {
    cudaIpcMemHandle_t handle;
    memcpy(&handle, key->id, sizeof(handle));
    cudaError_t err = cudaIpcOpenMemHandle(base, handle, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      char text[160];
      (void)cudaGetLastError();
      res = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_IPC, "cudaIpcOpenMemHandle of %s failed: %s",
                       fcclMappingKeyDescribe(key, text, sizeof(text)), cudaGetErrorString(err));
    }
  }
  fcclIpcRestoreDevice(previous);
  return res;
}

static fcclResult_t cudaMappingClose(void* ctx, const struct fcclMappingKey* key, size_t size, void* base,
                                     void* opaque) {
  (void)ctx;
  (void)opaque;
  fcclResult_t res = fcclSuccess;
  int previous;
  FCCLCHECK(fcclIpcSetDevice(key->importDev, &previous));
  if (key->kind == FCCL_MAPPING_CUMEM) {
    CUresult unmapped = pfn_cuMemUnmap((CUdeviceptr)base, size);
    CUresult freed = pfn_cuMemAddressFree((CUdeviceptr)base, size);
    if (unmapped != CUDA_SUCCESS)
      res = fcclCuError(unmapped, "cuMemUnmap", FCCL_LOG_SUBSYS, __FILE__, __LINE__);
    else if (freed != CUDA_SUCCESS)
      res = fcclCuError(freed, "cuMemAddressFree", FCCL_LOG_SUBSYS, __FILE__, __LINE__);
  } else {
    CUDACHECKKEEP(cudaIpcCloseMemHandle(base), res);
  }
  fcclIpcRestoreDevice(previous);
  return res;
}

static pthread_once_t mappingsOnce = PTHREAD_ONCE_INIT;
static struct fcclMappings* processMappings;
static fcclResult_t processMappingsResult = fcclInternalError;

static void createProcessMappings(void) {
  struct fcclMappingsOps ops = {.ctx = NULL, .open = cudaMappingOpen, .close = cudaMappingClose};
  struct fcclMappings* created = NULL;
  processMappingsResult = fcclMappingsCreate(&ops, &created);
  __atomic_store_n(&processMappings, created, __ATOMIC_RELEASE);
}

struct fcclMappings* fcclMappingsProcessIfCreated(void) {
  return __atomic_load_n(&processMappings, __ATOMIC_ACQUIRE);
}

fcclResult_t fcclMappingsProcess(struct fcclMappings** mappings) {
  FCCLCHECK(fcclCudaDriverLoad());
  pthread_once(&mappingsOnce, createProcessMappings);
  if (processMappingsResult != fcclSuccess) return processMappingsResult;
  *mappings = processMappings;
  return fcclSuccess;
}

/* ---- fcclMemAlloc / fcclMemFree: the allocations handed out, so that a foreign pointer is refused ---- */

struct memAllocation {
  struct fcclIpcAlloc alloc;
  struct memAllocation* next;
};

static pthread_mutex_t memLock = PTHREAD_MUTEX_INITIALIZER;
static struct memAllocation* memAllocations;

fcclResult_t fcclTransportMemAlloc(void** ptr, size_t size) {
  int dev = -1, cuMem = 0;
  CUDACHECK(cudaGetDevice(&dev));
  FCCLCHECK(fcclIpcCuMemSupported(dev, &cuMem));
  struct memAllocation* entry = calloc(1, sizeof(*entry));
  if (!entry) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
  fcclResult_t res = fcclIpcAllocCreate(dev, size, cuMem ? FCCL_MAPPING_CUMEM : FCCL_MAPPING_LEGACY_IPC, &entry->alloc);
  if (res != fcclSuccess) {
    free(entry);
    return res;
  }
  pthread_mutex_lock(&memLock);
  entry->next = memAllocations;
  memAllocations = entry;
  pthread_mutex_unlock(&memLock);
  *ptr = entry->alloc.ptr;
  return fcclSuccess;
}

fcclResult_t fcclTransportMemFree(void* ptr) {
  if (ptr == NULL) return fcclSuccess;
  pthread_mutex_lock(&memLock);
  struct memAllocation** link = &memAllocations;
  while (*link && (*link)->alloc.ptr != ptr) link = &(*link)->next;
  struct memAllocation* entry = *link;
  if (entry) *link = entry->next;
  pthread_mutex_unlock(&memLock);
  if (!entry)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                      "fcclMemFree: %p did not come from fcclMemAlloc (or was freed already)", ptr);
  fcclResult_t res = fcclIpcAllocFree(&entry->alloc);
  free(entry);
  return res;
}
