/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A host that stops answering, which only the peer links' keepalive can tell (docs/errors.md): two ranks, each in a
 * network namespace of its own, joined by a veth pair as two hosts by a network; a third process, in the machine's
 * namespace, lays the pair between them. Once their peer links are up and watched, and an idle healthy link has
 * outlived the keepalive without failing anything, rank 1 takes its end of the pair down: rank 0's packets go
 * unanswered, with no end of stream and no reset. Rank 0 must fail with fcclRemoteError naming rank 1 as having
 * stopped answering, within the default keepalive's bound (FCCL_PEER_KEEPALIVE_MS, plus a poll), and rank 1, cut
 * off, must fail too; the barrier both are in then ends at once, not at the bootstrap's timeout, and both tear down
 * without waiting on the dead network. The time from the cut to the failure is printed. Needs what root has (a network namespace, a veth pair through iproute2's ip): skipped without.
 */
#include "bootstrap.h"
#include "comm.h"
#include "monitor.h"
#include "param.h"
#include "test.h"
#include "test_bootstrap_util.h"
#include "test_fake_comm.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TIMEOUT_MS 8000
#define POLL_MARGIN_MS 1500 /* the monitor's poll and the kernel's probe timer, beyond the keepalive */
#define WIRE 2              /* the process that lays the veth pair: not a rank */
#define RANK_BARRIERS 4     /* the ranks meet four times (the wire meets them each time) */

/* flags of struct bootShared */
#define FLAG_PID0 0    /* rank 0's pid, once in its own namespace */
#define FLAG_PID1 1    /* rank 1's pid, likewise */
#define FLAG_WIRED 2   /* the pair is laid */
#define FLAG_CUT 3     /* rank 1 took its end down */
#define FLAG_WIRE_ID 4 /* the wire's pid: names the pair's ends */

static void endName(const struct bootShared* shared, int rank, char* name, size_t size) {
  snprintf(name, size, "fh%d%c", shared->flags[FLAG_WIRE_ID], rank == 0 ? 'a' : 'b');
}

/* Runs an ip command made from fmt; 1 when it succeeded. */
static int runIp(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static int runIp(const char* fmt, ...) {
  char command[256] = "ip ";
  va_list args;
  va_start(args, fmt);
  vsnprintf(command + 3, sizeof(command) - 3, fmt, args);
  va_end(args);
  const int status = system(command);
  EXPECT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "pid %d: '%s' failed", (int)getpid(), command);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Waits up to ms for the fake communicator to fail; returns the milliseconds it took, or -1. */
static int64_t waitFailed(struct fakeComm* f, int ms) {
  const int64_t start = bootNowMs();
  while (bootNowMs() - start < ms) {
    if (__atomic_load_n(&f->abortFlag, __ATOMIC_ACQUIRE)) return bootNowMs() - start;
    bootSleepMs(1);
  }
  return -1;
}

static int wireProcess(struct bootShared* shared) {
  if (testShmWait(shared->shm, &shared->flags[FLAG_PID0], 1, 10000, "rank 0's namespace") != TEST_SHM_OK ||
      testShmWait(shared->shm, &shared->flags[FLAG_PID1], 1, 10000, "rank 1's namespace") != TEST_SHM_OK)
    return 1;
  char a[16], b[16];
  endName(shared, 0, a, sizeof(a));
  endName(shared, 1, b, sizeof(b));
  if (!runIp("link add %s netns %d type veth peer name %s netns %d", a, shared->flags[FLAG_PID0], b,
             shared->flags[FLAG_PID1]))
    return 1;
  testShmPost(&shared->flags[FLAG_WIRED], 1);
  for (int i = 0; i < RANK_BARRIERS; i++) EXPECT_EQ_INT(testShmBarrier(shared->shm, WIRE), TEST_SHM_OK);
  return testFailed != 0;
}

static int hostRank(int rank, struct bootShared* shared) {
  const int peer = 1 - rank;
  EXPECT_MSG(unshare(CLONE_NEWNET) == 0, "rank %d: unshare(CLONE_NEWNET): %s", rank, strerror(errno));
  if (testFailed) return 1;
  testShmPost(&shared->flags[rank == 0 ? FLAG_PID0 : FLAG_PID1], (int)getpid());
  if (testShmWait(shared->shm, &shared->flags[FLAG_WIRED], 1, 10000, "the pair") != TEST_SHM_OK) return 1;
  char name[16];
  endName(shared, rank, name, sizeof(name));
  /* lo carries a rank's traffic to its own address (its root). */
  if (!runIp("link set lo up") || !runIp("addr add 10.231.0.%d/24 dev %s", rank + 1, name) ||
      !runIp("link set %s up", name))
    return 1;
  setenv("FCCL_SOCKET_IFNAME", name, 1); /* the bootstrap, its root and the links all go over the pair */
  fcclParamResetForTest();
  const int keepaliveMs = (int)fcclParamInt(FCCL_PARAM_PEER_KEEPALIVE_MS);
  EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK); /* both ends are up */

  fcclUniqueId id;
  if (rank == 0) {
    EXPECT_EQ_INT(fcclBootstrapGetUniqueId(&id, TIMEOUT_MS), fcclSuccess);
    bootPublishId(shared, &id);
  } else if (!bootWaitId(shared, &id)) {
    return 1;
  }
  struct fakeComm f; /* its abort flag, which the monitor sets, is the bootstrap's */
  fakeCommInit(&f, "vanished host");
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&id, rank, 2, TIMEOUT_MS, &f.abortFlag, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init over %s: %s", rank, name, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  uint8_t watched[2] = {rank != 0, rank != 1};
  int links[2] = {-1, -1};
  res = fcclBootstrapPeerLinks(b, watched, keepaliveMs, links);
  EXPECT_MSG(res == fcclSuccess, "rank %d: links: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  struct fcclMonitorPeer other = {.rank = peer, .pid = 1000 + peer, .host = "elsewhere", .link = links[peer]};
  EXPECT_EQ_INT(fcclMonitorWatch(&f.comm, &other, 1), fcclSuccess);
  /* An idle link whose peer answers its probes fails nothing, however long it stays idle. */
  EXPECT_MSG(waitFailed(&f, keepaliveMs + POLL_MARGIN_MS) < 0, "rank %d: failed with the network whole: %s", rank,
             f.comm.failure);
  EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);

  if (rank == 1) {
    if (!runIp("link set %s down", name)) return 1;
    testShmPost(&shared->flags[FLAG_CUT], 1);
  } else {
    EXPECT_EQ_INT(testShmWait(shared->shm, &shared->flags[FLAG_CUT], 1, 10000, "the cut"), TEST_SHM_OK);
  }
  /* Both ranks are in an exchange when the network goes: it ends when the keepalive fails the communicator, not at
   * the bootstrap's timeout. */
  const int64_t cut = bootNowMs();
  res = fcclBootstrapBarrier(b);
  const int64_t seen = bootNowMs() - cut;
  EXPECT_MSG(res != fcclSuccess, "rank %d: a barrier with a peer cut off succeeded", rank);
  EXPECT_MSG(seen <= keepaliveMs + POLL_MARGIN_MS, "rank %d: the barrier took %lld ms (keepalive %d ms, timeout %d ms)",
             rank, (long long)seen, keepaliveMs, TIMEOUT_MS);
  EXPECT_EQ_INT(f.abortFlag, 1);
  char who[32];
  snprintf(who, sizeof(who), "rank %d", peer);
  EXPECT_EQ_INT(f.comm.asyncError, fcclRemoteError);
  EXPECT_STR_CONTAINS(f.comm.failure, who);
  if (rank == 0) EXPECT_STR_CONTAINS(f.comm.failure, "stopped answering");
  printf("rank %d: the cut ended its barrier in %lld ms (keepalive %d ms): %s\n", rank, (long long)seen, keepaliveMs,
         f.comm.failure);
  EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);

  const int64_t start = bootNowMs();
  fcclMonitorForget(&f.comm, 0);
  fcclBootstrapDestroy(b);
  printf("rank %d: torn down in %lld ms\n", rank, (long long)(bootNowMs() - start));
  int comms = -1, threads = -1;
  fcclMonitorStats(&comms, &threads);
  EXPECT_EQ_INT(comms, 0);
  EXPECT_EQ_INT(threads, 0);
  EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);
  return testFailed != 0;
}

