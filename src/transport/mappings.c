/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reference-counted table of peer mappings (see mappings.h). A hash table of entries keyed by
 * struct fcclMappingKey; one mutex guards the table and is held across open and close so that a key is never
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

#define MAPPING_BUCKETS 256

_Static_assert(sizeof(struct fcclCuMemId) == FCCL_MAPPING_ID_BYTES, "a cuMem id fills the key's id bytes exactly");
_Static_assert(sizeof(struct fcclMappingKey) == 8 + FCCL_MAPPING_ID_BYTES, "keys are compared bytewise: no padding");

struct fcclMappingEntry {
  struct fcclMappingKey key;
  size_t size;
  void* base;
  void* opaque;
  uint64_t refs;
  struct fcclMappingEntry* next;
};

struct fcclMappings {
  struct fcclMappingsOps ops;
  pthread_mutex_t lock;
  struct fcclMappingEntry* buckets[MAPPING_BUCKETS];
  struct fcclMappingsStats stats;
};

static uint64_t keyHash(const struct fcclMappingKey* key) {
  /* FNV-1a over the whole key */
  const uint8_t* bytes = (const uint8_t*)key;
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof(*key); i++) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

static struct fcclMappingEntry** findSlot(struct fcclMappings* mappings, const struct fcclMappingKey* key) {
  struct fcclMappingEntry** slot = &mappings->buckets[keyHash(key) % MAPPING_BUCKETS];
  while (*slot && memcmp(&(*slot)->key, key, sizeof(*key)) != 0) slot = &(*slot)->next;
  return slot;
}

const char* fcclMappingKeyDescribe(const struct fcclMappingKey* key, char* text, size_t textSize) {
  if (key->kind == FCCL_MAPPING_CUMEM) {
    struct fcclCuMemId id;
    memcpy(&id, key->id, sizeof(id));
    snprintf(text, textSize, "cumem[host %016" PRIx64 " pid %d dev %d serial %" PRIu64 " pieces %u] on dev %d",
             id.hostHash, id.pid, id.dev, id.serial, id.pieces, key->importDev);
  } else if (key->kind == FCCL_MAPPING_LEGACY_IPC) {
    char hex[2 * 16 + 1];
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", key->id[i]);
    snprintf(text, textSize, "legacy[%s..] on dev %d", hex, key->importDev);
  } else {
    snprintf(text, textSize, "unknown kind %u", key->kind);
  }
  return text;
}

fcclResult_t fcclMappingsCreate(const struct fcclMappingsOps* ops, struct fcclMappings** mappings) {
  if (!ops || !ops->open || !ops->close || !mappings)
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_IPC, "fcclMappingsCreate: incomplete operations");
  struct fcclMappings* created = calloc(1, sizeof(*created));
  if (!created) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory for a table of peer mappings");
  created->ops = *ops;
  pthread_mutex_init(&created->lock, NULL);
  *mappings = created;
  return fcclSuccess;
}

static fcclResult_t closeEntry(struct fcclMappings* mappings, struct fcclMappingEntry* entry) {
  char text[160];
  fcclResult_t res = mappings->ops.close(mappings->ops.ctx, &entry->key, entry->size, entry->base, entry->opaque);
  mappings->stats.openMappings--;
  mappings->stats.bytesMapped -= entry->size;
  mappings->stats.totalCloses++;
  FCCL_INFO(FCCL_SUBSYS_IPC, "closed %s: %zu bytes at %p (%" PRIu64 " mappings open)%s",
            fcclMappingKeyDescribe(&entry->key, text, sizeof(text)), entry->size, entry->base,
            mappings->stats.openMappings, res == fcclSuccess ? "" : " - close failed");
  free(entry);
  return res;
}

fcclResult_t fcclMappingsDestroy(struct fcclMappings* mappings) {
  if (!mappings) return fcclSuccess;
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&mappings->lock);
  for (int b = 0; b < MAPPING_BUCKETS; b++) {
    while (mappings->buckets[b]) {
      struct fcclMappingEntry* entry = mappings->buckets[b];
      char text[160];
      mappings->buckets[b] = entry->next;
      FCCL_WARN(FCCL_SUBSYS_IPC,
                "table of peer mappings destroyed with %s still open (%" PRIu64 " references): closing it",
                fcclMappingKeyDescribe(&entry->key, text, sizeof(text)), entry->refs);
      mappings->stats.references -= entry->refs;
      (void)closeEntry(mappings, entry);
      res = fcclInvalidUsage;
    }
  }
  pthread_mutex_unlock(&mappings->lock);
  pthread_mutex_destroy(&mappings->lock);
  free(mappings);
  return res;
}

/* Another reference on an open entry, unless the caller describes it with another size (corrupt input: one
 * identity, two sizes; the mapping is left untouched). Called with the lock held. */
