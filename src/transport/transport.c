/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A communicator's peer memory: slot agreement in the per-process arenas, mapping of the peers' chunks through
 * the process's mappings, the init-time P2P write/read-back check, and teardown. See transport.h and docs/ipc.md.
 *
 * Every collective step carries each rank's status, so a rank that failed locally keeps taking part in the
 * exchanges and every rank returns an error instead of waiting for the one that gave up.
 */
#include "transport_internal.h"

#include "check.h"
#include "cudawrap.h"
#include "debug.h"
#include "param.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_IPC

#define HELLO_MAGIC 0x66636c7472616e73ull /* "fcltrans" */
#define CLAIM_ATTEMPTS 16                 /* slot agreements retried when concurrent inits of one process collide */
#define MAX_IMPORT_PIECES 4096

static const char* describeRank(const struct fcclTransport* t, int rank, char* text, size_t size) {
  const struct fcclTransportRankInfo* info = &t->peers[rank].info;
  snprintf(text, size, "rank %d (GPU %.*s, device %d, pid %d)", rank, FCCL_PCI_BUS_ID_BYTES, info->busId, info->dev,
           info->pid);
  return text;
}

/* ---- init ---- */

struct helloRecord {
  uint64_t magic;
  int32_t status;
  int32_t slotsPerChunk;
  uint64_t slotBytes;
  uint64_t random;
  struct fcclTransportRankInfo info;
  uint64_t freeSlots[FCCL_ARENA_BITMAP_WORDS];
};

struct exportRecord {
  int32_t status;
  int32_t claimed;
  int32_t kind;
  int32_t exportFd;
  uint64_t serial;
  uint64_t chunkBytes;
  uint64_t chunkPtr;
  uint8_t legacyHandle[sizeof(cudaIpcMemHandle_t)];
  char sockName[FCCL_FD_SOCKET_NAME_BYTES];
};

static fcclResult_t parseFdMode(int* mode) {
  const char* text = fcclParamString(FCCL_PARAM_FD_PASSING);
  if (strcasecmp(text, "auto") == 0) *mode = FCCL_FD_MODE_AUTO;
  else if (strcasecmp(text, "pidfd") == 0) *mode = FCCL_FD_MODE_PIDFD;
  else if (strcasecmp(text, "socket") == 0) *mode = FCCL_FD_MODE_SOCKET;
  else
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "FCCL_FD_PASSING=%s: expected auto, pidfd or socket",
                      text);
  return fcclSuccess;
}

static uint64_t checkValue(uint64_t seed, int slot, int writer) {
  return fcclMix64(seed ^ fcclMix64(((uint64_t)(uint32_t)slot << 32) | (uint32_t)writer)) | 1;
}

/* Peer access for ranks of this process on other GPUs (legacy chunks need it; cuMem chunks have access set). */
static fcclResult_t enablePeerAccess(struct fcclTransport* t, int p) {
  char a[96], b[96];
  int myDev = t->cfg.cudaDev, peerDev = t->peers[p].info.dev;
  int canAccess = 0;
  CUDACHECK(cudaDeviceCanAccessPeer(&canAccess, myDev, peerDev));
  if (!canAccess)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC, "%s cannot access the memory of %s peer-to-peer",
                      describeRank(t, t->cfg.rank, a, sizeof(a)), describeRank(t, p, b, sizeof(b)));
  cudaError_t err = cudaDeviceEnablePeerAccess(peerDev, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
  } else if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_IPC, "enabling peer access from %s to %s failed: %s",
                      describeRank(t, t->cfg.rank, a, sizeof(a)), describeRank(t, p, b, sizeof(b)),
                      cudaGetErrorString(err));
  }
  return fcclSuccess;
}

/* A GPU of another process: when it is visible here, P2P capability is checked by bus id (device ordinals of
 * other processes mean nothing here). The write/read-back check catches the rest. */
