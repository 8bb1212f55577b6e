/* SPDX-License-Identifier: Apache-2.0 */
/* Shared memory between the ranks of a test: see test_shm.h. */
#include "test_shm.h"

#include "test.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SHM_ALIGN 64
#define ALIGN_UP(x) (((x) + SHM_ALIGN - 1) / SHM_ALIGN * SHM_ALIGN)

/*
 * The barrier counts calls per rank: rank r's n-th call stores arrived[r] = n (only rank r writes it) and waits until
 * every arrived[] is at least n. Counters only grow, so a fast rank's next call cannot disturb a slow rank's current
 * one, and a missing rank is named by its counter. A rank that gives up on barrier n records it in gaveUp[r], so
 * that a late rank does not find the barrier complete. At the very instant of a timeout the ranks may disagree (one
 * saw the last arrival, another gave up just before); the region is aborted then, and the test fails either way.
 */
struct testShm {
  int nranks;
  int timeoutMs;
  size_t recordBytes;
  size_t userBytes;
  size_t mapBytes;
  size_t recordsOffset;
  size_t userOffset;
  int aborted;        /* set once, never cleared */
  int abortedBy;      /* the rank whose abort came first, or -1 */
  char abortWhy[128]; /* and what it was, written by that abort alone */
  uint64_t arrived[TEST_SHM_MAX_RANKS];
  uint64_t gaveUp[TEST_SHM_MAX_RANKS]; /* the barrier a rank left unfinished (timeout, abort), or 0 */
  int gone[TEST_SHM_MAX_RANKS];    /* 1 once the rank's process has ended */
  int exitCode[TEST_SHM_MAX_RANKS];
};

static unsigned char* records(struct testShm* shm) { return (unsigned char*)shm + shm->recordsOffset; }

struct testShm* testShmCreate(int nranks, size_t recordBytes, size_t userBytes, int timeoutMs) {
  if (nranks < 1 || nranks > TEST_SHM_MAX_RANKS || timeoutMs <= 0) {
    fprintf(stderr, "testShmCreate: %d ranks (1..%d), timeout %d ms: invalid\n", nranks, TEST_SHM_MAX_RANKS,
            timeoutMs);
    return NULL;
  }
  const size_t recordsOffset = ALIGN_UP(sizeof(struct testShm));
  const size_t userOffset = recordsOffset + ALIGN_UP(recordBytes * (size_t)nranks);
  const size_t mapBytes = userOffset + ALIGN_UP(userBytes);
  void* mem = mmap(NULL, mapBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    fprintf(stderr, "testShmCreate: mmap of %zu shared bytes failed: %s\n", mapBytes, strerror(errno));
    return NULL;
  }
  struct testShm* shm = mem; /* an anonymous mapping starts zeroed */
  shm->nranks = nranks;
  shm->timeoutMs = timeoutMs;
  shm->recordBytes = recordBytes;
  shm->userBytes = userBytes;
  shm->mapBytes = mapBytes;
  shm->recordsOffset = recordsOffset;
  shm->userOffset = userOffset;
  shm->abortedBy = -1;
  return shm;
}

void testShmDestroy(struct testShm* shm) {
  if (shm) munmap(shm, shm->mapBytes);
}

void* testShmUser(struct testShm* shm) { return (unsigned char*)shm + shm->userOffset; }

int testShmRanks(const struct testShm* shm) { return shm->nranks; }

const char* testShmResultName(int result) {
  switch (result) {
    case TEST_SHM_OK: return "ok";
    case TEST_SHM_TIMEOUT: return "timeout";
    case TEST_SHM_ABORTED: return "aborted";
    default: return "invalid";
  }
}

int testShmAborted(const struct testShm* shm) { return __atomic_load_n(&shm->aborted, __ATOMIC_ACQUIRE); }

/* The first abort is the one reported: who, and why. Only its author writes the reason and sets the flag, so a
 * reader who sees the flag sees the whole reason. */
