/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Communicator creation through the public API, on GPUs (exits 77 without one). Modes (argv[1]):
 *   rank     - fcclCommInitRank across 2 forked processes, one GPU each (with a single GPU they share it through
 *              config.allowSharedDevice); Count/CuDevice/UserRank/GetAsyncError; a non-blocking init polled to
 *              completion; two ranks on one GPU refused without allowSharedDevice.
 *   failures - one process: a missing rank times out (the message names it), fcclCommAbort ends a non-blocking
 *              init that waits for a missing rank promptly, bad ids and configs are refused.
 *   all      - fcclCommInitAll over every visible GPU (up to 8), with and without a device list.
 *   env      - fcclCommInitFromEnv in 2 processes with torchrun's variables: the device follows LOCAL_RANK, or the
 *              device the caller chose first.
 *   external - fcclCommInitExternal with an all-gather over a socketpair between 2 processes.
 *   nccl     - fcclCommInitFromNccl over an ncclComm_t of 2 processes (builds with NCCL), or the
 *              "built without NCCL" error.
 * Every wait is bounded: config.timeoutMs, and testForkRanks' limit.
 */
#include "fccl.h"
#include "fccl_build_config.h"
#include "test.h"
#include "test_bootstrap_util.h"

#include <cuda_runtime.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#if FCCL_HAVE_NCCL
#include <nccl.h>
#endif

#define NRANKS 2
#define INIT_TIMEOUT_MS 30000

/* Counts GPUs in a child, so that this process has not initialised CUDA when it forks the ranks. */
static int gpuCountInChild(void) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  pid_t pid = fork();
  if (pid == 0) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    if (write(fds[1], &count, sizeof(count)) != sizeof(count)) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  int count = 0;
  if (read(fds[0], &count, sizeof(count)) != sizeof(count)) count = 0;
  close(fds[0]);
  waitpid(pid, NULL, 0);
  return count;
}

static int gpus;

static fcclConfig_t testConfig(const char* name) {
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.commName = name;
  config.timeoutMs = INIT_TIMEOUT_MS;
  config.allowSharedDevice = gpus < NRANKS; /* one GPU: both processes on it */
  return config;
}

static void checkComm(fcclComm_t comm, int nranks, int rank, int dev) {
  int value = -1;
  EXPECT_EQ_INT(fcclCommCount(comm, &value), fcclSuccess);
  EXPECT_EQ_INT(value, nranks);
  EXPECT_EQ_INT(fcclCommUserRank(comm, &value), fcclSuccess);
  EXPECT_EQ_INT(value, rank);
  EXPECT_EQ_INT(fcclCommCuDevice(comm, &value), fcclSuccess);
  EXPECT_EQ_INT(value, dev);
  fcclResult_t state = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &state), fcclSuccess);
  EXPECT_EQ_INT(state, fcclSuccess);
}

/* Rank 0 makes an id and publishes it in slot; everyone returns it. */
static int shareId(struct bootShared* shared, int rank, fcclUniqueId* id) {
  if (rank == 0) {
    if (fcclGetUniqueId(id) != fcclSuccess) return 0;
    bootPublishId(shared, id);
    return 1;
  }
  return bootWaitId(shared, id);
}

/* ---- rank ---- */

