/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The benchmark's out-of-band exchange. Every operation is an all-gather of one slot per agent; the shared-memory
 * implementation serves threads of one process and the processes the launcher forks (the mapping is made before
 * fork). Waits are bounded (the -T timeout, 300 s by default) and fail fast once any agent has given up.
 */
#include "bench.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define DEFAULT_TIMEOUT_SEC 300

typedef struct {
  atomic_uint arrived;
  atomic_uint generation;
  atomic_int aborted;
  atomic_int stopRequested; /* -N 0: a signal asked the run to stop (benchShmRequestStop) */
  int nAgents;
  size_t mapBytes;
  unsigned char slots[]; /* two buffers (alternating per exchange) of nAgents slots */
} shmRegion_t;

static void oobError(benchOob_t* oob, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void oobError(benchOob_t* oob, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(oob->error, sizeof(oob->error), fmt, ap);
  va_end(ap);
}

void* benchShmCreate(int nAgents) {
  if (nAgents < 1) {
    errno = EINVAL;
    return NULL;
  }
  size_t bytes = sizeof(shmRegion_t) + 2 * (size_t)nAgents * BENCH_OOB_SLOT;
  void* map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return NULL;
  shmRegion_t* region = (shmRegion_t*)map;
  atomic_init(&region->arrived, 0);
  atomic_init(&region->generation, 0);
  atomic_init(&region->aborted, 0);
  atomic_init(&region->stopRequested, 0);
  region->nAgents = nAgents;
  region->mapBytes = bytes;
  return region;
}

void benchShmRequestStop(void* region) {
  if (region) atomic_store(&((shmRegion_t*)region)->stopRequested, 1);
}

int benchShmStopRequested(void* region) { return region ? atomic_load(&((shmRegion_t*)region)->stopRequested) : 0; }

void benchShmDestroy(void* region) {
  if (region) munmap(region, ((shmRegion_t*)region)->mapBytes);
}

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Central counter barrier: the last agent to arrive resets the count and bumps the generation. */
static int shmBarrier(benchOob_t* oob, shmRegion_t* region) {
  unsigned generation = atomic_load(&region->generation);
  if (atomic_load(&region->aborted)) {
    oobError(oob, "another rank gave up");
    return -1;
  }
  if (atomic_fetch_add(&region->arrived, 1) == (unsigned)region->nAgents - 1) {
    atomic_store(&region->arrived, 0);
    atomic_fetch_add(&region->generation, 1);
    return 0;
  }
  int timeout = oob->timeoutSec > 0 ? oob->timeoutSec : DEFAULT_TIMEOUT_SEC;
  double deadline = nowSec() + timeout;
  for (unsigned long spins = 0; atomic_load(&region->generation) == generation; spins++) {
    if (atomic_load(&region->aborted)) {
      oobError(oob, "another rank gave up");
      return -1;
    }
    if (spins < 2000) continue;
    /* Past the first microseconds, stop burning a core that a rank's own work may need. */
    struct timespec pause = {0, 20000};
    nanosleep(&pause, NULL);
    if ((spins & 63) == 0 && nowSec() > deadline) {
      atomic_store(&region->aborted, 1);
      oobError(oob, "timed out after %d s waiting for the other ranks (a rank died or hangs; -T changes the bound)",
               timeout);
      return -1;
    }
  }
  return 0;
}

static int shmAllgather(benchOob_t* oob, const void* mine, size_t bytes, void* all) {
  shmRegion_t* region = (shmRegion_t*)oob->state;
  if (bytes > BENCH_OOB_SLOT) {
    oobError(oob, "exchange of %zu bytes exceeds the %d-byte slot", bytes, BENCH_OOB_SLOT);
    return -1;
  }
  unsigned char* buffer = region->slots + (size_t)(oob->phase & 1) * region->nAgents * BENCH_OOB_SLOT;
  if (bytes) memcpy(buffer + (size_t)oob->agent * BENCH_OOB_SLOT, mine, bytes);
  if (shmBarrier(oob, region) != 0) return -1;
  /* Safe to read until our next barrier: the next exchange writes the other buffer, and nobody can write this one
   * again before every agent has passed that next barrier, which we reach only after reading. */
  for (int agent = 0; agent < region->nAgents; agent++)
    if (bytes) memcpy((unsigned char*)all + (size_t)agent * bytes, buffer + (size_t)agent * BENCH_OOB_SLOT, bytes);
  oob->phase++;
  return 0;
}

void benchShmAbort(void* region) {
  if (region) atomic_store(&((shmRegion_t*)region)->aborted, 1);
}

static void shmAbort(benchOob_t* oob) { benchShmAbort(oob->state); }

void benchOobShmInit(benchOob_t* oob, void* region, int agent, int timeoutSec) {
  memset(oob, 0, sizeof(*oob));
  oob->nAgents = ((shmRegion_t*)region)->nAgents;
  oob->agent = agent;
  oob->allgather = shmAllgather;
  oob->abort = shmAbort;
  oob->state = region;
  oob->timeoutSec = timeoutSec;
}

int benchOobBarrier(benchOob_t* oob) {
  char none = 0;
  char* all = (char*)malloc((size_t)oob->nAgents);
  if (!all) {
    oobError(oob, "out of memory");
    return -1;
  }
  int status = oob->allgather(oob, &none, 1, all);
  free(all);
  return status;
}

int benchOobBcast(benchOob_t* oob, void* data, size_t bytes) {
  const size_t chunk = BENCH_OOB_SLOT;
  unsigned char* all = (unsigned char*)malloc((size_t)oob->nAgents * chunk);
  if (!all) {
    oobError(oob, "out of memory");
    return -1;
  }
  int status = 0;
  for (size_t offset = 0; offset < bytes && status == 0; offset += chunk) {
    size_t n = bytes - offset < chunk ? bytes - offset : chunk;
    status = oob->allgather(oob, (unsigned char*)data + offset, n, all);
    if (status == 0 && oob->agent != 0) memcpy((unsigned char*)data + offset, all, n);
  }
  free(all);
  return status;
}

int benchOobReduce(benchOob_t* oob, double* values, int n, int how) {
  if (n < 0 || (size_t)n * sizeof(double) > BENCH_OOB_SLOT) {
    oobError(oob, "reduction of %d values exceeds the slot", n);
    return -1;
  }
  double* all = (double*)malloc((size_t)oob->nAgents * (size_t)(n > 0 ? n : 1) * sizeof(double));
  if (!all) {
    oobError(oob, "out of memory");
    return -1;
  }
  int status = oob->allgather(oob, values, (size_t)n * sizeof(double), all);
  if (status == 0) {
    for (int i = 0; i < n; i++) {
      double result = all[i];
      for (int agent = 1; agent < oob->nAgents; agent++) {
        double v = all[(size_t)agent * n + i];
        switch (how) {
          case BENCH_REDUCE_SUM:
          case BENCH_REDUCE_AVG: result += v; break;
          case BENCH_REDUCE_MIN: result = v < result ? v : result; break;
          case BENCH_REDUCE_MAX: result = v > result ? v : result; break;
          default: break; /* FIRST: agent 0's */
        }
      }
      values[i] = how == BENCH_REDUCE_AVG ? result / oob->nAgents : result;
    }
  }
  free(all);
  return status;
}

void benchOobAbort(benchOob_t* oob) {
  if (oob && oob->abort) oob->abort(oob);
}

int benchOobGatherDoubles(benchOob_t* oob, const double* mine, int n, double* all) {
  enum { PIECE = BENCH_OOB_SLOT / sizeof(double) };
  double* piece = (double*)malloc((size_t)oob->nAgents * PIECE * sizeof(double));
  if (!piece) {
    oobError(oob, "out of memory");
    return -1;
  }
  int status = 0;
  int first = 0;
  /* n == 0 still takes part in one exchange, so that every agent makes the same number of them. */
  do {
    const int count = n - first < (int)PIECE ? n - first : (int)PIECE;
    status = oob->allgather(oob, mine + first, (size_t)count * sizeof(double), piece);
    for (int a = 0; status == 0 && a < oob->nAgents; a++)
      memcpy(all + (size_t)a * n + first, piece + (size_t)a * count, (size_t)count * sizeof(double));
    first += PIECE;
  } while (status == 0 && first < n);
  free(piece);
  return status;
}
