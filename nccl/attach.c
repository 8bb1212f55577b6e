/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attaching fccl to ready NCCL communicators, and letting it go.
 *
 * The attach is collective (the engine all-gathers over the communicator, then fccl's creation from an NCCL
 * communicator all-gathers more), so it never runs inside a group, and when one thread made several communicators
 * together (ncclCommInitAll, ncclGroupStart + several ncclCommInitRank: nccl-tests -g N) each is attached on a
 * thread of its own, side by side, and the caller waits for all. Blocking communicators are attached before the
 * call that made them returns; a non-blocking one on a thread started when NCCL first reports it ready, while
 * ncclCommGetAsyncError keeps answering ncclInProgress.
 *
 * fccl's teardown is collective too. The communicators of one clique (one NCCL communicator's ranks) that one thread
 * attached together form a local group: the first of them destroyed or finalized takes the others' fccl state down
 * with it, side by side (their NCCL communicators are still alive, so the exchanges run), and an abort of one
 * aborts the others' fccl state, so that no later teardown waits for a rank that is gone.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct fncclLocalGroup {
  pthread_mutex_t lock;
  int count;   /* members still in the table */
  int size;
  struct fncclComm* members[]; /* NULL once freed */
};

/* ---- running work per communicator --------------------------------------------------------------------------- */

struct eachJob {
  struct fncclComm* comm;
  void (*fn)(struct fncclComm*, void*);
  void* context;
};

static void runScoped(struct eachJob* job) {
  struct fncclEngineScope scope;
  fncclEngineEnter(job->comm->cudaDev, &scope);
  job->fn(job->comm, job->context);
  fncclEngineLeave(&scope);
}

static void* eachThread(void* arg) {
  runScoped(arg);
  return NULL;
}

void fncclEachComm(struct fncclComm** comms, int count, void (*fn)(struct fncclComm*, void*), void* context) {
  if (count == 1) {
    struct eachJob job = {.comm = comms[0], .fn = fn, .context = context};
    runScoped(&job);
    return;
  }
  struct eachJob* jobs = calloc((size_t)count, sizeof(*jobs));
  pthread_t* threads = calloc((size_t)count, sizeof(*threads));
  int* started = calloc((size_t)count, sizeof(*started));
  if (!jobs || !threads || !started) {
    /* No memory for threads: one after another on this thread, each bounded by the timeout. */
    for (int i = 0; i < count; i++) {
      struct eachJob job = {.comm = comms[i], .fn = fn, .context = context};
      runScoped(&job);
    }
  } else {
    for (int i = 0; i < count; i++) {
      jobs[i] = (struct eachJob){.comm = comms[i], .fn = fn, .context = context};
      started[i] = pthread_create(&threads[i], NULL, eachThread, &jobs[i]) == 0;
    }
    for (int i = 0; i < count; i++) {
      if (started[i])
        pthread_join(threads[i], NULL);
      else
        runScoped(&jobs[i]); /* could not start a thread: here, once the others run on their own */
    }
  }
  free(started);
  free(threads);
  free(jobs);
}

/* ---- the attach ------------------------------------------------------------------------------------------------ */

static void describeCarried(struct fncclComm* comm, const char* engineWhy) {
  char* why = comm->why;
  size_t size = sizeof(comm->why);
  if (comm->engine == NULL) {
    snprintf(why, size, "NCCL carries every call: %s", engineWhy);
    return;
  }
  int used = snprintf(why, size, "fccl carries");
  const char* separator = " ";
  for (int c = 0; c < FNCCL_NUM_COLLS && used > 0 && (size_t)used < size; c++) {
    if (!(comm->carried & (1u << c))) continue;
    used += snprintf(why + used, size - (size_t)used, "%s%s", separator, fncclCollName((enum fncclColl)c));
    separator = ", ";
  }
  if (used > 0 && (size_t)used < size)
    snprintf(why + used, size - (size_t)used, " (%s); NCCL carries the other calls and other types and ops",
             engineWhy);
}

