/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The peer monitor (src/core/comm/monitor.c) with real processes: communicators made by hand watch forked children as
 * their peers; a child killed with SIGKILL fails every communicator that includes it (fcclRemoteError, the rank
 * and pid named, the abort flag set) and no other; a peer already gone fails a communicator at once; a forked
 * child of a watching process watches nothing; forgetting every communicator stops the thread and closes every
 * pidfd. The time from the kill to the failure is printed (a figure, not a bound: the bound asserted is the
 * 10 s a healthy machine never comes near).
 */
#include "comm.h"
#include "monitor.h"
#include "test.h"
#include "test_fake_comm.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int countEntries(const char* path) {
  DIR* dir = opendir(path);
  if (!dir) return -1;
  int n = 0;
  for (struct dirent* e = readdir(dir); e; e = readdir(dir))
    if (e->d_name[0] != '.') n++;
  closedir(dir);
  return n;
}

static pid_t sleeper(void) {
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 600; i++) sleep(1); /* bounded: the test kills it long before */
    _exit(0);
  }
  return pid;
}

static double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Waits (at most 10 s) until comm's async error is no longer success; its latency in ms, or -1. */
static double waitFailed(struct fakeComm* f, double startMs) {
  for (int i = 0; i < 100000; i++) {
    if (__atomic_load_n(&f->comm.asyncError, __ATOMIC_ACQUIRE) != fcclSuccess) return nowMs() - startMs;
    usleep(100);
  }
  return -1;
}

