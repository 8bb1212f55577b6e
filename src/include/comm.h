/*
 * The communicator as the library sees it. Core owns this struct; bootstrap, transport and device state hang off
 * it through their own opaque types so each layer keeps its internals to itself.
 */
#ifndef FCCL_COMM_H_
#define FCCL_COMM_H_

#include "fccl.h"

#include <pthread.h>
#include <stdint.h>

#define FCCL_COMM_MAGIC 0x6663636c636f6d6dull /* "fcclcomm": catches stale or foreign handles */
#define FCCL_COMM_NAME_MAX 64
#define FCCL_LAST_ERROR_MAX 1024

struct fcclComm {
  uint64_t magic;
  int rank;
  int nranks;
  int cudaDev;
  char name[FCCL_COMM_NAME_MAX];

  pthread_mutex_t errorLock;
  char lastError[FCCL_LAST_ERROR_MAX]; /* guarded by errorLock */
};

/* Whether comm looks like a live communicator handle (non-NULL, magic intact). */
int fcclCommIsValid(const struct fcclComm* comm);

/* Copies the calling thread's last error into the communicator, so any thread can read it later. */
void fcclCommRecordThreadError(struct fcclComm* comm);

#endif /* FCCL_COMM_H_ */
