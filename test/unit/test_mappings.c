/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The table of peer mappings and the shared-buffer arena without a GPU: map/unmap and chunk allocation are
 * injected (fake operations that count what they do), so reference counts, keys, offsets, concurrent users,
 * statistics, slot agreement, the importer's hold on a peer's arena and re-initialisation (the next communicator
 * created while the previous one lives) run in CI. A communicator with a fake
 * exchange covers the collective bookkeeping of registration and teardown that needs no device.
 */
#include "arena.h"
#include "check.h"
#include "comm.h"
#include "fccl.h"
#include "mappings.h"
#include "test.h"
#include "transport_internal.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- fake map and unmap operations ---- */

#define FAKE_MAX_OPEN 4096

struct fakeOps {
  pthread_mutex_t lock;
  int opens, closes;
  int failNextOpen;
  int doubleOpen;                            /* a key opened while already open: the table's job is to prevent it */
  struct fcclMappingKey open[FAKE_MAX_OPEN]; /* keys open now (kind 0: free entry) */
};

static fcclResult_t fakeOpen(void* ctx, const struct fcclMappingKey* key, size_t size, const void* arg, void** base,
                             void** opaque) {
  struct fakeOps* fake = ctx;
  (void)arg;
  pthread_mutex_lock(&fake->lock);
  fcclResult_t res = fcclSuccess;
  if (fake->failNextOpen) {
    fake->failNextOpen = 0;
    res = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_IPC, "fake open failure");
  } else {
    int freeSlot = -1;
    for (int i = 0; i < FAKE_MAX_OPEN; i++) {
      if (fake->open[i].kind == 0 && freeSlot < 0) freeSlot = i;
      if (fake->open[i].kind != 0 && memcmp(&fake->open[i], key, sizeof(*key)) == 0) fake->doubleOpen++;
    }
    if (freeSlot >= 0) fake->open[freeSlot] = *key;
    (void)size;
    *base = malloc(64); /* a unique address stands in for the mapping (the size is not touched) */
    *opaque = (void*)(uintptr_t)(freeSlot + 1);
    fake->opens++;
  }
  pthread_mutex_unlock(&fake->lock);
  return res;
}

static fcclResult_t fakeClose(void* ctx, const struct fcclMappingKey* key, size_t size, void* base, void* opaque) {
  struct fakeOps* fake = ctx;
  (void)key;
  (void)size;
  pthread_mutex_lock(&fake->lock);
  int slot = (int)(uintptr_t)opaque - 1;
  if (slot >= 0) memset(&fake->open[slot], 0, sizeof(fake->open[slot]));
  free(base);
  fake->closes++;
  pthread_mutex_unlock(&fake->lock);
  return fcclSuccess;
}

static struct fcclMappings* newMappings(struct fakeOps* fake) {
  memset(fake, 0, sizeof(*fake));
  pthread_mutex_init(&fake->lock, NULL);
  struct fcclMappingsOps ops = {.ctx = fake, .open = fakeOpen, .close = fakeClose};
  struct fcclMappings* mappings = NULL;
  EXPECT_EQ_INT(fcclMappingsCreate(&ops, &mappings), fcclSuccess);
  return mappings;
}

static void legacyKey(struct fcclMappingKey* key, int seed, int importDev) {
  memset(key, 0, sizeof(*key));
  key->kind = FCCL_MAPPING_LEGACY_IPC;
  key->importDev = importDev;
  for (int i = 0; i < FCCL_MAPPING_ID_BYTES; i++) key->id[i] = (uint8_t)(seed * 31 + i);
}

static void cuMemKey(struct fcclMappingKey* key, int pid, uint64_t serial, int importDev) {
  memset(key, 0, sizeof(*key));
  key->kind = FCCL_MAPPING_CUMEM;
  key->importDev = importDev;
  struct fcclCuMemId id;
  memset(&id, 0, sizeof(id));
  id.hostHash = 0x1234;
  id.processNonce = 0xabcdef;
  id.pid = pid;
  id.dev = 1;
  id.serial = serial;
  id.size = 1 << 20;
  id.pieces = 1;
  memcpy(key->id, &id, sizeof(id));
}

