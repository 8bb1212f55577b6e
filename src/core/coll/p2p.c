/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclSend, fcclRecv and fcclAllToAll (also spelled fcclAlltoAll, as NCCL does): calls fccl has no kernels for,
 * carried by the communicator's NCCL communicator on every path (NCCL's shapes: an all-to-all is a group of one send
 * and one receive of count elements per peer). The checks are every collective's (enqueue.c); the NCCL side is
 * nccl_path.c.
 */
#include "check.h"
#include "comm.h"
#include "enqueue.h"

const struct fcclCollective fcclCollSend = {
    .name = "fcclSend",
    .ncclForm = FCCL_NCCL_SEND,
    .ncclOnly = 1,
    .moves = 1,
    .peered = 1,
    .oneBuffer = FCCL_ONE_SEND,
};

const struct fcclCollective fcclCollRecv = {
    .name = "fcclRecv",
    .ncclForm = FCCL_NCCL_RECV,
    .ncclOnly = 1,
    .moves = 1,
    .peered = 1,
    .oneBuffer = FCCL_ONE_RECV,
};

const struct fcclCollective fcclCollAllToAll = {
    .name = "fcclAllToAll",
    .ncclForm = FCCL_NCCL_ALLTOALL,
    .ncclOnly = 1,
    .moves = 1,
    .sendPerRank = 1,
    .recvPerRank = 1,
    .disjoint = 1,
};

FCCL_API fcclResult_t fcclSend(const void* sendbuf, size_t count, fcclDataType_t datatype, int peer,
                               fcclComm_t comm, void* stream) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollSend, .sendbuf = sendbuf, .count = count, .datatype = datatype,
                                .op = fcclSum, .root = peer, .stream = stream, .algo = -1};
  return fcclEnqueue(comm, &call);
}

FCCL_API fcclResult_t fcclRecv(void* recvbuf, size_t count, fcclDataType_t datatype, int peer, fcclComm_t comm,
                               void* stream) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollRecv, .recvbuf = recvbuf, .count = count, .datatype = datatype,
                                .op = fcclSum, .root = peer, .stream = stream, .algo = -1};
  return fcclEnqueue(comm, &call);
}

FCCL_API fcclResult_t fcclAllToAll(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                                   fcclComm_t comm, void* stream) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollAllToAll, .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                                .datatype = datatype, .op = fcclSum, .root = -1, .stream = stream, .algo = -1};
  return fcclEnqueue(comm, &call);
}

/* NCCL's spelling (ncclAlltoAll), so that a program renamed from NCCL's names finds the call. */
FCCL_API fcclResult_t fcclAlltoAll(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                                   fcclComm_t comm, void* stream) {
  return fcclAllToAll(sendbuf, recvbuf, count, datatype, comm, stream);
}
