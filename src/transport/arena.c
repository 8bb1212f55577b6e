/* SPDX-License-Identifier: Apache-2.0 */
/* Per-process arenas of shared-buffer chunks, carved into communicator slots, and this process's hold on the arenas
 * of its peers (see arena.h). */
#include "arena.h"

#include "check.h"
#include "debug.h"
#include "mappings.h"
#include "param.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_IPC

#define ARENA_PAGE 4096u

struct arenaChunk {
  struct fcclIpcAlloc alloc;
  uint32_t used;        /* bit s: slot index*S + s is held */
  uint32_t quarantined; /* bit s: held by nobody but not to be handed out again */
  int borrowers;
};

struct fcclArena {
  struct fcclArenaOps ops;
  int dev;
  size_t slotBytes;
  size_t slotStride;
  size_t headerBytes;
  int slotsPerChunk;
  int maxSlots; /* a multiple of slotsPerChunk, at most FCCL_ARENA_MAX_SLOTS */
  pthread_mutex_t lock;
  struct arenaChunk* chunks[FCCL_ARENA_MAX_SLOTS]; /* indexed by chunk number */
  int liveSlots;
  int borrowed;
  uint64_t chunksCreated;
  uint64_t chunksFreed;
  struct fcclArena* next; /* process list */
};

static size_t roundUp(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

fcclResult_t fcclArenaCreate(const struct fcclArenaOps* ops, int dev, size_t slotBytes, int slotsPerChunk,
                             struct fcclArena** arena) {
  if (!ops || !ops->chunkCreate || !ops->chunkFree || slotBytes == 0 || slotsPerChunk < 1 ||
      slotsPerChunk > FCCL_ARENA_MAX_SLOTS_PER_CHUNK)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                      "arena for device %d: slot size %zu and %d slots per chunk (1..%d) are not usable", dev,
                      slotBytes, slotsPerChunk, FCCL_ARENA_MAX_SLOTS_PER_CHUNK);
  struct fcclArena* created = calloc(1, sizeof(*created));
  if (!created) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory for an arena");
  created->ops = *ops;
  created->dev = dev;
  created->slotBytes = slotBytes;
  created->slotStride = roundUp(slotBytes, ARENA_PAGE);
  created->slotsPerChunk = slotsPerChunk;
  created->headerBytes = roundUp((size_t)slotsPerChunk * FCCL_ARENA_CHECK_RANKS * sizeof(uint64_t), ARENA_PAGE);
  created->maxSlots = FCCL_ARENA_MAX_SLOTS / slotsPerChunk * slotsPerChunk;
  pthread_mutex_init(&created->lock, NULL);
  *arena = created;
  return fcclSuccess;
}

static fcclResult_t freeAllChunksLocked(struct fcclArena* arena) {
  fcclResult_t res = fcclSuccess;
  for (int c = 0; c < FCCL_ARENA_MAX_SLOTS; c++) {
    struct arenaChunk* chunk = arena->chunks[c];
    if (!chunk) continue;
    fcclResult_t freed = arena->ops.chunkFree(arena->ops.ctx, &chunk->alloc);
    if (res == fcclSuccess) res = freed;
    free(chunk);
    arena->chunks[c] = NULL;
    arena->chunksFreed++;
  }
  return res;
}

fcclResult_t fcclArenaDestroy(struct fcclArena* arena) {
  if (!arena) return fcclSuccess;
  pthread_mutex_lock(&arena->lock);
  int live = arena->liveSlots + arena->borrowed;
  fcclResult_t res = freeAllChunksLocked(arena);
  pthread_mutex_unlock(&arena->lock);
  pthread_mutex_destroy(&arena->lock);
  free(arena);
  if (live)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC, "arena destroyed with %d slots or loans still held", live);
  return res;
}

void fcclArenaFreeBitmap(struct fcclArena* arena, uint64_t bitmap[FCCL_ARENA_BITMAP_WORDS]) {
  memset(bitmap, 0, FCCL_ARENA_BITMAP_WORDS * sizeof(uint64_t));
  pthread_mutex_lock(&arena->lock);
  for (int slot = 0; slot < arena->maxSlots; slot++) {
    struct arenaChunk* chunk = arena->chunks[slot / arena->slotsPerChunk];
    uint32_t bit = 1u << (slot % arena->slotsPerChunk);
    if (!chunk || !((chunk->used | chunk->quarantined) & bit)) bitmap[slot / 64] |= 1ull << (slot % 64);
  }
  pthread_mutex_unlock(&arena->lock);
}

