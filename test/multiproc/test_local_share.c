/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclBootstrapLocalShare (fcclCommShrink's rendezvous) with real processes: member 0 hands a unique id to the
 * others over an abstract Unix socket; two members in one process (threads) and one in another get it; a process
 * that is not a member and claims a member's place is refused and never sees the id; a member that never comes is
 * named in member 0's fcclTimeout; a stranger holding the socket's name first is refused by every member; and
 * connections of a member's process that say nothing (eight of them, each held until it is closed) hold up nobody:
 * member 0 serves the members side by side. (Strangers of another user: test_local_share_strangers.c.)
 */
#include "bootstrap.h"
#include "test.h"
#include "test_shm.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SHARE_TIMEOUT_MS 3000

struct shared {
  struct testShm* shm;
  int32_t pids[4];
  char name[48];
  fcclUniqueId sent;
  fcclUniqueId got[4];
  int results[4];
  int strangerConnected;
  int strangerGotBytes;
};

static int64_t nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fillId(fcclUniqueId* id, unsigned seed) {
  for (size_t i = 0; i < sizeof(id->internal); i++) id->internal[i] = (char)(seed * 131u + i * 7u + 1u);
}

struct memberArgs {
  struct shared* s;
  int member;
  int n;
};

static void* memberThread(void* arg) {
  struct memberArgs* a = arg;
  static const int32_t ranks[4] = {0, 2, 5, 7}; /* the old ranks of the members, for messages */
  fcclUniqueId id;
  if (a->member == 0) id = a->s->sent;
  else memset(&id, 0, sizeof(id));
  a->s->results[a->member] =
      (int)fcclBootstrapLocalShare(a->s->name, a->s->pids, ranks, a->n, a->member, &id, SHARE_TIMEOUT_MS);
  a->s->got[a->member] = id;
  return NULL;
}

/* A process that is not a member: connects as member 2 and must get nothing. */
static void strangerClaims(struct shared* s) {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  int len = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "fccl-share-%s", s->name);
  const socklen_t addrLen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
  for (int64_t end = nowMs() + SHARE_TIMEOUT_MS; nowMs() < end; usleep(2000)) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr*)&addr, addrLen) != 0) {
      close(fd);
      continue;
    }
    struct {
      uint64_t magic;
      int32_t member, pad;
    } hello = {0x6663636c73686172ull, 2, 0};
    s->strangerConnected = 1;
    (void)send(fd, &hello, sizeof(hello), MSG_NOSIGNAL);
    char buf[256];
    struct timeval tv = {.tv_sec = 2, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t got = recv(fd, buf, sizeof(buf), MSG_WAITALL);
    s->strangerGotBytes = got > 0 ? (int)got : 0;
    close(fd);
    return;
  }
}

/* Process 0: members 0 and 1 (threads); process 1: member 2; process 2: the stranger; with members 3 absent when
 * absent is set (member 0 then times out naming it). */
static int shareRank(int rank, int nranks, void* arg) {
  (void)nranks;
  testFailed = 0;
  struct shared* s = arg;
  if (rank == 0) s->pids[0] = s->pids[1] = getpid();
  if (rank == 1) s->pids[2] = getpid();
  if (rank == 3) s->pids[3] = getpid(); /* a member that never calls */
  EXPECT_EQ_INT(testShmBarrier(s->shm, rank), TEST_SHM_OK);
  const int n = s->pids[3] ? 4 : 3;
  if (rank == 0) {
    pthread_t second;
    struct memberArgs a0 = {s, 0, n}, a1 = {s, 1, n};
    pthread_create(&second, NULL, memberThread, &a1);
    memberThread(&a0);
    pthread_join(second, NULL);
  } else if (rank == 1) {
    struct memberArgs a2 = {s, 2, n};
    memberThread(&a2);
  } else if (rank == 2) {
    strangerClaims(s);
  } else {
    usleep((SHARE_TIMEOUT_MS + 500) * 1000); /* the absent member: alive, never calls */
  }
  EXPECT_EQ_INT(testShmBarrier(s->shm, rank), TEST_SHM_OK);
  return testFailed != 0;
}

static struct shared* sharedNew(int nprocs, const char* name) {
  struct testShm* shm = testShmCreate(nprocs, 0, sizeof(struct shared), 30000);
  if (!shm) exit(1);
  struct shared* s = testShmUser(shm);
  s->shm = shm;
  snprintf(s->name, sizeof(s->name), "test-%d-%s", (int)getpid(), name);
  fillId(&s->sent, 3);
  return s;
}

static void testHandsTheId(void) {
  struct shared* s = sharedNew(3, "hand");
  EXPECT_EQ_INT(testShmForkRanks(s->shm, shareRank, s, 60, NULL), 0);
  for (int m = 0; m < 3; m++) {
    EXPECT_MSG(s->results[m] == fcclSuccess, "member %d: %d", m, s->results[m]);
    EXPECT_MSG(memcmp(&s->got[m], &s->sent, sizeof(s->sent)) == 0, "member %d got another id", m);
  }
  EXPECT_EQ_INT(s->strangerGotBytes, 0);
  testShmDestroy(s->shm);
  printf("a unique id reached 2 members (one a thread of member 0's process), not the stranger: ok\n");
}