static fcclResult_t checkPeerCapable(struct fcclTransport* t, int p) {
  char a[96], b[96];
  char busId[FCCL_PCI_BUS_ID_BYTES + 1];
  memcpy(busId, t->peers[p].info.busId, FCCL_PCI_BUS_ID_BYTES);
  busId[FCCL_PCI_BUS_ID_BYTES] = '\0';
  int local = -1;
  if (cudaDeviceGetByPCIBusId(&local, busId) != cudaSuccess) {
    (void)cudaGetLastError();
    return fcclSuccess;
  }
  if (local == t->cfg.cudaDev) return fcclSuccess; /* two processes on one GPU */
  int canAccess = 0;
  CUDACHECK(cudaDeviceCanAccessPeer(&canAccess, t->cfg.cudaDev, local));
  if (!canAccess)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC, "%s cannot access the memory of %s peer-to-peer",
                      describeRank(t, t->cfg.rank, a, sizeof(a)), describeRank(t, p, b, sizeof(b)));
  return fcclSuccess;
}

/* The key of a peer's chunk, from what the peer said about itself and its chunk. */
static void chunkKey(const struct fcclTransportRankInfo* info, const struct exportRecord* rec, int importDev,
                     struct fcclMappingKey* key) {
  struct fcclProcessId owner = {.hostHash = info->hostHash, .nonce = info->processNonce, .pid = info->pid};
  struct fcclIpcAlloc alloc;
  memset(&alloc, 0, sizeof(alloc));
  alloc.kind = rec->kind;
  alloc.dev = info->dev;
  alloc.ptr = (void*)(uintptr_t)rec->chunkPtr;
  alloc.size = rec->chunkBytes;
  alloc.serial = rec->serial;
  alloc.exportFd = -1;
  memcpy(&alloc.legacyHandle, rec->legacyHandle, sizeof(alloc.legacyHandle));
  fcclIpcAllocKey(&owner, &alloc, importDev, key);
}