int fcclArenaChooseSlot(const uint64_t* bitmaps, int nranks) {
  for (int w = 0; w < FCCL_ARENA_BITMAP_WORDS; w++) {
    uint64_t common = ~0ull;
    for (int r = 0; r < nranks; r++) common &= bitmaps[(size_t)r * FCCL_ARENA_BITMAP_WORDS + w];
    if (common) return w * 64 + __builtin_ctzll(common);
  }
  return -1;
}

fcclResult_t fcclArenaClaim(struct fcclArena* arena, int slot, int* claimed, struct fcclIpcAlloc* chunkOut) {
  fcclResult_t res = fcclSuccess;
  *claimed = 0;
  if (slot < 0 || slot >= arena->maxSlots)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC,
                      "no communicator slot is free on every rank: device %d already serves %d communicators "
                      "(slot %d asked for)", arena->dev, arena->maxSlots, slot);
  int index = slot / arena->slotsPerChunk;
  uint32_t bit = 1u << (slot % arena->slotsPerChunk);
  pthread_mutex_lock(&arena->lock);
  struct arenaChunk* chunk = arena->chunks[index];
  if (chunk && ((chunk->used | chunk->quarantined) & bit)) goto unlock; /* taken meanwhile */
  if (!chunk) {
    chunk = calloc(1, sizeof(*chunk));
    if (!chunk) {
      res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory for an arena chunk");
      goto unlock;
    }
    size_t bytes = arena->headerBytes + (size_t)arena->slotsPerChunk * arena->slotStride;
    res = arena->ops.chunkCreate(arena->ops.ctx, arena->dev, bytes, &chunk->alloc);
    if (res != fcclSuccess) {
      free(chunk);
      goto unlock;
    }
    arena->chunks[index] = chunk;
    arena->chunksCreated++;
  }
  chunk->used |= bit;
  arena->liveSlots++;
  *claimed = 1;
  *chunkOut = chunk->alloc;
unlock:
  pthread_mutex_unlock(&arena->lock);
  return res;
}

static int arenaIdleLocked(const struct fcclArena* arena) { return arena->liveSlots == 0 && arena->borrowed == 0; }

fcclResult_t fcclArenaRelease(struct fcclArena* arena, int slot, int quarantine) {
  fcclResult_t res = fcclSuccess;
  if (slot < 0 || slot >= arena->maxSlots)
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC, "release of slot %d, outside the arena", slot);
  uint32_t bit = 1u << (slot % arena->slotsPerChunk);
  pthread_mutex_lock(&arena->lock);
  struct arenaChunk* chunk = arena->chunks[slot / arena->slotsPerChunk];
  if (!chunk || !(chunk->used & bit)) {
    res = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC, "release of slot %d of device %d, which is not held", slot,
                     arena->dev);
    goto unlock;
  }
  chunk->used &= ~bit;
  if (quarantine) chunk->quarantined |= bit;
  arena->liveSlots--;
  if (arenaIdleLocked(arena)) res = freeAllChunksLocked(arena);
unlock:
  pthread_mutex_unlock(&arena->lock);
  return res;
}

fcclResult_t fcclArenaBorrow(struct fcclArena* arena, int slot, uint64_t serial, void** chunkBase) {
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&arena->lock);
  struct arenaChunk* chunk =
      slot >= 0 && slot < arena->maxSlots ? arena->chunks[slot / arena->slotsPerChunk] : NULL;
  if (!chunk || chunk->alloc.serial != serial) {
    res = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC,
                     "device %d has no chunk %" PRIu64 " for slot %d that a rank of this process announced",
                     arena->dev, serial, slot);
  } else {
    chunk->borrowers++;
    arena->borrowed++;
    *chunkBase = chunk->alloc.ptr;
  }
  pthread_mutex_unlock(&arena->lock);
  return res;
}

fcclResult_t fcclArenaUnborrow(struct fcclArena* arena, int slot) {
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&arena->lock);
  struct arenaChunk* chunk =
      slot >= 0 && slot < arena->maxSlots ? arena->chunks[slot / arena->slotsPerChunk] : NULL;
  if (!chunk || chunk->borrowers == 0) {
    res = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC, "device %d: return of slot %d's chunk, which is not lent",
                     arena->dev, slot);
  } else {
    chunk->borrowers--;
    arena->borrowed--;
    if (arenaIdleLocked(arena)) res = freeAllChunksLocked(arena);
  }
  pthread_mutex_unlock(&arena->lock);
  return res;
}