static void testRefcounts(void) {
  struct fakeOps fake;
  struct fcclMappings* mappings = newMappings(&fake);
  struct fcclMappingKey a, b;
  legacyKey(&a, 1, 0);
  legacyKey(&b, 2, 0);
  void *baseA = NULL, *baseA2 = NULL, *baseB = NULL;
  int found = 1;

  EXPECT_EQ_INT(fcclMappingsRetain(mappings, &a, 4096, &baseA, &found), fcclSuccess);
  EXPECT_EQ_INT(found, 0); /* retain never opens */
  EXPECT_EQ_INT(fake.opens, 0);

  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &a, 4096, NULL, &baseA), fcclSuccess);
  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &a, 4096, NULL, &baseA2), fcclSuccess);
  EXPECT(baseA != NULL && baseA == baseA2);
  EXPECT_EQ_INT(fake.opens, 1); /* the second user took a reference, no second open */
  EXPECT_EQ_INT(fcclMappingsRefs(mappings, &a), 2);
  EXPECT_EQ_INT(fcclMappingsRetain(mappings, &a, 4096, &baseA2, &found), fcclSuccess);
  EXPECT_EQ_INT(found, 1);
  EXPECT_EQ_INT(fcclMappingsRefs(mappings, &a), 3);
  /* Retain checks the size like acquire: one identity described with two sizes takes nothing. */
  found = 1;
  EXPECT_EQ_INT(fcclMappingsRetain(mappings, &a, 8192, &baseA2, &found), fcclInvalidArgument);
  EXPECT_EQ_INT(found, 0);
  EXPECT_EQ_INT(fcclMappingsRefs(mappings, &a), 3);

  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &b, 8192, NULL, &baseB), fcclSuccess);
  EXPECT(baseB != baseA);
  struct fcclMappingsStats stats;
  fcclMappingsGetStats(mappings, &stats);
  EXPECT_EQ_INT(stats.openMappings, 2);
  EXPECT_EQ_INT(stats.references, 4);
  EXPECT_EQ_INT(stats.bytesMapped, 4096 + 8192);
  EXPECT_EQ_INT(stats.totalOpens, 2);
  EXPECT_EQ_INT(stats.totalCloses, 0);

  /* Same identity described with another size: corrupt input, refused, the mapping untouched. */
  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &a, 999, NULL, &baseA2), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "4096");
  EXPECT_EQ_INT(fcclMappingsRefs(mappings, &a), 3);

  EXPECT_EQ_INT(fcclMappingsRelease(mappings, &a), fcclSuccess);
  EXPECT_EQ_INT(fcclMappingsRelease(mappings, &a), fcclSuccess);
  EXPECT_EQ_INT(fake.closes, 0); /* still one user */
  EXPECT_EQ_INT(fcclMappingsRelease(mappings, &a), fcclSuccess);
  EXPECT_EQ_INT(fake.closes, 1); /* closed at the last release */
  EXPECT_EQ_INT(fcclMappingsRefs(mappings, &a), 0);
  /* Releasing what is not open is an error, never a crash or a negative count. */
  EXPECT_EQ_INT(fcclMappingsRelease(mappings, &a), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not mapped");

  /* Re-opening after the last close opens again. */
  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &a, 4096, NULL, &baseA), fcclSuccess);
  EXPECT_EQ_INT(fake.opens, 3);
  EXPECT_EQ_INT(fcclMappingsRelease(mappings, &a), fcclSuccess);
  EXPECT_EQ_INT(fcclMappingsRelease(mappings, &b), fcclSuccess);
  fcclMappingsGetStats(mappings, &stats);
  EXPECT_EQ_INT(stats.openMappings, 0);
  EXPECT_EQ_INT(stats.references, 0);
  EXPECT_EQ_INT(stats.bytesMapped, 0);
  EXPECT_EQ_INT(stats.totalOpens, stats.totalCloses);
  EXPECT_EQ_INT(fake.doubleOpen, 0);
  EXPECT_EQ_INT(fcclMappingsDestroy(mappings), fcclSuccess);
}

static void testKeys(void) {
  struct fakeOps fake;
  struct fcclMappings* mappings = newMappings(&fake);
  struct fcclMappingKey keys[6];
  legacyKey(&keys[0], 7, 0);
  legacyKey(&keys[1], 7, 1); /* same allocation mapped for another device of this process: its own mapping */
  cuMemKey(&keys[2], 100, 1, 0);
  cuMemKey(&keys[3], 100, 2, 0); /* another allocation of the same exporter */
  cuMemKey(&keys[4], 101, 1, 0); /* same serial, another process */
  memcpy(&keys[5], &keys[2], sizeof(keys[5]));
  keys[5].kind = FCCL_MAPPING_LEGACY_IPC; /* same bytes, other kind */
  void* bases[6];
  for (int i = 0; i < 6; i++)
    EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &keys[i], 4096, NULL, &bases[i]), fcclSuccess);
  EXPECT_EQ_INT(fake.opens, 6);
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < i; j++) EXPECT_MSG(bases[i] != bases[j], "keys %d and %d share a mapping", i, j);
  char text[160];
  EXPECT_STR_CONTAINS(fcclMappingKeyDescribe(&keys[2], text, sizeof(text)), "pid 100");
  EXPECT_STR_CONTAINS(fcclMappingKeyDescribe(&keys[1], text, sizeof(text)), "on dev 1");
  for (int i = 0; i < 6; i++) EXPECT_EQ_INT(fcclMappingsRelease(mappings, &keys[i]), fcclSuccess);
  EXPECT_EQ_INT(fake.closes, 6);
  EXPECT_EQ_INT(fcclMappingsDestroy(mappings), fcclSuccess);
}

static void testOffsets(void) {
  struct fakeOps fake;
  struct fcclMappings* mappings = newMappings(&fake);
  struct fcclMappingKey key;
  cuMemKey(&key, 55, 9, 0);
  void* base = NULL;
  void* ptr = NULL;
  EXPECT_EQ_INT(fcclMappingsPointer(mappings, &key, 0, 1, &ptr), fcclInvalidArgument); /* not open */
  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &key, 1 << 20, NULL, &base), fcclSuccess);
  /* A pointer inside the allocation travels as (key of the allocation, offset). */
  EXPECT_EQ_INT(fcclMappingsPointer(mappings, &key, 4096, 512, &ptr), fcclSuccess);
  EXPECT(ptr == (char*)base + 4096);
  EXPECT_EQ_INT(fcclMappingsPointer(mappings, &key, (1 << 20) - 8, 8, &ptr), fcclSuccess);
  EXPECT(ptr == (char*)base + (1 << 20) - 8);
  ptr = NULL;
  EXPECT_EQ_INT(fcclMappingsPointer(mappings, &key, (1 << 20) - 8, 9, &ptr), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclMappingsPointer(mappings, &key, (size_t)1 << 21, 0, &ptr), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclMappingsPointer(mappings, &key, 16, SIZE_MAX, &ptr), fcclInvalidArgument); /* no overflow */
  EXPECT(ptr == NULL);
  EXPECT_EQ_INT(fcclMappingsRelease(mappings, &key), fcclSuccess);
  EXPECT_EQ_INT(fcclMappingsDestroy(mappings), fcclSuccess);
}

static void testFailures(void) {
  struct fakeOps fake;
  struct fcclMappings* mappings = newMappings(&fake);
  struct fcclMappingKey key;
  legacyKey(&key, 3, 0);
  void* base = NULL;
  fake.failNextOpen = 1;
  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &key, 4096, NULL, &base), fcclUnhandledCudaError);
  EXPECT_EQ_INT(fcclMappingsRefs(mappings, &key), 0); /* a failed open leaves nothing behind */
  struct fcclMappingsStats stats;
  fcclMappingsGetStats(mappings, &stats);
  EXPECT_EQ_INT(stats.openMappings, 0);
  EXPECT_EQ_INT(stats.totalOpens, 0);
  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &key, 0, NULL, &base), fcclInvalidArgument);
  /* Destroying with an entry still open closes it and says so. */
  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &key, 4096, NULL, &base), fcclSuccess);
  EXPECT_EQ_INT(fcclMappingsDestroy(mappings), fcclInvalidUsage);
  EXPECT_EQ_INT(fake.closes, 1);
}

