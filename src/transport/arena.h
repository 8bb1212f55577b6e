/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The per-process arena of shared-buffer chunks (internal to the transport layer).
 *
 * For each (CUDA device, slot size) a process keeps an arena of chunks; chunk c holds the communicator slots
 * [c * S, c * S + S) (S = FCCL_ARENA_SLOTS, 1 by default: a chunk per slot, so that a first communicator allocates
 * only the slot it uses). A new communicator takes one global slot index that is free on every one of its ranks
 * (each rank publishes fcclArenaFreeBitmap, fcclArenaChooseSlot picks the lowest common index, fcclArenaClaim takes
 * it, allocating the chunk when it is missing): the arena grows by a chunk only when every slot it has is held. A
 * slot freed by a destroyed communicator is taken again by a later one; the device layer keeps epochs in the slot
 * so that a reused slot's flags start past every value an old communicator left. Chunks stay cached while any slot
 * of the arena is in use (or lent to a communicator of this process on another device) and are all freed when the
 * last one goes, so device memory returns to where it was once no communicator uses the device.
 *
 * The importing side (struct fcclPeerArena, below) keeps its mappings of a peer's chunks for as long as any
 * communicator of this process uses that peer's arena, which by then cannot have freed them: so a communicator
 * created again over the same ranks (re-initialisation) takes a slot whose chunk every peer has mapped already,
 * and maps nothing new, whichever chunk the slot lives in. docs/ipc.md.
 *
 * Chunk layout: [check words: S x FCCL_ARENA_CHECK_RANKS x 8 bytes, rounded up to 4 KiB][slot 0]...[slot S-1],
 * each slot rounded up to 4 KiB. The check words belong to the transport (the init-time P2P write/read-back);
 * the slots belong to the device layer.
 * Thread safety: every function may be called from any thread (one lock per arena, one for the process list).
 */
#ifndef FCCL_TRANSPORT_ARENA_H_
#define FCCL_TRANSPORT_ARENA_H_

#include "fccl.h"
#include "ipc.h"

#include <stddef.h>
#include <stdint.h>

#define FCCL_ARENA_MAX_SLOTS 256 /* communicator slots per (device, slot size) */
#define FCCL_ARENA_BITMAP_WORDS (FCCL_ARENA_MAX_SLOTS / 64)
#define FCCL_ARENA_MAX_SLOTS_PER_CHUNK 32
#define FCCL_ARENA_CHECK_RANKS 256 /* ranks the P2P check words of one slot have room for */

struct fcclArenaOps {
  void* ctx;
  /* Allocates bytes on dev, zeroes them on a private stream, synchronises, then exports the allocation: nothing
   * a peer may see leaves the process before the zeroes have landed. */
  fcclResult_t (*chunkCreate)(void* ctx, int dev, size_t bytes, struct fcclIpcAlloc* alloc);
  fcclResult_t (*chunkFree)(void* ctx, struct fcclIpcAlloc* alloc);
};

struct fcclArena;

struct fcclArenaStats {
  int liveSlots;          /* slots held by communicators */
  int quarantinedSlots;   /* slots of communicators torn down without their peers: never reused until the arena
                             is emptied */
  int chunks;             /* chunks allocated now */
  int borrowed;           /* references of same-process communicators on other devices */
  size_t bytes;           /* device memory of those chunks */
  uint64_t chunksCreated; /* since the arena was created */
  uint64_t chunksFreed;
};

/* An arena with the given chunk operations (tests) and S slots per chunk (1..FCCL_ARENA_MAX_SLOTS_PER_CHUNK). */
fcclResult_t fcclArenaCreate(const struct fcclArenaOps* ops, int dev, size_t slotBytes, int slotsPerChunk,
                             struct fcclArena** arena);
/* Frees every chunk and the arena; fcclInvalidUsage (after freeing) when slots were still held. */
fcclResult_t fcclArenaDestroy(struct fcclArena* arena);

/* The process's arena for (dev, slotBytes) with the CUDA chunk operations, created on first use (never freed;
 * its chunks are, see above). */
fcclResult_t fcclArenaProcess(int dev, size_t slotBytes, struct fcclArena** arena);

