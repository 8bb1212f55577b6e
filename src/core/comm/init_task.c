/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The task every creator runs (the public creators of init.c, and a hierarchical communicator's host communicator,
 * below): bootstrap up, peer information gathered and checked (init_peers.c), the layers set up, a closing
 * barrier. A failure anywhere leaves what was made attached to the comm, and fcclCommFree (teardown.c) releases all
 * of it. A non-blocking init (config.blocking = 0) runs the task on a thread of its own; the handle is valid at
 * once, fcclCommGetAsyncError says when the thread is done, and destroy/abort join it.
 */
#include "init.h"

#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "cudawrap.h"
#include "debug.h"
#include "device_state.h"
#include "hier.h"
#include "nccl_path.h"
#include "param.h"
#include "path.h"
#include "transport.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

/* The fcclConfig_t of fccl 0.1.0, the first: the fields up to allowSharedDevice. A caller compiled with it passes
 * this size; the fields appended since read as not set. */
#define FCCL_CONFIG_FIRST_SIZE (offsetof(fcclConfig_t, allowSharedDevice) + sizeof(int))

/* Whether a config of config->size bytes holds field (a member of fcclConfig_t). */
#define FCCL_CONFIG_HAS(config, field) \
  ((config)->size >= offsetof(fcclConfig_t, field) + sizeof(((fcclConfig_t*)0)->field))

fcclResult_t fcclCommResolveConfig(const fcclConfig_t* config, const char* caller, struct fcclCommSettings* out) {
  memset(out, 0, sizeof(*out));
  out->blocking = 1;
  out->timeoutMs = fcclBootstrapTimeoutMs(-1);
  out->splitShare = FCCL_CONFIG_UNDEF_INT;
  out->minCtas = out->maxCtas = FCCL_CONFIG_UNDEF_INT;
  if (config == NULL) return fcclSuccess;
  if (config->magic != FCCL_CONFIG_MAGIC)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT,
                      "%s: config does not start from FCCL_CONFIG_INITIALIZER (magic 0x%08x)", caller, config->magic);
  /* The version of the header the caller was compiled with: 0.1.0 is the first with this struct. */
  if (config->version < FCCL_VERSION(0, 1, 0) || config->version > FCCL_VERSION(99, 99, 99))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT,
                      "%s: config.version is %u, not a version of fccl.h: start from FCCL_CONFIG_INITIALIZER", caller,
                      config->version);
  if (config->size < FCCL_CONFIG_FIRST_SIZE)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT,
                      "%s: config.size is %zu, smaller than any fcclConfig_t (%zu): not from FCCL_CONFIG_INITIALIZER",
                      caller, config->size, (size_t)FCCL_CONFIG_FIRST_SIZE);
  /* A larger size is a newer header: the fields this library knows come first and are read; the rest is theirs. */
  if (config->blocking != 0 && config->blocking != 1)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "%s: config.blocking is %d, not 0 or 1", caller,
                      config->blocking);
  if (config->timeoutMs != FCCL_CONFIG_UNDEF_INT && config->timeoutMs <= 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT,
                      "%s: config.timeoutMs is %d: give a positive number of milliseconds or -1 for the default",
                      caller, config->timeoutMs);
  if (config->allowSharedDevice != 0 && config->allowSharedDevice != 1)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "%s: config.allowSharedDevice is %d, not 0 or 1", caller,
                      config->allowSharedDevice);
  if (FCCL_CONFIG_HAS(config, splitShare) && config->splitShare != FCCL_CONFIG_UNDEF_INT && config->splitShare != 0 &&
      config->splitShare != 1)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT,
                      "%s: config.splitShare is %d, not 0, 1 or FCCL_CONFIG_UNDEF_INT", caller, config->splitShare);
  if (FCCL_CONFIG_HAS(config, maxCTAs)) {
    const int minCtas = config->minCTAs, maxCtas = config->maxCTAs;
    if ((minCtas != FCCL_CONFIG_UNDEF_INT && minCtas < 1) || (maxCtas != FCCL_CONFIG_UNDEF_INT && maxCtas < 1))
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT,
                        "%s: config.minCTAs %d, maxCTAs %d: give a positive number of blocks or -1 for the default",
                        caller, minCtas, maxCtas);
    if (minCtas != FCCL_CONFIG_UNDEF_INT && maxCtas != FCCL_CONFIG_UNDEF_INT && minCtas > maxCtas)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "%s: config.minCTAs %d is above config.maxCTAs %d",
                        caller, minCtas, maxCtas);
    out->minCtas = minCtas;
    out->maxCtas = maxCtas;
  }
  out->blocking = config->blocking;
  if (config->timeoutMs > 0) out->timeoutMs = config->timeoutMs;
  out->allowSharedDevice = config->allowSharedDevice;
  if (FCCL_CONFIG_HAS(config, splitShare)) out->splitShare = config->splitShare;
  if (config->commName) snprintf(out->name, sizeof(out->name), "%s", config->commName);
  return fcclSuccess;
}

