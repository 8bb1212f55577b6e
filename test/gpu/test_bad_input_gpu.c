/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bad input that needs communicators backed by GPUs (test/unit/test_bad_input.c has every call that fails before a
 * GPU is touched). Two forked ranks (with one GPU they share it) each make two communicators over the same ranks,
 * the victim and a witness; every rank makes every bad call on the victim, in the same order, and each must return
 * one of its documented results with a non-empty message, crash nothing, and leave both communicators working: an
 * all-reduce checked against its host reference on each follows every case. The cases: buffers that are
 * misaligned, host memory (pageable and pinned), freed, or of another device; a stream of another device;
 * registrations of such buffers, of size 0 and with no handle; deregistering an unknown handle and one released
 * already; fcclMemFree of memory fcclMemAlloc did not return, and twice; fcclCommInitAll with a device listed twice
 * or not visible; argument errors made from a child of fork(); calls made while the stream is captured that may
 * not be; fcclReduce, fcclGather, fcclScatter and fcclBcast on such buffers; pre-multiplied sums whose device scalar
 * is not device memory of the communicator's GPU, and ops used on another communicator, after their destruction or
 * for another datatype; calls on the victim while a non-blocking split of it waits for the other rank (refused: the
 * split holds it); calls on a finalized child of the victim, the rooted ones and a new pre-multiplied sum included.
 * With two GPUs or more, one process also destroys a member of an fcclCommInitAll group and calls it again.
 * Exits 77 without a GPU. docs/errors.md says what each result means.
 */
#include "fccl.h"
#include "test.h"
#include "test_shm.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NRANKS 2
#define COUNT 1024 /* elements of the checked all-reduce */
#define INIT_TIMEOUT_MS 30000

static int gpus;

/* The caller's area of the test_shm region: the two ids rank 0 makes. */
struct shared {
  struct testShm* shm;
  int idsReady;
  fcclUniqueId ids[2];
  int busyTried; /* rank 0 has made its calls on the victim while its split waited for rank 1 */
};

/* What the cases work with, on one rank. */
struct ctx {
  int rank, nranks, dev;
  fcclComm_t victim, witness;
  struct shared* shared;
  cudaStream_t stream;
  float* send; /* COUNT floats of device memory, and COUNT more after them (registrations use both) */
  float* recv;
  float* host; /* COUNT floats */
};

