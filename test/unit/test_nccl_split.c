/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL call of fcclCommSplit (fcclNcclSplitCall, src/core/engine/nccl_path.c) on a stand-in of NCCL that splits a
 * non-blocking communicator as NCCL 2.18 to 2.30 do (src/init.cc: ncclCommSplit, ncclCommInitRankFunc): the call
 * answers ncclSuccess once the new communicator's init has started on a thread of NCCL's; the parent reads
 * ncclInProgress until that init ends; *newcomm is written by that thread when it ends (NULL for NCCL_SPLIT_NOCOLOR, a
 * failed communicator when the init failed), and the parent's state then says how it went; the parent's abort ends
 * the init and waits for it; a split of a parent that still reads ncclInProgress fails with ncclInvalidArgument.
 * Checked: the parent is waited for even after ncclSuccess, the new communicator comes back only once written, into
 * the caller's landing slot and never a slot of the call's own; the failures (the init failed, the timeout, the abort
 * flag, a busy parent) say so and leave the parent marked broken where NCCL still owns it. No GPU, no NCCL.
 */
#include "comm.h"
#include "nccl_path.h"
#include "ncclwrap.h"
#include "test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAKE_MAGIC 0x5b117
#define HANG_BOUND_MS 10000 /* a hanging init gives up after this even without an abort: the test never hangs */

enum fakeOutcome { FAKE_ENDS, FAKE_FAILS, FAKE_HANGS };

/* NCCL's communicator, as far as the split uses it. */
struct ncclComm {
  int magic;
  ncclResult_t state; /* atomic: what ncclCommGetAsyncError answers */
  int abortFlag;      /* atomic: set by the abort; a running init gives up */
  int aborted;
  /* the split's init, on a thread of its own */
  pthread_t job;
  int jobStarted, jobDone; /* atomic jobDone */
  enum fakeOutcome outcome;
  int delayMs;
  ncclResult_t answer; /* what ncclCommSplit answers once the init started: ncclSuccess, as NCCL */
  int color, key, blocking;
  ncclComm_t* newcomm;   /* where ncclCommSplit was told to write the new communicator */
  struct ncclComm* made; /* what the init wrote there */
};

static struct ncclComm* fakeNew(void) {
  struct ncclComm* c = calloc(1, sizeof(*c));
  if (c) {
    c->magic = FAKE_MAGIC;
    c->answer = ncclSuccess;
  }
  return c;
}

static int64_t nowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleepMs(int ms) {
  struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
  nanosleep(&pause, NULL);
}

/* The new communicator's init (ncclCommInitRankFunc): its work, then *newcomm, then the parent's state (which the
 * group's end sets once the job has returned). */
static void* fakeJob(void* arg) {
  struct ncclComm* parent = arg;
  const int64_t start = nowMs();
  const int bound = parent->outcome == FAKE_HANGS ? HANG_BOUND_MS : parent->delayMs;
  while (nowMs() - start < bound && !__atomic_load_n(&parent->abortFlag, __ATOMIC_ACQUIRE)) sleepMs(1);
  const int failed = parent->outcome != FAKE_ENDS || __atomic_load_n(&parent->abortFlag, __ATOMIC_ACQUIRE);
  struct ncclComm* child = NULL;
  if (parent->color != NCCL_SPLIT_NOCOLOR) {
    child = fakeNew();
    if (child) child->state = failed ? ncclSystemError : ncclSuccess;
  }
  parent->made = child;
  __atomic_store_n(parent->newcomm, child, __ATOMIC_RELEASE);
  __atomic_store_n(&parent->jobDone, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&parent->state, failed ? ncclSystemError : ncclSuccess, __ATOMIC_RELEASE);
  return NULL;
}

static void fakeJoin(struct ncclComm* comm) {
  if (!comm->jobStarted) return;
  pthread_join(comm->job, NULL);
  comm->jobStarted = 0;
}

