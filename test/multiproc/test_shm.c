/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared-memory region the multi-rank tests meet through (test/common/test_shm.h), on forked ranks: the
 * barrier holds every rank until the last arrives, many times over; the all-gather returns every rank's record;
 * a posted flag releases its waiters; and no wait outlives its bound or a peer: a rank that dies, exits before the
 * barrier or calls testShmAbort ends its peers' waits at once, a missing rank ends them at the timeout.
 * Time bounds here are generous (CI machines are slow and the ASan build slower): they catch hangs, not speed.
 */
#include "test.h"
#include "test_shm.h"

#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#define NRANKS 4
#define ROUNDS 2000
#define TIMEOUT_MS 20000 /* the region's bound: what must end early ends well before it */

struct record {
  int32_t rank;
  int32_t pid;
  uint64_t value;
};

/* The caller's area: one word per rank and round, written before a barrier and read after it. */
struct area {
  uint64_t words[NRANKS];
  int go;
};

static uint64_t word(int rank, int round) { return ((uint64_t)round << 8) | (uint64_t)rank; }

/* ROUNDS barriers: after each, every rank's word of the round is visible; before the next, nobody has moved on. */
static int barrierRank(int rank, int nranks, void* arg) {
  struct testShm* shm = arg;
  struct area* area = testShmUser(shm);
  int wrong = 0, failed = 0;
  for (int round = 0; round < ROUNDS && !failed; round++) {
    if (rank == round % nranks) usleep(200); /* a different late rank every round */
    area->words[rank] = word(rank, round);
    failed |= testShmBarrier(shm, rank) != TEST_SHM_OK;
    for (int r = 0; r < nranks; r++) wrong += area->words[r] != word(r, round);
    failed |= testShmBarrier(shm, rank) != TEST_SHM_OK; /* read before anyone writes the next round */
  }
  EXPECT_EQ_INT(failed, 0);
  EXPECT_MSG(wrong == 0, "rank %d: %d words of a round not visible after its barrier", rank, wrong);

  struct record records[NRANKS];
  memset(records, 0, sizeof(records));
  for (int round = 0; round < 100; round++) {
    records[rank] = (struct record){rank, (int32_t)getpid(), word(rank, round)};
    EXPECT_EQ_INT(testShmAllGather(shm, rank, records, sizeof(records[0])), TEST_SHM_OK);
    for (int r = 0; r < nranks; r++)
      if (records[r].rank != r || records[r].value != word(r, round)) wrong++;
  }
  EXPECT_MSG(wrong == 0, "rank %d: %d all-gathered records wrong", rank, wrong);
  EXPECT(records[(rank + 1) % nranks].pid != (int32_t)getpid());
  EXPECT_EQ_INT(testShmAllGather(shm, rank, records, sizeof(records[0]) + 1), TEST_SHM_INVALID);
  EXPECT_EQ_INT(testShmBarrier(shm, nranks), TEST_SHM_INVALID);

  /* Rank 0 posts, after writing what the others then read. */
  if (rank == 0) {
    usleep(50000);
    area->words[0] = 42;
    testShmPost(&area->go, 1);
  }
  EXPECT_EQ_INT(testShmWait(shm, &area->go, 1, 0, "rank 0's go"), TEST_SHM_OK);
  EXPECT_EQ_INT(area->words[0], 42);
  EXPECT_EQ_INT(testShmWait(shm, &area->go, 2, 100, "a value never posted"), TEST_SHM_TIMEOUT);
  EXPECT(!testShmAborted(shm)); /* a flag's timeout is the waiter's business only */
  return testSummary("shm barrier rank") != 0;
}

static void testBarrier(void) {
  struct testShm* shm = testShmCreate(NRANKS, sizeof(struct record), sizeof(struct area), TIMEOUT_MS);
  EXPECT(shm != NULL);
  if (!shm) return;
  EXPECT_EQ_INT(testShmRanks(shm), NRANKS);
  EXPECT_EQ_INT((uintptr_t)testShmUser(shm) % 64, 0);
  int codes[NRANKS];
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  EXPECT_EQ_INT(testShmForkRanks(shm, barrierRank, shm, 120, codes), 0);
  for (int r = 0; r < NRANKS; r++) EXPECT_MSG(codes[r] == 0, "barrier: rank %d exited with %d", r, codes[r]);
  EXPECT(!testShmAborted(shm));
  printf("%d ranks: %d barriers and 100 all-gathers in %ld ms\n", NRANKS, 2 * ROUNDS, testElapsedMs(&start));
  testShmDestroy(shm);
}

