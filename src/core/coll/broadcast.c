/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclBroadcast: root's count elements land in every rank's recvbuf; fcclBcast, NCCL's in-place spelling, is the same
 * collective under its own name. The forms and their table: algo.c's fcclMoveSelect; the kernels:
 * src/device/broadcast.cu.
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
  return fcclMoveResolveRequest(state->broadcastRequest, &fcclBroadcastAlgos);
}

/*
 * The copy form (registered outputs): a barrier (every rank reached the call, so its output may be written), then
 * on the root one cudaMemcpyAsync of its message into each peer's output (peers in the order root + 1, ...) and,
 * out of place, into its own; then a closing barrier, which no rank passes before the root's copies completed.
 * The root pushes, so only the outputs need be registered (its sendbuf plays no part, as in the direct form).
 */
static fcclResult_t broadcastByCopy(struct fcclComm* comm, const struct fcclPlan* plan, cudaStream_t stream) {
  const fcclDevArgs* args = &plan->args;
  const struct fcclDeviceState* s = comm->device;
  const int nranks = comm->nranks, rank = comm->rank;
  FCCLCHECK(fcclDeviceLaunch(FCCL_KERNEL_BARRIER, fcclFloat32, fcclSum, &s->dev, args, 1,
                             FCCL_DEVICE_BARRIER_THREADS, s->pdl, stream));
  if (rank == args->root) {
    const char* message = (const char*)(uintptr_t)args->sendbuf;
    for (int k = 1; k < nranks; k++)
      CUDACHECK(cudaMemcpyAsync((char*)(uintptr_t)args->peerRecv[(rank + k) % nranks], message, args->bytes,
                                cudaMemcpyDefault, stream));
    if (!args->inPlace)
      CUDACHECK(cudaMemcpyAsync((char*)(uintptr_t)args->recvbuf, message, args->bytes, cudaMemcpyDefault,
                                stream));
  }
  return fcclDeviceLaunch(FCCL_KERNEL_BARRIER, fcclFloat32, fcclSum, &s->dev, args, 1, FCCL_DEVICE_BARRIER_THREADS,
                          s->pdl, stream);
}

static fcclResult_t launch(struct fcclComm* comm, const struct fcclCall* call, const struct fcclPlan* plan,
                           cudaStream_t stream) {
  if (plan->choice.algo == FCCL_FORM_BROADCAST_COPY) return broadcastByCopy(comm, plan, stream);
  return fcclEnqueueKernel(comm, call, plan, stream);
}

/* Everything but the name, which messages give as the application called it. */
#define FCCL_BROADCAST_COLLECTIVE_(callName)                                                                  \
  {                                                                                                           \
    .name = callName, .ncclForm = FCCL_NCCL_BROADCAST, .moves = 1, .rooted = 1, .algos = &fcclBroadcastAlgos, \
    .peerBuffers = FCCL_PEERS_RECV, .request = request, .select = fcclEnqueueMoveSelect,                      \
    .registeredPays = fcclEnqueueMoveRegisteredPays, .launch = launch, .hierLaunch = fcclHierBroadcast,       \
  }

const struct fcclCollective fcclCollBroadcast = FCCL_BROADCAST_COLLECTIVE_("fcclBroadcast");
const struct fcclCollective fcclCollBcast = FCCL_BROADCAST_COLLECTIVE_("fcclBcast");

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

FCCL_API fcclResult_t fcclBcast(void* buff, size_t count, fcclDataType_t datatype, int root, fcclComm_t comm,
                                void* stream) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollBcast,
                                .sendbuf = buff,
                                .recvbuf = buff,
                                .count = count,
                                .datatype = datatype,
                                .op = fcclSum,
                                .root = root,
                                .stream = stream,
                                .algo = -1};
  return fcclEnqueue(comm, &call);
}
