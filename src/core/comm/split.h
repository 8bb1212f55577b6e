/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The exchange of fcclCommSplit over the parent communicator (split.c), apart from the GPU: which ranks form each
 * child, in which order, and the unique id its ranks meet through. Read by split.c and by the multiproc test of the
 * exchange (test/multiproc/test_split_exchange.c), which runs it over real bootstraps without a GPU.
 */
#ifndef FCCL_COMM_SPLIT_H_
#define FCCL_COMM_SPLIT_H_

#include "fccl.h"

#include <stdint.h>

struct fcclComm;
struct fcclPeerInfo;

/* What the exchange gave this rank. */
struct fcclSplitPlan {
  int color; /* this rank's: >= 0, or FCCL_SPLIT_NOCOLOR */
  int key;
  int nranks;         /* its child's rank count; 0 for FCCL_SPLIT_NOCOLOR */
  int rank;           /* this rank's place in the child; -1 for FCCL_SPLIT_NOCOLOR */
  int* members;       /* nranks entries: child rank -> parent rank */
  uint32_t* salts;    /* nranks entries: each member's fresh salt (its fcclPeerInfo.salt in the child) */
  int local;          /* every member is a process of this host */
  fcclUniqueId id;    /* made by the child's rank 0, whose root it is */
  int exchangeFailed; /* an all-gather over the parent failed: its bootstrap is broken */
};

/*
 * The exchange, collective over every rank of parent (one call each, in the same order as parent's other
 * bootstrap operations): an all-gather of every rank's color, key, status and a fresh salt, then one of the unique
 * ids each color's first rank makes (fcclBootstrapGetUniqueIdNear of parent's bootstrap, with childTimeoutMs).
 * status: this rank's own state; a rank that has already failed still takes part (status not fcclSuccess), so that
 * nobody waits for it, and every rank of its color then fails, naming it. Members are ordered by key, then by
 * parent rank. Returns fcclSuccess with plan filled; status when it was not fcclSuccess; fcclRemoteError naming a
 * rank of the same color that failed (its own status, or the unique id); fcclSystemError (out of memory); an
 * all-gather's error (plan->exchangeFailed set). The plan's arrays are freed with fcclSplitPlanFree, whatever the
 * result.
 */
fcclResult_t fcclSplitExchange(struct fcclComm* parent, int color, int key, fcclResult_t status, int childTimeoutMs,
                               struct fcclSplitPlan* plan);

void fcclSplitPlanFree(struct fcclSplitPlan* plan);

/*
 * The child's peer information (nranks entries, malloc'ed into *out) from parent's: member i is parent's rank
 * plan->members[i], renumbered, with its fresh salt; checked as init checks an exchanged one (shared GPUs refused
 * unless allowSharedDevice).
 */
fcclResult_t fcclSplitPeerInfo(const struct fcclComm* parent, const struct fcclSplitPlan* plan, int allowSharedDevice,
                               struct fcclPeerInfo** out);

#endif /* FCCL_COMM_SPLIT_H_ */