/* ---- waits that must end early, and the one that ends at its bound ---- */

enum { VICTIM = 2 };

struct endArgs {
  struct testShm* shm;
  const char* how; /* "killed", "fails", "leaves", "aborts", "late" */
};

/* Everyone meets once; then the victim ends (or, "late", sleeps past the timeout) while the others wait at a second
 * barrier. A survivor exits 0 when its wait ended as expected, soon enough. */
static int endRank(int rank, int nranks, void* arg) {
  (void)nranks;
  const struct endArgs* args = arg;
  if (testShmBarrier(args->shm, rank) != TEST_SHM_OK) return 10;
  if (rank == VICTIM) {
    if (!strcmp(args->how, "killed")) raise(SIGKILL);
    if (!strcmp(args->how, "fails")) return 3;
    if (!strcmp(args->how, "leaves")) return 0;
    if (!strcmp(args->how, "aborts")) {
      usleep(100000);
      testShmAbort(args->shm, rank);
      return 0;
    }
    usleep(1000000 + 500000); /* "late": past the 1 s bound */
    return testShmBarrier(args->shm, rank) == TEST_SHM_OK ? 11 : 0;
  }
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  const int expected = strcmp(args->how, "late") ? TEST_SHM_ABORTED : TEST_SHM_TIMEOUT;
  const int result = testShmBarrier(args->shm, rank);
  const long elapsed = testElapsedMs(&start);
  if (result != TEST_SHM_ABORTED && result != expected) {
    fprintf(stderr, "%s: rank %d: barrier returned %s, expected %s\n", args->how, rank, testShmResultName(result),
            testShmResultName(expected));
    return 12;
  }
  if (elapsed > 5000) {
    fprintf(stderr, "%s: rank %d: the barrier took %ld ms to give up\n", args->how, rank, elapsed);
    return 13;
  }
  /* Later waits end at once too. */
  int flag = 0;
  if (testShmWait(args->shm, &flag, 1, TIMEOUT_MS, "a flag nobody posts") != TEST_SHM_ABORTED) return 14;
  return 0;
}

static void testEnd(const char* how, int victimCode, int shortTimeout) {
  struct testShm* shm = testShmCreate(NRANKS, 0, 0, shortTimeout ? 1000 : TIMEOUT_MS);
  EXPECT(shm != NULL);
  if (!shm) return;
  struct endArgs args = {shm, how};
  int codes[NRANKS];
  testShmForkRanks(shm, endRank, &args, 60, codes);
  for (int r = 0; r < NRANKS; r++) {
    const int expected = r == VICTIM ? victimCode : 0;
    EXPECT_MSG(codes[r] == expected, "%s: rank %d exited with %d, expected %d", how, r, codes[r], expected);
  }
  EXPECT(testShmAborted(shm));
  testShmDestroy(shm);
  printf("victim %s: its peers' waits ended\n", how);
}

int main(void) {
  EXPECT(testShmCreate(0, 0, 0, 1000) == NULL);
  EXPECT(testShmCreate(TEST_SHM_MAX_RANKS + 1, 0, 0, 1000) == NULL);
  EXPECT(testShmCreate(2, 0, 0, 0) == NULL);
  testBarrier();
  testEnd("killed", -1, 0);   /* died: the parent saw it */
  testEnd("fails", 3, 0);     /* exited non-zero */
  testEnd("leaves", 0, 0);    /* exited 0 before the barrier its peers wait at */
  testEnd("aborts", 0, 0);    /* testShmAbort */
  testEnd("late", 0, 1);      /* alive but late: the 1 s bound, which then aborts the region for the rest */
  return testSummary("shm");
}
