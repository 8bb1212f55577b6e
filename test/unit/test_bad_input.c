/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bad input to every public call, without a GPU: one table, one row per case (the call, what is wrong with it, the
 * documented result, words its message must hold). Each row must return its result with a non-empty
 * fcclGetLastError, write no output, crash nothing, and leave the other handles answering as before. The whole
 * table runs again in a child of fork(), where the same checks hold. Cases that need a communicator backed by a GPU
 * (buffers of the wrong kind, unknown registration handles, group members destroyed twice, capture) are in
 * test/gpu/test_bad_input_gpu.c; docs/errors.md says what each result means.
 *
 * Without a GPU no communicator can be created, so the handles here are communicator structs set up by hand in
 * each state a handle can be in: live (init finished), init running, init failed, torn down (what commFree leaves
 * in the magic) and destroyed while its fcclCommInitAll group lives on. Their memory stays valid throughout, which
 * is what makes a stale handle detectable at all (docs/errors.md#stale-handles).
 */
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "fccl.h"
#include "param.h"
#include "redop.h"
#include "test.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define SENTINEL ((fcclComm_t)(uintptr_t)0x5e5e5e5e)

struct fixture {
  fcclUniqueId id;          /* a valid id, whose root waits for one rank */
  struct fcclComm* live;    /* init finished (no device state: there is no GPU) */
  struct fcclComm* pending; /* a non-blocking init still running */
  struct fcclComm* failed;  /* init failed with fcclTimeout */
  struct fcclComm* dead;    /* torn down: magic cleared, memory kept by this test */
  struct fcclComm* deferred; /* destroyed by the user, its fcclCommInitAll group still alive */
  struct fcclComm* finalized; /* fcclCommFinalize has run */
  struct fcclComm* ops;       /* a live communicator with a pre-multiplied sum of float32 (opsOp) and one destroyed
                               * (opsGone) */
  int opsOp, opsGone;
  fcclComm_t out;           /* output of init calls: must stay SENTINEL */
  float device[4];          /* stands for a buffer: never reached */
};

static struct fixture fx;

static struct fcclComm* fakeComm(uint64_t magic, fcclResult_t state) {
  struct fcclComm* comm = calloc(1, sizeof(*comm));
  if (!comm) exit(1);
  comm->magic = magic;
  comm->rank = 1;
  comm->nranks = 2;
  comm->cudaDev = 0;
  comm->timeoutMs = 1000;
  comm->asyncError = state;
  snprintf(comm->name, sizeof(comm->name), "fake");
  pthread_mutex_init(&comm->errorLock, NULL);
  return comm;
}

static void freeComm(struct fcclComm* comm) {
  pthread_mutex_destroy(&comm->errorLock);
  free(comm);
}

/* ---- the cases: each makes one call ---- */

#define CASE(name) static fcclResult_t name(void)

static fcclUniqueId validId(void) { return fx.id; }

/* An id with one byte changed: bytes 0-3 magic, 4-7 protocol version, 16-39 root address (16-17 family,
 * 18-19 port), 40-127 zero padding. */
static fcclUniqueId idWith(size_t offset, char value) {
  fcclUniqueId id = fx.id;
  id.internal[offset] = value;
  return id;
}

static fcclUniqueId idZero(void) {
  fcclUniqueId id;
  memset(&id, 0, sizeof(id));
  return id;
}

static fcclUniqueId idRandom(void) {
  fcclUniqueId id;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < sizeof(id.internal); i++) id.internal[i] = (char)testRandom(&state);
  return id;
}

static fcclConfig_t configWith(int field, long value) {
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  switch (field) {
    case 0: config.size = (size_t)value; break;
    case 1: config.magic = (unsigned int)value; break;
    case 2: config.blocking = (int)value; break;
    case 3: config.timeoutMs = (int)value; break;
    case 4: config.allowSharedDevice = (int)value; break;
    case 5: config.splitShare = (int)value; break;
    case 6: config.minCTAs = (int)value; break;
    case 7: config.maxCTAs = (int)value; break;
  }
  return config;
}

CASE(versionNull) { return fcclGetVersion(NULL); }
CASE(uniqueIdNull) { return fcclGetUniqueId(NULL); }

static fcclResult_t uniqueIdWithEnv(const char* name, const char* value) {
  setenv(name, value, 1);
  fcclParamResetForTest();
  fcclUniqueId id;
  fcclResult_t res = fcclGetUniqueId(&id);
  unsetenv(name);
  fcclParamResetForTest();
  return res;
}
CASE(uniqueIdBadCommId) { return uniqueIdWithEnv("FCCL_COMM_ID", "no-port-here"); }
CASE(uniqueIdBadPort) { return uniqueIdWithEnv("FCCL_COMM_ID", "127.0.0.1:70000"); }
CASE(uniqueIdBadIfname) { return uniqueIdWithEnv("FCCL_SOCKET_IFNAME", "no-such-interface"); }

CASE(initRankNullComm) { return fcclCommInitRank(NULL, 2, validId(), 0); }
CASE(initRankNranksZero) { return fcclCommInitRank(&fx.out, 0, validId(), 0); }
CASE(initRankNranksNegative) { return fcclCommInitRank(&fx.out, -3, validId(), 0); }
CASE(initRankNranksTooMany) { return fcclCommInitRank(&fx.out, FCCL_BOOTSTRAP_MAX_RANKS + 1, validId(), 0); }
CASE(initRankRankNegative) { return fcclCommInitRank(&fx.out, 2, validId(), -1); }
CASE(initRankRankTooLarge) { return fcclCommInitRank(&fx.out, 2, validId(), 2); }
CASE(initRankIdZero) { return fcclCommInitRank(&fx.out, 2, idZero(), 0); }
CASE(initRankIdRandom) { return fcclCommInitRank(&fx.out, 2, idRandom(), 0); }
CASE(initRankIdMagic) { return fcclCommInitRank(&fx.out, 2, idWith(0, 'X'), 0); }
CASE(initRankIdVersion) { return fcclCommInitRank(&fx.out, 2, idWith(4, 99), 0); }
CASE(initRankIdFamily) { return fcclCommInitRank(&fx.out, 2, idWith(40, 9), 0); } /* after magic, version, secret */
CASE(initRankIdPadding) { return fcclCommInitRank(&fx.out, 2, idWith(100, 1), 0); }
static fcclResult_t initWithConfig(int field, long value) {
  fcclConfig_t config = configWith(field, value);
  return fcclCommInitRankConfig(&fx.out, 2, validId(), 0, &config);
}
CASE(configSizeZero) { return initWithConfig(0, 0); }
/* Smaller than the first fcclConfig_t (fccl 0.1.0's, which ends at allowSharedDevice: the fields since are
 * appended, and a caller compiled with the older header passes its size). */
CASE(configSizeSmall) { return initWithConfig(0, offsetof(fcclConfig_t, allowSharedDevice) + sizeof(int) - 1); }
CASE(configMinCtasZero) { return initWithConfig(6, 0); }
CASE(configMaxCtasNegative) { return initWithConfig(7, -5); }
CASE(configMinAboveMax) {
  fcclConfig_t config = configWith(6, 16);
  config.maxCTAs = 8;
  return fcclCommInitRankConfig(&fx.out, 2, validId(), 0, &config);
}
CASE(configMagicZero) { return initWithConfig(1, 0); }
CASE(configMagicOther) { return initWithConfig(1, 0xcafebeef); }
CASE(configBlocking) { return initWithConfig(2, 2); }
CASE(configTimeoutZero) { return initWithConfig(3, 0); }
CASE(configTimeoutNegative) { return initWithConfig(3, -5); }
CASE(configShared) { return initWithConfig(4, 7); }
CASE(configSplitShare) { return initWithConfig(5, 2); }
CASE(configGarbage) {
  fcclConfig_t config;
  memset(&config, 0xa5, sizeof(config)); /* never initialised */
  return fcclCommInitRankConfig(&fx.out, 2, validId(), 0, &config);
}

