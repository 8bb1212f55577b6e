/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of fcclAllReduceAddRMSNorm's test share (test_fused_norm.c, test_fused_norm_case.c,
 * test_fused_norm_faults.c): a case, the per-rank buffers, the host reference's conversions and one case's run. The
 * shapes test (test_fused_norm_shapes.c) uses the conversions.
 */
#ifndef FCCL_TEST_FUSED_NORM_H_
#define FCCL_TEST_FUSED_NORM_H_

#include "test_allreduce_common.h"

#include <cuda_runtime.h>
#include <fccl.h>
#include <stddef.h>
#include <stdint.h>

/* One call of the fused norm, as a mode makes it. */
struct fusedCase {
  fcclDataType_t type;
  fcclDataType_t out; /* type or fcclFloat8e4m3 */
  fcclScaleMode_t mode;
  size_t tokens;
  size_t hidden;
  int residual; /* pass a residual */
  int weight;   /* pass a weight */
  int registered;
  float eps;
  float staticScale; /* fcclScaleStatic */
};

/* Per-rank buffers, large enough for every case of a mode. */
struct fusedContext {
  struct collShared* shared;
  fcclComm_t comm;
  int rank, nranks;
  uint64_t seed;
  cudaStream_t stream;
  size_t capacity;           /* bytes of each device buffer */
  int form;                  /* -1: as the public call; FCCL_FUSED_ONESHOT or FCCL_FUSED_TWOSHOT where it runs */
  struct collBuffer plainIn; /* inputs, plain */
  struct collBuffer regIn;   /* inputs, registered */
  void *residual, *weight, *output, *reduced, *scale;                           /* device */
  void *hIn, *hResidual, *hWeight, *hOutput, *hReduced, *hResidualOut, *hScale; /* pinned host */
};

/* What main hands every forked rank. */
struct modeArgs {
  struct collShared* shared;
  uint64_t seed;
  int gpus;
  const char* mode;
  int form; /* -1, FCCL_FUSED_ONESHOT or FCCL_FUSED_TWOSHOT: the third argument */
};

/* ---- test_fused_norm_case.c: the host reference and one case ---- */

/* A 16-bit or fp32 value's bits as a double, and a float rounded to type's bits. */
double fusedToDouble(fcclDataType_t type, uint64_t bits);
uint64_t fusedFromFloat(fcclDataType_t type, float value);
/* Element i of a host buffer of type set to bits. */
void fusedStoreBits(fcclDataType_t type, void* buffer, size_t i, uint64_t bits);
/* An E4M3 NaN. */
int fusedFp8IsNaN(uint8_t bits);
/* "call 3: 5 x 4096 bfloat16 -> ..." for messages; form as fcclAllReduceAddRMSNormForm takes it (-1: auto). */
void fusedDescribe(const struct fusedCase* c, uint64_t call, int form, char* out, size_t size);
/* The buffers of x for cases up to capacity bytes per tensor; 0 when one cannot be made. */
int fusedContextInit(struct fusedContext* x, struct collShared* shared, fcclComm_t comm, int rank, int nranks,
                     uint64_t seed, size_t capacity, int form);
void fusedContextFini(struct fusedContext* x);
/* The case's input buffer (plain or registered) on the device. */
char* fusedInputOf(struct fusedContext* x, const struct fusedCase* c);
/* The case's data for call uploaded, outputs poisoned; poke may edit this rank's host input first. */
int fusedUpload(struct fusedContext* x, const struct fusedCase* c, uint64_t call,
                void (*poke)(const struct fusedCase*, int rank, void* hostIn));
/* Whether the one-shot's row and the two-shot's share fit the staging chunk for nranks ranks. */
int fusedRowFits(const struct fusedCase* c, int nranks);
int fusedTwoshotFits(const struct fusedCase* c, int nranks);
/* The call in form (fcclAllReduceAddRMSNormForm), or in x's form where it can run the case. */
fcclResult_t fusedCallForm(struct fusedContext* x, const struct fusedCase* c, const void* input, void* residual,
                           void* output, float* scale, size_t tokens, cudaStream_t stream, int form);
fcclResult_t fusedCall(struct fusedContext* x, const struct fusedCase* c, const void* input, void* residual,
                       void* output, float* scale, size_t tokens, cudaStream_t stream);
/* Bytes of one output row. */
size_t fusedOutRow(const struct fusedCase* c);
/* Uploads, calls, downloads and checks one case; 1 when it ran. */
int fusedRunCase(struct fusedContext* x, const struct fusedCase* c, uint64_t call,
                 void (*poke)(const struct fusedCase*, int rank, void* hostIn));

/* ---- test_fused_norm_faults.c ---- */

/* The invalid mode: every argument error; returns the calls made. */
int fusedModeInvalid(struct fusedContext* x);
/* The timeout and abort modes, on one forked rank. */
int fusedFaultMain(int rank, int nranks, const struct modeArgs* args);

#endif /* FCCL_TEST_FUSED_NORM_H_ */
