/* SPDX-License-Identifier: Apache-2.0 */
#include "local_group.h"

#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

struct fcclLocalGroup {
  pthread_mutex_t lock;
  int count; /* members still attached */
  void* members[FCCL_LOCAL_GROUP_MAX];
  int deferred[FCCL_LOCAL_GROUP_MAX]; /* destroy called; teardown waits for the others */
  fcclMemberTeardown_t teardown;
  fcclMemberAbort_t abortMember;
};

struct teardownJob {
  fcclMemberTeardown_t teardown;
  void* member;
  fcclResult_t result;
  char error[1024];
};

static void* teardownThread(void* arg) {
  struct teardownJob* job = arg;
  job->result = job->teardown(job->member);
  if (job->result != fcclSuccess) snprintf(job->error, sizeof(job->error), "%s", fcclThreadLastError());
  return NULL;
}

/* Tears down the group's members concurrently and frees the group; the first failure is reported here. */
static fcclResult_t teardownAll(struct fcclLocalGroup* group) {
  struct teardownJob jobs[FCCL_LOCAL_GROUP_MAX];
  pthread_t threads[FCCL_LOCAL_GROUP_MAX];
  int started[FCCL_LOCAL_GROUP_MAX] = {0};
  const int count = group->count;
  for (int i = 0; i < count; i++) {
    jobs[i] = (struct teardownJob){.teardown = group->teardown, .member = group->members[i], .result = fcclSuccess};
    started[i] = pthread_create(&threads[i], NULL, teardownThread, &jobs[i]) == 0;
  }
  /* A member whose thread could not start cannot meet its peers: make everyone give up, then free it here. */
  for (int i = 0; i < count; i++) {
    if (started[i]) continue;
    for (int j = 0; j < count; j++) group->abortMember(group->members[j]);
    teardownThread(&jobs[i]);
  }
  for (int i = 0; i < count; i++)
    if (started[i]) pthread_join(threads[i], NULL);
  fcclResult_t res = fcclSuccess;
  for (int i = 0; i < count && res == fcclSuccess; i++)
    if (jobs[i].result != fcclSuccess)
      res = FCCL_ERROR(jobs[i].result, FCCL_SUBSYS_INIT, "teardown of communicator %d of %d: %s", i, count,
                       jobs[i].error);
  pthread_mutex_destroy(&group->lock);
  free(group);
  return res;
}

struct fcclLocalGroup* fcclLocalGroupNew(void* const* members, int count, fcclMemberTeardown_t teardown,
                                         fcclMemberAbort_t abortMember) {
  if (count < 1 || count > FCCL_LOCAL_GROUP_MAX) return NULL;
  struct fcclLocalGroup* group = calloc(1, sizeof(*group));
  if (!group) return NULL;
  pthread_mutex_init(&group->lock, NULL);
  group->count = count;
  memcpy(group->members, members, (size_t)count * sizeof(void*));
  group->teardown = teardown;
  group->abortMember = abortMember;
  return group;
}

static int indexOf(const struct fcclLocalGroup* group, const void* member) {
  for (int i = 0; i < group->count; i++)
    if (group->members[i] == member) return i;
  return -1;
}

static int allDeferred(const struct fcclLocalGroup* group) {
  for (int i = 0; i < group->count; i++)
    if (!group->deferred[i]) return 0;
  return 1;
}

fcclResult_t fcclLocalGroupRelease(struct fcclLocalGroup* group, void* member, int* lastOut) {
  pthread_mutex_lock(&group->lock);
  int index = indexOf(group, member);
  if (index < 0 || group->deferred[index]) {
    pthread_mutex_unlock(&group->lock);
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_INIT, "communicator %p released twice from its group", member);
  }
  group->deferred[index] = 1;
  int last = allDeferred(group);
  pthread_mutex_unlock(&group->lock);
  if (lastOut) *lastOut = last;
  /* Only the call that completed the set gets here with last = 1: nobody else touches the group any more. */
  return last ? teardownAll(group) : fcclSuccess;
}

void fcclLocalGroupAbort(struct fcclLocalGroup* group, void* member) {
  pthread_mutex_lock(&group->lock);
  for (int i = 0; i < group->count; i++) group->abortMember(group->members[i]);
  int index = indexOf(group, member);
  if (index >= 0) {
    group->count--;
    group->members[index] = group->members[group->count];
    group->deferred[index] = group->deferred[group->count];
  }
  int finish = group->count == 0 || allDeferred(group);
  pthread_mutex_unlock(&group->lock);
  /* Aborted members tear down locally: the threads of teardownAll meet no barrier. */
  if (finish) (void)teardownAll(group);
}
