/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the NCCL path's test share (test_nccl_path.c, test_nccl_path_calls.c, test_nccl_path_ref.c,
 * test_nccl_path_faults.c): what main hands every forked rank, the host identities, one rank's state, and the
 * functions one file calls in another.
 */
#ifndef FCCL_TEST_NCCL_PATH_H_
#define FCCL_TEST_NCCL_PATH_H_

#include "test_allreduce_common.h"

#include <cuda_runtime.h>
#include <fccl.h>
#include <stddef.h>
#include <stdint.h>

struct testWire;

struct testArgs {
  const char* mode;
  struct collShared* shared;
  uint64_t seed;
  int gpus;
  struct testWire* wire; /* vanishedhosts: laid before the ranks are forked */
};

enum { FCCL_HOST_ONE = 0, FCCL_HOST_PER_RANK = 1, FCCL_HOST_PER_PAIR = 2, FCCL_HOST_INTERLEAVED = 3 };

/* One rank's communicator, stream and buffers, and the number of its next call. */
struct rankState {
  fcclComm_t comm;
  int rank, nranks;
  uint64_t seed;
  uint64_t call;        /* numbers the inputs: every rank counts the same calls */
  int hostRanks;        /* the hierarchical path's ranks per host (its all-reduce's results), 0 on the others */
  int hostsInterleaved; /* the hierarchical path's hosts interleaved: rank r on host r % hosts */
  cudaStream_t stream;
  void* send; /* device, capacity bytes each */
  void* recv;
  void* host; /* pinned */
  size_t capacity;
};

/* ---- test_nccl_path.c ---- */

/* Before any fccl call of the rank: its NCCL host (always its own), its fccl host (FCCL_HOST_*), and FCCL_PATH. */
void setIdentity(int rank, int fcclHosts, const char* path);

/* ---- test_nccl_path_ref.c ---- */

/* Reduced output: element i of this rank's output is the reduction of every rank's input element first + i.
 * hostRanks > 0: the output of the hierarchical all-reduce over hosts of that many ranks (interleaved: rank r on
 * host r % hosts). Returns the wrong elements, the first described in msg. */
size_t checkReduced(fcclDataType_t type, fcclRedOp_t op, uint64_t seed, uint64_t call, int nranks, int hostRanks,
                    int interleaved, uint64_t first, const void* got, size_t count, char* msg, size_t size);
/* Pre-multiplied sum: element i is the sum over ranks of input element first + i times scalar (the bits of an
 * element of type), as fccl's kernels or NCCL give it. */
size_t checkPreMulSum(fcclDataType_t type, uint64_t scalar, uint64_t seed, uint64_t call, int nranks, uint64_t first,
                      const void* got, size_t count, char* msg, size_t size);
/* Moved output: element i equals element first + i of `from`'s input, bit for bit. */
size_t checkMoved(fcclDataType_t type, uint64_t seed, uint64_t call, int from, uint64_t first, const void* got,
                  size_t count, char* msg, size_t size);

/* ---- test_nccl_path_calls.c: 0 when the call ran and checked right ---- */

int runAllReduce(struct rankState* s, fcclDataType_t type, fcclRedOp_t op, size_t count, int inPlace);
int stateInit(struct rankState* s, fcclComm_t comm, int rank, int nranks, uint64_t seed);
void stateFini(struct rankState* s);
/* Every call on random data. Every rank makes the same calls in the same order. */
int runEverything(struct rankState* s, struct collShared* shared);
/* The hierarchical path's own cases (its all-reduce's counts, types and ops, the group refusal, its other forms). */
int runHierExtras(struct rankState* s);

/* ---- test_nccl_path_rooted.c: fcclReduce, fcclBcast, fcclGather, fcclScatter and pre-multiplied sums ---- */

/* Every one of them on random data (every rank the same calls), one captured in a graph with a device scalar. */
int runRooted(struct rankState* s);
/* 0 when the communicator's path is want and its reason holds reasonPart (NULL: any). */
int expectPath(struct rankState* s, fcclPath_t want, const char* reasonPart);

/* ---- test_nccl_path_faults.c: a forked rank's part; its testSummary ---- */

int rankAbort(int rank, int nranks, struct testArgs* args, int hier);
int rankDead(int rank, int nranks, struct testArgs* args, int fcclHosts, const char* path, const char* name);
int rankVanished(int rank, int nranks, struct testArgs* args);
int rankNcclInitFails(int rank, int nranks, struct testArgs* args);

#endif /* FCCL_TEST_NCCL_PATH_H_ */