static void markAborted(struct testShm* shm, int rank, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void markAborted(struct testShm* shm, int rank, const char* fmt, ...) {
  int none = -1;
  if (!__atomic_compare_exchange_n(&shm->abortedBy, &none, rank, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
  va_list args;
  va_start(args, fmt);
  vsnprintf(shm->abortWhy, sizeof(shm->abortWhy), fmt, args);
  va_end(args);
  __atomic_store_n(&shm->aborted, 1, __ATOMIC_RELEASE);
}

void testShmAbort(struct testShm* shm, int rank) { markAborted(shm, rank, "rank %d called testShmAbort", rank); }

/*
 * Spin politely: yield the CPU for the first 2 ms (a peer a few microseconds behind costs no sleep), then sleep
 * 50 us, and 1 ms once the wait has lasted 100 ms (more ranks than cores must not starve the late one).
 */
static void backOff(long elapsedMs) {
  if (elapsedMs < 2)
    sched_yield();
  else
    usleep(elapsedMs < 100 ? 50 : 1000);
}

/* Barrier n is complete when every rank has arrived at it and none has given up on it. */
static int barrierMissing(const struct testShm* shm, uint64_t n) {
  for (int r = 0; r < shm->nranks; r++) {
    if (__atomic_load_n(&shm->arrived[r], __ATOMIC_ACQUIRE) < n) return r;
    const uint64_t left = __atomic_load_n(&shm->gaveUp[r], __ATOMIC_ACQUIRE);
    if (left != 0 && left <= n) return r;
  }
  return -1;
}

/* This rank leaves barrier n unfinished: a rank arriving later must not find it complete, and the region is
 * aborted (the ranks are out of step from now on). */
static int giveUp(struct testShm* shm, int rank, uint64_t n, int result) {
  __atomic_store_n(&shm->gaveUp[rank], n, __ATOMIC_RELEASE);
  markAborted(shm, rank, "rank %d left barrier %llu unfinished (%s)", rank, (unsigned long long)n,
              testShmResultName(result));
  return result;
}

int testShmBarrier(struct testShm* shm, int rank) {
  if (!shm || rank < 0 || rank >= shm->nranks) return TEST_SHM_INVALID;
  const uint64_t n = __atomic_load_n(&shm->arrived[rank], __ATOMIC_RELAXED) + 1;
  __atomic_store_n(&shm->arrived[rank], n, __ATOMIC_RELEASE);
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    if (barrierMissing(shm, n) < 0) return TEST_SHM_OK;
    if (testShmAborted(shm)) {
      fprintf(stderr, "test_shm: rank %d (pid %d): barrier %llu aborted: %s\n", rank, (int)getpid(),
              (unsigned long long)n, shm->abortWhy);
      return giveUp(shm, rank, n, TEST_SHM_ABORTED);
    }
    for (int r = 0; r < shm->nranks; r++) {
      if (__atomic_load_n(&shm->arrived[r], __ATOMIC_ACQUIRE) >= n || !__atomic_load_n(&shm->gone[r], __ATOMIC_ACQUIRE))
        continue;
      fprintf(stderr, "test_shm: rank %d (pid %d): barrier %llu can never complete: rank %d ended (exit code %d) "
              "after %llu barriers\n", rank, (int)getpid(), (unsigned long long)n, r, shm->exitCode[r],
              (unsigned long long)__atomic_load_n(&shm->arrived[r], __ATOMIC_ACQUIRE));
      return giveUp(shm, rank, n, TEST_SHM_ABORTED);
    }
    const long elapsed = testElapsedMs(&start);
    if (elapsed > shm->timeoutMs) {
      char late[256] = "";
      size_t used = 0;
      for (int r = 0; r < shm->nranks && used < sizeof(late) - 8; r++)
        if (__atomic_load_n(&shm->arrived[r], __ATOMIC_ACQUIRE) < n)
          used += (size_t)snprintf(late + used, sizeof(late) - used, " %d", r);
      fprintf(stderr, "test_shm: rank %d (pid %d): barrier %llu timed out after %d ms; not arrived: rank(s)%s\n",
              rank, (int)getpid(), (unsigned long long)n, shm->timeoutMs, late);
      return giveUp(shm, rank, n, TEST_SHM_TIMEOUT);
    }
    backOff(elapsed);
  }
}

int testShmAllGather(struct testShm* shm, int rank, void* data, size_t bytes) {
  if (!shm || rank < 0 || rank >= shm->nranks || bytes > shm->recordBytes) {
    fprintf(stderr, "test_shm: all-gather of %zu bytes per rank by rank %d: invalid (records of %zu bytes, %d ranks)\n",
            bytes, rank, shm ? shm->recordBytes : 0, shm ? shm->nranks : 0);
    return TEST_SHM_INVALID;
  }
  memcpy(records(shm) + (size_t)rank * bytes, (unsigned char*)data + (size_t)rank * bytes, bytes);
  int result = testShmBarrier(shm, rank);
  if (result != TEST_SHM_OK) return result;
  memcpy(data, records(shm), bytes * (size_t)shm->nranks);
  return testShmBarrier(shm, rank);
}

void testShmPost(int* flag, int value) { __atomic_store_n(flag, value, __ATOMIC_RELEASE); }

int testShmWait(struct testShm* shm, const int* flag, int value, int timeoutMs, const char* what) {
  if (!shm || !flag) return TEST_SHM_INVALID;
  const int bound = timeoutMs > 0 ? timeoutMs : shm->timeoutMs;
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) >= value) return TEST_SHM_OK;
    if (testShmAborted(shm)) {
      fprintf(stderr, "test_shm: pid %d: waiting for %s: aborted: %s\n", (int)getpid(), what, shm->abortWhy);
      return TEST_SHM_ABORTED;
    }
    const long elapsed = testElapsedMs(&start);
    if (elapsed > bound) {
      fprintf(stderr, "test_shm: pid %d: %s did not come within %d ms\n", (int)getpid(), what, bound);
      return TEST_SHM_TIMEOUT;
    }
    backOff(elapsed);
  }
}

static void rankEnded(int rank, int code, void* ctx) {
  struct testShm* shm = ctx;
  shm->exitCode[rank] = code;
  __atomic_store_n(&shm->gone[rank], 1, __ATOMIC_RELEASE);
  if (code == -1)
    markAborted(shm, rank, "rank %d was killed by a signal", rank);
  else if (code == -2)
    markAborted(shm, rank, "rank %d was killed at the time limit", rank);
  else if (code != 0)
    markAborted(shm, rank, "rank %d ended with exit code %d", rank, code);
}

int testShmForkRanks(struct testShm* shm, int (*fn)(int rank, int nranks, void* arg), void* arg, int timeoutSeconds,
                     int* exitCodes) {
  return testForkRanksWatched(shm->nranks, fn, arg, timeoutSeconds, exitCodes, rankEnded, shm);
}