CASE(initAllNull) { return fcclCommInitAll(NULL, 2, NULL); }
CASE(initAllZero) {
  fcclComm_t comms[2] = {SENTINEL, SENTINEL};
  fcclResult_t res = fcclCommInitAll(comms, 0, NULL);
  fx.out = comms[0];
  return res;
}
CASE(initAllTooMany) {
  fcclComm_t comms[65];
  for (int i = 0; i < 65; i++) comms[i] = SENTINEL;
  fcclResult_t res = fcclCommInitAll(comms, 65, NULL);
  for (int i = 0; i < 65 && res != fcclSuccess; i++)
    if (comms[i] != SENTINEL) fx.out = comms[i];
  return res;
}

/* The launcher variables of a torchrun launch of 2 ranks, without FCCL_COMM_SECRET unless secret is set. */
static fcclResult_t initFromEnv(const char* rank, const char* size, const char* secret, const fcclConfig_t* config) {
  const char* names[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "FCCL_COMM_SECRET"};
  const char* values[] = {rank, size, "127.0.0.1", "29500", secret};
  for (int i = 0; i < 5; i++)
    if (values[i]) setenv(names[i], values[i], 1);
  fcclParamResetForTest();
  fcclResult_t res = fcclCommInitFromEnv(&fx.out, config);
  for (int i = 0; i < 5; i++) unsetenv(names[i]);
  fcclParamResetForTest();
  return res;
}
CASE(envNullComm) { return fcclCommInitFromEnv(NULL, NULL); }
CASE(envNothing) { return initFromEnv(NULL, NULL, NULL, NULL); }
CASE(envRankTooLarge) { return initFromEnv("2", "2", "0123456789abcdef", NULL); }
CASE(envRankNotANumber) { return initFromEnv("one", "2", "0123456789abcdef", NULL); }
CASE(envSizeZero) { return initFromEnv("0", "0", "0123456789abcdef", NULL); }
CASE(envNoSecret) { return initFromEnv("0", "2", NULL, NULL); }
CASE(envShortSecret) { return initFromEnv("0", "2", "12345", NULL); }
CASE(envBadConfig) {
  fcclConfig_t config = configWith(1, 0);
  return initFromEnv("0", "2", "0123456789abcdef", &config);
}

static fcclResult_t gatherNothing(void* ctx, const void* send, void* recv, size_t bytes) {
  (void)ctx;
  (void)send;
  (void)recv;
  (void)bytes;
  return fcclSuccess;
}
static const fcclBootstrapCallbacks_t goodCallbacks = {NULL, gatherNothing, NULL};
CASE(externalNullComm) { return fcclCommInitExternal(NULL, 2, 0, &goodCallbacks, NULL); }
CASE(externalNullCallbacks) { return fcclCommInitExternal(&fx.out, 2, 0, NULL, NULL); }
CASE(externalNullAllgather) {
  fcclBootstrapCallbacks_t callbacks = {NULL, NULL, NULL};
  return fcclCommInitExternal(&fx.out, 2, 0, &callbacks, NULL);
}
CASE(externalNranksZero) { return fcclCommInitExternal(&fx.out, 0, 0, &goodCallbacks, NULL); }
CASE(externalRankTooLarge) { return fcclCommInitExternal(&fx.out, 2, 5, &goodCallbacks, NULL); }
CASE(externalBadConfig) {
  fcclConfig_t config = configWith(0, 8);
  return fcclCommInitExternal(&fx.out, 2, 0, &goodCallbacks, &config);
}
CASE(ncclNullComm) { return fcclCommInitFromNccl(NULL, &fx, NULL); }
CASE(ncclNullNccl) { return fcclCommInitFromNccl(&fx.out, NULL, NULL); }

CASE(destroyNull) { return fcclCommDestroy(NULL); }
CASE(destroyDead) { return fcclCommDestroy(fx.dead); }
CASE(destroyTwice) { return fcclCommDestroy(fx.deferred); }
CASE(abortNull) { return fcclCommAbort(NULL); }
CASE(abortDead) { return fcclCommAbort(fx.dead); }
CASE(abortDeferred) { return fcclCommAbort(fx.deferred); }

CASE(asyncNullComm) {
  fcclResult_t state;
  return fcclCommGetAsyncError(NULL, &state);
}
CASE(asyncDead) {
  fcclResult_t state;
  return fcclCommGetAsyncError(fx.dead, &state);
}
CASE(asyncNullOut) { return fcclCommGetAsyncError(fx.live, NULL); }
CASE(countNull) {
  int value;
  return fcclCommCount(NULL, &value);
}
CASE(countDeferred) {
  int value;
  return fcclCommCount(fx.deferred, &value);
}
CASE(countNullOut) { return fcclCommCount(fx.live, NULL); }
CASE(deviceDead) {
  int value;
  return fcclCommCuDevice(fx.dead, &value);
}
CASE(deviceNullOut) { return fcclCommCuDevice(fx.live, NULL); }
CASE(rankDead) {
  int value;
  return fcclCommUserRank(fx.dead, &value);
}
CASE(rankNullOut) { return fcclCommUserRank(fx.live, NULL); }

static fcclResult_t allReduce(const void* send, void* recv, size_t count, int type, int op, struct fcclComm* comm) {
  return fcclAllReduce(send, recv, count, (fcclDataType_t)type, (fcclRedOp_t)op, comm, NULL);
}
CASE(allReduceNullComm) { return allReduce(fx.device, fx.device, 4, fcclFloat32, fcclSum, NULL); }
CASE(allReduceDead) { return allReduce(fx.device, fx.device, 4, fcclFloat32, fcclSum, fx.dead); }
CASE(allReduceDeferred) { return allReduce(fx.device, fx.device, 4, fcclFloat32, fcclSum, fx.deferred); }
CASE(allReduceTypeNegative) { return allReduce(fx.device, fx.device, 4, -1, fcclSum, fx.live); }
CASE(allReduceTypeUnknown) { return allReduce(fx.device, fx.device, 4, fcclNumTypes, fcclSum, fx.live); }
CASE(allReduceOpNegative) { return allReduce(fx.device, fx.device, 4, fcclFloat32, -1, fx.live); }
CASE(allReduceOpUnknown) { return allReduce(fx.device, fx.device, 4, fcclFloat32, fcclNumOps, fx.live); }
CASE(allReduceNullSend) { return allReduce(NULL, fx.device, 4, fcclFloat32, fcclSum, fx.live); }
CASE(allReduceNullRecv) { return allReduce(fx.device, NULL, 4, fcclFloat32, fcclSum, fx.live); }
CASE(allReduceMisaligned) {
  return allReduce((const char*)fx.device + 1, fx.device, 2, fcclFloat32, fcclSum, fx.live);
}
CASE(allReduceOverflow) { return allReduce(fx.device, fx.device, SIZE_MAX / 2, fcclFloat64, fcclSum, fx.live); }
CASE(allReducePending) { return allReduce(fx.device, fx.device, 4, fcclFloat32, fcclSum, fx.pending); }
CASE(allReduceFailed) { return allReduce(fx.device, fx.device, 4, fcclFloat32, fcclSum, fx.failed); }
CASE(reduceNullComm) { return fcclReduce(fx.device, fx.device, 4, fcclFloat32, fcclSum, 0, NULL, NULL); }
CASE(reduceRootOutside) { return fcclReduce(fx.device, fx.device, 4, fcclFloat32, fcclSum, 2, fx.live, NULL); }
CASE(reduceRootNegative) { return fcclReduce(fx.device, fx.device, 4, fcclFloat32, fcclSum, -1, fx.live, NULL); }
CASE(reduceNullSend) { return fcclReduce(NULL, fx.device, 4, fcclFloat32, fcclSum, 0, fx.live, NULL); }
/* recvbuf is the root's only: NULL elsewhere is fine, and on the root it is an error. */
CASE(reduceRootNullRecv) { return fcclReduce(fx.device, NULL, 4, fcclFloat32, fcclSum, 1, fx.live, NULL); }
CASE(reduceTypeUnknown) {
  return fcclReduce(fx.device, fx.device, 4, (fcclDataType_t)fcclNumTypes, fcclSum, 0, fx.live, NULL);
}
CASE(reduceTypeFp8) { return fcclReduce(fx.device, fx.device, 4, fcclFloat8e4m3, fcclSum, 0, fx.live, NULL); }
CASE(reduceOpNegative) { return fcclReduce(fx.device, fx.device, 4, fcclFloat32, (fcclRedOp_t)-1, 0, fx.live, NULL); }
CASE(reduceOpUnmade) { return fcclReduce(fx.device, fx.device, 4, fcclFloat32, fcclNumOps, 0, fx.live, NULL); }
CASE(reduceMisaligned) {
  return fcclReduce((const char*)fx.device + 2, fx.device, 1, fcclFloat32, fcclSum, 0, fx.live, NULL);
}
CASE(reducePending) { return fcclReduce(fx.device, fx.device, 4, fcclFloat32, fcclSum, 0, fx.pending, NULL); }
CASE(reduceNoDevice) { return fcclReduce(fx.device, NULL, 4, fcclFloat32, fcclSum, 0, fx.live, NULL); }
CASE(bcastNullComm) { return fcclBcast(fx.device, 4, fcclFloat32, 0, NULL, NULL); }
CASE(bcastNullBuffer) { return fcclBcast(NULL, 4, fcclFloat32, 0, fx.live, NULL); }
CASE(bcastRootOutside) { return fcclBcast(fx.device, 4, fcclFloat32, 2, fx.live, NULL); }
CASE(bcastTypeUnknown) { return fcclBcast(fx.device, 4, (fcclDataType_t)-1, 0, fx.live, NULL); }
CASE(bcastDead) { return fcclBcast(fx.device, 4, fcclFloat32, 0, fx.dead, NULL); }
CASE(gatherNullComm) { return fcclGather(fx.device, fx.device, 2, fcclFloat32, 0, NULL, NULL); }
CASE(gatherRootOutside) { return fcclGather(fx.device, fx.device, 2, fcclFloat32, 5, fx.live, NULL); }
CASE(gatherNullSend) { return fcclGather(NULL, fx.device, 2, fcclFloat32, 0, fx.live, NULL); }
CASE(gatherRootNullRecv) { return fcclGather(fx.device, NULL, 2, fcclFloat32, 1, fx.live, NULL); }
/* nranks (2) x count x 4 bytes: one more than fits a size; a count alone would fit. */
CASE(gatherOverflow) { return fcclGather(fx.device, fx.device, SIZE_MAX / 8 + 1, fcclFloat32, 1, fx.live, NULL); }
CASE(gatherPending) { return fcclGather(fx.device, fx.device, 2, fcclFloat32, 0, fx.pending, NULL); }
CASE(scatterNullComm) { return fcclScatter(fx.device, fx.device, 2, fcclFloat32, 0, NULL, NULL); }
CASE(scatterRootOutside) { return fcclScatter(fx.device, fx.device, 2, fcclFloat32, -2, fx.live, NULL); }
CASE(scatterNullRecv) { return fcclScatter(fx.device, NULL, 2, fcclFloat32, 0, fx.live, NULL); }
CASE(scatterRootNullSend) { return fcclScatter(NULL, fx.device, 2, fcclFloat32, 1, fx.live, NULL); }
CASE(scatterMisaligned) { return fcclScatter(fx.device, (char*)fx.device + 1, 1, fcclInt32, 0, fx.live, NULL); }
CASE(scatterFailed) { return fcclScatter(fx.device, fx.device, 2, fcclFloat32, 0, fx.failed, NULL); }