static void testKill(void) {
  const int fdsBefore = countEntries("/proc/self/fd");
  const int threadsBefore = countEntries("/proc/self/task");
  pid_t a = sleeper(), b = sleeper();
  EXPECT(a > 0 && b > 0);
  struct fakeComm both, onlyA, onlyB;
  fakeCommInit(&both, "both");
  fakeCommInit(&onlyA, "onlyA");
  fakeCommInit(&onlyB, "onlyB");
  struct fcclMonitorPeer pa = {.rank = 1, .pid = (int)a, .host = "here", .link = -1};
  struct fcclMonitorPeer pb = {.rank = 2, .pid = (int)b, .host = "here", .link = -1};
  struct fcclMonitorPeer two[2] = {pa, pb};
  EXPECT_EQ_INT(fcclMonitorWatch(&both.comm, two, 2), fcclSuccess);
  EXPECT_EQ_INT(fcclMonitorWatch(&onlyA.comm, &pa, 1), fcclSuccess);
  EXPECT_EQ_INT(fcclMonitorWatch(&onlyB.comm, &pb, 1), fcclSuccess);
  int comms = 0, threads = 0;
  fcclMonitorStats(&comms, &threads);
  EXPECT_EQ_INT(comms, 3);
  EXPECT_EQ_INT(threads, 1);

  /* A forked child of a watching process watches nothing and fails nothing of its parent's. */
  pid_t child = fork();
  if (child == 0) {
    int c = -1, t = -1;
    fcclMonitorStats(&c, &t);
    _exit(c == 0 && t == 0 ? 0 : 1);
  }
  int status = 0;
  EXPECT_EQ_INT(waitpid(child, &status, 0), child);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ_INT(__atomic_load_n(&both.comm.asyncError, __ATOMIC_ACQUIRE), fcclSuccess);

  const double killedMs = nowMs();
  EXPECT_EQ_INT(kill(a, SIGKILL), 0);
  const double latency = waitFailed(&both, killedMs);
  EXPECT(latency >= 0);
  EXPECT(waitFailed(&onlyA, killedMs) >= 0);
  printf("a peer killed with SIGKILL failed its communicators after %.2f ms\n", latency);
  EXPECT_EQ_INT(both.comm.asyncError, fcclRemoteError);
  EXPECT_EQ_INT(onlyA.comm.asyncError, fcclRemoteError);
  EXPECT_EQ_INT(__atomic_load_n(&both.abortFlag, __ATOMIC_ACQUIRE), 1);
  EXPECT_EQ_INT(__atomic_load_n(&onlyA.abortFlag, __ATOMIC_ACQUIRE), 1);
  char expected[64];
  snprintf(expected, sizeof(expected), "rank 1 (pid %d, host here) exited", (int)a);
  EXPECT_STR_CONTAINS(fcclGetLastError(&both.comm), expected);
  char failure[FCCL_LAST_ERROR_MAX];
  fcclCommFailure(&onlyA.comm, failure, sizeof(failure));
  EXPECT_STR_CONTAINS(failure, expected);
  /* The communicator without the dead peer works on. */
  usleep(50000);
  EXPECT_EQ_INT(onlyB.comm.asyncError, fcclSuccess);
  EXPECT_EQ_INT(onlyB.abortFlag, 0);

  /* The second death fails the one communicator still working; the first failure's cause stays. */
  EXPECT_EQ_INT(kill(b, SIGKILL), 0);
  EXPECT(waitFailed(&onlyB, nowMs()) >= 0);
  fcclCommFailure(&both.comm, failure, sizeof(failure));
  EXPECT_STR_CONTAINS(failure, expected);
  EXPECT_EQ_INT(waitpid(a, &status, 0), a);
  EXPECT_EQ_INT(waitpid(b, &status, 0), b);

  /* A peer already gone (reaped) fails the communicator at once. */
  struct fakeComm late;
  fakeCommInit(&late, "late");
  struct fcclMonitorPeer gone = {.rank = 3, .pid = (int)a, .host = "here", .link = -1};
  EXPECT_EQ_INT(fcclMonitorWatch(&late.comm, &gone, 1), fcclSuccess);
  EXPECT_EQ_INT(late.comm.asyncError, fcclRemoteError);
  EXPECT_STR_CONTAINS(fcclGetLastError(&late.comm), "rank 3");

  fcclMonitorForget(&late.comm, 0);
  fcclMonitorForget(&both.comm, 0);
  fcclMonitorForget(&onlyA.comm, 0);
  fcclMonitorForget(&onlyB.comm, 0);
  fcclMonitorForget(&onlyB.comm, 0); /* a second forget is a no-op */
  fcclMonitorStats(&comms, &threads);
  EXPECT_EQ_INT(comms, 0);
  EXPECT_EQ_INT(threads, 0);
  EXPECT_EQ_INT(countEntries("/proc/self/fd"), fdsBefore);
  /* A joined thread's /proc entry may linger a moment after pthread_join returns. */
  int threadsAfter = countEntries("/proc/self/task");
  for (int i = 0; i < 1000 && threadsAfter != threadsBefore; i++) {
    usleep(1000);
    threadsAfter = countEntries("/proc/self/task");
  }
  EXPECT_EQ_INT(threadsAfter, threadsBefore);
}

/* Watching, forgetting and watching again restarts the thread; many communicators share it. */
static void testCycles(void) {
  pid_t a = sleeper();
  for (int cycle = 0; cycle < 50; cycle++) {
    struct fakeComm f[4];
    struct fcclMonitorPeer pa = {.rank = 1, .pid = (int)a, .host = "here", .link = -1};
    for (int i = 0; i < 4; i++) {
      fakeCommInit(&f[i], "cycle");
      EXPECT_EQ_INT(fcclMonitorWatch(&f[i].comm, &pa, 1), fcclSuccess);
    }
    for (int i = 0; i < 4; i++) {
      EXPECT_EQ_INT(f[i].comm.asyncError, fcclSuccess);
      fcclMonitorForget(&f[i].comm, 0);
    }
  }
  int comms = -1, threads = -1;
  fcclMonitorStats(&comms, &threads);
  EXPECT_EQ_INT(comms, 0);
  EXPECT_EQ_INT(threads, 0);
  kill(a, SIGKILL);
  int status;
  EXPECT_EQ_INT(waitpid(a, &status, 0), a);
}

int main(void) {
  testKill();
  testCycles();
  return testSummary("monitor");
}
