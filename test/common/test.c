/* SPDX-License-Identifier: Apache-2.0 */
#include "test.h"

#include <signal.h>
#include <stdarg.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int testPassed;
int testFailed;

void testFail(const char* file, int line, const char* fmt, ...) {
  testFailed++;
  fprintf(stderr, "FAIL %s:%d (pid %d): ", file, line, (int)getpid());
  va_list args;
  va_start(args, fmt);
  vfprintf(stderr, fmt, args);
  va_end(args);
  fprintf(stderr, "\n");
}

int testSummary(const char* name) {
  printf("%s: %d passed, %d failed\n", name, testPassed, testFailed);
  if (testPassed == 0 && testFailed == 0) printf("%s: FAIL: no check ran\n", name);
  fflush(stdout);
  return testFailed == 0 && testPassed > 0 ? 0 : 1;
}

uint64_t testSeed(void) {
  const char* fixed = getenv("FCCLTEST_SEED");
  uint64_t seed = fixed ? strtoull(fixed, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  fprintf(stderr, "random seed %" PRIu64 " (set FCCLTEST_SEED to repeat)\n", seed);
  return seed;
}

/* splitmix64: tiny, good enough for test data, identical on every platform. */
uint64_t testRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

long testElapsedMs(const struct timespec* start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long)(now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

int testForkRanks(int nranks, int (*fn)(int rank, int nranks, void* arg), void* arg, int timeoutSeconds,
                  int* exitCodes) {
  return testForkRanksWatched(nranks, fn, arg, timeoutSeconds, exitCodes, NULL, NULL);
}

int testForkRanksWatched(int nranks, int (*fn)(int rank, int nranks, void* arg), void* arg, int timeoutSeconds,
                         int* exitCodes, void (*onExit)(int rank, int exitCode, void* ctx), void* ctx) {
  pid_t pids[64];
  if (nranks > 64) return nranks;
  fflush(stdout);
  fflush(stderr);
  for (int rank = 0; rank < nranks; rank++) {
    pids[rank] = fork();
    if (pids[rank] == 0) {
      testPassed = 0; /* the rank's testSummary counts its own checks, not the parent's before the fork */
      testFailed = 0;
      int code = fn(rank, nranks, arg);
      fflush(stdout);
      fflush(stderr);
      _exit(code);
    }
  }
  int failed = 0;
  int remaining = nranks;
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  int codes[64];
  for (int rank = 0; rank < nranks; rank++) codes[rank] = -2;
  while (remaining > 0) {
    int status;
    pid_t done = waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      for (int rank = 0; rank < nranks; rank++) {
        if (pids[rank] != done) continue;
        codes[rank] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (codes[rank] != 0) failed++;
        remaining--;
        if (onExit) onExit(rank, codes[rank], ctx);
      }
      continue;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec >= timeoutSeconds) {
      for (int rank = 0; rank < nranks; rank++) {
        if (codes[rank] != -2) continue;
        fprintf(stderr, "rank %d (pid %d) still running after %d s: killing it\n", rank, (int)pids[rank],
                timeoutSeconds);
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], NULL, 0);
        failed++;
        remaining--;
        if (onExit) onExit(rank, -2, ctx);
      }
      break;
    }
    usleep(2000);
  }
  if (exitCodes)
    for (int rank = 0; rank < nranks; rank++) exitCodes[rank] = codes[rank];
  return failed;
}
