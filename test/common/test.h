/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small test harness: EXPECT* record failures without stopping, each binary ends with the plain summary line
 * "N passed, N failed" and exits non-zero on any failure, or when it checked nothing at all; 77 means skipped
 * (meson's convention).
 */
#ifndef FCCL_TEST_H_
#define FCCL_TEST_H_

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TEST_SKIP 77

extern int testPassed;
extern int testFailed;

void testFail(const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

#define EXPECT(cond)                                                   \
  do {                                                                 \
    if (cond)                                                          \
      testPassed++;                                                    \
    else                                                               \
      testFail(__FILE__, __LINE__, "expected %s", #cond);              \
  } while (0)

#define EXPECT_MSG(cond, ...)                          \
  do {                                                 \
    if (cond)                                          \
      testPassed++;                                    \
    else                                               \
      testFail(__FILE__, __LINE__, __VA_ARGS__);       \
  } while (0)

#define EXPECT_EQ_INT(a, b)                                                                                \
  do {                                                                                                     \
    long long testA_ = (long long)(a), testB_ = (long long)(b);                                            \
    if (testA_ == testB_)                                                                                  \
      testPassed++;                                                                                        \
    else                                                                                                   \
      testFail(__FILE__, __LINE__, "expected %s == %s, got %lld and %lld", #a, #b, testA_, testB_);        \
  } while (0)

#define EXPECT_STR_CONTAINS(haystack, needle)                                                            \
  do {                                                                                                   \
    const char* testH_ = (haystack);                                                                     \
    if (testH_ && strstr(testH_, (needle)))                                                              \
      testPassed++;                                                                                      \
    else                                                                                                 \
      testFail(__FILE__, __LINE__, "expected \"%s\" to contain \"%s\"", testH_ ? testH_ : "(null)", (needle)); \
  } while (0)

/* Prints the summary line and returns the process exit code: 1 when a check failed or none ran (a test that
 * checks nothing proves nothing; one that cannot run exits TEST_SKIP instead of calling this). */
int testSummary(const char* name);

/* Number of visible CUDA devices, counted in a child process so the caller may still fork ranks afterwards. */
int testGpuCount(void);

/* Exits 77 unless at least minGpus CUDA devices are visible (fork-safe, like testGpuCount). */
void testRequireGpus(int minGpus);

/* Reproducible random data: seed from FCCLTEST_SEED or the clock; the seed is printed so a failure can be re-run. */
uint64_t testSeed(void);
uint64_t testRandom(uint64_t* state);

/*
 * Runs fn(rank, nranks, arg) in nranks forked processes and waits at most timeoutSeconds for all of them; a rank
 * still running then is killed with SIGKILL and counts as failed. Returns the number of ranks that failed
 * (non-zero exit, signal or timeout). Each rank's exit code is stored in exitCodes when it is not NULL
 * (-1: killed by a signal, -2: timed out). Each rank starts with no checks counted, so that its testSummary reports
 * (and fails on zero of) its own.
 */
int testForkRanks(int nranks, int (*fn)(int rank, int nranks, void* arg), void* arg, int timeoutSeconds,
                  int* exitCodes);

/* testForkRanks, calling onExit(rank, exitCode, ctx) in this process as soon as it sees a rank end (exitCode as in
 * exitCodes), e.g. to abort the waits of its peers (testShmForkRanks). */
int testForkRanksWatched(int nranks, int (*fn)(int rank, int nranks, void* arg), void* arg, int timeoutSeconds,
                         int* exitCodes, void (*onExit)(int rank, int exitCode, void* ctx), void* ctx);

/* Milliseconds since start (CLOCK_MONOTONIC). */
long testElapsedMs(const struct timespec* start);

#endif /* FCCL_TEST_H_ */
