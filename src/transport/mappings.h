/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The process's table of peer-memory mappings.
 *
 * Every mapping of another process's device memory goes through one table per process, keyed by the identity
 * of the peer allocation (not by the pointer it was mapped at): for legacy CUDA IPC the 64 handle bytes of the
 * allocation's base, for cuMem the exporter's identity (host, process, device) and an allocation id the exporter
 * chose. Each entry carries a reference count: the first user opens the mapping, later users (a second
 * communicator over the same ranks, a second registration of the same buffer) take another reference, and the
 * last release closes it. A pointer inside an allocation travels as (key of the allocation, offset).
 *
 * The map and unmap operations are injected (struct fcclMappingsOps) so that the bookkeeping can be tested
 * without a GPU; the process-wide instance (fcclMappingsProcess, src/transport/ipc.c) uses the CUDA ones.
 * Thread safety: every function may be called from any thread; one lock serialises them, opens and closes
 * included (so a mapping is never opened twice, and a close never races a retain of the same key).
 */
#ifndef FCCL_TRANSPORT_MAPPINGS_H_
#define FCCL_TRANSPORT_MAPPINGS_H_

#include "fccl.h"

#include <stddef.h>
#include <stdint.h>

#define FCCL_MAPPING_ID_BYTES 64

typedef enum {
  FCCL_MAPPING_LEGACY_IPC = 1, /* cudaIpcGetMemHandle / cudaIpcOpenMemHandle */
  FCCL_MAPPING_CUMEM = 2       /* cuMemExportToShareableHandle (POSIX fd) / cuMemImportFromShareableHandle + cuMemMap */
} fcclMappingKind_t;

/* The identity of one peer allocation as mapped for one device of this process. Compared bytewise: zero it
 * (memset) before filling it in. */
struct fcclMappingKey {
  uint32_t kind;                  /* fcclMappingKind_t */
  int32_t importDev;              /* the CUDA device of this process the mapping is made for */
  uint8_t id[FCCL_MAPPING_ID_BYTES]; /* legacy: cudaIpcMemHandle_t of the allocation base; cuMem: struct fcclCuMemId */
};

/* A cuMem allocation (or a run of allocations mapped back to back) as its exporter names it. */
struct fcclCuMemId {
  uint64_t hostHash;     /* host of the exporter */
  uint64_t processNonce; /* random per exporting process: a reused pid never aliases an old mapping */
  int32_t pid;           /* exporter's process id */
  int32_t dev;           /* exporter's CUDA device */
  uint64_t serial;       /* fccl's own chunks: a per-process counter; user memory: the first piece's buffer id */
  uint64_t base;         /* exporter's virtual address of the region */
  uint64_t size;         /* bytes of the region */
  uint32_t pieces;       /* physical allocations the region is made of */
  uint32_t reserved;
  uint64_t pieceHash;    /* hash of every piece's (buffer id, size): two regions over other pieces never alias */
};

/* Map and unmap, as the table calls them (with its lock held, so they must not call back into it). */
struct fcclMappingsOps {
  void* ctx;
  /* Maps the allocation named by key (size bytes) into this process for key->importDev. arg is what the caller
   * passed to fcclMappingsAcquire (for instance the file descriptors to import). On success *base is the local
   * address and *opaque anything close needs later. */
  fcclResult_t (*open)(void* ctx, const struct fcclMappingKey* key, size_t size, const void* arg, void** base,
                       void** opaque);
  /* Unmaps what open returned. Called exactly once per successful open. */
  fcclResult_t (*close)(void* ctx, const struct fcclMappingKey* key, size_t size, void* base, void* opaque);
};

struct fcclMappings;

struct fcclMappingsStats {
  uint64_t openMappings; /* entries open now */
  uint64_t references;   /* sum of their reference counts */
  uint64_t bytesMapped;  /* sum of their sizes */
  uint64_t totalOpens;   /* opens since the table was created */
  uint64_t totalCloses;  /* closes since the table was created */
};

/* A table with the given operations (copied). */
fcclResult_t fcclMappingsCreate(const struct fcclMappingsOps* ops, struct fcclMappings** mappings);

/* Closes whatever is still open (each one warned about: it is a leak) and frees the table.
 * fcclInvalidUsage when entries were left, after closing them all. */
fcclResult_t fcclMappingsDestroy(struct fcclMappings* mappings);

/* The process-wide table with the CUDA operations (legacy IPC and cuMem), created on first use. */
fcclResult_t fcclMappingsProcess(struct fcclMappings** mappings);

/* Takes a reference on key's mapping when it is open already and returns its local base in *base;
 * sets *found to 0 and takes nothing when it is not. Never opens. A key that is open with another size is
 * fcclInvalidArgument (as for fcclMappingsAcquire), and takes nothing. */
fcclResult_t fcclMappingsRetain(struct fcclMappings* mappings, const struct fcclMappingKey* key, size_t size,
                                void** base, int* found);

/* Takes a reference on key's mapping, opening it with ops->open(arg) when it is not open; *base is the local
 * address of the allocation's first byte. A key that is open with another size is fcclInvalidArgument (corrupt
 * input: one identity, two sizes). A failed open leaves nothing behind. */
fcclResult_t fcclMappingsAcquire(struct fcclMappings* mappings, const struct fcclMappingKey* key, size_t size,
                                 const void* arg, void** base);

/* Drops one reference on key's mapping; the last one closes it. A key that is not open is
 * fcclInvalidArgument. The reference is dropped even when the close fails (its error is returned). */
fcclResult_t fcclMappingsRelease(struct fcclMappings* mappings, const struct fcclMappingKey* key);

/* The local address of [offset, offset + bytes) of key's open mapping, with the bounds checked
 * (fcclInvalidArgument outside, or when key is not open). Takes no reference. */
fcclResult_t fcclMappingsPointer(struct fcclMappings* mappings, const struct fcclMappingKey* key, size_t offset,
                                 size_t bytes, void** ptr);

/* The reference count of key's mapping (0: not open). */
uint64_t fcclMappingsRefs(struct fcclMappings* mappings, const struct fcclMappingKey* key);

void fcclMappingsGetStats(struct fcclMappings* mappings, struct fcclMappingsStats* stats);

/* "cumem pid 123 dev 1 serial 7" / "legacy 3f1a..": the key in words, for log lines and errors. */
const char* fcclMappingKeyDescribe(const struct fcclMappingKey* key, char* text, size_t textSize);

#endif /* FCCL_TRANSPORT_MAPPINGS_H_ */
