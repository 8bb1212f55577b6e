/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclReduceScatter: rank r's recvbuf gets the reduction of block r of every rank's sendbuf, with the all-reduce's
 * reducers (bit for bit its result). The forms and their table: algo.c's fcclMoveSelect; the kernels:
 * src/device/reducescatter_{ll,direct,staged}.cu.
 */
#include "algo.h"
#include "check.h"
#include "comm.h"
#include "device_state.h"
#include "enqueue.h"
#include "hier.h"

static int request(const struct fcclDeviceState* state, int registered) {
  (void)registered;
  return fcclMoveResolveRequest(state->reduceScatterRequest, &fcclReduceScatterAlgos);
}

const struct fcclCollective fcclCollReduceScatter = {
    .name = "fcclReduceScatter",
    .ncclForm = FCCL_NCCL_REDUCESCATTER,
    .moves = 1,
    .reduces = 1,
    .algos = &fcclReduceScatterAlgos,
    .peerBuffers = FCCL_PEERS_SEND,
    .sendPerRank = 1,
    .request = request,
    .select = fcclEnqueueMoveSelect,
    .registeredPays = fcclEnqueueMoveRegisteredPays,
    .launch = fcclEnqueueKernel,
    .hierLaunch = fcclHierReduceScatter,
};

fcclResult_t fcclReduceScatterAlgo(const void* sendbuf, void* recvbuf, size_t recvcount, fcclDataType_t datatype,
                                   fcclRedOp_t op, struct fcclComm* comm, void* stream, int algo) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollReduceScatter, .sendbuf = sendbuf, .recvbuf = recvbuf,
                                .count = recvcount, .datatype = datatype, .op = op, .root = -1, .stream = stream,
                                .algo = algo};
  return fcclEnqueue(comm, &call);
}

FCCL_API fcclResult_t fcclReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                        fcclDataType_t datatype, fcclRedOp_t op, fcclComm_t comm, void* stream) {
  return fcclReduceScatterAlgo(sendbuf, recvbuf, recvcount, datatype, op, comm, stream, -1);
}
