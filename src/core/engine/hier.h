/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hierarchical path (src/core/engine/hier.c): several hosts with the same number of ranks, peer access inside each.
 * The communicator holds a host communicator of its host's ranks, on fccl's kernels, and a rail, an NCCL
 * communicator of the ranks of its local rank across the hosts; the world NCCL communicator (comm->nccl) carries
 * every call that has no hierarchical form. The all-reduce is fccl's reduce-scatter inside the host, NCCL's
 * all-reduce of the shard on the rail and fccl's all-gather inside the host; the all-gather and the broadcast are
 * a step inside the host and one on the rail, the reduce-scatter one inside the host per host and one on the rail.
 * docs/paths.md.
 */
#ifndef FCCL_HIER_H_
#define FCCL_HIER_H_

#include "fccl.h"

#include <cuda_runtime_api.h>
#include <stddef.h>

struct fcclComm;
struct fcclCall;
struct fcclTransport;

/*
 * What the hierarchical path needs of the communicator layer for its host communicator, a communicator of the fccl
 * path like any other: comm/, which makes communicators, hands these to fcclHierCreate (as core hands the transport
 * its exchange), so that engine/ never calls up into comm/ (docs/design.md: Cycles).
 */
struct fcclHierHostOps {
  /* The host communicator of parent: rank of nranks, the ranks of parent's host, met through id; on the fccl path,
   * with parent's device, timeout, name, allowSharedDevice and abort flag. Blocking; the init's error on failure
   * (nothing is left then). */
  fcclResult_t (*create)(struct fcclComm* parent, const fcclUniqueId* id, int nranks, int rank, struct fcclComm** out);
  /* Destroys it (collective over its ranks unless the abort flag is set); its error, if any. */
  fcclResult_t (*destroy)(struct fcclComm* host);
  /* Its asynchronous state, as fcclCommGetAsyncError reports it. */
  fcclResult_t (*state)(struct fcclComm* host);
};

/* Makes comm->hier: the host communicator (through hostOps, kept for its teardown and state), then the rail.
 * Collective over comm (its bootstrap carries the host communicators' unique ids and NCCL's); every rank learns
 * whether every rank made its parts. */
fcclResult_t fcclHierCreate(struct fcclComm* comm, const struct fcclHierHostOps* hostOps);

/* Releases comm->hier (NULL is fine): the rail as the world NCCL communicator is released, then the host
 * communicator (collective over the host's ranks unless comm's abort flag is set, which the two share). */
fcclResult_t fcclHierFree(struct fcclComm* comm);

/* The host communicator's failure or the rail's NCCL error, recorded on comm the first time it is seen;
 * fcclSuccess off the hierarchical path. */
fcclResult_t fcclHierAsyncError(struct fcclComm* comm);

/* The all-reduce of call (checked already) on stream, the comm's device current: the hierarchical form. */
fcclResult_t fcclHierAllReduce(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream);

/* The all-gather, the broadcast and the reduce-scatter of call likewise: the host's steps on fccl's kernels and the
 * rail's on NCCL, or the world NCCL communicator's call where the form does not apply (in a group; the all-gather
 * and the reduce-scatter with a host's ranks not consecutive). */
fcclResult_t fcclHierAllGather(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream);
fcclResult_t fcclHierBroadcast(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream);
fcclResult_t fcclHierReduceScatter(struct fcclComm* comm, const struct fcclCall* call, cudaStream_t stream);

/* The host communicator's transport (fcclCommRegister's registrations live there), or NULL. */
struct fcclTransport* fcclHierTransport(struct fcclComm* comm);

#endif /* FCCL_HIER_H_ */
