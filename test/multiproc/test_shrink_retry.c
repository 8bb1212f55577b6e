/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A failed fcclCommShrink's retry cannot be taken first by a stranger. Two survivors of a three-rank communicator
 * (communicators made by hand, as the monitor's tests make them: no GPU) shrink it; the first attempt fails (member
 * 1 comes only after member 0 gave up), and a process of another user (nobody, when run as root) that watched
 * /proc/net/unix meanwhile binds, before the retry, every name it can derive from what it saw there: the name itself
 * and the name with its trailing count advanced. The retry's rendezvous must still succeed: the shrink then goes on to
 * make the new communicator on the device the parent names, -1 here, which fails as it should
 * (fcclUnhandledCudaError, "cannot make device -1 current"), on a machine with GPUs or without, so nothing is made.
 * Also: the names of one shrink's attempts differ from each other and from another communicator's, and every member
 * computes the same one.
 */
#include "bootstrap.h"
#include "comm.h"
#include "test.h"
#include "test_bootstrap_util.h"
#include "test_fake_comm.h"
#include "test_shm.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define NRANKS 3
#define TIMEOUT_MS 1000
#define MAX_SQUATS 32

enum { FLAG_FIRST_DONE_0 = 0, FLAG_FIRST_DONE_1 = 1, FLAG_SQUATTED = 2, FLAG_RETRIED = 3 };

struct shared {
  struct testShm* shm;
  int32_t pids[NRANKS];
  uint32_t salts[NRANKS];
  int flags[8];
  int first[2], retry[2];
  char retryError[2][256];
  int squats;     /* names the stranger bound */
  char seen[256]; /* the first share name it saw */
  int becameNobody;
};

static void makeComm(struct fakeComm* f, struct shared* s, int rank, struct fcclPeerInfo* infos) {
  fakeCommInit(f, "shrink retry");
  f->comm.rank = rank;
  f->comm.nranks = NRANKS;
  f->comm.cudaDev = -1; /* the new communicator is never made: the test is about the rendezvous before it */
  f->comm.timeoutMs = TIMEOUT_MS;
  f->comm.allowSharedDevice = 1;
  f->comm.path = fcclPathFccl;
  f->comm.forkGeneration = fcclForkGeneration();
  f->comm.asyncError = fcclRemoteError; /* it failed: rank 2 is gone */
  for (int r = 0; r < NRANKS; r++) {
    fcclPeerInfoFillHost(&infos[r], r, NRANKS); /* this host and pid namespace */
    infos[r].pid = s->pids[r];
    infos[r].salt = s->salts[r];
  }
  f->comm.peerInfo = infos;
}

/* ---- the stranger ---- */

/* Binds the abstract socket name (without the leading NUL); 1 when it now holds it. */
static int squat(const char* name, int* fds, int* count) {
  if (*count >= MAX_SQUATS) return 0;
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  const size_t len = strlen(name);
  if (len >= sizeof(addr.sun_path) - 1) return 0;
  memcpy(addr.sun_path + 1, name, len);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  if (bind(fd, (struct sockaddr*)&addr, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) != 0 ||
      listen(fd, 8) != 0) {
    close(fd);
    return 0;
  }
  fds[(*count)++] = fd;
  return 1;
}

/* The first "fccl-share-..." name listed in /proc/net/unix, into name; 1 when there is one. */
static int findShareName(char* name, size_t size) {
  FILE* file = fopen("/proc/net/unix", "r");
  if (!file) return 0;
  char line[512];
  int found = 0;
  while (!found && fgets(line, sizeof(line), file)) {
    const char* at = strstr(line, " @fccl-share-");
    if (!at) continue;
    snprintf(name, size, "%.*s", (int)strcspn(at + 2, "\n"), at + 2);
    found = 1;
  }
  fclose(file);
  return found;
}

static int stranger(struct shared* s) {
  s->becameNobody = bootBecomeNobody();
  if (s->becameNobody < 0) return 1;
  char name[256] = "";
  for (int64_t end = bootNowMs() + 10000; !findShareName(name, sizeof(name)) && bootNowMs() < end;) usleep(200);
  snprintf(s->seen, sizeof(s->seen), "%s", name);
  (void)testShmWait(s->shm, &s->flags[FLAG_FIRST_DONE_1], 1, 10000, "the failed first attempt");
  int fds[MAX_SQUATS], count = 0;
  if (name[0]) {
    s->squats += squat(name, fds, &count); /* a name used again */
    /* The name with its trailing number advanced: what a retry count in the name would give. */
    size_t end = strlen(name), digits = end;
    while (digits > 0 && isdigit((unsigned char)name[digits - 1])) digits--;
    if (digits < end) {
      const unsigned long count0 = strtoul(name + digits, NULL, 10);
      for (unsigned long next = count0 + 1; next <= count0 + 4; next++) {
        char predicted[256];
        snprintf(predicted, sizeof(predicted), "%.*s%lu", (int)digits, name, next);
        s->squats += squat(predicted, fds, &count);
      }
    }
  }
  testShmPost(&s->flags[FLAG_SQUATTED], 1);
  (void)testShmWait(s->shm, &s->flags[FLAG_RETRIED], 2, 20000, "the retries");
  for (int i = 0; i < count; i++) close(fds[i]);
  return 0;
}

/* ---- the survivors ---- */

