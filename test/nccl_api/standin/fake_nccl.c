/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A stand-in for the real NCCL, built as libnccl.so.2 (NCCL's SONAME), for the tests of libfccl-nccl without a GPU:
 * every function of nccl.h, each writing one line to the trace file named by FNCCL_TEST_TRACE ("nccl <Name> ..."),
 * so that a test sees what reached NCCL, in which order and with which arguments. It behaves as NCCL does where the
 * library under test depends on it:
 *  - ncclX is a weak alias of pncclX, and it calls some of its own exported names through its PLT, as NCCL does
 *    (ncclBcast calls ncclBroadcast, a collective asks ncclCommGetAsyncError whether its communicator is ready,
 *    ncclCommDestroy deregisters the windows left); its ncclAlltoAll is made of ncclBroadcast calls, so that a
 *    collective NCCL makes of another is seen;
 *  - a non-blocking communicator (config.blocking = 0, or NCCL_COMM_BLOCKING=0) answers ncclInProgress for
 *    FAKE_NCCL_PENDING_POLLS queries of ncclCommGetAsyncError (default 3), and a collective on it before then
 *    fails with ncclInvalidArgument;
 *  - a communicator made inside a group is ready at the group's end.
 * FAKE_NCCL_VERSION sets the version it reports (default 22809). With FAKE_ABORT_HANDSHAKE=1 its abort, revoke and
 * aborting shrink wait (5 s at most) until the engine's abort of the communicator has started, as NCCL's abort waits
 * for the device's work, fccl's kernels included; one that waited in vain writes "nccl abort-waited-in-vain".
 */
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define ALIAS(name) extern __typeof__(p##name) name __attribute__((weak, alias("p" #name), visibility("default")))

#define FAKE_MAGIC 0xfa4ec0
struct ncclComm {
  int magic;
  int rank, nranks;
  int blocking;
  int pendingPolls;
  int inGroup; /* made inside a group: ready at its end */
  int windows;
  ncclWindow_t windowList[64];
  int opLive[64]; /* ncclRedOpCreatePreMulSum's op ncclNumOps + i */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int groupDepth;
static __thread struct ncclComm* madeInGroup[64]; /* ready at the outermost ncclGroupEnd */
static __thread int madeInGroupCount;

static void trace(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char* fmt, ...) {
  const char* path = getenv("FNCCL_TEST_TRACE");
  if (!path || !path[0]) return;
  char line[512];
  int n = snprintf(line, sizeof(line), "nccl ");
  va_list args;
  va_start(args, fmt);
  n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, args);
  va_end(args);
  if (n > (int)sizeof(line) - 2) n = (int)sizeof(line) - 2;
  line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ssize_t written = write(fd, line, (size_t)n);
  (void)written;
  close(fd);
}

static int envInt(const char* name, int fallback) {
  const char* value = getenv(name);
  return value && value[0] ? atoi(value) : fallback;
}

static int valid(const struct ncclComm* comm) { return comm && comm->magic == FAKE_MAGIC; }

/* The handshake of aborts (see above): waits for the engine's abort line of comm. */
static void abortHandshake(const struct ncclComm* comm) {
  if (!envInt("FAKE_ABORT_HANDSHAKE", 0)) return;
  const char* path = getenv("FNCCL_TEST_TRACE");
  char wanted[64];
  snprintf(wanted, sizeof(wanted), "comm=%p abort=1", (void*)comm);
  for (int waited = 0; path && waited < 5000; waited++) {
    FILE* file = fopen(path, "r");
    char line[600];
    int found = 0;
    while (file && !found && fgets(line, sizeof(line), file))
      found = strncmp(line, "fccl release", 12) == 0 && strstr(line, wanted);
    if (file) fclose(file);
    if (found) return;
    usleep(1000);
  }
  trace("abort-waited-in-vain comm=%p", (void*)comm);
}

static ncclComm_t makeComm(int rank, int nranks, int blocking) {
  struct ncclComm* comm = calloc(1, sizeof(*comm));
  if (!comm) return NULL;
  comm->magic = FAKE_MAGIC;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->blocking = blocking;
  comm->pendingPolls = blocking ? 0 : envInt("FAKE_NCCL_PENDING_POLLS", 3);
  comm->inGroup = groupDepth > 0;
  if (comm->inGroup && madeInGroupCount < 64) madeInGroup[madeInGroupCount++] = comm;
  return comm;
}

/* config.blocking as NCCL reads it: the field when set, else NCCL_COMM_BLOCKING, else blocking. */
static int blockingOf(const ncclConfig_t* config) {
  if (config && config->size >= offsetof(ncclConfig_t, blocking) + sizeof(int) &&
      config->blocking != NCCL_CONFIG_UNDEF_INT)
    return config->blocking != 0;
  return envInt("NCCL_COMM_BLOCKING", 1) != 0;
}

/* ---- version, errors -------------------------------------------------------------------------------------------- */

EXPORT ncclResult_t pncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = envInt("FAKE_NCCL_VERSION", 22809);
  trace("GetVersion");
  return ncclSuccess;
}
ALIAS(ncclGetVersion);

EXPORT const char* pncclGetErrorString(ncclResult_t result) {
  static const char* const names[] = {"fake-nccl: success",          "fake-nccl: cuda error",
                                      "fake-nccl: system error",     "fake-nccl: internal error",
                                      "fake-nccl: invalid argument", "fake-nccl: invalid usage",
                                      "fake-nccl: remote error",     "fake-nccl: in progress"};
  return (int)result >= 0 && (int)result < 8 ? names[result] : "fake-nccl: unknown";
}
ALIAS(ncclGetErrorString);

EXPORT const char* pncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return "fake-nccl: last error";
}
ALIAS(ncclGetLastError);

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
EXPORT void pncclResetDebugInit(void) { trace("ResetDebugInit"); }
ALIAS(ncclResetDebugInit);
#pragma GCC diagnostic pop

