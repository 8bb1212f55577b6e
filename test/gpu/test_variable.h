/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the variable all-gather and reduce-scatter test share (test_variable.c: the calls, their checks,
 * the sweeps and main; test_variable_modes.c: graph capture and replay, bad input, ranks out of step, the NCCL
 * path). Inputs are refInputBits(type, seed, call, rank, index): an all-gather input is rank r's counts[r] elements,
 * a reduce-scatter input is rank r's sum-of-counts elements, block p at the sum of the counts before p. Every rank
 * derives the same counts from the same generator state, so the ranks agree without exchanging them.
 */
#ifndef FCCL_TEST_VARIABLE_H_
#define FCCL_TEST_VARIABLE_H_

#include "test_allreduce_common.h"

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#define VAR_AUTO (-1) /* a case's form: the automatic choice, else FCCL_MOVE_LL / _DIRECT / _STAGED */

/* One call as a test makes it. */
struct varCase {
  int reduces; /* 0: fcclAllGatherV; 1: fcclReduceScatterV */
  fcclDataType_t type;
  fcclRedOp_t op;
  int form;   /* VAR_AUTO or a forced FCCL_MOVE_* form */
  int device; /* counts in device memory (fcclAllGatherVDevice, ...), with capacities of the largest count + slack
               * and the sum + slack */
  int inPlace;
  size_t slack;
  size_t counts[REF_MAX_RANKS];
  size_t sendOffset; /* bytes into the send region (a multiple of the element size) */
  size_t recvOffset;
};

/* One rank's communicator, stream and buffers of a test. */
struct varContext {
  struct collShared* shared;
  fcclComm_t comm;
  int rank, nranks;
  uint64_t seed;
  int ncclPath; /* the communicator runs on NCCL: forms are not forced, sums in NCCL's order */
  cudaStream_t stream;
  struct collBuffer send[2]; /* [registered] */
  struct collBuffer recv[2];
  void* scratch;        /* device, capacity bytes: fcclReduceScatter / fcclAllGather beside the V call */
  int64_t* devCounts;   /* device, REF_MAX_RANKS counts */
  int64_t* hostCounts;  /* pinned, likewise */
  unsigned char* host;  /* pinned, capacity + 2 guards */
  unsigned char* host2; /* likewise */
  size_t capacity;
};

/* Buffers of capacity bytes (and guards), plain, and registered too with withRegistered (not on the NCCL path). */
int varContextInit(struct varContext* ctx, const struct collTestArgs* args, fcclComm_t comm, int rank, int nranks,
                   size_t capacity, int withRegistered);
void varContextFini(struct varContext* ctx);

/* The capacities of a device-counts case: elements of each rank's sendbuf and recvbuf. */
void varCapacities(const struct varCase* c, int nranks, size_t* sendCapacity, size_t* recvCapacity);
/* Sum of the counts; the largest. */
size_t varTotal(const struct varCase* c, int nranks);
size_t varLargest(const struct varCase* c, int nranks);

/* Where the case's buffers lie in the send and receive regions given (each capacity + 2 guards). */
struct varPlace {
  char* sendRegion; /* base of the buffer with its guards */
  char* recvRegion;
  char* sendbuf;
  char* recvbuf;
};
void varPlaceIn(char* sendRegion, char* recvRegion, const struct varCase* c, int rank, int nranks, struct varPlace* p);

/* Enqueued on stream, no wait: both regions poisoned, this rank's input of call `call` uploaded (through `staging`,
 * pinned, capacity + guards bytes: it must stay untouched until the stream passes), the device counts written
 * (through hostCounts, likewise). */
int varUpload(struct varContext* ctx, const struct varCase* c, const struct varPlace* p, uint64_t call, void* staging,
              int64_t* hostCounts, int64_t* devCounts, cudaStream_t stream);
/* The call itself, its form forced unless VAR_AUTO (internal entry points, variable.h). */
fcclResult_t varInvoke(const struct varContext* ctx, const struct varCase* c, const struct varPlace* p,
                       const int64_t* devCounts, cudaStream_t stream);
/* After the stream passed the call: the output against the reference (moved bits exactly; reduced elements with
 * refCheckElement), the bytes it must not write (guards, beyond the output, an out-of-place input, the other
 * blocks of an in-place reduce-scatter) as they were. Records the all-gather's output hash as
 * shared->hashes[hashIndex][rank] when hashIndex >= 0. Returns the number of problems. */
int varCheck(struct varContext* ctx, const struct varCase* c, const struct varPlace* p, uint64_t call,
             int64_t hashIndex, const char* what);

/* "reduce-scatter bfloat16 sum, staged, device counts (slack 3), in place, counts 3/0/17": for messages. */
void varDescribe(const struct varCase* c, int nranks, char* out, size_t size);

/* Counts by pattern (VAR_PATTERNS of them: random, skewed to one rank, zeros between, all zero, equal, one rank
 * only), each at most largest, from *rng (the same on every rank). */
#define VAR_PATTERNS 6
void varMakeCounts(int pattern, int nranks, size_t largest, uint64_t* rng, size_t* counts);
const char* varPatternName(int pattern);

/* test_variable_modes.c */
int modeGraph(int rank, int nranks, const struct collTestArgs* args);
int modeInvalid(int rank, int nranks, const struct collTestArgs* args);
int modeMismatch(int rank, int nranks, const struct collTestArgs* args);
int modeNccl(int rank, int nranks, const struct collTestArgs* args);
int modeBudget(int rank, int nranks, const struct collTestArgs* args);
/* test_variable.c: the sweep on ctx (forms forced only on fccl's kernels); returns the calls made. */
uint64_t varSweep(struct varContext* ctx, int narrow, uint64_t firstCall);

#endif /* FCCL_TEST_VARIABLE_H_ */