static int rankMode(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct bootShared* shared = arg;
  int dev = rank % gpus;
  EXPECT_EQ_INT(cudaSetDevice(dev), cudaSuccess);
  fcclUniqueId id;
  if (!shareId(shared, rank, &id)) return 1;

  /* Blocking. */
  fcclConfig_t config = testConfig("blocking");
  fcclComm_t comm = NULL;
  int64_t start = bootNowMs();
  fcclResult_t res = fcclCommInitRankConfig(&comm, nranks, id, rank, &config);
  EXPECT_MSG(res == fcclSuccess, "rank %d: fcclCommInitRankConfig: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  printf("rank %d: init on device %d took %lld ms\n", rank, dev, (long long)(bootNowMs() - start));
  checkComm(comm, nranks, rank, dev);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);

  /* Non-blocking: fcclInProgress with a handle, polled until done. A new id: rank 0 withdraws the old one before
   * the ranks meet at a barrier, and publishes the new one after. */
  if (rank == 0) testShmPost(&shared->idReady, 0);
  EXPECT_EQ_INT(testShmBarrier(shared->shm, rank), TEST_SHM_OK);
  if (!shareId(shared, rank, &id)) return 1;
  config = testConfig("non-blocking");
  config.blocking = 0;
  comm = NULL;
  res = fcclCommInitRankConfig(&comm, nranks, id, rank, &config);
  EXPECT_MSG(res == fcclInProgress || res == fcclSuccess, "rank %d: non-blocking init returned %d: %s", rank, res,
             fcclGetLastError(NULL));
  EXPECT(comm != NULL);
  if (comm == NULL) return 1;
  fcclResult_t state = fcclInProgress;
  int64_t end = bootNowMs() + INIT_TIMEOUT_MS;
  while (state == fcclInProgress && bootNowMs() < end) {
    EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &state), fcclSuccess);
    bootSleepMs(1);
  }
  EXPECT_MSG(state == fcclSuccess, "rank %d: non-blocking init ended with %d: %s", rank, state,
             fcclGetLastError(comm));
  checkComm(comm, nranks, rank, dev);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return testFailed != 0;
}

/* Both processes on GPU 0 without allowSharedDevice: refused on both, naming both ranks. */
static int sharedGpuMode(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct bootShared* shared = arg;
  EXPECT_EQ_INT(cudaSetDevice(0), cudaSuccess);
  fcclUniqueId id;
  if (!shareId(shared, rank, &id)) return 1;
  fcclConfig_t config = testConfig("shared");
  config.allowSharedDevice = 0;
  fcclComm_t comm = NULL;
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, nranks, id, rank, &config), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "ranks 0 and 1 both use GPU");
  return testFailed != 0;
}

static void testRank(void) {
  struct bootShared* shared = bootSharedNew(NRANKS);
  int codes[NRANKS];
  EXPECT_EQ_INT(testShmForkRanks(shared->shm, rankMode, shared, 120, codes), 0);
  bootSharedFree(shared);
  shared = bootSharedNew(NRANKS);
  EXPECT_EQ_INT(testShmForkRanks(shared->shm, sharedGpuMode, shared, 120, codes), 0);
  bootSharedFree(shared);
}

/* ---- failures in one process ---- */

