/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rank a timeout names is the one that is stuck: four ranks run all-gathers in a loop and rank 2 is stopped
 * (SIGSTOP) at a random moment, most often in the middle of an all-gather, after it passed on some chunks and not
 * others. The ranks after it wait for data it never passes on, and so, in turn, does every rank after them: each
 * live rank's all-gather must fail naming rank 2, in every trial. Rank 2 is continued afterwards and fails too.
 */
#include "bootstrap.h"
#include "test.h"
#include "test_bootstrap_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NRANKS 4
#define STUCK 2
#define TRIALS 6
#define TIMEOUT_MS 2000
#define CHUNK (64u << 10)
#define LOOP_MAX_MS 30000
#define FLAG_PID 40 /* of struct bootShared's flags: the stuck rank's pid */
#define TEXT_BYTES 320

struct blameShared {
  struct bootShared boot;
  char errors[NRANKS][TEXT_BYTES];
  int ops[NRANKS]; /* all-gathers each rank completed */
};

static uint64_t seed;

/* In the stuck rank's process: stops the whole process a little later, while the all-gathers run. */
static void* stopSoon(void* arg) {
  bootSleepMs((int)(intptr_t)arg);
  raise(SIGSTOP);
  return NULL;
}

static int blameRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct blameShared* sh = arg;
  struct bootShared* shared = &sh->boot;
  fcclUniqueId id;
  if (rank == 0) {
    if (fcclBootstrapGetUniqueId(&id, TIMEOUT_MS * 4) != fcclSuccess) return 1;
    bootPublishId(shared, &id);
  } else if (!bootWaitId(shared, &id)) {
    return 1;
  }
  if (rank == STUCK) testShmPost(&shared->flags[FLAG_PID], (int)getpid());
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&id, rank, nranks, TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  uint8_t* data = malloc(NRANKS * CHUNK);
  if (!data) return 1;
  pthread_t stopper;
  if (rank == STUCK) {
    uint64_t state = seed;
    const int delayMs = 50 + (int)(testRandom(&state) % 350);
    EXPECT_EQ_INT(pthread_create(&stopper, NULL, stopSoon, (void*)(intptr_t)delayMs), 0);
  }
  for (const int64_t end = bootNowMs() + LOOP_MAX_MS; res == fcclSuccess && bootNowMs() < end;) {
    for (size_t i = 0; i < CHUNK; i += 4096) data[(size_t)rank * CHUNK + i] = (uint8_t)(sh->ops[rank] + rank);
    res = fcclBootstrapAllGather(b, data, CHUNK);
    if (res == fcclSuccess) sh->ops[rank]++;
  }
  snprintf(sh->errors[rank], TEXT_BYTES, "%s", fcclGetLastError(NULL));
  EXPECT_MSG(res != fcclSuccess, "rank %d: the all-gathers went on with rank %d stopped", rank, STUCK);
  if (rank == 0) kill(shared->flags[FLAG_PID], SIGCONT); /* the others have their answer or get it by relay */
  if (rank == STUCK) pthread_join(stopper, NULL);
  free(data);
  fcclBootstrapDestroy(b);
  return testFailed != 0;
}

int main(void) {
  seed = testSeed();
  int right = 0;
  for (int trial = 0; trial < TRIALS; trial++) {
    struct testShm* shm = testShmCreate(NRANKS, 0, sizeof(struct blameShared), 30000);
    if (!shm) return 1;
    struct blameShared* sh = testShmUser(shm);
    sh->boot.shm = shm;
    seed = seed * 6364136223846793005ull + 1442695040888963407ull; /* another stop time each trial */
    int codes[NRANKS];
    testShmForkRanks(shm, blameRank, sh, 60, codes);
    int named = 0;
    for (int r = 0; r < NRANKS; r++) {
      if (r == STUCK) continue;
      /* Every message that names a culprit starts with it ("rank 2 did not reach ...", "rank 2 stopped passing
       * data on ..."); a relayed one carries the text of the rank that found it. */
      const int ok = strncmp(sh->errors[r], "rank 2 ", 7) == 0;
      named += ok;
      printf("trial %d, rank %d (%d all-gathers): %s%s\n", trial, r, sh->ops[r], ok ? "" : "WRONG: ", sh->errors[r]);
      EXPECT_EQ_INT(codes[r], 0);
    }
    right += named == NRANKS - 1;
    testShmDestroy(shm);
  }
  EXPECT_MSG(right == TRIALS, "rank %d was named by every live rank in %d of %d trials", STUCK, right, TRIALS);
  printf("rank %d, stopped in the middle of all-gathers, named by every live rank in %d of %d trials: %s\n", STUCK,
         right, TRIALS, right == TRIALS ? "ok" : "FAILED");
  return testSummary("bootstrap_blame");
}