static int64_t nowMs(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Rank r's element i: small integers, so the float sum over ranks is exact. */
static float value(int rank, int i) { return (float)((i % 97) + 3 * rank + 1); }

/* An all-reduce on comm, checked against its host reference; 1 when right. */
static int checkedAllReduce(struct ctx* c, fcclComm_t comm, const char* what) {
  /* Everything on the rank's stream, in order: the default stream does not order a non-blocking one. */
  for (int i = 0; i < COUNT; i++) c->host[i] = value(c->rank, i);
  const size_t bytes = COUNT * sizeof(float);
  int ok = cudaMemcpyAsync(c->send, c->host, bytes, cudaMemcpyHostToDevice, c->stream) == cudaSuccess;
  ok = ok && cudaMemsetAsync(c->recv, 0xff, bytes, c->stream) == cudaSuccess; /* poisoned: unwritten shows */
  fcclResult_t res = fcclAllReduce(c->send, c->recv, COUNT, fcclFloat32, fcclSum, comm, c->stream);
  EXPECT_MSG(res == fcclSuccess, "rank %d: all-reduce on the %s after %s: %s", c->rank,
             comm == c->victim ? "victim" : "witness", what, fcclGetLastError(NULL));
  ok = ok && res == fcclSuccess;
  ok = ok && cudaMemcpyAsync(c->host, c->recv, bytes, cudaMemcpyDeviceToHost, c->stream) == cudaSuccess;
  ok = ok && cudaStreamSynchronize(c->stream) == cudaSuccess;
  long wrong = 0;
  for (int i = 0; ok && i < COUNT; i++) {
    float expected = 0;
    for (int r = 0; r < c->nranks; r++) expected += value(r, i);
    wrong += c->host[i] != expected;
  }
  EXPECT_MSG(ok && wrong == 0, "rank %d: all-reduce on the %s after %s: %ld wrong elements", c->rank,
             comm == c->victim ? "victim" : "witness", what, wrong);
  return ok && wrong == 0;
}

/* ---- the cases: each makes one call (or a few that belong together) and returns what the last one did ---- */

static fcclResult_t misaligned(struct ctx* c) {
  return fcclAllReduce((const char*)c->send + 1, c->recv, 16, fcclFloat32, fcclSum, c->victim, c->stream);
}

static fcclResult_t pageableHost(struct ctx* c) {
  float* buf = calloc(COUNT, sizeof(float));
  fcclResult_t res = fcclAllReduce(buf, c->recv, COUNT, fcclFloat32, fcclSum, c->victim, c->stream);
  free(buf);
  return res;
}

static fcclResult_t pinnedHost(struct ctx* c) {
  float* buf = NULL;
  if (cudaMallocHost((void**)&buf, COUNT * sizeof(float)) != cudaSuccess) return fcclInternalError;
  fcclResult_t res = fcclAllReduce(c->send, buf, COUNT, fcclFloat32, fcclSum, c->victim, c->stream);
  cudaFreeHost(buf);
  return res;
}

static fcclResult_t freedDevice(struct ctx* c) {
  float* buf = NULL;
  if (cudaMalloc((void**)&buf, COUNT * sizeof(float)) != cudaSuccess) return fcclInternalError;
  cudaFree(buf); /* nothing is allocated before the call: the address stays unused */
  return fcclAllReduce(buf, c->recv, COUNT, fcclFloat32, fcclSum, c->victim, c->stream);
}

/* Device memory of another GPU than the rank's (2 GPUs or more). */
static float* foreignBuffer(struct ctx* c) {
  float* buf = NULL;
  int other = (c->dev + 1) % gpus;
  if (cudaSetDevice(other) != cudaSuccess || cudaMalloc((void**)&buf, 2 * COUNT * sizeof(float)) != cudaSuccess)
    buf = NULL;
  cudaSetDevice(c->dev);
  return buf;
}

static void freeForeign(struct ctx* c, float* buf) {
  cudaSetDevice((c->dev + 1) % gpus);
  cudaFree(buf);
  cudaSetDevice(c->dev);
}

static fcclResult_t foreignDevice(struct ctx* c) {
  float* buf = foreignBuffer(c);
  if (!buf) return fcclInternalError;
  fcclResult_t res = fcclAllReduce(buf, c->recv, COUNT, fcclFloat32, fcclSum, c->victim, c->stream);
  freeForeign(c, buf);
  return res;
}

static fcclResult_t foreignStream(struct ctx* c) {
  cudaStream_t stream = NULL;
  cudaSetDevice((c->dev + 1) % gpus);
  cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaSetDevice(c->dev);
  if (err != cudaSuccess) return fcclInternalError;
  fcclResult_t res = fcclAllReduce(c->send, c->recv, COUNT, fcclFloat32, fcclSum, c->victim, stream);
  cudaSetDevice((c->dev + 1) % gpus);
  cudaStreamDestroy(stream);
  cudaSetDevice(c->dev);
  return res;
}

static fcclResult_t registerPageable(struct ctx* c) {
  void* buf = calloc(1, 1 << 20);
  fcclRegHandle_t handle = NULL;
  fcclResult_t res = fcclCommRegister(c->victim, buf, 1 << 20, &handle);
  if (res == fcclSuccess) fcclCommDeregister(c->victim, handle);
  free(buf);
  return res;
}

static fcclResult_t registerSizeZero(struct ctx* c) {
  fcclRegHandle_t handle = NULL;
  fcclResult_t res = fcclCommRegister(c->victim, c->send, 0, &handle);
  if (res == fcclSuccess) fcclCommDeregister(c->victim, handle);
  return res;
}

static fcclResult_t registerNullHandle(struct ctx* c) {
  return fcclCommRegister(c->victim, c->send, COUNT * sizeof(float), NULL);
}

static fcclResult_t registerFreed(struct ctx* c) {
  float* buf = NULL;
  if (cudaMalloc((void**)&buf, 1 << 20) != cudaSuccess) return fcclInternalError;
  cudaFree(buf);
  fcclRegHandle_t handle = NULL;
  fcclResult_t res = fcclCommRegister(c->victim, buf, 1 << 20, &handle);
  if (res == fcclSuccess) fcclCommDeregister(c->victim, handle);
  return res;
}

static fcclResult_t registerForeign(struct ctx* c) {
  float* buf = foreignBuffer(c);
  if (!buf) return fcclInternalError;
  fcclRegHandle_t handle = NULL;
  fcclResult_t res = fcclCommRegister(c->victim, buf, 2 * COUNT * sizeof(float), &handle);
  if (res == fcclSuccess) fcclCommDeregister(c->victim, handle);
  freeForeign(c, buf);
  return res;
}

static fcclResult_t deregisterUnknown(struct ctx* c) {
  return fcclCommDeregister(c->victim, (fcclRegHandle_t)(void*)c); /* compared by address, never dereferenced */
}

static fcclResult_t deregisterTwice(struct ctx* c) {
  fcclRegHandle_t handle = NULL;
  fcclResult_t res = fcclCommRegister(c->victim, c->send, 2 * COUNT * sizeof(float), &handle);
  EXPECT_MSG(res == fcclSuccess, "rank %d: a good registration failed: %s", c->rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return fcclInternalError;
  res = fcclCommDeregister(c->victim, handle);
  EXPECT_MSG(res == fcclSuccess, "rank %d: a good deregistration failed: %s", c->rank, fcclGetLastError(NULL));
  return fcclCommDeregister(c->victim, handle);
}

static fcclResult_t memFreeForeign(struct ctx* c) { return fcclMemFree(c->send); /* from cudaMalloc */ }

static fcclResult_t memFreeTwice(struct ctx* c) {
  void* ptr = NULL;
  fcclResult_t res = fcclMemAlloc(&ptr, 1 << 20);
  EXPECT_MSG(res == fcclSuccess, "rank %d: fcclMemAlloc: %s", c->rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return fcclInternalError;
  EXPECT_EQ_INT(fcclMemFree(ptr), fcclSuccess);
  return fcclMemFree(ptr);
}

static fcclResult_t initAllTwice(struct ctx* c) {
  fcclComm_t comms[2] = {NULL, NULL};
  int devs[2] = {c->dev, c->dev};
  fcclResult_t res = fcclCommInitAll(comms, 2, devs);
  EXPECT(comms[0] == NULL && comms[1] == NULL);
  return res;
}

static fcclResult_t initAllInvisible(struct ctx* c) {
  fcclComm_t comms[2] = {NULL, NULL};
  int devs[2] = {c->dev, gpus};
  fcclResult_t res = fcclCommInitAll(comms, 2, devs);
  EXPECT(comms[0] == NULL && comms[1] == NULL);
  return res;
}

/* A child of fork() calls the parent's communicator: refused (fcclInvalidUsage, "created by a parent") before
 * anything of the parent's (GPU, peers, pinned memory) is touched, whatever the arguments; the accessors, which read
 * only the handle, still answer. The child calls nothing that uses the GPU, which CUDA does not allow across
 * fork(). Its exit status says how its checks went; then this rank makes the same bad call and gets the argument
 * error. */
static fcclResult_t badTypeCall(struct ctx* c) {
  return fcclAllReduce(c->send, c->recv, COUNT, (fcclDataType_t)fcclNumTypes, fcclSum, c->victim, c->stream);
}

static fcclResult_t forkedChild(struct ctx* c) {
  int fds[2];
  if (pipe(fds) != 0) return fcclInternalError;
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    testPassed = testFailed = 0;
    fcclResult_t first = badTypeCall(c);
    EXPECT_EQ_INT(first, fcclInvalidUsage);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "created by a parent");
    EXPECT_EQ_INT(fcclAllReduce(NULL, c->recv, COUNT, fcclFloat32, fcclSum, c->victim, c->stream),
                  fcclInvalidUsage);
    fcclResult_t async = fcclSuccess;
    EXPECT_EQ_INT(fcclCommGetAsyncError(c->victim, &async), fcclInvalidUsage);
    EXPECT_EQ_INT(fcclCommCount(c->victim, NULL), fcclInvalidArgument);
    int count = 0;
    EXPECT_EQ_INT(fcclCommCount(c->victim, &count), fcclSuccess);
    EXPECT_EQ_INT(count, c->nranks);
    fcclUniqueId id;
    EXPECT_EQ_INT(fcclGetUniqueId(&id), fcclSuccess); /* the child may make communicators of its own */
    if (write(fds[1], &first, sizeof(first)) != sizeof(first)) testFailed++;
    fflush(stdout);
    _exit(testFailed != 0);
  }
  close(fds[1]);
  fcclResult_t inChild = fcclInternalError;
  if (child < 0 || read(fds[0], &inChild, sizeof(inChild)) != sizeof(inChild)) inChild = fcclInternalError;
  close(fds[0]);
  int status = 0;
  EXPECT(child > 0 && waitpid(child, &status, 0) == child);
  EXPECT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d: the forked child's checks failed (status %d)",
             c->rank, status);
  EXPECT_MSG(inChild == fcclInvalidUsage, "rank %d: the child got %d, not fcclInvalidUsage", c->rank, inChild);
  fcclResult_t here = badTypeCall(c);
  EXPECT_EQ_INT(here, fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "unknown datatype");
  return here;
}

