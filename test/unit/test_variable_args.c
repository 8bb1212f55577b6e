/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bad input to fcclAllGatherV, fcclReduceScatterV, fcclAllGatherVDevice and fcclReduceScatterVDevice without a GPU:
 * one table, one row per case (the call, what is wrong with it, the documented result, words its message must
 * hold). Each row must return its result with a message in fcclGetLastError and on the communicator, and leave the
 * handles as they were. The handles are communicator structs set up by hand (test_bad_input.c explains why): rank 1
 * of 2 whose init finished (no device state: there is no GPU, so a call whose arguments pass stops at
 * "no device state", which shows that the arguments passed), one whose init still runs, one whose init failed and
 * one torn down. The GPU-backed cases (buffers of the wrong kind, counts in device memory that do not fit, ranks out
 * of step) are in test/gpu/test_variable.c.
 */
#include "check.h"
#include "comm.h"
#include "fccl.h"
#include "test.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static struct fcclComm* live;    /* init finished, no device state */
static struct fcclComm* pending; /* a non-blocking init still running */
static struct fcclComm* failed;  /* init failed with fcclTimeout */
static struct fcclComm* dead;    /* torn down: magic cleared, memory kept by this test */

static float buffer[64];        /* stands for device memory: never reached */
static int64_t deviceCounts[4]; /* likewise */

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

#define CASE(name) static fcclResult_t name(void)

static const size_t kCounts[2] = {3, 5};    /* rank 1 sends 5 and receives 8 in the all-gather */
static const size_t kEmptyMine[2] = {4, 0}; /* rank 1's block is empty */
static const size_t kNone[2] = {0, 0};

CASE(agNullComm) { return fcclAllGatherV(buffer, buffer, kCounts, fcclFloat32, NULL, NULL); }
CASE(agDead) { return fcclAllGatherV(buffer, buffer, kCounts, fcclFloat32, dead, NULL); }
CASE(agNullCounts) { return fcclAllGatherV(buffer, buffer + 8, NULL, fcclFloat32, live, NULL); }
CASE(agTypeNegative) { return fcclAllGatherV(buffer, buffer + 8, kCounts, (fcclDataType_t)-1, live, NULL); }
CASE(agTypeUnknown) { return fcclAllGatherV(buffer, buffer + 8, kCounts, fcclNumTypes, live, NULL); }
CASE(agTypeFp8) { return fcclAllGatherV(buffer, buffer + 8, kCounts, fcclFloat8e4m3, live, NULL); }
CASE(agOverflow) {
  const size_t huge[2] = {SIZE_MAX / 6, SIZE_MAX / 6}; /* each within a size of floats, not their sum */
  return fcclAllGatherV(buffer, buffer + 8, huge, fcclFloat32, live, NULL);
}
CASE(agOneOverflows) {
  const size_t huge[2] = {1, SIZE_MAX / 2};
  return fcclAllGatherV(buffer, buffer + 8, huge, fcclInt64, live, NULL);
}
CASE(agNullSend) { return fcclAllGatherV(NULL, buffer + 8, kCounts, fcclFloat32, live, NULL); }
CASE(agNullRecv) { return fcclAllGatherV(buffer, NULL, kCounts, fcclFloat32, live, NULL); }
CASE(agMisalignedSend) { return fcclAllGatherV((char*)buffer + 2, buffer + 8, kCounts, fcclFloat32, live, NULL); }
CASE(agMisalignedRecv) { return fcclAllGatherV(buffer, (char*)buffer + 36, kCounts, fcclFloat64, live, NULL); }
/* Arguments that pass: an empty block of this rank with a NULL sendbuf, all counts 0 with NULL buffers. The fake
 * has no device state, which is where they stop. */
CASE(agEmptyNullSend) { return fcclAllGatherV(NULL, buffer, kEmptyMine, fcclFloat32, live, NULL); }
CASE(agNoneNull) { return fcclAllGatherV(NULL, NULL, kNone, fcclBfloat16, live, NULL); }
CASE(agPending) { return fcclAllGatherV(buffer, buffer + 8, kCounts, fcclFloat32, pending, NULL); }
CASE(agFailed) { return fcclAllGatherV(buffer, buffer + 8, kCounts, fcclFloat32, failed, NULL); }

