/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for the transport GPU tests: a communicator struct filled by hand (the transport layer needs only rank,
 * nranks, device, timeout and abort flag), reproducible test data, and a GPU count probed in a child process (CUDA
 * must not be initialised in a parent that forks ranks).
 */
#ifndef FCCL_TEST_IPC_COMMON_H_
#define FCCL_TEST_IPC_COMMON_H_

#include "comm.h"
#include "test.h"
#include "transport.h"
#include "test_ipc_shm.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static inline void testCommMake(struct fcclComm* comm, int rank, int nranks, int dev, const char* name,
                                volatile int* abortFlag) {
  memset(comm, 0, sizeof(*comm));
  comm->magic = FCCL_COMM_MAGIC;
  comm->forkGeneration = fcclForkGeneration(); /* made in this (forked) rank's process */
  comm->rank = rank;
  comm->nranks = nranks;
  comm->cudaDev = dev;
  comm->timeoutMs = 30000;
  comm->abortFlag = abortFlag;
  snprintf(comm->name, sizeof(comm->name), "%s", name);
  pthread_mutex_init(&comm->errorLock, NULL);
}

/* The transport of a hand-made communicator, as the communicator's init and destroy set it up and tear it down. */
static inline fcclResult_t testTransportInit(struct fcclComm* comm, size_t slotBytes,
                                             const struct fcclTransportExchange* ex) {
  struct fcclTransportParams params = {
      .rank = comm->rank,
      .nranks = comm->nranks,
      .cudaDev = comm->cudaDev,
      .timeoutMs = comm->timeoutMs,
      .abortFlag = comm->abortFlag,
      .name = comm->name,
      .slotBytes = slotBytes,
      .ex = *ex,
  };
  return fcclTransportInit(&params, &comm->transport);
}

static inline fcclResult_t testTransportFini(struct fcclComm* comm) {
  struct fcclTransport* transport = comm->transport;
  comm->transport = NULL;
  return fcclTransportFini(transport);
}

/* The 8-byte word at byte offset (a multiple of 8) of buffer `buffer` of rank `rank`: data no one else has. */
static inline uint64_t testWord(uint64_t seed, int rank, int buffer, size_t offset) {
  uint64_t state = seed ^ ((uint64_t)(rank + 1) << 48) ^ ((uint64_t)(buffer + 1) << 40) ^ (offset / 8);
  return testRandom(&state);
}

static inline void testFill(uint64_t* host, size_t bytes, uint64_t seed, int rank, int buffer) {
  for (size_t i = 0; i < bytes / 8; i++) host[i] = testWord(seed, rank, buffer, i * 8);
}

static inline long testEnvLong(const char* name, long fallback) {
  const char* text = getenv(name);
  return text && *text ? strtol(text, NULL, 0) : fallback;
}

/* What every forked rank of a transport test gets: the shared page, the GPU count, the mode (argv[1]). */
struct testIpcArgs {
  struct testShm* shm;
  int gpus;
  const char* mode;
};

/*
 * The main of a two-rank transport test: skips without a GPU, forks the ranks into rankMain (device rank % gpus),
 * bounded by FCCLTEST_TIMEOUT seconds (defaultTimeoutS unless set), and reports under name. A rank that fails
 * aborts the shared region, so that its peer's waits end at once.
 */
static inline int testIpcMain(int argc, char** argv, const char* name, int shmTimeoutMs, long defaultTimeoutS,
                              int (*rankMain)(int rank, int nranks, void* args)) {
  enum { IPC_TEST_RANKS = 2 };
  int gpus = testGpuCount();
  if (gpus < 1) {
    printf("SKIP: needs a GPU\n");
    return TEST_SKIP;
  }
  if (gpus < IPC_TEST_RANKS) printf("note: %d GPU: both ranks share it (two processes on one GPU)\n", gpus);
  struct testIpcArgs args = {.shm = testShmCreate(IPC_TEST_RANKS, TEST_IPC_RECORD_BYTES, 0, shmTimeoutMs),
                             .gpus = gpus,
                             .mode = argc > 1 ? argv[1] : "all"};
  EXPECT(args.shm != NULL);
  if (!args.shm) return testSummary(name);
  int codes[IPC_TEST_RANKS];
  const int timeout = (int)testEnvLong("FCCLTEST_TIMEOUT", defaultTimeoutS);
  EXPECT_EQ_INT(testShmForkRanks(args.shm, rankMain, &args, timeout, codes), 0);
  for (int r = 0; r < IPC_TEST_RANKS; r++) EXPECT_MSG(codes[r] == 0, "rank %d exited with %d", r, codes[r]);
  testShmDestroy(args.shm);
  return testSummary(name);
}

#endif /* FCCL_TEST_IPC_COMMON_H_ */