/*
 * Calls that may not be captured, made while this rank's stream is captured in global mode (where CUDA refuses
 * calls that allocate or synchronise, and invalidates the capture): each either works or fails with a message, and
 * nothing is left behind; the capture is then ended and discarded. fcclGetUniqueId touches no GPU and works.
 */
static fcclResult_t duringCapture(struct ctx* c) {
  if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal) != cudaSuccess) return fcclInternalError;
  fcclUniqueId id;
  fcclResult_t idRes = fcclGetUniqueId(&id);
  void* ptr = NULL;
  fcclResult_t allocRes = fcclMemAlloc(&ptr, 1 << 20);
  if (allocRes != fcclSuccess)
    EXPECT_MSG(fcclGetLastError(NULL)[0] != '\0', "rank %d: fcclMemAlloc during capture: no message", c->rank);
  fcclRegHandle_t handle = NULL;
  fcclResult_t regRes = fcclCommRegister(c->victim, c->send, 2 * COUNT * sizeof(float), &handle);
  char regText[1024];
  snprintf(regText, sizeof(regText), "%s", fcclGetLastError(NULL));
  cudaGraph_t graph = NULL;
  (void)cudaStreamEndCapture(c->stream, &graph); /* may say the capture was invalidated */
  if (graph) cudaGraphDestroy(graph);
  (void)cudaGetLastError();
  EXPECT_MSG(idRes == fcclSuccess, "rank %d: fcclGetUniqueId during capture: %s", c->rank, fcclGetLastError(NULL));
  if (allocRes == fcclSuccess) EXPECT_EQ_INT(fcclMemFree(ptr), fcclSuccess);
  if (regRes == fcclSuccess) EXPECT_EQ_INT(fcclCommDeregister(c->victim, handle), fcclSuccess);
  fcclMemStats_t stats = {.size = sizeof(stats)};
  EXPECT_EQ_INT(fcclCommGetMemStats(c->victim, &stats), fcclSuccess);
  EXPECT_MSG(stats.commRegistrations == 0, "rank %d: %llu registrations left after the capture", c->rank,
             (unsigned long long)stats.commRegistrations);
  printf("rank %d: during capture: fcclMemAlloc %d, fcclCommRegister %d (%s)\n", c->rank, allocRes, regRes,
         regRes == fcclSuccess ? "registered" : regText);
  return fcclSuccess; /* what each call returned is checked above; the table checks that both comms work after */
}

