/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Peer links (src/bootstrap/liveness.c) and the monitor's watch over them, with real processes over loopback: three
 * ranks of a TCP bootstrap link every pair; each link has its keepalive set; a rank that says goodbye is let go
 * (no failure), a rank that ends without one (an _exit, a SIGKILL) fails the communicators that watch its link, with
 * fcclRemoteError and the rank named, within the bound promised for a peer's death; a partial watch (one rank that
 * watches nobody) links only the pairs asked for; a forked child of a watching process holds no link. The time from
 * the death to the failure is printed.
 */
#include "bootstrap.h"
#include "comm.h"
#include "monitor.h"
#include "socket.h"
#include "test.h"
#include "test_bootstrap_util.h"
#include "test_fake_comm.h"

#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define TIMEOUT_MS 8000
#define KEEPALIVE_MS 1500
#define DEATH_SEEN_MS 1000 /* the bound a peer's end must be seen in (it is one poll away) */
#define NRANKS 3

static int shareId(struct bootShared* shared, int rank, fcclUniqueId* id) {
  if (rank == 0) {
    if (fcclBootstrapGetUniqueId(id, TIMEOUT_MS) != fcclSuccess) return 0;
    bootPublishId(shared, id);
    return 1;
  }
  return bootWaitId(shared, id);
}

static int linkIsSocketTo(int fd) {
  struct stat st;
  union fcclSocketAddress peer;
  socklen_t length = sizeof(peer);
  return fd >= 0 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && getpeername(fd, &peer.sa, &length) == 0;
}

/*
 * victim: the rank that leaves; how: 0 goodbye (fcclMonitorForget with goodbye), 1 _exit without a word,
 * 2 SIGKILL. The others watch it (and each other) through the monitor and check what they see.
 */
struct scenario {
  struct bootShared* shared;
  int how;
};

static int leaveRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  const struct scenario* sc = arg;
  struct bootShared* shared = sc->shared;
  const int victim = nranks - 1;
  fcclUniqueId id;
  if (!shareId(shared, rank, &id)) return 1;
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&id, rank, nranks, TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  uint8_t watched[NRANKS];
  int links[NRANKS];
  for (int r = 0; r < nranks; r++) watched[r] = r != rank;
  res = fcclBootstrapPeerLinks(b, watched, KEEPALIVE_MS, links);
  EXPECT_MSG(res == fcclSuccess, "rank %d: links: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  struct fcclMonitorPeer peers[NRANKS];
  int n = 0;
  for (int r = 0; r < nranks; r++) {
    if (r == rank) {
      EXPECT_EQ_INT(links[r], -1);
      continue;
    }
    EXPECT_MSG(linkIsSocketTo(links[r]), "rank %d: no connected link to rank %d", rank, r);
    int on = 0;
    unsigned int userTimeout = 0;
    socklen_t length = sizeof(on);
    EXPECT_EQ_INT(getsockopt(links[r], SOL_SOCKET, SO_KEEPALIVE, &on, &length), 0);
    EXPECT_EQ_INT(on, 1);
    length = sizeof(userTimeout);
    EXPECT_EQ_INT(getsockopt(links[r], IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeout, &length), 0);
    EXPECT_EQ_INT((int)userTimeout, KEEPALIVE_MS);
    int err = -1;
    EXPECT_EQ_INT(fcclBootstrapPeerLinkRead(links[r], &err), FCCL_LINK_QUIET); /* nothing said yet */
    peers[n++] = (struct fcclMonitorPeer){.rank = r, .pid = 1000 + r, .host = "elsewhere", .link = links[r]};
  }
  struct fakeComm f;
  fakeCommInit(&f, "links");
  EXPECT_EQ_INT(fcclMonitorWatch(&f.comm, peers, n), fcclSuccess);
  EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);

  if (rank == victim) {
    if (sc->how == 0) {
      fcclMonitorForget(&f.comm, 1);
      EXPECT_EQ_INT(f.abortFlag, 0);
    } else if (sc->how == 1) {
      _exit(0);
    } else {
      raise(SIGKILL);
    }
  } else {
    const int64_t seen = fakeCommWaitFailed(&f, sc->how == 0 ? 1000 : DEATH_SEEN_MS);
    if (sc->how == 0) {
      EXPECT_MSG(seen < 0, "rank %d: a goodbye failed the communicator: %s", rank, f.comm.failure);
    } else {
      EXPECT_MSG(seen >= 0, "rank %d: rank %d's end not seen within %d ms", rank, victim, DEATH_SEEN_MS);
      EXPECT_EQ_INT(f.comm.asyncError, fcclRemoteError);
      char who[32];
      snprintf(who, sizeof(who), "rank %d", victim);
      EXPECT_STR_CONTAINS(f.comm.failure, who);
      EXPECT_STR_CONTAINS(f.comm.failure, "without a goodbye");
      printf("rank %d: rank %d's end (%s) seen in %lld ms: %s\n", rank, victim, sc->how == 1 ? "_exit" : "SIGKILL",
             (long long)seen, f.comm.failure);
    }
    fcclMonitorForget(&f.comm, 1);
  }
  fcclBootstrapDestroy(b);
  int comms = -1, threads = -1;
  fcclMonitorStats(&comms, &threads);
  EXPECT_EQ_INT(comms, 0);
  EXPECT_EQ_INT(threads, 0);
  return testFailed != 0;
}