static void attachOne(struct fncclComm* comm, void* context) {
  (void)context;
  const struct fncclSettings* settings = fncclSettingsGet();
  char localWhy[256] = "";
  uint32_t wanted = 0;
  for (int c = 0; c < FNCCL_NUM_COLLS; c++)
    if (fncclEngineHas((enum fncclColl)c) && !(settings->disabled & (1u << c))) wanted |= 1u << c;
  const char* otherNccl = NULL;
  if (wanted == 0) {
    snprintf(localWhy, sizeof(localWhy), "%s", settings->disabledWhy[0] ? settings->disabledWhy : "nothing to carry");
  } else if (!fncclRealSharedWithFccl(&otherNccl)) {
    snprintf(localWhy, sizeof(localWhy), "%s", otherNccl);
    wanted = 0;
  } else {
    fncclConfigWhyNot(&comm->config, localWhy, sizeof(localWhy));
    if (localWhy[0]) wanted = 0;
  }
  struct fncclAttachRequest request = {.comm = comm->nccl, .rank = comm->rank, .nranks = comm->nranks,
                                       .cudaDev = comm->cudaDev, .blocking = comm->blocking,
                                       .name = comm->config.name, .wanted = wanted, .localWhy = localWhy,
                                       .timeoutMs = settings->timeoutMs, .abortFlag = &comm->abortFlag};
  struct fncclEngineComm* engine = NULL;
  uint32_t carried = 0;
  char engineWhy[256] = "";
  const int attached = fncclEngineAttach(&request, &engine, &carried, engineWhy, sizeof(engineWhy));
  pthread_mutex_lock(&comm->lock);
  comm->engine = attached ? engine : NULL;
  comm->carried = attached ? carried : 0;
  describeCarried(comm, engineWhy);
  pthread_mutex_unlock(&comm->lock);
  fncclStatsNoteComm(attached);
  FNCCL_INFO("comm %p%s%s rank %d of %d on device %d: %s", (void*)comm->nccl, comm->config.name[0] ? " " : "",
             comm->config.name, comm->rank, comm->nranks, comm->cudaDev, comm->why);
}

/* Rank, size and device of a ready communicator, as NCCL says. */
static int readShape(struct fncclComm* comm) {
  ncclResult_t a, b, c;
  FNCCL_REAL(a, CommCount, (comm->nccl, &comm->nranks));
  FNCCL_REAL(b, CommUserRank, (comm->nccl, &comm->rank));
  FNCCL_REAL(c, CommCuDevice, (comm->nccl, &comm->cudaDev));
  return a == ncclSuccess && b == ncclSuccess && c == ncclSuccess;
}

static void leaveToNccl(struct fncclComm* comm, const char* why) {
  comm->engine = NULL;
  comm->carried = 0;
  snprintf(comm->why, sizeof(comm->why), "NCCL carries every call: %s", why);
  FNCCL_INFO("comm %p: %s", (void*)comm->nccl, comm->why);
}

/* Makes the local groups of comms: those of one clique, two or more. */
static void formLocalGroups(struct fncclComm** comms, int count) {
  for (int i = 0; i < count; i++) {
    if (comms[i]->localGroup) continue;
    int members = 0;
    for (int j = i; j < count; j++) members += comms[j]->clique == comms[i]->clique;
    if (members < 2) continue;
    struct fncclLocalGroup* group = calloc(1, sizeof(*group) + (size_t)members * sizeof(group->members[0]));
    if (!group) continue; /* teardown then runs one by one, each bounded by the timeout */
    pthread_mutex_init(&group->lock, NULL);
    for (int j = i; j < count; j++) {
      if (comms[j]->clique != comms[i]->clique) continue;
      group->members[group->size++] = comms[j];
      comms[j]->localGroup = group;
    }
    group->count = group->size;
  }
}

void fncclAttachNow(struct fncclComm** comms, int count) {
  struct fncclComm** ready = calloc((size_t)count, sizeof(*ready));
  int readyCount = 0;
  for (int i = 0; i < count; i++) {
    if (readShape(comms[i]) && ready) {
      ready[readyCount++] = comms[i];
    } else {
      leaveToNccl(comms[i], "NCCL does not say its rank, size or device");
    }
  }
  formLocalGroups(ready, readyCount);
  if (readyCount > 0) fncclEachComm(ready, readyCount, attachOne, NULL);
  for (int i = 0; i < count; i++) __atomic_store_n(&comms[i]->state, FNCCL_COMM_READY, __ATOMIC_RELEASE);
  free(ready);
}

static void* attachThreadMain(void* arg) {
  struct fncclComm* comm = arg;
  struct eachJob job = {.comm = comm, .fn = attachOne};
  runScoped(&job);
  __atomic_store_n(&comm->attachDone, 1, __ATOMIC_RELEASE);
  return NULL;
}