static int runProcess(int index, int nprocs, void* arg) {
  (void)nprocs;
  return index == WIRE ? wireProcess(arg) : hostRank(index, arg);
}

/* NULL when this machine can make a network namespace with a veth pair in it, else why not. */
static const char* cannotWire(void) {
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  if (child == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(2);
    const int status = system("ip link add fcclp0 type veth peer name fcclp1 > /dev/null 2>&1");
    _exit(WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 3);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) return "the probe did not run";
  if (WEXITSTATUS(status) == 2) return "no network namespace (unshare(CLONE_NEWNET) needs CAP_SYS_ADMIN)";
  if (WEXITSTATUS(status) == 3) return "no veth pair (iproute2's ip, the veth driver, CAP_NET_ADMIN)";
  return NULL;
}

int main(void) {
  const char* why = cannotWire();
  if (why) {
    printf("skipped: %s\n", why);
    return 77;
  }
  struct bootShared* shared = bootSharedNew(3);
  shared->flags[FLAG_WIRE_ID] = (int)getpid();
  int codes[3];
  testShmForkRanks(shared->shm, runProcess, shared, 60, codes);
  for (int r = 0; r < 3; r++) EXPECT_MSG(codes[r] == 0, "process %d exited with %d", r, codes[r]);
  bootSharedFree(shared);
  printf("a host that stops answering fails its peer's communicators: %s\n", testFailed ? "FAILED" : "ok");
  return testSummary("vanished_host");
}