static int survivor(int rank, struct shared* s) {
  struct fakeComm f;
  struct fcclPeerInfo infos[NRANKS];
  makeComm(&f, s, rank, infos);
  const int exclude[1] = {2};
  fcclComm_t newcomm = NULL;
  /* First attempt: member 1 comes only after member 0 gave up, so both fail. */
  if (rank == 1) (void)testShmWait(s->shm, &s->flags[FLAG_FIRST_DONE_0], 1, 10000, "member 0's first attempt");
  s->first[rank] = (int)fcclCommShrink(&f.comm, exclude, 1, &newcomm, NULL, FCCL_SHRINK_DEFAULT);
  testShmPost(&s->flags[rank == 0 ? FLAG_FIRST_DONE_0 : FLAG_FIRST_DONE_1], 1);
  EXPECT_EQ_INT(testShmWait(s->shm, &s->flags[FLAG_FIRST_DONE_1], 1, 10000, "member 1's first attempt"), TEST_SHM_OK);
  EXPECT_EQ_INT(testShmWait(s->shm, &s->flags[FLAG_SQUATTED], 1, 15000, "the stranger"), TEST_SHM_OK);
  /* The retry, with the stranger holding every name it could think of. */
  fcclResult_t res = fcclCommShrink(&f.comm, exclude, 1, &newcomm, NULL, FCCL_SHRINK_DEFAULT);
  s->retry[rank] = (int)res;
  snprintf(s->retryError[rank], sizeof(s->retryError[rank]), "%s", fcclGetLastError(NULL));
  __atomic_add_fetch(&s->flags[FLAG_RETRIED], 1, __ATOMIC_RELEASE);
  if (res == fcclSuccess) fcclCommDestroy(newcomm); /* not expected: device -1 */
  return 0;
}

static int process(int proc, int nprocs, void* arg) {
  (void)nprocs;
  testFailed = 0;
  struct shared* s = arg;
  if (proc == 2) return stranger(s);
  s->pids[proc] = getpid();
  EXPECT_EQ_INT(testShmBarrier(s->shm, proc), TEST_SHM_OK);
  survivor(proc, s);
  return testFailed != 0;
}

/* The names themselves: per attempt, per communicator, the same for every member. */
static void testNames(void) {
  const uint8_t contextA[10] = {1, 2, 3, 4, 0, 5, 6, 7, 8, 1}, contextB[10] = {1, 2, 3, 4, 0, 5, 6, 7, 9, 1};
  char a0[64], a0again[64], a1[64], b0[64];
  EXPECT_EQ_INT(fcclBootstrapShareName(NULL, contextA, sizeof(contextA), 0, a0, sizeof(a0)), fcclSuccess);
  EXPECT_EQ_INT(fcclBootstrapShareName(NULL, contextA, sizeof(contextA), 0, a0again, sizeof(a0again)), fcclSuccess);
  EXPECT_EQ_INT(fcclBootstrapShareName(NULL, contextA, sizeof(contextA), 1, a1, sizeof(a1)), fcclSuccess);
  EXPECT_EQ_INT(fcclBootstrapShareName(NULL, contextB, sizeof(contextB), 0, b0, sizeof(b0)), fcclSuccess);
  EXPECT(strcmp(a0, a0again) == 0);
  EXPECT(strcmp(a0, a1) != 0 && strcmp(a0, b0) != 0);
  EXPECT_EQ_INT(strlen(a0), 2 * FCCL_SHARE_NAME_BYTES);
  size_t common = 0;
  while (a0[common] && a0[common] == a1[common]) common++;
  EXPECT_MSG(common < 8, "attempts 0 and 1 share %zu leading digits: %s, %s", common, a0, a1);
  printf("share names: attempt 0 %s, attempt 1 %s, another communicator %s\n", a0, a1, b0);
}

int main(void) {
  testNames();
  struct testShm* shm = testShmCreate(2, 0, sizeof(struct shared), 30000);
  if (!shm) return 1;
  struct shared* s = testShmUser(shm);
  s->shm = shm;
  uint64_t state = testSeed();
  for (int r = 0; r < NRANKS; r++) s->salts[r] = (uint32_t)testRandom(&state);
  s->pids[2] = 1; /* the excluded rank: gone */
  int codes[3];
  /* The region's barriers are the two survivors' (processes 0 and 1); the stranger (process 2) takes no part. */
  int failed = testForkRanks(3, process, s, 60, codes);
  EXPECT_MSG(failed == 0, "%d processes failed (exit codes %d %d, stranger %d)", failed, codes[0], codes[1], codes[2]);
  EXPECT_MSG(s->seen[0] != '\0', "the stranger saw no share name: the test did not test anything");
  for (int m = 0; m < 2; m++) {
    EXPECT_MSG(s->first[m] == fcclTimeout, "member %d: first attempt returned %d, expected a timeout", m, s->first[m]);
    EXPECT_MSG(s->retry[m] == fcclUnhandledCudaError, "member %d: the retry's rendezvous failed (%d): %s", m,
               s->retry[m], s->retryError[m]);
    EXPECT_STR_CONTAINS(s->retryError[m], "cannot make device -1 current");
  }
  printf("the stranger (%s) saw %s and bound %d names; the retry met: %s\n",
         s->becameNobody == 1 ? "user nobody" : "this user", s->seen, s->squats,
         s->retry[0] == fcclUnhandledCudaError && s->retry[1] == fcclUnhandledCudaError ? "ok" : "FAILED");
  testShmDestroy(shm);
  return testSummary("shrink_retry");
}