/* Pre-multiplied sums: bad arguments, and an op used where it does not belong. */
static float hostScalar = 0.5f;
CASE(preMulNullOp) {
  return fcclRedOpCreatePreMulSum(NULL, &hostScalar, fcclFloat32, fcclScalarHostImmediate, fx.live);
}
CASE(preMulNullScalar) {
  fcclRedOp_t op = fcclSum;
  return fcclRedOpCreatePreMulSum(&op, NULL, fcclFloat32, fcclScalarHostImmediate, fx.live);
}
CASE(preMulTypeUnknown) {
  fcclRedOp_t op = fcclSum;
  return fcclRedOpCreatePreMulSum(&op, &hostScalar, (fcclDataType_t)fcclNumTypes, fcclScalarHostImmediate, fx.live);
}
CASE(preMulTypeFp8) {
  fcclRedOp_t op = fcclSum;
  return fcclRedOpCreatePreMulSum(&op, &hostScalar, fcclFloat8e4m3, fcclScalarHostImmediate, fx.live);
}
CASE(preMulResidence) {
  fcclRedOp_t op = fcclSum;
  return fcclRedOpCreatePreMulSum(&op, &hostScalar, fcclFloat32, (fcclScalarResidence_t)7, fx.live);
}
CASE(preMulDeviceMisaligned) {
  fcclRedOp_t op = fcclSum;
  return fcclRedOpCreatePreMulSum(&op, (char*)fx.device + 2, fcclFloat32, fcclScalarDevice, fx.live);
}
/* Host memory given as a device scalar: not memory the kernels can read (without a driver, not a CUDA pointer). */
CASE(preMulDeviceHostMemory) {
  fcclRedOp_t op = fcclSum;
  return fcclRedOpCreatePreMulSum(&op, fx.device, fcclFloat32, fcclScalarDevice, fx.live);
}
CASE(preMulNullComm) {
  fcclRedOp_t op = fcclSum;
  return fcclRedOpCreatePreMulSum(&op, &hostScalar, fcclFloat32, fcclScalarHostImmediate, NULL);
}
CASE(preMulPending) {
  fcclRedOp_t op = fcclSum;
  return fcclRedOpCreatePreMulSum(&op, &hostScalar, fcclFloat32, fcclScalarHostImmediate, fx.pending);
}
CASE(preMulFailed) {
  fcclRedOp_t op = fcclSum;
  return fcclRedOpCreatePreMulSum(&op, &hostScalar, fcclFloat32, fcclScalarHostImmediate, fx.failed);
}
CASE(preMulFinalized) {
  fcclRedOp_t op = fcclSum;
  return fcclRedOpCreatePreMulSum(&op, &hostScalar, fcclFloat32, fcclScalarHostImmediate, fx.finalized);
}
CASE(redOpDestroyBuiltin) { return fcclRedOpDestroy(fcclSum, fx.live); }
CASE(redOpDestroyUnmade) { return fcclRedOpDestroy((fcclRedOp_t)(fcclNumOps + 3), fx.live); }
CASE(redOpDestroyNullComm) { return fcclRedOpDestroy(fcclNumOps, NULL); }
CASE(redOpDestroyDead) { return fcclRedOpDestroy(fcclNumOps, fx.dead); }
/* An op of a communicator of its own (fx.ops, made in main): another datatype, another communicator, used after its
 * destruction; and the collectives that take no op do not look at it. */
CASE(preMulOtherType) { return allReduce(fx.device, fx.device, 4, fcclFloat16, fx.opsOp, fx.ops); }
CASE(preMulOtherComm) { return allReduce(fx.device, fx.device, 4, fcclFloat32, fx.opsOp, fx.live); }
CASE(preMulDestroyed) { return allReduce(fx.device, fx.device, 4, fcclFloat32, fx.opsGone, fx.ops); }
CASE(preMulDestroyTwice) { return fcclRedOpDestroy(fx.opsGone, fx.ops); }
CASE(preMulReduceOtherType) { return fcclReduce(fx.device, fx.device, 4, fcclInt64, fx.opsOp, 0, fx.ops, NULL); }
CASE(preMulReduceScatterOtherType) {
  return fcclReduceScatter(fx.device, fx.device, 1, fcclBfloat16, fx.opsOp, fx.ops, NULL);
}
/* The op is right: the call gets as far as the communicator's state (no device state here, as init never ran). */
CASE(preMulNoDevice) { return allReduce(fx.device, fx.device, 4, fcclFloat32, fx.opsOp, fx.ops); }

CASE(barrierNull) { return fcclBarrier(NULL, NULL); }
CASE(barrierDeferred) { return fcclBarrier(fx.deferred, NULL); }
CASE(barrierPending) { return fcclBarrier(fx.pending, NULL); }