/* Agrees on a slot free on every rank and claims it; retried when a concurrent init of one process took it. */
static fcclResult_t agreeOnSlot(struct fcclTransport* t, fcclResult_t* local, struct helloRecord* hellos,
                                struct exportRecord* exports, const struct fcclFdSocket* sock, size_t slotBytes,
                                uint64_t myRandom) {
  const struct fcclTransportParams* cfg = &t->cfg;
  const int nranks = cfg->nranks, me = cfg->rank;
  uint64_t* bitmaps = calloc((size_t)nranks, FCCL_ARENA_BITMAP_WORDS * sizeof(uint64_t));
  fcclResult_t res = fcclSuccess;
  if (!bitmaps) {
    t->outOfStep = 1;
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
  }
  for (int attempt = 0;; attempt++) {
    struct helloRecord* mine = &hellos[me];
    memset(mine, 0, sizeof(*mine));
    mine->magic = HELLO_MAGIC;
    mine->status = *local;
    mine->slotsPerChunk = t->arena ? fcclArenaSlotsPerChunk(t->arena) : 0;
    mine->slotBytes = slotBytes;
    mine->random = myRandom;
    mine->info = t->peers[me].info;
    if (t->arena) fcclArenaFreeBitmap(t->arena, mine->freeSlots);
    FCCLCHECKGOTO(fcclTransportAllGather(t, hellos, sizeof(*hellos)), res, exit);

    for (int r = 0; r < nranks && *local == fcclSuccess; r++) {
      if (hellos[r].magic != HELLO_MAGIC) {
        *local = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "rank %d sent a malformed transport hello", r);
      } else if (hellos[r].status != fcclSuccess) {
        *local = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "rank %d failed before its transport setup (%s)", r,
                            fcclGetErrorString((fcclResult_t)hellos[r].status));
      } else if (hellos[r].slotBytes != slotBytes || hellos[r].slotsPerChunk != mine->slotsPerChunk) {
        *local = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC,
                            "rank %d uses %" PRIu64 "-byte slots, %d per chunk; rank %d uses %zu, %d (same fccl "
                            "version and FCCL_ARENA_SLOTS on every rank?)", r, hellos[r].slotBytes,
                            hellos[r].slotsPerChunk, me, slotBytes, mine->slotsPerChunk);
      } else {
        t->peers[r].info = hellos[r].info;
        memcpy(bitmaps + (size_t)r * FCCL_ARENA_BITMAP_WORDS, hellos[r].freeSlots, sizeof(hellos[r].freeSlots));
      }
    }
    /* Two ranks of one process on one GPU would share one arena (and its slots): refused, by every rank. */
    for (int r = 0; r < nranks && *local == fcclSuccess; r++)
      for (int q = 0; q < r && *local == fcclSuccess; q++)
        if (fcclTransportSameProcess(&hellos[r].info, &hellos[q].info) && hellos[r].info.dev == hellos[q].info.dev)
          *local = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC,
                              "ranks %d and %d use the same GPU (device %d) in one process (pid %d): give each rank "
                              "of a process its own GPU; ranks sharing a GPU must be separate processes", q, r,
                              hellos[r].info.dev, hellos[r].info.pid);
    int slot = -1, claimed = 0;
    if (*local == fcclSuccess) {
      slot = fcclArenaChooseSlot(bitmaps, nranks);
      *local = fcclArenaClaim(t->arena, slot, &claimed, &t->chunk);
    }
    struct exportRecord* rec = &exports[me];
    memset(rec, 0, sizeof(*rec));
    if (*local == fcclSuccess && claimed) {
      rec->kind = t->chunk.kind;
      rec->exportFd = t->chunk.exportFd;
      rec->serial = t->chunk.serial;
      rec->chunkBytes = t->chunk.size;
      rec->chunkPtr = (uint64_t)(uintptr_t)t->chunk.ptr;
      memcpy(rec->legacyHandle, &t->chunk.legacyHandle, sizeof(rec->legacyHandle));
    }
    rec->status = *local;
    rec->claimed = claimed;
    memcpy(rec->sockName, sock->name, sizeof(rec->sockName));
    res = fcclTransportAllGather(t, exports, sizeof(*exports));
    int allClaimed = res == fcclSuccess;
    for (int r = 0; res == fcclSuccess && r < nranks; r++) {
      if (exports[r].status != fcclSuccess && *local == fcclSuccess)
        *local = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "rank %d failed to take a shared-buffer slot (%s)", r,
                            fcclGetErrorString((fcclResult_t)exports[r].status));
      allClaimed = allClaimed && exports[r].claimed;
    }
    if (res == fcclSuccess && *local == fcclSuccess && allClaimed) {
      t->slot = slot;
      FCCL_INFO(FCCL_SUBSYS_IPC, "communicator %s takes arena slot %d of device %d (chunk %" PRIu64 ", %s)", cfg->name,
                slot, cfg->cudaDev, t->chunk.serial, t->chunk.kind == FCCL_MAPPING_CUMEM ? "cuMem" : "legacy IPC");
      goto exit;
    }
    if (claimed) (void)fcclArenaRelease(t->arena, slot, 0);
    if (res != fcclSuccess || *local != fcclSuccess) goto exit;
    if (attempt + 1 >= CLAIM_ATTEMPTS) {
      /* Every rank sees the same records, so every rank gives up at the same attempt. */
      *local = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC,
                          "ranks could not agree on a shared-buffer slot in %d attempts (concurrent inits of one "
                          "process kept taking it)", CLAIM_ATTEMPTS);
      goto exit;
    }
    FCCL_INFO(FCCL_SUBSYS_IPC, "slot %d was taken by a concurrent init on some rank: agreeing again", slot);
    usleep(1000u * (1u + (unsigned)(fcclMix64(myRandom + (uint64_t)attempt) % 5)));
  }
exit:
  free(bitmaps);
  return res;
}

/* Classifies every peer and maps (or borrows) its chunk. The result is the collective import's; *kept, this rank's
 * own bookkeeping after it. */
