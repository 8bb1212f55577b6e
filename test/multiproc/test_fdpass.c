/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File-descriptor passing between forked processes, without a GPU: plain (unlinked) files travel over the abstract
 * Unix sockets with SCM_RIGHTS (more than one message's worth per peer, with a stray message of a foreign tag to
 * drop), and with pidfd_getfd where the kernel allows it. Checks that the receiver holds the same file, that
 * nothing leaks, and that waits are bounded (timeout) and abortable.
 */
#include "check.h"
#include "fdpass.h"
#include "test.h"
#include "test_shm.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define NRANKS 3
#define FDS_PER_PEER 70 /* more than one message carries */

struct rankInfo {
  int32_t pid;
  int32_t fd;
  uint64_t inode;
  uint64_t random;
  char name[FCCL_FD_SOCKET_NAME_BYTES];
};

static int countOpenFds(void) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int count = 0;
  for (struct dirent* entry; (entry = readdir(dir));)
    if (entry->d_name[0] != '.') count++;
  closedir(dir);
  return count - 1; /* the directory's own descriptor */
}

static void expectedText(int rank, int pid, char* text, size_t size) {
  snprintf(text, size, "fccl fdpass test: file of rank %d, pid %d", rank, pid);
}

/* The descriptor names the file rank owner created: same inode, same bytes. */
static int checkFd(int fd, const struct rankInfo* owner, int ownerRank) {
  struct stat st;
  char expected[128], got[128] = "";
  expectedText(ownerRank, owner->pid, expected, sizeof(expected));
  ssize_t n = pread(fd, got, sizeof(got) - 1, 0);
  if (n < 0) return 0;
  got[n] = '\0';
  return fstat(fd, &st) == 0 && (uint64_t)st.st_ino == owner->inode && strcmp(got, expected) == 0;
}

