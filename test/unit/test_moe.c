/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mixture-of-experts calls without a GPU (docs/moe.md):
 *   - the shape of a layout (src/include/moe_shape.h): the configurations it takes and refuses, the rows a rank
 *     receives against the host reference's formula, the workspace's and scratch's areas in order and aligned, every
 *     row and position of the largest configuration within int32;
 *   - fcclMoeConfigCheck: every field out of range refused with a message naming it; the configuration's hash;
 *   - the host reference (test/gpu/test_moe_ref.c) on routings worked out by hand (packed, aligned, padded, an
 *     invalid and a repeated entry dropped) and on generated ones (every valid entry lands once, in its expert's
 *     block, sources in rank order, tokens in order), and its combine (the fma chain in ascending expert order);
 *   - the public calls on a communicator of 2 ranks set up by hand with no device state and a layout with no memory:
 *     every bad argument returns fcclInvalidArgument (fcclInvalidUsage for a combine that follows no dispatch of the
 *     same tokens) with a message naming it before any CUDA call, good calls get as far as the missing device state;
 *   - the fingerprint of the calls in words.
 */
#include "algo.h"
#include "check.h"
#include "comm.h"
#include "fccl.h"
#include "fingerprint.h"
#include "moe.h"
#include "moe_shape.h"
#include "test.h"
#include "test_moe_ref.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static fcclMoeConfig_t config(int experts, int topk, size_t hidden, size_t tokens) {
  fcclMoeConfig_t c = FCCL_MOE_CONFIG_INITIALIZER;
  c.numExperts = experts;
  c.topk = topk;
  c.hidden = hidden;
  c.maxTokensPerRank = tokens;
  return c;
}

/* ---- shape --------------------------------------------------------------------------------------------------- */

