/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Create/destroy cycles and what they leave behind: a test supplies the pair (a communicator through the public
 * API, a transport driven by hand), runs it thousands of times on every rank, and learns whether peer mappings or
 * device memory drifted. Needs a current CUDA device and the fccl library.
 */
#ifndef FCCL_TEST_CYCLES_H_
#define FCCL_TEST_CYCLES_H_

#include "fccl.h"
#include "test_shm.h"

/* One cycle is create, use (when not NULL), destroy. create is collective over the ranks; each returns 1 on
 * success, and reports its own failures (EXPECT). */
struct testCycleOps {
  const char* what; /* names the cycles in the summary line, e.g. "init/destroy" */
  int (*create)(void* ctx, long cycle);
  int (*use)(void* ctx, long cycle);
  void (*destroy)(void* ctx, long cycle);
};

struct testCycleResult {
  int measured;                 /* cycle 0 went well and the counted cycles ran: the numbers below mean something */
  long done;                    /* counted cycles completed */
  fcclMemStats_t before;        /* fcclCommGetMemStats(NULL) after cycle 0 */
  fcclMemStats_t after;         /* and after the last cycle */
  long long deviceDrift;        /* bytes of device memory in use after the last cycle more than after cycle 0 */
  double seconds;               /* the counted cycles' wall time */
};

/*
 * Runs cycle 0, which warms the CUDA runtime and the first-use allocations up and is not counted, then cycles
 * 1..cycles, and checks (EXPECT) that every one completed, that no peer mapping is left open and every one opened
 * was closed, and that device memory in use grew by at most maxDriftBytes. cudaMemGetInfo counts the whole GPU and
 * ranks may share one, so each rank measures between two barriers of shm, while no rank holds what the cycles
 * create: a peer still destroying its last communicator is not our leak. A failed cycle aborts shm (the ranks are
 * out of step from then on). Prints one summary line; fills result when not NULL (the caller checks more, e.g.
 * how many mappings the cycles opened). Returns 1 when the cycles ran and every check passed.
 */
int testCyclesRun(struct testShm* shm, int rank, long cycles, long long maxDriftBytes, const struct testCycleOps* ops,
                  void* ctx, struct testCycleResult* result);

#endif /* FCCL_TEST_CYCLES_H_ */
