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
#include <stdio.h>
#include <string.h>

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

#endif /* FCCL_TEST_FAKE_COMM_H_ */
