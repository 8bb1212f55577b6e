/* SPDX-License-Identifier: Apache-2.0 */
/*
 * User buffer registration: the work of fcclCommRegister / fcclCommDeregister (core/comm/memory.c has the public
 * calls), and the registrations that captured graphs hold (graph_register.c) made the same way.
 *
 * A registered buffer travels as (identity of the allocation it lies in, offset): for cudaMalloc memory the legacy
 * IPC handle of the allocation's base, for cuMem memory (fcclMemAlloc, PyTorch expandable segments) the exporter's
 * identity and the run of physical allocations that covers the buffer, exported as POSIX descriptors and mapped
 * back to back by each importer. Registering the same or an overlapping range again names the same allocation,
 * so the process's mappings take another reference instead of mapping it again.
 */
#include "transport_internal.h"

#include "check.h"
#include "cudawrap.h"
#include "debug.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_IPC

#define MAX_PIECES 4096 /* physical allocations one registration may span (PyTorch maps 2 or 20 MiB pages) */

/* What this rank registers, as it tells its peers. */
struct regRecord {
  int32_t status;
  int32_t kind;
  int32_t pieces;
  int32_t reserved;
  uint64_t size;       /* bytes registered */
  uint64_t offset;     /* buf - region base */
  uint64_t regionSize; /* bytes of the allocations that hold the buffer */
  uint64_t regionPtr;  /* region base in the owner's address space (same-process peers use it directly) */
  uint8_t legacyHandle[sizeof(cudaIpcMemHandle_t)];
  uint8_t cuMemId[sizeof(struct fcclCuMemId)];
  char sockName[FCCL_FD_SOCKET_NAME_BYTES];
};

struct pieceRecord {
  int32_t fd; /* the owner's descriptor number, for pidfd_getfd */
  int32_t reserved;
  uint64_t size;
};

struct localExport {
  int kind;
  int pieces;
  CUdeviceptr regionBase;
  size_t regionSize;
  CUdeviceptr* bases;
  uint64_t* sizes;
  int* fds;
  cudaIpcMemHandle_t legacyHandle;
  struct fcclCuMemId id;
};

static void freeLocalExport(struct localExport* exp) {
  if (exp->fds)
    for (int i = 0; i < exp->pieces; i++)
      if (exp->fds[i] >= 0) close(exp->fds[i]);
  free(exp->fds);
  free(exp->bases);
  free(exp->sizes);
  memset(exp, 0, sizeof(*exp));
}

static fcclResult_t addPiece(struct localExport* exp, CUdeviceptr base, size_t size) {
  if (exp->pieces >= MAX_PIECES)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "buffer spans more than %d allocations", MAX_PIECES);
  if (exp->pieces % 16 == 0) {
    size_t capacity = (size_t)exp->pieces + 16;
    CUdeviceptr* bases = realloc(exp->bases, capacity * sizeof(*bases));
    if (bases) exp->bases = bases;
    uint64_t* sizes = realloc(exp->sizes, capacity * sizeof(*sizes));
    if (sizes) exp->sizes = sizes;
    int* fds = realloc(exp->fds, capacity * sizeof(*fds));
    if (fds) exp->fds = fds;
    if (!bases || !sizes || !fds) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
  }
  exp->bases[exp->pieces] = base;
  exp->sizes[exp->pieces] = size;
  exp->fds[exp->pieces] = -1;
  exp->pieces++;
  return fcclSuccess;
}

/* The mapping a cuMem pointer lies in; cuMemGetAddressRange where the driver lacks the mapping attributes. */
static fcclResult_t cuMemMappingOf(CUdeviceptr ptr, CUdeviceptr* base, size_t* size) {
  CUdeviceptr mappingBase = 0;
  size_t mappingSize = 0;
  if (pfn_cuPointerGetAttribute(&mappingBase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, ptr) == CUDA_SUCCESS &&
      pfn_cuPointerGetAttribute(&mappingSize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, ptr) == CUDA_SUCCESS &&
      mappingSize > 0) {
    *base = mappingBase;
    *size = mappingSize;
    return fcclSuccess;
  }
  if (pfn_cuMemGetAddressRange(base, size, ptr) != CUDA_SUCCESS)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "%p is not mapped device memory", (void*)ptr);
  return fcclSuccess;
}