fcclResult_t fcclCommCheckRanks(const char* caller, int nranks, int rank) {
  if (nranks < 1 || nranks > FCCL_BOOTSTRAP_MAX_RANKS)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "%s: nranks %d outside 1..%d", caller, nranks,
                      FCCL_BOOTSTRAP_MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "%s: rank %d outside 0..%d", caller, rank, nranks - 1);
  return fcclSuccess;
}

fcclResult_t fcclCommNew(const struct fcclCommSettings* settings, int rank, int nranks, int cudaDev,
                         struct fcclInitJob* job, struct fcclComm** out) {
  struct fcclComm* comm = calloc(1, sizeof(*comm));
  /* A page of its own, so the device layer may map it for kernels (cudaHostRegister) without touching neighbours. */
  void* abortPage = aligned_alloc(4096, 4096);
  if (!comm || !abortPage) {
    free(comm);
    free(abortPage);
    free(job);
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of memory for a communicator");
  }
  memset(abortPage, 0, 4096);
  comm->magic = FCCL_COMM_MAGIC;
  comm->forkGeneration = fcclForkGeneration();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->cudaDev = cudaDev;
  snprintf(comm->name, sizeof(comm->name), "%s", settings->name);
  comm->timeoutMs = settings->timeoutMs;
  comm->allowSharedDevice = settings->allowSharedDevice;
  comm->blocking = settings->blocking;
  comm->splitShare = settings->splitShare;
  comm->minCtas = settings->minCtas;
  comm->maxCtas = settings->maxCtas;
  comm->abortFlag = abortPage;
  comm->asyncError = fcclInProgress;
  comm->initJob = job;
  pthread_mutex_init(&comm->errorLock, NULL);
  *out = comm;
  return fcclSuccess;
}

/* The communicator's bootstrap as the transport's exchange. */
static fcclResult_t bootstrapAllGather(void* ctx, void* allData, size_t bytesPerRank) {
  return fcclBootstrapAllGather((struct fcclBootstrap*)ctx, allData, bytesPerRank);
}

static fcclResult_t bootstrapBarrier(void* ctx) { return fcclBootstrapBarrier((struct fcclBootstrap*)ctx); }

static fcclResult_t initHostPart(struct fcclComm* parent, const fcclUniqueId* id, int nranks, int rank,
                                 struct fcclComm** out);

/* How the hierarchical path makes, destroys and reads its host communicator: this layer's calls, handed down. */
static const struct fcclHierHostOps hierHostOps = {.create = initHostPart,
                                                   .destroy = fcclCommFreeHostPart,
                                                   .state = fcclCommAsyncState};