CASE(registerNull) {
  fcclRegHandle_t handle;
  return fcclCommRegister(NULL, fx.device, sizeof(fx.device), &handle);
}
CASE(registerDead) {
  fcclRegHandle_t handle;
  return fcclCommRegister(fx.dead, fx.device, sizeof(fx.device), &handle);
}
CASE(registerPending) {
  fcclRegHandle_t handle;
  return fcclCommRegister(fx.pending, fx.device, sizeof(fx.device), &handle);
}
CASE(registerFailed) {
  fcclRegHandle_t handle;
  return fcclCommRegister(fx.failed, fx.device, sizeof(fx.device), &handle);
}
CASE(deregisterNull) { return fcclCommDeregister(NULL, (fcclRegHandle_t)(uintptr_t)0x1234); }
CASE(deregisterDeferred) { return fcclCommDeregister(fx.deferred, (fcclRegHandle_t)(uintptr_t)0x1234); }
CASE(deregisterPending) { return fcclCommDeregister(fx.pending, (fcclRegHandle_t)(uintptr_t)0x1234); }
CASE(deregisterFailed) { return fcclCommDeregister(fx.failed, (fcclRegHandle_t)(uintptr_t)0x1234); }

CASE(sendNullComm) { return fcclSend(fx.device, 4, fcclFloat32, 0, NULL, NULL); }
CASE(sendPeerOutside) { return fcclSend(fx.device, 4, fcclFloat32, 2, fx.live, NULL); }
CASE(sendPeerNegative) { return fcclSend(fx.device, 4, fcclFloat32, -1, fx.live, NULL); }
CASE(sendNullBuffer) { return fcclSend(NULL, 4, fcclFloat32, 0, fx.live, NULL); }
static const int kExcludeZero[] = {0}, kExcludeTwo[] = {2}, kExcludeSelf[] = {1};
CASE(shrinkInvalid) { return fcclCommShrink(NULL, kExcludeZero, 1, &fx.out, NULL, FCCL_SHRINK_DEFAULT); }
CASE(shrinkNullNew) { return fcclCommShrink(fx.live, kExcludeZero, 1, NULL, NULL, FCCL_SHRINK_DEFAULT); }
CASE(shrinkFlags) { return fcclCommShrink(fx.live, kExcludeZero, 1, &fx.out, NULL, 7); }
CASE(shrinkCount) { return fcclCommShrink(fx.live, kExcludeZero, 2, &fx.out, NULL, FCCL_SHRINK_DEFAULT); }
CASE(shrinkNullList) { return fcclCommShrink(fx.live, NULL, 1, &fx.out, NULL, FCCL_SHRINK_DEFAULT); }
CASE(shrinkRankOutside) { return fcclCommShrink(fx.live, kExcludeTwo, 1, &fx.out, NULL, FCCL_SHRINK_DEFAULT); }
CASE(shrinkSelf) { return fcclCommShrink(fx.live, kExcludeSelf, 1, &fx.out, NULL, FCCL_SHRINK_ABORT); }
CASE(shrinkPending) { return fcclCommShrink(fx.pending, kExcludeZero, 1, &fx.out, NULL, FCCL_SHRINK_DEFAULT); }
CASE(shrinkNoPeers) { return fcclCommShrink(fx.live, kExcludeZero, 1, &fx.out, NULL, FCCL_SHRINK_DEFAULT); }
CASE(sendTypeUnknown) { return fcclSend(fx.device, 4, (fcclDataType_t)fcclNumTypes, 0, fx.live, NULL); }
CASE(sendNoNccl) { return fcclSend(fx.device, 4, fcclFloat32, 0, fx.live, NULL); }
CASE(sendPending) { return fcclSend(fx.device, 4, fcclFloat32, 0, fx.pending, NULL); }
CASE(recvNullBuffer) { return fcclRecv(NULL, 4, fcclFloat32, 0, fx.live, NULL); }
CASE(recvDead) { return fcclRecv(fx.device, 4, fcclFloat32, 0, fx.dead, NULL); }
CASE(allToAllOverlap) { return fcclAllToAll(fx.device, (char*)fx.device + 4, 2, fcclFloat32, fx.live, NULL); }
CASE(allToAllNullRecv) { return fcclAllToAll(fx.device, NULL, 2, fcclFloat32, fx.live, NULL); }
CASE(alltoAllNullComm) { return fcclAlltoAll(fx.device, fx.device, 1, fcclFloat32, NULL, NULL); }
CASE(alltoAllFinalized) { return fcclAlltoAll(fx.device, (char*)fx.device + 8, 1, fcclFloat32, fx.finalized, NULL); }
CASE(reduceFinalized) { return fcclReduce(fx.device, fx.device, 4, fcclFloat32, fcclSum, 0, fx.finalized, NULL); }
CASE(gatherFinalized) { return fcclGather(fx.device, fx.device, 1, fcclFloat32, 0, fx.finalized, NULL); }
CASE(allReduceFinalized) { return fcclAllReduce(fx.device, fx.device, 4, fcclFloat32, fcclSum, fx.finalized, NULL); }

CASE(splitNull) { return fcclCommSplit(NULL, 0, 0, &fx.out, NULL); }
CASE(splitDead) { return fcclCommSplit(fx.dead, 0, 0, &fx.out, NULL); }
CASE(splitDeferred) { return fcclCommSplit(fx.deferred, 0, 0, &fx.out, NULL); }
CASE(splitNullNew) { return fcclCommSplit(fx.live, 0, 0, NULL, NULL); }
CASE(splitColorNegative) { return fcclCommSplit(fx.live, -2, 0, &fx.out, NULL); }
CASE(splitColorMin) { return fcclCommSplit(fx.live, INT32_MIN, 0, &fx.out, NULL); }
CASE(splitConfigMagic) {
  fcclConfig_t config = configWith(1, 0);
  return fcclCommSplit(fx.live, 0, 0, &fx.out, &config);
}
CASE(splitConfigShare) {
  fcclConfig_t config = configWith(5, 7);
  return fcclCommSplit(fx.live, 0, 0, &fx.out, &config);
}
CASE(splitConfigCtas) {
  fcclConfig_t config = configWith(7, 0);
  return fcclCommSplit(fx.live, 0, 0, &fx.out, &config);
}
CASE(splitPending) { return fcclCommSplit(fx.pending, 0, 0, &fx.out, NULL); }
CASE(splitFailed) { return fcclCommSplit(fx.failed, FCCL_SPLIT_NOCOLOR, 0, &fx.out, NULL); }
CASE(splitFinalized) { return fcclCommSplit(fx.finalized, 0, 0, &fx.out, NULL); }
CASE(splitNoPeers) { return fcclCommSplit(fx.live, 0, 0, &fx.out, NULL); }
CASE(finalizeNull) { return fcclCommFinalize(NULL); }
CASE(finalizeDead) { return fcclCommFinalize(fx.dead); }
CASE(finalizeDeferred) { return fcclCommFinalize(fx.deferred); }
CASE(finalizePending) { return fcclCommFinalize(fx.pending); }
CASE(finalizeFailed) { return fcclCommFinalize(fx.failed); }
CASE(finalizeTwice) { return fcclCommFinalize(fx.finalized); }
CASE(finalizeNoPeers) { return fcclCommFinalize(fx.live); }
CASE(registerFinalized) {
  fcclRegHandle_t handle;
  return fcclCommRegister(fx.finalized, fx.device, sizeof(fx.device), &handle);
}
CASE(groupEndUnstarted) { return fcclGroupEnd(); }
CASE(pathNullOut) { return fcclCommGetPath(fx.live, NULL, NULL); }
CASE(pathDead) {
  fcclPath_t path;
  return fcclCommGetPath(fx.dead, &path, NULL);
}
CASE(pathPending) {
  fcclPath_t path;
  return fcclCommGetPath(fx.pending, &path, NULL);
}

CASE(memAllocNull) { return fcclMemAlloc(NULL, 4096); }
CASE(memAllocZero) {
  void* ptr = &fx;
  fcclResult_t res = fcclMemAlloc(&ptr, 0);
  if (ptr != &fx) fx.out = (fcclComm_t)ptr;
  return res;
}
CASE(memFreeForeign) { return fcclMemFree(fx.device); }
CASE(memFreeWild) { return fcclMemFree((void*)(uintptr_t)0xdead0000); }
CASE(memStatsNull) { return fcclCommGetMemStats(NULL, NULL); }
CASE(memStatsSizeZero) {
  fcclMemStats_t stats;
  memset(&stats, 0, sizeof(stats));
  return fcclCommGetMemStats(NULL, &stats);
}
CASE(memStatsDead) {
  fcclMemStats_t stats = {.size = sizeof(stats)};
  return fcclCommGetMemStats(fx.dead, &stats);
}