static fcclResult_t mapPeers(struct fcclTransport* t, fcclResult_t local, const struct exportRecord* exports,
                             struct fcclFdSocket* sock, struct fcclImportItem* items, uint64_t* pieceSizes,
                             fcclResult_t* kept) {
  const struct fcclTransportParams* cfg = &t->cfg;
  const int nranks = cfg->nranks, me = cfg->rank;
  char a[96], b[96];
  struct fcclTransportPeer* self = &t->peers[me];
  self->chunkBase = t->chunk.ptr;
  for (int p = 0; p < nranks && local == fcclSuccess; p++) {
    struct fcclTransportPeer* peer = &t->peers[p];
    items[p].sockName = exports[p].sockName;
    if (p == me) continue;
    if (peer->info.hostHash != self->info.hostHash) {
      local = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC,
                         "%s is on another host than %s: fccl maps peer memory within one host only",
                         describeRank(t, p, a, sizeof(a)), describeRank(t, me, b, sizeof(b)));
    } else if (fcclTransportSameProcess(&peer->info, &self->info)) {
      peer->sameProcess = 1;
      if (peer->info.dev == self->info.dev) {
        local = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC,
                           "%s and %s use the same GPU in one process: give each rank of a process its own GPU "
                           "(ranks sharing a GPU must be separate processes)",
                           describeRank(t, me, a, sizeof(a)), describeRank(t, p, b, sizeof(b)));
        break;
      }
      local = enablePeerAccess(t, p);
      if (local != fcclSuccess) break;
      local = fcclArenaProcess(peer->info.dev, fcclArenaSlotBytes(t->arena), &peer->peerArena);
      if (local != fcclSuccess) break;
      local = fcclArenaBorrow(peer->peerArena, t->slot, exports[p].serial, &peer->chunkBase);
      if (local != fcclSuccess) break;
      peer->borrowed = 1;
      if ((uint64_t)(uintptr_t)peer->chunkBase != exports[p].chunkPtr)
        local = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC, "rank %d's chunk is at %p here, it says 0x%" PRIx64, p,
                           peer->chunkBase, exports[p].chunkPtr);
    } else {
      local = checkPeerCapable(t, p);
      if (local != fcclSuccess) break;
      if (exports[p].kind != FCCL_MAPPING_CUMEM && exports[p].kind != FCCL_MAPPING_LEGACY_IPC) {
        local = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "rank %d exports a buffer of unknown kind %d", p,
                           exports[p].kind);
        break;
      }
      if (exports[p].chunkBytes < fcclArenaChunkBytes(t->arena)) {
        local = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "rank %d's chunk has %" PRIu64 " bytes, fewer than %zu",
                           p, exports[p].chunkBytes, fcclArenaChunkBytes(t->arena));
        break;
      }
      struct fcclImportItem* item = &items[p];
      item->active = 1;
      chunkKey(&peer->info, &exports[p], cfg->cudaDev, &item->key);
      item->size = exports[p].chunkBytes;
      item->pieces = 1;
      item->remoteFds = &exports[p].exportFd;
      pieceSizes[p] = exports[p].chunkBytes;
      item->pieceSizes = &pieceSizes[p];
      item->pid = peer->info.pid;
    }
  }
  int myFd = t->chunk.exportFd;
  fcclResult_t res = fcclTransportImport(t, items, &myFd, t->chunk.kind == FCCL_MAPPING_CUMEM ? 1 : 0, local, sock);
  if (res != fcclSuccess) return res;
  /* Each mapping's reference goes to the peer's arena, which holds one per chunk for as long as a communicator of
   * this process uses the arena: a later communicator over these ranks finds its chunk mapped (docs/ipc.md). A
   * failure here is this rank's alone: it is carried into the next step (the P2P check), which every rank takes. */
  *kept = fcclSuccess;
  for (int p = 0; p < nranks; p++) {
    if (!items[p].active) continue;
    struct fcclTransportPeer* peer = &t->peers[p];
    peer->key = items[p].key;
    peer->mappedBytes = items[p].size;
    peer->chunkBase = items[p].base;
    items[p].held = 0;
    struct fcclPeerArenaId id;
    memset(&id, 0, sizeof(id));
    id.hostHash = peer->info.hostHash;
    id.processNonce = peer->info.processNonce;
    id.pid = peer->info.pid;
    id.dev = peer->info.dev;
    id.slotBytes = fcclArenaSlotBytes(t->arena);
    id.importDev = cfg->cudaDev;
    fcclResult_t used = fcclPeerArenaUse(t->mappings, &id, &peer->remoteArena);
    if (used == fcclSuccess)
      used = fcclPeerArenaKeep(peer->remoteArena, &peer->key);
    else
      (void)fcclMappingsRelease(t->mappings, &peer->key);
    if (*kept == fcclSuccess) *kept = used;
  }
  return fcclSuccess;
}

