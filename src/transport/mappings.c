/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reference-counted registry of peer mappings (see mappings.h). A hash table of entries keyed by
 * struct fcclRegKey; one mutex guards the table and is held across open and close so that a key is never
 * opened twice and a close never races a retain.
 */
#include "mappings.h"

#include "check.h"
#include "debug.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_IPC

#define REGISTRY_BUCKETS 256

_Static_assert(sizeof(struct fcclCuMemId) == FCCL_REG_ID_BYTES, "a cuMem id fills the key's id bytes exactly");
_Static_assert(sizeof(struct fcclRegKey) == 8 + FCCL_REG_ID_BYTES, "keys are compared bytewise: no padding");

struct fcclRegEntry {
  struct fcclRegKey key;
  size_t size;
  void* base;
  void* opaque;
  uint64_t refs;
  struct fcclRegEntry* next;
};

struct fcclRegistry {
  struct fcclRegistryOps ops;
  pthread_mutex_t lock;
  struct fcclRegEntry* buckets[REGISTRY_BUCKETS];
  struct fcclRegistryStats stats;
};

static uint64_t keyHash(const struct fcclRegKey* key) {
  /* FNV-1a over the whole key */
  const uint8_t* bytes = (const uint8_t*)key;
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof(*key); i++) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

static struct fcclRegEntry** findSlot(struct fcclRegistry* registry, const struct fcclRegKey* key) {
  struct fcclRegEntry** slot = &registry->buckets[keyHash(key) % REGISTRY_BUCKETS];
  while (*slot && memcmp(&(*slot)->key, key, sizeof(*key)) != 0) slot = &(*slot)->next;
  return slot;
}

const char* fcclRegKeyDescribe(const struct fcclRegKey* key, char* text, size_t textSize) {
  if (key->kind == FCCL_REG_CUMEM) {
    struct fcclCuMemId id;
    memcpy(&id, key->id, sizeof(id));
    snprintf(text, textSize, "cumem[host %016" PRIx64 " pid %d dev %d serial %" PRIu64 " pieces %u] on dev %d",
             id.hostHash, id.pid, id.dev, id.serial, id.pieces, key->importDev);
  } else if (key->kind == FCCL_REG_LEGACY_IPC) {
    char hex[2 * 16 + 1];
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", key->id[i]);
    snprintf(text, textSize, "legacy[%s..] on dev %d", hex, key->importDev);
  } else {
    snprintf(text, textSize, "unknown kind %u", key->kind);
  }
  return text;
}

fcclResult_t fcclRegistryCreate(const struct fcclRegistryOps* ops, struct fcclRegistry** registry) {
  if (!ops || !ops->open || !ops->close || !registry)
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC, "fcclRegistryCreate: incomplete operations");
  struct fcclRegistry* created = calloc(1, sizeof(*created));
  if (!created) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory for the IPC registry");
  created->ops = *ops;
  pthread_mutex_init(&created->lock, NULL);
  *registry = created;
  return fcclSuccess;
}

static fcclResult_t closeEntry(struct fcclRegistry* registry, struct fcclRegEntry* entry) {
  char text[160];
  fcclResult_t res = registry->ops.close(registry->ops.ctx, &entry->key, entry->size, entry->base, entry->opaque);
  registry->stats.openMappings--;
  registry->stats.bytesMapped -= entry->size;
  registry->stats.totalCloses++;
  FCCL_INFO(FCCL_SUBSYS_IPC, "closed %s: %zu bytes at %p (%" PRIu64 " mappings open)%s",
            fcclRegKeyDescribe(&entry->key, text, sizeof(text)), entry->size, entry->base,
            registry->stats.openMappings, res == fcclSuccess ? "" : " - close failed");
  free(entry);
  return res;
}

fcclResult_t fcclRegistryDestroy(struct fcclRegistry* registry) {
  if (!registry) return fcclSuccess;
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&registry->lock);
  for (int b = 0; b < REGISTRY_BUCKETS; b++) {
    while (registry->buckets[b]) {
      struct fcclRegEntry* entry = registry->buckets[b];
      char text[160];
      registry->buckets[b] = entry->next;
      FCCL_WARN(FCCL_SUBSYS_IPC, "registry destroyed with %s still open (%" PRIu64 " references): closing it",
                fcclRegKeyDescribe(&entry->key, text, sizeof(text)), entry->refs);
      registry->stats.references -= entry->refs;
      (void)closeEntry(registry, entry);
      res = fcclInvalidUsage;
    }
  }
  pthread_mutex_unlock(&registry->lock);
  pthread_mutex_destroy(&registry->lock);
  free(registry);
  return res;
}

/* Another reference on an open entry, unless the caller describes it with another size (corrupt input: one
 * identity, two sizes; the mapping is left untouched). Called with the lock held. */