/* ---- the table ---- */

struct badCase {
  const char* call;
  const char* wrong;
  fcclResult_t (*run)(void);
  fcclResult_t expected;
  const char* words; /* the message must contain them */
};

#define ARG fcclInvalidArgument
#define USAGE fcclInvalidUsage
static const struct badCase cases[] = {
    {"fcclGetVersion", "NULL version", versionNull, ARG, "version is NULL"},
    {"fcclGetUniqueId", "NULL id", uniqueIdNull, ARG, "uniqueId is NULL"},
    {"fcclGetUniqueId", "FCCL_COMM_ID without a port", uniqueIdBadCommId, ARG, "expected host:port"},
    {"fcclGetUniqueId", "FCCL_COMM_ID port out of range", uniqueIdBadPort, ARG, "not in 1..65535"},
    {"fcclGetUniqueId", "FCCL_SOCKET_IFNAME of no interface", uniqueIdBadIfname, ARG, "FCCL_SOCKET_IFNAME"},
    {"fcclCommInitRank", "NULL comm", initRankNullComm, ARG, "comm is NULL"},
    {"fcclCommInitRank", "nranks 0", initRankNranksZero, ARG, "nranks 0 outside"},
    {"fcclCommInitRank", "nranks -3", initRankNranksNegative, ARG, "nranks -3 outside"},
    {"fcclCommInitRank", "nranks 4097", initRankNranksTooMany, ARG, "nranks 4097 outside"},
    {"fcclCommInitRank", "rank -1", initRankRankNegative, ARG, "rank -1 outside 0..1"},
    {"fcclCommInitRank", "rank == nranks", initRankRankTooLarge, ARG, "rank 2 outside 0..1"},
    {"fcclCommInitRank", "all-zero id", initRankIdZero, ARG, "invalid unique id"},
    {"fcclCommInitRank", "random id", initRankIdRandom, ARG, "invalid unique id"},
    {"fcclCommInitRank", "id with another magic", initRankIdMagic, ARG, "bad magic"},
    {"fcclCommInitRank", "id of another protocol version", initRankIdVersion, ARG, "protocol version 99"},
    {"fcclCommInitRank", "id with an unknown address family", initRankIdFamily, ARG, "address family 9"},
    {"fcclCommInitRank", "id with non-zero padding", initRankIdPadding, ARG, "non-zero padding"},
    {"fcclCommInitRankConfig", "config.size 0", configSizeZero, ARG, "config.size is 0"},
    {"fcclCommInitRankConfig", "config.size too small", configSizeSmall, ARG, "config.size is"},
    {"fcclCommInitRankConfig", "config.magic 0", configMagicZero, ARG, "FCCL_CONFIG_INITIALIZER"},
    {"fcclCommInitRankConfig", "config.magic of another library", configMagicOther, ARG, "FCCL_CONFIG_INITIALIZER"},
    {"fcclCommInitRankConfig", "config.blocking 2", configBlocking, ARG, "config.blocking is 2"},
    {"fcclCommInitRankConfig", "config.timeoutMs 0", configTimeoutZero, ARG, "config.timeoutMs is 0"},
    {"fcclCommInitRankConfig", "config.timeoutMs -5", configTimeoutNegative, ARG, "config.timeoutMs is -5"},
    {"fcclCommInitRankConfig", "config.allowSharedDevice 7", configShared, ARG, "allowSharedDevice is 7"},
    {"fcclCommInitRankConfig", "config.splitShare 2", configSplitShare, ARG, "config.splitShare is 2"},
    {"fcclCommInitRankConfig", "config never initialised", configGarbage, ARG, "FCCL_CONFIG_INITIALIZER"},
    {"fcclCommInitRankConfig", "config.minCTAs 0", configMinCtasZero, ARG, "config.minCTAs 0"},
    {"fcclCommInitRankConfig", "config.maxCTAs -5", configMaxCtasNegative, ARG, "maxCTAs -5"},
    {"fcclCommInitRankConfig", "config.minCTAs above maxCTAs", configMinAboveMax, ARG,
     "config.minCTAs 16 is above config.maxCTAs 8"},
    {"fcclCommInitAll", "NULL comms", initAllNull, ARG, "comms is NULL"},
    {"fcclCommInitAll", "ndev 0", initAllZero, ARG, "ndev 0 outside 1..64"},
    {"fcclCommInitAll", "ndev 65", initAllTooMany, ARG, "ndev 65 outside 1..64"},
    {"fcclCommInitFromEnv", "NULL comm", envNullComm, ARG, "comm is NULL"},
    {"fcclCommInitFromEnv", "no launcher variables", envNothing, USAGE, "no launcher variables"},
    {"fcclCommInitFromEnv", "RANK == WORLD_SIZE", envRankTooLarge, USAGE, "RANK=2 is not below WORLD_SIZE=2"},
    {"fcclCommInitFromEnv", "RANK not a number", envRankNotANumber, USAGE, "RANK=one is not an integer"},
    {"fcclCommInitFromEnv", "WORLD_SIZE 0", envSizeZero, USAGE, "WORLD_SIZE=0"},
    {"fcclCommInitFromEnv", "no FCCL_COMM_SECRET", envNoSecret, USAGE, "FCCL_COMM_SECRET is not set"},
    {"fcclCommInitFromEnv", "FCCL_COMM_SECRET too short", envShortSecret, USAGE, "FCCL_COMM_SECRET has 5 characters"},
    {"fcclCommInitFromEnv", "config.magic 0", envBadConfig, ARG, "FCCL_CONFIG_INITIALIZER"},
    {"fcclCommInitExternal", "NULL comm", externalNullComm, ARG, "comm is NULL"},
    {"fcclCommInitExternal", "NULL callbacks", externalNullCallbacks, ARG, "callbacks"},
    {"fcclCommInitExternal", "NULL allgather", externalNullAllgather, ARG, "allgather is NULL"},
    {"fcclCommInitExternal", "nranks 0", externalNranksZero, ARG, "nranks 0 outside"},
    {"fcclCommInitExternal", "rank 5 of 2", externalRankTooLarge, ARG, "rank 5 outside 0..1"},
    {"fcclCommInitExternal", "config.size 8", externalBadConfig, ARG, "config.size is 8"},
    {"fcclCommInitFromNccl", "NULL comm", ncclNullComm, ARG, "comm is NULL"},
    {"fcclCommInitFromNccl", "NULL ncclComm", ncclNullNccl, ARG, "ncclComm is NULL"},
    {"fcclCommDestroy", "NULL handle", destroyNull, ARG, "invalid communicator handle"},
    {"fcclCommDestroy", "a torn-down handle", destroyDead, ARG, "invalid communicator handle"},
    {"fcclCommDestroy", "destroyed twice (group member)", destroyTwice, ARG, "invalid communicator handle"},
    {"fcclCommAbort", "NULL handle", abortNull, ARG, "invalid communicator handle"},
    {"fcclCommAbort", "a torn-down handle", abortDead, ARG, "invalid communicator handle"},
    {"fcclCommAbort", "a destroyed group member", abortDeferred, ARG, "invalid communicator handle"},
    {"fcclCommGetAsyncError", "NULL handle", asyncNullComm, ARG, "invalid communicator handle"},
    {"fcclCommGetAsyncError", "a torn-down handle", asyncDead, ARG, "invalid communicator handle"},
    {"fcclCommGetAsyncError", "NULL asyncError", asyncNullOut, ARG, "asyncError is NULL"},
    {"fcclCommCount", "NULL handle", countNull, ARG, "invalid communicator handle"},
    {"fcclCommCount", "a destroyed group member", countDeferred, ARG, "invalid communicator handle"},
    {"fcclCommCount", "NULL count", countNullOut, ARG, "count is NULL"},
    {"fcclCommCuDevice", "a torn-down handle", deviceDead, ARG, "invalid communicator handle"},
    {"fcclCommCuDevice", "NULL device", deviceNullOut, ARG, "device is NULL"},
    {"fcclCommUserRank", "a torn-down handle", rankDead, ARG, "invalid communicator handle"},
    {"fcclCommUserRank", "NULL rank", rankNullOut, ARG, "rank is NULL"},
    {"fcclAllReduce", "NULL comm", allReduceNullComm, ARG, "invalid communicator handle"},
    {"fcclAllReduce", "a torn-down handle", allReduceDead, ARG, "invalid communicator handle"},
    {"fcclAllReduce", "a destroyed group member", allReduceDeferred, ARG, "invalid communicator handle"},
    {"fcclAllReduce", "datatype -1", allReduceTypeNegative, ARG, "unknown datatype -1"},
    {"fcclAllReduce", "datatype fcclNumTypes", allReduceTypeUnknown, ARG, "unknown datatype 11"},
    {"fcclAllReduce", "op -1", allReduceOpNegative, ARG, "unknown reduction op -1"},
    {"fcclAllReduce", "op fcclNumOps", allReduceOpUnknown, ARG, "unknown reduction op 5"},
    {"fcclAllReduce", "NULL sendbuf", allReduceNullSend, ARG, "sendbuf is NULL with count 4"},
    {"fcclAllReduce", "NULL recvbuf", allReduceNullRecv, ARG, "recvbuf is NULL with count 4"},
    {"fcclAllReduce", "sendbuf not aligned to its elements", allReduceMisaligned, ARG, "not aligned"},
    {"fcclAllReduce", "a count whose bytes overflow", allReduceOverflow, ARG, "overflows a size"},
    {"fcclAllReduce", "non-blocking init still running", allReducePending, USAGE, "has not finished"},
    {"fcclAllReduce", "init failed", allReduceFailed, USAGE, "its init failed"},
    {"fcclReduce", "NULL comm", reduceNullComm, ARG, "fcclReduce: invalid communicator handle"},
    {"fcclReduce", "root nranks", reduceRootOutside, ARG, "fcclReduce: root 2 outside 0..1"},
    {"fcclReduce", "root -1", reduceRootNegative, ARG, "root -1 outside 0..1"},
    {"fcclReduce", "NULL sendbuf", reduceNullSend, ARG, "sendbuf is NULL with count 4"},
    {"fcclReduce", "NULL recvbuf on the root", reduceRootNullRecv, ARG, "recvbuf is NULL with count 4"},
    {"fcclReduce", "datatype fcclNumTypes", reduceTypeUnknown, ARG, "unknown datatype 11"},
    {"fcclReduce", "datatype float8e4m3", reduceTypeFp8, ARG, "not supported by collectives"},
    {"fcclReduce", "op -1", reduceOpNegative, ARG, "unknown reduction op -1"},
    {"fcclReduce", "op fcclNumOps, never made", reduceOpUnmade, ARG, "fcclReduce: unknown reduction op 5"},
    {"fcclReduce", "sendbuf not aligned to its elements", reduceMisaligned, ARG, "not aligned"},
    {"fcclReduce", "non-blocking init still running", reducePending, USAGE, "has not finished"},
    {"fcclReduce", "NULL recvbuf off the root (fine: the state is what stops it)", reduceNoDevice, USAGE,
     "no device state"},
    {"fcclBcast", "NULL comm", bcastNullComm, ARG, "fcclBcast: invalid communicator handle"},
    {"fcclBcast", "NULL buff", bcastNullBuffer, ARG, "fcclBcast: recvbuf is NULL with count 4"},
    {"fcclBcast", "root nranks", bcastRootOutside, ARG, "fcclBcast: root 2 outside 0..1"},
    {"fcclBcast", "datatype -1", bcastTypeUnknown, ARG, "unknown datatype -1"},
    {"fcclBcast", "a torn-down handle", bcastDead, ARG, "invalid communicator handle"},
    {"fcclGather", "NULL comm", gatherNullComm, ARG, "fcclGather: invalid communicator handle"},
    {"fcclGather", "root 5 of 2", gatherRootOutside, ARG, "fcclGather: root 5 outside 0..1"},
    {"fcclGather", "NULL sendbuf", gatherNullSend, ARG, "sendbuf is NULL with count 2"},
    {"fcclGather", "NULL recvbuf on the root", gatherRootNullRecv, ARG, "recvbuf is NULL with count 2"},
    {"fcclGather", "a count whose gathered bytes overflow", gatherOverflow, ARG, "overflows a size"},
    {"fcclGather", "non-blocking init still running", gatherPending, USAGE, "has not finished"},
    {"fcclScatter", "NULL comm", scatterNullComm, ARG, "fcclScatter: invalid communicator handle"},
    {"fcclScatter", "root -2", scatterRootOutside, ARG, "fcclScatter: root -2 outside 0..1"},
    {"fcclScatter", "NULL recvbuf", scatterNullRecv, ARG, "recvbuf is NULL with count 2"},
    {"fcclScatter", "NULL sendbuf on the root", scatterRootNullSend, ARG, "sendbuf is NULL with count 2"},
    {"fcclScatter", "recvbuf not aligned to its elements", scatterMisaligned, ARG, "not aligned"},
    {"fcclScatter", "init failed", scatterFailed, USAGE, "its init failed"},
    {"fcclRedOpCreatePreMulSum", "NULL op", preMulNullOp, ARG, "op is NULL"},
    {"fcclRedOpCreatePreMulSum", "NULL scalar", preMulNullScalar, ARG, "scalar is NULL"},
    {"fcclRedOpCreatePreMulSum", "datatype fcclNumTypes", preMulTypeUnknown, ARG, "datatype 11"},
    {"fcclRedOpCreatePreMulSum", "datatype float8e4m3", preMulTypeFp8, ARG, "datatype 10"},
    {"fcclRedOpCreatePreMulSum", "residence 7", preMulResidence, ARG, "residence 7"},
    {"fcclRedOpCreatePreMulSum", "device scalar not aligned", preMulDeviceMisaligned, ARG, "not aligned"},
    {"fcclRedOpCreatePreMulSum", "host memory as a device scalar", preMulDeviceHostMemory, ARG, "scalar"},
    {"fcclRedOpCreatePreMulSum", "NULL comm", preMulNullComm, ARG, "invalid communicator handle"},
    {"fcclRedOpCreatePreMulSum", "non-blocking init still running", preMulPending, USAGE, "has not finished"},
    {"fcclRedOpCreatePreMulSum", "init failed (fcclTimeout)", preMulFailed, fcclTimeout, "failed earlier"},
    {"fcclRedOpCreatePreMulSum", "a finalized communicator", preMulFinalized, USAGE, "was finalized"},
    {"fcclRedOpDestroy", "a built-in op", redOpDestroyBuiltin, ARG, "a built-in op"},
    {"fcclRedOpDestroy", "an op never made", redOpDestroyUnmade, ARG, "not an op this communicator made"},
    {"fcclRedOpDestroy", "NULL comm", redOpDestroyNullComm, ARG, "invalid communicator handle"},
    {"fcclRedOpDestroy", "a torn-down handle", redOpDestroyDead, ARG, "invalid communicator handle"},
    {"fcclRedOpDestroy", "destroyed twice", preMulDestroyTwice, ARG, "not an op this communicator made"},
    {"fcclAllReduce", "a pre-multiplied sum of another datatype", preMulOtherType, ARG,
     "was made for float32, the call is of float16"},
    {"fcclAllReduce", "a pre-multiplied sum of another communicator", preMulOtherComm, ARG, "unknown reduction op"},
    {"fcclAllReduce", "a destroyed pre-multiplied sum", preMulDestroyed, ARG, "unknown reduction op 6"},
    {"fcclReduce", "a pre-multiplied sum of another datatype", preMulReduceOtherType, ARG,
     "fcclReduce: op 5 was made for float32, the call is of int64"},
    {"fcclReduceScatter", "a pre-multiplied sum of another datatype", preMulReduceScatterOtherType, ARG,
     "was made for float32"},
    {"fcclAllReduce", "a pre-multiplied sum, on a communicator without device state", preMulNoDevice, USAGE,
     "no device state"},
    {"fcclBarrier", "NULL comm", barrierNull, ARG, "invalid communicator handle"},
    {"fcclBarrier", "a destroyed group member", barrierDeferred, ARG, "invalid communicator handle"},
    {"fcclBarrier", "non-blocking init still running", barrierPending, USAGE, "has not finished"},
    {"fcclCommRegister", "NULL comm", registerNull, ARG, "invalid communicator handle"},
    {"fcclCommRegister", "a torn-down handle", registerDead, ARG, "invalid communicator handle"},
    {"fcclCommRegister", "non-blocking init still running", registerPending, USAGE, "has not finished"},
    {"fcclCommRegister", "init failed (fcclTimeout)", registerFailed, fcclTimeout, "failed earlier"},
    {"fcclCommDeregister", "NULL comm", deregisterNull, ARG, "invalid communicator handle"},
    {"fcclCommDeregister", "a destroyed group member", deregisterDeferred, ARG, "invalid communicator handle"},
    {"fcclCommDeregister", "non-blocking init still running", deregisterPending, USAGE, "has not finished"},
    {"fcclCommDeregister", "init failed (fcclTimeout)", deregisterFailed, fcclTimeout, "failed earlier"},
    {"fcclSend", "NULL comm", sendNullComm, ARG, "invalid communicator handle"},
    {"fcclCommShrink", "NULL comm", shrinkInvalid, ARG, "invalid communicator handle"},
    {"fcclCommShrink", "NULL newcomm", shrinkNullNew, ARG, "newcomm is NULL"},
    {"fcclCommShrink", "flags 7", shrinkFlags, ARG, "unknown flags 7"},
    {"fcclCommShrink", "excludeCount nranks", shrinkCount, ARG, "excludeCount 2 outside 0..1"},
    {"fcclCommShrink", "NULL excludeRanks", shrinkNullList, ARG, "excludeRanks is NULL with excludeCount 1"},
    {"fcclCommShrink", "excluded rank nranks", shrinkRankOutside, ARG, "excluded rank 2 outside 0..1"},
    {"fcclCommShrink", "this rank excluded", shrinkSelf, ARG, "rank 1 excludes itself"},
    {"fcclCommShrink", "non-blocking init still running", shrinkPending, USAGE, "has not finished"},
    {"fcclCommShrink", "no peers' information", shrinkNoPeers, USAGE, "has not finished"},
    {"fcclSend", "peer nranks", sendPeerOutside, ARG, "peer 2 outside 0..1"},
    {"fcclSend", "peer -1", sendPeerNegative, ARG, "peer -1 outside 0..1"},
    {"fcclSend", "NULL sendbuf", sendNullBuffer, ARG, "sendbuf is NULL with count 4"},
    {"fcclSend", "datatype fcclNumTypes", sendTypeUnknown, ARG, "unknown datatype 11"},
    {"fcclSend", "no NCCL communicator", sendNoNccl, USAGE, "has no NCCL communicator"},
    {"fcclSend", "non-blocking init still running", sendPending, USAGE, "has not finished"},
    {"fcclRecv", "NULL recvbuf", recvNullBuffer, ARG, "recvbuf is NULL with count 4"},
    {"fcclRecv", "a torn-down handle", recvDead, ARG, "invalid communicator handle"},
    {"fcclAllToAll", "overlapping buffers", allToAllOverlap, ARG, "overlap"},
    {"fcclAllToAll", "NULL recvbuf", allToAllNullRecv, ARG, "recvbuf is NULL with count 2"},
    {"fcclAlltoAll", "NULL comm", alltoAllNullComm, ARG, "invalid communicator handle"},
    {"fcclAlltoAll", "a finalized communicator", alltoAllFinalized, USAGE, "was finalized"},
    {"fcclAllReduce", "a finalized communicator", allReduceFinalized, USAGE, "was finalized"},
    {"fcclReduce", "a finalized communicator", reduceFinalized, USAGE, "was finalized"},
    {"fcclGather", "a finalized communicator", gatherFinalized, USAGE, "was finalized"},
    {"fcclCommRegister", "a finalized communicator", registerFinalized, USAGE, "was finalized"},
    {"fcclCommSplit", "NULL comm", splitNull, ARG, "invalid communicator handle"},
    {"fcclCommSplit", "a torn-down handle", splitDead, ARG, "invalid communicator handle"},
    {"fcclCommSplit", "a destroyed group member", splitDeferred, ARG, "invalid communicator handle"},
    {"fcclCommSplit", "NULL newcomm", splitNullNew, ARG, "newcomm is NULL"},
    {"fcclCommSplit", "color -2", splitColorNegative, ARG, "color -2 is negative"},
    {"fcclCommSplit", "color INT32_MIN", splitColorMin, ARG, "FCCL_SPLIT_NOCOLOR (-1)"},
    {"fcclCommSplit", "config.magic 0", splitConfigMagic, ARG, "FCCL_CONFIG_INITIALIZER"},
    {"fcclCommSplit", "config.splitShare 7", splitConfigShare, ARG, "config.splitShare is 7"},
    {"fcclCommSplit", "config.maxCTAs 0", splitConfigCtas, ARG, "maxCTAs 0"},
    {"fcclCommSplit", "non-blocking init still running", splitPending, USAGE, "has not finished"},
    {"fcclCommSplit", "init failed (fcclTimeout)", splitFailed, fcclTimeout, "failed earlier"},
    {"fcclCommSplit", "a finalized communicator", splitFinalized, USAGE, "was finalized"},
    {"fcclCommSplit", "no peers' information", splitNoPeers, USAGE, "init has not finished"},
    {"fcclCommFinalize", "NULL comm", finalizeNull, ARG, "invalid communicator handle"},
    {"fcclCommFinalize", "a torn-down handle", finalizeDead, ARG, "invalid communicator handle"},
    {"fcclCommFinalize", "a destroyed group member", finalizeDeferred, ARG, "invalid communicator handle"},
    {"fcclCommFinalize", "non-blocking init still running", finalizePending, USAGE, "has not finished"},
    {"fcclCommFinalize", "init failed (fcclTimeout)", finalizeFailed, fcclTimeout, "failed earlier"},
    {"fcclCommFinalize", "finalized twice", finalizeTwice, USAGE, "was finalized"},
    {"fcclCommFinalize", "no bootstrap", finalizeNoPeers, USAGE, "init has not finished"},
    {"fcclGroupEnd", "no group started", groupEndUnstarted, USAGE, "fcclGroupEnd"},
    {"fcclCommGetPath", "NULL path", pathNullOut, ARG, "path is NULL"},
    {"fcclCommGetPath", "a torn-down handle", pathDead, ARG, "invalid communicator handle"},
    {"fcclCommGetPath", "non-blocking init still running", pathPending, USAGE, "has not finished"},
    {"fcclMemAlloc", "NULL ptr", memAllocNull, ARG, "ptr is NULL"},
    {"fcclMemAlloc", "size 0", memAllocZero, ARG, "size is 0"},
    {"fcclMemFree", "a pointer fcclMemAlloc did not return", memFreeForeign, ARG, "did not come from fcclMemAlloc"},
    {"fcclMemFree", "a wild pointer", memFreeWild, ARG, "did not come from fcclMemAlloc"},
    {"fcclCommGetMemStats", "NULL stats", memStatsNull, ARG, "stats is NULL"},
    {"fcclCommGetMemStats", "stats->size 0", memStatsSizeZero, ARG, "stats->size is 0"},
    {"fcclCommGetMemStats", "a torn-down handle", memStatsDead, ARG, "invalid communicator handle"},
};
#undef ARG
#undef USAGE

