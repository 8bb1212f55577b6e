/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for the bootstrap's multiproc tests: passing a unique id between forked ranks through shared memory,
 * reproducible per-rank data, elapsed time, and counting open file descriptors.
 */
#ifndef FCCL_TEST_BOOTSTRAP_UTIL_H_
#define FCCL_TEST_BOOTSTRAP_UTIL_H_

#include "bootstrap.h"
#include "test.h"
#include "test_shm.h"

#include <dirent.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* Shared between the parent and every forked rank: the caller's area of a test_shm region created before the fork
 * (its waits end early when a rank forked by testShmForkRanks dies). */
struct bootShared {
  struct testShm* shm; /* the region this lives in */
  int idReady;
  fcclUniqueId id;
  uint64_t seed;
  int flags[64]; /* per-rank flags a test may use (testShmPost, testShmWait) */
  int port;      /* a free port, found by the parent */
};

/* For nprocs forked processes. */
static inline struct bootShared* bootSharedNew(int nprocs) {
  struct testShm* shm = testShmCreate(nprocs, 0, sizeof(struct bootShared), 30000);
  if (!shm) exit(1);
  struct bootShared* shared = testShmUser(shm);
  shared->shm = shm;
  return shared;
}

static inline void bootSharedFree(struct bootShared* shared) { testShmDestroy(shared->shm); }

static inline int64_t bootNowMs(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static inline void bootSleepMs(int ms) {
  struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&pause, NULL);
}

/* Publishes an id made by this process (it becomes the root's process). */
static inline void bootPublishId(struct bootShared* shared, const fcclUniqueId* id) {
  shared->id = *id;
  testShmPost(&shared->idReady, 1);
}

/* Waits (at most 10 s) for the id; 0 when it never came. */
static inline int bootWaitId(struct bootShared* shared, fcclUniqueId* id) {
  if (testShmWait(shared->shm, &shared->idReady, 1, 10000, "the unique id") != TEST_SHM_OK) return 0;
  *id = shared->id;
  return 1;
}

/* The byte rank r contributes at offset i of all-gather number op: every rank can predict every other's data. */
static inline uint8_t bootByte(uint64_t seed, int op, int r, size_t i) {
  uint64_t state = seed ^ ((uint64_t)op << 48) ^ ((uint64_t)r << 32) ^ (i / 8);
  uint64_t word = testRandom(&state);
  return (uint8_t)(word >> (8 * (i % 8)));
}

static inline int bootCountFds(void) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int count = 0;
  for (struct dirent* entry = readdir(dir); entry; entry = readdir(dir))
    if (entry->d_name[0] != '.') count++;
  closedir(dir);
  return count - 1; /* the directory's own descriptor */
}

/* The uid (and gid) of user nobody, which a stranger of another user becomes. */
#define BOOT_NOBODY 65534

/*
 * In a forked stranger: becomes user nobody, so that it is a process of another user, as on a shared host. 1 when it
 * did; 0 when this is not root (it stays this user); -1 when it could not.
 */
static inline int bootBecomeNobody(void) {
  if (geteuid() != 0) return 0;
  if (setgroups(0, NULL) != 0 || setresgid(BOOT_NOBODY, BOOT_NOBODY, BOOT_NOBODY) != 0 ||
      setresuid(BOOT_NOBODY, BOOT_NOBODY, BOOT_NOBODY) != 0) {
    perror("becoming nobody");
    return -1;
  }
  return 1;
}

#endif /* FCCL_TEST_BOOTSTRAP_UTIL_H_ */
