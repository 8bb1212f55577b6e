/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclCommAbort while a non-blocking fcclCommInitExternal is inside the application's all-gather callback, a wait
 * fccl cannot bound: the abort returns at once instead of joining the init thread, the thread frees the
 * communicator once the callback returns, and no callback is called after that. Then a new communicator works.
 * One process and one GPU: the communicator has 2 ranks of which only this one exists, and the callback blocks
 * until the test releases it. Exits 77 without a GPU.
 */
#include "fccl.h"
#include "test.h"

#include <cuda_runtime.h>
#include <dirent.h>
#include <string.h>
#include <time.h>

#define WAIT_MS 20000 /* bound of every wait here */

struct blocking {
  int calls;    /* atomic */
  int entered;  /* atomic */
  int release;  /* atomic */
  int returned; /* atomic */
};

static int64_t nowMs(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void sleepMs(int ms) {
  struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&pause, NULL);
}

/* Waits until *flag is non-zero, at most WAIT_MS; whether it became so. */
static int waitFlag(const int* flag) {
  for (int64_t end = nowMs() + WAIT_MS; nowMs() < end; sleepMs(1))
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE)) return 1;
  return 0;
}

static int threadCount(void) {
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return -1;
  int count = 0;
  for (struct dirent* entry = readdir(dir); entry; entry = readdir(dir))
    if (entry->d_name[0] != '.') count++;
  closedir(dir);
  return count;
}

/* The application's all-gather: it fills this rank's slot, then waits for its (absent) peer until released. */
static fcclResult_t blockingAllgather(void* ctx, const void* send, void* recv, size_t bytes) {
  struct blocking* state = ctx;
  __atomic_add_fetch(&state->calls, 1, __ATOMIC_ACQ_REL);
  memcpy(recv, send, bytes); /* rank 0's slot */
  __atomic_store_n(&state->entered, 1, __ATOMIC_RELEASE);
  (void)waitFlag(&state->release);
  __atomic_store_n(&state->returned, 1, __ATOMIC_RELEASE);
  return fcclRemoteError; /* the application's process group lost its peer too */
}

static fcclResult_t countingAllgather(void* ctx, const void* send, void* recv, size_t bytes) {
  (void)ctx;
  memcpy(recv, send, bytes);
  return fcclSuccess;
}

int main(void) {
  testRequireGpus(1);
  EXPECT_EQ_INT(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ_INT(cudaFree(NULL), cudaSuccess); /* the runtime's own threads exist before the count */
  const int threadsBefore = threadCount();

  static struct blocking state; /* the callback's context outlives the communicator, as the header asks */
  fcclBootstrapCallbacks_t callbacks = {&state, blockingAllgather, NULL};
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.timeoutMs = WAIT_MS;
  config.commName = "abort-in-callback";
  fcclComm_t comm = NULL;
  fcclResult_t res = fcclCommInitExternal(&comm, 2, 0, &callbacks, &config);
  EXPECT_MSG(res == fcclInProgress, "non-blocking fcclCommInitExternal returned %d: %s", res, fcclGetLastError(NULL));
  if (res != fcclInProgress) return testSummary("abort_external");
  EXPECT_MSG(waitFlag(&state.entered), "the init never called the all-gather callback");

  int64_t start = nowMs();
  EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
  int64_t took = nowMs() - start;
  EXPECT_MSG(took < 1000, "fcclCommAbort took %lld ms: it waited for the application's callback", (long long)took);
  EXPECT_MSG(!__atomic_load_n(&state.returned, __ATOMIC_ACQUIRE), "the callback returned before the abort did");
  printf("fcclCommAbort returned after %lld ms, the callback still running\n", (long long)took);
  /* The handle is dead, and refused as such while the init thread still holds the memory. */
  int nranks = 0;
  EXPECT_EQ_INT(fcclCommCount(comm, &nranks), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommAbort(comm), fcclInvalidArgument);

  /* The callback returns: the init thread fails, frees the communicator and ends; no callback comes after. */
  __atomic_store_n(&state.release, 1, __ATOMIC_RELEASE);
  EXPECT(waitFlag(&state.returned));
  int threadsAfter = threadCount();
  for (int64_t end = nowMs() + WAIT_MS; threadsAfter > threadsBefore && nowMs() < end; sleepMs(5))
    threadsAfter = threadCount();
  EXPECT_MSG(threadsAfter <= threadsBefore, "%d threads before the init, %d after its callback returned",
             threadsBefore, threadsAfter);
  sleepMs(100);
  EXPECT_EQ_INT(__atomic_load_n(&state.calls, __ATOMIC_ACQUIRE), 1);
  fcclMemStats_t stats = {.size = sizeof(stats)};
  EXPECT_EQ_INT(fcclCommGetMemStats(NULL, &stats), fcclSuccess);
  EXPECT_EQ_INT(stats.openMappings, 0);

  /* The library goes on: a communicator of one rank through the same kind of init. */
  fcclBootstrapCallbacks_t single = {NULL, countingAllgather, NULL};
  fcclComm_t other = NULL;
  res = fcclCommInitExternal(&other, 1, 0, &single, NULL);
  EXPECT_MSG(res == fcclSuccess, "a new communicator after the abort: %s", fcclGetLastError(NULL));
  if (res == fcclSuccess) {
    int count = 0;
    EXPECT_EQ_INT(fcclCommCount(other, &count), fcclSuccess);
    EXPECT_EQ_INT(count, 1);
    EXPECT_EQ_INT(fcclCommDestroy(other), fcclSuccess);
  }
  return testSummary("abort_external");
}