/* A value written through each mapping is read back by its owner. */
static fcclResult_t checkP2P(struct fcclTransport* t, fcclResult_t local, uint64_t seed) {
  const struct fcclTransportParams* cfg = &t->cfg;
  const int nranks = cfg->nranks, me = cfg->rank;
  fcclResult_t res = fcclSuccess;
  cudaStream_t stream = NULL;
  uint64_t mine = checkValue(seed, t->slot, me);
  uint64_t* seen = calloc((size_t)nranks, sizeof(uint64_t));
  const size_t recordBytes = sizeof(int64_t) + ((size_t)nranks + 7) / 8 * 8;
  uint8_t* records = calloc((size_t)nranks, recordBytes);
  char a[96], b[96];
  if (!seen || !records) {
    t->outOfStep = 1; /* the peers go on to the barrier without us */
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
    goto exit;
  }
  if (local == fcclSuccess) {
    cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    char* own = (char*)t->chunk.ptr + fcclArenaCheckOffset(t->arena, t->slot, me);
    if (err == cudaSuccess) err = cudaMemcpyAsync(own, &mine, sizeof(mine), cudaMemcpyHostToDevice, stream);
    for (int p = 0; p < nranks && err == cudaSuccess; p++) {
      if (p == me) continue;
      char* remote = (char*)t->peers[p].chunkBase + fcclArenaCheckOffset(t->arena, t->slot, me);
      err = cudaMemcpyAsync(remote, own, sizeof(mine), cudaMemcpyDeviceToDevice, stream);
      if (err != cudaSuccess)
        local = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_IPC, "P2P check: copy from %s into the memory of %s "
                           "failed: %s", describeRank(t, me, a, sizeof(a)), describeRank(t, p, b, sizeof(b)),
                           cudaGetErrorString(err));
    }
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess && local == fcclSuccess)
      local = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_IPC, "P2P check on %s failed: %s",
                         describeRank(t, me, a, sizeof(a)), cudaGetErrorString(err));
    (void)cudaGetLastError();
  }
  FCCLCHECKGOTO(fcclTransportBarrier(t), res, exit);
  uint8_t* failed = records + (size_t)me * recordBytes + sizeof(int64_t);
  if (local == fcclSuccess) {
    const char* base = (const char*)t->chunk.ptr + fcclArenaCheckOffset(t->arena, t->slot, 0);
    cudaError_t err = cudaMemcpyAsync(seen, base, (size_t)nranks * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      local = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_IPC, "P2P check: reading back on %s failed: %s",
                         describeRank(t, me, a, sizeof(a)), cudaGetErrorString(err));
    }
    for (int p = 0; p < nranks && local == fcclSuccess; p++)
      failed[p] = p != me && seen[p] != checkValue(seed, t->slot, p);
  }
  int64_t status = local;
  memcpy(records + (size_t)me * recordBytes, &status, sizeof(status));
  FCCLCHECKGOTO(fcclTransportAllGather(t, records, recordBytes), res, exit);
  if (local != fcclSuccess) {
    res = local;
    goto exit;
  }
  for (int owner = 0; owner < nranks && res == fcclSuccess; owner++) {
    memcpy(&status, records + (size_t)owner * recordBytes, sizeof(status));
    if (status != fcclSuccess) {
      res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "rank %d failed its P2P check (%s)", owner,
                       fcclGetErrorString((fcclResult_t)status));
      break;
    }
    for (int writer = 0; writer < nranks; writer++) {
      if (!records[(size_t)owner * recordBytes + sizeof(int64_t) + (size_t)writer]) continue;
      res = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_IPC,
                       "P2P check failed: a value written by %s into the memory of %s did not arrive (broken "
                       "peer-to-peer path: IOMMU/ACS, virtualisation, or a driver problem)",
                       describeRank(t, writer, a, sizeof(a)), describeRank(t, owner, b, sizeof(b)));
      break;
    }
  }
exit:
  if (stream) CUDACHECKIGNORE(cudaStreamDestroy(stream));
  free(records);
  free(seen);
  return res;
}

/* Drops every peer's mapping and loan; a failure does not stop the others. The first error goes to *res. */
static void releasePeers(struct fcclTransport* t, fcclResult_t* res) {
  for (int p = 0; p < t->cfg.nranks; p++) {
    struct fcclTransportPeer* peer = &t->peers[p];
    fcclResult_t released = peer->remoteArena ? fcclPeerArenaDone(peer->remoteArena) : fcclSuccess;
    peer->remoteArena = NULL;
    fcclResult_t returned = peer->borrowed ? fcclArenaUnborrow(peer->peerArena, t->slot) : fcclSuccess;
    peer->borrowed = 0;
    if (*res == fcclSuccess) *res = released != fcclSuccess ? released : returned;
  }
}

static void freeTransport(struct fcclTransport* t) {
  if (!t) return;
  free(t->peers);
  free(t);
}