size_t fcclArenaSlotOffset(const struct fcclArena* arena, int slot) {
  return arena->headerBytes + (size_t)(slot % arena->slotsPerChunk) * arena->slotStride;
}

size_t fcclArenaCheckOffset(const struct fcclArena* arena, int slot, int writer) {
  return ((size_t)(slot % arena->slotsPerChunk) * FCCL_ARENA_CHECK_RANKS + (size_t)writer) * sizeof(uint64_t);
}

size_t fcclArenaSlotBytes(const struct fcclArena* arena) { return arena->slotBytes; }
size_t fcclArenaSlotStride(const struct fcclArena* arena) { return arena->slotStride; }
size_t fcclArenaChunkBytes(const struct fcclArena* arena) {
  return arena->headerBytes + (size_t)arena->slotsPerChunk * arena->slotStride;
}
int fcclArenaSlotsPerChunk(const struct fcclArena* arena) { return arena->slotsPerChunk; }

void fcclArenaGetStats(struct fcclArena* arena, struct fcclArenaStats* stats) {
  memset(stats, 0, sizeof(*stats));
  pthread_mutex_lock(&arena->lock);
  stats->liveSlots = arena->liveSlots;
  stats->borrowed = arena->borrowed;
  for (int c = 0; c < FCCL_ARENA_MAX_SLOTS; c++) {
    if (!arena->chunks[c]) continue;
    stats->chunks++;
    stats->bytes += arena->chunks[c]->alloc.size;
    stats->quarantinedSlots += __builtin_popcount(arena->chunks[c]->quarantined);
  }
  stats->chunksCreated = arena->chunksCreated;
  stats->chunksFreed = arena->chunksFreed;
  pthread_mutex_unlock(&arena->lock);
}

/* ---- the process's arenas, with CUDA chunks ---- */

static fcclResult_t cudaChunkCreate(void* ctx, int dev, size_t bytes, struct fcclIpcAlloc* alloc) {
  (void)ctx;
  fcclResult_t res = fcclSuccess;
  int cuMem = 0;
  FCCLCHECK(fcclIpcCuMemSupported(dev, &cuMem));
  FCCLCHECK(fcclIpcAllocCreate(dev, bytes, cuMem ? FCCL_MAPPING_CUMEM : FCCL_MAPPING_LEGACY_IPC, alloc));
  /* The report's root cause: zeroing queued behind other work lands after a fast peer's first flag and erases it.
   * So the zeroes are written on a stream of our own and have landed before the handle exists. */
  int previous;
  cudaStream_t stream = NULL;
  FCCLCHECKGOTO(fcclIpcSetDevice(dev, &previous), res, freeAlloc);
  CUDACHECKGOTO(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), res, restore);
  CUDACHECKGOTO(cudaMemsetAsync(alloc->ptr, 0, alloc->size, stream), res, destroyStream);
  CUDACHECKGOTO(cudaStreamSynchronize(stream), res, destroyStream);
  CUDACHECKGOTO(cudaStreamDestroy(stream), res, restore);
  fcclIpcRestoreDevice(previous);
  FCCLCHECKGOTO(fcclIpcAllocExport(alloc), res, freeAlloc);
  return fcclSuccess;
destroyStream:
  CUDACHECKIGNORE(cudaStreamDestroy(stream));
restore:
  fcclIpcRestoreDevice(previous);
freeAlloc:
  (void)fcclIpcAllocFree(alloc);
  return res;
}

static fcclResult_t cudaChunkFree(void* ctx, struct fcclIpcAlloc* alloc) {
  (void)ctx;
  return fcclIpcAllocFree(alloc);
}

static pthread_mutex_t processArenasLock = PTHREAD_MUTEX_INITIALIZER;
static struct fcclArena* processArenas;

fcclResult_t fcclArenaProcess(int dev, size_t slotBytes, struct fcclArena** arena) {
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&processArenasLock);
  struct fcclArena* found = processArenas;
  while (found && !(found->dev == dev && found->slotBytes == slotBytes)) found = found->next;
  if (!found) {
    int64_t slots = fcclParamInt(FCCL_PARAM_ARENA_SLOTS);
    if (slots < 1 || slots > FCCL_ARENA_MAX_SLOTS_PER_CHUNK) {
      res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "FCCL_ARENA_SLOTS=%" PRId64 " is outside 1..%d", slots,
                       FCCL_ARENA_MAX_SLOTS_PER_CHUNK);
      goto unlock;
    }
    struct fcclArenaOps ops = {.ctx = NULL, .chunkCreate = cudaChunkCreate, .chunkFree = cudaChunkFree};
    FCCLCHECKGOTO(fcclArenaCreate(&ops, dev, slotBytes, (int)slots, &found), res, unlock);
    found->next = processArenas;
    processArenas = found;
  }
  *arena = found;
