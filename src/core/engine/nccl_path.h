/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL communicator a fccl communicator creates and owns (src/core/engine/nccl_path.c): made at init through fccl's
 * own bootstrap (rank 0's ncclGetUniqueId travels in a bootstrap all-gather), non-blocking (NCCL's init and calls
 * run on NCCL's thread, the communicator reading ncclInProgress meanwhile, which is waited for within the
 * communicator's timeout, abort flag and peer monitor, so that no wait inside NCCL is unbounded), and aborted or
 * destroyed with the communicator.
 * It carries every call on the NCCL path, and send, receive and all-to-all on every path. docs/paths.md.
 */
#ifndef FCCL_NCCL_PATH_H_
#define FCCL_NCCL_PATH_H_

#include "fccl.h"

#include <cuda_runtime_api.h>
#include <stddef.h>

struct fcclComm;
struct fcclCall;
struct fcclNcclComm;

/* What NCCL does for a call (struct fcclCollective.ncclForm). */
typedef enum {
  FCCL_NCCL_NONE = 0, /* the collective has no NCCL form */
  FCCL_NCCL_ALLREDUCE,
  FCCL_NCCL_ALLGATHER,
  FCCL_NCCL_REDUCESCATTER,
  FCCL_NCCL_BROADCAST,
  FCCL_NCCL_BARRIER, /* a one-element all-reduce on the communicator's own device word */
  FCCL_NCCL_SEND,
  FCCL_NCCL_RECV,
  FCCL_NCCL_ALLTOALL, /* a group of one send and one receive per peer */
  FCCL_NCCL_REDUCE,
  FCCL_NCCL_GATHER, /* a group: each rank sends its block to the root, which receives one from each (NCCL's
                     * ncclGather came with 2.28; this runs on every NCCL fccl loads) */
  FCCL_NCCL_SCATTER /* a group: the root sends block r to rank r, each rank receives its own */
} fcclNcclForm_t;

/*
 * Creates comm->nccl over comm->bootstrap (collective; the comm's device current). required 0: a failure that every
 * rank saw leaves comm->nccl NULL, says why in comm->ncclMissing and returns fcclSuccess; required 1: it fails the
 * init. Every wait, fccl's bootstrap steps and NCCL's init alike, is bounded by comm->timeoutMs and the abort flag
 * (which the peer monitor sets); a rank whose NCCL init fails at once is known to every rank before any waits for
 * it in NCCL, and the others abort theirs.
 */
fcclResult_t fcclNcclCommCreate(struct fcclComm* comm, int required);

/* Releases comm->nccl (NULL is fine): its registrations, then ncclCommFinalize and ncclCommDestroy (which wait for
 * this rank's NCCL work, as NCCL's destroy does), or ncclCommAbort (which waits for no peer) when the communicator
 * was aborted, failed, or NCCL reports an asynchronous error. */
fcclResult_t fcclNcclCommFree(struct fcclComm* comm);

/* Enqueues call (checked already) through NCCL on stream, the comm's device current. */
fcclResult_t fcclNcclLaunch(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream);

/* The same on nc, comm->nccl or a rail of comm's (whose ranks the call's root counts; a rail carries collectives
 * only, no barrier and no all-to-all, which are the world's). */
fcclResult_t fcclNcclLaunchOn(struct fcclComm* comm, struct fcclNcclComm* nc, const struct fcclCall* call,
                              cudaStream_t stream);

/* A pre-multiplied sum on comm->nccl (ncclRedOpCreatePreMulSum with the same arguments) and its end; *ncclOp receives
 * NCCL's op value. The comm's device current. */
fcclResult_t fcclNcclRedOpCreatePreMulSum(struct fcclComm* comm, void* scalar, fcclDataType_t datatype,
                                          fcclScalarResidence_t residence, int* ncclOp);
fcclResult_t fcclNcclRedOpDestroy(struct fcclComm* comm, int ncclOp);

/* NCCL's asynchronous error as fccl's (ncclInProgress reads as fcclSuccess); a failure is recorded on the
 * communicator (fcclCommFail) the first time it is seen. fcclSuccess without an NCCL communicator. */
fcclResult_t fcclNcclAsyncError(struct fcclComm* comm);

/* fcclCommRegister / fcclCommDeregister on the NCCL path: ncclCommRegister / ncclCommDeregister. */
fcclResult_t fcclNcclRegister(struct fcclComm* comm, void* buf, size_t size, fcclRegHandle_t* handle);
fcclResult_t fcclNcclDeregister(struct fcclComm* comm, fcclRegHandle_t handle);

/* How many registrations the NCCL communicator holds (fcclCommGetMemStats). */
unsigned long fcclNcclRegistrations(struct fcclComm* comm);

/* fcclAllGatherV (reduces 0) or fcclReduceScatterV (reduces 1, with op) on nc (comm->nccl), the call checked already
 * and its counts (nranks, the same on every rank) on the host: a group of ncclBroadcast or ncclReduce, one per rank
 * with a block, on stream, the comm's device current. caller names the public call in messages. */
fcclResult_t fcclNcclLaunchVariable(struct fcclComm* comm, struct fcclNcclComm* nc, const char* caller, int reduces,
                                    const void* sendbuf, void* recvbuf, const size_t* counts, fcclDataType_t datatype,
                                    fcclRedOp_t op, cudaStream_t stream);

/*
 * ncclCommSplit of parent->nccl (fcclCommSplit, core/comm/split.c): collective over every rank of parent, each passing
 * its color, or FCCL_SPLIT_NOCOLOR for none. *out receives the new NCCL communicator (NULL for FCCL_SPLIT_NOCOLOR),
 * checked to have nranks ranks with this rank as rank. Blocking, as fcclNcclCommCreate's: the split and the new
 * communicator's init are waited for within owner's timeout and abort flag (owner: the new fccl communicator, or
 * parent for FCCL_SPLIT_NOCOLOR; fcclNcclSplitCall), and every rank has met in parent's bootstrap just before. A wait
 * on parent's NCCL communicator that fails (NCCL's split failed, or did not end) leaves it broken, aborted at
 * parent's end, and fails parent (fcclCommFail). splitShare: NCCL's config field (FCCL_CONFIG_UNDEF_INT: NCCL's
 * default).
 */
fcclResult_t fcclNcclCommSplit(struct fcclComm* owner, struct fcclComm* parent, int color, int key, int nranks,
                               int rank, int splitShare, struct fcclNcclComm** out);

struct ncclComm; /* NCCL's, opaque: ncclComm_t */

/*
 * The NCCL call of fcclNcclCommSplit, on NCCL's handles (builds with NCCL; its unit test runs it on a stand-in):
 * ncclCommSplit of parent, a non-blocking NCCL communicator, with color (FCCL_SPLIT_NOCOLOR: none) and key, and a
 * non-blocking config with owner's name and SM budget and splitShare. NCCL answers ncclSuccess once it has started
 * the new communicator's init on a thread of its own (ncclInProgress is taken the same way); the parent then reads
 * ncclInProgress until that init ends, and only then does NCCL write the new communicator to *landing (NULL for no
 * color; a failed one, to abort, when the init failed). So the parent is always waited for (waitNccl's bounds:
 * owner's timeout and abort flag), and once its state has left ncclInProgress *landing is moved to *made, whatever
 * the result. *landing must live as long as parent: after a wait that gave up NCCL may still write it, until
 * parent's abort ends the init; whoever aborts parent then aborts what it finds there. *parentBroken: the wait on
 * parent failed (parent is failed or still busy: abort it, never finalize it). parentRank names this rank in
 * messages. Returns fcclSuccess; NCCL's error (the split, or the new communicator's init, failed); fcclTimeout;
 * the abort's error.
 */
fcclResult_t fcclNcclSplitCall(struct fcclComm* owner, struct ncclComm* parent, int parentRank, int color, int key,
                               int splitShare, struct ncclComm** landing, struct ncclComm** made, int* parentBroken);

/* Releases an NCCL communicator that not every rank of comm got (aborted: never finalized against peers that may not
 * have it). NULL is fine. */
void fcclNcclCommDiscard(struct fcclComm* comm, struct fcclNcclComm* nc);

/* ---- the hierarchical path (core/engine/hier.c) ---- */

struct fcclNcclComm;

/*
 * An NCCL communicator of some of comm's ranks: nranks of them, this rank its rank, made over every rank of comm's
 * bootstrap (collective over comm: each rank names the leader of its group, a rank of comm that makes the group's
 * unique id). The hierarchical path's rail: the ranks of one local rank across the hosts. Set on every rank or on
 * none; bounded as fcclNcclCommCreate.
 */
fcclResult_t fcclNcclRailCreate(struct fcclComm* comm, int nranks, int rank, int leader, struct fcclNcclComm** out);

/* Releases a rail as fcclNcclCommFree releases comm->nccl (aborted when comm was). NULL is fine. */
void fcclNcclRailFree(struct fcclComm* comm, struct fcclNcclComm* rail);

/* fcclNcclAsyncError for nc (NULL: fcclSuccess): a failure is recorded on comm the first time it is seen. */
fcclResult_t fcclNcclAsyncErrorOn(struct fcclComm* comm, struct fcclNcclComm* nc);

/* Whether the calling thread is inside fcclGroupStart/fcclGroupEnd, where NCCL defers its calls to the group's end. */
int fcclNcclGroupActive(void);

#endif /* FCCL_NCCL_PATH_H_ */
