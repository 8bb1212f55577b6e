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
 * with it, side by side (their NCCL communicators are still alive, so the exchanges run). After an abort of one,
 * the others' teardowns are local (an abort of fccl's state), so that none waits for a rank that is gone; they are
 * not aborted at once, since fccl's abort waits for its device's work, which may be their NCCL kernels.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct fncclLocalGroup {
  pthread_mutex_t lock;
  int count;   /* members still in the table */
  int aborted; /* a member was aborted: the others' teardowns are local too */
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
  if (used > 0 && (size_t)used < size && (comm->minCTAs > 0 || comm->maxCTAs > 0))
    used += snprintf(why + used, size - (size_t)used, " within an SM budget of %d..%d CTAs (0: no bound)",
                     comm->minCTAs > 0 ? comm->minCTAs : 0, comm->maxCTAs > 0 ? comm->maxCTAs : 0);
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
  /* NCCL's SM budget for this communicator goes on to fccl's, which keeps it (every rank alike, checked by fccl). */
  int minCTAs, maxCTAs;
  fncclConfigBudget(&comm->config, &minCTAs, &maxCTAs);
  struct fncclAttachRequest request = {.comm = comm->nccl, .rank = comm->rank, .nranks = comm->nranks,
                                       .cudaDev = comm->cudaDev, .blocking = comm->blocking,
                                       .name = comm->config.name, .wanted = wanted, .localWhy = localWhy,
                                       .minCTAs = minCTAs, .maxCTAs = maxCTAs,
                                       .timeoutMs = settings->timeoutMs, .abortFlag = &comm->abortFlag};
  struct fncclEngineComm* engine = NULL;
  uint32_t carried = 0;
  char engineWhy[256] = "";
  const int attached = fncclEngineAttach(&request, &engine, &carried, engineWhy, sizeof(engineWhy));
  pthread_mutex_lock(&comm->lock);
  comm->engine = attached ? engine : NULL;
  comm->carried = attached ? carried : 0;
  comm->minCTAs = attached ? minCTAs : NCCL_CONFIG_UNDEF_INT;
  comm->maxCTAs = attached ? maxCTAs : NCCL_CONFIG_UNDEF_INT;
  describeCarried(comm, engineWhy);
  pthread_mutex_unlock(&comm->lock);
  fncclStatsNoteComm(attached, attached && (minCTAs > 0 || maxCTAs > 0));
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

/* Takes comm's engine communicator away from it (NULL when it has none); its ops' twins go with it. */
static struct fncclEngineComm* takeEngine(struct fncclComm* comm, const char* why) {
  pthread_mutex_lock(&comm->lock);
  struct fncclEngineComm* engine = comm->engine;
  if (engine) {
    comm->engine = NULL;
    comm->carried = 0;
    snprintf(comm->why, sizeof(comm->why), "NCCL carries every call: %s", why);
  }
  pthread_mutex_unlock(&comm->lock);
  fncclPreMulSumsForget(comm);
  return engine;
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

/* The engines to release: comm's, and for a collective teardown those of every member of its local group (unless
 * one was aborted); taken away from them. *count of them, the list NULL-ended. */
static struct collectiveRelease* takeEngines(struct fncclComm* comm, int abort, int* count) {
  struct fncclLocalGroup* group = comm->localGroup;
  *count = 0;
  if (group && abort) __atomic_store_n(&group->aborted, 1, __ATOMIC_RELEASE);
  if (group && __atomic_load_n(&group->aborted, __ATOMIC_ACQUIRE)) group = NULL; /* each member by itself now */
  const int size = group ? group->size : 1;
  struct collectiveRelease* taken = calloc((size_t)size + 1, sizeof(*taken));
  if (group) pthread_mutex_lock(&group->lock);
  for (int i = 0; i < size; i++) {
    struct fncclComm* member = group ? group->members[i] : comm;
    if (!member) continue;
    const char* why = abort ? "aborted" : (group ? "released with its local group" : "fccl released");
    /* Without memory for the list the engine stays attached: leaked rather than released under a caller's feet. */
    struct fncclEngineComm* engine = taken ? takeEngine(member, why) : NULL;
    if (engine) taken[(*count)++] = (struct collectiveRelease){.comm = member, .engine = engine};
  }
  if (group) pthread_mutex_unlock(&group->lock);
  return taken;
}

void fncclDetach(struct fncclComm* comm, int abort) {
  struct fncclLocalGroup* group = comm->localGroup;
  if (abort || (group && __atomic_load_n(&group->aborted, __ATOMIC_ACQUIRE))) {
    fncclDetachFinish(fncclDetachBegin(comm));
    return;
  }
  int count = 0;
  struct collectiveRelease* taken = takeEngines(comm, 0, &count);
  struct fncclComm** members = calloc((size_t)count + 1, sizeof(*members));
  if (count > 0 && members) {
    for (int i = 0; i < count; i++) members[i] = taken[i].comm;
    fncclEachComm(members, count, releaseMember, taken); /* collective: side by side */
  } else {
    for (int i = 0; i < count; i++) fncclEngineRelease(taken[i].engine, 0);
  }
  free(members);
  free(taken);
}

/*
 * An abort runs beside NCCL's own: fccl's abort waits for the device's work to end, and NCCL's frees device memory,
 * which waits for it too. Each stops its own kernels at once, so each wait ends once both have started; one after
 * the other, the first could wait for the other's kernels, stuck on a dead peer.
 */
struct fncclRelease {
  struct collectiveRelease* taken;
  int count;
  pthread_t thread;
  int threaded;
};

static void* abortThread(void* arg) {
  struct fncclRelease* release = arg;
  for (int i = 0; i < release->count; i++) fncclEngineRelease(release->taken[i].engine, 1);
  return NULL;
}

struct fncclRelease* fncclDetachBegin(struct fncclComm* comm) {
  struct fncclRelease* release = calloc(1, sizeof(*release));
  if (!release) return NULL;
  release->taken = takeEngines(comm, 1, &release->count);
  if (release->count == 0) {
    free(release->taken);
    free(release);
    return NULL;
  }
  release->threaded = pthread_create(&release->thread, NULL, abortThread, release) == 0;
  if (!release->threaded) abortThread(release); /* no thread: here, before NCCL's abort */
  return release;
}

void fncclDetachFinish(struct fncclRelease* release) {
  if (!release) return;
  if (release->threaded) pthread_join(release->thread, NULL);
  free(release->taken);
  free(release);
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
