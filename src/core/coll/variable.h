/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The variable all-gather and reduce-scatter (fcclAllGatherV, fcclReduceScatterV and their forms with counts in
 * device memory; src/core/coll/allgatherv.c, reducescatterv.c): one call as the application made it and the path
 * that every one of them takes to the stream (variable.c), beside fcclEnqueue, whose call has one count. The
 * internal entry points below force a form, for tests. docs/collectives.md#variable-all-gather-and-reduce-scatter.
 */
#ifndef FCCL_CORE_VARIABLE_H_
#define FCCL_CORE_VARIABLE_H_

#include "fccl.h"

#include <stddef.h>
#include <stdint.h>

struct fcclComm;

/* One call as the application made it. Rank r's block is counts[r] elements (deviceCounts[r] when the counts are in
 * device memory); the blocks lie back to back in rank order in the all-gather's recvbuf and the reduce-scatter's
 * sendbuf. */
struct fcclVariableCall {
  const char* name; /* the public call, for messages */
  int reduces;      /* 0: all-gather; 1: reduce-scatter (op) */
  const void* sendbuf;
  void* recvbuf;
  const size_t* counts;        /* host memory, nranks counts; NULL with deviceCounts */
  const int64_t* deviceCounts; /* device memory, nranks counts, read when the call runs; NULL with counts */
  size_t sendCapacity;         /* deviceCounts: elements of every rank's sendbuf, and of its recvbuf */
  size_t recvCapacity;
  fcclDataType_t datatype;
  fcclRedOp_t op;
  void* stream;
  int algo; /* -1: choose; else that algorithm of the collective's set exactly (tests) */
};

/* Runs call: validates it and enqueues its work (the public function has cleared the thread's last error). On
 * failure nothing is launched and the error is also recorded on the communicator. The codes are the public calls'. */
fcclResult_t fcclEnqueueVariable(struct fcclComm* comm, const struct fcclVariableCall* call);

/* The public calls with the form chosen by the caller: algo -1 chooses as they do (FCCL_ALLGATHER_ALGO,
 * FCCL_REDUCESCATTER_ALGO included), else one of fcclAllGatherVAlgos.algos (fcclReduceScatterVAlgos.algos) runs
 * exactly (fcclInvalidArgument when it cannot run the call). For tests. */
fcclResult_t fcclAllGatherVAlgo(const void* sendbuf, void* recvbuf, const size_t* counts, fcclDataType_t datatype,
                                struct fcclComm* comm, void* stream, int algo);
fcclResult_t fcclReduceScatterVAlgo(const void* sendbuf, void* recvbuf, const size_t* counts, fcclDataType_t datatype,
                                    fcclRedOp_t op, struct fcclComm* comm, void* stream, int algo);
fcclResult_t fcclAllGatherVDeviceAlgo(const void* sendbuf, void* recvbuf, const int64_t* counts, size_t sendcapacity,
                                      size_t recvcapacity, fcclDataType_t datatype, struct fcclComm* comm, void* stream,
                                      int algo);
fcclResult_t fcclReduceScatterVDeviceAlgo(const void* sendbuf, void* recvbuf, const int64_t* counts,
                                          size_t sendcapacity, size_t recvcapacity, fcclDataType_t datatype,
                                          fcclRedOp_t op, struct fcclComm* comm, void* stream, int algo);

#endif /* FCCL_CORE_VARIABLE_H_ */