static void testShape(void) {
  fcclMoeShape s;
  memset(&s, 0, sizeof(s));
  /* Refused: rank counts, experts not a multiple of them, topk, hidden, tokens, alignment. */
  EXPECT(!fcclMoeShapeCompute(0, 8, 2, 128, 16, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(9, 9, 2, 128, 16, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(3, 8, 2, 128, 16, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(2, 2048, 2, 128, 16, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(2, 8, 0, 128, 16, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(2, 8, 9, 128, 16, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(2, 2, 3, 128, 16, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(2, 8, 2, 100, 16, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(2, 8, 2, 0, 16, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(2, 8, 2, 1u << 17, 16, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(2, 8, 2, 128, 0, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(2, 8, 2, 128, FCCL_MOE_MAX_TOKENS + 1, 0, 1, &s));
  EXPECT(!fcclMoeShapeCompute(2, 8, 2, 128, 16, 0, 0, &s));
  EXPECT(!fcclMoeShapeCompute(2, 8, 2, 128, 16, 0, FCCL_MOE_MAX_ALIGNMENT + 1, &s));
  EXPECT(fcclMoeShapeCompute(2, 8, 2, 128, 16, 1, 0, &s) && s.alignment == 1); /* padded: no alignment */
  /* Taken: the rows a rank receives, as the reference counts them, and the areas in order. */
  const int ranks[] = {1, 2, 3, 4, 8};
  const int experts[] = {8, 24, 64, 256, 1024};
  const int topks[] = {1, 2, 6, 8};
  for (size_t ri = 0; ri < 5; ri++)
    for (size_t ei = 0; ei < 5; ei++)
      for (size_t ki = 0; ki < 4; ki++)
        for (int padded = 0; padded < 2; padded++) {
          const int n = ranks[ri], e = experts[ei], k = topks[ki], align = padded ? 1 : 1 + (int)ki * 40;
          if (e % n != 0 || k > e) continue;
          const size_t hidden = 128 * (ki + 1) + 8, tokens = 100 + 37 * ei;
          EXPECT(fcclMoeShapeCompute(n, e, k, hidden, tokens, padded, align, &s));
          EXPECT_EQ_INT(s.localExperts, e / n);
          EXPECT_EQ_INT(s.recvRows, moeRefRecvRows(n, e, k, tokens, padded, align));
          EXPECT_EQ_INT(s.countsOffset % FCCL_SLOT_ALIGN, 0);
          EXPECT(s.countsOffset >= FCCL_MOE_FLAGS_BYTES);
          EXPECT_EQ_INT(s.stagingOffset % FCCL_SLOT_ALIGN, 0);
          EXPECT(s.stagingOffset >= s.countsOffset + (uint64_t)n * s.countStride * 4);
          EXPECT(s.countStride >= (uint64_t)s.localExperts + FCCL_MOE_COUNT_EXTRA);
          EXPECT_EQ_INT(s.dispatchPitch % FCCL_UNIT_BYTES, 0);
          /* A slot holds the routing and the largest row: 16-bit, or FP8 and its scales. */
          EXPECT(s.dispatchPitch >= FCCL_MOE_META_BYTES + hidden * 2);
          EXPECT(s.dispatchPitch >= FCCL_MOE_META_BYTES + hidden + hidden / FCCL_MOE_SCALE_BLOCK * 4);
          EXPECT(s.stagingBytes >= (uint64_t)n * tokens * s.dispatchPitch);
          EXPECT(s.stagingBytes >= tokens * (uint64_t)k * s.combinePitch);
          EXPECT_EQ_INT(s.workspaceBytes, s.stagingOffset + s.stagingBytes);
          const uint64_t areas[] = {s.blockCountsOffset, s.entryExpertOffset, s.entryIntraOffset, s.tokenSlotOffset,
                                    s.expertStartOffset, s.expertCountOffset, s.rowSourceOffset,  s.scratchBytes};
          const uint64_t sizes[] = {(uint64_t)FCCL_DEVICE_MAX_BLOCKS * s.blockCountsStride * 4,
                                    tokens * (uint64_t)k * 4,
                                    tokens * (uint64_t)k * 4,
                                    tokens * FCCL_DEVICE_MAX_RANKS * 4,
                                    (uint64_t)s.localExperts * 4,
                                    (uint64_t)s.localExperts * 4,
                                    s.recvRows * 4};
          EXPECT(s.blockCountsOffset >= sizeof(fcclMoeScratchHeader));
          for (int a = 0; a < 7; a++) EXPECT_MSG(areas[a] + sizes[a] <= areas[a + 1], "scratch area %d overlaps", a);
          EXPECT(s.blockCountsStride >= (uint64_t)e + FCCL_DEVICE_MAX_RANKS);
          if (padded) EXPECT_EQ_INT(s.expertStride, (uint64_t)n * tokens);
          if (padded) EXPECT_EQ_INT(s.alignment, 1);
        }
  /* The largest configuration: every row index, position and packed row source fits an int32. */
  EXPECT(fcclMoeShapeCompute(8, 1024, 8, FCCL_MOE_MAX_HIDDEN, FCCL_MOE_MAX_TOKENS, 1, 1, &s));
  EXPECT(s.recvRows <= INT32_MAX);
  EXPECT(((uint64_t)FCCL_MOE_MAX_TOKENS * 8 << 3) <= INT32_MAX);
  EXPECT(fcclMoeShapeCompute(8, 1024, 8, FCCL_MOE_MAX_HIDDEN, FCCL_MOE_MAX_TOKENS, 0, FCCL_MOE_MAX_ALIGNMENT, &s));
  EXPECT(s.recvRows <= INT32_MAX);
  EXPECT((uint64_t)8 * FCCL_MOE_MAX_TOKENS <= INT32_MAX); /* a source token id: rank x maxTokens + token */
  /* An invalid entry's report orders by token, then entry, and keeps the value's low bits. */
  EXPECT(fcclMoeBadEntry(3, 7, 5) < fcclMoeBadEntry(4, 0, -7));
  EXPECT(fcclMoeBadEntry(4, 1, 1000) < fcclMoeBadEntry(4, 2, -1));
  EXPECT_EQ_INT(fcclMoeBadEntry(12345, 6, -9) >> 35, 12345);
  EXPECT_EQ_INT((fcclMoeBadEntry(12345, 6, -9) >> 32) & 7, 6);
  EXPECT_EQ_INT((int32_t)(uint32_t)fcclMoeBadEntry(12345, 6, -9), -9);
  EXPECT(fcclMoeBadEntry(FCCL_MOE_MAX_TOKENS - 1, 7, -1) < FCCL_MOE_NO_BAD_ENTRY);
}

/* ---- configuration ------------------------------------------------------------------------------------------- */

#define EXPECT_CONFIG_INVALID(word, cfg, nranks)                                  \
  do {                                                                            \
    fcclMoeShape shape_;                                                          \
    EXPECT_EQ_INT(fcclMoeConfigCheck(cfg, nranks, &shape_), fcclInvalidArgument); \
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), word);                            \
  } while (0)

static void testConfig(void) {
  fcclMoeShape s;
  fcclMoeConfig_t c = config(64, 8, 7168, 128);
  EXPECT_EQ_INT(fcclMoeConfigCheck(&c, 8, &s), fcclSuccess);
  EXPECT_EQ_INT(s.localExperts, 8);
  EXPECT_EQ_INT(s.recvRows, 8 * 128 * 8);
  EXPECT_CONFIG_INVALID("config is NULL", NULL, 2);
  fcclMoeConfig_t bad = c;
  bad.magic = 0;
  EXPECT_CONFIG_INVALID("FCCL_MOE_CONFIG_INITIALIZER", &bad, 2);
  bad = c;
  bad.size = 8;
  EXPECT_CONFIG_INVALID("FCCL_MOE_CONFIG_INITIALIZER", &bad, 2);
  bad = c;
  bad.numExperts = 0;
  EXPECT_CONFIG_INVALID("numExperts 0", &bad, 2);
  bad.numExperts = 2048;
  EXPECT_CONFIG_INVALID("numExperts 2048", &bad, 2);
  bad.numExperts = 60;
  EXPECT_CONFIG_INVALID("not a multiple of the 8 ranks", &bad, 8);
  bad = c;
  bad.topk = 0;
  EXPECT_CONFIG_INVALID("topk 0", &bad, 2);
  bad.topk = 9;
  EXPECT_CONFIG_INVALID("topk 9", &bad, 2);
  bad = config(4, 6, 128, 16);
  EXPECT_CONFIG_INVALID("topk 6", &bad, 2);
  bad = c;
  bad.hidden = 7170;
  EXPECT_CONFIG_INVALID("hidden 7170", &bad, 2);
  bad.hidden = 0;
  EXPECT_CONFIG_INVALID("hidden 0", &bad, 2);
  bad.hidden = 1u << 17;
  EXPECT_CONFIG_INVALID("hidden", &bad, 2);
  bad = c;
  bad.maxTokensPerRank = 0;
  EXPECT_CONFIG_INVALID("maxTokensPerRank 0", &bad, 2);
  bad.maxTokensPerRank = (size_t)FCCL_MOE_MAX_TOKENS + 1;
  EXPECT_CONFIG_INVALID("maxTokensPerRank", &bad, 2);
  bad = c;
  bad.recvLayout = (fcclMoeRecvLayout_t)5;
  EXPECT_CONFIG_INVALID("recvLayout 5", &bad, 2);
  bad = c;
  bad.expertAlignment = 0;
  EXPECT_CONFIG_INVALID("expertAlignment 0", &bad, 2);
  bad.expertAlignment = 4096;
  EXPECT_CONFIG_INVALID("expertAlignment 4096", &bad, 2);
  bad.recvLayout = fcclMoePadded; /* ignored for the padded layout */
  EXPECT_EQ_INT(fcclMoeConfigCheck(&bad, 2, &s), fcclSuccess);
  bad = c;
  bad.blocks = -1;
  EXPECT_CONFIG_INVALID("blocks -1", &bad, 2);
  bad.blocks = FCCL_DEVICE_MAX_BLOCKS + 1;
  EXPECT_CONFIG_INVALID("blocks", &bad, 2);
  /* The hash: every field every rank must share changes it; blocks (a rank's own) does not. */
  const uint64_t h = fcclMoeConfigHash(&c);
  fcclMoeConfig_t other = c;
  EXPECT_EQ_INT(fcclMoeConfigHash(&other), h);
  other.blocks = 7;
  EXPECT_EQ_INT(fcclMoeConfigHash(&other), h);
  fcclMoeConfig_t changed[6] = {c, c, c, c, c, c};
  changed[0].numExperts = 128;
  changed[1].topk = 4;
  changed[2].hidden = 4096;
  changed[3].maxTokensPerRank = 129;
  changed[4].recvLayout = fcclMoePadded;
  changed[5].expertAlignment = 128;
  for (int i = 0; i < 6; i++) EXPECT_MSG(fcclMoeConfigHash(&changed[i]) != h, "field %d leaves the hash", i);
}

/* ---- the host reference -------------------------------------------------------------------------------------- */

/* Two ranks, four experts (two each), top-2, three tokens at most. Rank 0: t0 -> {1, 2}, t1 -> {3, -1}, t2 -> {2, 2}
 * (the repeat is dropped); rank 1: t0 -> {0, 1}, t1 -> {-1, 7} (7 is out of range: dropped). */
static const int64_t kRank0[] = {1, 2, 3, -1, 2, 2};
static const int64_t kRank1[] = {0, 1, -1, 7};

static int rowIs(const struct moeRefRow* r, int source, int token, int entry, int expert) {
  return r->source == source && r->token == token && r->entry == entry && r->expert == expert;
}

static void testReferenceByHand(void) {
  const struct moeRefRouting routings[2] = {{3, kRank0}, {2, kRank1}};
  struct moeRefRecv r;
  /* Receiver 0, packed: expert 0 gets rank 1's t0; expert 1 rank 0's t0 then rank 1's t0. */
  EXPECT(moeRefRecvBuild(2, 4, 2, 3, 0, 1, 0, routings, &r));
  EXPECT_EQ_INT(r.recvRows, 2 * 3 * 2);
  EXPECT(r.counts[0] == 1 && r.counts[1] == 2);
  EXPECT(r.offsets[0] == 0 && r.offsets[1] == 1 && r.offsets[2] == 3);
  EXPECT(rowIs(&r.rows[0], 1, 0, 0, 0) && rowIs(&r.rows[1], 0, 0, 0, 1) && rowIs(&r.rows[2], 1, 0, 1, 1));
  EXPECT_EQ_INT(r.rows[3].source, -1);
  moeRefRecvFree(&r);
  /* Receiver 1: expert 2 gets rank 0's t0 (entry 1) and t2 (entry 0; its repeat dropped); expert 3 rank 0's t1. */
  EXPECT(moeRefRecvBuild(2, 4, 2, 3, 0, 1, 1, routings, &r));
  EXPECT(r.counts[0] == 2 && r.counts[1] == 1);
  EXPECT(r.offsets[0] == 0 && r.offsets[1] == 2 && r.offsets[2] == 3);
  EXPECT(rowIs(&r.rows[0], 0, 0, 1, 0) && rowIs(&r.rows[1], 0, 2, 0, 0) && rowIs(&r.rows[2], 0, 1, 0, 1));
  moeRefRecvFree(&r);
  /* The same, each expert's block aligned to 4 rows, then padded (blocks of 2 ranks x 3 tokens). */
  EXPECT(moeRefRecvBuild(2, 4, 2, 3, 0, 4, 1, routings, &r));
  EXPECT_EQ_INT(r.recvRows, 2 * 3 * 2 + 2 * 3);
  EXPECT(r.offsets[0] == 0 && r.offsets[1] == 4 && r.offsets[2] == 8);
  EXPECT(rowIs(&r.rows[4], 0, 1, 0, 1) && r.rows[2].source == -1 && r.rows[3].source == -1);
  moeRefRecvFree(&r);
  EXPECT(moeRefRecvBuild(2, 4, 2, 3, 1, 1, 1, routings, &r));
  EXPECT_EQ_INT(r.recvRows, 2 * 2 * 3);
  EXPECT(r.offsets[0] == 0 && r.offsets[1] == 6 && r.offsets[2] == 12);
  EXPECT(rowIs(&r.rows[6], 0, 1, 0, 1) && rowIs(&r.rows[1], 0, 2, 0, 0));
  moeRefRecvFree(&r);
  EXPECT(!moeRefEntryValid(kRank0 + 4, 2, 4, 1));
  EXPECT(moeRefEntryValid(kRank0 + 4, 2, 4, 0));
  EXPECT(!moeRefEntryValid(kRank1 + 2, 2, 4, 1));
  EXPECT(!moeRefEntryValid(kRank1 + 2, 2, 4, 0));
}

/* Generated routings: every valid entry of every rank lands exactly once, on the rank of its expert, in the
 * expert's block, which holds its sources in rank order and each source's tokens in order. */
static void testReferenceGenerated(void) {
  const struct {
    int nranks, experts, topk;
    size_t tokens;
    int padded, alignment;
    moeRoute_t route;
  } cases[] = {{2, 8, 2, 50, 0, 1, MOE_ROUTE_RANDOM},  {3, 12, 4, 33, 0, 8, MOE_ROUTE_SKEWED},
               {4, 16, 8, 20, 1, 1, MOE_ROUTE_RANDOM}, {8, 64, 8, 40, 0, 128, MOE_ROUTE_SKEWED},
               {4, 8, 1, 17, 0, 1, MOE_ROUTE_HOT},     {2, 4, 3, 25, 1, 1, MOE_ROUTE_SPARSE},
               {1, 4, 2, 9, 0, 3, MOE_ROUTE_RANDOM}};
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
    struct moeRefCase c = {cases[ci].nranks,
                           cases[ci].experts,
                           cases[ci].topk,
                           256,
                           cases[ci].tokens,
                           cases[ci].padded,
                           cases[ci].alignment,
                           fcclBfloat16,
                           fcclBfloat16,
                           cases[ci].route,
                           cases[ci].nranks > 2 ? 1 : -1,
                           0,
                           99,
                           ci,
                           0};
    const int n = c.nranks, k = c.topk, local = c.experts / n;
    int64_t* topk[MOE_REF_MAX_RANKS];
    struct moeRefRouting routings[MOE_REF_MAX_RANKS];
    size_t valid = 0;
    for (int r = 0; r < n; r++) {
      routings[r].tokens = moeRefTokens(&c, r);
      EXPECT(routings[r].tokens <= c.maxTokens);
      topk[r] = malloc((routings[r].tokens + 1) * (size_t)k * sizeof(int64_t));
      moeRefFillRouting(&c, r, topk[r]);
      routings[r].topk = topk[r];
      for (size_t t = 0; t < routings[r].tokens; t++)
        for (int j = 0; j < k; j++) {
          EXPECT_EQ_INT(topk[r][t * k + j], moeRefExpert(&c, r, t, j));
          valid += moeRefEntryValid(topk[r] + t * k, k, c.experts, j);
          if (topk[r][t * k + j] >= 0) EXPECT(moeRefEntryValid(topk[r] + t * k, k, c.experts, j)); /* generated */
        }
    }
    if (c.emptyRank >= 0) EXPECT_EQ_INT(routings[c.emptyRank].tokens, 0);
    size_t landed = 0;
    for (int receiver = 0; receiver < n; receiver++) {
      struct moeRefRecv rr;
      EXPECT(moeRefRecvBuild(n, c.experts, k, c.maxTokens, c.padded, c.alignment, receiver, routings, &rr));
      for (int e = 0; e < local; e++) {
        EXPECT_EQ_INT(rr.offsets[e] % (c.padded ? (int)(n * c.maxTokens) : c.alignment), 0);
        EXPECT(rr.offsets[e] + rr.counts[e] <= rr.offsets[e + 1]);
        for (int i = 0; i < rr.counts[e]; i++) {
          const struct moeRefRow* row = &rr.rows[rr.offsets[e] + i];
          EXPECT(row->source >= 0 && row->expert == e);
          EXPECT_EQ_INT(topk[row->source][(size_t)row->token * k + row->entry], receiver * local + e);
          if (i > 0) {
            const struct moeRefRow* before = row - 1;
            EXPECT(before->source < row->source || (before->source == row->source && before->token < row->token));
          }
        }
        landed += (size_t)rr.counts[e];
      }
      EXPECT((size_t)rr.offsets[local] <= rr.recvRows);
      moeRefRecvFree(&rr);
    }
    EXPECT_EQ_INT(landed, valid);
    for (int r = 0; r < n; r++) free(topk[r]);
  }
}

/* The combine's reference: the fma chain over the token's experts in ascending order, one rounding. */
static void testReferenceCombine(void) {
  struct moeRefCase c = {2, 16, 4, 64, 8, 0, 1, fcclBfloat16, fcclBfloat16, MOE_ROUTE_RANDOM, -1, 1, 7, 1, 0};
  const fcclDataType_t types[] = {fcclBfloat16, fcclFloat16};
  for (int ti = 0; ti < 2; ti++) {
    c.outType = types[ti];
    for (size_t t = 0; t < 8; t++)
      for (size_t i = 0; i < 64; i += 7) {
        int64_t row[8];
        int order[8], n = 0;
        for (int j = 0; j < 4; j++) row[j] = moeRefExpert(&c, 1, t, j);
        for (int64_t e = 0; e < 16; e++)
          for (int j = 0; j < 4; j++)
            if (row[j] == e) order[n++] = j;
        float acc = 0.0f;
        for (int a = 0; a < n; a++)
          acc = fmaf(moeRefWeight(&c, 1, t, order[a]),
                     moeRefToFloat(c.outType, moeRefExpertOut(&c, (int)row[order[a]], 1, t, i)), acc);
        EXPECT_EQ_INT(moeRefCombine(&c, 1, t, i, 1, NULL), moeRefFromFloat(c.outType, acc));
        EXPECT_EQ_INT(moeRefCombine(&c, 1, t, i, 1, row), moeRefFromFloat(c.outType, acc));
      }
  }
  /* One expert, weight 1: the expert's output itself. No expert: +0. */
  c.route = MOE_ROUTE_HOT;
  for (size_t i = 0; i < 64; i++) EXPECT_EQ_INT(moeRefCombine(&c, 0, 3, i, 0, NULL), moeRefExpertOut(&c, 15, 0, 3, i));
  const int64_t none[4] = {-1, -1, -1, -1};
  EXPECT_EQ_INT(moeRefCombine(&c, 0, 3, 5, 1, none), 0);
  /* FP8 rows: decoded as E4M3 (the NaN never generated). */
  EXPECT(moeRefFp8ToFloat(0x38) == 1.0f && moeRefFp8ToFloat(0xb8) == -1.0f && moeRefFp8ToFloat(0x7e) == 448.0f);
  EXPECT(moeRefFp8ToFloat(0x01) == ldexpf(1.0f, -9) && isnan(moeRefFp8ToFloat(0x7f)));
  c.type = fcclFloat8e4m3;
  for (size_t i = 0; i < 4096; i++) EXPECT(((moeRefX(&c, 1, 2, i) & 0x7f) != 0x7f) && moeRefX(&c, 1, 2, i) < 256);
}

/* ---- the public calls' checks -------------------------------------------------------------------------------- */

static struct fcclComm comm;

#define PX ((const void*)(uintptr_t)0x10000000)
#define PIDX ((const void*)(uintptr_t)0x20000000)
#define PW ((const float*)(uintptr_t)0x30000000)
#define PSCALES ((const float*)(uintptr_t)0x38000000)

static fcclMoeRecv_t goodRecv(void) {
  fcclMoeRecv_t r = {(void*)(uintptr_t)0x40000000,    NULL,
                     (float*)(uintptr_t)0x50000000,   (int32_t*)(uintptr_t)0x58000000,
                     (int32_t*)(uintptr_t)0x5c000000, (int32_t*)(uintptr_t)0x5e000000};
  return r;
}

#define EXPECT_DISPATCH(code, word, x, scales, idx, idxType, w, tokens, type, recv, blocks, layout)             \
  do {                                                                                                          \
    EXPECT_EQ_INT(fcclMoeDispatch(x, scales, idx, idxType, w, tokens, type, recv, blocks, layout, NULL), code); \
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), word);                                                          \
  } while (0)

#define EXPECT_COMBINE(code, word, y, out, w, tokens, type, blocks, layout)             \
  do {                                                                                  \
    EXPECT_EQ_INT(fcclMoeCombine(y, out, w, tokens, type, blocks, layout, NULL), code); \
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), word);                                  \
  } while (0)

static void testCalls(void) {
  memset(&comm, 0, sizeof(comm));
  comm.magic = FCCL_COMM_MAGIC;
  comm.rank = 0;
  comm.nranks = 2;
  comm.asyncError = fcclSuccess;
  pthread_mutex_init(&comm.errorLock, NULL);
  const fcclDataType_t bf = fcclBfloat16, f8 = fcclFloat8e4m3, i32 = fcclInt32, i64 = fcclInt64;
  const int ready = fcclInvalidUsage, invalid = fcclInvalidArgument;
  const char* const noState = "no device state";

  /* Creation: a communicator without device state is refused before any exchange; bad handles. */
  fcclMoeConfig_t c = config(8, 2, 256, 64);
  fcclMoeLayout_t layout = NULL;
  EXPECT_EQ_INT(fcclMoeLayoutCreate(&comm, &c, &layout), ready);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), noState);
  EXPECT(layout == NULL);
  EXPECT_EQ_INT(fcclMoeLayoutCreate(NULL, &c, &layout), invalid);
  EXPECT_EQ_INT(fcclMoeLayoutDestroy(NULL), invalid);
  EXPECT_EQ_INT(fcclMoeLayoutDestroy((fcclMoeLayout_t)(uintptr_t)0x1234), invalid);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not a live MoE layout");
  size_t rows = 0;
  EXPECT_EQ_INT(fcclMoeLayoutRecvRows((fcclMoeLayout_t)(uintptr_t)0x1234, &rows), invalid);

  /* A layout with no memory: the calls' checks. */
  EXPECT_EQ_INT(fcclMoeLayoutCreateHostOnly(&comm, &c, 16, &layout), fcclSuccess);
  EXPECT_EQ_INT(fcclMoeLayoutRecvRows(layout, &rows), fcclSuccess);
  EXPECT_EQ_INT(rows, 2 * 64 * 2);
  EXPECT_EQ_INT(fcclMoeLayoutRecvRows(layout, NULL), invalid);
  fcclMoeRecv_t r = goodRecv();
  fcclMoeRecv_t r8 = r;
  r8.scales = (float*)(uintptr_t)0x60000000;
  /* Good dispatches reach the device state: every type and index type, tokens 0 and the worst case, no optional
   * outputs, a budget of blocks. */
  EXPECT_DISPATCH(ready, noState, PX, NULL, PIDX, i32, PW, 64, bf, &r, 0, layout);
  EXPECT_DISPATCH(ready, noState, PX, NULL, PIDX, i64, PW, 1, fcclFloat16, &r, 16, layout);
  EXPECT_DISPATCH(ready, noState, PX, PSCALES, PIDX, i64, PW, 3, f8, &r8, 1, layout);
  EXPECT_DISPATCH(ready, noState, NULL, NULL, NULL, i32, NULL, 0, bf, &r, 0, layout);
  fcclMoeRecv_t bare = {r.x, NULL, NULL, NULL, r.expertCounts, NULL};
  EXPECT_DISPATCH(ready, noState, PX, NULL, PIDX, i32, NULL, 5, bf, &bare, 0, layout);
  /* Bad ones. */
  EXPECT_DISPATCH(invalid, "tokens 65 is more than the layout's worst case", PX, NULL, PIDX, i32, PW, 65, bf, &r, 0,
                  layout);
  EXPECT_DISPATCH(invalid, "datatype float32", PX, NULL, PIDX, i32, PW, 4, fcclFloat32, &r, 0, layout);
  EXPECT_DISPATCH(invalid, "datatype unknown", PX, NULL, PIDX, i32, PW, 4, (fcclDataType_t)99, &r, 0, layout);
  EXPECT_DISPATCH(invalid, "idxType", PX, NULL, PIDX, fcclUint8, PW, 4, bf, &r, 0, layout);
  EXPECT_DISPATCH(invalid, "recv is NULL", PX, NULL, PIDX, i32, PW, 4, bf, NULL, 0, layout);
  fcclMoeRecv_t broken = r;
  broken.x = NULL;
  EXPECT_DISPATCH(invalid, "recv->x is NULL", PX, NULL, PIDX, i32, PW, 4, bf, &broken, 0, layout);
  broken = r;
  broken.expertCounts = NULL;
  EXPECT_DISPATCH(invalid, "recv->expertCounts is NULL", PX, NULL, PIDX, i32, PW, 4, bf, &broken, 0, layout);
  EXPECT_DISPATCH(invalid, "recv->scales is NULL with an FP8", PX, PSCALES, PIDX, i32, PW, 4, f8, &r, 0, layout);
  EXPECT_DISPATCH(invalid, "xScales given", PX, PSCALES, PIDX, i32, PW, 4, bf, &r, 0, layout);
  EXPECT_DISPATCH(invalid, "recv->scales given", PX, NULL, PIDX, i32, PW, 4, bf, &r8, 0, layout);
  EXPECT_DISPATCH(invalid, "xScales is NULL", PX, NULL, PIDX, i32, PW, 4, f8, &r8, 0, layout);
  EXPECT_DISPATCH(invalid, "without topkWeights", PX, NULL, PIDX, i32, NULL, 4, bf, &r, 0, layout);
  EXPECT_DISPATCH(invalid, "x is NULL", NULL, NULL, PIDX, i32, PW, 4, bf, &r, 0, layout);
  EXPECT_DISPATCH(invalid, "topkIdx is NULL", PX, NULL, NULL, i32, PW, 4, bf, &r, 0, layout);
  EXPECT_DISPATCH(invalid, "blocks 17", PX, NULL, PIDX, i32, PW, 4, bf, &r, 17, layout);
  EXPECT_DISPATCH(invalid, "blocks -1", PX, NULL, PIDX, i32, PW, 4, bf, &r, -1, layout);
  EXPECT_DISPATCH(invalid, "x 0x10000008 is not 16-byte aligned", (const char*)PX + 8, NULL, PIDX, i32, PW, 4, bf, &r,
                  0, layout);
  EXPECT_DISPATCH(invalid, "topkIdx", PX, NULL, (const char*)PIDX + 4, i64, PW, 4, bf, &r, 0, layout);
  EXPECT_DISPATCH(invalid, "topkWeights", PX, NULL, PIDX, i32, (const float*)((const char*)PW + 2), 4, bf, &r, 0,
                  layout);
  broken = r;
  broken.x = (char*)r.x + 4;
  EXPECT_DISPATCH(invalid, "recv->x", PX, NULL, PIDX, i32, PW, 4, bf, &broken, 0, layout);
  broken = r;
  broken.expertOffsets = (int32_t*)((char*)r.expertOffsets + 1);
  EXPECT_DISPATCH(invalid, "recv->expertOffsets", PX, NULL, PIDX, i32, PW, 4, bf, &broken, 0, layout);
  /* Overlaps: the outputs with each other and with the inputs (recv->x of bf16 is 256 rows x 512 bytes). */
  broken = r;
  broken.weights = (float*)((char*)r.x + 512);
  EXPECT_DISPATCH(invalid, "recv->x 0x40000000 overlaps recv->weights", PX, NULL, PIDX, i32, PW, 4, bf, &broken, 0,
                  layout);
  EXPECT_DISPATCH(invalid, "overlaps recv->x", (const char*)r.x + 1024, NULL, PIDX, i32, PW, 4, bf, &r, 0, layout);
  broken = r;
  broken.expertOffsets = r.expertCounts + 2;
  EXPECT_DISPATCH(invalid, "recv->expertCounts 0x5c000000 overlaps recv->expertOffsets", PX, NULL, PIDX, i32, PW, 4, bf,
                  &broken, 0, layout);
  EXPECT_DISPATCH(invalid, "not a live MoE layout", PX, NULL, PIDX, i32, PW, 4, bf, &r, 0,
                  (fcclMoeLayout_t)(uintptr_t)0x1234);
  /* FP8 needs a hidden size of whole scale blocks. */
  fcclMoeConfig_t odd = config(8, 2, 136, 64);
  fcclMoeLayout_t oddLayout = NULL;
  EXPECT_EQ_INT(fcclMoeLayoutCreateHostOnly(&comm, &odd, 16, &oddLayout), fcclSuccess);
  EXPECT_DISPATCH(invalid, "hidden 136 is not a multiple of 128", PX, PSCALES, PIDX, i32, PW, 4, f8, &r8, 0, oddLayout);
  EXPECT_DISPATCH(ready, noState, PX, NULL, PIDX, i32, PW, 4, bf, &r, 0, oddLayout);
  fcclMoeLayoutDestroyHostOnly(oddLayout);

  /* Combine: no dispatch yet, then one of 4 tokens (as the launch records it). */
  const void* y = r.x;
  void* out = (void*)(uintptr_t)0x70000000;
  EXPECT_COMBINE(ready, "no dispatch on this layout yet", y, out, PW, 4, bf, 0, layout);
  layout->dispatchTokens = 4;
  EXPECT_COMBINE(ready, noState, y, out, PW, 4, bf, 0, layout);
  EXPECT_COMBINE(ready, noState, y, out, NULL, 4, fcclFloat16, 3, layout);
  EXPECT_COMBINE(ready, "tokens 5, but the layout's last dispatch had 4", y, out, PW, 5, bf, 0, layout);
  EXPECT_COMBINE(invalid, "datatype float8e4m3", y, out, PW, 4, f8, 0, layout);
  EXPECT_COMBINE(invalid, "y is NULL", NULL, out, PW, 4, bf, 0, layout);
  EXPECT_COMBINE(invalid, "out is NULL", y, NULL, PW, 4, bf, 0, layout);
  EXPECT_COMBINE(invalid, "blocks 99", y, out, PW, 4, bf, 99, layout);
  EXPECT_COMBINE(invalid, "out 0x70000002", y, (char*)out + 2, PW, 4, bf, 0, layout);
  EXPECT_COMBINE(invalid, "overlaps out", y, (char*)y + 4096, PW, 4, bf, 0, layout);
  layout->dispatchTokens = 0;
  EXPECT_COMBINE(ready, noState, y, NULL, NULL, 0, bf, 0, layout);
  /* Destroying the layout makes its handle stale. */
  EXPECT_EQ_INT(fcclMoeLayoutDestroy(layout), fcclSuccess);
  EXPECT_COMBINE(invalid, "not a live MoE layout", y, out, PW, 0, bf, 0, layout);

  /* A communicator torn down before its layouts takes their memory with it: only the handle is left to destroy. */
  static struct fcclComm other;
  EXPECT_EQ_INT(fcclMoeLayoutCreateHostOnly(&comm, &c, 16, &layout), fcclSuccess);
  fcclMoeReleaseLayouts(&other);
  EXPECT_DISPATCH(ready, noState, PX, NULL, PIDX, i32, PW, 4, bf, &r, 0, layout);
  fcclMoeReleaseLayouts(&comm);
  EXPECT_DISPATCH(ready, "communicator was destroyed or aborted", PX, NULL, PIDX, i32, PW, 4, bf, &r, 0, layout);
  layout->dispatchTokens = 4;
  EXPECT_COMBINE(ready, "communicator was destroyed or aborted", y, out, PW, 4, bf, 0, layout);
  EXPECT_EQ_INT(fcclMoeLayoutRecvRows(layout, &rows), fcclSuccess);
  EXPECT_EQ_INT(fcclMoeLayoutDestroy(layout), fcclSuccess);
  EXPECT_EQ_INT(fcclMoeLayoutDestroy(layout), invalid);
  pthread_mutex_destroy(&comm.errorLock);
}

/* ---- fingerprints -------------------------------------------------------------------------------------------- */

static void testPrints(void) {
  char text[256];
  const uint32_t dispatch = fcclMoePrint(0, fcclFloat8e4m3, 42), combine = fcclMoePrint(1, fcclBfloat16, 42);
  fcclPrintDescribe(dispatch, text, sizeof(text));
  EXPECT_STR_CONTAINS(text, "MoE dispatch, float8e4m3, layout hash");
  fcclPrintDescribe(combine, text, sizeof(text));
  EXPECT_STR_CONTAINS(text, "MoE combine, bfloat16");
  fcclPrintDifference(fcclMoePrint(0, fcclBfloat16, 42), combine, text, sizeof(text));
  EXPECT_STR_CONTAINS(text, "call (dispatch or combine)");
  uint64_t other = 43;
  while (fcclMoePrint(0, fcclBfloat16, other) == fcclMoePrint(0, fcclBfloat16, 42)) other++;
  fcclPrintDifference(fcclMoePrint(0, fcclBfloat16, 42), fcclMoePrint(0, fcclBfloat16, other), text, sizeof(text));
  EXPECT_STR_CONTAINS(text, "another layout");
  fcclPrintDifference(dispatch, fcclPrintMake(FCCL_KERNEL_BARRIER, 0, 0, 0), text, sizeof(text));
  EXPECT_STR_CONTAINS(text, "another collective");
  EXPECT(strcmp(fcclAlgoName(FCCL_KERNEL_MOE), "moe") == 0);
}

int main(void) {
  testShape();
  testConfig();
  testReferenceByHand();
  testReferenceGenerated();
  testReferenceCombine();
  testCalls();
  testPrints();
  return testSummary("moe");
}
