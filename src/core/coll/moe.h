/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mixture-of-experts layout as core sees it (src/core/coll/moe.c; docs/moe.md), and the pure checks of its
 * public calls, which the unit tests run without a GPU.
 */
#ifndef FCCL_CORE_MOE_H_
#define FCCL_CORE_MOE_H_

#include "fccl.h"
#include "moe_shape.h"

#include <stddef.h>
#include <stdint.h>

struct fcclComm;
struct fcclRegistration;

struct fcclMoeLayout {
  uint64_t magic;
  struct fcclComm* comm;
  fcclMoeConfig_t config;
  fcclMoeShape shape;
  uint64_t hash;   /* of the configuration: the calls' prints carry it */
  void* workspace; /* fcclMemAlloc'd, registered with every rank */
  struct fcclRegistration* registration;
  void* scratch; /* cudaMalloc'd */
  uint64_t peerWorkspace[FCCL_DEVICE_MAX_RANKS];
  int defaultBlocks;          /* blocks of a call that passes 0 */
  int maxBlocks;              /* the most a call may ask for: the SM count (FCCL_DEVICE_MAX_BLOCKS) */
  long long dispatchTokens;   /* tokens of the last dispatch enqueued; -1: none yet */
  int orphaned;               /* its communicator was torn down, and its memory with it: only fcclMoeLayoutDestroy
                               * takes it now */
  struct fcclMoeLayout* next; /* the process's live layouts */
};

/* A dispatch as the application called it. */
struct fcclMoeDispatchCall {
  const void* x;
  const float* xScales;
  const void* topkIdx;
  fcclDataType_t idxType;
  const float* topkWeights;
  size_t tokens;
  fcclDataType_t datatype;
  fcclMoeRecv_t recv;
  int blocks;
};

/* A combine as the application called it. */
struct fcclMoeCombineCall {
  const void* y;
  void* out;
  const float* topkWeights;
  size_t tokens;
  fcclDataType_t datatype;
  int blocks;
};

/*
 * config checked for a communicator of nranks ranks, and its shape. fcclInvalidArgument with a message naming the
 * field (FCCL_ERROR) when a field is out of range. Pure.
 */
fcclResult_t fcclMoeConfigCheck(const fcclMoeConfig_t* config, int nranks, fcclMoeShape* shape);

/* The hash of a configuration that the calls' prints carry (the fields every rank must share). Pure. */
uint64_t fcclMoeConfigHash(const fcclMoeConfig_t* config);

/* A dispatch's or a combine's arguments against layout's shape and block bound (no CUDA call, no pointer
 * dereferenced): fcclInvalidArgument naming the argument, fcclInvalidUsage for a combine that does not follow a
 * dispatch of the same tokens. */
fcclResult_t fcclMoeCheckDispatch(const struct fcclMoeLayout* layout, const struct fcclMoeDispatchCall* call);
fcclResult_t fcclMoeCheckCombine(const struct fcclMoeLayout* layout, const struct fcclMoeCombineCall* call);

/*
 * Called by the communicator's teardown (core/comm/teardown.c) once its kernels have ended and its peer memory is
 * released: frees the memory of comm's live layouts and orphans them, so that an abort or a destroy that comes first
 * leaks nothing and the application's fcclMoeLayoutDestroy afterwards only frees the handle.
 */
void fcclMoeReleaseLayouts(struct fcclComm* comm);

/*
 * For tests without a GPU: a layout of config on comm with no memory (the calls' checks run, and stop where they
 * would touch the device), and its release. fcclMoeConfigCheck's codes.
 */
fcclResult_t fcclMoeLayoutCreateHostOnly(struct fcclComm* comm, const fcclMoeConfig_t* config, int maxBlocks,
                                         fcclMoeLayout_t* layout);
void fcclMoeLayoutDestroyHostOnly(fcclMoeLayout_t layout);

#endif /* FCCL_CORE_MOE_H_ */
