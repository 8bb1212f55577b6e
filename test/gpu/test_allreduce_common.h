/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the collective GPU tests share: forked ranks that meet through ids published in shared memory, a GPU count
 * probed in a child (the parent must not initialise CUDA before it forks), communicators that may share GPUs
 * (3, 4 and 8 ranks on 2 GPUs), device buffers with poisoned guards, one checked all-reduce call, and the
 * cross-rank comparison of output hashes.
 *
 * Environment: FCCLTEST_SEED (data), FCCLTEST_QUICK=1 (fewer sizes and iterations, e.g. under compute-sanitizer),
 * FCCLTEST_VERBOSE=1 (one line per call).
 */
#ifndef FCCL_TEST_ALLREDUCE_COMMON_H_
#define FCCL_TEST_ALLREDUCE_COMMON_H_

#include "fccl.h"
#include "test.h"
#include "test_allreduce_ref.h"
#include "test_shm.h"

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#define COLL_MAX_IDS 64
#define COLL_MAX_HASHES 65536
#define COLL_GUARD 64          /* poisoned bytes before and after every buffer region */
#define COLL_POISON 0xa5

/* In a case runner with a struct collContext* ctx: fails the case (returns 1) when call fails, naming the rank,
 * what the case is and the call. */
#define COLL_CHECK_CUDA(what, call)                                                                       \
  do {                                                                                                    \
    cudaError_t e_ = (call);                                                                              \
    if (e_ != cudaSuccess) {                                                                              \
      testFail(__FILE__, __LINE__, "rank %d: %s: %s: %s", ctx->rank, (what), #call, cudaGetErrorString(e_)); \
      return 1;                                                                                           \
    }                                                                                                     \
  } while (0)

#define COLL_CHECK_FCCL(what, call)                                                                           \
  do {                                                                                                        \
    fcclResult_t r_ = (call);                                                                                 \
    if (r_ != fcclSuccess) {                                                                                  \
      testFail(__FILE__, __LINE__, "rank %d: %s: %s: %s: %s", ctx->rank, (what), #call, fcclGetErrorString(r_), \
               fcclGetLastError(NULL));                                                                       \
      return 1;                                                                                               \
    }                                                                                                         \
  } while (0)

/* Shared by the parent and every forked rank: the caller's area of a test_shm region. */
struct collShared {
  struct testShm* shm; /* the region this lives in: bounded waits, aborted when a rank dies (testShmForkRanks) */
  int idReady[COLL_MAX_IDS];
  fcclUniqueId ids[COLL_MAX_IDS];
  uint64_t hashes[COLL_MAX_HASHES][REF_MAX_RANKS]; /* output hash of call c on rank r (0: none) */
  int64_t stamps[16][REF_MAX_RANKS];               /* CLOCK_MONOTONIC ns, free for tests */
  int flags[16];                                   /* free for tests */
};

/* For nranks forked ranks; exits when the region cannot be mapped. */
struct collShared* collSharedNew(int nranks);
void collSharedFree(struct collShared* shared);

/* FCCLTEST_QUICK set: run the short variant. */
int collQuick(void);
int collVerbose(void);

/* Rank 0 creates id number `which` and publishes it; the others wait for it (at most 60 s). */
int collShareId(struct collShared* shared, int rank, int which, fcclUniqueId* id);

/* Creates communicator number `which` of nranks ranks; device rank % gpus, shared GPUs allowed when needed.
 * NULL on failure (reported). */
fcclComm_t collCommCreate(struct collShared* shared, int rank, int nranks, int gpus, int which);

/* Wall clock in ns (CLOCK_MONOTONIC, comparable across processes). */
int64_t collNowNs(void);

/* A device buffer for one side of a call: capacity bytes plus guards; registered when reg is set (fcclMemAlloc +
 * fcclCommRegister: every rank must create its buffers in the same order). */
struct collBuffer {
  char* base; /* guard + capacity + guard */
  size_t capacity;
  int registered;
  fcclRegHandle_t handle;
};

int collBufferCreate(fcclComm_t comm, struct collBuffer* buffer, size_t capacity, int registered);
void collBufferDestroy(fcclComm_t comm, struct collBuffer* buffer);

/* One all-reduce call, checked. */
struct collCase {
  fcclDataType_t type;
  fcclRedOp_t op;
  int algo;        /* fcclDevKernel_t, or -1 for the automatic choice */
  int inPlace;
  size_t count;
  size_t sendOffset; /* bytes from the start of the region; a multiple of the element size */
  size_t recvOffset;
};

/* Per-rank context of a test. */
struct collContext {
  struct collShared* shared;
  fcclComm_t comm;
  int rank;
  int nranks;
  uint64_t seed;
  cudaStream_t stream;
  struct collBuffer send;
  struct collBuffer recv;
  void* hostIn;  /* pinned, capacity + 2 guards */
  void* hostOut;
  size_t hostBytes;
};

/* Allocates the context's stream, buffers (capacity bytes each side) and pinned host staging. */
int collContextInit(struct collContext* ctx, struct collShared* shared, fcclComm_t comm, int rank, int nranks,
                    uint64_t seed, size_t capacity, int registered);
void collContextFini(struct collContext* ctx);

/*
 * Poisons the buffers, copies in rank's input of call `call`, runs the all-reduce (fcclAllReduceAlgo), waits,
 * and checks: the output against the reference, the guards untouched, an out-of-place input unchanged. Stores
 * the output's hash as shared->hashes[call][rank]. Returns the number of problems (0: all good).
 */
int collRunCase(struct collContext* ctx, const struct collCase* c, uint64_t call);

/* How the registered two-shot would scatter this call (fcclScatter_t; pull when another algorithm runs), under
 * the environment's FCCL_STAGING_BYTES and FCCL_COPY_SCATTER_MIN (fcclScatterName names it). */
int collScatterOf(int algo, int nranks, size_t bytes, int registered, int inPlace);

/* After every rank is done: the outputs of calls [0, calls) hash equal on every rank that recorded one. Returns
 * the number of calls whose hashes differ. */
int collCompareHashes(const struct collShared* shared, int nranks, uint64_t calls);

/* What every rank of a replay test (graph, graph_register) gets: the shared page, the data seed, the GPU count. */
struct collReplayArgs {
  struct collShared* shared;
  uint64_t seed;
  int gpus;
};

/*
 * main() of a replay test: argv[1] is the rank count (default 2, at most REF_MAX_RANKS); skips without a GPU; forks
 * the ranks into rankMain (arg: a struct collReplayArgs), waits at most timeoutSeconds, then compares the output
 * hashes of the shared->flags[0] calls the ranks recorded. Returns the process exit code.
 */
int collReplayMain(int argc, char** argv, const char* name, int (*rankMain)(int rank, int nranks, void* arg),
                   int timeoutSeconds);

/* What every rank of a collective test with modes gets: the mode its command line named, and from collTestMain the
 * shared page, the data seed and the GPU count. */
struct collTestArgs {
  const char* mode;
  struct collShared* shared;
  uint64_t seed;
  int gpus;
};

/*
 * main() of a collective test with modes, once its arguments are checked: skips without a GPU (TEST_SKIP); else sets
 * args' seed, shared page (for nranks) and GPU count, prints the run's line, forks the ranks into rankMain (arg:
 * args), waits at most timeoutSeconds, and checks that every rank exited 0 (naming each that did not) and, unless
 * calls is NULL, that the outputs of the shared->flags[0] calls the ranks recorded hash equal on every rank (calls
 * says what they were in the message, e.g. "calls"). Frees the page; returns the process exit code.
 */
int collTestMain(const char* name, struct collTestArgs* args, int nranks,
                 int (*rankMain)(int rank, int nranks, void* arg), int timeoutSeconds, const char* calls);

/* The exit code of a rank of such a test: its summary, named "<name> <mode> rank <rank>", and its mode's code (0:
 * the mode ran to its end). */
int collRankSummary(const char* name, const char* mode, int rank, int code);

/* Memory and a stream on the GPU after the current one (there must be two), for calls that must refuse them. */
struct collForeign {
  int current; /* the device that was current, and is again after collForeignCreate */
  int other;
  void* buffer;
  cudaStream_t stream;
};

void collForeignCreate(struct collForeign* foreign, int gpus, size_t bytes);
/* Checks that the current device is still the one collForeignCreate found (the calls left it as the caller had it),
 * then frees the memory and the stream. */
void collForeignFree(struct collForeign* foreign);

/* Whether algorithm algo can run the case (capacity, registration), with the default layout. */
int collAlgoApplicable(int algo, int nranks, size_t bytes, int registered, int inPlace);

#endif /* FCCL_TEST_ALLREDUCE_COMMON_H_ */