static fcclResult_t reuseEntryLocked(struct fcclRegistry* registry, struct fcclRegEntry* entry, size_t size,
                                     void** base) {
  char text[160];
  if (entry->size != size)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                      "%s is mapped with %zu bytes but a peer now describes it with %zu bytes",
                      fcclRegKeyDescribe(&entry->key, text, sizeof(text)), entry->size, size);
  entry->refs++;
  registry->stats.references++;
  *base = entry->base;
  FCCL_TRACE(FCCL_SUBSYS_IPC, "reused %s at %p (references %" PRIu64 ")",
             fcclRegKeyDescribe(&entry->key, text, sizeof(text)), entry->base, entry->refs);
  return fcclSuccess;
}

fcclResult_t fcclRegistryRetain(struct fcclRegistry* registry, const struct fcclRegKey* key, size_t size,
                                void** base, int* found) {
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&registry->lock);
  struct fcclRegEntry* entry = *findSlot(registry, key);
  *found = 0;
  if (entry) {
    res = reuseEntryLocked(registry, entry, size, base);
    *found = res == fcclSuccess;
  }
  pthread_mutex_unlock(&registry->lock);
  return res;
}

fcclResult_t fcclRegistryAcquire(struct fcclRegistry* registry, const struct fcclRegKey* key, size_t size,
                                 const void* arg, void** base) {
  char text[160];
  fcclResult_t res = fcclSuccess;
  if (size == 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "mapping of %s requested with size 0",
                      fcclRegKeyDescribe(key, text, sizeof(text)));
  pthread_mutex_lock(&registry->lock);
  struct fcclRegEntry** slot = findSlot(registry, key);
  struct fcclRegEntry* entry = *slot;
  if (entry) {
    res = reuseEntryLocked(registry, entry, size, base);
    goto unlock;
  }
  entry = calloc(1, sizeof(*entry));
  if (!entry) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory for a registry entry");
    goto unlock;
  }
  entry->key = *key;
  entry->size = size;
  res = registry->ops.open(registry->ops.ctx, key, size, arg, &entry->base, &entry->opaque);
  if (res != fcclSuccess) {
    free(entry);
    goto unlock;
  }
  entry->refs = 1;
  *slot = entry;
  registry->stats.openMappings++;
  registry->stats.references++;
  registry->stats.bytesMapped += size;
  registry->stats.totalOpens++;
  *base = entry->base;
  FCCL_INFO(FCCL_SUBSYS_IPC, "opened %s: %zu bytes at %p (%" PRIu64 " mappings open)",
            fcclRegKeyDescribe(key, text, sizeof(text)), size, entry->base, registry->stats.openMappings);
unlock:
  pthread_mutex_unlock(&registry->lock);
  return res;
}

fcclResult_t fcclRegistryRelease(struct fcclRegistry* registry, const struct fcclRegKey* key) {
  char text[160];
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&registry->lock);
  struct fcclRegEntry** slot = findSlot(registry, key);
  struct fcclRegEntry* entry = *slot;
  if (!entry) {
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "release of %s, which is not mapped",
                     fcclRegKeyDescribe(key, text, sizeof(text)));
  } else {
    entry->refs--;
    registry->stats.references--;
    if (entry->refs == 0) {
      *slot = entry->next;
      res = closeEntry(registry, entry);
    }
  }
  pthread_mutex_unlock(&registry->lock);
  return res;
}

fcclResult_t fcclRegistryPointer(struct fcclRegistry* registry, const struct fcclRegKey* key, size_t offset,
                                 size_t bytes, void** ptr) {
  char text[160];
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&registry->lock);
  struct fcclRegEntry* entry = *findSlot(registry, key);
  if (!entry) {
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "%s is not mapped",
                     fcclRegKeyDescribe(key, text, sizeof(text)));
  } else if (offset > entry->size || bytes > entry->size - offset) {
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                     "bytes [%zu, %zu + %zu) lie outside the %zu bytes of %s", offset, offset, bytes, entry->size,
                     fcclRegKeyDescribe(key, text, sizeof(text)));
  } else {
    *ptr = (char*)entry->base + offset;
  }
  pthread_mutex_unlock(&registry->lock);
  return res;
}

uint64_t fcclRegistryRefs(struct fcclRegistry* registry, const struct fcclRegKey* key) {
  pthread_mutex_lock(&registry->lock);
  struct fcclRegEntry* entry = *findSlot(registry, key);
  uint64_t refs = entry ? entry->refs : 0;
  pthread_mutex_unlock(&registry->lock);
  return refs;
}

void fcclRegistryGetStats(struct fcclRegistry* registry, struct fcclRegistryStats* stats) {
  pthread_mutex_lock(&registry->lock);
  *stats = registry->stats;
  pthread_mutex_unlock(&registry->lock);
}