EXPORT ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (!uniqueId) return ncclInvalidArgument;
  static int next;
  memset(uniqueId, 0, sizeof(*uniqueId));
  snprintf(uniqueId->internal, sizeof(uniqueId->internal), "fake-id-%d-%d", (int)getpid(),
           __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED));
  trace("GetUniqueId");
  return ncclSuccess;
}
ALIAS(ncclGetUniqueId);

/* ---- memory ------------------------------------------------------------------------------------------------------ */

EXPORT ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  if (!ptr) return ncclInvalidArgument;
  *ptr = malloc(size ? size : 1);
  trace("MemAlloc size=%zu", size);
  return *ptr ? ncclSuccess : ncclSystemError;
}
ALIAS(ncclMemAlloc);

EXPORT ncclResult_t pncclMemFree(void* ptr) {
  free(ptr);
  trace("MemFree");
  return ncclSuccess;
}
ALIAS(ncclMemFree);

/* ---- communicators ---------------------------------------------------------------------------------------------- */

EXPORT ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                            ncclConfig_t* config) {
  (void)commId;
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (config && config->magic != 0xcafebeef) return ncclInvalidArgument;
  const int blocking = blockingOf(config);
  *comm = makeComm(rank, nranks, blocking);
  trace("CommInitRankConfig comm=%p rank=%d nranks=%d config=%p size=%zu blocking=%d", (void*)*comm, rank, nranks,
        (void*)config, config ? config->size : 0, blocking);
  if (!*comm) return ncclSystemError;
  return blocking || groupDepth > 0 ? ncclSuccess : ncclInProgress;
}
ALIAS(ncclCommInitRankConfig);

EXPORT ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  (void)commId;
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  *comm = makeComm(rank, nranks, blockingOf(NULL));
  trace("CommInitRank comm=%p rank=%d nranks=%d", (void*)*comm, rank, nranks);
  if (!*comm) return ncclSystemError;
  return (*comm)->blocking || groupDepth > 0 ? ncclSuccess : ncclInProgress;
}
ALIAS(ncclCommInitRank);

