/*
 * A tiny out-of-band exchange for transport tests: forked ranks share an anonymous MAP_SHARED page (created before
 * fork) holding a central barrier and an all-gather buffer. It stands in for the bootstrap so that the transport
 * layer can be tested on its own (fcclTransportInitWithExchange). Every wait is bounded.
 */
#ifndef FCCL_TEST_IPC_SHM_H_
#define FCCL_TEST_IPC_SHM_H_

#include "fccl.h"
#include "transport.h"

#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define TEST_SHM_BYTES (4u << 20)

struct testShm {
  int nranks;
  int timeoutMs;
  uint32_t arrived;
  uint32_t generation;
  unsigned char data[TEST_SHM_BYTES];
};

struct testShmRank {
  struct testShm* shm;
  int rank;
};

static inline struct testShm* testShmCreate(int nranks, int timeoutMs) {
  void* mem = mmap(NULL, sizeof(struct testShm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return NULL;
  struct testShm* shm = mem;
  memset(shm, 0, sizeof(*shm));
  shm->nranks = nranks;
  shm->timeoutMs = timeoutMs;
  return shm;
}

static inline void testShmDestroy(struct testShm* shm) {
  if (shm) munmap(shm, sizeof(*shm));
}

static inline long testShmElapsedMs(const struct timespec* start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long)(now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

static inline fcclResult_t testShmBarrier(void* ctx) {
  struct testShmRank* self = ctx;
  struct testShm* shm = self->shm;
  uint32_t generation = __atomic_load_n(&shm->generation, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&shm->arrived, 1, __ATOMIC_ACQ_REL) == (uint32_t)shm->nranks) {
    __atomic_store_n(&shm->arrived, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&shm->generation, 1, __ATOMIC_RELEASE);
    return fcclSuccess;
  }
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (unsigned spins = 0; __atomic_load_n(&shm->generation, __ATOMIC_ACQUIRE) == generation; spins++) {
    if ((spins & 1023) == 1023) {
      if (testShmElapsedMs(&start) > shm->timeoutMs) return fcclTimeout;
      usleep(20);
    } else {
      sched_yield();
    }
  }
  return fcclSuccess;
}

static inline fcclResult_t testShmAllGather(void* ctx, void* allData, size_t bytesPerRank) {
  struct testShmRank* self = ctx;
  struct testShm* shm = self->shm;
  if (bytesPerRank * (size_t)shm->nranks > TEST_SHM_BYTES) return fcclInternalError;
  memcpy(shm->data + (size_t)self->rank * bytesPerRank, (char*)allData + (size_t)self->rank * bytesPerRank,
         bytesPerRank);
  fcclResult_t res = testShmBarrier(ctx);
  if (res != fcclSuccess) return res;
  memcpy(allData, shm->data, bytesPerRank * (size_t)shm->nranks);
  return testShmBarrier(ctx); /* nobody overwrites the buffer before everyone has read it */
}

static inline struct fcclTransportExchange testShmExchange(struct testShmRank* self) {
  struct fcclTransportExchange ex = {.ctx = self, .allGather = testShmAllGather, .barrier = testShmBarrier};
  return ex;
}

#endif /* FCCL_TEST_IPC_SHM_H_ */
