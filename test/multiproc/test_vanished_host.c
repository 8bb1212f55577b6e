/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A host that stops answering, which only a keepalive can tell (docs/errors.md): two ranks, each in a network
 * namespace of its own, joined by a veth pair as two hosts by a network (test_wire.h); rank 1 takes its end of the
 * pair down, so that rank 0's packets go unanswered, with no end of stream and no reset. Two ways to see it, each
 * on a wire of its own:
 *   links: the peer links, watched by the monitor. An idle healthy link outlives the keepalive without failing
 *          anything; after the cut each rank's communicator fails with fcclRemoteError naming the other ("stopped
 *          answering" on the side still wired), within the default keepalive's bound (FCCL_PEER_KEEPALIVE_MS, plus
 *          a poll).
 *   ring:  the bootstrap alone, both ranks in a barrier at the cut: the barrier ends with fcclRemoteError, "rank R
 *          stopped answering", within the same bound, not at the bootstrap's timeout.
 *   stopped: no cut; rank 1 stops (SIGSTOP) for longer than the keepalive: its kernel still answers the probes, so
 *          nothing fails, and once it is continued the links and the ring carry on (a barrier, a goodbye).
 * Both then tear down without waiting on the dead network. The time from the cut is printed. Skipped where the wire
 * cannot be laid (it needs what root has).
 */
#include "bootstrap.h"
#include "comm.h"
#include "monitor.h"
#include "param.h"
#include "test.h"
#include "test_bootstrap_util.h"
#include "test_fake_comm.h"
#include "test_wire.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_MS 8000
#define POLL_MARGIN_MS 1500 /* the monitor's poll and the kernel's probe timer, beyond the keepalive */
#define FLAG_CUT 0          /* of struct bootShared's flags: rank 1 took its end down */
#define FLAG_PID 1          /* rank 1's pid, once it is about to stop itself */

enum { LINKS, RING, STOPPED };

struct scenario {
  struct bootShared* shared;
  const struct testWire* wire;
  int kind;
};

/* Forgets the watch (with a goodbye or not), destroys the bootstrap, checks the monitor is idle. */
static int tearDown(int rank, struct fcclBootstrap* b, struct fakeComm* watching, int goodbye) {
  const int64_t start = bootNowMs();
  if (watching) fcclMonitorForget(&watching->comm, goodbye);
  fcclBootstrapDestroy(b);
  printf("rank %d: torn down in %lld ms\n", rank, (long long)(bootNowMs() - start));
  int comms = -1, threads = -1;
  fcclMonitorStats(&comms, &threads);
  EXPECT_EQ_INT(comms, 0);
  EXPECT_EQ_INT(threads, 0);
  return testFailed != 0;
}

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

/* The stopped scenario, from the links' being watched on. */
static int stoppedPeer(int rank, struct bootShared* shared, struct fcclBootstrap* b, struct fakeComm* f,
                       int keepaliveMs) {
  if (rank == 1) {
    testShmPost(&shared->flags[FLAG_PID], (int)getpid());
    raise(SIGSTOP); /* rank 0 continues it */
  } else {
    /* Without its pid rank 1 cannot be continued: the harness's bound ends it (60 s). */
    if (testShmWait(shared->shm, &shared->flags[FLAG_PID], 1, 10000, "rank 1's pid") != TEST_SHM_OK) return 1;
    const int pid = shared->flags[FLAG_PID];
    EXPECT_MSG(waitStopped(pid, 10000), "rank 1 (pid %d) did not stop", pid);
    const int64_t failedAfter = fakeCommWaitFailed(f, keepaliveMs + POLL_MARGIN_MS);
    EXPECT_MSG(failedAfter < 0, "rank 0: rank 1, stopped but its host answering, failed the communicator: %s",
               f->comm.failure);
    printf("stopped, rank 0: rank 1 stopped for %d ms, nothing failed\n", keepaliveMs + POLL_MARGIN_MS);
    EXPECT_EQ_INT(kill(pid, SIGCONT), 0);
  }
  /* Both go on: the ring still carries an exchange, and nothing failed on either side. */
  const fcclResult_t res = fcclBootstrapBarrier(b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: the barrier after the stop: %s", rank, fcclGetLastError(NULL));
  EXPECT_MSG(__atomic_load_n(&f->abortFlag, __ATOMIC_ACQUIRE) == 0, "rank %d: failed after the stop: %s", rank,
             f->comm.failure);
  EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);
  return tearDown(rank, b, f, 1);
}