/* The whole init after the comm exists. Whatever it made stays on comm for fcclCommFree. */
static fcclResult_t commInitSteps(struct fcclComm* comm) {
  int64_t startNs = 0;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  startNs = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
  CUDACHECK(cudaSetDevice(comm->cudaDev));
  fcclLogSetContext(comm->rank, comm->cudaDev);
  /* The driver's entry points: every path's calls check their buffers through them (enqueue.c), not only the
   * transport of the fccl path, which loaded them before the NCCL path existed. */
  FCCLCHECK(fcclCudaDriverLoad());
  struct fcclInitJob* job = comm->initJob;
  if (job->kind == INIT_TCP)
    FCCLCHECK(
        fcclBootstrapTcpInit(&job->id, comm->rank, comm->nranks, comm->timeoutMs, comm->abortFlag, &comm->bootstrap));
  else if (job->kind == INIT_ENV)
    FCCLCHECK(fcclBootstrapEnvInit(&job->launch, comm->timeoutMs, comm->abortFlag, &comm->bootstrap));
  else if (job->hooks)
    FCCLCHECK(job->hooks->join(comm));
  if (!comm->peerInfo) FCCLCHECK(fcclCommExchangePeerInfo(comm));
  /* A host communicator's peers are its parent's, which the parent's monitor watches already (and a death it sees
   * sets the abort flag the two share). */
  if (!comm->hierParent) FCCLCHECK(fcclCommWatchPeers(comm));
  struct fcclPathDecision decision;
  FCCLCHECK(fcclCommChoosePath(comm, &decision));
  if (job->hooks) FCCLCHECK(job->hooks->pathChosen(comm, &decision));

  /* Layers: each sets its own comm field only when it succeeded (or leaves enough there for its teardown in
   * fcclCommFree to undo a partial setup); a failure returns, and fcclCommFree runs every teardown. */

  /* fccl's kernels only where they carry the collectives: the NCCL path maps no peer memory. */
  if (comm->path == fcclPathFccl) {
    /* peer memory: this comm's slot in every rank's arena, mapped and P2P-checked (sets comm->transport) */
    struct fcclTransportParams transport = {
        .rank = comm->rank,
        .nranks = comm->nranks,
        .cudaDev = comm->cudaDev,
        .timeoutMs = comm->timeoutMs,
        .abortFlag = comm->abortFlag,
        .name = comm->name,
        .slotBytes = job->slotBytes ? job->slotBytes : fcclDeviceSlotBytes(comm->nranks),
        .ex = {.ctx = comm->bootstrap, .allGather = bootstrapAllGather, .barrier = bootstrapBarrier},
    };
    FCCLCHECK(fcclTransportInit(&transport, &comm->transport));

    /* collectives: epochs past every flag left in a reused slot, error words, abort page mapped (comm->device) */
    FCCLCHECK(fcclDeviceInit(comm));
  }

  /* NCCL: the NCCL path's engine, send/recv/all-to-all on the fccl path (FCCL_NCCL_COMM), every call but the
   * all-reduce on the hierarchical path */
  if (decision.ncclComm && !job->ncclSettled) FCCLCHECK(fcclNcclCommCreate(comm, decision.ncclRequired));

  /* hierarchical: the host communicator on fccl's kernels and the NCCL rail across hosts (comm->hier) */
  if (comm->path == fcclPathHier) FCCLCHECK(fcclHierCreate(comm, &hierHostOps));

  /* Nobody leaves init before everyone has set up: a rank that failed above makes this barrier fail everywhere. */
  FCCLCHECK(fcclBootstrapBarrier(comm->bootstrap));
  clock_gettime(CLOCK_MONOTONIC, &now);
  const struct fcclPeerInfo* mine = &comm->peerInfo[comm->rank];
  FCCL_INFO(FCCL_SUBSYS_INIT, "comm %p%s%s rank %d of %d on device %d (bus %s) ready in %.2f ms (%s bootstrap)",
            (void*)comm, comm->name[0] ? " " : "", comm->name, comm->rank, comm->nranks, comm->cudaDev, mine->busId,
            (double)((int64_t)now.tv_sec * 1000000000 + now.tv_nsec - startNs) / 1e6, comm->bootstrap->ops->name);
  FCCL_INFO(FCCL_SUBSYS_INIT, "comm %p rank %d: path %s (%s); send/recv/all-to-all: %s%s", (void*)comm, comm->rank,
            fcclGetPathName(comm->path), comm->pathReason, comm->nccl ? "NCCL" : "unavailable, ",
            comm->nccl ? "" : comm->ncclMissing);
  return fcclSuccess;
}

/* commInitSteps, with a peer's failure seen while it ran as its error: the monitor, watching from the peer
 * information on, fails the comm and sets the abort flag, and what the init then waited for reports an abort. */
static fcclResult_t commInitTask(struct fcclComm* comm) {
  const fcclResult_t res = commInitSteps(comm);
  if (comm->initJob->hooks) comm->initJob->hooks->finish(comm, res);
  if (res == fcclSuccess) return res;
  char failure[FCCL_LAST_ERROR_MAX - 64]; /* room for the words around it */
  const fcclResult_t cause = fcclCommFailure(comm, failure, sizeof(failure));
  if (cause == fcclSuccess) return res;
  return FCCL_ERROR(cause, FCCL_SUBSYS_INIT, "rank %d: init stopped: %s", comm->rank, failure);
}

