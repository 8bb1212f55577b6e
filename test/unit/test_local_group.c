/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclCommInitAll's groups: members destroyed one after another from one thread must all be torn down, and a
 * teardown that waits for every member (as the real, collective one does) must complete. Without the deferral
 * the first teardown here would wait for the others forever (bounded by the barrier's timeout below).
 */
#include "check.h"
#include "local_group.h"
#include "test.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define MEMBERS 4

struct fakeMember {
  int id;
  int tornDown;
  int aborted;
};

/* A barrier among the members' teardowns that gives up after two seconds or when the member is aborted. */
static pthread_mutex_t barrierLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t barrierCond = PTHREAD_COND_INITIALIZER;
static int barrierArrived;
static int barrierExpected;

static fcclResult_t fakeTeardown(void* member) {
  struct fakeMember* m = member;
  fcclResult_t res = fcclSuccess;
  if (!__atomic_load_n(&m->aborted, __ATOMIC_ACQUIRE)) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 2;
    pthread_mutex_lock(&barrierLock);
    barrierArrived++;
    pthread_cond_broadcast(&barrierCond);
    while (barrierArrived < barrierExpected && res == fcclSuccess)
      if (pthread_cond_timedwait(&barrierCond, &barrierLock, &deadline) == ETIMEDOUT)
        res = FCCL_ERROR(fcclTimeout, FCCL_SUBSYS_INIT, "member %d: teardown barrier timed out", m->id);
    pthread_mutex_unlock(&barrierLock);
  }
  __atomic_store_n(&m->tornDown, 1, __ATOMIC_RELEASE);
  return res;
}

static void fakeAbort(void* member) { __atomic_store_n(&((struct fakeMember*)member)->aborted, 1, __ATOMIC_RELEASE); }

static void setup(struct fakeMember* members, void** pointers, int expectedAtBarrier) {
  for (int i = 0; i < MEMBERS; i++) {
    members[i] = (struct fakeMember){.id = i};
    pointers[i] = &members[i];
  }
  barrierArrived = 0;
  barrierExpected = expectedAtBarrier;
}

static void testSequentialDestroy(void) {
  struct fakeMember members[MEMBERS];
  void* pointers[MEMBERS];
  setup(members, pointers, MEMBERS);
  struct fcclLocalGroup* group = fcclLocalGroupNew(pointers, MEMBERS, fakeTeardown, fakeAbort);
  EXPECT(group != NULL);
  for (int i = 0; i < MEMBERS; i++) {
    int last = -1;
    EXPECT_EQ_INT(fcclLocalGroupRelease(group, pointers[i], &last), fcclSuccess);
    EXPECT_EQ_INT(last, i == MEMBERS - 1);
    /* Nothing is torn down before the last member's destroy, then everything is. */
    for (int j = 0; j < MEMBERS; j++) EXPECT_EQ_INT(members[j].tornDown, i == MEMBERS - 1);
  }
  EXPECT_EQ_INT(barrierArrived, MEMBERS);
}

static void testDoubleRelease(void) {
  struct fakeMember members[MEMBERS];
  void* pointers[MEMBERS];
  setup(members, pointers, MEMBERS);
  struct fcclLocalGroup* group = fcclLocalGroupNew(pointers, MEMBERS, fakeTeardown, fakeAbort);
  EXPECT_EQ_INT(fcclLocalGroupRelease(group, pointers[0], NULL), fcclSuccess);
  EXPECT_EQ_INT(fcclLocalGroupRelease(group, pointers[0], NULL), fcclInternalError);
  for (int i = 1; i < MEMBERS; i++) EXPECT_EQ_INT(fcclLocalGroupRelease(group, pointers[i], NULL), fcclSuccess);
}

static void testAbortAfterDeferred(void) {
  /* Members 0..2 destroyed (deferred), then member 3 aborted: all are aborted and torn down without a barrier. */
  struct fakeMember members[MEMBERS];
  void* pointers[MEMBERS];
  setup(members, pointers, MEMBERS);
  struct fcclLocalGroup* group = fcclLocalGroupNew(pointers, MEMBERS, fakeTeardown, fakeAbort);
  for (int i = 0; i < MEMBERS - 1; i++) EXPECT_EQ_INT(fcclLocalGroupRelease(group, pointers[i], NULL), fcclSuccess);
  fcclLocalGroupAbort(group, pointers[MEMBERS - 1]);
  for (int i = 0; i < MEMBERS; i++) EXPECT(members[i].aborted);
  for (int i = 0; i < MEMBERS - 1; i++) EXPECT(members[i].tornDown);
  EXPECT_EQ_INT(members[MEMBERS - 1].tornDown, 0); /* the aborted member is freed by its caller */
  EXPECT_EQ_INT(barrierArrived, 0);
}

static void testAbortThenDestroyRest(void) {
  struct fakeMember members[MEMBERS];
  void* pointers[MEMBERS];
  setup(members, pointers, MEMBERS);
  struct fcclLocalGroup* group = fcclLocalGroupNew(pointers, MEMBERS, fakeTeardown, fakeAbort);
  fcclLocalGroupAbort(group, pointers[0]);
  for (int i = 1; i < MEMBERS; i++) EXPECT_EQ_INT(fcclLocalGroupRelease(group, pointers[i], NULL), fcclSuccess);
  for (int i = 1; i < MEMBERS; i++) EXPECT(members[i].tornDown && members[i].aborted);
}

int main(void) {
  testSequentialDestroy();
  testDoubleRelease();
  testAbortAfterDeferred();
  testAbortThenDestroyRest();
  return testSummary("local_group");
}
