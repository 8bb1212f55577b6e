/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fork() without exec (data-loader workers, multiprocessing pools): a child must not keep the bootstrap's
 * connections open, or the peers of a rank that dies see no end of stream and wait their whole timeout. Here a rank
 * forks a sleeping child and is killed: its peers learn of it within a second; the root's process does the same
 * before every rank arrived: the waiting rank learns of it at once; a child holds no live bootstrap socket
 * (listener, ring or root connection, connection not yet admitted) and cannot use the inherited bootstrap, while
 * the parent's keeps working.
 * Time bounds are generous where they only catch hangs; the one second is what is promised.
 */
#include "bootstrap.h"
#include "check.h"
#include "socket.h"
#include "test.h"
#include "test_bootstrap_util.h"
#include "wire.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define LONG_TIMEOUT_MS 8000 /* what a peer would wait without the fork handler */
#define DEATH_SEEN_MS 1000   /* what it may take with it */
#define CHILD_SLEEP_MS 6000  /* the forked child outlives its parent by this much (and is killed at the end) */
#define CHILD_PID_FLAG 40    /* shared->flags[]: the pid of the sleeping child, for the parent to kill */

static uint64_t seed;

/* Sockets of this process that listen or are connected: what a child must not hold of the bootstrap's. */
static int liveSockets(void) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int live = 0;
  for (struct dirent* entry = readdir(dir); entry; entry = readdir(dir)) {
    int fd = atoi(entry->d_name);
    struct stat st;
    if (entry->d_name[0] == '.' || fd == dirfd(dir) || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int listening = 0;
    socklen_t length = sizeof(listening);
    union fcclSocketAddress peer;
    socklen_t peerLength = sizeof(peer);
    if ((getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0 && listening) ||
        getpeername(fd, &peer.sa, &peerLength) == 0)
      live++;
  }
  closedir(dir);
  return live;
}

/* Forks a child that sleeps (a data-loader worker that outlives the rank) and records its pid. */
static void forkSleeper(struct bootShared* shared) {
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  if (child == 0) {
    bootSleepMs(CHILD_SLEEP_MS);
    _exit(0);
  }
  testShmPost(&shared->flags[CHILD_PID_FLAG], child > 0 ? (int)child : -1);
}

static void killSleeper(struct bootShared* shared) {
  int child = __atomic_load_n(&shared->flags[CHILD_PID_FLAG], __ATOMIC_ACQUIRE);
  if (child > 0) kill((pid_t)child, SIGKILL); /* not our child: init reaps it */
}

/* Rank 0 makes the id (its process runs the root) and publishes it; the others wait for it. */
static int shareId(struct bootShared* shared, int rank, fcclUniqueId* id) {
  if (rank == 0) {
    if (fcclBootstrapGetUniqueId(id, LONG_TIMEOUT_MS) != fcclSuccess) return 0;
    bootPublishId(shared, id);
    return 1;
  }
  return bootWaitId(shared, id);
}

/* ---- a rank with a child dies: its peers know within a second ---- */

static int deathWithChildRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct bootShared* shared = arg;
  fcclUniqueId id;
  if (!shareId(shared, rank, &id)) return 1;
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&id, rank, nranks, LONG_TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);
  if (rank == 1) {
    forkSleeper(shared);
    raise(SIGKILL);
  }
  EXPECT_EQ_INT(testShmWait(shared->shm, &shared->flags[CHILD_PID_FLAG], 1, 10000, "the victim's child"),
                TEST_SHM_OK);
  uint8_t data[3 * 32] = {0};
  int64_t start = bootNowMs();
  res = fcclBootstrapAllGather(b, data, 32);
  int64_t elapsed = bootNowMs() - start;
  EXPECT_MSG(res == fcclRemoteError, "rank %d: all-gather returned %d: %s", rank, res, fcclGetLastError(NULL));
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 1");
  EXPECT_MSG(elapsed < DEATH_SEEN_MS, "rank %d: took %lld ms to see that rank 1 died (its child lives on)", rank,
             (long long)elapsed);
  printf("rank %d: rank 1 died with a child alive; seen in %lld ms\n", rank, (long long)elapsed);
  fcclBootstrapDestroy(b);
  return testFailed != 0;
}