static ncclResult_t fakeSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (!comm || comm->magic != FAKE_MAGIC || !newcomm) return ncclInvalidArgument;
  if (__atomic_load_n(&comm->state, __ATOMIC_ACQUIRE) == ncclInProgress) return ncclInvalidArgument; /* not ready */
  fakeJoin(comm); /* an earlier split's init, ended */
  comm->color = color;
  comm->key = key;
  comm->blocking = config ? config->blocking : 1;
  comm->newcomm = newcomm;
  *newcomm = NULL;
  __atomic_store_n(&comm->state, ncclInProgress, __ATOMIC_RELEASE);
  if (pthread_create(&comm->job, NULL, fakeJob, comm) != 0) {
    __atomic_store_n(&comm->state, ncclSuccess, __ATOMIC_RELEASE);
    return ncclSystemError;
  }
  comm->jobStarted = 1;
  return comm->answer;
}

static ncclResult_t fakeGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (!comm || comm->magic != FAKE_MAGIC || !state) return ncclInvalidArgument;
  *state = __atomic_load_n(&comm->state, __ATOMIC_ACQUIRE);
  return ncclSuccess;
}

/* The abort ends the running init and waits for it, as NCCL's (ncclCommEnsureReady, then ncclGroupJobAbort). */
static ncclResult_t fakeAbort(ncclComm_t comm) {
  if (!comm || comm->magic != FAKE_MAGIC) return ncclInvalidArgument;
  __atomic_store_n(&comm->abortFlag, 1, __ATOMIC_RELEASE);
  fakeJoin(comm);
  comm->aborted = 1;
  return ncclSuccess;
}

static const char* fakeErrorString(ncclResult_t result) { return result == ncclSuccess ? "no error" : "fake error"; }

static const char* fakeLastError(ncclComm_t comm) { return (void)comm, "the stand-in's last error"; }

static void useFake(void) {
  pfn_ncclCommSplit = fakeSplit;
  pfn_ncclCommGetAsyncError = fakeGetAsyncError;
  pfn_ncclCommAbort = fakeAbort;
  pfn_ncclGetErrorString = fakeErrorString;
  pfn_ncclGetLastError = fakeLastError;
}

/* The fccl communicator the waits are bounded by (the split's owner): its timeout, abort flag and failure. */
struct owner {
  struct fcclComm comm;
  int abortFlag;
};

static void ownerInit(struct owner* o, int timeoutMs) {
  memset(o, 0, sizeof(*o));
  o->comm.magic = FCCL_COMM_MAGIC;
  o->comm.abortFlag = &o->abortFlag;
  o->comm.timeoutMs = timeoutMs;
  o->comm.rank = 1;
  o->comm.minCtas = o->comm.maxCtas = FCCL_CONFIG_UNDEF_INT;
  snprintf(o->comm.name, sizeof(o->comm.name), "split-test");
  pthread_mutex_init(&o->comm.errorLock, NULL);
}

static void ownerFini(struct owner* o) { pthread_mutex_destroy(&o->comm.errorLock); }

/* What a call gave. */
struct outcome {
  fcclResult_t res;
  struct ncclComm* made;
  int parentBroken;
  int64_t ms;
};

static struct outcome runSplit(struct owner* o, struct ncclComm* parent, int color, struct ncclComm** landing) {
  struct outcome out = {.res = fcclInternalError, .parentBroken = -1};
  const int64_t start = nowMs();
  out.res = fcclNcclSplitCall(&o->comm, parent, 3, color, 7, FCCL_CONFIG_UNDEF_INT, landing, &out.made,
                              &out.parentBroken);
  out.ms = nowMs() - start;
  return out;
}

static void freeFake(struct ncclComm* comm) {
  if (!comm) return;
  fakeJoin(comm);
  free(comm);
}

