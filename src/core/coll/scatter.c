/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclScatter: block r of the root's sendbuf (count elements at sendbuf + r * count) lands in rank r's recvbuf. The
 * forms (LL, direct, staged) and their table: algo.c's fcclMoveSelect; the kernels: src/device/scatter.cu. The
 * hierarchical path leaves it to the world's NCCL communicator (a group of sends and receives: nccl_path.c).
 */
#include "algo.h"
#include "check.h"
#include "comm.h"
#include "device_state.h"
#include "enqueue.h"

const struct fcclCollective fcclCollScatter = {
    .name = "fcclScatter",
    .ncclForm = FCCL_NCCL_SCATTER,
    .moves = 1,
    .rooted = 1,
    .algos = &fcclScatterAlgos,
    .peerBuffers = FCCL_PEERS_RECV, /* the root writes every rank's output in place */
    .sendPerRank = 1,
    .select = fcclEnqueueMoveSelect,
    .registeredPays = fcclEnqueueMoveRegisteredPays,
    .launch = fcclEnqueueKernel,
};

fcclResult_t fcclScatterAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, int root,
                             struct fcclComm* comm, void* stream, int algo) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollScatter,
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

FCCL_API fcclResult_t fcclScatter(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, int root,
                                  fcclComm_t comm, void* stream) {
  return fcclScatterAlgo(sendbuf, recvbuf, count, datatype, root, comm, stream, -1);
}