/* ---- concurrent users ---- */

#define THREADS 8
#define KEYS 16
#define ITERATIONS 20000

struct threadArg {
  struct fcclMappings* mappings;
  int index;
  int errors;
  int wrongBase;
};

static void* hammer(void* p) {
  struct threadArg* arg = p;
  uint64_t state = 0x9e3779b97f4a7c15ull * (uint64_t)(arg->index + 1);
  int held[KEYS] = {0};
  struct fcclMappingKey keys[KEYS];
  for (int k = 0; k < KEYS; k++) cuMemKey(&keys[k], 1000 + k, (uint64_t)k, 0);
  for (int it = 0; it < ITERATIONS; it++) {
    int k = (int)(testRandom(&state) % KEYS);
    if (held[k] > 0 && (testRandom(&state) & 1)) {
      if (fcclMappingsRelease(arg->mappings, &keys[k]) != fcclSuccess) arg->errors++;
      held[k]--;
    } else {
      void* base = NULL;
      void* check = NULL;
      if (fcclMappingsAcquire(arg->mappings, &keys[k], 4096 + (size_t)k, NULL, &base) != fcclSuccess) {
        arg->errors++;
        continue;
      }
      held[k]++;
      /* While we hold a reference the mapping cannot move or close under us. */
      if (fcclMappingsPointer(arg->mappings, &keys[k], 0, 1, &check) != fcclSuccess || check != base) arg->wrongBase++;
    }
  }
  for (int k = 0; k < KEYS; k++)
    while (held[k]-- > 0)
      if (fcclMappingsRelease(arg->mappings, &keys[k]) != fcclSuccess) arg->errors++;
  return NULL;
}

static void testThreads(void) {
  struct fakeOps fake;
  struct fcclMappings* mappings = newMappings(&fake);
  pthread_t threads[THREADS];
  struct threadArg args[THREADS];
  for (int t = 0; t < THREADS; t++) {
    args[t] = (struct threadArg){.mappings = mappings, .index = t};
    pthread_create(&threads[t], NULL, hammer, &args[t]);
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_join(threads[t], NULL);
    EXPECT_EQ_INT(args[t].errors, 0);
    EXPECT_EQ_INT(args[t].wrongBase, 0);
  }
  struct fcclMappingsStats stats;
  fcclMappingsGetStats(mappings, &stats);
  EXPECT_EQ_INT(stats.openMappings, 0);
  EXPECT_EQ_INT(stats.references, 0);
  EXPECT_EQ_INT(stats.totalOpens, stats.totalCloses);
  EXPECT_EQ_INT(stats.totalOpens, fake.opens);
  EXPECT(fake.opens >= KEYS); /* every key was opened at least once, and closed at every last release */
  EXPECT_EQ_INT(fake.doubleOpen, 0);
  EXPECT_EQ_INT(fcclMappingsDestroy(mappings), fcclSuccess);
}

/* ---- arena bookkeeping ---- */

struct fakeChunks {
  int created, freed, failNext;
  uint64_t serial;
};

static fcclResult_t fakeChunkCreate(void* ctx, int dev, size_t bytes, struct fcclIpcAlloc* alloc) {
  struct fakeChunks* fake = ctx;
  if (fake->failNext) {
    fake->failNext = 0;
    return FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_IPC, "fake out of device memory");
  }
  memset(alloc, 0, sizeof(*alloc));
  alloc->kind = FCCL_MAPPING_CUMEM;
  alloc->dev = dev;
  alloc->size = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  alloc->ptr = calloc(1, 64); /* a unique address stands in for the chunk */
  alloc->serial = ++fake->serial;
  alloc->exportFd = -1;
  fake->created++;
  return fcclSuccess;
}

static fcclResult_t fakeChunkFree(void* ctx, struct fcclIpcAlloc* alloc) {
  struct fakeChunks* fake = ctx;
  free(alloc->ptr);
  alloc->ptr = NULL;
  fake->freed++;
  return fcclSuccess;
}

static struct fcclArena* newArena(struct fakeChunks* fake, int dev, int slotsPerChunk) {
  memset(fake, 0, sizeof(*fake));
  fake->serial = (uint64_t)dev * 1000;
  struct fcclArenaOps ops = {.ctx = fake, .chunkCreate = fakeChunkCreate, .chunkFree = fakeChunkFree};
  struct fcclArena* arena = NULL;
  EXPECT_EQ_INT(fcclArenaCreate(&ops, dev, 100000, slotsPerChunk, &arena), fcclSuccess);
  return arena;
}

static void testChooseSlot(void) {
  uint64_t bitmaps[3 * FCCL_ARENA_BITMAP_WORDS];
  memset(bitmaps, 0xff, sizeof(bitmaps));
  EXPECT_EQ_INT(fcclArenaChooseSlot(bitmaps, 3), 0);
  bitmaps[0] &= ~1ull;                           /* slot 0 taken on rank 0 */
  bitmaps[FCCL_ARENA_BITMAP_WORDS] &= ~2ull;     /* slot 1 taken on rank 1 */
  bitmaps[2 * FCCL_ARENA_BITMAP_WORDS] &= ~4ull; /* slot 2 taken on rank 2 */
  EXPECT_EQ_INT(fcclArenaChooseSlot(bitmaps, 3), 3);
  EXPECT_EQ_INT(fcclArenaChooseSlot(bitmaps, 1), 1);
  /* Only in the second word. */
  bitmaps[0] = 0;
  EXPECT_EQ_INT(fcclArenaChooseSlot(bitmaps, 3), 64);
  memset(bitmaps, 0, sizeof(bitmaps));
  EXPECT_EQ_INT(fcclArenaChooseSlot(bitmaps, 3), -1);
}