static void testFailures(void) {
  EXPECT_EQ_INT(cudaSetDevice(0), cudaSuccess);
  fcclUniqueId id;
  EXPECT_EQ_INT(fcclGetUniqueId(&id), fcclSuccess);
  fcclConfig_t config = testConfig("missing-rank");
  config.timeoutMs = 500;
  fcclComm_t comm = NULL;
  int64_t start = bootNowMs();
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, 2, id, 0, &config), fcclTimeout);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 1 did not arrive");
  EXPECT(bootNowMs() - start < 3000);
  EXPECT(comm == NULL);

  /* Non-blocking init waiting for a rank that never comes, ended by fcclCommAbort. */
  EXPECT_EQ_INT(fcclGetUniqueId(&id), fcclSuccess);
  config = testConfig("aborted");
  config.blocking = 0;
  config.timeoutMs = 60000;
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, 2, id, 0, &config), fcclInProgress);
  EXPECT(comm != NULL);
  bootSleepMs(300);
  fcclResult_t state = fcclSuccess;
  EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &state), fcclSuccess);
  EXPECT_EQ_INT(state, fcclInProgress);
  start = bootNowMs();
  EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
  int64_t abortMs = bootNowMs() - start;
  EXPECT_MSG(abortMs < 2000, "fcclCommAbort took %lld ms", (long long)abortMs);
  printf("fcclCommAbort ended a waiting init in %lld ms\n", (long long)abortMs);

  /* A failed non-blocking init: the handle stays valid until destroyed, with the error readable. */
  EXPECT_EQ_INT(fcclGetUniqueId(&id), fcclSuccess);
  config = testConfig("failed-non-blocking");
  config.blocking = 0;
  config.timeoutMs = 300;
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, 2, id, 0, &config), fcclInProgress);
  state = fcclInProgress;
  for (int i = 0; i < 5000 && state == fcclInProgress; i++) {
    fcclCommGetAsyncError(comm, &state);
    bootSleepMs(1);
  }
  EXPECT_EQ_INT(state, fcclTimeout);
  EXPECT_STR_CONTAINS(fcclGetLastError(comm), "rank 1 did not arrive");
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);

  fcclUniqueId zero;
  memset(&zero, 0, sizeof(zero));
  EXPECT_EQ_INT(fcclCommInitRank(&comm, 2, zero, 0), fcclInvalidArgument);
  int devs[2] = {0, 0};
  fcclComm_t comms[2];
  EXPECT_EQ_INT(fcclCommInitAll(comms, 2, devs), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "listed twice");
  devs[1] = gpus;
  EXPECT_EQ_INT(fcclCommInitAll(comms, 2, devs), fcclInvalidArgument);
}

/* ---- all ---- */