CASE(rsNullComm) { return fcclReduceScatterV(buffer, buffer, kCounts, fcclFloat32, fcclSum, NULL, NULL); }
CASE(rsNullCounts) { return fcclReduceScatterV(buffer, buffer + 8, NULL, fcclFloat32, fcclSum, live, NULL); }
CASE(rsOpNegative) { return fcclReduceScatterV(buffer, buffer + 8, kCounts, fcclFloat32, (fcclRedOp_t)-1, live, NULL); }
CASE(rsOpUnknown) { return fcclReduceScatterV(buffer, buffer + 8, kCounts, fcclFloat32, fcclNumOps, live, NULL); }
CASE(rsTypeUnknown) { return fcclReduceScatterV(buffer, buffer + 8, kCounts, (fcclDataType_t)77, fcclSum, live, NULL); }
CASE(rsNullSend) { return fcclReduceScatterV(NULL, buffer, kCounts, fcclFloat32, fcclSum, live, NULL); }
CASE(rsNullRecv) { return fcclReduceScatterV(buffer, NULL, kCounts, fcclFloat32, fcclMax, live, NULL); }
CASE(rsMisaligned) { return fcclReduceScatterV(buffer, (char*)buffer + 1, kCounts, fcclBfloat16, fcclSum, live, NULL); }
CASE(rsEmptyNullRecv) { return fcclReduceScatterV(buffer, NULL, kEmptyMine, fcclFloat32, fcclSum, live, NULL); }
CASE(rsPending) { return fcclReduceScatterV(buffer, buffer + 8, kCounts, fcclInt8, fcclMin, pending, NULL); }