static void testDeathWithChild(void) {
  struct bootShared* shared = bootSharedNew(3);
  int codes[3];
  testForkRanks(3, deathWithChildRank, shared, 60, codes);
  killSleeper(shared);
  int bad = 0;
  for (int r = 0; r < 3; r++) {
    int expected = r == 1 ? -1 : 0; /* the victim was killed by a signal */
    EXPECT_MSG(codes[r] == expected, "rank %d exited with %d, expected %d", r, codes[r], expected);
    bad += codes[r] != expected;
  }
  bootSharedFree(shared);
  printf("a rank with a forked child is killed: %s\n", bad ? "FAILED" : "ok");
}

/* ---- the root's process with a child dies: the waiting rank knows at once ---- */

static int rootDeathWithChildRank(int rank, int nranks, void* arg) {
  (void)nranks;
  testFailed = 0;
  struct bootShared* shared = arg;
  if (rank == 0) { /* the root's process: it publishes the id, forks a worker, and dies before every rank came */
    fcclUniqueId id;
    EXPECT_EQ_INT(fcclBootstrapGetUniqueId(&id, LONG_TIMEOUT_MS), fcclSuccess);
    bootPublishId(shared, &id);
    (void)testShmWait(shared->shm, &shared->flags[1], 1, 10000, "rank 1's start");
    bootSleepMs(300); /* rank 1 has said hello; the root holds its connection */
    forkSleeper(shared);
    raise(SIGKILL);
  }
  fcclUniqueId id;
  if (!bootWaitId(shared, &id)) return 1;
  testShmPost(&shared->flags[1], 1);
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&id, 0, 2, LONG_TIMEOUT_MS, NULL, &b); /* rank 1 of 2 never comes */
  EXPECT_MSG(res == fcclRemoteError, "init returned %d: %s", res, fcclGetLastError(NULL));
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "closed the connection");
  EXPECT_EQ_INT(testShmWait(shared->shm, &shared->flags[CHILD_PID_FLAG], 1, 1000, "the root's child"), TEST_SHM_OK);
  if (res == fcclSuccess) fcclBootstrapDestroy(b);
  return testFailed != 0;
}

static void testRootDeathWithChild(void) {
  struct bootShared* shared = bootSharedNew(2);
  int codes[2];
  int64_t start = bootNowMs();
  testForkRanks(2, rootDeathWithChildRank, shared, 60, codes);
  int64_t elapsed = bootNowMs() - start;
  killSleeper(shared);
  int ok = codes[0] == -1 && codes[1] == 0;
  EXPECT_MSG(ok, "exit codes %d (root's process) and %d (rank), expected -1 and 0", codes[0], codes[1]);
  /* The root dies about 300 ms in; a rank that had to wait for its timeout would take 8 s and more. */
  ok &= elapsed < 300 + DEATH_SEEN_MS + 1000;
  EXPECT_MSG(elapsed < 300 + DEATH_SEEN_MS + 1000, "the rank took %lld ms in all to see the root's process die",
             (long long)elapsed);
  bootSharedFree(shared);
  printf("the root's process with a forked child is killed: seen within %lld ms of the start: %s\n",
         (long long)elapsed, ok ? "ok" : "FAILED");
}

/* ---- what a child holds: no live bootstrap socket, a bootstrap it cannot use ---- */

struct threadInit {
  fcclUniqueId id;
  int rank;
  struct fcclBootstrap* b;
  fcclResult_t result;
};

static void* threadInitMain(void* arg) {
  struct threadInit* t = arg;
  t->result = fcclBootstrapTcpInit(&t->id, t->rank, 2, LONG_TIMEOUT_MS, NULL, &t->b);
  return NULL;
}

