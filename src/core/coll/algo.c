/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which algorithm runs a collective call, and on how many blocks. Pure functions of the call's size, the rank
 * count and whether the buffers are registered, so every rank makes the same choice. The thresholds are one table;
 * docs/collectives.md explains each algorithm, docs/perf/notes/selection.md how each threshold was measured. The
 * names and each collective's set of forms are generated here from kernel_list.h.
 */
#include "algo.h"

#include "check.h"
#include "debug.h"
#include "tuning.h"

#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_COLL

/*
 * Up to llMax bytes: LL (one hop, data carries its flags, 2x the bytes on the wire). Then one-shot up to
 * oneshotMax (plain: push through staging; registered: pull in place; one flag hop, (n - 1) x the bytes), and
 * two-shot beyond (2 (n - 1) / n x the bytes, two flag hops). One-shot moves fewer bytes than two-shot only for
 * n = 2, hence the smaller limits for more ranks. For 2 ranks LL is fastest up to its whole area (256 KiB), plain
 * one-shot up to 8 MiB (it needs the message to fit one staging chunk, else two-shot runs), and with registered
 * buffers two-shot is faster than one-shot from 512 KiB, below which LL wins: registered one-shot is never chosen.
 * LL128 beats all of them from 512 KiB to 1 MiB, plain and registered, and loses from 2 MiB and below 256 KiB.
 * The rows for 4 and 8 ranks are estimates until they are measured on as many GPUs, so they have no LL128.
 */
static const struct {
  int maxRanks;
  uint64_t llMax;
  uint64_t oneshotMaxPlain;
  uint64_t oneshotMaxRegistered;
  uint64_t ll128Max;      /* LL128 after LL up to this size, plain or registered */
  uint64_t pushScatterMin; /* registered two-shot out of place: reduce-scatter by push from this size (0: never);
                            * by the copy engines from fcclAlgoQuery.copyScatterMin (FCCL_COPY_SCATTER_MIN) */
} algoTable[] = {
    {2, 256u << 10, 8u << 20, 0, 1u << 20, FCCL_PUSH_SCATTER_MIN_2RANKS},
    {4, 32u << 10, 256u << 10, 256u << 10, 0, 0},
    {8, 16u << 10, 128u << 10, 128u << 10, 0, 0},
};

/* LL blocks: FCCL_LL_THREADS threads (tuning.h); at most 128 blocks: the whole LL area of 2 ranks (32768 packets)
 * in one pass. */
#define FCCL_LL_MAX_PACKETS_PER_PASS 32768

/* ---- the names and the collectives' sets, generated from kernel_list.h ---------------------------------------- */

#define FCCL_NAME4_(id, request, name, kernel) [id] = name,
#define FCCL_NAME3_(id, request, name) [id] = name,
#define FCCL_NAME2_(id, name) [id] = name,
static const char* const algoNames[FCCL_ALGO_IDS] = {FCCL_KERNEL_LIST(FCCL_NAME4_, FCCL_NAME3_, FCCL_NAME2_)};

const char* fcclAlgoName(int algo) {
  return algo >= 0 && algo < FCCL_ALGO_IDS && algoNames[algo] != NULL ? algoNames[algo] : "unknown";
}