static void* initThreadMain(void* arg) {
  struct fcclComm* comm = arg;
  fcclClearError();
  fcclResult_t res = commInitTask(comm);
  if (res != fcclSuccess) {
    fcclCommRecordThreadError(comm);
    /* Anything that still waits (a peer's half of a barrier, say) gives up: this comm can only be freed now. */
    __atomic_store_n(comm->abortFlag, 1, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&comm->asyncError, res, __ATOMIC_RELEASE);
  /* fcclCommAbort returned while an application callback held this thread (fcclCommAbortNow): the comm is ours to
   * free. */
  if (__atomic_exchange_n(&comm->initJob->threadState, INIT_THREAD_DONE, __ATOMIC_ACQ_REL) == INIT_THREAD_ABANDONED) {
    __atomic_store_n(comm->abortFlag, 1, __ATOMIC_RELEASE);
    (void)fcclCommFree(comm);
  }
  return NULL;
}

/* Runs the init (here, or on a thread for a non-blocking one). On failure of a blocking init the comm is freed. */
fcclResult_t fcclCommStart(struct fcclComm* comm, int blocking, fcclComm_t* out) {
  if (blocking) {
    fcclResult_t res = commInitTask(comm);
    if (res != fcclSuccess) {
      fcclCommFreeAfterFailure(comm);
      return res;
    }
    __atomic_store_n(&comm->asyncError, fcclSuccess, __ATOMIC_RELEASE);
    *out = comm;
    return fcclSuccess;
  }
  fcclResult_t started = fcclSuccess;
  PTHREADCHECKGOTO(pthread_create(&comm->initThread, NULL, initThreadMain, comm), "starting the init thread", started,
                   noThread);
  comm->initThreadActive = 1;
  *out = comm;
  return fcclInProgress;
noThread:
  if (comm->initJob->hooks) comm->initJob->hooks->finish(comm, started);
  fcclCommFreeAfterFailure(comm);
  return started;
}

fcclResult_t fcclCommCurrentDevice(int* dev) {
  /* The first CUDA call of an init: without a driver or a GPU it says so in fccl's words (cudawrap.h). */
  cudaError_t err = cudaGetDevice(dev);
  if (err == cudaSuccess) return fcclSuccess;
  (void)cudaGetLastError();
  return FCCL_CUDA_INIT_FAILED(err, "cudaGetDevice");
}

/*
 * What every init on the caller's current device starts with: the config checked, unknown FCCL_* variables warned
 * about, the device read, and the comm made with an empty job of the given kind (the caller fills the job).
 */
fcclResult_t fcclCommPrepare(const fcclConfig_t* config, const char* caller, int rank, int nranks, fcclInitKind_t kind,
                             struct fcclCommSettings* settings, struct fcclComm** out) {
  FCCLCHECK(fcclCommResolveConfig(config, caller, settings));
  fcclParamWarnUnknown();
  int dev;
  FCCLCHECK(fcclCommCurrentDevice(&dev));
  struct fcclInitJob* job = calloc(1, sizeof(*job));
  if (!job) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "%s: out of memory", caller);
  job->kind = kind;
  return fcclCommNew(settings, rank, nranks, dev, job, out);
}

/* ---- the hierarchical path's host communicators (hier.h: struct fcclHierHostOps) ---- */

/* struct fcclHierHostOps.create (hier.h). */
static fcclResult_t initHostPart(struct fcclComm* parent, const fcclUniqueId* id, int nranks, int rank,
                                 struct fcclComm** out) {
  struct fcclCommSettings settings = {.blocking = 1,
                                      .timeoutMs = parent->timeoutMs,
                                      .allowSharedDevice = parent->allowSharedDevice,
                                      .splitShare = FCCL_CONFIG_UNDEF_INT,
                                      .minCtas = parent->minCtas,
                                      .maxCtas = parent->maxCtas};
  snprintf(settings.name, sizeof(settings.name), "%s", parent->name);
  struct fcclInitJob* job = calloc(1, sizeof(*job));
  if (!job) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of memory for a host communicator");
  job->kind = INIT_TCP;
  job->id = *id;
  struct fcclComm* comm;
  FCCLCHECK(fcclCommNew(&settings, rank, nranks, parent->cudaDev, job, &comm));
  free((void*)comm->abortFlag);
  comm->abortFlag = parent->abortFlag;
  comm->hierParent = parent;
  fcclResult_t res = commInitTask(comm);
  fcclLogSetContext(parent->rank, parent->cudaDev);
  if (res != fcclSuccess) {
    fcclCommFreeAfterFailure(comm);
    return res;
  }
  __atomic_store_n(&comm->asyncError, fcclSuccess, __ATOMIC_RELEASE);
  *out = comm;
  return fcclSuccess;
}
