/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The public communicator calls without a GPU: every argument check, which happens before CUDA is touched, and
 * the launcher-variable errors. (Creating communicators is covered by test/gpu/test_comm_init.c; the bootstrap
 * underneath by the multiproc suite.)
 */
#include "bootstrap.h"
#include "comm.h"
#include "fccl.h"
#include "param.h"
#include "test.h"

#include <stdlib.h>

static fcclResult_t dummyAllgather(void* ctx, const void* send, void* recv, size_t bytes) {
  (void)ctx;
  (void)send;
  (void)recv;
  (void)bytes;
  return fcclSuccess;
}

static void testUniqueId(void) {
  EXPECT_EQ_INT(fcclGetUniqueId(NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "uniqueId is NULL");
  fcclUniqueId a, b;
  EXPECT_EQ_INT(fcclGetUniqueId(&a), fcclSuccess);
  EXPECT_EQ_INT(fcclGetUniqueId(&b), fcclSuccess);
  EXPECT(memcmp(&a, &b, sizeof(a)) != 0); /* another port and another secret */
  EXPECT_EQ_INT(fcclBootstrapCheckUniqueId(&a), fcclSuccess);
}

static void testInitRankArguments(void) {
  fcclUniqueId id;
  EXPECT_EQ_INT(fcclGetUniqueId(&id), fcclSuccess);
  fcclComm_t comm = (fcclComm_t)0x1;
  EXPECT_EQ_INT(fcclCommInitRank(NULL, 2, id, 0), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommInitRank(&comm, 0, id, 0), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "nranks 0");
  EXPECT_EQ_INT(fcclCommInitRank(&comm, 2, id, 2), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 2 outside 0..1");
  EXPECT_EQ_INT(fcclCommInitRank(&comm, 2, id, -1), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommInitRank(&comm, FCCL_BOOTSTRAP_MAX_RANKS + 1, id, 0), fcclInvalidArgument);
  fcclUniqueId zero;
  memset(&zero, 0, sizeof(zero));
  EXPECT_EQ_INT(fcclCommInitRank(&comm, 2, zero, 0), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "unique id");

  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, 2, id, 0, &config), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "FCCL_CONFIG_INITIALIZER");
  config = (fcclConfig_t)FCCL_CONFIG_INITIALIZER;
  config.size = 8;
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, 2, id, 0, &config), fcclInvalidArgument);
  config = (fcclConfig_t)FCCL_CONFIG_INITIALIZER;
  config.blocking = 2;
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, 2, id, 0, &config), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "blocking");
  config = (fcclConfig_t)FCCL_CONFIG_INITIALIZER;
  config.timeoutMs = 0;
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, 2, id, 0, &config), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "timeoutMs");
  config = (fcclConfig_t)FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = 7;
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, 2, id, 0, &config), fcclInvalidArgument);
  EXPECT(comm == (fcclComm_t)0x1); /* outputs are written only on success */
}

static void testOtherInits(void) {
  fcclComm_t comm = NULL;
  fcclComm_t comms[2];
  EXPECT_EQ_INT(fcclCommInitAll(NULL, 2, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommInitAll(comms, 0, NULL), fcclInvalidArgument);
  /* Over the group limit: refused as an argument before CUDA is asked anything (here there is no GPU at all). */
  EXPECT_EQ_INT(fcclCommInitAll(comms, 65, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "ndev 65 outside 1..64");
  fcclBootstrapCallbacks_t callbacks = {NULL, NULL, NULL};
  EXPECT_EQ_INT(fcclCommInitExternal(&comm, 2, 0, NULL, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommInitExternal(&comm, 2, 0, &callbacks, NULL), fcclInvalidArgument);
  callbacks.allgather = dummyAllgather;
  EXPECT_EQ_INT(fcclCommInitExternal(NULL, 2, 0, &callbacks, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommInitExternal(&comm, 2, 5, &callbacks, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommInitFromNccl(&comm, NULL, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommInitFromNccl(NULL, &comm, NULL), fcclInvalidArgument);

  /* No launcher variables: a usage error before any device is chosen. */
  const char* names[] = {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) unsetenv(names[i]);
  EXPECT_EQ_INT(fcclCommInitFromEnv(&comm, NULL), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "no launcher variables");
  EXPECT_EQ_INT(fcclCommInitFromEnv(NULL, NULL), fcclInvalidArgument);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  unsetenv("MASTER_ADDR");
  unsetenv("FCCL_COMM_ID");
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclCommInitFromEnv(&comm, NULL), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "MASTER_ADDR");
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  EXPECT(comm == NULL);
}

static void testHandles(void) {
  int value = 0;
  fcclResult_t state;
  EXPECT_EQ_INT(fcclCommDestroy(NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommAbort(NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommCount(NULL, &value), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommCuDevice(NULL, &value), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommUserRank(NULL, &value), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommGetAsyncError(NULL, &state), fcclInvalidArgument);
  /* A struct that is not a live communicator (freed, or never made) is refused by its magic. */
  struct fcclComm* fake = calloc(1, sizeof(*fake));
  EXPECT_EQ_INT(fcclCommCount(fake, &value), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "invalid communicator");
  EXPECT_EQ_INT(fcclCommDestroy(fake), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommEnsureReady(fake, "test"), fcclInvalidArgument);
  /* A live-looking one answers, and the null output pointers are refused. */
  fake->magic = FCCL_COMM_MAGIC;
  fake->nranks = 3;
  fake->rank = 1;
  fake->cudaDev = 2;
  fake->asyncError = fcclInProgress;
  EXPECT_EQ_INT(fcclCommCount(fake, &value), fcclSuccess);
  EXPECT_EQ_INT(value, 3);
  EXPECT_EQ_INT(fcclCommUserRank(fake, &value), fcclSuccess);
  EXPECT_EQ_INT(value, 1);
  EXPECT_EQ_INT(fcclCommCuDevice(fake, &value), fcclSuccess);
  EXPECT_EQ_INT(value, 2);
  EXPECT_EQ_INT(fcclCommGetAsyncError(fake, &state), fcclSuccess);
  EXPECT_EQ_INT(state, fcclInProgress);
  EXPECT_EQ_INT(fcclCommEnsureReady(fake, "fcclAllReduce"), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "fcclAllReduce");
  fake->asyncError = fcclTimeout;
  EXPECT_EQ_INT(fcclCommEnsureReady(fake, "test"), fcclTimeout);
  fake->asyncError = fcclSuccess;
  EXPECT_EQ_INT(fcclCommEnsureReady(fake, "test"), fcclSuccess);
  EXPECT_EQ_INT(fcclCommCount(fake, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommCuDevice(fake, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommUserRank(fake, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommGetAsyncError(fake, NULL), fcclInvalidArgument);
  free(fake);
}

int main(void) {
  testUniqueId();
  testInitRankArguments();
  testOtherInits();
  testHandles();
  /* The roots of the ids above still wait for ranks: the library stops them at exit. */
  return testSummary("comm_api");
}
