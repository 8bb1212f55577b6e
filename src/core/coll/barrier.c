/* SPDX-License-Identifier: Apache-2.0 */
/* fcclBarrier: a device-side rendezvous of every rank, ordered on the stream (the barrier kernel of barrier.cu). */
#include "check.h"
#include "comm.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_COLL

static fcclResult_t launchBarrier(struct fcclComm* comm, const struct fcclCall* call, const struct fcclPlan* plan,
                                  cudaStream_t stream) {
  (void)call;
  (void)plan;
  return fcclDeviceLaunch(FCCL_KERNEL_BARRIER, fcclFloat32, fcclSum, &comm->device->dev, NULL, 1,
                          FCCL_DEVICE_BARRIER_THREADS, comm->device->pdl, stream);
}

const struct fcclCollective fcclCollBarrier = {
    .name = "fcclBarrier",
    .ncclForm = FCCL_NCCL_BARRIER,
    .launch = launchBarrier,
};

FCCL_API fcclResult_t fcclBarrier(fcclComm_t comm, void* stream) {
  fcclClearError();
  const struct fcclCall call = {.coll = &fcclCollBarrier, .root = -1, .stream = stream, .algo = -1};
  return fcclEnqueue(comm, &call);
}