/* ---- the rooted collectives and the pre-multiplied sums: every rank's own argument is wrong, so every rank fails ----
 */

static fcclResult_t reducePinnedSend(struct ctx* c) {
  float* buf = NULL;
  if (cudaMallocHost((void**)&buf, COUNT * sizeof(float)) != cudaSuccess) return fcclInternalError;
  fcclResult_t res = fcclReduce(buf, c->recv, COUNT, fcclFloat32, fcclSum, 0, c->victim, c->stream);
  cudaFreeHost(buf);
  return res;
}

static fcclResult_t gatherForeignSend(struct ctx* c) {
  float* buf = foreignBuffer(c);
  if (!buf) return fcclInternalError;
  fcclResult_t res = fcclGather(buf, c->send, COUNT / 2, fcclFloat32, 1, c->victim, c->stream);
  freeForeign(c, buf);
  return res;
}

static fcclResult_t scatterPageableRecv(struct ctx* c) {
  float* buf = calloc(COUNT, sizeof(float));
  fcclResult_t res = fcclScatter(c->send, buf, COUNT / 2, fcclFloat32, 0, c->victim, c->stream);
  free(buf);
  return res;
}

static fcclResult_t bcastFreed(struct ctx* c) {
  float* buf = NULL;
  if (cudaMalloc((void**)&buf, COUNT * sizeof(float)) != cudaSuccess) return fcclInternalError;
  cudaFree(buf);
  return fcclBcast(buf, COUNT, fcclFloat32, 1, c->victim, c->stream);
}

static fcclResult_t preMulPageableScalar(struct ctx* c) {
  float* scalar = calloc(1, sizeof(float));
  fcclRedOp_t op = fcclSum;
  fcclResult_t res = fcclRedOpCreatePreMulSum(&op, scalar, fcclFloat32, fcclScalarDevice, c->victim);
  EXPECT_EQ_INT(op, fcclSum); /* written only on success */
  free(scalar);
  return res;
}

static fcclResult_t preMulPinnedScalar(struct ctx* c) {
  float* scalar = NULL;
  if (cudaMallocHost((void**)&scalar, sizeof(float)) != cudaSuccess) return fcclInternalError;
  fcclRedOp_t op = fcclSum;
  fcclResult_t res = fcclRedOpCreatePreMulSum(&op, scalar, fcclFloat32, fcclScalarDevice, c->victim);
  cudaFreeHost(scalar);
  return res;
}