fcclResult_t fcclTransportInit(const struct fcclTransportParams* params, struct fcclTransport** out) {
  if (!params || !out || !params->ex.allGather || !params->ex.barrier)
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC, "transport init without parameters or exchange");
  if (params->nranks < 1 || params->nranks > FCCL_ARENA_CHECK_RANKS || params->rank < 0 ||
      params->rank >= params->nranks)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC, "transport: rank %d of %d (at most %d ranks share memory)",
                      params->rank, params->nranks, FCCL_ARENA_CHECK_RANKS);
  const size_t slotBytes = params->slotBytes;
  if (slotBytes == 0) return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC, "transport init with 0-byte slots");
  fcclResult_t res = fcclSuccess;
  fcclResult_t local = fcclSuccess;
  const int nranks = params->nranks, me = params->rank;
  struct fcclTransport* t = calloc(1, sizeof(*t));
  struct helloRecord* hellos = calloc((size_t)nranks, sizeof(*hellos));
  struct exportRecord* exports = calloc((size_t)nranks, sizeof(*exports));
  struct fcclImportItem* items = calloc((size_t)nranks, sizeof(*items));
  uint64_t* pieceSizes = calloc((size_t)nranks, sizeof(uint64_t));
  struct fcclFdSocket sock = {.fd = -1};
  int previous = -1;
  if (t) t->peers = calloc((size_t)nranks, sizeof(*t->peers));
  if (!t || !t->peers || !hellos || !exports || !items || !pieceSizes) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
    goto fail;
  }
  t->cfg = *params;
  snprintf(t->name, sizeof(t->name), "%s", params->name ? params->name : "");
  t->cfg.name = t->name;
  t->slot = -1;
  const struct fcclTransportParams* cfg = &t->cfg;

  /* Local preparation: a failure here is carried into the first exchange so that the peers fail too. */
  local = parseFdMode(&t->fdMode);
  if (local == fcclSuccess) local = fcclCudaDriverLoad();
  if (local == fcclSuccess) local = fcclIpcSetDevice(cfg->cudaDev, &previous);
  if (local == fcclSuccess) local = fcclMappingsProcess(&t->mappings);
  if (local == fcclSuccess) local = fcclArenaProcess(cfg->cudaDev, slotBytes, &t->arena);
  if (local == fcclSuccess && t->fdMode != FCCL_FD_MODE_PIDFD) local = fcclFdSocketOpen(&sock);
  struct fcclTransportRankInfo* self = &t->peers[me].info;
  const struct fcclProcessId* process = fcclProcessIdentity();
  self->hostHash = process->hostHash;
  self->processNonce = process->nonce;
  self->pid = process->pid;
  self->dev = cfg->cudaDev;
  if (local == fcclSuccess && cudaDeviceGetPCIBusId(self->busId, FCCL_PCI_BUS_ID_BYTES, cfg->cudaDev) != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(self->busId, sizeof(self->busId), "dev%d", cfg->cudaDev);
  }
  uint64_t myRandom = fcclRandom64();
  FCCLCHECKGOTO(agreeOnSlot(t, &local, hellos, exports, &sock, slotBytes, myRandom), res, fail);
  if (local != fcclSuccess) {
    res = local;
    goto fail;
  }
  uint64_t seed = 0;
  for (int r = 0; r < nranks; r++) seed ^= fcclMix64(hellos[r].random + (uint64_t)r);
  t->tagSeed = seed;

  fcclResult_t kept = fcclSuccess;
  FCCLCHECKGOTO(mapPeers(t, local, exports, &sock, items, pieceSizes, &kept), res, releaseSlot);
  for (int p = 0; p < nranks; p++)
    t->peers[p].slot = (char*)t->peers[p].chunkBase + fcclArenaSlotOffset(t->arena, t->slot);
  FCCLCHECKGOTO(checkP2P(t, kept, seed), res, releaseSlot);

  fcclFdSocketClose(&sock);
  fcclIpcRestoreDevice(previous);
  free(hellos);
  free(exports);
  free(items);
  free(pieceSizes);
  __atomic_store_n(out, t, __ATOMIC_RELEASE); /* fcclTransportGetStats may read it from any thread */
  FCCL_INFO(FCCL_SUBSYS_IPC, "transport of %s ready: rank %d of %d, slot %d (%zu bytes)", cfg->name, me, nranks,
            t->slot, slotBytes);
  return fcclSuccess;