static void testArena(void) {
  struct fakeChunks fake;
  struct fcclArena* arena = newArena(&fake, 0, 4);
  EXPECT_EQ_INT(fcclArenaSlotStride(arena) % 4096, 0);
  EXPECT(fcclArenaSlotStride(arena) >= 100000);
  EXPECT(fcclArenaSlotOffset(arena, 1) >= fcclArenaCheckOffset(arena, 3, FCCL_ARENA_CHECK_RANKS - 1) + 8);
  EXPECT_EQ_INT(fcclArenaSlotOffset(arena, 5) - fcclArenaSlotOffset(arena, 4), fcclArenaSlotStride(arena));
  EXPECT_EQ_INT(fcclArenaSlotOffset(arena, 4), fcclArenaSlotOffset(arena, 0)); /* slot 4: first of chunk 1 */

  uint64_t bitmap[FCCL_ARENA_BITMAP_WORDS];
  fcclArenaFreeBitmap(arena, bitmap);
  EXPECT_EQ_INT(fcclArenaChooseSlot(bitmap, 1), 0);
  int claimed = 0;
  struct fcclIpcAlloc chunk, chunk2;
  EXPECT_EQ_INT(fcclArenaClaim(arena, 0, &claimed, &chunk), fcclSuccess);
  EXPECT_EQ_INT(claimed, 1);
  EXPECT_EQ_INT(fake.created, 1);
  EXPECT_EQ_INT(fcclArenaClaim(arena, 0, &claimed, &chunk2), fcclSuccess);
  EXPECT_EQ_INT(claimed, 0); /* a concurrent init took it: the caller agrees again */
  EXPECT_EQ_INT(fcclArenaClaim(arena, 1, &claimed, &chunk2), fcclSuccess);
  EXPECT_EQ_INT(claimed, 1);
  EXPECT_EQ_INT(fake.created, 1); /* slot 1 lives in the same chunk */
  EXPECT_EQ_INT(chunk2.serial, chunk.serial);
  EXPECT_EQ_INT(fcclArenaClaim(arena, 6, &claimed, &chunk2), fcclSuccess);
  EXPECT_EQ_INT(fake.created, 2); /* chunk 1 */
  fcclArenaFreeBitmap(arena, bitmap);
  EXPECT_EQ_INT(bitmap[0] & 0x7f, 0x3c); /* 0, 1 and 6 taken */

  /* Quarantine: the slot is not handed out again while the arena lives. */
  EXPECT_EQ_INT(fcclArenaRelease(arena, 1, 1), fcclSuccess);
  fcclArenaFreeBitmap(arena, bitmap);
  EXPECT_EQ_INT(bitmap[0] & 0x2, 0);
  struct fcclArenaStats stats;
  fcclArenaGetStats(arena, &stats);
  EXPECT_EQ_INT(stats.liveSlots, 2);
  EXPECT_EQ_INT(stats.quarantinedSlots, 1);
  EXPECT_EQ_INT(stats.chunks, 2);
  EXPECT_EQ_INT(fcclArenaRelease(arena, 1, 0), fcclInternalError); /* not held */

  /* A same-process rank on another device borrows chunk 0. */
  void* base = NULL;
  EXPECT_EQ_INT(fcclArenaBorrow(arena, 0, chunk.serial, &base), fcclSuccess);
  EXPECT(base == chunk.ptr);
  EXPECT_EQ_INT(fcclArenaBorrow(arena, 0, chunk.serial + 77, &base), fcclInternalError); /* wrong chunk named */
  EXPECT_EQ_INT(fcclArenaRelease(arena, 0, 0), fcclSuccess);
  EXPECT_EQ_INT(fcclArenaRelease(arena, 6, 0), fcclSuccess);
  EXPECT_EQ_INT(fake.freed, 0); /* still lent */
  EXPECT_EQ_INT(fcclArenaUnborrow(arena, 0), fcclSuccess);
  EXPECT_EQ_INT(fake.freed, 2); /* last user gone: every chunk freed, quarantine forgotten */
  fcclArenaGetStats(arena, &stats);
  EXPECT_EQ_INT(stats.chunks, 0);
  EXPECT_EQ_INT(stats.bytes, 0);
  EXPECT_EQ_INT(stats.quarantinedSlots, 0);
  EXPECT_EQ_INT(fcclArenaUnborrow(arena, 0), fcclInternalError);

  /* A failed chunk allocation claims nothing. */
  fake.failNext = 1;
  EXPECT_EQ_INT(fcclArenaClaim(arena, 0, &claimed, &chunk), fcclUnhandledCudaError);
  EXPECT_EQ_INT(claimed, 0);
  fcclArenaGetStats(arena, &stats);
  EXPECT_EQ_INT(stats.liveSlots, 0);
  EXPECT_EQ_INT(fcclArenaClaim(arena, FCCL_ARENA_MAX_SLOTS, &claimed, &chunk), fcclInvalidUsage);
  EXPECT_EQ_INT(fcclArenaClaim(arena, -1, &claimed, &chunk), fcclInvalidUsage);
  EXPECT_EQ_INT(fcclArenaDestroy(arena), fcclSuccess);

  struct fcclArenaOps ops = {.ctx = &fake, .chunkCreate = fakeChunkCreate, .chunkFree = fakeChunkFree};
  EXPECT_EQ_INT(fcclArenaCreate(&ops, 0, 4096, 0, &arena), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclArenaCreate(&ops, 0, 4096, FCCL_ARENA_MAX_SLOTS_PER_CHUNK + 1, &arena), fcclInvalidArgument);
}

/*
 * Re-initialisation on two simulated ranks, each with its own arena and mappings (two processes), as an application
 * replacing its communicator does it (docs/ipc.md#the-failures-this-rules-out): round i creates comm_i while
 * comm_{i-1} is alive, then destroys comm_{i-1}. Creating a comm runs the transport's steps:
 * publish free bitmaps, take the lowest common slot, map the peer's chunk by its key. The number of open mappings
 * must not grow, and comm_i's slot never equals comm_{i-1}'s (so their flags never share memory).
 */
struct simRank {
  struct fakeChunks chunks;
  struct fakeOps maps;
  struct fcclArena* arena;
  struct fcclMappings* mappings;
};

