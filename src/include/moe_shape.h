/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Mixture-of-experts dispatch and combine (fcclMoeDispatch, fcclMoeCombine; docs/moe.md): the sizes and offsets that
 * host C (src/core/coll/moe.c), the kernels (src/device/moe_*.cu) and the tests' host reference share, and the plain
 * arguments of a launch. Pure: one function of the layout's configuration and the rank count, the same on every rank.
 *
 * Every rank has two buffers per layout:
 *   workspace (peer memory: fcclMemAlloc, registered with every rank)
 *     flags     pads [FCCL_MOE_FLAG_KINDS][FCCL_DEVICE_MAX_RANKS writers] of FCCL_PAD_BYTES: {value, writer's tag}
 *     counts    int32 [nranks sources][countStride]: per local expert the rows the source sends for it, then the
 *               slots it filled (FCCL_MOE_COUNT_SENT) and its first invalid routing entry (FCCL_MOE_COUNT_BAD_*)
 *     staging   dispatch: slots [nranks sources][maxTokens] of dispatchPitch bytes: a token's routing (meta),
 *               then its row (and FP8 scales); combine: rows [maxTokens x topk] of combinePitch bytes, one per
 *               (token, slot of its top-k) of this rank's tokens. The two share the bytes: each call waits until
 *               the receiver has read the previous call's (the FREE flag).
 *   scratch (this rank's device memory only)
 *     header       fcclMoeScratchHeader: the last call's epoch, the grid barrier, the first invalid entry
 *     blockCounts  int32 [FCCL_DEVICE_MAX_BLOCKS][blockCountsStride]: per block of the dispatch, its tokens' rows
 *                  per expert, then its tokens per destination rank
 *     entryExpert  int32 [maxTokens x topk]: the validated expert of each routing entry (-1: none)
 *     entryIntra   int32 [maxTokens x topk]: the entry's rank among its block's entries of the same expert
 *     tokenSlot    int32 [maxTokens][FCCL_DEVICE_MAX_RANKS]: the token's rank among its block's tokens per rank
 *     expertStart  int32 [localExperts]: the first row of each local expert (the last dispatch's)
 *     expertCount  int32 [localExperts]: its rows
 *     rowSource    int32 [recvRows]: where each received row's expert output goes back: (slot << 3) | source rank,
 *                  slot = token x topk + j in the source's combine staging
 */
#ifndef FCCL_MOE_SHAPE_H_
#define FCCL_MOE_SHAPE_H_

#include "device_host.h"

#include <stdint.h>

/* Limits of a layout's configuration (fcclMoeConfig_t). */
#define FCCL_MOE_MAX_TOPK 8
#define FCCL_MOE_MAX_EXPERTS 1024
#define FCCL_MOE_MAX_TOKENS (1u << 20)
#define FCCL_MOE_MAX_HIDDEN (1u << 16)
#define FCCL_MOE_MAX_ALIGNMENT 1024
/* FP8 elements per fp32 scale. */
#define FCCL_MOE_SCALE_BLOCK 128
/* Threads per block of both kernels, and the warps they make. */
#define FCCL_MOE_THREADS 512
#define FCCL_MOE_WARPS (FCCL_MOE_THREADS / 32)
/* Blocks of a call that does not ask for a number (and whose layout does not either), at most the SM count. */
#define FCCL_MOE_DEFAULT_BLOCKS 32

/* The workspace's flag kinds: pads [kind][writer]. */
enum {
  FCCL_MOE_FLAG_COUNTS = 0, /* dispatch: the writer's counts row is in our counts area */
  FCCL_MOE_FLAG_DATA = 1,   /* dispatch: the writer's slots are in our staging */
  FCCL_MOE_FLAG_RESULT = 2, /* combine: the writer's expert outputs for our tokens are in our staging */
  FCCL_MOE_FLAG_FREE = 3,   /* the writer has read its staging of the call whose epoch the pad holds */
  FCCL_MOE_FLAG_KINDS = 4
};
#define FCCL_MOE_FLAGS_BYTES (FCCL_MOE_FLAG_KINDS * FCCL_DEVICE_MAX_RANKS * FCCL_PAD_BYTES)

/* A counts row: localExperts counts, then these entries. The invalid entry is fcclMoeBadEntry of the first one,
 * FCCL_MOE_NO_BAD_ENTRY for none. */
#define FCCL_MOE_COUNT_SENT 0
#define FCCL_MOE_COUNT_BAD_LO 1
#define FCCL_MOE_COUNT_BAD_HI 2
#define FCCL_MOE_COUNT_EXTRA 4
#define FCCL_MOE_NO_BAD_ENTRY UINT64_MAX

/* An invalid routing entry as the dispatch reports it (fcclDevHostWords.errorDetail): ordered by token, then top-k
 * entry, so that the smallest is the first. */
static inline FCCL_HOST_DEVICE uint64_t fcclMoeBadEntry(uint64_t token, uint32_t entry, int64_t value) {
  return (token << 35) | ((uint64_t)(entry & 7u) << 32) | (uint32_t)value;
}

/* A dispatch slot's routing, before the row: the token's index at 0, then int32 localExpert[FCCL_MOE_MAX_TOPK]
 * (-1: not an expert of the receiver), int32 position[] (the row's place among the source's rows of that expert)
 * and float weight[]. The row follows at FCCL_MOE_META_BYTES, its FP8 scales after it. */
#define FCCL_MOE_META_LOCAL 16
#define FCCL_MOE_META_POS (FCCL_MOE_META_LOCAL + 4 * FCCL_MOE_MAX_TOPK)
#define FCCL_MOE_META_WEIGHT (FCCL_MOE_META_POS + 4 * FCCL_MOE_MAX_TOPK)
#define FCCL_MOE_META_BYTES (FCCL_MOE_META_WEIGHT + 4 * FCCL_MOE_MAX_TOPK)
FCCL_STATIC_ASSERT(FCCL_MOE_META_BYTES % FCCL_UNIT_BYTES == 0, "a slot's row starts 16-byte aligned");

/* The start of the scratch. */
typedef struct {
  uint64_t lastEpoch;         /* the epoch of this layout's last call (0: none yet) */
  uint32_t barrierCount;      /* blocks arrived at the grid barrier */
  uint32_t barrierGeneration; /* grid barriers completed */
  uint64_t badEntry;          /* the dispatch's first invalid routing entry (FCCL_MOE_NO_BAD_ENTRY: none) */
  uint64_t reserved[5];
} fcclMoeScratchHeader;
FCCL_STATIC_ASSERT(sizeof(fcclMoeScratchHeader) == 64, "fcclMoeScratchHeader layout");

/* The shape of a layout on nranks ranks: its configuration and where everything lives. */
typedef struct {
  int32_t nranks;
  int32_t numExperts;
  int32_t localExperts; /* numExperts / nranks: expert e lives on rank e / localExperts */
  int32_t topk;
  uint64_t hidden;
  uint64_t maxTokens; /* per rank */
  int32_t padded;     /* 1: expert e's rows start at e x expertStride; 0: packed, each start aligned */
  int32_t alignment;  /* packed: every expert's first row is a multiple of this */
  uint64_t expertStride;
  uint64_t recvRows; /* rows a dispatch may write on a rank (recvX's rows) */
  /* workspace */
  uint64_t countsOffset;
  uint64_t countStride; /* int32 entries per source */
  uint64_t stagingOffset;
  uint64_t dispatchPitch;
  uint64_t combinePitch;
  uint64_t stagingBytes;
  uint64_t workspaceBytes;
  /* scratch */
  uint64_t blockCountsOffset;
  uint64_t blockCountsStride; /* int32 entries per block: numExperts, then FCCL_DEVICE_MAX_RANKS */
  uint64_t entryExpertOffset;
  uint64_t entryIntraOffset;
  uint64_t tokenSlotOffset;
  uint64_t expertStartOffset;
  uint64_t expertCountOffset;
  uint64_t rowSourceOffset;
  uint64_t scratchBytes;
} fcclMoeShape;

static inline FCCL_HOST_DEVICE uint64_t fcclMoeAlignUp(uint64_t value, uint64_t align) {
  return (value + align - 1) / align * align;
}

/*
 * The shape of a layout: 1 when the configuration is one the kernels run (1..FCCL_DEVICE_MAX_RANKS ranks,
 * numExperts a multiple of nranks in [1, FCCL_MOE_MAX_EXPERTS], topk in [1, min(FCCL_MOE_MAX_TOPK, numExperts)],
 * hidden a multiple of 8 in [8, FCCL_MOE_MAX_HIDDEN] (16-byte rows of 16-bit types), maxTokens in
 * [1, FCCL_MOE_MAX_TOKENS], packed: alignment in [1, FCCL_MOE_MAX_ALIGNMENT]), 0 otherwise (the host says which,
 * moe_args.c).
 * Pure.
 */
static inline int fcclMoeShapeCompute(int nranks, int numExperts, int topk, uint64_t hidden, uint64_t maxTokens,
                                      int padded, int alignment, fcclMoeShape* s) {
  if (nranks < 1 || nranks > FCCL_DEVICE_MAX_RANKS || numExperts < 1 || numExperts > FCCL_MOE_MAX_EXPERTS ||
      numExperts % nranks != 0 || topk < 1 || topk > FCCL_MOE_MAX_TOPK || topk > numExperts || hidden < 8 ||
      hidden > FCCL_MOE_MAX_HIDDEN || hidden % 8 != 0 || maxTokens < 1 || maxTokens > FCCL_MOE_MAX_TOKENS ||
      (!padded && (alignment < 1 || alignment > FCCL_MOE_MAX_ALIGNMENT)))
    return 0;
  const uint64_t n = (uint64_t)nranks, local = (uint64_t)(numExperts / nranks), k = (uint64_t)topk;
  s->nranks = nranks;
  s->numExperts = numExperts;
  s->localExperts = (int32_t)local;
  s->topk = topk;
  s->hidden = hidden;
  s->maxTokens = maxTokens;
  s->padded = padded != 0;
  s->alignment = padded ? 1 : alignment;
  /* A token brings a rank at most one row per expert (a repeated expert is invalid routing), so at most
   * min(topk, localExperts) rows. */
  s->expertStride = padded ? n * maxTokens : 0;
  const uint64_t perToken = k < local ? k : local;
  s->recvRows = padded ? local * s->expertStride : n * maxTokens * perToken + local * (uint64_t)(s->alignment - 1);

  s->countsOffset = FCCL_SLOT_ALIGN;
  s->countStride = fcclMoeAlignUp(local + FCCL_MOE_COUNT_EXTRA, 4);
  s->stagingOffset = fcclMoeAlignUp(s->countsOffset + n * s->countStride * 4, FCCL_SLOT_ALIGN);
  /* A dispatched row is at most hidden 16-bit elements; an FP8 row and its scales (hidden + hidden / 32 bytes)
   * are less. */
  s->dispatchPitch = FCCL_MOE_META_BYTES + hidden * 2;
  s->combinePitch = hidden * 2;
  const uint64_t dispatchBytes = n * maxTokens * s->dispatchPitch;
  const uint64_t combineBytes = maxTokens * k * s->combinePitch;
  s->stagingBytes = dispatchBytes > combineBytes ? dispatchBytes : combineBytes;
  s->workspaceBytes = s->stagingOffset + s->stagingBytes;

  s->blockCountsStride = (uint64_t)numExperts + FCCL_DEVICE_MAX_RANKS;
  s->blockCountsOffset = sizeof(fcclMoeScratchHeader);
  uint64_t at = s->blockCountsOffset + (uint64_t)FCCL_DEVICE_MAX_BLOCKS * s->blockCountsStride * 4;
  s->entryExpertOffset = fcclMoeAlignUp(at, 256);
  s->entryIntraOffset = fcclMoeAlignUp(s->entryExpertOffset + maxTokens * k * 4, 256);
  s->tokenSlotOffset = fcclMoeAlignUp(s->entryIntraOffset + maxTokens * k * 4, 256);
  s->expertStartOffset = fcclMoeAlignUp(s->tokenSlotOffset + maxTokens * FCCL_DEVICE_MAX_RANKS * 4, 256);
  s->expertCountOffset = fcclMoeAlignUp(s->expertStartOffset + local * 4, 256);
  s->rowSourceOffset = fcclMoeAlignUp(s->expertCountOffset + local * 4, 256);
  s->scratchBytes = fcclMoeAlignUp(s->rowSourceOffset + s->recvRows * 4, 256);
  return 1;
}

/* The rank that holds expert e. */
static inline FCCL_HOST_DEVICE int fcclMoeExpertRank(const fcclMoeShape* s, int expert) {
  return expert / s->localExperts;
}

/* Bytes of a dispatched row of elemBytes-byte elements (1: FP8, then its scales follow it). */
static inline FCCL_HOST_DEVICE uint64_t fcclMoeRowBytes(const fcclMoeShape* s, int elemBytes) {
  return s->hidden * (uint64_t)elemBytes;
}
static inline FCCL_HOST_DEVICE uint64_t fcclMoeScaleCount(const fcclMoeShape* s) {
  return s->hidden / FCCL_MOE_SCALE_BLOCK;
}

/*
 * Where each local expert's rows start, from its row counts (localExperts entries): packed, one after another, each
 * start a multiple of alignment; padded, at e x expertStride. *end receives the row after the last expert's
 * (packed: its count rounded up to the alignment). The kernels compute the same with a block-wide scan.
 */
static inline void fcclMoeExpertStarts(const fcclMoeShape* s, const int32_t* counts, int32_t* starts, int64_t* end) {
  int64_t at = 0;
  for (int e = 0; e < s->localExperts; e++) {
    if (s->padded) {
      starts[e] = (int32_t)((uint64_t)e * s->expertStride);
      continue;
    }
    starts[e] = (int32_t)at;
    at += (int64_t)fcclMoeAlignUp((uint64_t)counts[e], (uint64_t)s->alignment);
  }
  *end = s->padded ? (int64_t)(s->localExperts * s->expertStride) : at;
}

/* Arguments of one dispatch or combine launch, passed by value (a captured graph replays them as they were). */
typedef struct {
  fcclMoeShape shape;
  uint64_t workspace[FCCL_DEVICE_MAX_RANKS]; /* every rank's workspace, mapped here (ours at [rank]) */
  uint64_t scratch;                          /* this rank's scratch */
  uint64_t input;                            /* dispatch: x, tokens x hidden; combine: y, recvRows x hidden */
  uint64_t inputScales;                      /* dispatch, FP8: float [tokens][hidden / 128] */
  uint64_t topkIdx;                          /* dispatch: int32 or int64 [tokens][topk] */
  uint64_t topkWeights;  /* float [tokens][topk]: dispatch, carried to recvWeights; combine, applied; 0: none */
  uint64_t output;       /* dispatch: recvX, recvRows x hidden; combine: out, tokens x hidden */
  uint64_t outputScales; /* dispatch, FP8: float [recvRows][hidden / 128] */
  uint64_t recvWeights;  /* dispatch: float [recvRows]; 0: not written */
  uint64_t recvSources;  /* dispatch: int32 [recvRows] source rank x maxTokens + token; 0: not written */
  uint64_t recvCounts;   /* dispatch: int32 [localExperts] */
  uint64_t recvOffsets;  /* dispatch: int32 [localExperts + 1]; 0: not written */
  uint64_t tokens;       /* this rank's tokens */
  int32_t idx64;         /* topkIdx holds int64 */
  int32_t elemBytes;     /* dispatch: 2 (fp16, bf16) or 1 (FP8 e4m3); combine: 2 */
  uint32_t print;        /* the call's fingerprint, carried by every flag */
  int32_t reserved;
} fcclMoeArgs;

#endif /* FCCL_MOE_SHAPE_H_ */
