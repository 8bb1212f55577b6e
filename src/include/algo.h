/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which algorithm runs a collective call, and on how many blocks (src/core/coll/algo.c): pure functions of the call's
 * size, the rank count and whether the buffers are registered, so that every rank makes the same choice. The
 * thresholds are one table; docs/collectives.md explains each algorithm.
 */
#ifndef FCCL_ALGO_H_
#define FCCL_ALGO_H_

#include "device_host.h"
#include "fccl.h"

#include <stdint.h>
#include <string.h>

/* What the choice depends on; identical on every rank for one call (registration must be symmetric). */
typedef struct {
  uint64_t bytes;      /* count * element size, > 0 */
  int nranks;
  int registered;      /* sendbuf and recvbuf both inside registered buffers */
  int inPlace;
  int smCount;         /* multiprocessors of the device */
  uint64_t llBytes;    /* LL capacity per writer (fcclSlotLayout.llBytes) */
  uint64_t chunkBytes; /* staging capacity per writer and parity (fcclSlotLayout.chunkBytes) */
  uint64_t ll128Bytes; /* LL128 capacity per writer (fcclSlotLayout.ll128Lines x FCCL_LL128_LINE_DATA) */
  int ll128Auto;       /* the table may choose LL128 (FCCL_LL128) */
  /* 2 ranks, registered, out of place: the two-shot's reduce-scatter by the copy engines from this size (0: never;
   * FCCL_COPY_SCATTER_MIN): they move more than SM stores with both directions busy, after a barrier and a copy
   * that cost a fixed time per call (docs/perf/notes/copy-engines.md). */
  uint64_t copyScatterMin;
  /* All-gather and broadcast on registered buffers: by the copy engines from this block size (0: never, only when
   * forced; FCCL_COPY_MOVE_MIN). fcclAlgoQueryMake leaves it 0. */
  uint64_t copyMoveMin;
  int forced;          /* -1: choose; else the algorithm to use (an fcclDevKernel_t or FCCL_FORM_*) */
  int strict;          /* forced but not applicable: 1 -> fcclInvalidArgument, 0 -> choose instead */
  /* The communicator's SM budget (fcclConfig_t.minCTAs and maxCTAs, FCCL_MIN_CTAS and FCCL_MAX_CTAS; 0: none): every
   * grid is clamped by fcclCtaClamp. fcclAlgoQueryMake leaves both 0. */
  int minCtas;
  int maxCtas;
} fcclAlgoQuery;

/* A query for the automatic choice (forced -1, strict 0), its capacities (LL, LL128, staging) from the slot
 * layout. Callers that force an algorithm set forced and strict afterwards. */
static inline fcclAlgoQuery fcclAlgoQueryMake(uint64_t bytes, int nranks, int registered, int inPlace, int smCount,
                                              const fcclSlotLayout* layout, int ll128Auto, uint64_t copyScatterMin) {
  fcclAlgoQuery query;
  memset(&query, 0, sizeof(query));
  query.bytes = bytes;
  query.nranks = nranks;
  query.registered = registered;
  query.inPlace = inPlace;
  query.smCount = smCount;
  query.llBytes = layout->llBytes;
  query.ll128Bytes = layout->ll128Lines * FCCL_LL128_LINE_DATA;
  query.chunkBytes = layout->chunkBytes;
  query.ll128Auto = ll128Auto;
  query.copyScatterMin = copyScatterMin;
  query.forced = -1;
  query.strict = 0;
  return query;
}

typedef struct {
  int algo; /* an fcclDevKernel_t, or a form with no kernel of its own (FCCL_FORM_*; device_host.h) */
  int blocks;
  int threads;
  uint64_t roundUnits; /* staged two-shot: 16-byte units per owner and round */
  fcclScatter_t scatter; /* registered two-shot: how the reduce-scatter moves the data */
} fcclAlgoChoice;

/*
 * Picks the algorithm and grid (table in algo.c, docs/collectives.md). fcclInvalidArgument (with a message) when
 * a strict forced algorithm cannot run this call, or when the call needs more steps than a signal can count
 * (a count far beyond any device memory with a tiny FCCL_STAGING_BYTES). Pure: no CUDA, no environment.
 */
fcclResult_t fcclAlgoSelect(const fcclAlgoQuery* query, fcclAlgoChoice* choice);

/* Whether algo can run the call described by query (0 or 1); why receives a reason when it cannot. */
int fcclAlgoApplicable(fcclDevKernel_t algo, const fcclAlgoQuery* query, const char** why);

/* "ll", "oneshot_push", ..., "allgather_copy", ..., "barrier": the name of an algorithm or kernel
 * (kernel_list.h); "unknown" otherwise. */
const char* fcclAlgoName(int algo);

/*
 * A collective's forms, generated from its rows of kernel_list.h: the table form -> algorithm, and the FCCL_*ALGO
 * value that forces each form. The forms of all-gather, reduce-scatter and broadcast are FCCL_MOVE_*; the
 * all-reduce's are its algorithms (FCCL_ALGO_LL ...), which FCCL_ALGO names and fcclAllReduceAlgo takes directly.
 */
typedef struct {
  const char* collective;      /* "allreduce", "allgather", "reducescatter", "broadcast" (fccl-info --collective) */
  int count;                   /* the forms are [0, count) */
  const int* algos;            /* [form]: its algorithm (an fcclDevKernel_t, or FCCL_FORM_* with no kernel) */
  const char* const* requests; /* [form]: the FCCL_*ALGO value that forces it: "ll", "oneshot_push", "copy" ... */
  const char* requestNames;    /* every value the collective's FCCL_*ALGO takes, for messages: "auto, ll, ..." */
} fcclAlgoSet;