CASE(agdNullCounts) { return fcclAllGatherVDevice(buffer, buffer + 8, NULL, 8, 16, fcclFloat32, live, NULL); }
CASE(agdMisalignedCounts) {
  return fcclAllGatherVDevice(buffer, buffer + 8, (const int64_t*)((char*)deviceCounts + 4), 8, 16, fcclFloat32, live,
                              NULL);
}
CASE(agdCapacityOverflow) {
  return fcclAllGatherVDevice(buffer, buffer + 8, deviceCounts, SIZE_MAX / 4, 16, fcclFloat32, live, NULL);
}
CASE(agdTotalOverflow) {
  return fcclAllGatherVDevice(buffer, buffer + 8, deviceCounts, 8, SIZE_MAX / 2, fcclFloat32, live, NULL);
}
CASE(agdNullSend) { return fcclAllGatherVDevice(NULL, buffer + 8, deviceCounts, 8, 16, fcclFloat32, live, NULL); }
CASE(agdNullRecv) { return fcclAllGatherVDevice(buffer, NULL, deviceCounts, 8, 16, fcclFloat32, live, NULL); }
CASE(agdZeroCapacities) { return fcclAllGatherVDevice(NULL, NULL, deviceCounts, 0, 0, fcclFloat32, live, NULL); }
CASE(agdTypeFp8) { return fcclAllGatherVDevice(buffer, buffer + 8, deviceCounts, 8, 16, fcclFloat8e4m3, live, NULL); }
CASE(agdPending) { return fcclAllGatherVDevice(buffer, buffer + 8, deviceCounts, 8, 16, fcclFloat32, pending, NULL); }
CASE(rsdNullCounts) {
  return fcclReduceScatterVDevice(buffer, buffer + 8, NULL, 16, 8, fcclFloat32, fcclSum, live, NULL);
}
CASE(rsdOpUnknown) {
  return fcclReduceScatterVDevice(buffer, buffer + 8, deviceCounts, 16, 8, fcclFloat32, (fcclRedOp_t)9, live, NULL);
}
CASE(rsdCapacityOverflow) {
  /* The reduce-scatter's per-block capacity is recvcapacity's: nranks of them must fit a size. */
  return fcclReduceScatterVDevice(buffer, buffer + 8, deviceCounts, 16, SIZE_MAX / 4, fcclFloat32, fcclSum, live, NULL);
}
CASE(rsdNullRecv) {
  return fcclReduceScatterVDevice(buffer, NULL, deviceCounts, 16, 8, fcclFloat32, fcclSum, live, NULL);
}
CASE(agdOverlap) { return fcclAllGatherVDevice(buffer + 16, buffer, deviceCounts, 8, 20, fcclFloat32, live, NULL); }
CASE(agdInPlace) { return fcclAllGatherVDevice(buffer + 8, buffer, deviceCounts, 8, 16, fcclFloat32, live, NULL); }
CASE(rsdPasses) {
  return fcclReduceScatterVDevice(buffer, buffer + 16, deviceCounts, 16, 8, fcclFloat32, fcclSum, live, NULL);
}
CASE(rsdInPlace) {
  return fcclReduceScatterVDevice(buffer, buffer + 8, deviceCounts, 16, 8, fcclFloat32, fcclSum, live, NULL);
}
CASE(rsdDead) {
  return fcclReduceScatterVDevice(buffer, buffer + 8, deviceCounts, 16, 8, fcclFloat32, fcclSum, dead, NULL);
}

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
    {"fcclAllGatherV", "NULL comm", agNullComm, ARG, "invalid communicator handle"},
    {"fcclAllGatherV", "torn-down comm", agDead, ARG, "invalid communicator handle"},
    {"fcclAllGatherV", "NULL counts", agNullCounts, ARG, "counts is NULL"},
    {"fcclAllGatherV", "datatype -1", agTypeNegative, ARG, "unknown datatype -1"},
    {"fcclAllGatherV", "datatype fcclNumTypes", agTypeUnknown, ARG, "unknown datatype"},
    {"fcclAllGatherV", "datatype float8e4m3", agTypeFp8, ARG, "float8e4m3 is not supported"},
    {"fcclAllGatherV", "counts whose sum overflows", agOverflow, ARG, "overflow a size"},
    {"fcclAllGatherV", "a count that overflows", agOneOverflows, ARG, "counts[1]"},
    {"fcclAllGatherV", "NULL sendbuf with a block", agNullSend, ARG, "sendbuf is NULL"},
    {"fcclAllGatherV", "NULL recvbuf with blocks", agNullRecv, ARG, "recvbuf is NULL"},
    {"fcclAllGatherV", "misaligned sendbuf", agMisalignedSend, ARG, "sendbuf"},
    {"fcclAllGatherV", "misaligned recvbuf", agMisalignedRecv, ARG, "not aligned"},
    {"fcclAllGatherV", "NULL sendbuf, empty block (passes)", agEmptyNullSend, USAGE, "no device state"},
    {"fcclAllGatherV", "NULL buffers, all counts 0 (passes)", agNoneNull, USAGE, "no device state"},
    {"fcclAllGatherV", "init still running", agPending, USAGE, "has not finished"},
    {"fcclAllGatherV", "init failed", agFailed, USAGE, "its init failed"},
    {"fcclReduceScatterV", "NULL comm", rsNullComm, ARG, "invalid communicator handle"},
    {"fcclReduceScatterV", "NULL counts", rsNullCounts, ARG, "counts is NULL"},
    {"fcclReduceScatterV", "op -1", rsOpNegative, ARG, "unknown reduction op -1"},
    {"fcclReduceScatterV", "op fcclNumOps", rsOpUnknown, ARG, "pre-multiplied sums"},
    {"fcclReduceScatterV", "datatype 77", rsTypeUnknown, ARG, "unknown datatype 77"},
    {"fcclReduceScatterV", "NULL sendbuf with blocks", rsNullSend, ARG, "sendbuf is NULL"},
    {"fcclReduceScatterV", "NULL recvbuf with a block", rsNullRecv, ARG, "recvbuf is NULL"},
    {"fcclReduceScatterV", "misaligned recvbuf", rsMisaligned, ARG, "not aligned"},
    {"fcclReduceScatterV", "NULL recvbuf, empty block (passes)", rsEmptyNullRecv, USAGE, "no device state"},
    {"fcclReduceScatterV", "init still running", rsPending, USAGE, "has not finished"},
    {"fcclAllGatherVDevice", "NULL counts", agdNullCounts, ARG, "counts is NULL"},
    {"fcclAllGatherVDevice", "counts not 8-byte aligned", agdMisalignedCounts, ARG, "int64 elements"},
    {"fcclAllGatherVDevice", "sendcapacity overflows", agdCapacityOverflow, ARG, "overflows a size"},
    {"fcclAllGatherVDevice", "recvcapacity overflows", agdTotalOverflow, ARG, "overflows a size"},
    {"fcclAllGatherVDevice", "NULL sendbuf with a capacity", agdNullSend, ARG, "sendbuf is NULL"},
    {"fcclAllGatherVDevice", "NULL recvbuf with a capacity", agdNullRecv, ARG, "recvbuf is NULL"},
    {"fcclAllGatherVDevice", "NULL buffers, capacities 0 (passes)", agdZeroCapacities, USAGE, "no device state"},
    {"fcclAllGatherVDevice", "datatype float8e4m3", agdTypeFp8, ARG, "float8e4m3"},
    {"fcclAllGatherVDevice", "init still running", agdPending, USAGE, "has not finished"},
    {"fcclReduceScatterVDevice", "NULL counts", rsdNullCounts, ARG, "counts is NULL"},
    {"fcclReduceScatterVDevice", "op 9", rsdOpUnknown, ARG, "reduction op 9 is not a built-in op"},
    {"fcclReduceScatterVDevice", "recvcapacity x nranks overflows", rsdCapacityOverflow, ARG, "overflows a size"},
    {"fcclReduceScatterVDevice", "NULL recvbuf with a capacity", rsdNullRecv, ARG, "recvbuf is NULL"},
    {"fcclReduceScatterVDevice", "torn-down comm", rsdDead, ARG, "invalid communicator handle"},
    {"fcclAllGatherVDevice", "sendbuf inside recvbuf", agdOverlap, ARG, "in place is for host counts only"},
    {"fcclAllGatherVDevice", "in place at rank 1's host offset", agdInPlace, ARG, "overlaps recvbuf"},
    {"fcclReduceScatterVDevice", "recvbuf inside sendbuf", rsdInPlace, ARG, "in place is for host counts only"},
    {"fcclReduceScatterVDevice", "disjoint buffers (passes)", rsdPasses, USAGE, "no device state"},
};

