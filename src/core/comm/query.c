/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a communicator says of itself: its asynchronous state (fcclCommGetAsyncError; fcclCommAsyncState for the rest
 * of core), its path, its rank count, device and rank.
 */
#include "check.h"
#include "comm.h"
#include "device_state.h"
#include "hier.h"
#include "nccl_path.h"

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

fcclResult_t fcclCommAsyncState(struct fcclComm* comm) {
  fcclResult_t state = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  /* collectives: an error a kernel recorded (spin timeout), described once */
  if (state == fcclSuccess) state = fcclDeviceAsyncError(comm);
  /* NCCL's asynchronous error (a peer lost, a failed kernel), as fccl's */
  if (state == fcclSuccess) state = fcclNcclAsyncError(comm);
  /* hierarchical: the host communicator's state and the rail's NCCL error */
  if (state == fcclSuccess) state = fcclHierAsyncError(comm);
  return state;
}

FCCL_API fcclResult_t fcclCommGetAsyncError(fcclComm_t comm, fcclResult_t* asyncError) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommGetAsyncError: invalid communicator handle %p", (void*)comm);
  FCCL_REQUIRE(asyncError != NULL, "fcclCommGetAsyncError: asyncError is NULL");
  FCCLCHECK(fcclCommCheckOwner(comm, "fcclCommGetAsyncError"));
  *asyncError = fcclCommAsyncState(comm);
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclCommGetPath(const fcclComm_t comm, fcclPath_t* path, const char** reason) {
  fcclClearError();
  FCCL_REQUIRE(path != NULL, "fcclCommGetPath: path is NULL");
  FCCLCHECK(fcclCommEnsureReady(comm, "fcclCommGetPath"));
  *path = comm->path;
  if (reason) *reason = comm->pathReason;
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclCommCount(const fcclComm_t comm, int* count) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommCount: invalid communicator handle %p", (void*)comm);
  FCCL_REQUIRE(count != NULL, "fcclCommCount: count is NULL");
  *count = __atomic_load_n(&comm->nranks, __ATOMIC_ACQUIRE); /* a split's child learns it while its init runs */
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclCommCuDevice(const fcclComm_t comm, int* device) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommCuDevice: invalid communicator handle %p", (void*)comm);
  FCCL_REQUIRE(device != NULL, "fcclCommCuDevice: device is NULL");
  *device = comm->cudaDev;
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclCommUserRank(const fcclComm_t comm, int* rank) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommUserRank: invalid communicator handle %p", (void*)comm);
  FCCL_REQUIRE(rank != NULL, "fcclCommUserRank: rank is NULL");
  *rank = __atomic_load_n(&comm->rank, __ATOMIC_ACQUIRE);
  return fcclSuccess;
}