/* Bit i set: slot i is free here (a slot whose chunk does not exist yet is free). */
void fcclArenaFreeBitmap(struct fcclArena* arena, uint64_t bitmap[FCCL_ARENA_BITMAP_WORDS]);

/* The lowest slot index free in all nranks bitmaps (nranks x FCCL_ARENA_BITMAP_WORDS words), or -1. */
int fcclArenaChooseSlot(const uint64_t* bitmaps, int nranks);

/* Takes slot for a communicator. *claimed 0 when it is no longer free (a concurrent init of this process took
 * it: the caller agrees on another with its peers). Allocates, zeroes and exports the slot's chunk when it does
 * not exist. On success *chunk is a copy of the chunk's allocation. */
fcclResult_t fcclArenaClaim(struct fcclArena* arena, int slot, int* claimed, struct fcclIpcAlloc* chunk);

/* Gives slot back. quarantine: the communicator could not synchronise its teardown with its peers, so a peer
 * may still write into the slot: it is not handed out again until the arena is emptied. Frees every chunk when
 * no slot is held and nothing is lent. */
fcclResult_t fcclArenaRelease(struct fcclArena* arena, int slot, int quarantine);

/* A communicator of this process on another device uses slot's chunk directly: takes a reference on that chunk
 * (checking that it is the allocation serial names) and returns its base. */
fcclResult_t fcclArenaBorrow(struct fcclArena* arena, int slot, uint64_t serial, void** chunkBase);
fcclResult_t fcclArenaUnborrow(struct fcclArena* arena, int slot);

/* Where slot lives inside its chunk, and where the check word that rank writer writes for it lives. */
size_t fcclArenaSlotOffset(const struct fcclArena* arena, int slot);
size_t fcclArenaCheckOffset(const struct fcclArena* arena, int slot, int writer);
size_t fcclArenaSlotBytes(const struct fcclArena* arena);  /* usable bytes of a slot (as asked for) */
size_t fcclArenaSlotStride(const struct fcclArena* arena); /* bytes a slot takes in its chunk */
size_t fcclArenaChunkBytes(const struct fcclArena* arena); /* bytes asked for per chunk (before granularity) */
int fcclArenaSlotsPerChunk(const struct fcclArena* arena);

void fcclArenaGetStats(struct fcclArena* arena, struct fcclArenaStats* stats);

/* Every arena of the process together (fcclCommGetMemStats): its chunks and their device memory. */
void fcclArenaProcessStats(uint64_t* chunks, uint64_t* bytes);

/* ---- the arenas of other processes, as this process maps them ---- */

struct fcclMappings;
struct fcclMappingKey;

/* Names one arena of another process (its owner, device and slot size) as mapped for one device of this one.
 * Compared bytewise: zero it before filling it in. */
struct fcclPeerArenaId {
  uint64_t hostHash;
  uint64_t processNonce;
  uint64_t slotBytes;
  int32_t pid;
  int32_t dev;       /* the owner's device */
  int32_t importDev; /* the device of this process its chunks are mapped for */
  int32_t reserved;
};

struct fcclPeerArena;

/*
 * A communicator of this process starts using the peer arena id (created on first use, in mappings, the table its
 * chunks are mapped through). While any communicator uses it, the owner holds a slot of that arena for it, so the
 * arena's chunks stay allocated: the mappings kept here stay valid.
 */
fcclResult_t fcclPeerArenaUse(struct fcclMappings* mappings, const struct fcclPeerArenaId* id,
                              struct fcclPeerArena** arena);

/* Hands the arena one reference the caller holds on chunk's mapping: kept when the arena has none of that chunk
 * yet, else released (so each chunk is held once, and re-initialisation maps nothing new). */
fcclResult_t fcclPeerArenaKeep(struct fcclPeerArena* arena, const struct fcclMappingKey* chunk);

/* A communicator stops using the arena; the last one releases every chunk mapping it kept, and the arena goes. */
fcclResult_t fcclPeerArenaDone(struct fcclPeerArena* arena);

/* Peer arenas in use in this process, and the chunk mappings they keep (tests). */
void fcclPeerArenaCounts(int* arenas, int* chunks);

#endif /* FCCL_TRANSPORT_ARENA_H_ */