static int hostRank(int rank, int nranks, void* arg) {
  const struct scenario* sc = arg;
  struct bootShared* shared = sc->shared;
  const int peer = 1 - rank;
  EXPECT_EQ_INT(nranks, 2);
  EXPECT_MSG(testWireEnter(sc->wire, rank) == 0, "rank %d: could not enter its namespace", rank);
  if (testFailed) return 1;
  setenv("FCCL_SOCKET_IFNAME", sc->wire->end[rank], 1); /* the bootstrap, its root and the links: over the pair */
  fcclParamResetForTest();
  const int keepaliveMs = (int)fcclParamInt(FCCL_PARAM_PEER_KEEPALIVE_MS);

  fcclUniqueId id;
  if (rank == 0) {
    EXPECT_EQ_INT(fcclBootstrapGetUniqueId(&id, TIMEOUT_MS), fcclSuccess);
    bootPublishId(shared, &id);
  } else if (!bootWaitId(shared, &id)) {
    return 1;
  }
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&id, rank, 2, TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init over %s: %s", rank, sc->wire->end[rank], fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  struct fakeComm f;
  fakeCommInit(&f, "vanished host");
  if (sc->kind != RING) {
    uint8_t watched[2] = {rank != 0, rank != 1};
    int links[2] = {-1, -1};
    res = fcclBootstrapPeerLinks(b, watched, keepaliveMs, links);
    EXPECT_MSG(res == fcclSuccess, "rank %d: links: %s", rank, fcclGetLastError(NULL));
    if (res != fcclSuccess) return 1;
    struct fcclMonitorPeer other = {.rank = peer, .pid = 1000 + peer, .host = "elsewhere", .link = links[peer]};
    EXPECT_EQ_INT(fcclMonitorWatch(&f.comm, &other, 1), fcclSuccess);
    /* An idle link whose peer answers its probes fails nothing, however long it stays idle. */
    EXPECT_MSG(fakeCommWaitFailed(&f, keepaliveMs + POLL_MARGIN_MS) < 0, "rank %d: failed with the network whole: %s",
               rank, f.comm.failure);
  }
  EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);
  if (sc->kind == STOPPED) return stoppedPeer(rank, shared, b, &f, keepaliveMs);

  if (rank == 1) {
    EXPECT_MSG(testWireCut(sc->wire, rank) == 0, "rank 1: could not take %s down", sc->wire->end[rank]);
    testShmPost(&shared->flags[FLAG_CUT], 1);
  } else {
    EXPECT_EQ_INT(testShmWait(shared->shm, &shared->flags[FLAG_CUT], 1, 10000, "the cut"), TEST_SHM_OK);
  }
  const int64_t cut = bootNowMs();
  char who[32];
  snprintf(who, sizeof(who), "rank %d", peer);
  if (sc->kind == LINKS) {
    const int64_t seen = fakeCommWaitFailed(&f, keepaliveMs + POLL_MARGIN_MS);
    EXPECT_MSG(seen >= 0, "rank %d: the cut was not seen within %d ms", rank, keepaliveMs + POLL_MARGIN_MS);
    EXPECT_EQ_INT(f.comm.asyncError, fcclRemoteError);
    EXPECT_STR_CONTAINS(f.comm.failure, who);
    if (rank == 0) EXPECT_STR_CONTAINS(f.comm.failure, "stopped answering");
    printf("links, rank %d: the cut seen in %lld ms (keepalive %d ms): %s\n", rank, (long long)seen, keepaliveMs,
           f.comm.failure);
  } else {
    res = fcclBootstrapBarrier(b);
    const int64_t seen = bootNowMs() - cut;
    const char* error = fcclGetLastError(NULL);
    EXPECT_MSG(res == fcclRemoteError, "rank %d: the barrier across the cut returned %s: %s", rank,
               fcclGetErrorString(res), error);
    EXPECT_MSG(seen <= keepaliveMs + POLL_MARGIN_MS, "rank %d: the barrier took %lld ms (keepalive %d, timeout %d)",
               rank, (long long)seen, keepaliveMs, TIMEOUT_MS);
    EXPECT_STR_CONTAINS(error, who);
    if (rank == 0) EXPECT_STR_CONTAINS(error, "stopped answering");
    printf("ring, rank %d: the barrier across the cut ended in %lld ms (keepalive %d ms): %s\n", rank, (long long)seen,
           keepaliveMs, error);
  }
  EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);

  return tearDown(rank, b, sc->kind == LINKS ? &f : NULL, 0);
}

/* One scenario on a wire of its own; 1 when this machine cannot lay it. */
static int runScenario(int kind, const char* what) {
  struct testWire wire;
  const char* why = testWireLay(&wire);
  if (why) {
    printf("skipped: %s\n", why);
    return 1;
  }
  struct bootShared* shared = bootSharedNew(2);
  struct scenario sc = {.shared = shared, .wire = &wire, .kind = kind};
  int codes[2];
  testShmForkRanks(shared->shm, hostRank, &sc, 60, codes);
  int bad = 0;
  for (int r = 0; r < 2; r++) {
    EXPECT_MSG(codes[r] == 0, "%s: rank %d exited with %d", what, r, codes[r]);
    bad += codes[r] != 0;
  }
  bootSharedFree(shared);
  testWireFree(&wire);
  printf("%s: %s\n", what, bad ? "FAILED" : "ok");
  return 0;
}

int main(void) {
  if (runScenario(LINKS, "a host that stops answering fails the communicators that watch its peer link")) return 77;
  runScenario(RING, "a bootstrap exchange with a host that stops answering ends within the keepalive");
  runScenario(STOPPED, "a stopped peer whose host answers fails nothing");
  return testSummary("vanished_host");
}