/* Finds the allocations under [buf, buf + size), decides legacy or cuMem, and exports them. */
static fcclResult_t analyseBuffer(const struct fcclTransportParams* cfg, void* buf, size_t size,
                                  struct localExport* exp) {
  CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)buf;
  unsigned int memoryType = 0;
  int ordinal = -1, legacyCapable = 0;
  if (pfn_cuPointerGetAttribute(&memoryType, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) != CUDA_SUCCESS ||
      memoryType != CU_MEMORYTYPE_DEVICE)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "fcclCommRegister: %p is not device memory", buf);
  if (pfn_cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) != CUDA_SUCCESS ||
      ordinal != cfg->cudaDev)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                      "fcclCommRegister: %p is memory of device %d, the communicator uses device %d", buf, ordinal,
                      cfg->cudaDev);
  if (pfn_cuPointerGetAttribute(&legacyCapable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr) !=
      CUDA_SUCCESS)
    legacyCapable = 0;
  exp->kind = legacyCapable ? FCCL_MAPPING_LEGACY_IPC : FCCL_MAPPING_CUMEM;

  for (CUdeviceptr p = ptr; p < ptr + size;) {
    CUdeviceptr base = 0;
    size_t pieceSize = 0;
    if (exp->kind == FCCL_MAPPING_CUMEM) {
      FCCLCHECK(cuMemMappingOf(p, &base, &pieceSize));
    } else if (pfn_cuMemGetAddressRange(&base, &pieceSize, p) != CUDA_SUCCESS) {
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                        "fcclCommRegister: [%p, %p + %zu) is not all allocated device memory (no allocation at %p)",
                        buf, buf, size, (void*)p);
    }
    if (base > p || base + pieceSize <= p || (exp->pieces > 0 && base != p))
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                        "fcclCommRegister: the allocations under [%p, %p + %zu) are not contiguous", buf, buf, size);
    FCCLCHECK(addPiece(exp, base, pieceSize));
    p = base + pieceSize;
  }
  exp->regionBase = exp->bases[0];
  exp->regionSize = 0;
  for (int i = 0; i < exp->pieces; i++) exp->regionSize += exp->sizes[i];

  if (exp->kind == FCCL_MAPPING_LEGACY_IPC) {
    if (exp->pieces != 1)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                        "fcclCommRegister: [%p, %p + %zu) spans %d cudaMalloc allocations; register each one", buf,
                        buf, size, exp->pieces);
    /* Memory that cannot be shared is the caller's argument, not a CUDA failure. */
    cudaError_t err = cudaIpcGetMemHandle(&exp->legacyHandle, (void*)exp->regionBase);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "fcclCommRegister: cudaIpcGetMemHandle(%p) failed: %s",
                        (void*)exp->regionBase, cudaGetErrorString(err));
    }
    return fcclSuccess;
  }

  const struct fcclProcessId* self = fcclProcessIdentity();
  uint64_t pieceHash = 0xcbf29ce484222325ull;
  for (int i = 0; i < exp->pieces; i++) {
    CUmemGenericAllocationHandle handle;
    if (pfn_cuMemRetainAllocationHandle(&handle, (void*)exp->bases[i]) != CUDA_SUCCESS)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                        "fcclCommRegister: %p is neither cudaMalloc memory nor a cuMem mapping (a memory pool? "
                        "register memory from cudaMalloc, cuMemCreate or fcclMemAlloc)", (void*)exp->bases[i]);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    CUresult err = pfn_cuMemGetAllocationPropertiesFromHandle(&prop, handle);
    if (err == CUDA_SUCCESS && !(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
      (void)pfn_cuMemRelease(handle);
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                        "fcclCommRegister: the cuMem allocation at %p cannot be shared: it was created without "
                        "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (use fcclMemAlloc, or PyTorch's expandable segments "
                        "with IPC handles enabled)", (void*)exp->bases[i]);
    }
    if (err == CUDA_SUCCESS)
      err = pfn_cuMemExportToShareableHandle(&exp->fds[i], handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    (void)pfn_cuMemRelease(handle); /* drops the reference cuMemRetainAllocationHandle took */
    if (err != CUDA_SUCCESS) {
      exp->fds[i] = -1;
      return fcclCuError(err, "cuMemExportToShareableHandle", FCCL_LOG_SUBSYS, __FILE__, __LINE__);
    }
    unsigned long long bufferId = 0;
    if (pfn_cuPointerGetAttribute(&bufferId, CU_POINTER_ATTRIBUTE_BUFFER_ID, exp->bases[i]) != CUDA_SUCCESS)
      bufferId = 0;
    uint64_t words[2] = {bufferId, exp->sizes[i]};
    const uint8_t* bytes = (const uint8_t*)words;
    for (size_t b = 0; b < sizeof(words); b++) pieceHash = (pieceHash ^ bytes[b]) * 0x100000001b3ull;
    if (i == 0) exp->id.serial = bufferId;
  }
  exp->id.hostHash = self->hostHash;
  exp->id.processNonce = self->nonce;
  exp->id.pid = self->pid;
  exp->id.dev = cfg->cudaDev;
  exp->id.base = (uint64_t)exp->regionBase;
  exp->id.size = exp->regionSize;
  exp->id.pieces = (uint32_t)exp->pieces;
  exp->id.pieceHash = pieceHash;
  return fcclSuccess;
}