struct simComm {
  int slot;
  struct fcclMappingKey peerKey[2];
  struct fcclPeerArena* peerArena[2];
};

static void chunkKey(const struct fcclIpcAlloc* alloc, int owner, int importDev, struct fcclMappingKey* key) {
  cuMemKey(key, 5000 + owner, alloc->serial, importDev);
}

/* Rank `owner`'s arena as rank r maps it (struct fcclPeerArenaId): the simulated ranks are processes 5000, 5001. */
static void peerArenaId(int owner, int r, struct fcclPeerArenaId* id) {
  memset(id, 0, sizeof(*id));
  id->hostHash = 1;
  id->processNonce = 77;
  id->pid = 5000 + owner;
  id->dev = owner;
  id->slotBytes = 100000;
  id->importDev = r;
}

static int simInit(struct simRank ranks[2], struct simComm* comm) {
  uint64_t bitmaps[2 * FCCL_ARENA_BITMAP_WORDS];
  for (int r = 0; r < 2; r++) fcclArenaFreeBitmap(ranks[r].arena, bitmaps + r * FCCL_ARENA_BITMAP_WORDS);
  comm->slot = fcclArenaChooseSlot(bitmaps, 2);
  struct fcclIpcAlloc chunks[2];
  for (int r = 0; r < 2; r++) {
    int claimed = 0;
    if (fcclArenaClaim(ranks[r].arena, comm->slot, &claimed, &chunks[r]) != fcclSuccess || !claimed) return 0;
  }
  /* As the transport does: a reference is retained where the chunk is mapped already, else the chunk is mapped;
   * either way the reference goes to the peer's arena, which keeps one per chunk. */
  for (int r = 0; r < 2; r++) {
    int peer = 1 - r, found = 0;
    void* base = NULL;
    chunkKey(&chunks[peer], peer, r, &comm->peerKey[r]);
    if (fcclMappingsRetain(ranks[r].mappings, &comm->peerKey[r], chunks[peer].size, &base, &found) != fcclSuccess)
      return 0;
    if (!found &&
        fcclMappingsAcquire(ranks[r].mappings, &comm->peerKey[r], chunks[peer].size, NULL, &base) != fcclSuccess)
      return 0;
    struct fcclPeerArenaId id;
    peerArenaId(peer, r, &id);
    if (fcclPeerArenaUse(ranks[r].mappings, &id, &comm->peerArena[r]) != fcclSuccess) return 0;
    if (fcclPeerArenaKeep(comm->peerArena[r], &comm->peerKey[r]) != fcclSuccess) return 0;
  }
  return 1;
}

static int simDestroy(struct simRank ranks[2], struct simComm* comm) {
  int ok = 1;
  for (int r = 0; r < 2; r++) ok &= fcclPeerArenaDone(comm->peerArena[r]) == fcclSuccess;
  for (int r = 0; r < 2; r++) ok &= fcclArenaRelease(ranks[r].arena, comm->slot, 0) == fcclSuccess;
  return ok;
}

/* A peer's arena as the importer holds it: each chunk's mapping kept once, whatever number of communicators use
 * it, until the last of them is done. */
static void testPeerArena(void) {
  struct fakeOps fake;
  struct fcclMappings* mappings = newMappings(&fake);
  struct fcclPeerArenaId id;
  peerArenaId(1, 0, &id);
  struct fcclPeerArena *a = NULL, *b = NULL;
  struct fcclMappingKey chunk0, chunk1;
  cuMemKey(&chunk0, 5001, 1, 0);
  cuMemKey(&chunk1, 5001, 2, 0);
  void* base = NULL;
  EXPECT_EQ_INT(fcclPeerArenaUse(mappings, &id, &a), fcclSuccess);
  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &chunk0, 4096, NULL, &base), fcclSuccess);
  EXPECT_EQ_INT(fcclPeerArenaKeep(a, &chunk0), fcclSuccess);
  EXPECT_EQ_INT(fcclPeerArenaUse(mappings, &id, &b), fcclSuccess);
  EXPECT(a == b);
  /* A second communicator in the same chunk: its reference is handed over and dropped, the mapping stays one. */
  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &chunk0, 4096, NULL, &base), fcclSuccess);
  EXPECT_EQ_INT(fcclPeerArenaKeep(b, &chunk0), fcclSuccess);
  EXPECT_EQ_INT(fcclMappingsRefs(mappings, &chunk0), 1);
  EXPECT_EQ_INT(fcclMappingsAcquire(mappings, &chunk1, 4096, NULL, &base), fcclSuccess);
  EXPECT_EQ_INT(fcclPeerArenaKeep(b, &chunk1), fcclSuccess);
  int arenas = 0, chunks = 0;
  fcclPeerArenaCounts(&arenas, &chunks);
  EXPECT_EQ_INT(arenas, 1);
  EXPECT_EQ_INT(chunks, 2);
  /* The first communicator is done: both chunks stay mapped for the one left, whichever chunk it uses. */
  EXPECT_EQ_INT(fcclPeerArenaDone(a), fcclSuccess);
  EXPECT_EQ_INT(fcclMappingsRefs(mappings, &chunk0), 1);
  EXPECT_EQ_INT(fcclMappingsRefs(mappings, &chunk1), 1);
  EXPECT_EQ_INT(fake.closes, 0);
  /* Another owner's arena, or the same owner's for another device of this process, is another one. */
  struct fcclPeerArenaId other = id;
  other.importDev = 1;
  struct fcclPeerArena* c = NULL;
  EXPECT_EQ_INT(fcclPeerArenaUse(mappings, &other, &c), fcclSuccess);
  EXPECT(c != b);
  EXPECT_EQ_INT(fcclPeerArenaDone(c), fcclSuccess);
  /* The last one done: every mapping released, the arena forgotten. */
  EXPECT_EQ_INT(fcclPeerArenaDone(b), fcclSuccess);
  EXPECT_EQ_INT(fcclMappingsRefs(mappings, &chunk0), 0);
  EXPECT_EQ_INT(fcclMappingsRefs(mappings, &chunk1), 0);
  EXPECT_EQ_INT(fake.closes, 2);
  fcclPeerArenaCounts(&arenas, &chunks);
  EXPECT_EQ_INT(arenas, 0);
  EXPECT_EQ_INT(chunks, 0);
  EXPECT_EQ_INT(fcclMappingsDestroy(mappings), fcclSuccess);
}