unlock:
  pthread_mutex_unlock(&processArenasLock);
  return res;
}

void fcclArenaProcessStats(uint64_t* chunks, uint64_t* bytes) {
  *chunks = 0;
  *bytes = 0;
  pthread_mutex_lock(&processArenasLock);
  for (struct fcclArena* arena = processArenas; arena; arena = arena->next) {
    struct fcclArenaStats stats;
    fcclArenaGetStats(arena, &stats);
    *chunks += (uint64_t)stats.chunks;
    *bytes += stats.bytes;
  }
  pthread_mutex_unlock(&processArenasLock);
}

/* ---- the arenas of other processes, as this process maps them ---- */

struct fcclPeerArena {
  struct fcclPeerArenaId id;
  struct fcclMappings* mappings;
  int users; /* communicators of this process that use the arena */
  int nChunks, capacity;
  struct fcclMappingKey* chunks; /* chunk mappings kept, one reference each */
  struct fcclPeerArena* next;
};

/* One lock for the list and every entry: taken for a few comparisons per communicator init and teardown. Held
 * while a mapping reference is dropped (the table's own lock comes second, and the table never calls back here). */
static pthread_mutex_t peerArenasLock = PTHREAD_MUTEX_INITIALIZER;
static struct fcclPeerArena* peerArenas;

fcclResult_t fcclPeerArenaUse(struct fcclMappings* mappings, const struct fcclPeerArenaId* id,
                              struct fcclPeerArena** arena) {
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&peerArenasLock);
  struct fcclPeerArena* found = peerArenas;
  while (found && memcmp(&found->id, id, sizeof(*id)) != 0) found = found->next;
  if (!found) {
    found = calloc(1, sizeof(*found));
    if (!found) {
      res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory for a peer's arena");
      goto unlock;
    }
    found->id = *id;
    found->mappings = mappings;
    found->next = peerArenas;
    peerArenas = found;
  } else if (found->mappings != mappings) {
    res = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC, "the arena of pid %d device %d is mapped through two tables",
                     id->pid, id->dev);
    goto unlock;
  }
  found->users++;
  *arena = found;
unlock:
  pthread_mutex_unlock(&peerArenasLock);
  return res;
}

fcclResult_t fcclPeerArenaKeep(struct fcclPeerArena* arena, const struct fcclMappingKey* chunk) {
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&peerArenasLock);
  for (int i = 0; i < arena->nChunks; i++)
    if (memcmp(&arena->chunks[i], chunk, sizeof(*chunk)) == 0) {
      res = fcclMappingsRelease(arena->mappings, chunk); /* held already: the caller's reference is not needed */
      goto unlock;
    }
  if (arena->nChunks == arena->capacity) {
    const int capacity = arena->capacity ? 2 * arena->capacity : 4;
    struct fcclMappingKey* grown = realloc(arena->chunks, (size_t)capacity * sizeof(*grown));
    if (!grown) {
      (void)fcclMappingsRelease(arena->mappings, chunk);
      res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory for a peer's arena");
      goto unlock;
    }
    arena->chunks = grown;
    arena->capacity = capacity;
  }
  arena->chunks[arena->nChunks++] = *chunk;
unlock:
  pthread_mutex_unlock(&peerArenasLock);
  return res;
}

fcclResult_t fcclPeerArenaDone(struct fcclPeerArena* arena) {
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&peerArenasLock);
  if (--arena->users > 0) goto unlock;
  for (int i = 0; i < arena->nChunks; i++) {
    fcclResult_t released = fcclMappingsRelease(arena->mappings, &arena->chunks[i]);
    if (res == fcclSuccess) res = released;
  }
  struct fcclPeerArena** link = &peerArenas;
  while (*link != arena) link = &(*link)->next;
  *link = arena->next;
  free(arena->chunks);
  free(arena);
unlock:
  pthread_mutex_unlock(&peerArenasLock);
  return res;
}

void fcclPeerArenaCounts(int* arenas, int* chunks) {
  *arenas = 0;
  *chunks = 0;
  pthread_mutex_lock(&peerArenasLock);
  for (struct fcclPeerArena* arena = peerArenas; arena; arena = arena->next) {
    (*arenas)++;
    *chunks += arena->nChunks;
  }
  pthread_mutex_unlock(&peerArenasLock);
}