/* Set in a child of fork(): the parent's communicators are refused there (fcclInvalidUsage, "created by a parent"),
 * before any other check. */
static int inForkedChild;

static int refusedAsParents(fcclResult_t res, const char* text) {
  return inForkedChild && res == fcclInvalidUsage && strstr(text, "created by a parent") != NULL;
}

/* The handles answer as they did before the case: nothing was written to them, and the live one still works. */
static void expectHandlesIntact(const char* where) {
  int value = -1;
  EXPECT_MSG(fcclCommCount(fx.live, &value) == fcclSuccess && value == 2, "%s: the live handle no longer answers",
             where);
  EXPECT_MSG(fcclCommUserRank(fx.live, &value) == fcclSuccess && value == 1, "%s: the live handle's rank changed",
             where);
  fcclResult_t state = fcclInternalError;
  if (inForkedChild) {
    EXPECT_MSG(fcclCommGetAsyncError(fx.pending, &state) == fcclInvalidUsage, "%s: a parent's handle answered",
               where);
    EXPECT_MSG(fx.pending->asyncError == fcclInProgress && fx.failed->asyncError == fcclTimeout,
               "%s: a parent's handle changed", where);
  } else {
    EXPECT_MSG(fcclCommGetAsyncError(fx.pending, &state) == fcclSuccess && state == fcclInProgress,
               "%s: the pending handle's state changed to %d", where, state);
    EXPECT_MSG(fcclCommGetAsyncError(fx.failed, &state) == fcclSuccess && state == fcclTimeout,
               "%s: the failed handle's state changed to %d", where, state);
  }
  EXPECT_MSG(fx.live->asyncError == fcclSuccess && fx.live->magic == FCCL_COMM_MAGIC, "%s: the live handle changed",
             where);
  EXPECT_MSG(fx.dead->magic == 0 && fx.deferred->magic == FCCL_COMM_MAGIC_DEFERRED, "%s: a stale handle changed",
             where);
  EXPECT_MSG(fx.finalized->finalized == 2 && fx.finalized->asyncError == fcclSuccess && fx.live->finalized == 0 &&
                 fx.live->splitActive == 0,
             "%s: a split or finalize changed a handle", where);
  EXPECT_MSG(fx.out == SENTINEL, "%s: an output was written on failure", where);
}

