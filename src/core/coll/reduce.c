/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclReduce: every rank's count elements reduced in rank order into the root's recvbuf, with the all-reduce's
 * reducers (the root gets fcclAllReduce's bits). The forms (LL, direct, staged) and their table: algo.c's
 * fcclMoveSelect; the kernels: src/device/reduce_{ll,direct,staged}.cu. The hierarchical path leaves it to the world's
 * NCCL communicator (ncclReduce).
 */
#include "algo.h"
#include "check.h"
#include "comm.h"
#include "device_state.h"
#include "enqueue.h"

const struct fcclCollective fcclCollReduce = {
    .name = "fcclReduce",
    .ncclForm = FCCL_NCCL_REDUCE,
    .moves = 1,
    .reduces = 1,
    .rootedRecv = 1,
    .algos = &fcclReduceAlgos,
    .peerBuffers = FCCL_PEERS_SEND,
    .select = fcclEnqueueMoveSelect,
    .registeredPays = fcclEnqueueMoveRegisteredPays,
    .launch = fcclEnqueueKernel,
};

fcclResult_t fcclReduceAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, fcclRedOp_t op,
                            int root, struct fcclComm* comm, void* stream, int algo) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollReduce,
                                .sendbuf = sendbuf,
                                .recvbuf = recvbuf,
                                .count = count,
                                .datatype = datatype,
                                .op = op,
                                .root = root,
                                .stream = stream,
                                .algo = algo};
  return fcclEnqueue(comm, &call);
}

FCCL_API fcclResult_t fcclReduce(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                                 fcclRedOp_t op, int root, fcclComm_t comm, void* stream) {
  return fcclReduceAlgo(sendbuf, recvbuf, count, datatype, op, root, comm, stream, -1);
}