/* A rank of this process on another GPU registered cuMem memory: give our device access to its mappings. */
static fcclResult_t grantAccess(const struct fcclTransportParams* cfg, const struct regRecord* rec) {
  CUmemAccessDesc access;
  memset(&access, 0, sizeof(access));
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = cfg->cudaDev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (CUdeviceptr p = (CUdeviceptr)rec->regionPtr; p < rec->regionPtr + rec->regionSize;) {
    CUdeviceptr base;
    size_t size;
    FCCLCHECK(cuMemMappingOf(p, &base, &size));
    CUCHECK(cuMemSetAccess(base, size, &access, 1));
    p = base + size;
  }
  return fcclSuccess;
}

static void freeRegistration(struct fcclRegistration* reg) {
  if (!reg) return;
  free(reg->peerBufs);
  free(reg->peerSizes);
  free(reg->keys);
  free(reg);
}

fcclResult_t fcclTransportReleaseRegistration(struct fcclTransport* t, struct fcclRegistration* reg) {
  fcclResult_t res = fcclSuccess;
  for (int p = 0; p < t->cfg.nranks; p++) {
    if (reg->keys[p].kind == 0) continue;
    fcclResult_t released = fcclMappingsRelease(t->mappings, &reg->keys[p]);
    if (res == fcclSuccess) res = released;
  }
  freeRegistration(reg);
  return res;
}