/* Runs every case; returns how many failed. */
static int runTable(const char* where) {
  int before = testFailed;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const struct badCase* c = &cases[i];
    fx.out = SENTINEL;
    fcclResult_t res = c->run();
    char text[FCCL_LAST_ERROR_MAX];
    snprintf(text, sizeof(text), "%s", fcclGetLastError(NULL));
    const int refused = refusedAsParents(res, text);
    EXPECT_MSG(res == c->expected || refused, "%s: %s with %s returned %d (%s), expected %d: %s", where, c->call,
               c->wrong, res, fcclGetErrorString(res), c->expected, text);
    EXPECT_MSG(text[0] != '\0', "%s: %s with %s left no message", where, c->call, c->wrong);
    EXPECT_MSG(strstr(text, c->words) != NULL || refused, "%s: %s with %s: \"%s\" does not say \"%s\"", where,
               c->call, c->wrong, text, c->words);
    char label[160];
    snprintf(label, sizeof(label), "%s: after %s with %s", where, c->call, c->wrong);
    expectHandlesIntact(label);
  }
  /* The calls that return text: never NULL or empty, whatever they are given. */
  const int codes[] = {-1, fcclNumResults, 1000, fcclInProgress};
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
    const char* name = fcclGetErrorString((fcclResult_t)codes[i]);
    EXPECT_MSG(name != NULL && name[0] != '\0', "%s: fcclGetErrorString(%d) is empty", where, codes[i]);
  }
  EXPECT_STR_CONTAINS(fcclGetLastError(fx.dead), "invalid communicator handle");
  EXPECT_STR_CONTAINS(fcclGetLastError(fx.deferred), "invalid communicator handle");
  /* A NULL log callback restores the default sink: it is not an error. */
  EXPECT_EQ_INT(fcclSetLogCallback(NULL, NULL), fcclSuccess);
  return testFailed - before;
}

