/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The communicators' table: the real ncclComm_t is the key (every handle this library gives out is NCCL's own),
 * the value what this library knows of it. A chained hash table under one reader-writer lock: lookups (every
 * collective, and ncclCommGetAsyncError from a watchdog thread while the owner works) share it; adding and
 * removing a communicator, which NCCL does not allow concurrently with other calls on it, takes it alone, so an
 * entry is never freed while a reader uses it.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define BUCKETS 1024 /* a power of 2 */

static pthread_rwlock_t tableLock = PTHREAD_RWLOCK_INITIALIZER;
static struct fncclComm* buckets[BUCKETS];
static int count;

static size_t bucketOf(ncclComm_t nccl) {
  uint64_t key = (uint64_t)(uintptr_t)nccl;
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdull;
  key ^= key >> 33;
  return (size_t)(key & (BUCKETS - 1));
}

struct fncclComm* fncclTableFind(ncclComm_t nccl) {
  if (nccl == NULL) return NULL;
  pthread_rwlock_rdlock(&tableLock);
  for (struct fncclComm* c = buckets[bucketOf(nccl)]; c; c = c->next)
    if (c->nccl == nccl) return c;
  pthread_rwlock_unlock(&tableLock);
  return NULL;
}

void fncclTableRelease(void) { pthread_rwlock_unlock(&tableLock); }

struct fncclComm* fncclTableRemove(ncclComm_t nccl) {
  if (nccl == NULL) return NULL;
  pthread_rwlock_wrlock(&tableLock);
  struct fncclComm** link = &buckets[bucketOf(nccl)];
  while (*link && (*link)->nccl != nccl) link = &(*link)->next;
  struct fncclComm* found = *link;
  if (found) {
    *link = found->next;
    found->next = NULL;
    count--;
  }
  pthread_rwlock_unlock(&tableLock);
  return found;
}

struct fncclComm* fncclTableAdd(ncclComm_t nccl, const struct fncclConfigView* config, uint64_t clique) {
  struct fncclComm* comm = calloc(1, sizeof(*comm));
  if (!comm) return NULL;
  comm->nccl = nccl;
  comm->rank = comm->nranks = comm->cudaDev = -1;
  comm->config = *config;
  comm->blocking = fncclConfigBlocking(config);
  comm->clique = clique;
  comm->minCTAs = comm->maxCTAs = NCCL_CONFIG_UNDEF_INT;
  /* Its creator attaches it (or marks it waiting for NCCL) before handing it out: a query in between from another
   * thread answers ncclInProgress and starts nothing. */
  comm->state = FNCCL_COMM_ATTACHING;
  pthread_mutex_init(&comm->lock, NULL);
  /* An entry still here for this address belongs to a communicator NCCL has freed without this library seeing it
   * (destroyed from inside NCCL, say): the new communicator replaces it. */
  struct fncclComm* stale = fncclTableRemove(nccl);
  if (stale) {
    FNCCL_INFO("comm %p: a new communicator at the address of one not destroyed through this library", (void*)nccl);
    fncclDetach(stale, 1);
    fncclCommFree(stale);
  }
  pthread_rwlock_wrlock(&tableLock);
  size_t bucket = bucketOf(nccl);
  comm->next = buckets[bucket];
  buckets[bucket] = comm;
  count++;
  pthread_rwlock_unlock(&tableLock);
  return comm;
}

void fncclCommFree(struct fncclComm* comm) {
  if (!comm) return;
  fncclWindowsForget(comm);
  fncclPreMulSumsForget(comm);
  fncclLocalGroupLeave(comm);
  pthread_mutex_destroy(&comm->lock);
  free(comm);
}

int fncclTableCount(void) {
  pthread_rwlock_rdlock(&tableLock);
  int n = count;
  pthread_rwlock_unlock(&tableLock);
  return n;
}
