/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the mixture-of-experts GPU test share (test_moe.c, test_moe_case.c, test_moe_faults.c): a
 * rank's context, a layout with buffers for its worst case, one checked dispatch + combine against the host
 * reference (test_moe_ref.h).
 */
#ifndef FCCL_TEST_MOE_H_
#define FCCL_TEST_MOE_H_

#include "test_allreduce_common.h"
#include "test_moe_ref.h"

#include <cuda_runtime.h>
#include <fccl.h>
#include <stddef.h>
#include <stdint.h>

/* The optional outputs a case asks the dispatch for. */
enum { MOE_OUT_WEIGHTS = 1, MOE_OUT_SOURCES = 2, MOE_OUT_OFFSETS = 4, MOE_OUT_ALL = 7 };

/* What main hands every forked rank. */
struct moeArgs {
  struct collShared* shared;
  uint64_t seed;
  int gpus;
  const char* mode;
};

/* One call pair: the reference's case (configuration, types, routing, seed and call) and how the calls run. */
struct moeCase {
  struct moeRefCase ref;
  fcclDataType_t idxType; /* fcclInt32 or fcclInt64 */
  int blocks;             /* 0: the layout's */
  int outputs;            /* MOE_OUT_* */
  int weighted;           /* the combine applies topkWeights (else weights of 1) */
  int badRank;            /* a rank whose routing entry (badToken, badEntry) is replaced by badValue; -1: none */
  size_t badToken;
  int badEntry;
  int64_t badValue;
};

/* A layout of one configuration and every buffer its worst case needs: device, and pinned host mirrors. */
struct moeBench {
  struct collShared* shared;
  fcclComm_t comm;
  int rank, nranks;
  cudaStream_t stream;
  fcclMoeLayout_t layout;
  struct moeRefCase shape; /* the configuration (nranks .. alignment) */
  size_t recvRows;
  size_t maxRow; /* bytes of a row of 16-bit elements */
  void *x, *xScales, *topk, *weights, *recvX, *recvScales, *recvWeights, *recvSources, *recvCounts, *recvOffsets;
  void *y, *out;
  void *hX, *hXScales, *hTopk, *hWeights, *hRecvX, *hRecvScales, *hRecvWeights, *hRecvSources, *hRecvCounts,
      *hRecvOffsets, *hY, *hOut;
  int64_t* routings; /* every rank's routing of the case as int64, [nranks][maxTokens x topk] */
};

/* ---- test_moe_case.c ---- */

/* A configuration: experts, topk, hidden, maxTokens, padded, alignment, for nranks ranks. */
struct moeRefCase moeShape(int nranks, int experts, int topk, size_t hidden, size_t maxTokens, int padded,
                           int alignment);
/* Makes b's layout on comm (collective) and its buffers; 0 on failure (reported). blocks: the layout's budget. */
int moeBenchInit(struct moeBench* b, struct collShared* shared, fcclComm_t comm, int rank, int nranks,
                 const struct moeRefCase* shape, int blocks);
void moeBenchFini(struct moeBench* b);
/* "call 3: 2 ranks, 16 experts, top-2, hidden 128, bf16 -> bf16, random, ..." for messages. */
void moeDescribe(const struct moeCase* c, char* out, size_t size);
/* Uploads rank's inputs of the case (routing, rows, scales, weights) and poisons the outputs. */
int moeUpload(struct moeBench* b, const struct moeCase* c);
/* The case's dispatch and combine calls on stream (no synchronisation); y must hold the expert outputs. */
fcclResult_t moeDispatch(struct moeBench* b, const struct moeCase* c, cudaStream_t stream);
fcclResult_t moeCombine(struct moeBench* b, const struct moeCase* c, cudaStream_t stream);
/* After a dispatch completed: its outputs downloaded and checked against the reference; the expert outputs (y)
 * computed for the rows it delivered and uploaded. Returns the number of problems. */
int moeCheckDispatch(struct moeBench* b, const struct moeCase* c);
/* After a combine completed: out downloaded and checked bit for bit (call numbers the message). Problems. */
int moeCheckCombine(struct moeBench* b, const struct moeCase* c, uint64_t call);
/* Upload, dispatch, check, combine, check: the whole case, synchronised. Returns the number of problems. */
int moeRunCase(struct moeBench* b, const struct moeCase* c, uint64_t call);

/* ---- test_moe_faults.c ---- */

/* The invalid mode: argument errors, configurations that differ, invalid routing. Returns the calls checked. */
int moeModeInvalid(const struct moeArgs* args, int rank, int nranks);
/* The timeout, abort and dead modes, on one forked rank. */
int moeFaultMain(int rank, int nranks, const struct moeArgs* args);

#endif /* FCCL_TEST_MOE_H_ */