/* One rank joins the id made before the bad calls: none of them touched its root. */
static void expectIdStillServes(const fcclUniqueId* id, const char* where) {
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(id, 0, 1, 10000, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "%s: the unique id no longer brings its rank in: %s", where, fcclGetLastError(NULL));
  fcclBootstrapDestroy(b);
}

int main(void) {
  const char* launchNames[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                               "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "FCCL_COMM_ID", "FCCL_COMM_SECRET",
                               "FCCL_SOCKET_IFNAME"};
  for (size_t i = 0; i < sizeof(launchNames) / sizeof(launchNames[0]); i++) unsetenv(launchNames[i]);
  fcclParamResetForTest();
  if (fcclGetUniqueId(&fx.id) != fcclSuccess) {
    fprintf(stderr, "fcclGetUniqueId failed: %s\n", fcclGetLastError(NULL));
    return 1;
  }
  fx.live = fakeComm(FCCL_COMM_MAGIC, fcclSuccess);
  fx.pending = fakeComm(FCCL_COMM_MAGIC, fcclInProgress);
  fx.failed = fakeComm(FCCL_COMM_MAGIC, fcclTimeout);
  fx.dead = fakeComm(0, fcclSuccess);
  fx.deferred = fakeComm(FCCL_COMM_MAGIC_DEFERRED, fcclSuccess);
  fx.finalized = fakeComm(FCCL_COMM_MAGIC, fcclSuccess);
  fx.finalized->finalized = 2;
  /* A communicator of its own with two ops of float32 (the first stays, the second is destroyed): the first op is
   * fcclNumOps, the second fcclNumOps + 1. */
  fx.ops = fakeComm(FCCL_COMM_MAGIC, fcclSuccess);
  fcclRedOp_t made = fcclSum, gone = fcclSum;
  float scalar = 0.25f;
  EXPECT_EQ_INT(fcclRedOpCreatePreMulSum(&made, &scalar, fcclFloat32, fcclScalarHostImmediate, fx.ops), fcclSuccess);
  EXPECT_EQ_INT(fcclRedOpCreatePreMulSum(&gone, &scalar, fcclFloat32, fcclScalarHostImmediate, fx.ops), fcclSuccess);
  EXPECT_EQ_INT(made, fcclNumOps);
  EXPECT_EQ_INT(gone, fcclNumOps + 1);
  EXPECT_EQ_INT(fcclRedOpDestroy(gone, fx.ops), fcclSuccess);
  fx.opsOp = made;
  fx.opsGone = gone;

  int failed = runTable("here");
  printf("%zu bad calls: %d failed checks\n", sizeof(cases) / sizeof(cases[0]), failed);

  /* The same calls from a child of fork() (a data-loader worker, say), which can also make an id of its own. */
  /* Before the fork, which it leaves with one thread: a thread starting during fork() can hold the allocator lock of
   * GCC 12's AddressSanitizer, which takes none across fork(), and the child's first thread then waits forever. */
  expectIdStillServes(&fx.id, "here");
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  if (child == 0) {
    testPassed = testFailed = 0;
    inForkedChild = 1;
    int childFailed = runTable("in a forked child");
    /* A parent's communicator is refused before anything else, so that nothing of the parent's is touched. */
    EXPECT_EQ_INT(fcclAllReduce(NULL, NULL, 0, fcclFloat32, fcclSum, fx.live, NULL), fcclInvalidUsage);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "created by a parent");
    EXPECT_EQ_INT(fcclCommDestroy(fx.live), fcclInvalidUsage);
    EXPECT_EQ_INT(fx.live->magic, FCCL_COMM_MAGIC);
    fcclUniqueId own;
    EXPECT_EQ_INT(fcclGetUniqueId(&own), fcclSuccess);
    expectIdStillServes(&own, "in a forked child");
    fflush(stdout);
    _exit(childFailed != 0 || testFailed != 0);
  }
  int status = 0;
  EXPECT(child > 0 && waitpid(child, &status, 0) == child);
  EXPECT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the table failed in a forked child (status %d)", status);
  printf("the same calls in a forked child: %s\n", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "ok" : "FAILED");

  /* A destroyed op's value is given to the next op made. */
  fcclRedOp_t again = fcclSum;
  double scalar2 = 2.0; /* a host scalar of the op's datatype: 8 bytes are read */
  EXPECT_EQ_INT(fcclRedOpCreatePreMulSum(&again, &scalar2, fcclFloat64, fcclScalarHostImmediate, fx.ops), fcclSuccess);
  EXPECT_EQ_INT(again, fx.opsGone);
  EXPECT_EQ_INT(fcclRedOpDestroy(again, fx.ops), fcclSuccess);
  EXPECT_EQ_INT(fcclRedOpDestroy((fcclRedOp_t)fx.opsOp, fx.ops), fcclSuccess);
  fcclRedOpFreeAll(fx.ops);
  struct fcclComm* handles[] = {fx.live, fx.pending, fx.failed, fx.dead, fx.deferred, fx.finalized, fx.ops};
  for (size_t i = 0; i < sizeof(handles) / sizeof(handles[0]); i++) freeComm(handles[i]);
  return testSummary("bad_input");
}
