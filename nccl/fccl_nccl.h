/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libfccl-nccl: NCCL's API, with the collectives of communicators fccl's kernels can carry run by fccl
 * (docs/nccl-api.md). Programs use it through nccl.h; this header adds the one call of its own: what it carried.
 */
#ifndef FCCL_NCCL_H_
#define FCCL_NCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The collectives counted, as indices of the arrays below. */
#define FCCL_NCCL_ALLREDUCE 0
#define FCCL_NCCL_ALLGATHER 1
#define FCCL_NCCL_REDUCESCATTER 2
#define FCCL_NCCL_BROADCAST 3 /* ncclBroadcast and ncclBcast */
#define FCCL_NCCL_REDUCE 4
#define FCCL_NCCL_COLLS 5

/** What the library did in this process since it was loaded. */
typedef struct {
  size_t size;                          /**< sizeof(fcclNcclStats_t) as compiled by the caller: set it first. */
  uint64_t comms;                       /**< communicators that became ready through it */
  uint64_t commsWithFccl;               /**< of those, the ones fccl was attached to */
  uint64_t fcclCalls[FCCL_NCCL_COLLS];  /**< calls fccl carried, by collective */
  uint64_t ncclCalls[FCCL_NCCL_COLLS];  /**< calls of the same collectives the real NCCL carried */
} fcclNcclStats_t;

/**
 * Fills stats (fields beyond stats->size are not written). Calls NCCL makes into its own names are not counted.
 * @return 0 (ncclSuccess); 4 (ncclInvalidArgument) for NULL or a size smaller than the first two fields.
 * Thread safety: any thread. Blocks: no.
 */
__attribute__((visibility("default"))) int fcclNcclGetStats(fcclNcclStats_t* stats);

#ifdef __cplusplus
}
#endif

#endif /* FCCL_NCCL_H_ */