extern const fcclAlgoSet fcclAllReduceAlgos;
extern const fcclAlgoSet fcclAllGatherAlgos;
extern const fcclAlgoSet fcclReduceScatterAlgos;
extern const fcclAlgoSet fcclBroadcastAlgos;
extern const fcclAlgoSet fcclReduceAlgos;
extern const fcclAlgoSet fcclGatherAlgos;
extern const fcclAlgoSet fcclScatterAlgos;
/* fcclAllGatherV and fcclReduceScatterV: the all-gather's and the reduce-scatter's forms with a count per rank
 * (LL, direct, staged), chosen by fcclMoveSelect from the largest block; FCCL_ALLGATHER_ALGO and
 * FCCL_REDUCESCATTER_ALGO force them too. */
extern const fcclAlgoSet fcclAllGatherVAlgos;
extern const fcclAlgoSet fcclReduceScatterVAlgos;

/* The form of algo in set (its index in set->algos); -1 when algo is not one of set's. */
int fcclAlgoSetForm(const fcclAlgoSet* set, int algo);

/* The set algo is a form of; NULL for the kernels outside the sets (the barrier, the fused norm) and for anything
 * that is no algorithm. */
const fcclAlgoSet* fcclAlgoSetOf(int algo);

/* "pull", "push", "inbox" or "copy" ("unknown" otherwise): how the registered two-shot moves its reduce-scatter
 * (fcclScatter_t). */
const char* fcclScatterName(int scatter);

/* FCCL_ALGO values: "" or "auto" -> FCCL_ALGO_REQUEST_AUTO, "oneshot", "twoshot" (the registered or staged
 * variant by the buffers), or an algorithm's exact request (fcclAllReduceAlgos: "ll", "oneshot_push", ...) -> that
 * algorithm; -1 for anything else. */
#define FCCL_ALGO_REQUEST_AUTO 100
#define FCCL_ALGO_REQUEST_ONESHOT 101
#define FCCL_ALGO_REQUEST_TWOSHOT 102
int fcclAlgoParseRequest(const char* name);

/* The forced algorithm for a request and this call's registration (-1 for auto). */
int fcclAlgoResolveRequest(int request, int registered);

/* Whether a call needs no kernel: one rank and no forced algorithm (forced as for fcclAlgoQuery.forced). Every op
 * of one contribution is the identity (avg divides by 1), so the call is a copy, or nothing in place. */
int fcclAlgoIsCopy(int nranks, int forced);

/*
 * Every collective but the all-reduce (all-gather, reduce-scatter, broadcast, reduce, gather, scatter): the forms of
 * their sets (fcclAllGatherAlgos, ...), in this order in kernel_list.h. All have LL, direct and staged; all-gather
 * and broadcast also copy (the copy engines between two barriers, registered buffers). query->bytes is one block's
 * (a rank's contribution, a rank's result, the broadcast or reduce message, a gathered or scattered block);
 * query->forced is -1 or one of set's algorithms. The table and the grid: algo.c; fcclInvalidArgument as for
 * fcclAlgoSelect.
 */
enum { FCCL_MOVE_LL = 0, FCCL_MOVE_DIRECT = 1, FCCL_MOVE_STAGED = 2, FCCL_MOVE_COPY = 3, FCCL_MOVE_REQUEST_AUTO = 100 };
fcclResult_t fcclMoveSelect(const fcclAlgoQuery* query, const fcclAlgoSet* set, fcclAlgoChoice* choice);

/* FCCL_ALLGATHER_ALGO and its kin: "" or "auto" -> FCCL_MOVE_REQUEST_AUTO, one of set->requests ("ll", "direct",
 * "staged", "copy") -> its form; -1 for anything else (set->requestNames lists what it takes). */
int fcclMoveParseRequest(const char* name, const fcclAlgoSet* set);

/* The forced algorithm for a parsed request (-1 for auto). */
int fcclMoveResolveRequest(int request, const fcclAlgoSet* set);

/* Whether registered buffers would run another form than plain ones for query (registered set): direct or copy.
 * The graph-registration test. */
int fcclMoveRegisteredPays(const fcclAlgoQuery* query, const fcclAlgoSet* set);

/*
 * The SM budget (docs/collectives.md#sm-budget): a kernel's grid of `blocks` blocks, chosen for its work with at most
 * `most` blocks (one per SM, the kernel's own bound), clamped to at most maxCtas blocks and raised to at least
 * minCtas (never past most nor maxCtas); 0 for either: no bound. At least 1. Pure: every rank clamps alike, as long
 * as the budget is the same on every rank (checked at init).
 */
int fcclCtaClamp(int blocks, int most, int minCtas, int maxCtas);

/*
 * fcclAllReduceAddRMSNorm's form (FCCL_FUSED_ONESHOT, FCCL_FUSED_TWOSHOT; docs/fused.md). FCCL_FUSED_ALGO: "" or
 * "auto" -> FCCL_FUSED_REQUEST_AUTO, "oneshot", "twoshot" -> the form; -1 for anything else.
 */
#define FCCL_FUSED_REQUEST_AUTO 100
int fcclFusedParseRequest(const char* name);

/* "oneshot", "twoshot" ("unknown" otherwise). */
const char* fcclFusedFormName(int form);

/*
 * The automatic choice of form for a call whose all-reduce part is query (bytes: tokens x the row's bytes of
 * datatype; registered: the input's registration): two-shot from the size where fcclAllReduce itself runs a
 * two-shot algorithm on the same query, one-shot below and for one rank. The sizes where the fused forms cross
 * are still to be measured (docs/fused.md#choosing-the-form); this is the conservative guess. Pure.
 */
int fcclFusedAutoForm(const fcclAlgoQuery* query);

#endif /* FCCL_ALGO_H_ */