static void runLeave(int how, const char* what) {
  struct bootShared* shared = bootSharedNew(NRANKS);
  struct scenario sc = {.shared = shared, .how = how};
  int codes[NRANKS];
  testForkRanks(NRANKS, leaveRank, &sc, 60, codes);
  int bad = 0;
  for (int r = 0; r < NRANKS; r++) {
    const int expected = r == NRANKS - 1 && how == 2 ? -1 : 0;
    EXPECT_MSG(codes[r] == expected, "%s: rank %d exited with %d, expected %d", what, r, codes[r], expected);
    bad += codes[r] != expected;
  }
  bootSharedFree(shared);
  printf("%s: %s\n", what, bad ? "FAILED" : "ok");
}

/* ---- a partial watch: rank 1 watches nobody, ranks 0 and 2 each other; a forked child holds no link ---- */

static int partialRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct bootShared* shared = arg;
  fcclUniqueId id;
  if (!shareId(shared, rank, &id)) return 1;
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&id, rank, nranks, TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  uint8_t watched[NRANKS] = {0};
  if (rank == 0) watched[2] = 1;
  if (rank == 2) watched[0] = 1;
  int links[NRANKS];
  res = fcclBootstrapPeerLinks(b, watched, KEEPALIVE_MS, links);
  EXPECT_MSG(res == fcclSuccess, "rank %d: links: %s", rank, fcclGetLastError(NULL));
  for (int r = 0; r < nranks && res == fcclSuccess; r++) {
    if (watched[r])
      EXPECT_MSG(linkIsSocketTo(links[r]), "rank %d: no link to rank %d", rank, r);
    else
      EXPECT_MSG(links[r] == -1, "rank %d: a link to rank %d it did not ask for", rank, r);
  }
  if (res == fcclSuccess && rank != 1) {
    const int other = rank == 0 ? 2 : 0;
    struct fcclMonitorPeer peer = {.rank = other, .pid = 1, .host = "elsewhere", .link = links[other]};
    struct fakeComm f;
    fakeCommInit(&f, "partial");
    EXPECT_EQ_INT(fcclMonitorWatch(&f.comm, &peer, 1), fcclSuccess);
    /* A child made by fork() closes its copy of the link: the parent's stays connected, and nothing fails. */
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) _exit(linkIsSocketTo(links[other]) ? 1 : 0);
    int status = 0;
    EXPECT_MSG(child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "rank %d: a forked child still holds the link", rank);
    EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK); /* both children are gone */
    EXPECT_MSG(fakeCommWaitFailed(&f, 200) < 0, "rank %d: failed with its peer alive: %s", rank, f.comm.failure);
    EXPECT_MSG(linkIsSocketTo(links[other]), "rank %d: the fork closed the parent's link", rank);
    EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK); /* nobody leaves before both looked */
    fcclMonitorForget(&f.comm, 1);
  } else {
    EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);
    EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);
  }
  fcclBootstrapDestroy(b);
  return testFailed != 0;
}

static void testPartial(void) {
  struct bootShared* shared = bootSharedNew(NRANKS);
  int codes[NRANKS];
  testForkRanks(NRANKS, partialRank, shared, 60, codes);
  int bad = 0;
  for (int r = 0; r < NRANKS; r++) bad += codes[r] != 0;
  EXPECT_MSG(bad == 0, "partial watch: %d ranks failed", bad);
  bootSharedFree(shared);
  printf("a partial watch links the pairs asked for; a forked child holds no link: %s\n", bad ? "FAILED" : "ok");
}

int main(void) {
  runLeave(0, "a rank that says goodbye is let go");
  runLeave(1, "a rank that ends without a goodbye (_exit) fails its watchers");
  runLeave(2, "a rank killed by SIGKILL fails its watchers");
  testPartial();
  return testSummary("peer_links");
}