/* A set: its rows' algorithms and requests in list order, and "auto" + aliases + every request for messages. */
#define FCCL_SET_ALGO4_(id, request, name, kernel) id,
#define FCCL_SET_ALGO3_(id, request, name) id,
#define FCCL_SET_REQUEST4_(id, request, name, kernel) request,
#define FCCL_SET_REQUEST3_(id, request, name) request,
#define FCCL_SET_LISTED4_(id, request, name, kernel) ", " request
#define FCCL_SET_LISTED3_(id, request, name) ", " request
#define FCCL_DEFINE_SET_(set, collective, aliases, FORMS)                                                \
  static const int set##Forms_[] = {FORMS(FCCL_SET_ALGO4_, FCCL_SET_ALGO3_)};                            \
  static const char* const set##Requests_[] = {FORMS(FCCL_SET_REQUEST4_, FCCL_SET_REQUEST3_)};           \
  const fcclAlgoSet set = {collective, (int)(sizeof(set##Forms_) / sizeof(set##Forms_[0])), set##Forms_, \
                           set##Requests_, "auto" aliases FORMS(FCCL_SET_LISTED4_, FCCL_SET_LISTED3_)};

FCCL_DEFINE_SET_(fcclAllReduceAlgos, "allreduce", ", oneshot, twoshot", FCCL_ALLREDUCE_FORMS)
FCCL_DEFINE_SET_(fcclAllGatherAlgos, "allgather", "", FCCL_ALLGATHER_FORMS)
FCCL_DEFINE_SET_(fcclReduceScatterAlgos, "reducescatter", "", FCCL_REDUCESCATTER_FORMS)
FCCL_DEFINE_SET_(fcclBroadcastAlgos, "broadcast", "", FCCL_BROADCAST_FORMS)
FCCL_DEFINE_SET_(fcclReduceAlgos, "reduce", "", FCCL_REDUCE_FORMS)
FCCL_DEFINE_SET_(fcclGatherAlgos, "gather", "", FCCL_GATHER_FORMS)
FCCL_DEFINE_SET_(fcclScatterAlgos, "scatter", "", FCCL_SCATTER_FORMS)

FCCL_DEFINE_SET_(fcclAllGatherVAlgos, "allgatherv", "", FCCL_ALLGATHERV_FORMS)
FCCL_DEFINE_SET_(fcclReduceScatterVAlgos, "reducescatterv", "", FCCL_REDUCESCATTERV_FORMS)

static const fcclAlgoSet* const algoSets[] = {&fcclAllReduceAlgos, &fcclAllGatherAlgos,  &fcclReduceScatterAlgos,
                                              &fcclBroadcastAlgos, &fcclReduceAlgos,     &fcclGatherAlgos,
                                              &fcclScatterAlgos,   &fcclAllGatherVAlgos, &fcclReduceScatterVAlgos};

int fcclAlgoSetForm(const fcclAlgoSet* set, int algo) {
  for (int form = 0; set != NULL && form < set->count; form++)
    if (set->algos[form] == algo) return form;
  return -1;
}

const fcclAlgoSet* fcclAlgoSetOf(int algo) {
  for (size_t i = 0; i < sizeof(algoSets) / sizeof(algoSets[0]); i++)
    if (fcclAlgoSetForm(algoSets[i], algo) >= 0) return algoSets[i];
  return NULL;
}

/* The form of set whose FCCL_*ALGO value is name; -1 for none. */
static int setParse(const fcclAlgoSet* set, const char* name) {
  for (int form = 0; form < set->count; form++)
    if (strcmp(name, set->requests[form]) == 0) return form;
  return -1;
}

const char* fcclScatterName(int scatter) {
  switch (scatter) {
    case FCCL_SCATTER_PULL: return "pull";
    case FCCL_SCATTER_PUSH: return "push";
    case FCCL_SCATTER_INBOX: return "inbox";
    case FCCL_SCATTER_COPY: return "copy";
    default: return "unknown";
  }
}

int fcclAlgoParseRequest(const char* name) {
  if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0) return FCCL_ALGO_REQUEST_AUTO;
  if (strcmp(name, "oneshot") == 0) return FCCL_ALGO_REQUEST_ONESHOT;
  if (strcmp(name, "twoshot") == 0) return FCCL_ALGO_REQUEST_TWOSHOT;
  const int form = setParse(&fcclAllReduceAlgos, name);
  return form >= 0 ? fcclAllReduceAlgos.algos[form] : -1;
}

int fcclAlgoResolveRequest(int request, int registered) {
  switch (request) {
    case FCCL_ALGO_REQUEST_ONESHOT: return registered ? FCCL_ALGO_ONESHOT_PULL : FCCL_ALGO_ONESHOT_PUSH;
    case FCCL_ALGO_REQUEST_TWOSHOT: return registered ? FCCL_ALGO_TWOSHOT_REG : FCCL_ALGO_TWOSHOT_STAGED;
    default: return fcclAlgoSetForm(&fcclAllReduceAlgos, request) >= 0 ? request : -1;
  }
}

int fcclAlgoIsCopy(int nranks, int forced) { return nranks == 1 && forced < 0; }

static uint64_t divUp(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static int clampInt(uint64_t value, int lo, int hi) {
  if (value < (uint64_t)lo) return lo;
  if (value > (uint64_t)hi) return hi;
  return (int)value;
}

int fcclCtaClamp(int blocks, int most, int minCtas, int maxCtas) {
  if (maxCtas > 0 && maxCtas < most) most = maxCtas;
  if (most < 1) most = 1;
  if (minCtas > blocks) blocks = minCtas < most ? minCtas : most;
  return blocks < 1 ? 1 : blocks > most ? most : blocks;
}

/* Blocks of perBlock threads for `threads` threads of work: at least one, at most one per SM and at most cap, within
 * the communicator's SM budget. */
static int blocksFor(const fcclAlgoQuery* q, uint64_t threads, int perBlock, int cap) {
  int maxBlocks = q->smCount < cap ? q->smCount : cap;
  if (maxBlocks < 1) maxBlocks = 1;
  return fcclCtaClamp(clampInt(divUp(threads, (uint64_t)perBlock), 1, maxBlocks), maxBlocks, q->minCtas, q->maxCtas);
}

/* Blocks of the data kernels: one thread per 16-byte unit of the largest per-block share, up to one per SM. */
static int dataBlocks(const fcclAlgoQuery* q, uint64_t unitsPerGrid) {
  return blocksFor(q, unitsPerGrid, FCCL_DEVICE_THREADS, FCCL_DEVICE_MAX_BLOCKS);
}

/* Units per owner in a round of the staged two-shot: one chunk per writer and parity (allreduce_twoshot_staged.cu). */
static uint64_t stagedRoundUnits(const fcclAlgoQuery* q) { return q->chunkBytes / FCCL_UNIT_BYTES; }

static size_t tableRow(const fcclAlgoQuery* q) {
  size_t row = 0;
  while (row + 1 < sizeof(algoTable) / sizeof(algoTable[0]) && q->nranks > algoTable[row].maxRanks) row++;
  return row;
}

static void grid(fcclDevKernel_t algo, const fcclAlgoQuery* q, fcclAlgoChoice* c) {
  const uint64_t units = divUp(q->bytes, FCCL_UNIT_BYTES);
  c->algo = algo;
  c->scatter = FCCL_SCATTER_PULL;
  if (algo == FCCL_ALGO_TWOSHOT_REG && q->nranks == 2 && !q->inPlace) {
    /* Only 2 ranks: the peer's units then go to the one place of the owner's output nothing else writes. */
    const uint64_t pushScatterMin = algoTable[tableRow(q)].pushScatterMin;
    if (q->copyScatterMin > 0 && q->bytes >= q->copyScatterMin)
      c->scatter = FCCL_SCATTER_COPY;
    else if (pushScatterMin > 0 && q->bytes >= pushScatterMin)
      /* Into the owner's inbox while its share fits one staging chunk: no "ready" to wait for first. */
      c->scatter = divUp(units, 2) * FCCL_UNIT_BYTES <= q->chunkBytes ? FCCL_SCATTER_INBOX : FCCL_SCATTER_PUSH;
  }
  c->threads = FCCL_DEVICE_THREADS;
  c->roundUnits = algo == FCCL_ALGO_TWOSHOT_STAGED ? stagedRoundUnits(q) : 0;
  switch (algo) {
    case FCCL_ALGO_LL: {
      const uint64_t packets = divUp(q->bytes, FCCL_LL_DATA_BYTES);
      c->blocks = blocksFor(q, packets, FCCL_LL_THREADS, FCCL_LL_MAX_PACKETS_PER_PASS / FCCL_LL_THREADS);
      c->threads = clampInt(divUp(packets, 32) * 32, 32, FCCL_LL_THREADS);
      break;
    }
    case FCCL_ALGO_LL128: {
      /* A warp moves 4 lines per instruction; blocks of FCCL_LL128_THREADS, one per SM at most. */
      const uint64_t threads = divUp(divUp(q->bytes, FCCL_LL128_LINE_DATA), 4) * 32;
      c->blocks = blocksFor(q, threads, FCCL_LL128_THREADS, FCCL_DEVICE_MAX_BLOCKS);
      c->threads = clampInt(threads, 32, FCCL_LL128_THREADS);
      break;
    }
    case FCCL_ALGO_ONESHOT_PUSH:
    case FCCL_ALGO_ONESHOT_PULL: c->blocks = dataBlocks(q, units); break;
    case FCCL_ALGO_TWOSHOT_STAGED: {
      uint64_t perOwner = divUp(units, (uint64_t)q->nranks);
      if (c->roundUnits > 0 && perOwner > c->roundUnits) perOwner = c->roundUnits;
      c->blocks = dataBlocks(q, perOwner);
      break;
    }
    case FCCL_ALGO_TWOSHOT_REG:
    default: c->blocks = dataBlocks(q, divUp(units, (uint64_t)q->nranks)); break;
  }
}

int fcclAlgoApplicable(fcclDevKernel_t algo, const fcclAlgoQuery* q, const char** why) {
  const char* reason = NULL;
  const uint64_t units = divUp(q->bytes, FCCL_UNIT_BYTES);
  switch (algo) {
    case FCCL_ALGO_LL:
      if (q->bytes > q->llBytes) reason = "the message is larger than the LL area";
      break;
    case FCCL_ALGO_LL128:
      if (q->nranks < 2)
        reason = "one rank has no LL128 area";
      else if (q->bytes > q->ll128Bytes)
        reason = "the message is larger than the LL128 area";
      break;
    case FCCL_ALGO_ONESHOT_PUSH:
      if (q->bytes > q->chunkBytes) reason = "the message is larger than one staging chunk (FCCL_STAGING_BYTES)";
      break;
    case FCCL_ALGO_ONESHOT_PULL:
      if (!q->registered) {
        reason = "the buffers are not registered";
      } else if (q->inPlace) {
        fcclAlgoChoice c;
        grid(algo, q, &c);
        if (divUp(units, (uint64_t)c.blocks * (uint64_t)c.threads) > FCCL_MAX_STEPS)
          reason = "the message needs too many in-place passes";
      }
      break;
    case FCCL_ALGO_TWOSHOT_STAGED: {
      const uint64_t roundUnits = stagedRoundUnits(q);
      if (roundUnits == 0)
        reason = "there is no staging (FCCL_STAGING_BYTES too small)";
      else if (divUp(units, roundUnits * (uint64_t)q->nranks) > FCCL_MAX_STEPS)
        reason = "the message needs too many staging rounds (count too large for FCCL_STAGING_BYTES)";
      break;
    }
    case FCCL_ALGO_TWOSHOT_REG:
      if (!q->registered) reason = "the buffers are not registered";
      break;
    default: reason = "unknown algorithm"; break;
  }
  if (why) *why = reason;
  return reason == NULL;
}

static fcclDevKernel_t tableChoice(const fcclAlgoQuery* q) {
  const size_t row = tableRow(q);
  if (q->bytes <= algoTable[row].llMax && fcclAlgoApplicable(FCCL_ALGO_LL, q, NULL)) return FCCL_ALGO_LL;
  if (q->ll128Auto && q->bytes <= algoTable[row].ll128Max && fcclAlgoApplicable(FCCL_ALGO_LL128, q, NULL))
    return FCCL_ALGO_LL128;
  if (q->registered) {
    if (q->bytes <= algoTable[row].oneshotMaxRegistered && fcclAlgoApplicable(FCCL_ALGO_ONESHOT_PULL, q, NULL))
      return FCCL_ALGO_ONESHOT_PULL;
    return FCCL_ALGO_TWOSHOT_REG;
  }
  if (q->bytes <= algoTable[row].oneshotMaxPlain && fcclAlgoApplicable(FCCL_ALGO_ONESHOT_PUSH, q, NULL))
    return FCCL_ALGO_ONESHOT_PUSH;
  return FCCL_ALGO_TWOSHOT_STAGED;
}

fcclResult_t fcclAlgoSelect(const fcclAlgoQuery* q, fcclAlgoChoice* choice) {
  if (q == NULL || choice == NULL || q->nranks < 1 || q->nranks > FCCL_DEVICE_MAX_RANKS || q->bytes == 0)
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_COLL, "algorithm selection called with an invalid query");
  fcclDevKernel_t algo;
  if (q->forced >= 0) {
    const char* why = NULL;
    if (fcclAlgoSetForm(&fcclAllReduceAlgos, q->forced) < 0)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "unknown all-reduce algorithm %d", q->forced);
    if (fcclAlgoApplicable((fcclDevKernel_t)q->forced, q, &why)) {
      algo = (fcclDevKernel_t)q->forced;
    } else if (q->strict) {
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "all-reduce algorithm %s cannot run %llu bytes: %s",
                        fcclAlgoName(q->forced), (unsigned long long)q->bytes, why);
    } else {
      algo = tableChoice(q);
      FCCL_TRACE(FCCL_SUBSYS_COLL, "FCCL_ALGO=%s cannot run %llu bytes (%s); using %s", fcclAlgoName(q->forced),
                 (unsigned long long)q->bytes, why, fcclAlgoName(algo));
    }
  } else {
    algo = tableChoice(q);
  }
  const char* why = NULL;
  if (!fcclAlgoApplicable(algo, q, &why))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "all-reduce of %llu bytes cannot run: %s",
                      (unsigned long long)q->bytes, why);
  grid(algo, q, choice);
  return fcclSuccess;
}

