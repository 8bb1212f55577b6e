/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllGather: rank r's sendcount elements land at recvbuf + r * sendcount on every rank. The forms (LL,
 * direct, staged, copy) and their table: algo.c's fcclMoveSelect; the kernels: src/device/allgather.cu.
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
  (void)registered;
  return fcclMoveResolveRequest(state->allGatherRequest, &fcclAllGatherAlgos);
}

/*
 * The copy form (registered outputs): a barrier (every peer reached the call, so its output may be written), one
 * cudaMemcpyAsync of our block into each peer's output at our block's place, peers in the order rank + 1, rank + 2,
 * ... so that the ranks' first copies go to different peers, our own block copied locally when out of place, and a
 * closing barrier: every peer's copies into our output completed before it posted, so the output is whole when
 * the call's stream work ends, and no peer reuses its input or output while we still copy. Pushing needs only the
 * outputs registered, as the direct form; in place our block already lies in our output.
 */
static fcclResult_t allGatherByCopy(struct fcclComm* comm, const struct fcclPlan* plan, cudaStream_t stream) {
  const fcclDevArgs* args = &plan->args;
  const struct fcclDeviceState* s = comm->device;
  const int nranks = comm->nranks, rank = comm->rank;
  const uint64_t offset = (uint64_t)rank * args->bytes;
  const char* mine = (const char*)(uintptr_t)args->sendbuf;
  FCCLCHECK(fcclDeviceLaunch(FCCL_KERNEL_BARRIER, fcclFloat32, fcclSum, &s->dev, args, 1,
                             FCCL_DEVICE_BARRIER_THREADS, s->pdl, stream));
  for (int k = 1; k < nranks; k++) {
    const int peer = (rank + k) % nranks;
    CUDACHECK(cudaMemcpyAsync((char*)(uintptr_t)args->peerRecv[peer] + offset, mine, args->bytes, cudaMemcpyDefault,
                              stream));
  }
  if (!args->inPlace)
    CUDACHECK(cudaMemcpyAsync((char*)(uintptr_t)args->recvbuf + offset, mine, args->bytes, cudaMemcpyDefault,
                              stream));
  return fcclDeviceLaunch(FCCL_KERNEL_BARRIER, fcclFloat32, fcclSum, &s->dev, args, 1, FCCL_DEVICE_BARRIER_THREADS,
                          s->pdl, stream);
}

static fcclResult_t launch(struct fcclComm* comm, const struct fcclCall* call, const struct fcclPlan* plan,
                           cudaStream_t stream) {
  if (plan->choice.algo == FCCL_FORM_ALLGATHER_COPY) return allGatherByCopy(comm, plan, stream);
  return fcclEnqueueKernel(comm, call, plan, stream);
}

const struct fcclCollective fcclCollAllGather = {
    .name = "fcclAllGather",
    .ncclForm = FCCL_NCCL_ALLGATHER,
    .moves = 1,
    .algos = &fcclAllGatherAlgos,
    .peerBuffers = FCCL_PEERS_RECV,
    .recvPerRank = 1,
    .request = request,
    .select = fcclEnqueueMoveSelect,
    .registeredPays = fcclEnqueueMoveRegisteredPays,
    .launch = launch,
    .hierLaunch = fcclHierAllGather,
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