void fncclAttachStart(struct fncclComm* comm) {
  if (!readShape(comm)) {
    leaveToNccl(comm, "NCCL does not say its rank, size or device");
    __atomic_store_n(&comm->state, FNCCL_COMM_READY, __ATOMIC_RELEASE);
    return;
  }
  __atomic_store_n(&comm->attachDone, 0, __ATOMIC_RELEASE);
  if (pthread_create(&comm->attachThread, NULL, attachThreadMain, comm) != 0) {
    leaveToNccl(comm, "no thread could be started for fccl's attach");
    __atomic_store_n(&comm->state, FNCCL_COMM_READY, __ATOMIC_RELEASE);
    return;
  }
  comm->attachThreadLive = 1;
  __atomic_store_n(&comm->state, FNCCL_COMM_ATTACHING, __ATOMIC_RELEASE);
}

void fncclAttachJoin(struct fncclComm* comm, int abort) {
  pthread_mutex_lock(&comm->lock);
  const int live = comm->attachThreadLive;
  comm->attachThreadLive = 0;
  pthread_mutex_unlock(&comm->lock);
  if (!live) return;
  /* The attach's every wait polls the flag: it ends within a poll slice. */
  if (abort) __atomic_store_n(&comm->abortFlag, 1, __ATOMIC_RELEASE);
  pthread_join(comm->attachThread, NULL);
  __atomic_store_n(&comm->state, FNCCL_COMM_READY, __ATOMIC_RELEASE);
}

/* ---- letting go -------------------------------------------------------------------------------------------------- */

/* Takes comm's engine communicator away from it (NULL when it has none). */
static struct fncclEngineComm* takeEngine(struct fncclComm* comm, const char* why) {
  pthread_mutex_lock(&comm->lock);
  struct fncclEngineComm* engine = comm->engine;
  if (engine) {
    comm->engine = NULL;
    comm->carried = 0;
    snprintf(comm->why, sizeof(comm->why), "NCCL carries every call: %s", why);
  }
  pthread_mutex_unlock(&comm->lock);
  return engine;
}

static void releaseOne(struct fncclComm* comm, void* context) {
  struct fncclEngineComm* engine = context ? (struct fncclEngineComm*)context : takeEngine(comm, "fccl released");
  if (engine) fncclEngineRelease(engine, 0);
}

struct collectiveRelease {
  struct fncclComm* comm;
  struct fncclEngineComm* engine;
};

static void releaseMember(struct fncclComm* comm, void* context) {
  struct collectiveRelease* all = context;
  for (int i = 0; all[i].comm; i++)
    if (all[i].comm == comm) fncclEngineRelease(all[i].engine, 0);
}

void fncclDetach(struct fncclComm* comm, int abort) {
  struct fncclLocalGroup* group = comm->localGroup;
  if (group == NULL) {
    struct fncclEngineComm* engine = takeEngine(comm, abort ? "aborted" : "fccl released");
    if (!engine) return;
    if (abort) {
      fncclEngineRelease(engine, 1); /* local, no device work waited for */
    } else {
      struct eachJob job = {.comm = comm, .fn = releaseOne, .context = engine};
      runScoped(&job);
    }
    return;
  }
  /* The members of the group that still have fccl, taken under the group's lock. */
  pthread_mutex_lock(&group->lock);
  struct fncclComm** members = calloc((size_t)group->size + 1, sizeof(*members));
  struct collectiveRelease* engines = calloc((size_t)group->size + 1, sizeof(*engines));
  int count = 0;
  for (int i = 0; i < group->size && members && engines; i++) {
    struct fncclComm* member = group->members[i];
    if (!member) continue;
    struct fncclEngineComm* engine = takeEngine(member, abort ? "aborted with its local group"
                                                              : "released with its local group");
    if (!engine) continue;
    members[count] = member;
    engines[count] = (struct collectiveRelease){.comm = member, .engine = engine};
    count++;
  }
  pthread_mutex_unlock(&group->lock);
  if (abort) {
    for (int i = 0; i < count; i++) fncclEngineRelease(engines[i].engine, 1);
  } else if (count > 0) {
    fncclEachComm(members, count, releaseMember, engines);
  }
  free(engines);
  free(members);
}

/* Drops comm from its local group; the last member frees the group. */
void fncclLocalGroupLeave(struct fncclComm* comm) {
  struct fncclLocalGroup* group = comm->localGroup;
  if (!group) return;
  comm->localGroup = NULL;
  pthread_mutex_lock(&group->lock);
  for (int i = 0; i < group->size; i++)
    if (group->members[i] == comm) group->members[i] = NULL;
  const int last = --group->count == 0;
  pthread_mutex_unlock(&group->lock);
  if (last) {
    pthread_mutex_destroy(&group->lock);
    free(group);
  }
}
