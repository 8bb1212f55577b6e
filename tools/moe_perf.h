/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What moe_perf.c (flags, ranks, timing, output) and moe_perf_check.c (the inputs and the result check against a
 * host reference) share: the options, one rank's buffers, and the inputs as pure functions of (rank, token,
 * element), so that every rank knows every rank's routing, rows, scales and weights without exchanging them.
 */
#ifndef FCCL_TOOLS_MOE_PERF_H_
#define FCCL_TOOLS_MOE_PERF_H_

#include "fccl.h"
#include "fccl_build_config.h"

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#if FCCL_HAVE_NCCL
#include <nccl.h>
#endif

#define MOE_PERF_MAX_RANKS 8
#define MOE_PERF_MAX_TOKEN_COUNTS 16

struct moePerfOptions {
  int nranks, topk, perRank, fp8, blocks, calls, warmup, iters, check;
  int graph; /* -G: 0 eager; N: the -n calls of a round in one CUDA graph, launched N times per round */
  int nccl;  /* --compare nccl */
  size_t hidden;
  size_t tokens[MOE_PERF_MAX_TOKEN_COUNTS];
  int ntokens;
  const char* jsonPath; /* -J */
  const char* csvPath;  /* --csv */
};

/* One rank's buffers, for the largest token count. */
struct moePerfRank {
  int rank;
  const struct moePerfOptions* o;
  fcclComm_t comm;
  fcclMoeLayout_t layout;
  cudaStream_t stream;
  size_t recvRows, rowBytes, maxTokens;
  void *x, *xScales, *topk, *weights, *recvX, *recvScales, *recvWeights, *recvSources, *recvCounts, *recvOffsets;
  void *y, *out, *gathered, *partial, *wrong;
  size_t tokens;                                                       /* of the case being measured */
  size_t sendBytes[MOE_PERF_MAX_RANKS], recvBytes[MOE_PERF_MAX_RANKS]; /* the NCCL exchange of the case, per peer */
  void *ncclSend, *ncclRecv;
#if FCCL_HAVE_NCCL
  ncclComm_t nccl;
#endif
};

/* splitmix64 of three words. */
uint64_t moePerfMix(uint64_t a, uint64_t b, uint64_t c);
/* Token t of rank: topk distinct experts of experts, uniform. */
void moePerfRoute(int rank, size_t t, int topk, int experts, int32_t* row);
/* Whether token t of source goes to rank (one of its experts is rank's). */
int moePerfGoesTo(int source, size_t t, const struct moePerfOptions* o, int rank);

/* Writes this rank's inputs for c->tokens (routing, rows, scales, weights) to the GPU and sizes the NCCL exchange of
 * the case; 0, or 1 after saying why. */
int moePerfUpload(struct moePerfRank* c);

/* One dispatch (with weights, sources and offsets) and one combine of the experts' outputs, each expert returning
 * its row (FP8 rows dequantised to bf16), eagerly; every delivered row, scale, weight, source and count and every
 * combined element compared with the host reference (docs/moe.md: rank-major rows per expert, the fp32 fma sum in
 * ascending expert order rounded once). The wrong elements (a wrong count counts its expert's expected elements + 1)
 * in *wrong; 0, or 1 after a CUDA or fccl failure (said on stderr). */
int moePerfCheck(struct moePerfRank* c, int64_t* wrong);

#endif /* FCCL_TOOLS_MOE_PERF_H_ */