static int rankMain(int rank, int nranks, void* arg) {
  struct testShm* shm = arg;
  /* Let the sibling ranks pidfd_getfd from us even under Yama ptrace_scope=1 (test only: the library never
   * changes the process's security settings). */
  (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);

  char path[] = "/tmp/fccl-fdpass-XXXXXX";
  int file = mkstemp(path);
  EXPECT(file >= 0);
  if (file < 0) return testSummary("fdpass rank");
  unlink(path);
  char text[128];
  expectedText(rank, (int)getpid(), text, sizeof(text));
  EXPECT_EQ_INT(write(file, text, strlen(text)), (long long)strlen(text));
  struct stat st;
  fstat(file, &st);

  struct fcclFdSocket sock;
  EXPECT_EQ_INT(fcclFdSocketOpen(&sock), fcclSuccess);
  struct rankInfo infos[NRANKS];
  memset(infos, 0, sizeof(infos));
  infos[rank] = (struct rankInfo){.pid = (int32_t)getpid(), .fd = file, .inode = (uint64_t)st.st_ino,
                                  .random = fcclRandom64()};
  memcpy(infos[rank].name, sock.name, sizeof(sock.name));
  EXPECT_EQ_INT(testShmAllGather(shm, rank, infos, sizeof(infos[0])), TEST_SHM_OK);
  uint64_t tag = infos[0].random ^ infos[nranks - 1].random;

  int dups[FDS_PER_PEER];
  for (int i = 0; i < FDS_PER_PEER; i++) dups[i] = dup(file);
  int before = countOpenFds();

  /* A message with a foreign tag waits in rank 1's queue: it must be dropped, its descriptors closed. */
  if (rank == 0) {
    struct fcclFdSend stray = {.peerName = infos[1].name, .peerRank = 0, .count = 3, .fds = dups};
    EXPECT_EQ_INT(fcclFdExchange(&sock, tag + 1, rank, 1, &stray, 0, NULL, 5000, NULL), fcclSuccess);
  }
  EXPECT_EQ_INT(testShmBarrier(shm, rank), TEST_SHM_OK);

  /* Everyone sends FDS_PER_PEER descriptors of its file to everyone else. */
  struct fcclFdSend sends[NRANKS];
  struct fcclFdRecv recvs[NRANKS];
  int received[NRANKS][FDS_PER_PEER];
  int nSends = 0, nRecvs = 0;
  for (int p = 0; p < nranks; p++) {
    if (p == rank) continue;
    sends[nSends++] = (struct fcclFdSend){.peerName = infos[p].name, .peerRank = p, .count = FDS_PER_PEER,
                                          .fds = dups};
    recvs[nRecvs++] = (struct fcclFdRecv){.peerRank = p, .count = FDS_PER_PEER, .fds = received[p]};
  }
  EXPECT_EQ_INT(fcclFdExchange(&sock, tag, rank, nSends, sends, nRecvs, recvs, 10000, NULL), fcclSuccess);
  for (int r = 0; r < nRecvs; r++) {
    int good = 0;
    for (int i = 0; i < FDS_PER_PEER; i++) {
      good += recvs[r].fds[i] >= 0 && checkFd(recvs[r].fds[i], &infos[recvs[r].peerRank], recvs[r].peerRank);
      if (recvs[r].fds[i] >= 0) close(recvs[r].fds[i]);
    }
    EXPECT_MSG(good == FDS_PER_PEER, "rank %d: %d of %d descriptors from rank %d name its file", rank, good,
               FDS_PER_PEER, recvs[r].peerRank);
  }
  EXPECT_EQ_INT(countOpenFds(), before); /* the stray ones were closed too */
  EXPECT_EQ_INT(testShmBarrier(shm, rank), TEST_SHM_OK);

  /* Bounded: nobody sends to rank 0 now. */
  if (rank == 0) {
    int lonely[1];
    struct fcclFdRecv wait = {.peerRank = 2, .count = 1, .fds = lonely};
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    EXPECT_EQ_INT(fcclFdExchange(&sock, tag + 7, rank, 0, NULL, 1, &wait, 300, NULL), fcclTimeout);
    long elapsed = testElapsedMs(&start);
    EXPECT_MSG(elapsed >= 250 && elapsed < 3000, "timeout after %ld ms", elapsed);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "still waiting for ranks: 2");
    EXPECT_EQ_INT(lonely[0], -1);
    volatile int abortFlag = 1;
    clock_gettime(CLOCK_MONOTONIC, &start);
    EXPECT_EQ_INT(fcclFdExchange(&sock, tag + 8, rank, 0, NULL, 1, &wait, 60000, &abortFlag), fcclInvalidUsage);
    EXPECT(testElapsedMs(&start) < 2000);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "aborted");
  }

  /* pidfd_getfd from each peer, when this kernel and its security settings allow it. */
  int supported = 1;
  for (int p = 0; p < nranks; p++) {
    if (p == rank) continue;
    int fd = -1, unsupported = 0;
    fcclResult_t res = fcclFdPidGet(infos[p].pid, infos[p].fd, &fd, &unsupported);
    if (res != fcclSuccess && unsupported) {
      supported = 0;
      continue;
    }
    EXPECT_EQ_INT(res, fcclSuccess);
    if (res != fcclSuccess) continue;
    EXPECT_MSG(checkFd(fd, &infos[p], p), "pidfd_getfd from rank %d gave another file", p);
    close(fd);
    fd = -1;
    /* A descriptor number that is not open there is a plain error, not "unsupported". */
    EXPECT(fcclFdPidGet(infos[p].pid, 1000000, &fd, &unsupported) != fcclSuccess);
    EXPECT_EQ_INT(unsupported, 0);
  }
  if (!supported) printf("rank %d: pidfd_getfd is not permitted here; the socket path was tested\n", rank);
  EXPECT_EQ_INT(testShmBarrier(shm, rank), TEST_SHM_OK); /* peers are done pulling before the files close */

  for (int i = 0; i < FDS_PER_PEER; i++) close(dups[i]);
  fcclFdSocketClose(&sock);
  close(file);
  char name[32];
  snprintf(name, sizeof(name), "fdpass rank %d", rank);
  return testSummary(name);
}

int main(void) {
  struct testShm* shm = testShmCreate(NRANKS, sizeof(struct rankInfo), 0, 20000);
  EXPECT(shm != NULL);
  if (!shm) return testSummary("fdpass");
  int codes[NRANKS];
  int failed = testShmForkRanks(shm, rankMain, shm, 60, codes);
  for (int r = 0; r < NRANKS; r++) EXPECT_MSG(codes[r] == 0, "rank %d exited with %d", r, codes[r]);
  EXPECT_EQ_INT(failed, 0);
  /* A process that is gone: an error, not "unsupported" (where pidfd works at all: pulling our own stdin). */
  int fd = -1, unsupported = 0;
  if (fcclFdPidGet((int)getpid(), 0, &fd, &unsupported) == fcclSuccess) {
    close(fd);
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    EXPECT(fcclFdPidGet((int)child, 0, &fd, &unsupported) != fcclSuccess);
    EXPECT_EQ_INT(unsupported, 0);
  }
  testShmDestroy(shm);
  return testSummary("fdpass");
}
