/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclCommSplit's exchange over its parent (src/core/comm/split.h), without a GPU: 6 forked ranks make a parent of
 * a real TCP bootstrap and real peer information, and split it again and again. Each split is checked against the
 * rule (the ranks of a color, ordered by key, then by parent rank): the plan's size, place and members on every
 * rank, then the child's own bootstrap through the unique id the exchange handed round (an all-gather over it gives
 * the members' parent ranks in child order), and the child's peer information (each member's process, renumbered,
 * the same fresh salts on every member). Splits: one color with keys reversed; two colors; three colors with a
 * FCCL_SPLIT_NOCOLOR rank; equal keys; a split of a child (nested); a rank that failed before the exchange (its
 * colour's ranks fail naming it, the other colour's child works); a rank gone (every other rank's exchange fails
 * and says the parent's bootstrap is broken). At the end no root thread is left. The GPU tests
 * (test/gpu/test_comm_split.c) run the whole call.
 */
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "split.h"
#include "test.h"
#include "test_bootstrap_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NRANKS 6
#define TIMEOUT_MS 10000

/* What a split needs of a communicator: its rank, size, bootstrap and peers' information. */
static struct fcclComm* fakeComm(int rank, int nranks, struct fcclBootstrap* bootstrap, struct fcclPeerInfo* infos,
                                 int* abortFlag) {
  struct fcclComm* comm = calloc(1, sizeof(*comm));
  if (!comm) exit(1);
  comm->magic = FCCL_COMM_MAGIC;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->timeoutMs = TIMEOUT_MS;
  comm->abortFlag = abortFlag;
  comm->bootstrap = bootstrap;
  comm->peerInfo = infos;
  pthread_mutex_init(&comm->errorLock, NULL);
  return comm;
}

static void fakeCommFree(struct fcclComm* comm) {
  if (!comm) return;
  fcclBootstrapDestroy(comm->bootstrap);
  free(comm->peerInfo);
  pthread_mutex_destroy(&comm->errorLock);
  free(comm);
}

static int abortFlagOfAll;

/* The parent: a bootstrap through the id rank 0 makes, and every rank's peer information. */
static struct fcclComm* makeParent(struct bootShared* shared, int rank) {
  fcclUniqueId id;
  if (rank == 0) {
    if (fcclBootstrapGetUniqueId(&id, TIMEOUT_MS) != fcclSuccess) return NULL;
    bootPublishId(shared, &id);
  } else if (!bootWaitId(shared, &id)) {
    return NULL;
  }
  struct fcclBootstrap* b = NULL;
  if (fcclBootstrapTcpInit(&id, rank, NRANKS, TIMEOUT_MS, &abortFlagOfAll, &b) != fcclSuccess) return NULL;
  struct fcclPeerInfo* infos = calloc(NRANKS, sizeof(*infos));
  if (!infos || fcclPeerInfoFillHost(&infos[rank], rank, NRANKS) != fcclSuccess ||
      fcclBootstrapAllGather(b, infos, sizeof(*infos)) != fcclSuccess) {
    free(infos);
    fcclBootstrapDestroy(b);
    return NULL;
  }
  return fakeComm(rank, NRANKS, b, infos, &abortFlagOfAll);
}

typedef int (*pickFn)(int rank);

/* The rule, written out plainly: the ranks of color, by key then rank. Returns the count. */
static int expectedMembers(int nranks, pickFn color, pickFn key, int want, int* members) {
  int count = 0;
  int taken[64] = {0};
  for (;;) {
    int best = -1;
    for (int r = 0; r < nranks; r++) {
      if (taken[r] || color(r) != want) continue;
      if (best < 0 || key(r) < key(best)) best = r; /* strict: an equal key keeps the lower rank */
    }
    if (best < 0) return count;
    taken[best] = 1;
    members[count++] = best;
  }
}

/*
 * One split of parent by color(rank) and key(rank), checked; returns the child as a communicator (NULL for
 * FCCL_SPLIT_NOCOLOR or on failure).
 */
static struct fcclComm* splitChecked(struct fcclComm* parent, pickFn color, pickFn key, const char* what) {
  const int me = parent->rank;
  struct fcclSplitPlan plan;
  fcclResult_t res = fcclSplitExchange(parent, color(me), key(me), fcclSuccess, TIMEOUT_MS, &plan);
  EXPECT_MSG(res == fcclSuccess, "%s: rank %d: the exchange failed: %s", what, me, fcclGetLastError(NULL));
  if (res != fcclSuccess) {
    fcclSplitPlanFree(&plan);
    return NULL;
  }
  int members[64];
  const int count = color(me) == FCCL_SPLIT_NOCOLOR ? 0
                                                    : expectedMembers(parent->nranks, color, key, color(me), members);
  EXPECT_MSG(plan.nranks == count, "%s: rank %d: a child of %d ranks, expected %d", what, me, plan.nranks, count);
  int place = -1;
  for (int i = 0; i < count; i++) {
    if (members[i] == me) place = i;
    EXPECT_MSG(plan.members[i] == members[i], "%s: rank %d: member %d is parent rank %d, expected %d", what, me, i,
               plan.members[i], members[i]);
  }
  EXPECT_MSG(plan.rank == place, "%s: rank %d: placed at %d, expected %d", what, me, plan.rank, place);
  if (count == 0) {
    fcclSplitPlanFree(&plan);
    return NULL;
  }
  EXPECT(plan.local == 1);

  /* The child's own bootstrap through the id its rank 0 made: every member in child order. */
  struct fcclBootstrap* b = NULL;
  EXPECT_EQ_INT(fcclBootstrapTcpInit(&plan.id, plan.rank, plan.nranks, TIMEOUT_MS, &abortFlagOfAll, &b), fcclSuccess);
  int32_t parentRanks[64] = {0};
  parentRanks[plan.rank] = me;
  if (b) EXPECT_EQ_INT(fcclBootstrapAllGather(b, parentRanks, sizeof(int32_t)), fcclSuccess);
  for (int i = 0; b && i < count; i++)
    EXPECT_MSG(parentRanks[i] == members[i], "%s: rank %d: the child's rank %d is parent rank %d, expected %d", what,
               me, i, parentRanks[i], members[i]);

  /* Its peers' information: the parent's, renumbered, with fresh salts that every member sees alike. */
  struct fcclPeerInfo* infos = NULL;
  EXPECT_EQ_INT(fcclSplitPeerInfo(parent, &plan, 0, &infos), fcclSuccess);
  uint32_t salts[64] = {0};
  for (int i = 0; infos && i < count; i++) {
    EXPECT_EQ_INT(infos[i].rank, i);
    EXPECT_EQ_INT(infos[i].nranks, count);
    EXPECT_EQ_INT(infos[i].pid, parent->peerInfo[members[i]].pid);
    EXPECT(infos[i].hostHash == parent->peerInfo[members[i]].hostHash);
    salts[i] = infos[i].salt;
  }
  uint32_t seen[64][64];
  memcpy(seen[plan.rank], salts, sizeof(salts));
  if (b && infos) EXPECT_EQ_INT(fcclBootstrapAllGather(b, seen, sizeof(seen[0])), fcclSuccess);
  for (int r = 0; b && infos && r < count; r++)
    EXPECT_MSG(memcmp(seen[r], salts, sizeof(salts)) == 0, "%s: rank %d: member %d sees other salts", what, me, r);
  struct fcclComm* child = b && infos ? fakeComm(plan.rank, count, b, infos, &abortFlagOfAll) : NULL;
  if (!child) {
    free(infos);
    fcclBootstrapDestroy(b);
  }
  fcclSplitPlanFree(&plan);
  return child;
}

static int one(int rank) { return (void)rank, 0; }
static int reversed(int rank) { return NRANKS - 1 - rank; }
static int parity(int rank) { return rank % 2; }
static int negative(int rank) { return -rank; }
static int threeOrNone(int rank) { return rank == 1 ? FCCL_SPLIT_NOCOLOR : rank % 3; }
static int tenMinus(int rank) { return 10 - rank; }
static int seven(int rank) { return (void)rank, 7; }
static int five(int rank) { return (void)rank, 5; }
static int half(int rank) { return rank / 3; }

/* A rank that failed before the exchange: its color's ranks fail naming it; the other color's child works. */
static void failedRank(struct fcclComm* parent) {
  const int me = parent->rank, failing = 2;
  struct fcclSplitPlan plan;
  fcclResult_t res = fcclSplitExchange(parent, parity(me), me, me == failing ? fcclSystemError : fcclSuccess,
                                       TIMEOUT_MS, &plan);
  if (me == failing) {
    EXPECT_EQ_INT(res, fcclSystemError);
  } else if (parity(me) == parity(failing)) {
    EXPECT_EQ_INT(res, fcclRemoteError);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 2 of the parent");
  } else {
    EXPECT_EQ_INT(res, fcclSuccess);
    struct fcclBootstrap* b = NULL;
    EXPECT_EQ_INT(fcclBootstrapTcpInit(&plan.id, plan.rank, plan.nranks, TIMEOUT_MS, &abortFlagOfAll, &b), fcclSuccess);
    if (b) EXPECT_EQ_INT(fcclBootstrapBarrier(b), fcclSuccess);
    fcclBootstrapDestroy(b);
  }
  EXPECT_EQ_INT(plan.exchangeFailed, 0);
  fcclSplitPlanFree(&plan);
}

static int rankMain(int rank, int nranks, void* arg) {
  (void)nranks;
  testFailed = 0;
  struct bootShared* shared = arg;
  struct fcclComm* parent = makeParent(shared, rank);
  EXPECT_MSG(parent != NULL, "rank %d: no parent: %s", rank, fcclGetLastError(NULL));
  if (!parent) return 1;

  struct fcclComm* whole = splitChecked(parent, one, reversed, "one color, keys reversed");
  fakeCommFree(splitChecked(parent, parity, negative, "two colors, keys reversed"));
  fakeCommFree(splitChecked(parent, threeOrNone, tenMinus, "three colors and FCCL_SPLIT_NOCOLOR"));
  fakeCommFree(splitChecked(parent, seven, five, "equal keys"));
  /* Nested: the reversed child split in halves of its own ranks, keys reversed again. */
  if (whole) fakeCommFree(splitChecked(whole, half, negative, "a split of a child"));
  fakeCommFree(whole);
  failedRank(parent);

  /* A rank gone: every other rank's exchange fails, and says the parent's bootstrap is broken. */
  testShmBarrier(shared->shm, rank);
  if (rank == NRANKS - 1) {
    fakeCommFree(parent);
    return testSummary("split_exchange (the rank that leaves)");
  }
  struct fcclSplitPlan plan;
  fcclResult_t res = fcclSplitExchange(parent, 0, rank, fcclSuccess, TIMEOUT_MS, &plan);
  EXPECT(res == fcclRemoteError || res == fcclTimeout);
  EXPECT_EQ_INT(plan.exchangeFailed, 1);
  fcclSplitPlanFree(&plan);
  fakeCommFree(parent);
  /* No color left a root behind: each finished with its child's bootstrap, or was never started. */
  EXPECT_EQ_INT(fcclBootstrapRootsWait(TIMEOUT_MS), 0);
  return testSummary("split_exchange");
}

int main(void) {
  struct bootShared* shared = bootSharedNew(NRANKS);
  const int failed = testShmForkRanks(shared->shm, rankMain, shared, 120, NULL);
  bootSharedFree(shared);
  EXPECT_EQ_INT(failed, 0);
  return testSummary("split_exchange");
}
