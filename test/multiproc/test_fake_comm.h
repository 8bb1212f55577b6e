/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A communicator made by hand for the monitor's tests: only what the monitor reads and writes (the magic, the abort
 * flag, the async error and its lock, the name), so that forked children can stand in for its peers without a
 * bootstrap or a GPU.
 */
#ifndef FCCL_TEST_FAKE_COMM_H_
#define FCCL_TEST_FAKE_COMM_H_

#include "comm.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct fakeComm {
  struct fcclComm comm;
  int abortFlag;
};

static inline void fakeCommInit(struct fakeComm* f, const char* name) {
  memset(f, 0, sizeof(*f));
  f->comm.magic = FCCL_COMM_MAGIC;
  f->comm.abortFlag = &f->abortFlag;
  f->comm.asyncError = fcclSuccess;
  snprintf(f->comm.name, sizeof(f->comm.name), "%s", name);
  pthread_mutex_init(&f->comm.errorLock, NULL);
}

/* Waits up to ms for the communicator to fail (its abort flag set); returns the milliseconds it took, or -1. */
static inline int64_t fakeCommWaitFailed(struct fakeComm* f, int ms) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    const int64_t elapsed = (int64_t)(now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (__atomic_load_n(&f->abortFlag, __ATOMIC_ACQUIRE)) return elapsed;
    if (elapsed >= ms) return -1;
    const struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&pause, NULL);
  }
}

#endif /* FCCL_TEST_FAKE_COMM_H_ */
