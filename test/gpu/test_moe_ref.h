/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host reference for the mixture-of-experts tests (no CUDA): reproducible routings, token rows, weights and expert
 * outputs, each a pure function of (seed, call, rank, token, ...) so that every rank computes every other rank's
 * without an exchange; what a dispatch must deliver to a rank, from the definition (docs/moe.md: each local expert's
 * rows from rank 0 first, each rank's in token order, the expert blocks packed or padded); and a combine's output
 * element, emulated bit for bit (fma in fp32 over the token's experts in ascending index, one rounding).
 */
#ifndef FCCL_TEST_MOE_REF_H_
#define FCCL_TEST_MOE_REF_H_

#include "fccl.h"

#include <stddef.h>
#include <stdint.h>

#define MOE_REF_MAX_RANKS 8
#define MOE_REF_MAX_TOPK 8

/* How a case routes its tokens. */
typedef enum {
  MOE_ROUTE_RANDOM = 0, /* topk distinct experts per token, uniform; about one entry in eight -1 */
  MOE_ROUTE_SKEWED = 1, /* distinct experts drawn with a strong bias toward low indices (a few hot experts) */
  MOE_ROUTE_HOT = 2,    /* every token of every rank to one expert (the last), its other entries -1 */
  MOE_ROUTE_SPARSE = 3, /* half the tokens to no expert at all, the others to one or two */
  MOE_ROUTE_KINDS = 4
} moeRoute_t;

/* What every rank knows of a case. */
struct moeRefCase {
  int nranks;
  int experts;
  int topk;
  size_t hidden;
  size_t maxTokens;
  int padded;
  int alignment;
  fcclDataType_t type;    /* the dispatch's: fcclBfloat16, fcclFloat16 or fcclFloat8e4m3 */
  fcclDataType_t outType; /* the combine's: fcclBfloat16 or fcclFloat16 */
  moeRoute_t route;
  int emptyRank;  /* a rank with no tokens (-1: none) */
  int fullTokens; /* every rank (but emptyRank) has maxTokens */
  uint64_t seed;
  uint64_t call;
  int identityExperts; /* every expert's output is its input row (type == outType, 16-bit): the tests that copy
                        * the received rows into y on the device */
};

/* One rank's routing, as the application passes it: tokens x topk expert indices (-1: none). */
struct moeRefRouting {
  size_t tokens;
  const int64_t* topk;
};

const char* moeRefRouteName(moeRoute_t route);

/* Rank's token count in the case: maxTokens or fewer (some 0 with emptyRank). */
size_t moeRefTokens(const struct moeRefCase* c, int rank);
/* Entry j of token t of rank: a valid routing (distinct experts in [0, experts), or -1). */
int64_t moeRefExpert(const struct moeRefCase* c, int rank, size_t t, int j);
/* Fills rank's routing (tokens x topk). */
void moeRefFillRouting(const struct moeRefCase* c, int rank, int64_t* topk);
/* Router weight of entry j of token t of rank: in (0, 1), every mantissa bit used. */
float moeRefWeight(const struct moeRefCase* c, int rank, size_t t, int j);
/* Element i of token t's row on rank: the bits of the dispatch's type (finite; never an FP8 NaN). */
uint16_t moeRefX(const struct moeRefCase* c, int rank, size_t t, size_t i);
/* Scale b (of hidden / 128) of token t's FP8 row on rank. */
float moeRefXScale(const struct moeRefCase* c, int rank, size_t t, size_t b);
/* Element i of expert's output for token t of source: the combine's type's bits, from that token's row (the row's
 * own element with identityExperts). */
uint16_t moeRefExpertOut(const struct moeRefCase* c, int expert, int source, size_t t, size_t i);

/* Whether entry j of token t is a valid expert in routing: in [0, experts) and not repeated earlier in the row. */
int moeRefEntryValid(const int64_t* row, int topk, int experts, int j);

/* The rows a rank receives (the layout's recvRows). */
size_t moeRefRecvRows(int nranks, int experts, int topk, size_t maxTokens, int padded, int alignment);

/* One received row: where it came from; source -1 for a row the dispatch does not write. */
struct moeRefRow {
  int32_t source;
  int32_t token;
  int32_t entry;  /* j of topk */
  int32_t expert; /* local expert */
};

/* What a dispatch delivers to one rank. */
struct moeRefRecv {
  int localExperts;
  size_t recvRows;
  int32_t* counts;        /* localExperts */
  int32_t* offsets;       /* localExperts + 1 */
  struct moeRefRow* rows; /* recvRows */
};

/* The rows receiver gets from every rank's routing (routings[nranks]); 0 when out of memory or a row falls outside
 * recvRows (the reference's own bound check). */
int moeRefRecvBuild(int nranks, int experts, int topk, size_t maxTokens, int padded, int alignment, int receiver,
                    const struct moeRefRouting* routings, struct moeRefRecv* out);
void moeRefRecvFree(struct moeRefRecv* recv);

/* The combine's element i of token t of rank (weighted: topkWeights given, else weights of 1), as the bits of the
 * case's outType; routed: the token's routing as passed (invalid entries dropped), NULL: the case's. */
uint16_t moeRefCombine(const struct moeRefCase* c, int rank, size_t t, size_t i, int weighted, const int64_t* routed);

/* float <-> the bits of a 16-bit type (fcclBfloat16, fcclFloat16), and an FP8 E4M3 byte's value. */
float moeRefToFloat(fcclDataType_t type, uint16_t bits);
uint16_t moeRefFromFloat(fcclDataType_t type, float value);
float moeRefFp8ToFloat(uint8_t bits);

#endif /* FCCL_TEST_MOE_REF_H_ */