fcclResult_t fcclTransportRegisterBuffer(struct fcclTransport* t, void* buf, size_t size, int listed,
                                         struct fcclRegistration** handle) {
  const struct fcclTransportParams* cfg = &t->cfg;
  const int nranks = cfg->nranks, me = cfg->rank;
  fcclResult_t res = fcclSuccess;
  fcclResult_t local = fcclSuccess;
  struct localExport exp;
  memset(&exp, 0, sizeof(exp));
  struct fcclFdSocket sock = {.fd = -1};
  struct regRecord* records = calloc((size_t)nranks, sizeof(*records));
  struct fcclImportItem* items = calloc((size_t)nranks, sizeof(*items));
  struct fcclRegistration* reg = calloc(1, sizeof(*reg));
  struct pieceRecord* pieces = NULL;
  uint64_t* pieceSizes = NULL;
  int32_t* pieceFds = NULL;
  int previous = -1;
  if (reg) {
    reg->peerBufs = calloc((size_t)nranks, sizeof(void*));
    reg->peerSizes = calloc((size_t)nranks, sizeof(size_t));
    reg->keys = calloc((size_t)nranks, sizeof(struct fcclMappingKey));
  }
  if (!records || !items || !reg || !reg->peerBufs || !reg->peerSizes || !reg->keys)
    local = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
  /* Bad arguments are carried into the exchange like any local failure, so the peers fail at once too. */
  if (local == fcclSuccess && handle == NULL)
    local = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "fcclCommRegister: handle is NULL");
  if (local == fcclSuccess && (buf == NULL || size == 0))
    local = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "fcclCommRegister: buffer %p of %zu bytes", buf, size);
  if (local == fcclSuccess && (uintptr_t)buf > UINTPTR_MAX - size)
    local = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                       "fcclCommRegister: %zu bytes at %p run past the end of the address space", size, buf);
  if (local == fcclSuccess) local = fcclIpcSetDevice(cfg->cudaDev, &previous);
  if (local == fcclSuccess) local = analyseBuffer(cfg, buf, size, &exp);
  if (local == fcclSuccess && exp.kind == FCCL_MAPPING_CUMEM && t->fdMode != FCCL_FD_MODE_PIDFD)
    local = fcclFdSocketOpen(&sock);
  if (!records) {
    t->outOfStep = 1; /* nothing to take part in the exchange with: the peers time out */
    goto exit;
  }

  /* 1. Who registers what. */
  struct regRecord* mine = &records[me];
  mine->status = local;
  if (local == fcclSuccess) {
    mine->kind = exp.kind;
    mine->pieces = exp.pieces;
    mine->size = size;
    mine->offset = (uint64_t)((CUdeviceptr)(uintptr_t)buf - exp.regionBase);
    mine->regionSize = exp.regionSize;
    mine->regionPtr = (uint64_t)exp.regionBase;
    memcpy(mine->legacyHandle, &exp.legacyHandle, sizeof(mine->legacyHandle));
    memcpy(mine->cuMemId, &exp.id, sizeof(mine->cuMemId));
    memcpy(mine->sockName, sock.name, sizeof(mine->sockName));
  }
  FCCLCHECKGOTO(fcclTransportAllGather(t, records, sizeof(*records)), res, exit);
  int maxPieces = 0;
  for (int r = 0; r < nranks; r++) {
    if (records[r].status != fcclSuccess) {
      if (local == fcclSuccess)
        local = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "rank %d could not register its buffer (%s)", r,
                           fcclGetErrorString((fcclResult_t)records[r].status));
      continue;
    }
    if (records[r].kind == FCCL_MAPPING_CUMEM && records[r].pieces > maxPieces) maxPieces = records[r].pieces;
    if (records[r].pieces < 1 || records[r].pieces > MAX_PIECES) maxPieces = MAX_PIECES + 1;
  }
  if (maxPieces > MAX_PIECES) {
    /* Every rank sees the same records: every rank stops here. */
    res = local != fcclSuccess ? local
                               : FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "a rank describes its buffer with a "
                                            "piece count outside 1..%d", MAX_PIECES);
    goto exit;
  }

  /* 2. cuMem pieces: descriptor numbers and sizes. Every rank takes part when any rank has cuMem memory. */
  if (maxPieces > 0) {
    pieces = calloc((size_t)nranks * (size_t)maxPieces, sizeof(*pieces));
    pieceSizes = calloc((size_t)nranks * (size_t)maxPieces, sizeof(uint64_t));
    pieceFds = calloc((size_t)nranks * (size_t)maxPieces, sizeof(int32_t));
    if (!pieces || !pieceSizes || !pieceFds) {
      t->outOfStep = 1; /* the peers go on to the all-gather without us */
      res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
      goto exit;
    }
    if (local == fcclSuccess && exp.kind == FCCL_MAPPING_CUMEM)
      for (int i = 0; i < exp.pieces; i++)
        pieces[(size_t)me * maxPieces + i] = (struct pieceRecord){.fd = exp.fds[i], .size = exp.sizes[i]};
    FCCLCHECKGOTO(fcclTransportAllGather(t, pieces, (size_t)maxPieces * sizeof(*pieces)), res, exit);
    for (size_t i = 0; i < (size_t)nranks * (size_t)maxPieces; i++) {
      pieceSizes[i] = pieces[i].size;
      pieceFds[i] = pieces[i].fd;
    }
  }

  /* 3. Map what each peer registered. */
  for (int p = 0; p < nranks; p++) items[p].sockName = records[p].sockName;
  for (int p = 0; p < nranks && local == fcclSuccess; p++) {
    const struct regRecord* rec = &records[p];
    reg->peerSizes[p] = rec->size;
    if (p == me) {
      reg->peerBufs[p] = buf;
      continue;
    }
    if (rec->offset > rec->regionSize || rec->size > rec->regionSize - rec->offset) {
      local = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "rank %d registers bytes outside its allocation", p);
      break;
    }
    if (t->peers[p].sameProcess) {
      reg->peerBufs[p] = (void*)(uintptr_t)(rec->regionPtr + rec->offset);
      if (rec->kind == FCCL_MAPPING_CUMEM) local = grantAccess(cfg, rec);
      continue;
    }
    struct fcclImportItem* item = &items[p];
    item->active = 1;
    memset(&item->key, 0, sizeof(item->key));
    item->key.kind = (uint32_t)rec->kind;
    item->key.importDev = cfg->cudaDev;
    if (rec->kind == FCCL_MAPPING_LEGACY_IPC) {
      memcpy(item->key.id, rec->legacyHandle, sizeof(rec->legacyHandle));
    } else {
      memcpy(item->key.id, rec->cuMemId, sizeof(rec->cuMemId));
      item->pieces = rec->pieces;
      item->remoteFds = pieceFds + (size_t)p * maxPieces;
      item->pieceSizes = pieceSizes + (size_t)p * maxPieces;
      item->pid = t->peers[p].info.pid;
    }
    item->size = rec->regionSize;
  }
  res = fcclTransportImport(t, items, exp.fds, exp.kind == FCCL_MAPPING_CUMEM ? exp.pieces : 0, local, &sock);
  if (res != fcclSuccess) goto exit;
  for (int p = 0; p < nranks; p++) {
    if (!items[p].active) continue;
    reg->keys[p] = items[p].key;
    reg->peerBufs[p] = (char*)items[p].base + records[p].offset;
    items[p].held = 0;
  }
  reg->buf = buf;
  reg->size = size;
  uint64_t registrations = 0;
  if (listed) {
    reg->next = t->registrations;
    t->registrations = reg;
    registrations = __atomic_add_fetch(&t->nRegistrations, 1, __ATOMIC_RELAXED);
  } else {
    registrations = __atomic_add_fetch(&t->nGraphRegistrations, 1, __ATOMIC_RELAXED);
  }
  *handle = reg;
  reg = NULL;
  FCCL_INFO(FCCL_SUBSYS_IPC, "registered %p (%zu bytes, %s, %d allocation(s)) on %s: %" PRIu64 " %s", buf, size,
            exp.kind == FCCL_MAPPING_CUMEM ? "cuMem" : "legacy IPC", exp.pieces, cfg->name, registrations,
            listed ? "registrations" : "registrations held by graphs");

