/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one path every collective call takes from its public function to the stream (src/core/coll/enqueue.c): argument
 * and state checks, the stream's and buffers' device, registered or graph-registered buffers, the algorithm and
 * the launch. A collective is one struct fcclCollective (its file in src/core/ defines it beside its public call)
 * plus its kernels in src/device/: adding one is adding those files, not editing switch statements.
 */
#ifndef FCCL_ENQUEUE_H_
#define FCCL_ENQUEUE_H_

#include "algo.h"
#include "device_host.h"
#include "fccl.h"
#include "nccl_path.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

struct fcclComm;
struct fcclDeviceState;

/* One call as the application made it. */
struct fcclCall {
  const struct fcclCollective* coll;
  const void* sendbuf;
  void* recvbuf;
  size_t count;            /* elements, as the collective's public call counts them */
  fcclDataType_t datatype;
  fcclRedOp_t op;          /* collectives that reduce */
  int root;                /* collectives with a root; the peer of a send or receive */
  void* stream;
  int algo; /* -1: choose (FCCL_ALGO included); else that algorithm of coll->algos exactly (tests) */
  /* An op of fcclRedOpCreatePreMulSum as fcclEnqueue resolves it for fccl's kernels (op FCCL_DEVICE_OP_PREMULSUM):
   * the scalar's bits, or the device address it is read from when the kernel runs (fcclDevArgs.scalar, scalarPtr).
   * For NCCL, op becomes the NCCL op made with it. */
  uint64_t scalar;
  uint64_t scalarPtr;
};

/* What the enqueue path has worked out when a collective's launch runs. */
struct fcclPlan {
  fcclAlgoChoice choice;
  fcclDevArgs args;
  int registered;          /* both buffers are read and written in place */
};

enum { FCCL_PEERS_SEND = 1, FCCL_PEERS_RECV = 2 };
enum { FCCL_ONE_SEND = 1, FCCL_ONE_RECV = 2 };

struct fcclCollective {
  const char* name;        /* the public call, for messages: "fcclAllReduce" */
  int moves;               /* 0: no buffers (the barrier) */
  int reduces;             /* takes a datatype and an op; else a datatype only (or nothing when !moves) */
  int rooted;              /* takes a root whose sendbuf only is read (broadcast, scatter): elsewhere sendbuf stands
                            * for recvbuf */
  int rootedRecv;          /* takes a root whose recvbuf only is written (reduce, gather): elsewhere recvbuf stands
                            * for sendbuf */
  int peered;              /* takes a peer (fcclCall.root), a send's or receive's */
  int oneBuffer;           /* FCCL_ONE_SEND or FCCL_ONE_RECV: the call has only that buffer (send, receive) */
  int disjoint;            /* sendbuf and recvbuf must not overlap (all-to-all) */
  fcclNcclForm_t ncclForm; /* what NCCL does for it (the NCCL path, and calls with no kernels of fccl's) */
  int ncclOnly;            /* fccl has no kernels for it: NCCL carries it on every path */
  const fcclAlgoSet* algos; /* its forms (algo.h, generated from kernel_list.h), which fcclCall.algo may force;
                             * NULL: none to choose (the barrier, the collectives NCCL carries) */
  int peerBuffers;         /* FCCL_PEERS_SEND | FCCL_PEERS_RECV: the buffers peers reach in the direct forms, which
                            * must be registered (on every rank alike) for those forms to run */
  /* 1: sendbuf (recvbuf) holds a block of count elements per rank, nranks x count in all (the reduce-scatter's
   * input, the all-gather's output); 0: count elements. The call is in place when the single block is this
   * rank's block of the other buffer, or, with both 0, when the two are the same. */
  int sendPerRank;
  int recvPerRank;
  /* The kernel FCCL_ALGO or its kin force for this call (-1: none); registered says whether the buffers are. NULL
   * for a collective without such a variable. */
  int (*request)(const struct fcclDeviceState* state, int registered);
  /* The algorithm for the query (pure: the same on every rank). */
  fcclResult_t (*select)(const struct fcclCollective* coll, const fcclAlgoQuery* query, fcclAlgoChoice* choice);
  /* Whether registered buffers would run another algorithm than staged ones for this query: the same answer on
   * every rank, so that every rank of a captured call registers its buffers for the graph or none does. */
  int (*registeredPays)(const struct fcclCollective* coll, const fcclAlgoQuery* query);
  /* Enqueues the planned work on stream (the comm's device is current); plan is NULL for a collective that
   * moves no data. */
  fcclResult_t (*launch)(struct fcclComm* comm, const struct fcclCall* call, const struct fcclPlan* plan,
                         cudaStream_t stream);
  /* Its form on the hierarchical path (core/engine/hier.c), for a call that passed the checks, the comm's device
   * current; NULL: the world NCCL communicator carries it there. */
  fcclResult_t (*hierLaunch)(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream);
};

/*
 * Runs call: validates it and enqueues its work (the public function has cleared the thread's last error). On
 * failure nothing is launched and the error is also recorded on the communicator (fcclGetLastError(comm)). The
 * codes are the public calls'.
 */
fcclResult_t fcclEnqueue(struct fcclComm* comm, const struct fcclCall* call);