static fcclResult_t preMulForeignScalar(struct ctx* c) {
  float* buf = foreignBuffer(c);
  if (!buf) return fcclInternalError;
  fcclRedOp_t op = fcclSum;
  fcclResult_t res = fcclRedOpCreatePreMulSum(&op, buf, fcclFloat32, fcclScalarDevice, c->victim);
  freeForeign(c, buf);
  return res;
}

/* The witness's op on the victim, which has made none: ops are a communicator's own. The ops these cases make stay
 * (a communicator's ops go with it), in this order: the witness's first op, then the victim's. */
static fcclResult_t preMulOtherComm(struct ctx* c) {
  const float half = 0.5f;
  fcclRedOp_t op = fcclSum;
  if (fcclRedOpCreatePreMulSum(&op, (void*)&half, fcclFloat32, fcclScalarHostImmediate, c->witness) != fcclSuccess)
    return fcclInternalError;
  return fcclAllReduce(c->send, c->recv, COUNT, fcclFloat32, op, c->victim, c->stream);
}

/* An op made, destroyed, then used; and one of float32 used for float16 data. */
static fcclResult_t preMulDestroyed(struct ctx* c) {
  const float half = 0.5f;
  fcclRedOp_t op = fcclSum;
  if (fcclRedOpCreatePreMulSum(&op, (void*)&half, fcclFloat32, fcclScalarHostImmediate, c->victim) != fcclSuccess ||
      fcclRedOpDestroy(op, c->victim) != fcclSuccess)
    return fcclInternalError;
  return fcclReduceScatter(c->send, c->recv, COUNT / 2, fcclFloat32, op, c->victim, c->stream);
}

static fcclResult_t preMulOtherType(struct ctx* c) {
  const float half = 0.5f;
  fcclRedOp_t op = fcclSum;
  if (fcclRedOpCreatePreMulSum(&op, (void*)&half, fcclFloat32, fcclScalarHostImmediate, c->victim) != fcclSuccess)
    return fcclInternalError;
  return fcclReduce(c->send, c->recv, COUNT, fcclFloat16, op, 0, c->victim, c->stream);
}

/* ---- splits and finalize ---- */

/* Waits (at most 60 s) for a non-blocking child to be ready; its state. */
static fcclResult_t waitReady(fcclComm_t comm) {
  fcclResult_t state = fcclInProgress;
  for (int64_t end = nowMs() + 60000; state == fcclInProgress && nowMs() < end;) {
    if (fcclCommGetAsyncError(comm, &state) != fcclSuccess) return fcclInternalError;
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&pause, NULL);
  }
  return state;
}

/*
 * While a non-blocking split of the victim waits for rank 1 (which splits only once rank 0 is done), rank 0's calls
 * on the victim are refused with fcclInvalidUsage and its state reads fcclInProgress; the split then completes on
 * both ranks and its child works. What each call returned is checked here.
 */
static fcclResult_t splitBusy(struct ctx* c) {
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.timeoutMs = INIT_TIMEOUT_MS;
  config.allowSharedDevice = gpus < NRANKS;
  fcclComm_t child = NULL, other = NULL;
  if (c->rank == 0) {
    EXPECT_EQ_INT(fcclCommSplit(c->victim, 3, 0, &child, &config), fcclInProgress);
    EXPECT_EQ_INT(fcclCommSplit(c->victim, 4, 0, &other, NULL), fcclInvalidUsage);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "split (fcclCommSplit) has not finished");
    EXPECT(other == NULL);
    fcclResult_t state = fcclSuccess;
    EXPECT_EQ_INT(fcclCommGetAsyncError(c->victim, &state), fcclSuccess);
    EXPECT_EQ_INT(state, fcclInProgress);
    EXPECT_EQ_INT(fcclAllReduce(c->send, c->recv, COUNT, fcclFloat32, fcclSum, c->victim, c->stream), fcclInvalidUsage);
    fcclRegHandle_t handle = NULL;
    EXPECT_EQ_INT(fcclCommRegister(c->victim, c->send, COUNT * sizeof(float), &handle), fcclInvalidUsage);
    EXPECT_EQ_INT(fcclCommFinalize(c->victim), fcclInvalidUsage);
    testShmPost(&c->shared->busyTried, 1);
  } else {
    if (testShmWait(c->shared->shm, &c->shared->busyTried, 1, 60000, "rank 0's calls") != TEST_SHM_OK)
      return fcclInternalError;
    EXPECT_EQ_INT(fcclCommSplit(c->victim, 3, 0, &child, &config), fcclInProgress);
  }
  EXPECT_EQ_INT(waitReady(child), fcclSuccess);
  int count = 0;
  EXPECT_EQ_INT(fcclCommCount(child, &count), fcclSuccess);
  EXPECT_EQ_INT(count, NRANKS);
  if (child) checkedAllReduce(c, child, "the busy split's child");
  EXPECT_EQ_INT(fcclCommDestroy(child), fcclSuccess);
  return fcclSuccess;
}