/* The init ends after a while: the call returns once it has, with the new communicator NCCL wrote. */
static void testEnds(ncclResult_t answer, const char* what) {
  struct owner o;
  ownerInit(&o, 5000);
  struct ncclComm* parent = fakeNew();
  struct ncclComm** landing = calloc(1, sizeof(*landing)); /* the parent's, on the heap as nccl_path.c keeps it */
  if (!parent || !landing) {
    testFail(__FILE__, __LINE__, "out of memory");
    return;
  }
  parent->delayMs = 100;
  parent->answer = answer;
  const struct outcome out = runSplit(&o, parent, 2, landing);
  EXPECT_MSG(out.res == fcclSuccess, "%s: result %d: %s", what, out.res, fcclGetLastError(NULL));
  EXPECT_MSG(__atomic_load_n(&parent->jobDone, __ATOMIC_ACQUIRE), "%s: returned before the init ended", what);
  EXPECT_MSG(out.ms >= 90, "%s: returned after %lld ms, before the 100 ms init", what, (long long)out.ms);
  EXPECT_MSG(out.made != NULL && out.made == parent->made, "%s: made %p, NCCL made %p", what, (void*)out.made,
             (void*)parent->made);
  EXPECT_MSG(parent->newcomm == landing, "%s: NCCL was told to write to %p, not the landing slot %p", what,
             (void*)parent->newcomm, (void*)landing);
  EXPECT_MSG(*landing == NULL, "%s: the landing slot still holds %p", what, (void*)*landing);
  EXPECT_EQ_INT(out.parentBroken, 0);
  EXPECT_EQ_INT(parent->color, 2);
  EXPECT_EQ_INT(parent->key, 7);
  EXPECT_EQ_INT(parent->blocking, 0);
  EXPECT_EQ_INT(parent->aborted, 0);
  freeFake(out.made);
  freeFake(parent);
  free(landing);
  ownerFini(&o);
}

/* A rank of no color: no communicator, but the parent is still waited for (its next call would be refused). */
static void testNoColor(void) {
  struct owner o;
  ownerInit(&o, 5000);
  struct ncclComm* parent = fakeNew();
  struct ncclComm** landing = calloc(1, sizeof(*landing));
  if (!parent || !landing) {
    testFail(__FILE__, __LINE__, "out of memory");
    return;
  }
  parent->delayMs = 100;
  const struct outcome out = runSplit(&o, parent, FCCL_SPLIT_NOCOLOR, landing);
  EXPECT_MSG(out.res == fcclSuccess, "no color: result %d: %s", out.res, fcclGetLastError(NULL));
  EXPECT_EQ_INT(parent->color, NCCL_SPLIT_NOCOLOR);
  EXPECT_MSG(__atomic_load_n(&parent->jobDone, __ATOMIC_ACQUIRE), "no color: returned before the init ended");
  EXPECT(out.made == NULL);
  EXPECT_EQ_INT(out.parentBroken, 0);
  /* The parent is ready again: a second split of it is taken. */
  parent->delayMs = 10;
  const struct outcome again = runSplit(&o, parent, 0, landing);
  EXPECT_MSG(again.res == fcclSuccess, "no color, then a split: result %d: %s", again.res, fcclGetLastError(NULL));
  EXPECT(again.made != NULL);
  freeFake(again.made);
  freeFake(parent);
  free(landing);
  ownerFini(&o);
}

/* The new communicator's init fails: NCCL's error, the failed communicator handed back (to abort), the parent
 * broken (NCCL keeps its error). */
static void testInitFails(void) {
  struct owner o;
  ownerInit(&o, 5000);
  struct ncclComm* parent = fakeNew();
  struct ncclComm** landing = calloc(1, sizeof(*landing));
  if (!parent || !landing) {
    testFail(__FILE__, __LINE__, "out of memory");
    return;
  }
  parent->delayMs = 50;
  parent->outcome = FAKE_FAILS;
  const struct outcome out = runSplit(&o, parent, 0, landing);
  EXPECT_EQ_INT(out.res, fcclSystemError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "ncclCommSplit");
  EXPECT_MSG(out.made != NULL && out.made == parent->made, "init failed: made %p, NCCL made %p", (void*)out.made,
             (void*)parent->made);
  EXPECT(*landing == NULL);
  EXPECT_EQ_INT(out.parentBroken, 1);
  freeFake(out.made);
  freeFake(parent);
  free(landing);
  ownerFini(&o);
}

/* The init never ends: fcclTimeout after the owner's timeout, nothing handed back, the parent broken; the landing
 * slot stays NCCL's, and the parent's abort ends the init, which writes it then. */
