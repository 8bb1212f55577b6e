/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A rank that is alive but stops reading for longer than the keepalive (FCCL_PEER_KEEPALIVE_MS, 2 s by default) and
 * shorter than the operation's timeout fails nothing: rank 2 of three stops (SIGSTOP) for 8 s at the start of an
 * all-gather, once with chunks far larger than the socket buffers (its previous rank's sends meet a closed window the
 * whole time) and once with chunks that fit in them, and is continued. Its kernel answers every keepalive probe and
 * every window probe meanwhile, so the all-gathers complete with the right bytes everywhere, and the ring carries a
 * barrier after. (A host that stops answering still fails within the keepalive: multiproc/vanished_host.)
 */
#include "bootstrap.h"
#include "param.h"
#include "test.h"
#include "test_bootstrap_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NRANKS 3
#define TIMEOUT_MS 30000
#define STOP_MS 8000
#define BIG_CHUNK (16u << 20) /* far beyond loopback's socket buffers */
#define SMALL_CHUNK (1u << 20)
#define FLAG_PID 40   /* of struct bootShared's flags: rank 2's pid */
#define FLAG_STOPS 41 /* how many stops rank 0 has seen through */

static uint64_t seed;

/* 1 once process pid is stopped (its state in /proc is T), within ms. */
static int waitStopped(int pid, int ms) {
  char path[64], line[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  for (const int64_t start = bootNowMs(); bootNowMs() - start < ms; bootSleepMs(1)) {
    FILE* file = fopen(path, "r");
    if (!file) return 0;
    const char* state = fgets(line, sizeof(line), file) ? strrchr(line, ')') : NULL;
    fclose(file);
    if (state && state[1] == ' ' && state[2] == 'T') return 1;
  }
  return 0;
}

/* In rank 0's process: once rank 2 has stopped, continues it STOP_MS later. */
static void* continuer(void* arg) {
  struct bootShared* shared = arg;
  const int pid = shared->flags[FLAG_PID];
  if (!waitStopped(pid, 10000)) {
    fprintf(stderr, "rank 2 (pid %d) did not stop\n", pid);
    return NULL;
  }
  bootSleepMs(STOP_MS);
  kill(pid, SIGCONT);
  return NULL;
}

/* One all-gather of chunk bytes per rank with rank 2 stopped for STOP_MS at its start; 0 when it went well. */
static int stoppedAllGather(struct bootShared* shared, struct fcclBootstrap* b, int rank, size_t chunk, int op) {
  uint8_t* data = malloc(NRANKS * chunk);
  if (!data) return 1;
  for (size_t i = 0; i < chunk; i++) data[(size_t)rank * chunk + i] = bootByte(seed, op, rank, i);
  pthread_t thread;
  EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);
  if (rank == 0) EXPECT_EQ_INT(pthread_create(&thread, NULL, continuer, shared), 0);
  if (rank == 2) raise(SIGSTOP); /* rank 0's thread continues it */
  const int64_t start = bootNowMs();
  fcclResult_t res = fcclBootstrapAllGather(b, data, chunk);
  EXPECT_MSG(res == fcclSuccess, "rank %d: the all-gather of %zu bytes per rank with rank 2 stopped for %d ms: %s",
             rank, chunk, STOP_MS, fcclGetLastError(NULL));
  long wrong = 0;
  for (int r = 0; r < NRANKS && res == fcclSuccess; r++)
    for (size_t i = 0; i < chunk; i++) wrong += data[(size_t)r * chunk + i] != bootByte(seed, op, r, i);
  EXPECT_EQ_INT(wrong, 0);
  printf("rank %d: an all-gather of %zu KiB per rank, rank 2 stopped for %d ms: %s after %lld ms\n", rank, chunk >> 10,
         STOP_MS, res == fcclSuccess ? "complete" : "FAILED", (long long)(bootNowMs() - start));
  if (rank == 0) pthread_join(thread, NULL);
  free(data);
  return res != fcclSuccess || wrong != 0;
}

static int slowRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct bootShared* shared = arg;
  unsetenv("FCCL_PEER_KEEPALIVE_MS"); /* the default keepalive, which the stop outlasts four times */
  fcclParamResetForTest();
  fcclUniqueId id;
  if (rank == 0) {
    if (fcclBootstrapGetUniqueId(&id, TIMEOUT_MS) != fcclSuccess) return 1;
    bootPublishId(shared, &id);
  } else if (!bootWaitId(shared, &id)) {
    return 1;
  }
  if (rank == 2) testShmPost(&shared->flags[FLAG_PID], (int)getpid());
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&id, rank, nranks, TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  if (stoppedAllGather(shared, b, rank, BIG_CHUNK, 1) == 0) stoppedAllGather(shared, b, rank, SMALL_CHUNK, 2);
  EXPECT_EQ_INT(fcclBootstrapBarrier(b), fcclSuccess);
  fcclBootstrapDestroy(b);
  return testFailed != 0;
}

int main(void) {
  seed = testSeed();
  struct bootShared* shared = bootSharedNew(NRANKS);
  int codes[NRANKS];
  int failed = testShmForkRanks(shared->shm, slowRank, shared, 100, codes);
  EXPECT_MSG(failed == 0, "%d ranks failed (exit codes %d %d %d)", failed, codes[0], codes[1], codes[2]);
  bootSharedFree(shared);
  printf("a rank stopped for %d ms, longer than the keepalive, fails nothing: %s\n", STOP_MS, failed ? "FAILED" : "ok");
  return testSummary("bootstrap_slow");
}