static void testAll(void) {
  int n = gpus > 8 ? 8 : gpus;
  fcclComm_t comms[8];
  int64_t start = bootNowMs();
  fcclResult_t res = fcclCommInitAll(comms, n, NULL);
  EXPECT_MSG(res == fcclSuccess, "fcclCommInitAll(%d): %s", n, fcclGetLastError(NULL));
  if (res != fcclSuccess) return;
  printf("fcclCommInitAll over %d GPUs took %lld ms\n", n, (long long)(bootNowMs() - start));
  for (int i = 0; i < n; i++) checkComm(comms[i], n, i, i);
  for (int i = 0; i < n; i++) EXPECT_EQ_INT(fcclCommDestroy(comms[i]), fcclSuccess);
  if (n < 2) return;
  /* With a device list, in reverse: rank i is on devlist[i]. The caller's current device is untouched. */
  int devlist[8];
  for (int i = 0; i < n; i++) devlist[i] = n - 1 - i;
  EXPECT_EQ_INT(cudaSetDevice(0), cudaSuccess);
  res = fcclCommInitAll(comms, n, devlist);
  EXPECT_MSG(res == fcclSuccess, "fcclCommInitAll with a list: %s", fcclGetLastError(NULL));
  if (res != fcclSuccess) return;
  int current = -1;
  EXPECT_EQ_INT(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ_INT(current, 0);
  for (int i = 0; i < n; i++) checkComm(comms[i], n, i, devlist[i]);
  for (int i = 0; i < n; i++) EXPECT_EQ_INT(fcclCommDestroy(comms[i]), fcclSuccess);
}

/* ---- env ---- */

struct envArgs {
  int port;
  int chooseFirst; /* the caller sets a device before init */
  char secret[40]; /* FCCL_COMM_SECRET */
};

static int envMode(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct envArgs* args = arg;
  char text[32];
  snprintf(text, sizeof(text), "%d", rank);
  setenv("RANK", text, 1);
  setenv("LOCAL_RANK", text, 1);
  snprintf(text, sizeof(text), "%d", nranks);
  setenv("WORLD_SIZE", text, 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  snprintf(text, sizeof(text), "%d", args->port - 1);
  setenv("MASTER_PORT", text, 1);
  setenv("FCCL_COMM_SECRET", args->secret, 1); /* what the launcher exports to every rank */
  int expected = rank % gpus;
  if (args->chooseFirst) {
    expected = (gpus - 1 - rank % gpus + gpus) % gpus; /* another device than LOCAL_RANK's when there are two */
    EXPECT_EQ_INT(cudaSetDevice(expected), cudaSuccess);
  }
  fcclConfig_t config = testConfig("env");
  fcclComm_t comm = NULL;
  fcclResult_t res = fcclCommInitFromEnv(&comm, &config);
  EXPECT_MSG(res == fcclSuccess, "rank %d: fcclCommInitFromEnv: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  checkComm(comm, nranks, rank, expected);
  int current = -1;
  EXPECT_EQ_INT(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ_INT(current, expected); /* made current for the caller too */
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return testFailed != 0;
}

static int freePort(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t length = sizeof(addr);
  int port = -1;
  if (bind(fd, (struct sockaddr*)&addr, sizeof(addr)) == 0 && getsockname(fd, (struct sockaddr*)&addr, &length) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

static void testEnv(void) {
  for (int chooseFirst = 0; chooseFirst < 2; chooseFirst++) {
    struct envArgs args = {.port = freePort(), .chooseFirst = chooseFirst};
    uint64_t state = testSeed();
    snprintf(args.secret, sizeof(args.secret), "%016llx%016llx", (unsigned long long)testRandom(&state),
             (unsigned long long)testRandom(&state));
    EXPECT_MSG(testForkRanks(NRANKS, envMode, &args, 120, NULL) == 0, "fcclCommInitFromEnv (%s) failed",
               chooseFirst ? "device chosen by the caller" : "device from LOCAL_RANK");
  }
}

/* ---- external ---- */

struct pairCtx {
  int fd;
  int rank;
};

static int xfer(int fd, const void* out, void* in, size_t bytes) {
  /* Both sides write first: fine for the small messages init exchanges (well under the socket buffer). */
  const char* p = out;
  for (size_t done = 0; done < bytes;) {
    ssize_t n = write(fd, p + done, bytes - done);
    if (n <= 0) return 0;
    done += (size_t)n;
  }
  char* q = in;
  for (size_t done = 0; done < bytes;) {
    ssize_t n = read(fd, q + done, bytes - done);
    if (n <= 0) return 0;
    done += (size_t)n;
  }
  return 1;
}

static fcclResult_t pairAllgather(void* ctx, const void* send, void* recv, size_t bytes) {
  struct pairCtx* pair = ctx;
  memcpy((char*)recv + (size_t)pair->rank * bytes, send, bytes);
  return xfer(pair->fd, send, (char*)recv + (size_t)(1 - pair->rank) * bytes, bytes) ? fcclSuccess : fcclRemoteError;
}

static fcclResult_t pairBarrier(void* ctx) {
  struct pairCtx* pair = ctx;
  char out = 1, in = 0;
  return xfer(pair->fd, &out, &in, 1) ? fcclSuccess : fcclRemoteError;
}

static int externalMode(int rank, int nranks, void* arg) {
  testFailed = 0;
  int* sv = arg;
  struct pairCtx pair = {.fd = sv[rank], .rank = rank};
  close(sv[1 - rank]);
  int dev = rank % gpus;
  EXPECT_EQ_INT(cudaSetDevice(dev), cudaSuccess);
  fcclBootstrapCallbacks_t callbacks = {&pair, pairAllgather, pairBarrier};
  fcclConfig_t config = testConfig("external");
  fcclComm_t comm = NULL;
  fcclResult_t res = fcclCommInitExternal(&comm, nranks, rank, &callbacks, &config);
  EXPECT_MSG(res == fcclSuccess, "rank %d: fcclCommInitExternal: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  checkComm(comm, nranks, rank, dev);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  close(pair.fd);
  return testFailed != 0;
}

static void testExternal(void) {
  int sv[2];
  EXPECT_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  EXPECT_EQ_INT(testForkRanks(NRANKS, externalMode, sv, 120, NULL), 0);
  close(sv[0]);
  close(sv[1]);
}

/* ---- nccl ---- */

#if FCCL_HAVE_NCCL
/* The caller's area of a test_shm region. */
struct ncclShared {
  struct testShm* shm;
  int ready;
  ncclUniqueId id;
};

static int ncclMode(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct ncclShared* shared = arg;
  int dev = rank % gpus;
  if (gpus < nranks) { /* NCCL takes two ranks on one GPU only from processes that claim hosts of their own */
    char host[32];
    snprintf(host, sizeof(host), "fccl-test-host-%d", rank);
    setenv("NCCL_HOSTID", host, 1);
  }
  EXPECT_EQ_INT(cudaSetDevice(dev), cudaSuccess);
  if (rank == 0) {
    EXPECT_EQ_INT(ncclGetUniqueId(&shared->id), ncclSuccess);
    testShmPost(&shared->ready, 1);
  } else {
    EXPECT_EQ_INT(testShmWait(shared->shm, &shared->ready, 1, 10000, "NCCL's unique id"), TEST_SHM_OK);
  }
  ncclComm_t nccl = NULL;
  ncclResult_t ncclRes = ncclCommInitRank(&nccl, nranks, shared->id, rank);
  EXPECT_MSG(ncclRes == ncclSuccess, "rank %d: ncclCommInitRank: %s", rank, ncclGetErrorString(ncclRes));
  if (ncclRes != ncclSuccess) return 1;
  fcclConfig_t config = testConfig("from-nccl");
  fcclComm_t comm = NULL;
  fcclResult_t res = fcclCommInitFromNccl(&comm, nccl, &config);
  EXPECT_MSG(res == fcclSuccess, "rank %d: fcclCommInitFromNccl: %s", rank, fcclGetLastError(NULL));
  if (res == fcclSuccess) {
    checkComm(comm, nranks, rank, dev);
    EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  }
  /* Another device than the NCCL communicator's is refused. */
  if (gpus > 1) {
    EXPECT_EQ_INT(cudaSetDevice((dev + 1) % gpus), cudaSuccess);
    EXPECT_EQ_INT(fcclCommInitFromNccl(&comm, nccl, &config), fcclInvalidArgument);
    EXPECT_EQ_INT(cudaSetDevice(dev), cudaSuccess);
  }
  ncclCommDestroy(nccl);
  return testFailed != 0;
}
#endif

static void testNccl(void) {
#if FCCL_HAVE_NCCL
  struct testShm* shm = testShmCreate(NRANKS, 0, sizeof(struct ncclShared), 30000);
  EXPECT(shm != NULL);
  if (!shm) return;
  struct ncclShared* shared = testShmUser(shm);
  shared->shm = shm;
  EXPECT_EQ_INT(testShmForkRanks(shm, ncclMode, shared, 120, NULL), 0);
  testShmDestroy(shm);
#else
  EXPECT_EQ_INT(cudaSetDevice(0), cudaSuccess);
  fcclComm_t comm;
  int dummy = 0;
  EXPECT_EQ_INT(fcclCommInitFromNccl(&comm, &dummy, NULL), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "without NCCL");
#endif
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "rank";
  gpus = gpuCountInChild();
  if (gpus < 1) {
    printf("SKIP: needs a GPU\n");
    return TEST_SKIP;
  }
  if (gpus < NRANKS) printf("note: 1 GPU: the two processes share it (config.allowSharedDevice)\n");
  if (strcmp(mode, "rank") == 0)
    testRank();
  else if (strcmp(mode, "failures") == 0)
    testFailures();
  else if (strcmp(mode, "all") == 0)
    testAll();
  else if (strcmp(mode, "env") == 0)
    testEnv();
  else if (strcmp(mode, "external") == 0)
    testExternal();
  else if (strcmp(mode, "nccl") == 0)
    testNccl();
  else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  char name[64];
  snprintf(name, sizeof(name), "comm_init %s", mode);
  return testSummary(name);
}
