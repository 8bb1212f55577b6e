/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllGather: rank r's sendcount elements land at recvbuf + r * sendcount on every rank. The forms (LL,
 * direct, staged) and their table: algo.c's fcclMoveSelect; the kernels: src/device/allgather.cu.
 */
#include "algo.h"
#include "check.h"
#include "comm.h"
#include "device_state.h"
#include "enqueue.h"

static int request(const struct fcclDeviceState* state, int registered) {
  (void)registered;
  return fcclMoveResolveRequest(state->allGatherRequest, FCCL_KERNEL_ALLGATHER_LL);
}

const struct fcclCollective fcclCollAllGather = {
    .name = "fcclAllGather",
    .ncclForm = FCCL_NCCL_ALLGATHER,
    .moves = 1,
    .firstKernel = FCCL_KERNEL_ALLGATHER_LL,
    .peerBuffers = FCCL_PEERS_RECV,
    .kernels = 3,
    .recvPerRank = 1,
    .request = request,
    .select = fcclEnqueueMoveSelect,
    .registeredPays = fcclEnqueueMoveRegisteredPays,
    .launch = fcclEnqueueKernel,
};

fcclResult_t fcclAllGatherAlgo(const void* sendbuf, void* recvbuf, size_t sendcount, fcclDataType_t datatype,
                               struct fcclComm* comm, void* stream, int algo) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollAllGather, .sendbuf = sendbuf, .recvbuf = recvbuf,
                                .count = sendcount, .datatype = datatype, .op = fcclSum, .root = -1,
                                .stream = stream, .algo = algo};
  return fcclEnqueue(comm, &call);
}

FCCL_API fcclResult_t fcclAllGather(const void* sendbuf, void* recvbuf, size_t sendcount, fcclDataType_t datatype,
                                    fcclComm_t comm, void* stream) {
  return fcclAllGatherAlgo(sendbuf, recvbuf, sendcount, datatype, comm, stream, -1);
}