/* The process's arenas put one slot in a chunk by default: a first communicator allocates only the slot it uses
 * (plus its check words, within the allocation granularity), not a chunk of slots for communicators to come. */
static void testProcessArenaDefault(void) {
  const size_t slotBytes = (size_t)38 << 20;
  struct fcclArena* arena = NULL;
  EXPECT_EQ_INT(fcclArenaProcess(0, slotBytes, &arena), fcclSuccess);
  if (!arena) return;
  EXPECT_EQ_INT(fcclArenaSlotsPerChunk(arena), 1);
  EXPECT(fcclArenaChunkBytes(arena) < slotBytes + ((size_t)2 << 20));
  uint64_t chunks = 1, bytes = 1;
  fcclArenaProcessStats(&chunks, &bytes);
  EXPECT_EQ_INT(chunks, 0); /* nothing is allocated before a communicator claims a slot */
  EXPECT_EQ_INT(bytes, 0);
}

static void testReinitPattern(void) {
  struct simRank ranks[2];
  for (int r = 0; r < 2; r++) {
    ranks[r].arena = newArena(&ranks[r].chunks, r, 1);
    ranks[r].mappings = newMappings(&ranks[r].maps);
  }
  struct simComm comms[2];
  EXPECT(simInit(ranks, &comms[0]));
  struct fcclMappingsStats afterFirst[2], stats;
  for (int r = 0; r < 2; r++) fcclMappingsGetStats(ranks[r].mappings, &afterFirst[r]);
  int ok = 1, distinct = 1;
  for (int round = 1; round <= 1000; round++) {
    struct simComm* next = &comms[round % 2];
    struct simComm* prev = &comms[(round - 1) % 2];
    ok &= simInit(ranks, next);
    distinct &= next->slot != prev->slot;
    ok &= simDestroy(ranks, prev);
  }
  EXPECT(ok);
  EXPECT(distinct);
  for (int r = 0; r < 2; r++) {
    fcclMappingsGetStats(ranks[r].mappings, &stats);
    EXPECT_EQ_INT(afterFirst[r].openMappings, 1); /* a first communicator maps one chunk of its peer's, its slot's */
    EXPECT_EQ_INT(stats.openMappings, 2);
    /* The peer's two chunks (two communicators live at once) were mapped once each, in rounds 0 and 1: a comm made
     * again takes a slot whose chunk its peer's arena keeps mapped. */
    EXPECT_EQ_INT(stats.totalOpens, 2);
    EXPECT_EQ_INT(ranks[r].chunks.created, 2);
  }
  EXPECT(simDestroy(ranks, &comms[1000 % 2]));
  for (int r = 0; r < 2; r++) {
    fcclMappingsGetStats(ranks[r].mappings, &stats);
    EXPECT_EQ_INT(stats.openMappings, 0);
    EXPECT_EQ_INT(ranks[r].chunks.freed, 2); /* the last comm gone: the arena gives its memory back */
    EXPECT_EQ_INT(fcclArenaDestroy(ranks[r].arena), fcclSuccess);
    EXPECT_EQ_INT(fcclMappingsDestroy(ranks[r].mappings), fcclSuccess);
  }

  /* 10,000 init/destroy cycles: mappings back to zero, every chunk freed. */
  for (int r = 0; r < 2; r++) {
    ranks[r].arena = newArena(&ranks[r].chunks, r, 1);
    ranks[r].mappings = newMappings(&ranks[r].maps);
  }
  ok = 1;
  for (int cycle = 0; cycle < 10000; cycle++) {
    ok &= simInit(ranks, &comms[0]);
    ok &= comms[0].slot == 0;
    ok &= simDestroy(ranks, &comms[0]);
  }
  EXPECT(ok);
  for (int r = 0; r < 2; r++) {
    fcclMappingsGetStats(ranks[r].mappings, &stats);
    EXPECT_EQ_INT(stats.openMappings, 0);
    EXPECT_EQ_INT(stats.totalOpens, 10000);
    EXPECT_EQ_INT(stats.totalCloses, 10000);
    EXPECT_EQ_INT(ranks[r].chunks.created, ranks[r].chunks.freed);
    EXPECT_EQ_INT(fcclArenaDestroy(ranks[r].arena), fcclSuccess);
    EXPECT_EQ_INT(fcclMappingsDestroy(ranks[r].mappings), fcclSuccess);
  }
}