/* ---- all-gather, reduce-scatter, broadcast, reduce, gather, scatter -----------------------------------------------
 * One table for them all: a block of up to the all-reduce's LL limit for the rank count (and the LL area) goes by
 * LL packets; beyond, registered buffers are moved directly (all-gather and broadcast: by the copy engines from
 * fcclAlgoQuery.copyMoveMin, FCCL_COPY_MOVE_MIN, which is 0 until two GPUs have measured where the copies pay),
 * plain ones through staging in rounds of one chunk. */

int fcclMoveParseRequest(const char* name, const fcclAlgoSet* set) {
  if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0) return FCCL_MOVE_REQUEST_AUTO;
  return setParse(set, name);
}

int fcclMoveResolveRequest(int request, const fcclAlgoSet* set) {
  return request >= 0 && request < set->count ? set->algos[request] : -1;
}

/* Rounds of the staged form, and whether each still fits a signal's steps (+2: the broadcast's ready step). */
static uint64_t moveRounds(const fcclAlgoQuery* q) {
  return divUp(divUp(q->bytes, FCCL_UNIT_BYTES), stagedRoundUnits(q));
}

static int moveApplicable(int form, const fcclAlgoQuery* q, const char** why) {
  const char* reason = NULL;
  switch (form) {
    case FCCL_MOVE_LL:
      if (q->bytes > q->llBytes) reason = "the block is larger than the LL area";
      break;
    case FCCL_MOVE_DIRECT:
      if (!q->registered) reason = "the buffers are not registered";
      break;
    case FCCL_MOVE_COPY:
      /* The copies write into the peers' outputs: those must be mapped here. */
      if (!q->registered) reason = "the buffers are not registered";
      break;
    case FCCL_MOVE_STAGED:
      if (stagedRoundUnits(q) == 0)
        reason = "there is no staging (FCCL_STAGING_BYTES too small)";
      else if (moveRounds(q) + 2 > FCCL_MAX_STEPS)
        reason = "the block needs too many staging rounds (count too large for FCCL_STAGING_BYTES)";
      break;
    default: reason = "unknown algorithm"; break;
  }
  if (why) *why = reason;
  return reason == NULL;
}

