/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclGather: rank r's count elements land at recvbuf + r * count on the root. The forms (LL, direct, staged) and
 * their table: algo.c's fcclMoveSelect; the kernels: src/device/gather.cu. The hierarchical path leaves it to the
 * world's NCCL communicator (a group of sends and receives: nccl_path.c).
 */
#include "algo.h"
#include "check.h"
#include "comm.h"
#include "device_state.h"
#include "enqueue.h"

const struct fcclCollective fcclCollGather = {
    .name = "fcclGather",
    .ncclForm = FCCL_NCCL_GATHER,
    .moves = 1,
    .rootedRecv = 1,
    .algos = &fcclGatherAlgos,
    .peerBuffers = FCCL_PEERS_SEND, /* the root reads every rank's input in place */
    .recvPerRank = 1,
    .select = fcclEnqueueMoveSelect,
    .registeredPays = fcclEnqueueMoveRegisteredPays,
    .launch = fcclEnqueueKernel,
};

fcclResult_t fcclGatherAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, int root,
                            struct fcclComm* comm, void* stream, int algo) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollGather,
                                .sendbuf = sendbuf,
                                .recvbuf = recvbuf,
                                .count = count,
                                .datatype = datatype,
                                .op = fcclSum,
                                .root = root,
                                .stream = stream,
                                .algo = algo};
  return fcclEnqueue(comm, &call);
}

FCCL_API fcclResult_t fcclGather(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, int root,
                                 fcclComm_t comm, void* stream) {
  return fcclGatherAlgo(sendbuf, recvbuf, count, datatype, root, comm, stream, -1);
}