/* The public entry points' argument checks, which must work on a machine without a GPU. */
static void testPublicArguments(void) {
  fcclMemStats_t stats;
  memset(&stats, 0xff, sizeof(stats));
  EXPECT_EQ_INT(fcclCommGetMemStats(NULL, NULL), fcclInvalidArgument);
  stats.size = 4;
  EXPECT_EQ_INT(fcclCommGetMemStats(NULL, &stats), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "stats->size");
  stats.size = sizeof(stats);
  EXPECT_EQ_INT(fcclCommGetMemStats(NULL, &stats), fcclSuccess);
  EXPECT_EQ_INT(stats.size, sizeof(stats));
  EXPECT_EQ_INT(stats.openMappings, 0); /* nothing was ever mapped in this process */
  EXPECT_EQ_INT(stats.commRegistrations, 0);
  EXPECT_EQ_INT(stats.arenaBytes, 0); /* nor allocated */
  EXPECT_EQ_INT(stats.arenaChunks, 0);
  EXPECT_EQ_INT(stats.commPeerBytes, 0);
  /* A caller of the struct before the arena's fields. */
  memset(&stats, 0xff, sizeof(stats));
  stats.size = offsetof(fcclMemStats_t, arenaBytes);
  EXPECT_EQ_INT(fcclCommGetMemStats(NULL, &stats), fcclSuccess);
  EXPECT_EQ_INT(stats.commGraphRegistrations, 0);
  EXPECT(stats.arenaBytes == UINT64_MAX && stats.commPeerBytes == UINT64_MAX);
  /* An older caller's smaller struct: the fields beyond its size are not written. */
  memset(&stats, 0xff, sizeof(stats));
  stats.size = offsetof(fcclMemStats_t, totalOpens);
  EXPECT_EQ_INT(fcclCommGetMemStats(NULL, &stats), fcclSuccess);
  EXPECT_EQ_INT(stats.bytesMapped, 0);
  EXPECT(stats.totalOpens == UINT64_MAX);
  EXPECT_EQ_INT(fcclCommGetMemStats((fcclComm_t)(uintptr_t)&stats, &stats), fcclInvalidArgument);

  fcclRegHandle_t handle = NULL;
  uint64_t notAComm[32] = {0}; /* large enough that reading a comm's first fields stays inside it */
  EXPECT_EQ_INT(fcclCommRegister(NULL, notAComm, 4, &handle), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommRegister((fcclComm_t)(uintptr_t)notAComm, notAComm, 4, &handle), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommDeregister(NULL, handle), fcclInvalidArgument);
  EXPECT(handle == NULL);
  /* A communicator without peer memory (its init never reached the transport). */
  struct fcclComm comm;
  memset(&comm, 0, sizeof(comm));
  comm.magic = FCCL_COMM_MAGIC;
  pthread_mutex_init(&comm.errorLock, NULL);
  EXPECT_EQ_INT(fcclCommRegister(&comm, notAComm, 4, &handle), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "no peer memory");
  EXPECT_EQ_INT(fcclCommDeregister(&comm, (fcclRegHandle_t)(uintptr_t)0x40), fcclInvalidUsage);
  pthread_mutex_destroy(&comm.errorLock);

  EXPECT_EQ_INT(fcclMemFree(NULL), fcclSuccess);
  EXPECT_EQ_INT(fcclMemFree(notAComm), fcclInvalidArgument); /* never from fcclMemAlloc: refused, not freed */
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "did not come from fcclMemAlloc");
  EXPECT_EQ_INT(fcclMemAlloc(NULL, 64), fcclInvalidArgument);
  void* ptr = notAComm;
  EXPECT_EQ_INT(fcclMemAlloc(&ptr, 0), fcclInvalidArgument);
  EXPECT(ptr == (void*)notAComm); /* outputs are written only on success */
}

/* ---- keys of fccl's own chunks, and process identity ---- */

static void testChunkKeys(void) {
  struct fcclProcessId owner = {.hostHash = 0x1234, .nonce = 0x5678, .pid = 4242};
  struct fcclIpcAlloc alloc;
  memset(&alloc, 0, sizeof(alloc));
  alloc.kind = FCCL_MAPPING_CUMEM;
  alloc.dev = 3;
  alloc.ptr = (void*)(uintptr_t)0x7f0000000000ull;
  alloc.size = 2u << 20;
  alloc.serial = 17;
  struct fcclMappingKey a, b;
  fcclIpcAllocKey(&owner, &alloc, 1, &a);
  fcclIpcAllocKey(&owner, &alloc, 1, &b);
  EXPECT(memcmp(&a, &b, sizeof(a)) == 0); /* exporter and importer build it alike */
  char text[160];
  EXPECT_STR_CONTAINS(fcclMappingKeyDescribe(&a, text, sizeof(text)), "pid 4242 dev 3 serial 17 pieces 1] on dev 1");
  alloc.serial = 18;
  fcclIpcAllocKey(&owner, &alloc, 1, &b);
  EXPECT(memcmp(&a, &b, sizeof(a)) != 0);
  alloc.kind = FCCL_MAPPING_LEGACY_IPC;
  memset(&alloc.legacyHandle, 0xab, sizeof(alloc.legacyHandle));
  fcclIpcAllocKey(&owner, &alloc, 0, &b);
  EXPECT_EQ_INT(b.kind, FCCL_MAPPING_LEGACY_IPC);
  EXPECT_EQ_INT(b.id[0], 0xab);
  EXPECT_EQ_INT(b.id[sizeof(alloc.legacyHandle) - 1], 0xab);
}

/* A child of fork() is another process: its exports must never be taken for its parent's. */
static void testForkIdentity(void) {
  struct fcclProcessId parent = *fcclProcessIdentity();
  EXPECT_EQ_INT(parent.pid, getpid());
  pid_t child = fork();
  if (child == 0) {
    const struct fcclProcessId* mine = fcclProcessIdentity();
    int ok = mine->pid == (int32_t)getpid() && mine->nonce != parent.nonce && mine->hostHash == parent.hostHash;
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  EXPECT_EQ_INT(waitpid(child, &status, 0), child);
  EXPECT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child of fork() kept its parent's pid or nonce");
  EXPECT(fcclProcessIdentity()->nonce == parent.nonce); /* the parent's stays */
}

/* ---- registration and teardown bookkeeping on one rank with a fake exchange ---- */

struct fakeExchange {
  int allGathers, barriers;
  int failAllGather;
};

static fcclResult_t fakeAllGather(void* ctx, void* allData, size_t bytesPerRank) {
  struct fakeExchange* ex = ctx;
  (void)allData;
  (void)bytesPerRank;
  ex->allGathers++;
  if (ex->failAllGather) return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT, "fake exchange: rank 1 is gone");
  return fcclSuccess; /* one rank: its own record is all there is */
}

static fcclResult_t fakeBarrier(void* ctx) {
  ((struct fakeExchange*)ctx)->barriers++;
  return fcclSuccess;
}

struct fakeComm {
  struct fcclComm comm;
  volatile int abortFlag;
  struct fakeExchange ex;
  struct fakeOps maps;
  struct fakeChunks chunks;
  struct fcclArena* arena;
  struct fcclMappings* mappings;
};