fcclResult_t fcclMoveSelect(const fcclAlgoQuery* q, const fcclAlgoSet* set, fcclAlgoChoice* c) {
  if (q == NULL || set == NULL || c == NULL || q->nranks < 1 || q->nranks > FCCL_DEVICE_MAX_RANKS || q->bytes == 0)
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_COLL, "algorithm selection called with an invalid query");
  int form = -1;
  if (q->forced >= 0) {
    const int wanted = fcclAlgoSetForm(set, q->forced);
    const char* why = NULL;
    if (wanted < 0)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "algorithm %d (%s) is not one of this collective's",
                        q->forced, fcclAlgoName(q->forced));
    if (moveApplicable(wanted, q, &why))
      form = wanted;
    else if (q->strict)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "algorithm %s cannot run %llu bytes: %s",
                        fcclAlgoName(q->forced), (unsigned long long)q->bytes, why);
    else
      FCCL_TRACE(FCCL_SUBSYS_COLL, "%s cannot run %llu bytes (%s); choosing by size", fcclAlgoName(q->forced),
                 (unsigned long long)q->bytes, why);
  }
  if (form < 0) {
    if (q->bytes <= algoTable[tableRow(q)].llMax && moveApplicable(FCCL_MOVE_LL, q, NULL))
      form = FCCL_MOVE_LL;
    else if (q->registered && set->count > FCCL_MOVE_COPY && q->copyMoveMin > 0 && q->bytes >= q->copyMoveMin)
      form = FCCL_MOVE_COPY;
    else
      form = q->registered ? FCCL_MOVE_DIRECT : FCCL_MOVE_STAGED;
  }
  const char* why = NULL;
  if (!moveApplicable(form, q, &why))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_COLL, "a block of %llu bytes cannot be moved: %s",
                      (unsigned long long)q->bytes, why);
  memset(c, 0, sizeof(*c));
  c->algo = set->algos[form];
  c->scatter = FCCL_SCATTER_PULL;
  c->threads = FCCL_DEVICE_THREADS;
  const uint64_t units = divUp(q->bytes, FCCL_UNIT_BYTES);
  switch (form) {
    case FCCL_MOVE_LL: {
      const uint64_t packets = divUp(q->bytes, FCCL_LL_DATA_BYTES);
      c->blocks = blocksFor(q, packets, FCCL_LL_THREADS, FCCL_LL_MAX_PACKETS_PER_PASS / FCCL_LL_THREADS);
      c->threads = clampInt(divUp(packets, 32) * 32, 32, FCCL_LL_THREADS);
      break;
    }
    case FCCL_MOVE_DIRECT: c->blocks = dataBlocks(q, units); break;
    case FCCL_MOVE_COPY: /* the grid of its two barrier kernels; the copies take no grid */
      c->blocks = 1;
      c->threads = FCCL_DEVICE_BARRIER_THREADS;
      break;
    default:
      c->roundUnits = stagedRoundUnits(q);
      c->blocks = dataBlocks(q, units < c->roundUnits ? units : c->roundUnits);
      break;
  }
  return fcclSuccess;
}

