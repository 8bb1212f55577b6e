/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclReduceScatterV and fcclReduceScatterVDevice: rank r's recvbuf gets the reduction of block r (counts[r]
 * elements, after the blocks of ranks 0..r-1) of every rank's sendbuf, with the all-reduce's reducers (with equal
 * counts, bit for bit fcclReduceScatter's result), the counts on the host or in device memory (read when the call
 * runs). The path to the stream: variable.c; the forms: fcclReduceScatterVAlgos (algo.c); the kernels:
 * src/device/reducescatterv_{ll,direct,staged}.cu.
 */
#include "variable.h"

#include "check.h"

fcclResult_t fcclReduceScatterVAlgo(const void* sendbuf, void* recvbuf, const size_t* counts, fcclDataType_t datatype,
                                    fcclRedOp_t op, struct fcclComm* comm, void* stream, int algo) {
  fcclClearError();
  const struct fcclVariableCall call = {.name = "fcclReduceScatterV",
                                        .reduces = 1,
                                        .sendbuf = sendbuf,
                                        .recvbuf = recvbuf,
                                        .counts = counts,
                                        .datatype = datatype,
                                        .op = op,
                                        .stream = stream,
                                        .algo = algo};
  return fcclEnqueueVariable(comm, &call);
}

fcclResult_t fcclReduceScatterVDeviceAlgo(const void* sendbuf, void* recvbuf, const int64_t* counts,
                                          size_t sendcapacity, size_t recvcapacity, fcclDataType_t datatype,
                                          fcclRedOp_t op, struct fcclComm* comm, void* stream, int algo) {
  fcclClearError();
  const struct fcclVariableCall call = {.name = "fcclReduceScatterVDevice",
                                        .reduces = 1,
                                        .sendbuf = sendbuf,
                                        .recvbuf = recvbuf,
                                        .deviceCounts = counts,
                                        .sendCapacity = sendcapacity,
                                        .recvCapacity = recvcapacity,
                                        .datatype = datatype,
                                        .op = op,
                                        .stream = stream,
                                        .algo = algo};
  return fcclEnqueueVariable(comm, &call);
}

FCCL_API fcclResult_t fcclReduceScatterV(const void* sendbuf, void* recvbuf, const size_t* counts,
                                         fcclDataType_t datatype, fcclRedOp_t op, fcclComm_t comm, void* stream) {
  return fcclReduceScatterVAlgo(sendbuf, recvbuf, counts, datatype, op, comm, stream, -1);
}

FCCL_API fcclResult_t fcclReduceScatterVDevice(const void* sendbuf, void* recvbuf, const int64_t* counts,
                                               size_t sendcapacity, size_t recvcapacity, fcclDataType_t datatype,
                                               fcclRedOp_t op, fcclComm_t comm, void* stream) {
  return fcclReduceScatterVDeviceAlgo(sendbuf, recvbuf, counts, sendcapacity, recvcapacity, datatype, op, comm, stream,
                                      -1);
}