exit:
  if (res == fcclSuccess && local != fcclSuccess) res = local;
  if (res != fcclSuccess) {
    if (items) (void)fcclTransportReleaseItems(t, items);
    /* Every rank failed alike: meet once more, so that no peer still maps our buffer when we return and the
     * caller frees it. */
    (void)fcclTransportSettle(t);
  }
  if (previous >= 0) fcclIpcRestoreDevice(previous);
  fcclFdSocketClose(&sock);
  freeLocalExport(&exp);
  freeRegistration(reg);
  free(pieces);
  free(pieceSizes);
  free(pieceFds);
  free(items);
  free(records);
  return res;
}

fcclResult_t fcclTransportRegister(struct fcclTransport* t, void* buf, size_t size,
                                   struct fcclRegistration** handle) {
  return fcclTransportRegisterBuffer(t, buf, size, 1, handle);
}

fcclResult_t fcclTransportDeregister(struct fcclTransport* t, struct fcclRegistration* handle) {
  /* Compared by address only: an unknown or released handle is never dereferenced. */
  struct fcclRegistration** link = &t->registrations;
  while (*link && *link != handle) link = &(*link)->next;
  fcclResult_t local = fcclSuccess;
  if (!*link)
    local = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                       "fcclCommDeregister: %p is not a live registration of communicator %s (unknown, or "
                       "deregistered already)", (void*)handle, t->cfg.name);
  int previous = -1;
  if (local == fcclSuccess) local = fcclIpcSetDevice(t->cfg.cudaDev, &previous);
  /* Every rank learns whether every rank's handle was valid: all release, or none does. */
  fcclResult_t res = fcclTransportAgree(t, local, "to deregister (bad handle)");
  if (res == fcclSuccess) {
    struct fcclRegistration* reg = *link;
    *link = reg->next;
    __atomic_sub_fetch(&t->nRegistrations, 1, __ATOMIC_RELAXED);
    res = fcclTransportReleaseRegistration(t, reg);
    /* Peers have closed their mappings of our buffer once this returns: the caller may free it. */
    fcclResult_t barrier = fcclTransportBarrier(t);
    if (res == fcclSuccess) res = barrier;
  }
  if (previous >= 0) fcclIpcRestoreDevice(previous);
  return res;
}

