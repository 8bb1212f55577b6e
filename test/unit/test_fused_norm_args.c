/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllReduceAddRMSNorm's argument checks without a GPU, on a communicator struct of 2 ranks set up by hand with
 * no device state (as test_algo.c's move checks): every bad argument returns fcclInvalidArgument with a message
 * naming it, before any CUDA call, and a call whose arguments are all good gets as far as the communicator's state
 * ("no device state", fcclInvalidUsage). The pointers are never dereferenced. Also: the collectives refuse the FP8
 * type, which only the fused norm writes.
 */
#include "check.h"
#include "comm.h"
#include "fccl.h"
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

static struct fcclComm comm;

#define IN ((const void*)(uintptr_t)0x100000)
#define RES ((void*)(uintptr_t)0x200000)
#define W ((const void*)(uintptr_t)0x300000)
#define OUT ((void*)(uintptr_t)0x400000)
#define SCALE ((float*)(uintptr_t)0x500000)

/* A call with these arguments fails with fcclInvalidArgument and a message holding word. */
#define EXPECT_INVALID(word, input, residual, weight, output, tokens, hidden, eps, type, outtype, mode, scale, c) \
  do {                                                                                                         \
    EXPECT_EQ_INT(fcclAllReduceAddRMSNorm(input, residual, weight, output, tokens, hidden, eps, type, outtype, \
                                          mode, scale, c, NULL),                                               \
                  fcclInvalidArgument);                                                                        \
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), word);                                                         \
  } while (0)

/* A call whose arguments pass: it stops at the communicator's missing device state. */
#define EXPECT_PASSES(input, residual, weight, output, tokens, hidden, eps, type, outtype, mode, scale)          \
  do {                                                                                                         \
    EXPECT_EQ_INT(fcclAllReduceAddRMSNorm(input, residual, weight, output, tokens, hidden, eps, type, outtype, \
                                          mode, scale, &comm, NULL),                                           \
                  fcclInvalidUsage);                                                                           \
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "no device state");                                            \
  } while (0)