releaseSlot:
  /* Every rank learned of the failure in the same step and releases its mappings; our chunk may be freed only
   * once they all have (close, barrier, free, as at teardown). Where the ranks cannot meet any more the slot is
   * quarantined, and a legacy-IPC chunk may be freed under a peer's mapping (docs/ipc.md, Known caveats). */
  releasePeers(t, &local);
  (void)fcclArenaRelease(t->arena, t->slot, !fcclTransportSettle(t));
fail:
  fcclFdSocketClose(&sock);
  if (previous >= 0) fcclIpcRestoreDevice(previous);
  freeTransport(t);
  free(hellos);
  free(exports);
  free(items);
  free(pieceSizes);
  return res;
}

fcclResult_t fcclTransportFini(struct fcclTransport* t) {
  if (!t) return fcclSuccess;
  const struct fcclTransportParams* cfg = &t->cfg;
  fcclResult_t res = fcclSuccess;
  int quarantine = 0;
  int previous = -1;
  /* Host state is released even when the device cannot be made current; the error is returned at the end. */
  fcclResult_t deviceRes = fcclIpcSetDevice(cfg->cudaDev, &previous);
  if (deviceRes != fcclSuccess) previous = -1;
  /* Aborted, or an earlier exchange failed: the peers may never come, so nothing waits for them. */
  int reachable = fcclTransportInStep(t);
  if (!reachable) {
    quarantine = 1;
  } else {
    res = fcclTransportBarrier(t);
    quarantine = res != fcclSuccess;
  }
  fcclResult_t released = fcclTransportReleaseRegistrations(t);
  fcclResult_t graphs = fcclTransportReleaseGraphRegistrations(t, 1);
  if (released == fcclSuccess) released = graphs;
  releasePeers(t, &released);
  if (!quarantine) {
    res = fcclTransportBarrier(t);
    quarantine = res != fcclSuccess;
  }
  if (quarantine)
    FCCL_WARN(FCCL_SUBSYS_IPC, "communicator %s torn down without %s: slot %d of device %d is not reused",
              cfg->name, reachable ? "all its peers" : t->outOfStep ? "its peers (an earlier exchange failed)"
                                                                     : "its peers (aborted)",
              t->slot, cfg->cudaDev);
  fcclResult_t freed = fcclArenaRelease(t->arena, t->slot, quarantine);
  if (res == fcclSuccess) res = released;
  if (res == fcclSuccess) res = freed;
  if (res == fcclSuccess) res = deviceRes;
  if (previous >= 0) fcclIpcRestoreDevice(previous);
  freeTransport(t);
  return res;
}

void* fcclTransportPeerSlot(struct fcclTransport* t, int peer) {
  if (!t || peer < 0 || peer >= t->cfg.nranks) return NULL;
  return t->peers[peer].slot;
}

size_t fcclTransportSlotBytes(struct fcclTransport* t) { return t ? fcclArenaSlotBytes(t->arena) : 0; }

int fcclTransportSlotIndex(struct fcclTransport* t) { return t ? t->slot : -1; }

void fcclTransportGetStats(struct fcclTransport* t, struct fcclTransportStats* stats) {
  memset(stats, 0, sizeof(*stats));
  struct fcclMappings* mappings = fcclMappingsProcessIfCreated();
  if (mappings) {
    struct fcclMappingsStats rs;
    fcclMappingsGetStats(mappings, &rs);
    stats->openMappings = rs.openMappings;
    stats->mappingReferences = rs.references;
    stats->bytesMapped = rs.bytesMapped;
    stats->totalOpens = rs.totalOpens;
    stats->totalCloses = rs.totalCloses;
  }
  fcclArenaProcessStats(&stats->arenaChunks, &stats->arenaBytes);
  if (!t) return;
  stats->registrations = __atomic_load_n(&t->nRegistrations, __ATOMIC_RELAXED);
  stats->graphRegistrations = __atomic_load_n(&t->nGraphRegistrations, __ATOMIC_RELAXED);
  /* The chunk as allocated (rounded up to the granularity), shared by its slots. Fixed once init returned. */
  stats->deviceBytes = t->chunk.size / (size_t)fcclArenaSlotsPerChunk(t->arena);
  for (int p = 0; p < t->cfg.nranks; p++) stats->peerBytes += t->peers[p].mappedBytes;
}
