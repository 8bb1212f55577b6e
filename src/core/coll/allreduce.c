/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllReduce: every rank's count elements reduced in rank order into every rank's recvbuf. Its algorithms are
 * the table of algo.c; the kernels are in src/device/allreduce_*.cu.
 */
#include "algo.h"
#include "check.h"
#include "comm.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"
#include "hier.h"

#include <cuda_runtime.h>
#include <stdint.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_COLL

static int request(const struct fcclDeviceState* state, int registered) {
  return fcclAlgoResolveRequest(state->algoRequest, registered);
}

static fcclResult_t selectAlgo(const struct fcclCollective* coll, const fcclAlgoQuery* query,
                               fcclAlgoChoice* choice) {
  (void)coll;
  return fcclAlgoSelect(query, choice);
}

static int registeredPays(const struct fcclCollective* coll, const fcclAlgoQuery* query) {
  (void)coll;
  fcclAlgoChoice choice;
  if (fcclAlgoSelect(query, &choice) != fcclSuccess) return 0;
  return choice.algo == FCCL_ALGO_TWOSHOT_REG || choice.algo == FCCL_ALGO_ONESHOT_PULL;
}

/*
 * The reduce-scatter of the registered two-shot by the copy engines (FCCL_SCATTER_COPY, 2 ranks, out of place):
 * a barrier (the peer reached the call, so its output may be written), then one copy of our input's units of the
 * peer's share into the peer's output at their own place, both on the stream before the kernel, which then only
 * reduces and all-gathers. The share is the kernel's: divUp(units, 2) units per rank, the last one up to bytes.
 */
static fcclResult_t scatterByCopy(struct fcclComm* comm, const fcclDevArgs* args, cudaStream_t stream) {
  const int peer = 1 - comm->rank;
  const uint64_t units = (args->bytes + FCCL_UNIT_BYTES - 1) / FCCL_UNIT_BYTES;
  const uint64_t share = (units + 1) / 2 * FCCL_UNIT_BYTES;
  const uint64_t begin = (uint64_t)peer * share;
  const uint64_t end = begin + share < args->bytes ? begin + share : args->bytes;
  /* The barrier carries the all-reduce's print (args): a peer in another call meets this call's fingerprint. */
  FCCLCHECK(fcclDeviceLaunch(FCCL_KERNEL_BARRIER, fcclFloat32, fcclSum, &comm->device->dev, args, 1,
                             FCCL_DEVICE_BARRIER_THREADS, comm->device->pdl, stream));
  if (begin < end)
    CUDACHECK(cudaMemcpyAsync((char*)(uintptr_t)args->peerRecv[peer] + begin,
                              (const char*)(uintptr_t)args->sendbuf + begin, end - begin, cudaMemcpyDefault, stream));
  return fcclSuccess;
}

static fcclResult_t launchAllReduce(struct fcclComm* comm, const struct fcclCall* call, const struct fcclPlan* plan,
                                    cudaStream_t stream) {
  const fcclAlgoChoice* choice = &plan->choice;
  if (choice->scatter == FCCL_SCATTER_COPY) FCCLCHECK(scatterByCopy(comm, &plan->args, stream));
  return fcclDeviceLaunch(choice->algo, call->datatype, call->op, &comm->device->dev, &plan->args, choice->blocks,
                          choice->threads, comm->device->pdl, stream);
}

const struct fcclCollective fcclCollAllReduce = {
    .name = "fcclAllReduce",
    .ncclForm = FCCL_NCCL_ALLREDUCE,
    .moves = 1,
    .reduces = 1,
    .algos = &fcclAllReduceAlgos,
    .peerBuffers = FCCL_PEERS_SEND | FCCL_PEERS_RECV,
    .request = request,
    .select = selectAlgo,
    .registeredPays = registeredPays,
    .launch = launchAllReduce,
    .hierLaunch = fcclHierAllReduce,
};

fcclResult_t fcclAllReduceAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                               fcclRedOp_t op, struct fcclComm* comm, void* stream, int algo) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollAllReduce, .sendbuf = sendbuf, .recvbuf = recvbuf,
                                .count = count, .datatype = datatype, .op = op, .root = -1, .stream = stream,
                                .algo = algo};
  return fcclEnqueue(comm, &call);
}

FCCL_API fcclResult_t fcclAllReduce(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                                    fcclRedOp_t op, fcclComm_t comm, void* stream) {
  return fcclAllReduceAlgo(sendbuf, recvbuf, count, datatype, op, comm, stream, -1);
}