int main(void) {
  memset(&comm, 0, sizeof(comm));
  comm.magic = FCCL_COMM_MAGIC;
  comm.rank = 0;
  comm.nranks = 2;
  comm.asyncError = fcclSuccess;
  pthread_mutex_init(&comm.errorLock, NULL);
  const fcclDataType_t bf = fcclBfloat16, f8 = fcclFloat8e4m3;
  const fcclScaleMode_t none = fcclScaleNone;
  struct fcclComm* c = &comm;

  /* Good calls: every type, FP8 both ways, NULL residual and weight, odd hidden, eps 0, tokens 0 without buffers. */
  EXPECT_PASSES(IN, RES, W, OUT, 4, 4096, 1e-6f, bf, bf, none, NULL);
  EXPECT_PASSES(IN, RES, W, OUT, 4, 129, 0.0f, fcclFloat16, fcclFloat16, none, NULL);
  EXPECT_PASSES(IN, NULL, NULL, OUT, 1, 16384, 1e-5f, fcclFloat32, fcclFloat32, none, NULL);
  EXPECT_PASSES(IN, RES, W, OUT, 4, 4096, 1e-6f, bf, f8, fcclScaleStatic, SCALE);
  EXPECT_PASSES(IN, RES, W, (char*)OUT + 1, 4, 4095, 1e-6f, bf, f8, fcclScaleDynamic, SCALE);
  EXPECT_PASSES(NULL, NULL, NULL, NULL, 0, 4096, 1e-6f, bf, bf, none, NULL);
  EXPECT_PASSES(IN, RES, W, OUT, 4, 32768, 1e-6f, bf, bf, none, NULL); /* a row of 64 KiB exactly */

  /* The communicator. */
  EXPECT_INVALID("invalid communicator", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, bf, none, NULL, NULL);
  /* Buffers. */
  EXPECT_INVALID("input is NULL", NULL, RES, W, OUT, 4, 4096, 1e-6f, bf, bf, none, NULL, c);
  EXPECT_INVALID("output is NULL", IN, RES, W, NULL, 4, 4096, 1e-6f, bf, bf, none, NULL, c);
  EXPECT_INVALID("input", (const char*)IN + 1, RES, W, OUT, 4, 4096, 1e-6f, bf, bf, none, NULL, c);
  EXPECT_INVALID("residual", IN, (char*)RES + 2, W, OUT, 4, 4096, 1e-6f, fcclFloat32, fcclFloat32, none, NULL, c);
  EXPECT_INVALID("weight", IN, RES, (const char*)W + 1, OUT, 4, 4096, 1e-6f, bf, bf, none, NULL, c);
  EXPECT_INVALID("output", IN, RES, W, (char*)OUT + 1, 4, 4096, 1e-6f, bf, bf, none, NULL, c);
  EXPECT_INVALID("scale", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, f8, fcclScaleStatic, (float*)((char*)SCALE + 1), c);
  /* Overlaps: bf16 4 x 4096 is 32 KiB. */
  EXPECT_INVALID("overlaps residual", IN, (char*)IN + 0x4000, W, OUT, 4, 4096, 1e-6f, bf, bf, none, NULL, c);
  EXPECT_INVALID("overlaps output", IN, RES, W, (char*)IN + 0x7ffe, 4, 4096, 1e-6f, bf, bf, none, NULL, c);
  EXPECT_INVALID("residual 0x200000 overlaps output", IN, RES, W, (char*)RES + 0x10, 4, 4096, 1e-6f, bf, bf, none,
                 NULL, c);
  EXPECT_INVALID("output 0x400000 overlaps scale", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, f8, fcclScaleDynamic,
                 (float*)OUT, c);
  EXPECT_INVALID("residual 0x200000 overlaps weight", IN, RES, (const char*)RES + 0x100, OUT, 4, 4096, 1e-6f, bf, bf,
                 none, NULL, c);
  EXPECT_INVALID("output 0x400000 overlaps scale", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, f8, fcclScaleStatic,
                 (float*)((char*)OUT + 64), c);
  /* Read-only buffers may share memory: weight inside the input, a static scale inside the weight. */
  EXPECT_PASSES(IN, RES, IN, OUT, 4, 4096, 1e-6f, bf, f8, fcclScaleStatic, (float*)W);
  /* Adjacent buffers do not overlap. */
  EXPECT_PASSES(IN, (char*)IN + 0x8000, W, (char*)IN + 0x10000, 4, 4096, 1e-6f, bf, bf, none, NULL);
  /* Sizes. */
  EXPECT_INVALID("hidden is 0", IN, RES, W, OUT, 4, 0, 1e-6f, bf, bf, none, NULL, c);
  EXPECT_INVALID("hidden is 0", NULL, NULL, NULL, NULL, 0, 0, 1e-6f, bf, bf, none, NULL, c);
  EXPECT_INVALID("row over", IN, RES, W, OUT, 4, 32769, 1e-6f, bf, bf, none, NULL, c);
  EXPECT_INVALID("row over", IN, RES, W, OUT, 4, 16385, 1e-6f, fcclFloat32, fcclFloat32, none, NULL, c);
  EXPECT_INVALID("overflow", IN, RES, W, OUT, SIZE_MAX / 1024, 4096, 1e-6f, bf, bf, none, NULL, c);
  /* eps. */
  EXPECT_INVALID("eps", IN, RES, W, OUT, 4, 4096, -1e-6f, bf, bf, none, NULL, c);
  EXPECT_INVALID("eps", IN, RES, W, OUT, 4, 4096, NAN, bf, bf, none, NULL, c);
  EXPECT_INVALID("eps", IN, RES, W, OUT, 4, 4096, INFINITY, bf, bf, none, NULL, c);
  /* Types and scales. */
  EXPECT_INVALID("datatype", IN, RES, W, OUT, 4, 4096, 1e-6f, fcclInt32, fcclInt32, none, NULL, c);
  EXPECT_INVALID("datatype", IN, RES, W, OUT, 4, 4096, 1e-6f, fcclFloat64, fcclFloat64, none, NULL, c);
  EXPECT_INVALID("datatype", IN, RES, W, OUT, 4, 4096, 1e-6f, f8, f8, fcclScaleStatic, SCALE, c);
  EXPECT_INVALID("datatype", IN, RES, W, OUT, 4, 4096, 1e-6f, (fcclDataType_t)fcclNumTypes, bf, none, NULL, c);
  EXPECT_INVALID("outtype", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, fcclFloat32, none, NULL, c);
  EXPECT_INVALID("outtype", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, (fcclDataType_t)-1, none, NULL, c);
  EXPECT_INVALID("unknown scaleMode", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, f8, fcclNumScaleModes, SCALE, c);
  EXPECT_INVALID("scaleMode", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, f8, none, NULL, c);
  EXPECT_INVALID("scaleMode", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, bf, fcclScaleDynamic, SCALE, c);
  EXPECT_INVALID("without an FP8", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, bf, none, SCALE, c);
  EXPECT_INVALID("scale is NULL", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, f8, fcclScaleStatic, NULL, c);
  EXPECT_INVALID("scale is NULL", IN, RES, W, OUT, 4, 4096, 1e-6f, bf, f8, fcclScaleDynamic, NULL, c);
  /* The comm records the failure as well. */
  EXPECT_STR_CONTAINS(fcclGetLastError(c), "fcclAllReduceAddRMSNorm: scale is NULL");

  /* The collectives refuse FP8. */
  EXPECT_EQ_INT(fcclAllReduce(IN, OUT, 4, f8, fcclSum, c, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "float8e4m3");
  EXPECT_EQ_INT(fcclAllGather(IN, OUT, 4, f8, c, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "float8e4m3");
  EXPECT_EQ_INT(fcclBroadcast(IN, OUT, 4, f8, 0, c, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclReduceScatter(IN, OUT, 4, f8, fcclSum, c, NULL), fcclInvalidArgument);

  pthread_mutex_destroy(&comm.errorLock);
  return testSummary("fused_norm_args");
}
