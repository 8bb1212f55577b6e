/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclCommShrink's rendezvous (fcclBootstrapLocalShare) against a process of another user: user nobody watches
 * /proc/net/unix, where every abstract socket's name is listed, and the moment a share's name appears it opens
 * silent connections to it, keeps them open, and opens them again as soon as they are closed. Abstract sockets have no
 * permissions, so it can. Strangers must cost nothing: every one of several shares in a row hands the id to every
 * member within its timeout. Needs root (to become nobody): skipped otherwise.
 */
#include "bootstrap.h"
#include "test.h"
#include "test_bootstrap_util.h"
#include "test_shm.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 5
#define SHARE_TIMEOUT_MS 3000
#define SILENT_PER_NAME 16
#define MAX_NAMES ROUNDS

struct shared {
  struct testShm* shm;
  int32_t pids[3];
  fcclUniqueId sent;
  int results[ROUNDS][3];
  fcclUniqueId got[ROUNDS][3];
  int membersDone;
  int strangerNames;        /* share names the stranger went for */
  long strangerConnections; /* connections it made */
  int becameNobody;
};

static const char* roundName(int round, char* out, size_t size) {
  snprintf(out, size, "strangers-%d-%d", (int)getppid(), round);
  return out;
}

/* ---- the stranger ---- */

struct target {
  struct sockaddr_un addr;
  socklen_t addrLen;
  int fds[SILENT_PER_NAME];
};

/* Abstract names of listening sockets that start with "@fccl-share-" (the lines of /proc/net/unix). */
static int listShareNames(char names[][108], int max) {
  FILE* file = fopen("/proc/net/unix", "r");
  if (!file) return 0;
  char line[512];
  int count = 0;
  while (count < max && fgets(line, sizeof(line), file)) {
    const char* at = strstr(line, " @fccl-share-");
    if (!at) continue;
    snprintf(names[count], 108, "%s", at + 2); /* after " @" */
    names[count][strcspn(names[count], "\n")] = '\0';
    count++;
  }
  fclose(file);
  return count;
}

static void silentConnect(struct shared* s, struct target* t, int i) {
  t->fds[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (t->fds[i] >= 0 && connect(t->fds[i], (struct sockaddr*)&t->addr, t->addrLen) != 0) {
    close(t->fds[i]);
    t->fds[i] = -1;
    return;
  }
  s->strangerConnections++;
}

static int stranger(struct shared* s) {
  s->becameNobody = bootBecomeNobody();
  if (s->becameNobody != 1) return 1;
  struct target targets[MAX_NAMES];
  char seen[MAX_NAMES][108];
  int ntargets = 0;
  while (!__atomic_load_n(&s->membersDone, __ATOMIC_ACQUIRE) && !testShmAborted(s->shm)) {
    char names[16][108];
    int found = listShareNames(names, 16);
    for (int i = 0; i < found && ntargets < MAX_NAMES; i++) {
      int known = 0;
      for (int k = 0; k < ntargets; k++) known |= strcmp(seen[k], names[i]) == 0;
      if (known) continue;
      struct target* t = &targets[ntargets];
      memcpy(seen[ntargets++], names[i], sizeof(names[i]));
      memset(&t->addr, 0, sizeof(t->addr));
      t->addr.sun_family = AF_UNIX;
      const size_t len = strlen(names[i]);
      memcpy(t->addr.sun_path + 1, names[i], len);
      t->addrLen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
      for (int c = 0; c < SILENT_PER_NAME; c++) silentConnect(s, t, c);
      s->strangerNames++;
    }
    /* Connections the member closed come back at once. */
    for (int k = 0; k < ntargets; k++)
      for (int c = 0; c < SILENT_PER_NAME; c++) {
        struct target* t = &targets[k];
        char byte;
        if (t->fds[c] >= 0 && recv(t->fds[c], &byte, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN) continue;
        if (t->fds[c] >= 0) close(t->fds[c]);
        silentConnect(s, t, c);
      }
    usleep(500);
  }
  for (int k = 0; k < ntargets; k++)
    for (int c = 0; c < SILENT_PER_NAME; c++)
      if (targets[k].fds[c] >= 0) close(targets[k].fds[c]);
  return 0;
}

/* ---- the members ---- */

struct memberArgs {
  struct shared* s;
  int round;
  int member;
};

static void* member(void* arg) {
  struct memberArgs* a = arg;
  static const int32_t ranks[3] = {0, 1, 3};
  char name[64];
  fcclUniqueId id;
  if (a->member == 0)
    id = a->s->sent;
  else
    memset(&id, 0, sizeof(id));
  a->s->results[a->round][a->member] = (int)fcclBootstrapLocalShare(roundName(a->round, name, sizeof(name)), a->s->pids,
                                                                    ranks, 3, a->member, &id, SHARE_TIMEOUT_MS);
  a->s->got[a->round][a->member] = id;
  return NULL;
}

/* Process 0: members 0 and 1 (threads); process 1: member 2; process 2: the stranger. */
static int process(int proc, int nprocs, void* arg) {
  (void)nprocs;
  testFailed = 0;
  struct shared* s = arg;
  if (proc == 2) return stranger(s);
  if (proc == 0) s->pids[0] = s->pids[1] = getpid();
  if (proc == 1) s->pids[2] = getpid();
  for (int round = 0; round < ROUNDS; round++) {
    EXPECT_EQ_INT(testShmBarrier(s->shm, proc), TEST_SHM_OK);
    if (proc == 0) {
      pthread_t second;
      struct memberArgs a0 = {s, round, 0}, a1 = {s, round, 1};
      pthread_create(&second, NULL, member, &a1);
      member(&a0);
      pthread_join(second, NULL);
    } else {
      struct memberArgs a2 = {s, round, 2};
      member(&a2);
    }
  }
  EXPECT_EQ_INT(testShmBarrier(s->shm, proc), TEST_SHM_OK);
  testShmPost(&s->membersDone, 1);
  return testFailed != 0;
}

int main(void) {
  if (geteuid() != 0) {
    printf("skipped: becoming another user (nobody) needs root\n");
    return 77;
  }
  struct testShm* shm = testShmCreate(2, 0, sizeof(struct shared), 30000);
  if (!shm) return 1;
  struct shared* s = testShmUser(shm);
  s->shm = shm;
  for (size_t i = 0; i < sizeof(s->sent.internal); i++) s->sent.internal[i] = (char)(i * 5 + 3);
  /* The region's barriers are the two members' (processes 0 and 1); the stranger (process 2) takes no part. */
  int codes[3];
  int failed = testForkRanks(3, process, s, 90, codes);
  EXPECT_MSG(failed == 0, "%d processes failed (exit codes %d %d, stranger %d)", failed, codes[0], codes[1], codes[2]);
  int complete = 0;
  for (int round = 0; round < ROUNDS; round++) {
    int all = 1;
    for (int m = 0; m < 3; m++)
      all &= s->results[round][m] == fcclSuccess && memcmp(&s->got[round][m], &s->sent, sizeof(s->sent)) == 0;
    complete += all;
  }
  EXPECT_MSG(s->strangerNames > 0, "the stranger found no share to go for: the test did not test anything");
  EXPECT_MSG(complete == ROUNDS, "%d of %d shares completed with a stranger at the socket", complete, ROUNDS);
  printf("user nobody went for %d shares with %ld connections; %d of %d shares completed: %s\n", s->strangerNames,
         s->strangerConnections, complete, ROUNDS, complete == ROUNDS ? "ok" : "FAILED");
  testShmDestroy(shm);
  return testSummary("local_share_strangers");
}