/* A ready communicator of one rank whose transport holds slot 0 of a fake arena (slot 1 is held by another). */
static void fakeCommCreate(struct fakeComm* fc) {
  memset(fc, 0, sizeof(*fc));
  struct fcclComm* comm = &fc->comm;
  comm->magic = FCCL_COMM_MAGIC;
  comm->nranks = 1;
  comm->abortFlag = &fc->abortFlag;
  comm->asyncError = fcclSuccess;
  snprintf(comm->name, sizeof(comm->name), "fake");
  pthread_mutex_init(&comm->errorLock, NULL);
  fc->mappings = newMappings(&fc->maps);
  fc->arena = newArena(&fc->chunks, 0, 4);
  struct fcclTransport* t = calloc(1, sizeof(*t));
  t->peers = calloc(1, sizeof(*t->peers));
  t->cfg = (struct fcclTransportParams){
      .rank = 0,
      .nranks = 1,
      .timeoutMs = 1000,
      .abortFlag = &fc->abortFlag,
      .name = t->name,
      .slotBytes = 4096,
      .ex = {.ctx = &fc->ex, .allGather = fakeAllGather, .barrier = fakeBarrier},
  };
  snprintf(t->name, sizeof(t->name), "fake");
  t->mappings = fc->mappings;
  t->arena = fc->arena;
  t->fdMode = FCCL_FD_MODE_PIDFD;
  int claimed = 0;
  struct fcclIpcAlloc chunk;
  EXPECT_EQ_INT(fcclArenaClaim(fc->arena, 0, &claimed, &t->chunk), fcclSuccess);
  EXPECT_EQ_INT(fcclArenaClaim(fc->arena, 1, &claimed, &chunk), fcclSuccess);
  t->slot = 0;
  comm->transport = t;
}

/* The transport's teardown, as fcclCommDestroy runs it (the communicator forgets it first). */
static void fakeTransportFini(struct fakeComm* fc) {
  struct fcclTransport* t = fc->comm.transport;
  fc->comm.transport = NULL;
  (void)fcclTransportFini(t); /* without a GPU its device switch fails; what matters here is the rest */
}

static void fakeCommDestroy(struct fakeComm* fc) {
  EXPECT_EQ_INT(fcclArenaRelease(fc->arena, 1, 0), fcclSuccess);
  EXPECT_EQ_INT(fcclArenaDestroy(fc->arena), fcclSuccess);
  EXPECT_EQ_INT(fcclMappingsDestroy(fc->mappings), fcclSuccess);
  pthread_mutex_destroy(&fc->comm.errorLock);
}

static void testRegisterCollective(void) {
  struct fakeComm fc;
  fakeCommCreate(&fc);
  uint64_t buf[8];
  fcclRegHandle_t handle = NULL;

  /* A bad argument on one rank still takes part in the exchange (the peers fail at once instead of timing out),
   * and the ranks meet once more after releasing, before anyone returns. */
  EXPECT_EQ_INT(fcclCommRegister(&fc.comm, buf, sizeof(buf), NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "handle is NULL");
  EXPECT_STR_CONTAINS(fcclGetLastError(&fc.comm), "handle is NULL");
  EXPECT(fc.ex.allGathers >= 1);
  EXPECT_EQ_INT(fc.ex.barriers, 1);
  EXPECT_EQ_INT(fcclCommRegister(&fc.comm, NULL, 64, &handle), fcclInvalidArgument);
  EXPECT_EQ_INT(fc.ex.barriers, 2);
  /* A range past the end of the address space is refused before any CUDA call. */
  EXPECT_EQ_INT(fcclCommRegister(&fc.comm, (void*)(uintptr_t)0x10000, SIZE_MAX - 100, &handle), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "end of the address space");
  EXPECT(handle == NULL);
  EXPECT_EQ_INT(fc.ex.barriers, 3);
  EXPECT_EQ_INT(fc.comm.transport->outOfStep, 0);

  /* Deregistering an unknown handle: agreed by every rank, nothing released. */
  int gathers = fc.ex.allGathers;
  EXPECT_EQ_INT(fcclCommDeregister(&fc.comm, (fcclRegHandle_t)(uintptr_t)buf), fcclInvalidArgument);
  EXPECT_EQ_INT(fc.ex.allGathers, gathers + 1);

  /* In step: teardown meets the peers twice and gives the slot back for reuse. */
  fakeTransportFini(&fc);
  EXPECT_EQ_INT(fc.ex.barriers, 5);
  struct fcclArenaStats stats;
  fcclArenaGetStats(fc.arena, &stats);
  EXPECT_EQ_INT(stats.liveSlots, 1);
  EXPECT_EQ_INT(stats.quarantinedSlots, 0);
  fakeCommDestroy(&fc);

  /* The exchange fails (a peer died): the ranks are out of step, so nothing waits for them any more, neither
   * the failed registration nor the teardown, and the slot is quarantined. */
  fakeCommCreate(&fc);
  fc.ex.failAllGather = 1;
  EXPECT_EQ_INT(fcclCommRegister(&fc.comm, buf, sizeof(buf), NULL), fcclRemoteError);
  EXPECT_EQ_INT(fc.ex.barriers, 0);
  EXPECT_EQ_INT(fc.comm.transport->outOfStep, 1);
  fakeTransportFini(&fc);
  EXPECT_EQ_INT(fc.ex.barriers, 0);
  fcclArenaGetStats(fc.arena, &stats);
  EXPECT_EQ_INT(stats.liveSlots, 1);
  EXPECT_EQ_INT(stats.quarantinedSlots, 1);
  fakeCommDestroy(&fc);

  /* Aborted: no waits either. */
  fakeCommCreate(&fc);
  fc.abortFlag = 1;
  fakeTransportFini(&fc);
  EXPECT_EQ_INT(fc.ex.barriers, 0);
  fcclArenaGetStats(fc.arena, &stats);
  EXPECT_EQ_INT(stats.quarantinedSlots, 1);
  fakeCommDestroy(&fc);
}

int main(void) {
  testRefcounts();
  testKeys();
  testOffsets();
  testFailures();
  testThreads();
  testChooseSlot();
  testArena();
  testPeerArena();
  testProcessArenaDefault();
  testReinitPattern();
  testPublicArguments();
  testChunkKeys();
  testForkIdentity();
  testRegisterCollective();
  return testSummary("mappings");
}