/* select and registeredPays of the collectives that move data without fcclAllReduce's algorithms (all-gather,
 * reduce-scatter, broadcast, reduce, gather, scatter): algo.c's fcclMoveSelect over the collective's forms
 * (coll->algos). */
fcclResult_t fcclEnqueueMoveSelect(const struct fcclCollective* coll, const fcclAlgoQuery* query,
                                   fcclAlgoChoice* choice);
int fcclEnqueueMoveRegisteredPays(const struct fcclCollective* coll, const fcclAlgoQuery* query);

/* A collective's launch that is one kernel: plan->choice's, with the call's type and op. */
fcclResult_t fcclEnqueueKernel(struct fcclComm* comm, const struct fcclCall* call, const struct fcclPlan* plan,
                               cudaStream_t stream);

/*
 * The checks of fcclEnqueue, for a call that takes its own path to the stream (fused_norm.c). Each returns the
 * public calls' codes with the message recorded (FCCL_ERROR).
 */
/* A live communicator whose init finished and whose engine has not failed: device state and kernels that have not
 * failed when fccl's kernels carry the call (viaNccl 0), an NCCL communicator without an asynchronous error when
 * NCCL does. */
fcclResult_t fcclEnqueueCheckReady(struct fcclComm* comm, const char* caller, int viaNccl);
/* The current device made the communicator's for the call (fcclEnqueueEnterDevice) and put back afterwards
 * (fcclEnqueueLeaveDevice, also after a failed enter: saved stays -1 then). */
struct fcclCallDevice {
  int saved;
};
fcclResult_t fcclEnqueueEnterDevice(struct fcclComm* comm, struct fcclCallDevice* cd);
void fcclEnqueueLeaveDevice(struct fcclComm* comm, const struct fcclCallDevice* cd);
/* stream is a stream of the communicator's device (not checked while it is being captured); *capturing says
 * whether it is. */
fcclResult_t fcclEnqueueCheckStream(struct fcclComm* comm, void* stream, const char* caller, int* capturing);
/* buf is device (or managed) memory of the communicator's device; name is the argument's, for the message. */
fcclResult_t fcclEnqueueCheckBuffer(struct fcclComm* comm, const void* buf, const char* name, const char* caller);

/* The collectives (src/core/<name>.c). */
extern const struct fcclCollective fcclCollAllReduce;
extern const struct fcclCollective fcclCollAllGather;
extern const struct fcclCollective fcclCollReduceScatter;
extern const struct fcclCollective fcclCollBroadcast;
extern const struct fcclCollective fcclCollBcast; /* fcclBcast: the broadcast in place, under its own name */
extern const struct fcclCollective fcclCollReduce;
extern const struct fcclCollective fcclCollGather;
extern const struct fcclCollective fcclCollScatter;
extern const struct fcclCollective fcclCollBarrier;
extern const struct fcclCollective fcclCollSend; /* src/core/p2p.c: NCCL only */
extern const struct fcclCollective fcclCollRecv;
extern const struct fcclCollective fcclCollAllToAll;

/*
 * fcclAllReduce with the algorithm chosen by the caller: algo -1 chooses as fcclAllReduce does (FCCL_ALGO
 * included), otherwise that algorithm of fcclAllReduceAlgos exactly (fcclInvalidArgument when it cannot run the
 * call). For tests.
 */
fcclResult_t fcclAllReduceAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                               fcclRedOp_t op, struct fcclComm* comm, void* stream, int algo);

/* The same for the other collectives: algo -1 or one of the collective's algorithms (fcclAllGatherAlgos.algos[form],
 * FCCL_KERNEL_ALLGATHER_LL, FCCL_FORM_ALLGATHER_COPY ...). */
fcclResult_t fcclAllGatherAlgo(const void* sendbuf, void* recvbuf, size_t sendcount, fcclDataType_t datatype,
                               struct fcclComm* comm, void* stream, int algo);
fcclResult_t fcclReduceScatterAlgo(const void* sendbuf, void* recvbuf, size_t recvcount, fcclDataType_t datatype,
                                   fcclRedOp_t op, struct fcclComm* comm, void* stream, int algo);
fcclResult_t fcclBroadcastAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, int root,
                               struct fcclComm* comm, void* stream, int algo);
fcclResult_t fcclReduceAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, fcclRedOp_t op,
                            int root, struct fcclComm* comm, void* stream, int algo);
fcclResult_t fcclGatherAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, int root,
                            struct fcclComm* comm, void* stream, int algo);
fcclResult_t fcclScatterAlgo(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, int root,
                             struct fcclComm* comm, void* stream, int algo);

/* fcclAllReduceAddRMSNorm in the form chosen by the caller: form -1 chooses as the public call does
 * (FCCL_FUSED_ALGO included), FCCL_FUSED_ONESHOT or FCCL_FUSED_TWOSHOT runs that form exactly (fcclInvalidArgument
 * when it cannot run the call). For tests (src/core/coll/fused_norm.c). */
fcclResult_t fcclAllReduceAddRMSNormForm(const void* input, void* residual, const void* weight, void* output,
                                         size_t tokens, size_t hidden, float eps, fcclDataType_t datatype,
                                         fcclDataType_t outtype, fcclScaleMode_t scaleMode, float* scale,
                                         struct fcclComm* comm, void* stream, int form);

#endif /* FCCL_ENQUEUE_H_ */