EXPORT ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                              ncclUniqueId* commIds, ncclConfig_t* config) {
  (void)nId;
  (void)commIds;
  if (!newcomm || nranks < 1 || myrank < 0 || myrank >= nranks) return ncclInvalidArgument;
  const int blocking = blockingOf(config);
  *newcomm = makeComm(myrank, nranks, blocking);
  trace("CommInitRankScalable comm=%p rank=%d nranks=%d", (void*)*newcomm, myrank, nranks);
  if (!*newcomm) return ncclSystemError;
  return blocking || groupDepth > 0 ? ncclSuccess : ncclInProgress;
}
ALIAS(ncclCommInitRankScalable);

EXPORT ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  (void)devlist;
  if (!comms || ndev < 1) return ncclInvalidArgument;
  for (int i = 0; i < ndev; i++) {
    comms[i] = makeComm(i, ndev, 1);
    comms[i]->inGroup = 0;
  }
  trace("CommInitAll ndev=%d", ndev);
  return ncclSuccess;
}
ALIAS(ncclCommInitAll);

EXPORT ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  (void)key;
  if (!valid(comm) || !newcomm) return ncclInvalidArgument;
  *newcomm = color == NCCL_SPLIT_NOCOLOR
                 ? NULL
                 : makeComm(comm->rank, comm->nranks, config ? blockingOf(config) : comm->blocking);
  trace("CommSplit comm=%p color=%d newcomm=%p", (void*)comm, color, (void*)*newcomm);
  return *newcomm && !(*newcomm)->blocking && groupDepth == 0 ? ncclInProgress : ncclSuccess;
}
ALIAS(ncclCommSplit);

EXPORT ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                                    ncclConfig_t* config, int shrinkFlags) {
  (void)excludeRanksList;
  if (!valid(comm) || !newcomm) return ncclInvalidArgument;
  *newcomm = makeComm(0, comm->nranks - excludeRanksCount, config ? blockingOf(config) : comm->blocking);
  trace("CommShrink comm=%p exclude=%d flags=%d newcomm=%p", (void*)comm, excludeRanksCount, shrinkFlags,
        (void*)*newcomm);
  if (shrinkFlags & NCCL_SHRINK_ABORT) abortHandshake(comm);
  return ncclSuccess;
}
ALIAS(ncclCommShrink);

EXPORT ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!valid(comm) || !asyncError) return ncclInvalidArgument;
  pthread_mutex_lock(&lock);
  if (comm->pendingPolls > 0 && !comm->inGroup) comm->pendingPolls--;
  *asyncError = comm->pendingPolls > 0 || comm->inGroup ? ncclInProgress : ncclSuccess;
  pthread_mutex_unlock(&lock);
  return ncclSuccess;
}
ALIAS(ncclCommGetAsyncError);

EXPORT ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  if (!valid(comm)) return ncclInvalidArgument;
  trace("CommFinalize comm=%p", (void*)comm);
  return ncclSuccess;
}
ALIAS(ncclCommFinalize);

EXPORT ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (!valid(comm)) return ncclInvalidArgument;
  /* As NCCL does, the windows left are deregistered through the exported name. */
  while (comm->windows > 0) (void)ncclCommWindowDeregister(comm, comm->windowList[comm->windows - 1]);
  trace("CommDestroy comm=%p", (void*)comm);
  comm->magic = 0;
  free(comm);
  return ncclSuccess;
}
ALIAS(ncclCommDestroy);

EXPORT ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (!valid(comm)) return ncclInvalidArgument;
  trace("CommAbort comm=%p ", (void*)comm);
  abortHandshake(comm);
  comm->magic = 0;
  free(comm);
  return ncclSuccess;
}
ALIAS(ncclCommAbort);

EXPORT ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (!valid(comm)) return ncclInvalidArgument;
  trace("CommRevoke comm=%p flags=%d", (void*)comm, revokeFlags);
  abortHandshake(comm);
  return ncclSuccess;
}
ALIAS(ncclCommRevoke);

EXPORT ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  if (!valid(comm) || !count) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}
ALIAS(ncclCommCount);

EXPORT ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!valid(comm) || !device) return ncclInvalidArgument;
  *device = 0;
  return ncclSuccess;
}
ALIAS(ncclCommCuDevice);

EXPORT ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!valid(comm) || !rank) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}
ALIAS(ncclCommUserRank);

