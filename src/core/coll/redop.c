/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclRedOpCreatePreMulSum and fcclRedOpDestroy: a communicator's pre-multiplied sums (redop.h). Op i of a
 * communicator is the value fcclNumOps + i; a destroyed op's value is given to the next op made, as NCCL does. The
 * tables of every communicator share one lock: they are touched by the two calls and by the calls that take such an
 * op, never on a hot path of the built-in ops.
 */
#include "redop.h"

#include "check.h"
#include "comm.h"
#include "datatype.h"
#include "debug.h"
#include "device.h"
#include "nccl_path.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_COLL

/* More ops than any program makes; it bounds the table and keeps every value an int. */
#define FCCL_MAX_REDOPS (1 << 20)

struct redOp {
  int live;
  fcclDataType_t datatype;
  fcclScalarResidence_t residence;
  uint64_t scalar;    /* fcclScalarHostImmediate: the value's bits, zero-extended */
  uint64_t scalarPtr; /* fcclScalarDevice: its address */
  int ncclOp;         /* -1: none */
};

struct fcclRedOps {
  struct redOp* ops;
  int count; /* ops [0, count) were made at some time */
  int capacity;
};

static pthread_mutex_t tablesLock = PTHREAD_MUTEX_INITIALIZER;

/* A device scalar must be memory of the communicator's device (or managed memory), which its kernels can read. */
static fcclResult_t checkDeviceScalar(const struct fcclComm* comm, const void* scalar, const char* caller) {
  struct cudaPointerAttributes attributes;
  cudaError_t err = cudaPointerGetAttributes(&attributes, scalar);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: scalar %p is not a CUDA pointer (%s)", caller, scalar,
                      cudaGetErrorName(err));
  }
  if (attributes.type == cudaMemoryTypeManaged) return fcclSuccess;
  if (attributes.type != cudaMemoryTypeDevice || attributes.device != comm->cudaDev)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: scalar %p of fcclScalarDevice is not device memory of the communicator's device %d", caller,
                      scalar, comm->cudaDev);
  return fcclSuccess;
}

/* NCCL's op calls run with the communicator's device current, as its collectives do; *saved is put back after. */
static fcclResult_t enterDevice(const struct fcclComm* comm, int* saved) {
  CUDACHECK(cudaGetDevice(saved));
  if (*saved != comm->cudaDev) CUDACHECK(cudaSetDevice(comm->cudaDev));
  return fcclSuccess;
}

static void leaveDevice(const struct fcclComm* comm, int saved) {
  if (saved >= 0 && saved != comm->cudaDev) CUDACHECKIGNORE(cudaSetDevice(saved));
}

/* The live op of comm with value op, or NULL; under tablesLock. */
static struct redOp* findOp(struct fcclComm* comm, fcclRedOp_t op) {
  const int64_t index = (int64_t)op - fcclNumOps;
  struct fcclRedOps* table = comm->redOps;
  if (!table || index < 0 || index >= table->count || !table->ops[index].live) return NULL;
  return &table->ops[index];
}