static void testTimeout(void) {
  struct owner o;
  ownerInit(&o, 200);
  struct ncclComm* parent = fakeNew();
  struct ncclComm** landing = calloc(1, sizeof(*landing));
  if (!parent || !landing) {
    testFail(__FILE__, __LINE__, "out of memory");
    return;
  }
  parent->outcome = FAKE_HANGS;
  const struct outcome out = runSplit(&o, parent, 1, landing);
  EXPECT_EQ_INT(out.res, fcclTimeout);
  EXPECT_MSG(out.ms >= 190 && out.ms < HANG_BOUND_MS / 2, "timeout: returned after %lld ms (timeout 200 ms)",
             (long long)out.ms);
  EXPECT(out.made == NULL);
  EXPECT_EQ_INT(out.parentBroken, 1);
  EXPECT_EQ_INT(__atomic_load_n(&parent->jobDone, __ATOMIC_ACQUIRE), 0);
  EXPECT(parent->newcomm == landing);
  EXPECT_EQ_INT(fakeAbort(parent), ncclSuccess);
  struct ncclComm* late = __atomic_exchange_n(landing, NULL, __ATOMIC_ACQ_REL);
  EXPECT_MSG(late != NULL && late == parent->made, "timeout: after the abort the landing slot holds %p, NCCL made %p",
             (void*)late, (void*)parent->made);
  freeFake(late);
  freeFake(parent);
  free(landing);
  ownerFini(&o);
}

struct raiseArgs {
  int* flag;
  int afterMs;
};

static void* raiseLater(void* arg) {
  struct raiseArgs* a = arg;
  sleepMs(a->afterMs);
  __atomic_store_n(a->flag, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* The owner's abort flag (fcclCommAbort, or the peer monitor) ends the wait at once, with the parent broken. */
static void testAbortFlag(void) {
  struct owner o;
  ownerInit(&o, 60000);
  struct ncclComm* parent = fakeNew();
  struct ncclComm** landing = calloc(1, sizeof(*landing));
  if (!parent || !landing) {
    testFail(__FILE__, __LINE__, "out of memory");
    return;
  }
  parent->outcome = FAKE_HANGS;
  struct raiseArgs args = {.flag = &o.abortFlag, .afterMs = 50};
  pthread_t raiser;
  EXPECT_EQ_INT(pthread_create(&raiser, NULL, raiseLater, &args), 0);
  const struct outcome out = runSplit(&o, parent, 1, landing);
  pthread_join(raiser, NULL);
  EXPECT_EQ_INT(out.res, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "aborted");
  EXPECT_MSG(out.ms < 2000, "abort: returned after %lld ms", (long long)out.ms);
  EXPECT(out.made == NULL);
  EXPECT_EQ_INT(out.parentBroken, 1);
  EXPECT_EQ_INT(fakeAbort(parent), ncclSuccess);
  freeFake(__atomic_exchange_n(landing, NULL, __ATOMIC_ACQ_REL));
  freeFake(parent);
  free(landing);
  ownerFini(&o);
}

/* A parent still busy (NCCL refuses the call): NCCL's error, no init started, nothing to wait for. */
static void testParentBusy(void) {
  struct owner o;
  ownerInit(&o, 5000);
  struct ncclComm* parent = fakeNew();
  struct ncclComm** landing = calloc(1, sizeof(*landing));
  if (!parent || !landing) {
    testFail(__FILE__, __LINE__, "out of memory");
    return;
  }
  parent->state = ncclInProgress;
  const struct outcome out = runSplit(&o, parent, 0, landing);
  EXPECT_EQ_INT(out.res, fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "ncclCommSplit (color 0, key 7) failed");
  EXPECT_EQ_INT(parent->jobStarted, 0);
  EXPECT(out.made == NULL);
  EXPECT_EQ_INT(out.parentBroken, 0);
  EXPECT_MSG(out.ms < 1000, "busy parent: returned after %lld ms", (long long)out.ms);
  freeFake(parent);
  free(landing);
  ownerFini(&o);
}

int main(void) {
  useFake();
  testEnds(ncclSuccess, "answered ncclSuccess");
  testEnds(ncclInProgress, "answered ncclInProgress");
  testNoColor();
  testInitFails();
  testTimeout();
  testAbortFlag();
  testParentBusy();
  return testSummary("nccl_split");
}