fcclResult_t fcclTransportReleaseRegistrations(struct fcclTransport* t) {
  fcclResult_t res = fcclSuccess;
  if (t->registrations)
    FCCL_INFO(FCCL_SUBSYS_IPC, "communicator %s destroyed with %" PRIu64 " registrations: releasing them",
              t->cfg.name, t->nRegistrations);
  while (t->registrations) {
    struct fcclRegistration* reg = t->registrations;
    t->registrations = reg->next;
    fcclResult_t released = fcclTransportReleaseRegistration(t, reg);
    if (res == fcclSuccess) res = released;
  }
  __atomic_store_n(&t->nRegistrations, 0, __ATOMIC_RELAXED);
  return res;
}

int fcclTransportLookup(struct fcclTransport* t, const void* ptr, size_t bytes, void* peerPtrs[]) {
  if (!t || !ptr) return 0;
  const int nranks = t->cfg.nranks;
  uintptr_t address = (uintptr_t)ptr;
  for (struct fcclRegistration* reg = t->registrations; reg; reg = reg->next) {
    uintptr_t start = (uintptr_t)reg->buf;
    if (address < start || bytes > reg->size || address - start > reg->size - bytes) continue;
    size_t offset = address - start;
    int fits = 1;
    for (int r = 0; r < nranks && fits; r++)
      fits = offset <= reg->peerSizes[r] && bytes <= reg->peerSizes[r] - offset;
    if (!fits) continue;
    for (int r = 0; r < nranks; r++) peerPtrs[r] = (char*)reg->peerBufs[r] + offset;
    peerPtrs[t->cfg.rank] = (void*)ptr;
    return 1;
  }
  return 0;
}