int fcclMoveRegisteredPays(const fcclAlgoQuery* query, const fcclAlgoSet* set) {
  fcclAlgoChoice choice;
  if (fcclMoveSelect(query, set, &choice) != fcclSuccess) return 0;
  const int form = fcclAlgoSetForm(set, choice.algo);
  return form == FCCL_MOVE_DIRECT || form == FCCL_MOVE_COPY;
}

/* ---- fcclAllReduceAddRMSNorm: one-shot or two-shot ------------------------------------------------------------ */

int fcclFusedParseRequest(const char* name) {
  if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0) return FCCL_FUSED_REQUEST_AUTO;
  if (strcmp(name, "oneshot") == 0) return FCCL_FUSED_ONESHOT;
  if (strcmp(name, "twoshot") == 0) return FCCL_FUSED_TWOSHOT;
  return -1;
}

const char* fcclFusedFormName(int form) {
  switch (form) {
    case FCCL_FUSED_ONESHOT: return "oneshot";
    case FCCL_FUSED_TWOSHOT: return "twoshot";
    default: return "unknown";
  }
}

int fcclFusedAutoForm(const fcclAlgoQuery* query) {
  if (query == NULL || query->nranks < 2 || query->bytes == 0) return FCCL_FUSED_ONESHOT;
  /* The table's own choice, FCCL_ALGO aside: the all-reduce's automatic switch to two-shot. */
  const fcclDevKernel_t algo = tableChoice(query);
  return algo == FCCL_ALGO_TWOSHOT_STAGED || algo == FCCL_ALGO_TWOSHOT_REG ? FCCL_FUSED_TWOSHOT : FCCL_FUSED_ONESHOT;
}