/* A free entry of comm's table (grown as needed) and its index; under tablesLock. */
static fcclResult_t freeEntry(struct fcclComm* comm, int* index) {
  if (!comm->redOps) {
    comm->redOps = calloc(1, sizeof(*comm->redOps));
    if (!comm->redOps) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_COLL, "out of host memory for a reduction op");
  }
  struct fcclRedOps* table = comm->redOps;
  for (int i = 0; i < table->count; i++)
    if (!table->ops[i].live) {
      *index = i;
      return fcclSuccess;
    }
  if (table->count == FCCL_MAX_REDOPS)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_COLL,
                      "fcclRedOpCreatePreMulSum: the communicator holds %d ops "
                      "already: destroy those it no longer needs (fcclRedOpDestroy)",
                      FCCL_MAX_REDOPS);
  if (table->count == table->capacity) {
    const int capacity = table->capacity ? 2 * table->capacity : 8;
    struct redOp* grown = realloc(table->ops, (size_t)capacity * sizeof(*grown));
    if (!grown) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_COLL, "out of host memory for a reduction op");
    table->ops = grown;
    table->capacity = capacity;
  }
  *index = table->count++;
  memset(&table->ops[*index], 0, sizeof(table->ops[*index]));
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclRedOpCreatePreMulSum(fcclRedOp_t* op, void* scalar, fcclDataType_t datatype,
                                               fcclScalarResidence_t residence, fcclComm_t comm) {
  static const char* const caller = "fcclRedOpCreatePreMulSum";
  fcclClearError();
  FCCLCHECK(fcclCommEnsureReady(comm, caller));
  fcclResult_t res = fcclSuccess;
  if (op == NULL || scalar == NULL)
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: %s is NULL", caller, op == NULL ? "op" : "scalar");
  else if ((int)datatype < 0 || datatype >= fcclNumTypes || datatype == fcclFloat8e4m3)
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: datatype %d is not one the collectives take", caller,
                     (int)datatype);
  else if (residence != fcclScalarDevice && residence != fcclScalarHostImmediate)
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                     "%s: residence %d is neither fcclScalarDevice nor fcclScalarHostImmediate", caller,
                     (int)residence);
  else if (residence == fcclScalarDevice && (uintptr_t)scalar % fcclTypeSize(datatype) != 0)
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: scalar %p is not aligned to its %s element", caller,
                     scalar, fcclTypeName(datatype));
  else if (residence == fcclScalarDevice)
    res = checkDeviceScalar(comm, scalar, caller);
  if (res != fcclSuccess) {
    fcclCommRecordThreadError(comm);
    return res;
  }
  struct redOp made;
  memset(&made, 0, sizeof(made));
  made.live = 1;
  made.datatype = datatype;
  made.residence = residence;
  made.ncclOp = -1;
  if (residence == fcclScalarHostImmediate)
    memcpy(&made.scalar, scalar, fcclTypeSize(datatype)); /* little-endian: the low bytes hold the value */
  else
    made.scalarPtr = (uint64_t)(uintptr_t)scalar;
  /* Where NCCL carries the communicator's reductions (the NCCL and hierarchical paths), NCCL makes the same op. */
  if (comm->path != fcclPathFccl) {
    int saved = -1;
    res = enterDevice(comm, &saved);
    if (res == fcclSuccess) res = fcclNcclRedOpCreatePreMulSum(comm, scalar, datatype, residence, &made.ncclOp);
    leaveDevice(comm, saved);
    if (res != fcclSuccess) {
      fcclCommRecordThreadError(comm);
      return res;
    }
  }
  int index = -1;
  pthread_mutex_lock(&tablesLock);
  res = freeEntry(comm, &index);
  if (res == fcclSuccess) comm->redOps->ops[index] = made;
  pthread_mutex_unlock(&tablesLock);
  if (res != fcclSuccess) {
    if (made.ncclOp >= 0) (void)fcclNcclRedOpDestroy(comm, made.ncclOp);
    fcclCommRecordThreadError(comm);
    return res;
  }
  *op = (fcclRedOp_t)(fcclNumOps + index);
  FCCL_INFO(FCCL_SUBSYS_COLL, "%s: op %d, %s, scalar %s%s", caller, (int)*op, fcclTypeName(datatype),
            residence == fcclScalarDevice ? "in device memory" : "from the host",
            made.ncclOp >= 0 ? ", with NCCL's" : "");
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclRedOpDestroy(fcclRedOp_t op, fcclComm_t comm) {
  static const char* const caller = "fcclRedOpDestroy";
  fcclClearError();
  if (!fcclCommIsValid(comm))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: invalid communicator handle %p", caller, (void*)comm);
  FCCLCHECK(fcclCommCheckOwner(comm, caller));
  pthread_mutex_lock(&tablesLock);
  struct redOp* found = findOp(comm, op);
  int ncclOp = -1;
  if (found) {
    ncclOp = found->ncclOp;
    found->live = 0;
  }
  pthread_mutex_unlock(&tablesLock);
  if (!found) {
    fcclResult_t res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: op %d is %s", caller, (int)op,
                                  (int)op >= 0 && op < fcclNumOps ? "a built-in op, which cannot be destroyed"
                                                                  : "not an op this communicator made");
    fcclCommRecordThreadError(comm);
    return res;
  }
  if (ncclOp < 0) return fcclSuccess;
  int saved = -1;
  fcclResult_t res = enterDevice(comm, &saved);
  if (res == fcclSuccess) res = fcclNcclRedOpDestroy(comm, ncclOp);
  leaveDevice(comm, saved);
  if (res != fcclSuccess) fcclCommRecordThreadError(comm);
  return res;
}

fcclResult_t fcclRedOpResolve(struct fcclComm* comm, fcclRedOp_t op, fcclDataType_t datatype, const char* caller,
                              struct fcclRedOpUse* use) {
  pthread_mutex_lock(&tablesLock);
  const struct redOp* found = findOp(comm, op);
  struct redOp copy;
  if (found) copy = *found;
  pthread_mutex_unlock(&tablesLock);
  if (!found)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL,
                      "%s: unknown reduction op %d (not a built-in op, nor a live op of this communicator: "
                      "fcclRedOpCreatePreMulSum)",
                      caller, (int)op);
  if (copy.datatype != datatype)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "%s: op %d was made for %s, the call is of %s", caller,
                      (int)op, fcclTypeName(copy.datatype), fcclTypeName(datatype));
  use->kernelOp = FCCL_DEVICE_OP_PREMULSUM;
  use->scalar = copy.scalar;
  use->scalarPtr = copy.scalarPtr;
  use->ncclOp = copy.ncclOp;
  return fcclSuccess;
}

void fcclRedOpFreeAll(struct fcclComm* comm) {
  if (!comm) return;
  pthread_mutex_lock(&tablesLock);
  struct fcclRedOps* table = comm->redOps;
  comm->redOps = NULL;
  pthread_mutex_unlock(&tablesLock);
  if (table) free(table->ops);
  free(table);
}