/* ---- registration ------------------------------------------------------------------------------------------------ */

EXPORT ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (!valid(comm) || !handle) return ncclInvalidArgument;
  *handle = malloc(1);
  trace("CommRegister comm=%p buff=%p size=%zu", (void*)comm, buff, size);
  return ncclSuccess;
}
ALIAS(ncclCommRegister);

EXPORT ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (!valid(comm)) return ncclInvalidArgument;
  free(handle);
  trace("CommDeregister comm=%p", (void*)comm);
  return ncclSuccess;
}
ALIAS(ncclCommDeregister);

EXPORT ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  if (!valid(comm) || !win || comm->windows == 64) return ncclInvalidArgument;
  *win = (ncclWindow_t)malloc(1);
  comm->windowList[comm->windows++] = *win;
  trace("CommWindowRegister comm=%p buff=%p size=%zu win=%p flags=%d", (void*)comm, buff, size, (void*)*win, winFlags);
  return ncclSuccess;
}
ALIAS(ncclCommWindowRegister);

EXPORT ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (!valid(comm)) return ncclInvalidArgument;
  for (int i = 0; i < comm->windows; i++) {
    if (comm->windowList[i] != win) continue;
    comm->windowList[i] = comm->windowList[--comm->windows];
    trace("CommWindowDeregister comm=%p win=%p", (void*)comm, (void*)win);
    free(win);
    return ncclSuccess;
  }
  return ncclInvalidArgument;
}
ALIAS(ncclCommWindowDeregister);

/* Op values from ncclNumOps up, the lowest free first: a destroyed op's value is the next op's, as in NCCL. */
EXPORT ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                              ncclScalarResidence_t residence, ncclComm_t comm) {
  if (!valid(comm) || !op || !scalar) return ncclInvalidArgument;
  int index = 0;
  while (index < 64 && comm->opLive[index]) index++;
  if (index == 64) return ncclInvalidUsage;
  comm->opLive[index] = 1;
  *op = (ncclRedOp_t)(ncclNumOps + index);
  trace("RedOpCreatePreMulSum comm=%p op=%d type=%d residence=%d", (void*)comm, (int)*op, (int)datatype,
        (int)residence);
  return ncclSuccess;
}
ALIAS(ncclRedOpCreatePreMulSum);

EXPORT ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (!valid(comm)) return ncclInvalidArgument;
  const int index = (int)op - (int)ncclNumOps;
  if (index < 0 || index >= 64 || !comm->opLive[index]) return ncclInvalidArgument;
  comm->opLive[index] = 0;
  trace("RedOpDestroy comm=%p op=%d", (void*)comm, (int)op);
  return ncclSuccess;
}
ALIAS(ncclRedOpDestroy);

/* ---- collectives ------------------------------------------------------------------------------------------------- */

/* NCCL's check before a call: the communicator's state, asked through the exported name. */
static ncclResult_t ready(ncclComm_t comm) {
  if (!valid(comm)) return ncclInvalidArgument;
  ncclResult_t state = ncclSuccess;
  ncclResult_t result = ncclCommGetAsyncError(comm, &state);
  if (result != ncclSuccess) return result;
  return state == ncclSuccess ? ncclSuccess : ncclInvalidArgument;
}

#define COLL_CHECK(comm)                      \
  do {                                        \
    ncclResult_t ready_ = ready(comm);        \
    if (ready_ != ncclSuccess) return ready_; \
  } while (0)

EXPORT ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  COLL_CHECK(comm);
  trace("AllReduce comm=%p send=%p recv=%p count=%zu type=%d op=%d stream=%p", (void*)comm, sendbuff, recvbuff, count,
        (int)datatype, (int)op, (void*)stream);
  return ncclSuccess;
}
ALIAS(ncclAllReduce);

EXPORT ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                   ncclComm_t comm, cudaStream_t stream) {
  COLL_CHECK(comm);
  trace("AllGather comm=%p send=%p recv=%p count=%zu type=%d stream=%p", (void*)comm, sendbuff, recvbuff, sendcount,
        (int)datatype, (void*)stream);
  return ncclSuccess;
}
ALIAS(ncclAllGather);