/* Forks while this process holds every kind of bootstrap socket; the child's count of live sockets is its status. */
static int childLiveSockets(void) {
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  if (child == 0) {
    int live = liveSockets();
    _exit(live < 0 ? 100 : live > 99 ? 99 : live);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

static int inProcessSockets(int rank, int nranks, void* arg) {
  (void)rank;
  (void)nranks;
  (void)arg;
  testFailed = 0;
  /* A root listening, a stranger's connection it has not admitted (both ends here), rank 0 waiting for rank 1 with
   * its root connection (both ends) and its ring listener. */
  struct threadInit ranks[2] = {{.rank = 0}, {.rank = 1}};
  EXPECT_EQ_INT(fcclBootstrapGetUniqueId(&ranks[0].id, LONG_TIMEOUT_MS), fcclSuccess);
  ranks[1].id = ranks[0].id;
  struct fcclWireId wid;
  EXPECT_EQ_INT(fcclWireParseId((const uint8_t*)ranks[0].id.internal, FCCL_UNIQUE_ID_BYTES, &wid, NULL, 0),
                FCCL_WIRE_OK);
  int stranger = -1;
  EXPECT_EQ_INT(fcclSocketConnect(&wid.rootAddr, bootNowMs() + 2000, NULL, 1, "the root", &stranger), fcclSuccess);
  pthread_t threads[2];
  pthread_create(&threads[0], NULL, threadInitMain, &ranks[0]);
  bootSleepMs(200);
  int before = liveSockets();
  EXPECT_MSG(before >= 6, "only %d live sockets before the fork: the setup is not what this test means", before);
  int inChild = childLiveSockets();
  EXPECT_MSG(inChild == 0, "a forked child holds %d live sockets of %d its parent has", inChild, before);
  printf("fork while the rendezvous runs: the parent has %d live sockets, its child %d\n", before, inChild);
  /* The parent's are untouched: rank 1 arrives and the two meet. */
  pthread_create(&threads[1], NULL, threadInitMain, &ranks[1]);
  for (int r = 0; r < 2; r++) pthread_join(threads[r], NULL);
  EXPECT_EQ_INT(ranks[0].result, fcclSuccess);
  EXPECT_EQ_INT(ranks[1].result, fcclSuccess);
  fcclSocketClose(&stranger);
  if (ranks[0].result != fcclSuccess || ranks[1].result != fcclSuccess) return 1;
  /* Once connected: the ring's sockets are not the child's either. */
  EXPECT_EQ_INT(childLiveSockets(), 0);
  for (int r = 0; r < 2; r++) fcclBootstrapDestroy(ranks[r].b);
  return testFailed != 0;
}

static void testChildSockets(void) {
  int codes[1];
  testForkRanks(1, inProcessSockets, NULL, 60, codes);
  EXPECT_MSG(codes[0] == 0, "sockets in a child: the process exited with %d", codes[0]);
}

/* A child cannot use the bootstrap it inherited (it would speak for its parent); the parent's keeps working, also
 * after the child destroyed its copy. */
static int childUsesBootstrapRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct bootShared* shared = arg;
  fcclUniqueId id;
  if (!shareId(shared, rank, &id)) return 1;
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&id, rank, nranks, LONG_TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  if (rank == 0) {
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) {
      testPassed = testFailed = 0;
      uint8_t data[2 * 16] = {0};
      int64_t start = bootNowMs();
      EXPECT_EQ_INT(fcclBootstrapAllGather(b, data, 16), fcclInvalidUsage);
      EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "child of fork()");
      EXPECT_EQ_INT(fcclBootstrapBarrier(b), fcclInvalidUsage);
      EXPECT(bootNowMs() - start < 1000);
      fcclBootstrapDestroy(b);
      EXPECT_EQ_INT(liveSockets(), 0);
      fflush(stdout);
      _exit(testFailed != 0);
    }
    int status = 0;
    EXPECT(child > 0 && waitpid(child, &status, 0) == child);
    EXPECT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's checks failed (status %d)", status);
  }
  uint8_t data[2 * 16];
  for (size_t i = 0; i < 16; i++) data[(size_t)rank * 16 + i] = bootByte(seed, 1, rank, i);
  EXPECT_EQ_INT(fcclBootstrapAllGather(b, data, 16), fcclSuccess);
  long wrong = 0;
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < 16; i++) wrong += data[(size_t)r * 16 + i] != bootByte(seed, 1, r, i);
  EXPECT_EQ_INT(wrong, 0);
  fcclBootstrapDestroy(b);
  return testFailed != 0;
}

static void testChildUsesBootstrap(void) {
  struct bootShared* shared = bootSharedNew(2);
  int failed = testForkRanks(2, childUsesBootstrapRank, shared, 60, NULL);
  EXPECT_MSG(failed == 0, "a child using its parent's bootstrap: %d ranks failed", failed);
  bootSharedFree(shared);
  printf("a child uses the bootstrap it inherited: %s\n", failed ? "FAILED" : "ok");
}

int main(void) {
  seed = testSeed();
  testDeathWithChild();
  testRootDeathWithChild();
  testChildSockets();
  testChildUsesBootstrap();
  return testSummary("bootstrap_fork");
}