static void testAbsentMemberIsNamed(void) {
  struct shared* s = sharedNew(4, "absent");
  const int64_t start = nowMs();
  EXPECT_EQ_INT(testShmForkRanks(s->shm, shareRank, s, 60, NULL), 0);
  EXPECT_EQ_INT(s->results[0], fcclTimeout);
  EXPECT_EQ_INT(s->results[1], fcclSuccess);
  EXPECT_EQ_INT(s->results[2], fcclSuccess);
  EXPECT_EQ_INT(s->results[3], fcclSuccess); /* never called: untouched */
  /* Member 0 served for the whole timeout: the stranger reached it, claimed member 2's place, and got nothing. */
  EXPECT_EQ_INT(s->strangerConnected, 1);
  EXPECT_EQ_INT(s->strangerGotBytes, 0);
  EXPECT_MSG(nowMs() - start < SHARE_TIMEOUT_MS + 10000, "took %lld ms", (long long)(nowMs() - start));
  testShmDestroy(s->shm);
  printf("a member that never came timed member 0 out: ok\n");
}

/* A process holding the name before member 0 binds it: member 0 cannot listen, the others refuse its server. */
static int squatRank(int rank, int nranks, void* arg) {
  (void)nranks;
  testFailed = 0;
  struct shared* s = arg;
  static const int32_t ranks[2] = {0, 1};
  if (rank == 0) {
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    int len = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "fccl-share-%s", s->name);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    EXPECT_EQ_INT(bind(fd, (struct sockaddr*)&addr, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)), 0);
    EXPECT_EQ_INT(listen(fd, 8), 0);
    EXPECT_EQ_INT(testShmBarrier(s->shm, rank), TEST_SHM_OK); /* bound */
    EXPECT_EQ_INT(testShmBarrier(s->shm, rank), TEST_SHM_OK); /* the members are done */
    close(fd);
    return testFailed != 0;
  }
  s->pids[rank - 1] = getpid();
  EXPECT_EQ_INT(testShmBarrier(s->shm, rank), TEST_SHM_OK);
  fcclUniqueId id = s->sent;
  s->results[rank - 1] = (int)fcclBootstrapLocalShare(s->name, s->pids, ranks, 2, rank - 1, &id, SHARE_TIMEOUT_MS);
  EXPECT_EQ_INT(testShmBarrier(s->shm, rank), TEST_SHM_OK);
  return testFailed != 0;
}

static void testSquatterIsRefused(void) {
  struct shared* s = sharedNew(3, "squat");
  EXPECT_EQ_INT(testShmForkRanks(s->shm, squatRank, s, 60, NULL), 0);
  EXPECT_EQ_INT(s->results[0], fcclSystemError); /* member 0 cannot listen on a taken name */
  EXPECT_EQ_INT(s->results[1], fcclRemoteError); /* member 1 sees a server that is not member 0's process */
  testShmDestroy(s->shm);
  printf("a stranger holding the name was refused by both members: ok\n");
}

/* Member 2's process opens silent connections to the socket before it asks for the id itself; member 1 (a thread of
 * member 0's process) asks at once. Served one at a time for a second each, they would outlast the timeout. */
#define SILENT_CONNECTIONS 8
static int silentRank(int rank, int nranks, void* arg) {
  (void)nranks;
  testFailed = 0;
  struct shared* s = arg;
  if (rank == 0) s->pids[0] = s->pids[1] = getpid();
  if (rank == 1) s->pids[2] = getpid();
  EXPECT_EQ_INT(testShmBarrier(s->shm, rank), TEST_SHM_OK);
  if (rank == 0) {
    pthread_t second;
    struct memberArgs a0 = {s, 0, 3}, a1 = {s, 1, 3};
    pthread_create(&second, NULL, memberThread, &a1);
    memberThread(&a0);
    pthread_join(second, NULL);
  } else {
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    int len = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "fccl-share-%s", s->name);
    const socklen_t addrLen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
    int silent[SILENT_CONNECTIONS];
    int opened = 0;
    for (int64_t end = nowMs() + SHARE_TIMEOUT_MS; opened < SILENT_CONNECTIONS && nowMs() < end;) {
      int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      if (connect(fd, (struct sockaddr*)&addr, addrLen) == 0) {
        silent[opened++] = fd;
      } else {
        close(fd);
        usleep(1000); /* member 0 does not listen yet */
      }
    }
    EXPECT_EQ_INT(opened, SILENT_CONNECTIONS);
    struct memberArgs a2 = {s, 2, 3};
    memberThread(&a2);
    for (int i = 0; i < opened; i++) close(silent[i]);
  }
  EXPECT_EQ_INT(testShmBarrier(s->shm, rank), TEST_SHM_OK);
  return testFailed != 0;
}

static void testSilentConnectionsHoldNobody(void) {
  const int before = testFailed;
  struct shared* s = sharedNew(2, "silent");
  EXPECT_EQ_INT(testShmForkRanks(s->shm, silentRank, s, 60, NULL), 0);
  for (int m = 0; m < 3; m++) {
    EXPECT_MSG(s->results[m] == fcclSuccess, "member %d: %d", m, s->results[m]);
    EXPECT_MSG(memcmp(&s->got[m], &s->sent, sizeof(s->sent)) == 0, "member %d got another id", m);
  }
  testShmDestroy(s->shm);
  printf("%d silent connections of a member's process held up no member: %s\n", SILENT_CONNECTIONS,
         testFailed == before ? "ok" : "FAILED");
}

int main(void) {
  testHandsTheId();
  testAbsentMemberIsNamed();
  testSquatterIsRefused();
  testSilentConnectionsHoldNobody();
  return testSummary("local_share");
}
