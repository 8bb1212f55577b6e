/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclBroadcast: root's count elements land in every rank's recvbuf. The forms and their table: algo.c's
 * fcclMoveSelect; the kernels: src/device/broadcast.cu.
 */
#include "algo.h"
#include "check.h"
#include "comm.h"
#include "device_state.h"
#include "enqueue.h"

static int request(const struct fcclDeviceState* state, int registered) {
  (void)registered;
  return fcclMoveResolveRequest(state->broadcastRequest, FCCL_KERNEL_BROADCAST_LL);
}

const struct fcclCollective fcclCollBroadcast = {
    .name = "fcclBroadcast",
    .ncclForm = FCCL_NCCL_BROADCAST,
    .moves = 1,
    .rooted = 1,
    .firstKernel = FCCL_KERNEL_BROADCAST_LL,
    .peerBuffers = FCCL_PEERS_RECV,
    .kernels = 3,
    .request = request,
    .select = fcclEnqueueMoveSelect,
    .registeredPays = fcclEnqueueMoveRegisteredPays,
    .launch = fcclEnqueueKernel,
};

fcclResult_t fcclBroadcastAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, int root,
                               struct fcclComm* comm, void* stream, int algo) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollBroadcast, .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                                .datatype = datatype, .op = fcclSum, .root = root, .stream = stream, .algo = algo};
  return fcclEnqueue(comm, &call);
}

FCCL_API fcclResult_t fcclBroadcast(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                                    int root, fcclComm_t comm, void* stream) {
  return fcclBroadcastAlgo(sendbuf, recvbuf, count, datatype, root, comm, stream, -1);
}