EXPORT ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  COLL_CHECK(comm);
  trace("ReduceScatter comm=%p send=%p recv=%p count=%zu type=%d op=%d stream=%p", (void*)comm, sendbuff, recvbuff,
        recvcount, (int)datatype, (int)op, (void*)stream);
  return ncclSuccess;
}
ALIAS(ncclReduceScatter);

EXPORT ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                   int root, ncclComm_t comm, cudaStream_t stream) {
  COLL_CHECK(comm);
  trace("Broadcast comm=%p send=%p recv=%p count=%zu type=%d root=%d stream=%p", (void*)comm, sendbuff, recvbuff, count,
        (int)datatype, root, (void*)stream);
  return ncclSuccess;
}
ALIAS(ncclBroadcast);

EXPORT ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  trace("Bcast comm=%p", (void*)comm);
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream); /* through the PLT, as NCCL */
}
ALIAS(ncclBcast);

EXPORT ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  COLL_CHECK(comm);
  trace("Reduce comm=%p send=%p recv=%p count=%zu type=%d op=%d root=%d stream=%p", (void*)comm, sendbuff, recvbuff,
        count, (int)datatype, (int)op, root, (void*)stream);
  return ncclSuccess;
}
ALIAS(ncclReduce);

/* Made of broadcasts through the exported name: a collective NCCL composes of another of its calls. */
EXPORT ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclComm_t comm, cudaStream_t stream) {
  COLL_CHECK(comm);
  trace("AlltoAll comm=%p count=%zu type=%d", (void*)comm, count, (int)datatype);
  for (int r = 0; r < comm->nranks; r++) {
    ncclResult_t result = ncclBroadcast(sendbuff, recvbuff, count, datatype, r, comm, stream);
    if (result != ncclSuccess) return result;
  }
  return ncclSuccess;
}
ALIAS(ncclAlltoAll);

EXPORT ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff;
  (void)recvbuff;
  (void)stream;
  COLL_CHECK(comm);
  trace("Gather comm=%p count=%zu type=%d root=%d", (void*)comm, count, (int)datatype, root);
  return ncclSuccess;
}
ALIAS(ncclGather);

EXPORT ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                 ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff;
  (void)recvbuff;
  (void)stream;
  COLL_CHECK(comm);
  trace("Scatter comm=%p count=%zu type=%d root=%d", (void*)comm, count, (int)datatype, root);
  return ncclSuccess;
}
ALIAS(ncclScatter);

EXPORT ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                              cudaStream_t stream) {
  (void)sendbuff;
  (void)stream;
  COLL_CHECK(comm);
  trace("Send comm=%p count=%zu type=%d peer=%d", (void*)comm, count, (int)datatype, peer);
  return ncclSuccess;
}
ALIAS(ncclSend);

EXPORT ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                              cudaStream_t stream) {
  (void)recvbuff;
  (void)stream;
  COLL_CHECK(comm);
  trace("Recv comm=%p count=%zu type=%d peer=%d", (void*)comm, count, (int)datatype, peer);
  return ncclSuccess;
}
ALIAS(ncclRecv);

/* ---- groups ------------------------------------------------------------------------------------------------------ */

EXPORT ncclResult_t pncclGroupStart(void) {
  groupDepth++;
  trace("GroupStart depth=%d", groupDepth);
  return ncclSuccess;
}
ALIAS(ncclGroupStart);

EXPORT ncclResult_t pncclGroupEnd(void) {
  if (groupDepth == 0) return ncclInvalidUsage;
  trace("GroupEnd depth=%d", groupDepth);
  if (--groupDepth == 0) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < madeInGroupCount; i++) madeInGroup[i]->inGroup = 0;
    madeInGroupCount = 0;
    pthread_mutex_unlock(&lock);
  }
  return ncclSuccess;
}
ALIAS(ncclGroupEnd);

EXPORT ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (groupDepth == 0) return ncclInvalidUsage;
  if (simInfo) simInfo->estimatedTime = 1.0f;
  trace("GroupSimulateEnd depth=%d", groupDepth);
  groupDepth--;
  return ncclSuccess;
}
ALIAS(ncclGroupSimulateEnd);
