/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The transport tests' stand-in for the bootstrap: a struct fcclTransportExchange over the shared-memory region of
 * test/common/test_shm.h, so that the transport layer can be driven on its own (fcclTransportInitWithExchange).
 */
#ifndef FCCL_TEST_IPC_SHM_H_
#define FCCL_TEST_IPC_SHM_H_

#include "fccl.h"
#include "test_shm.h"
#include "transport.h"

/* Room for the transport's all-gathers: records of up to 2 MiB per rank. */
#define TEST_IPC_RECORD_BYTES (2u << 20)

/* What the exchange's callbacks get as ctx. */
struct testShmRank {
  struct testShm* shm;
  int rank;
};

static inline fcclResult_t testShmResultToFccl(int result) {
  switch (result) {
    case TEST_SHM_OK: return fcclSuccess;
    case TEST_SHM_TIMEOUT: return fcclTimeout;
    case TEST_SHM_ABORTED: return fcclRemoteError;
    default: return fcclInternalError;
  }
}

static inline fcclResult_t testShmExchangeBarrier(void* ctx) {
  struct testShmRank* self = ctx;
  return testShmResultToFccl(testShmBarrier(self->shm, self->rank));
}

static inline fcclResult_t testShmExchangeAllGather(void* ctx, void* allData, size_t bytesPerRank) {
  struct testShmRank* self = ctx;
  return testShmResultToFccl(testShmAllGather(self->shm, self->rank, allData, bytesPerRank));
}

static inline struct fcclTransportExchange testShmExchange(struct testShmRank* self) {
  struct fcclTransportExchange ex = {
      .ctx = self, .allGather = testShmExchangeAllGather, .barrier = testShmExchangeBarrier};
  return ex;
}

#endif /* FCCL_TEST_IPC_SHM_H_ */
