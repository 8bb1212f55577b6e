/* SPDX-License-Identifier: Apache-2.0 */
/* Create/destroy cycles and the drift they leave: see test_cycles.h. */
#include "test_cycles.h"

#include "test.h"

#include <cuda_runtime.h>

static fcclMemStats_t processStats(void) {
  fcclMemStats_t stats;
  memset(&stats, 0, sizeof(stats));
  stats.size = sizeof(stats);
  EXPECT_EQ_INT(fcclCommGetMemStats(NULL, &stats), fcclSuccess);
  return stats;
}

/* create, use, destroy; 1 when all went well. */
static int oneCycle(const struct testCycleOps* ops, void* ctx, long cycle) {
  if (!ops->create(ctx, cycle)) return 0;
  const int used = !ops->use || ops->use(ctx, cycle);
  ops->destroy(ctx, cycle);
  return used;
}

int testCyclesRun(struct testShm* shm, int rank, long cycles, long long maxDriftBytes, const struct testCycleOps* ops,
                  void* ctx, struct testCycleResult* result) {
  const int failedBefore = testFailed;
  struct testCycleResult r;
  memset(&r, 0, sizeof(r));
  if (!oneCycle(ops, ctx, 0)) {
    testShmAbort(shm, rank);
    if (result) *result = r;
    return 0;
  }
  size_t freeStart = 0, freeEnd = 0, total = 0;
  EXPECT_EQ_INT(testShmBarrier(shm, rank), TEST_SHM_OK);
  EXPECT_EQ_INT(cudaMemGetInfo(&freeStart, &total), cudaSuccess);
  EXPECT_EQ_INT(testShmBarrier(shm, rank), TEST_SHM_OK);
  r.before = processStats();
  r.measured = 1;
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (long cycle = 1; cycle <= cycles; cycle++) {
    if (!oneCycle(ops, ctx, cycle)) break;
    r.done++;
  }
  r.seconds = (double)testElapsedMs(&start) / 1000.0;
  EXPECT_EQ_INT(r.done, cycles);
  if (r.done != cycles) testShmAbort(shm, rank); /* a peer may wait in a create this rank will never join */
  r.after = processStats();
  EXPECT_EQ_INT(testShmBarrier(shm, rank), TEST_SHM_OK);
  EXPECT_EQ_INT(cudaMemGetInfo(&freeEnd, &total), cudaSuccess);
  EXPECT_EQ_INT(testShmBarrier(shm, rank), TEST_SHM_OK); /* no rank goes on to allocate while another measures */
  EXPECT_EQ_INT(r.after.openMappings, 0);
  EXPECT_EQ_INT(r.after.totalCloses, r.after.totalOpens);
  /* Other processes may use the GPU too: a leak of even one 2 MiB chunk per thousand cycles shows up here. */
  r.deviceDrift = (long long)freeStart - (long long)freeEnd;
  EXPECT_MSG(r.deviceDrift <= maxDriftBytes, "rank %d: device memory in use grew by %lld bytes over %ld cycles", rank,
             r.deviceDrift, r.done);
  printf("rank %d: %ld %s cycles in %.1f s: %llu mappings open, device memory drift %lld bytes\n", rank, r.done,
         ops->what, r.seconds, (unsigned long long)r.after.openMappings, r.deviceDrift);
  if (result) *result = r;
  return testFailed == failedBefore;
}