static fcclResult_t reuseEntryLocked(struct fcclMappings* mappings, struct fcclMappingEntry* entry, size_t size,
                                     void** base) {
  char text[160];
  if (entry->size != size)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC,
                      "%s is mapped with %zu bytes but a peer now describes it with %zu bytes",
                      fcclMappingKeyDescribe(&entry->key, text, sizeof(text)), entry->size, size);
  entry->refs++;
  mappings->stats.references++;
  *base = entry->base;
  FCCL_TRACE(FCCL_SUBSYS_IPC, "reused %s at %p (references %" PRIu64 ")",
             fcclMappingKeyDescribe(&entry->key, text, sizeof(text)), entry->base, entry->refs);
  return fcclSuccess;
}

fcclResult_t fcclMappingsRetain(struct fcclMappings* mappings, const struct fcclMappingKey* key, size_t size,
                                void** base, int* found) {
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&mappings->lock);
  struct fcclMappingEntry* entry = *findSlot(mappings, key);
  *found = 0;
  if (entry) {
    res = reuseEntryLocked(mappings, entry, size, base);
    *found = res == fcclSuccess;
  }
  pthread_mutex_unlock(&mappings->lock);
  return res;
}

fcclResult_t fcclMappingsAcquire(struct fcclMappings* mappings, const struct fcclMappingKey* key, size_t size,
                                 const void* arg, void** base) {
  char text[160];
  fcclResult_t res = fcclSuccess;
  if (size == 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "mapping of %s requested with size 0",
                      fcclMappingKeyDescribe(key, text, sizeof(text)));
  pthread_mutex_lock(&mappings->lock);
  struct fcclMappingEntry** slot = findSlot(mappings, key);
  struct fcclMappingEntry* entry = *slot;
  if (entry) {
    res = reuseEntryLocked(mappings, entry, size, base);
    goto unlock;
  }
  entry = calloc(1, sizeof(*entry));
  if (!entry) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory for a mapping's entry");
    goto unlock;
  }
  entry->key = *key;
  entry->size = size;
  res = mappings->ops.open(mappings->ops.ctx, key, size, arg, &entry->base, &entry->opaque);
  if (res != fcclSuccess) {
    free(entry);
    goto unlock;
  }
  entry->refs = 1;
  *slot = entry;
  mappings->stats.openMappings++;
  mappings->stats.references++;
  mappings->stats.bytesMapped += size;
  mappings->stats.totalOpens++;
  *base = entry->base;
  FCCL_INFO(FCCL_SUBSYS_IPC, "opened %s: %zu bytes at %p (%" PRIu64 " mappings open)",
            fcclMappingKeyDescribe(key, text, sizeof(text)), size, entry->base, mappings->stats.openMappings);
unlock:
  pthread_mutex_unlock(&mappings->lock);
  return res;
}

fcclResult_t fcclMappingsRelease(struct fcclMappings* mappings, const struct fcclMappingKey* key) {
  char text[160];
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&mappings->lock);
  struct fcclMappingEntry** slot = findSlot(mappings, key);
  struct fcclMappingEntry* entry = *slot;
  if (!entry) {
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "release of %s, which is not mapped",
                     fcclMappingKeyDescribe(key, text, sizeof(text)));
  } else {
    entry->refs--;
    mappings->stats.references--;
    if (entry->refs == 0) {
      *slot = entry->next;
      res = closeEntry(mappings, entry);
    }
  }
  pthread_mutex_unlock(&mappings->lock);
  return res;
}

fcclResult_t fcclMappingsPointer(struct fcclMappings* mappings, const struct fcclMappingKey* key, size_t offset,
                                 size_t bytes, void** ptr) {
  char text[160];
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&mappings->lock);
  struct fcclMappingEntry* entry = *findSlot(mappings, key);
  if (!entry) {
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "%s is not mapped",
                     fcclMappingKeyDescribe(key, text, sizeof(text)));
  } else if (offset > entry->size || bytes > entry->size - offset) {
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_IPC, "bytes [%zu, %zu + %zu) lie outside the %zu bytes of %s",
                     offset, offset, bytes, entry->size, fcclMappingKeyDescribe(key, text, sizeof(text)));
  } else {
    *ptr = (char*)entry->base + offset;
  }
  pthread_mutex_unlock(&mappings->lock);
  return res;
}

uint64_t fcclMappingsRefs(struct fcclMappings* mappings, const struct fcclMappingKey* key) {
  pthread_mutex_lock(&mappings->lock);
  struct fcclMappingEntry* entry = *findSlot(mappings, key);
  uint64_t refs = entry ? entry->refs : 0;
  pthread_mutex_unlock(&mappings->lock);
  return refs;
}

void fcclMappingsGetStats(struct fcclMappings* mappings, struct fcclMappingsStats* stats) {
  pthread_mutex_lock(&mappings->lock);
  *stats = mappings->stats;
  pthread_mutex_unlock(&mappings->lock);
}