/* A child of the victim, finalized: its calls are refused but destroy, which is then local; the victim works on. */
static fcclResult_t finalizedChild(struct ctx* c) {
  fcclComm_t child = NULL, grandchild = NULL;
  fcclResult_t res = fcclCommSplit(c->victim, 0, c->rank, &child, NULL);
  EXPECT_MSG(res == fcclSuccess, "rank %d: split: %s", c->rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return res;
  EXPECT_EQ_INT(fcclCommFinalize(child), fcclSuccess);
  EXPECT_EQ_INT(fcclAllReduce(c->send, c->recv, COUNT, fcclFloat32, fcclSum, child, c->stream), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "was finalized");
  fcclRegHandle_t handle = NULL;
  EXPECT_EQ_INT(fcclCommRegister(child, c->send, COUNT * sizeof(float), &handle), fcclInvalidUsage);
  EXPECT_EQ_INT(fcclCommSplit(child, 0, 0, &grandchild, NULL), fcclInvalidUsage);
  EXPECT_EQ_INT(fcclReduce(c->send, c->recv, COUNT, fcclFloat32, fcclSum, 0, child, c->stream), fcclInvalidUsage);
  EXPECT_EQ_INT(fcclBcast(c->recv, COUNT, fcclFloat32, 0, child, c->stream), fcclInvalidUsage);
  const float half = 0.5f;
  fcclRedOp_t op = fcclSum;
  EXPECT_EQ_INT(fcclRedOpCreatePreMulSum(&op, (void*)&half, fcclFloat32, fcclScalarHostImmediate, child),
                fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "was finalized");
  EXPECT_EQ_INT(op, fcclSum);
  EXPECT_EQ_INT(fcclCommFinalize(child), fcclInvalidUsage);
  fcclResult_t state = fcclInternalError;
  EXPECT_EQ_INT(fcclCommGetAsyncError(child, &state), fcclSuccess);
  EXPECT_EQ_INT(state, fcclSuccess);
  int count = 0;
  EXPECT_EQ_INT(fcclCommCount(child, &count), fcclSuccess);
  EXPECT_EQ_INT(count, NRANKS);
  EXPECT_EQ_INT(fcclCommDestroy(child), fcclSuccess);
  return fcclSuccess;
}

/* ---- the table ---- */

#define ANY_ERROR (-1) /* any documented error code (with a message); for calls whose result CUDA decides */

struct gpuCase {
  const char* what;
  fcclResult_t (*run)(struct ctx* c);
  int minGpus;
  int expected[2];   /* the results the header documents for it (the second 0 when only one); ANY_ERROR */
  const char* words; /* in the message when the result is the first expected one; NULL: any message */
};

#define ARG fcclInvalidArgument
#define REMOTE fcclRemoteError
static const struct gpuCase cases[] = {
    {"fcclAllReduce on a misaligned sendbuf", misaligned, 1, {ARG, 0}, "not aligned"},
    {"fcclAllReduce on pageable host memory", pageableHost, 1, {ARG, 0}, "not device memory"},
    {"fcclAllReduce into pinned host memory", pinnedHost, 1, {ARG, 0}, "host memory"},
    {"fcclAllReduce on freed device memory", freedDevice, 1, {ARG, 0}, NULL},
    {"fcclAllReduce on another GPU's memory", foreignDevice, 2, {ARG, 0}, "memory of device"},
    {"fcclAllReduce on another GPU's stream", foreignStream, 2, {ARG, 0}, "belongs to device"},
    {"fcclCommRegister of pageable host memory", registerPageable, 1, {ARG, REMOTE}, NULL},
    {"fcclCommRegister of 0 bytes", registerSizeZero, 1, {ARG, REMOTE}, NULL},
    {"fcclCommRegister without a handle", registerNullHandle, 1, {ARG, REMOTE}, NULL},
    {"fcclCommRegister of freed device memory", registerFreed, 1, {ARG, REMOTE}, NULL},
    {"fcclCommRegister of another GPU's memory", registerForeign, 2, {ARG, REMOTE}, NULL},
    {"fcclCommDeregister of an unknown handle", deregisterUnknown, 1, {ARG, REMOTE}, "not a live registration"},
    {"fcclCommDeregister of a handle released already", deregisterTwice, 1, {ARG, REMOTE}, "not a live registration"},
    {"fcclMemFree of cudaMalloc memory", memFreeForeign, 1, {ARG, 0}, "did not come from fcclMemAlloc"},
    {"fcclMemFree twice", memFreeTwice, 1, {ARG, 0}, "did not come from fcclMemAlloc"},
    {"fcclCommInitAll with a device listed twice", initAllTwice, 1, {ARG, 0}, "listed twice"},
    {"fcclCommInitAll with a device not visible", initAllInvisible, 1, {ARG, 0}, "is not one of"},
    {"fcclReduce from pinned host memory", reducePinnedSend, 1, {ARG, 0}, "fcclReduce: sendbuf"},
    {"fcclGather from another GPU's memory", gatherForeignSend, 2, {ARG, 0}, "memory of device"},
    {"fcclScatter into pageable host memory", scatterPageableRecv, 1, {ARG, 0}, "not device memory"},
    {"fcclBcast on freed device memory", bcastFreed, 1, {ARG, 0}, "fcclBcast"},
    {"fcclRedOpCreatePreMulSum of a device scalar in pageable memory", preMulPageableScalar, 1, {ARG, 0}, "scalar"},
    {"fcclRedOpCreatePreMulSum of a device scalar in pinned host memory",
     preMulPinnedScalar,
     1,
     {ARG, 0},
     "not device memory"},
    {"fcclRedOpCreatePreMulSum of another GPU's memory", preMulForeignScalar, 2, {ARG, 0}, "not device memory"},
    {"fcclAllReduce with another communicator's op", preMulOtherComm, 1, {ARG, 0}, "unknown reduction op"},
    {"fcclReduceScatter with a destroyed op", preMulDestroyed, 1, {ARG, 0}, "unknown reduction op"},
    {"fcclReduce with an op of another datatype", preMulOtherType, 1, {ARG, 0}, "was made for float32"},
    {"argument errors from a child of fork()", forkedChild, 1, {ARG, 0}, "unknown datatype"},
    {"calls that may not be captured, during capture", duringCapture, 1, {fcclSuccess, 0}, NULL},
    {"calls on a communicator while a split of it runs", splitBusy, 1, {fcclSuccess, 0}, NULL},
    {"calls on a finalized communicator", finalizedChild, 1, {fcclSuccess, 0}, NULL},
};
#undef ARG
#undef REMOTE

static int expectedResult(const struct gpuCase* k, fcclResult_t res) {
  if (k->expected[0] == ANY_ERROR) return res > fcclSuccess && res < fcclNumResults && res != fcclInProgress;
  return res == (fcclResult_t)k->expected[0] || (k->expected[1] != 0 && res == (fcclResult_t)k->expected[1]);
}

static fcclConfig_t rankConfig(const char* name) {
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.commName = name;
  config.timeoutMs = INIT_TIMEOUT_MS;
  config.allowSharedDevice = gpus < NRANKS; /* one GPU: both ranks on it */
  return config;
}

static int rankMain(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct shared* shared = arg;
  struct ctx c = {.rank = rank, .nranks = nranks, .dev = rank % gpus, .shared = shared};
  EXPECT_EQ_INT(cudaSetDevice(c.dev), cudaSuccess);
  if (rank == 0) {
    EXPECT_EQ_INT(fcclGetUniqueId(&shared->ids[0]), fcclSuccess);
    EXPECT_EQ_INT(fcclGetUniqueId(&shared->ids[1]), fcclSuccess);
    testShmPost(&shared->idsReady, 1);
  } else if (testShmWait(shared->shm, &shared->idsReady, 1, 10000, "the unique ids") != TEST_SHM_OK) {
    return 1;
  }
  fcclConfig_t victimConfig = rankConfig("victim"), witnessConfig = rankConfig("witness");
  fcclResult_t res = fcclCommInitRankConfig(&c.victim, nranks, shared->ids[0], rank, &victimConfig);
  EXPECT_MSG(res == fcclSuccess, "rank %d: victim init: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  res = fcclCommInitRankConfig(&c.witness, nranks, shared->ids[1], rank, &witnessConfig);
  EXPECT_MSG(res == fcclSuccess, "rank %d: witness init: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ_INT(cudaMalloc((void**)&c.send, 2 * COUNT * sizeof(float)), cudaSuccess);
  EXPECT_EQ_INT(cudaMalloc((void**)&c.recv, COUNT * sizeof(float)), cudaSuccess);
  c.host = malloc(COUNT * sizeof(float));
  if (!c.send || !c.recv || !c.host) return 1;
  checkedAllReduce(&c, c.victim, "init");

  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const struct gpuCase* k = &cases[i];
    if (gpus < k->minGpus) {
      if (rank == 0) printf("%s: not checked (needs %d GPUs)\n", k->what, k->minGpus);
      continue;
    }
    int64_t start = nowMs();
    res = k->run(&c);
    char text[1024];
    snprintf(text, sizeof(text), "%s", fcclGetLastError(NULL));
    EXPECT_MSG(expectedResult(k, res), "rank %d: %s returned %d (%s): %s", rank, k->what, res,
               fcclGetErrorString(res), text);
    if (res != fcclSuccess) EXPECT_MSG(text[0] != '\0', "rank %d: %s left no message", rank, k->what);
    if (k->words && res == (fcclResult_t)k->expected[0])
      EXPECT_MSG(strstr(text, k->words) != NULL, "rank %d: %s: \"%s\" does not say \"%s\"", rank, k->what, text,
                 k->words);
    if (rank == 0) printf("%s: %s in %lld ms\n", k->what, fcclGetErrorString(res), (long long)(nowMs() - start));
    /* Nothing was left half done: both communicators work, and the victim's error state is clean. */
    fcclResult_t state = fcclInternalError;
    EXPECT_EQ_INT(fcclCommGetAsyncError(c.victim, &state), fcclSuccess);
    EXPECT_MSG(state == fcclSuccess, "rank %d: after %s the victim's state is %d", rank, k->what, state);
    checkedAllReduce(&c, c.victim, k->what);
    checkedAllReduce(&c, c.witness, k->what);
  }

  EXPECT_EQ_INT(cudaStreamSynchronize(c.stream), cudaSuccess);
  EXPECT_EQ_INT(fcclCommDestroy(c.victim), fcclSuccess);
  EXPECT_EQ_INT(fcclCommDestroy(c.witness), fcclSuccess);
  cudaFree(c.send);
  cudaFree(c.recv);
  cudaStreamDestroy(c.stream);
  free(c.host);
  return testFailed != 0;
}

/*
 * A destroyed member of an fcclCommInitAll group stays detectable until the group's last member is destroyed (the
 * header says so): calls on it, a second destroy and an abort are refused; the members left still answer, and
 * destroying them tears the group down. One process, 2 GPUs or more.
 */
static void testDestroyedGroupMember(void) {
  if (gpus < 2) {
    printf("a destroyed fcclCommInitAll member: not checked (needs 2 GPUs)\n");
    return;
  }
  EXPECT_EQ_INT(cudaSetDevice(0), cudaSuccess);
  fcclComm_t comms[2];
  fcclResult_t res = fcclCommInitAll(comms, 2, NULL);
  EXPECT_MSG(res == fcclSuccess, "fcclCommInitAll: %s", fcclGetLastError(NULL));
  if (res != fcclSuccess) return;
  EXPECT_EQ_INT(fcclCommDestroy(comms[0]), fcclSuccess); /* deferred: the group lives on */
  int value = 0;
  EXPECT_EQ_INT(fcclCommCount(comms[0], &value), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "invalid communicator handle");
  EXPECT_EQ_INT(fcclAllReduce(NULL, NULL, 0, fcclFloat32, fcclSum, comms[0], NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommDestroy(comms[0]), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommAbort(comms[0]), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclCommCount(comms[1], &value), fcclSuccess);
  EXPECT_EQ_INT(value, 2);
  EXPECT_EQ_INT(fcclCommUserRank(comms[1], &value), fcclSuccess);
  EXPECT_EQ_INT(value, 1);
  EXPECT_EQ_INT(fcclCommDestroy(comms[1]), fcclSuccess);
  printf("a destroyed fcclCommInitAll member: refused until the group is gone: ok\n");
}

int main(void) {
  gpus = testGpuCount();
  if (gpus < 1) {
    printf("SKIP: needs a GPU\n");
    return TEST_SKIP;
  }
  if (gpus < NRANKS) printf("note: 1 GPU: the two ranks share it (config.allowSharedDevice)\n");
  struct testShm* shm = testShmCreate(NRANKS, 0, sizeof(struct shared), 60000);
  if (!shm) return 1;
  struct shared* shared = testShmUser(shm);
  shared->shm = shm;
  int codes[NRANKS];
  int failed = testShmForkRanks(shm, rankMain, shared, 300, codes);
  EXPECT_MSG(failed == 0, "%d ranks failed (exit codes %d %d)", failed, codes[0], codes[1]);
  testShmDestroy(shm);
  /* After the forked ranks: this process touches CUDA only now. */
  testDestroyedGroupMember();
  return testSummary("bad_input_gpu");
}