int main(void) {
  live = fakeComm(FCCL_COMM_MAGIC, fcclSuccess);
  pending = fakeComm(FCCL_COMM_MAGIC, fcclInProgress);
  failed = fakeComm(FCCL_COMM_MAGIC, fcclTimeout);
  dead = fakeComm(0, fcclSuccess);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const struct badCase* c = &cases[i];
    const fcclResult_t res = c->run();
    EXPECT_MSG(res == c->expected, "%s, %s: returned %s, want %s", c->call, c->wrong, fcclGetErrorString(res),
               fcclGetErrorString(c->expected));
    const char* message = fcclGetLastError(NULL);
    EXPECT_MSG(message != NULL && strstr(message, c->words) != NULL, "%s, %s: message \"%s\" lacks \"%s\"", c->call,
               c->wrong, message ? message : "(null)", c->words);
    EXPECT_MSG(strstr(message, c->call) != NULL, "%s, %s: message \"%s\" does not name the call", c->call, c->wrong,
               message);
    /* The handles are as they were. */
    EXPECT(live->magic == FCCL_COMM_MAGIC && live->asyncError == fcclSuccess);
    EXPECT(pending->asyncError == fcclInProgress && failed->asyncError == fcclTimeout && dead->magic == 0);
  }
  /* A failure with a live handle is also the communicator's last error. */
  EXPECT_EQ_INT(agNullCounts(), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(live), "counts is NULL");
  freeComm(live);
  freeComm(pending);
  freeComm(failed);
  freeComm(dead);
  return testSummary("variable_args");
}
