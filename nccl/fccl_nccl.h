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
#define FCCL_NCCL_COLLS 5     /* the first version's five: the length of fcclCalls and ncclCalls */
#define FCCL_NCCL_GATHER 5
#define FCCL_NCCL_SCATTER 6
#define FCCL_NCCL_ALL_COLLS 7 /* every collective counted: the length of fcclCallsAll and ncclCallsAll */

/**
 * What the library did in this process since it was loaded. The struct only grows, by members appended at its end:
 * a caller compiled with an older fccl_nccl.h passes its smaller size and gets the members it knows. Zero it, then
 * set size.
 */
typedef struct {
  size_t size;                          /**< sizeof(fcclNcclStats_t) as compiled by the caller: set it first. On
                                             return, the bytes the library filled (fewer where the library is older
                                             than the caller's header: the members past them are left as they were). */
  uint64_t comms;                       /**< communicators that became ready through it */
  uint64_t commsWithFccl;               /**< of those, the ones fccl was attached to */
  uint64_t fcclCalls[FCCL_NCCL_COLLS];  /**< calls fccl carried, by collective (the first five) */
  uint64_t ncclCalls[FCCL_NCCL_COLLS];  /**< calls of the same collectives the real NCCL carried */
  /* ---- appended in the second version (gather, scatter, pre-multiplied sums, the SM budget) ---- */
  uint64_t fcclCallsAll[FCCL_NCCL_ALL_COLLS]; /**< calls fccl carried, by collective, all of them (the first five
                                                   again, then ncclGather and ncclScatter) */
  uint64_t ncclCallsAll[FCCL_NCCL_ALL_COLLS]; /**< calls of the same collectives the real NCCL carried */
  uint64_t fcclPreMulSumCalls;          /**< of fccl's reductions, those with an op of ncclRedOpCreatePreMulSum */
  uint64_t ncclPreMulSumCalls;          /**< of NCCL's reductions, those with such an op */
  uint64_t preMulSumOps;                /**< ncclRedOpCreatePreMulSum's ops made with an fccl twin */
  uint64_t commsWithBudget;             /**< of commsWithFccl, those whose fccl communicator keeps an SM budget
                                             (ncclConfig_t.minCTAs/maxCTAs, NCCL_MIN_CTAS/NCCL_MAX_CTAS) */
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
