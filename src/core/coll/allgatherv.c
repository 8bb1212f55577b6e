/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllGatherV and fcclAllGatherVDevice: rank r's counts[r] elements land in every rank's recvbuf after the blocks
 * of ranks 0..r-1, with the counts on the host or in device memory (read when the call runs). The path to the
 * stream: variable.c; the forms: fcclAllGatherVAlgos (algo.c); the kernels: src/device/allgatherv.cu.
 */
#include "variable.h"

#include "check.h"

fcclResult_t fcclAllGatherVAlgo(const void* sendbuf, void* recvbuf, const size_t* counts, fcclDataType_t datatype,
                                struct fcclComm* comm, void* stream, int algo) {
  fcclClearError();
  const struct fcclVariableCall call = {.name = "fcclAllGatherV",
                                        .reduces = 0,
                                        .sendbuf = sendbuf,
                                        .recvbuf = recvbuf,
                                        .counts = counts,
                                        .datatype = datatype,
                                        .op = fcclSum,
                                        .stream = stream,
                                        .algo = algo};
  return fcclEnqueueVariable(comm, &call);
}

fcclResult_t fcclAllGatherVDeviceAlgo(const void* sendbuf, void* recvbuf, const int64_t* counts, size_t sendcapacity,
                                      size_t recvcapacity, fcclDataType_t datatype, struct fcclComm* comm, void* stream,
                                      int algo) {
  fcclClearError();
  const struct fcclVariableCall call = {.name = "fcclAllGatherVDevice",
                                        .reduces = 0,
                                        .sendbuf = sendbuf,
                                        .recvbuf = recvbuf,
                                        .deviceCounts = counts,
                                        .sendCapacity = sendcapacity,
                                        .recvCapacity = recvcapacity,
                                        .datatype = datatype,
                                        .op = fcclSum,
                                        .stream = stream,
                                        .algo = algo};
  return fcclEnqueueVariable(comm, &call);
}

FCCL_API fcclResult_t fcclAllGatherV(const void* sendbuf, void* recvbuf, const size_t* counts, fcclDataType_t datatype,
                                     fcclComm_t comm, void* stream) {
  return fcclAllGatherVAlgo(sendbuf, recvbuf, counts, datatype, comm, stream, -1);
}

FCCL_API fcclResult_t fcclAllGatherVDevice(const void* sendbuf, void* recvbuf, const int64_t* counts,
                                           size_t sendcapacity, size_t recvcapacity, fcclDataType_t datatype,
                                           fcclComm_t comm, void* stream) {
  return fcclAllGatherVDeviceAlgo(sendbuf, recvbuf, counts, sendcapacity, recvcapacity, datatype, comm, stream, -1);
}
