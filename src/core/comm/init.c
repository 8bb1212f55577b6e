/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Communicator lifecycle: the public init calls, destroy, abort and the accessors.
 *
 * Every init builds a communicator the same way (commInitTask): bootstrap up, peer information gathered and
 * checked, the layers set up, a closing barrier. A failure anywhere leaves what was made attached to the comm,
 * and commFree releases all of it; so does destroy, and so does abort (with the abort flag set, which tells every
 * layer's teardown not to wait for peers). A non-blocking init (config.blocking = 0) runs commInitTask on a
 * thread of its own; the handle is valid at once, fcclCommGetAsyncError says when the thread is done, and
 * destroy/abort join it.
 */
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "cudawrap.h"
#include "debug.h"
#include "device.h"
#include "device_state.h"
#include "fccl_build_config.h"
#include "hier.h"
#include "local_group.h"
#include "monitor.h"
#include "nccl_path.h"
#include "ncclwrap.h"
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

typedef enum { INIT_TCP, INIT_ENV, INIT_PREMADE } fcclInitKind_t;

/* Who frees a communicator whose non-blocking init thread runs: the thread's joiner, or the thread itself. */
typedef enum { INIT_THREAD_RUNNING = 0, INIT_THREAD_DONE, INIT_THREAD_ABANDONED } fcclInitThreadState_t;

/* What commInitTask needs beyond the comm: how to bring the bootstrap up. */
struct fcclInitJob {
  fcclInitKind_t kind;
  fcclUniqueId id;             /* INIT_TCP */
  struct fcclEnvLaunch launch; /* INIT_ENV */
                               /* INIT_PREMADE: comm->bootstrap was made by the caller (external, NCCL) */
  int threadState;             /* fcclInitThreadState_t, atomic: see commAbort */
};

struct commSettings {
  int blocking;
  int timeoutMs;
  int allowSharedDevice;
  char name[FCCL_COMM_NAME_MAX];
};

static fcclResult_t resolveConfig(const fcclConfig_t* config, const char* caller, struct commSettings* out) {
  memset(out, 0, sizeof(*out));
  out->blocking = 1;
  out->timeoutMs = fcclBootstrapTimeoutMs(-1);
  if (config == NULL) return fcclSuccess;
  if (config->magic != FCCL_CONFIG_MAGIC)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT,
                      "%s: config does not start from FCCL_CONFIG_INITIALIZER (magic 0x%08x)", caller, config->magic);
  /* The version of the header the caller was compiled with: 0.1.0 is the first with this struct. */
  if (config->version < FCCL_VERSION(0, 1, 0) || config->version > FCCL_VERSION(99, 99, 99))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT,
                      "%s: config.version is %u, not a version of fccl.h: start from FCCL_CONFIG_INITIALIZER", caller,
                      config->version);
  if (config->size < sizeof(fcclConfig_t))
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT,
                      "%s: config.size is %zu, smaller than any fcclConfig_t (%zu): not from FCCL_CONFIG_INITIALIZER",
                      caller, config->size, sizeof(fcclConfig_t));
  /* A larger size is a newer header: the fields this library knows come first and are read; the rest is theirs. */
  if (config->blocking != 0 && config->blocking != 1)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "%s: config.blocking is %d, not 0 or 1", caller,
                      config->blocking);
  if (config->timeoutMs != FCCL_CONFIG_UNDEF_INT && config->timeoutMs <= 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT,
                      "%s: config.timeoutMs is %d: give a positive number of milliseconds or -1 for the default",
                      caller, config->timeoutMs);
  if (config->allowSharedDevice != 0 && config->allowSharedDevice != 1)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "%s: config.allowSharedDevice is %d, not 0 or 1",
                      caller, config->allowSharedDevice);
  out->blocking = config->blocking;
  if (config->timeoutMs > 0) out->timeoutMs = config->timeoutMs;
  out->allowSharedDevice = config->allowSharedDevice;
  if (config->commName) snprintf(out->name, sizeof(out->name), "%s", config->commName);
  return fcclSuccess;
}

static fcclResult_t checkRanks(const char* caller, int nranks, int rank) {
  if (nranks < 1 || nranks > FCCL_BOOTSTRAP_MAX_RANKS)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "%s: nranks %d outside 1..%d", caller, nranks,
                      FCCL_BOOTSTRAP_MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "%s: rank %d outside 0..%d", caller, rank, nranks - 1);
  return fcclSuccess;
}

/* ---- teardown ---- */

/* Releases everything the comm holds, in reverse order of setup. Local only when *abortFlag is set. */
static fcclResult_t commFree(struct fcclComm* comm) {
  fcclResult_t res = fcclSuccess;
  /* First: once this returns the peer monitor never touches the communicator again. A destroy says goodbye on
   * the peer links, so that peers elsewhere let this rank go; an abort or a failure does not: they see it end. */
  fcclMonitorForget(comm, !__atomic_load_n(comm->abortFlag, __ATOMIC_ACQUIRE));
  /* Layers in reverse order of setup; each is a no-op for a layer that was not set up and none waits for peers
   * when *comm->abortFlag is set. The first error is kept in res. */

  /* hierarchical: the rail (NCCL, aborted when the communicator was: it stops the kernel that waits for the other
   * hosts), then the host communicator (fccl's kernels). Before the world's NCCL communicator: NCCL's teardown
   * frees device memory, which waits for every kernel of the device, the rail's waiting one included. */
  fcclResult_t hierRes = fcclHierFree(comm);
  if (res == fcclSuccess) res = hierRes;

  /* NCCL: finalized and destroyed, or aborted when the communicator was (it stops NCCL's kernels) */
  fcclResult_t ncclRes = fcclNcclCommFree(comm);
  if (res == fcclSuccess) res = ncclRes;

  /* collectives: wait for this device's work (our kernels end on their own or on the abort flag), free the state */
  fcclResult_t deviceRes = fcclDeviceFini(comm);
  if (res == fcclSuccess) res = deviceRes;

  /* peer memory: barrier, release mappings, barrier, give the slot back (no peer traffic once aborted) */
  struct fcclTransport* transport = comm->transport;
  __atomic_store_n(&comm->transport, NULL, __ATOMIC_RELEASE); /* fcclCommGetMemStats may read it from any thread */
  fcclResult_t transportRes = fcclTransportFini(transport);
  if (res == fcclSuccess) res = transportRes;

  fcclBootstrapDestroy(comm->bootstrap);
  comm->bootstrap = NULL;
  free(comm->peerInfo);
  free(comm->initJob);
  if (!comm->hierParent) free((void*)comm->abortFlag); /* a host communicator's is its parent's */
  pthread_mutex_destroy(&comm->errorLock);
  comm->magic = 0; /* a stale handle is refused rather than used */
  free(comm);
  return res;
}

/* Frees a communicator whose init failed; the init's error, not a teardown step's, stays the thread's last error. */
static void commFreeAfterFailure(struct fcclComm* comm) {
  char cause[FCCL_LAST_ERROR_MAX];
  snprintf(cause, sizeof(cause), "%s", fcclThreadLastError());
  __atomic_store_n(comm->abortFlag, 1, __ATOMIC_RELEASE);
  (void)commFree(comm);
  fcclRestoreThreadError(cause);
}

/* ---- setup ---- */

static fcclResult_t commNew(const struct commSettings* settings, int rank, int nranks, int cudaDev,
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
  comm->abortFlag = abortPage;
  comm->asyncError = fcclInProgress;
  comm->initJob = job;
  pthread_mutex_init(&comm->errorLock, NULL);
  *out = comm;
  return fcclSuccess;
}

static fcclResult_t fillGpuInfo(struct fcclPeerInfo* info, int cudaDev) {
  struct cudaDeviceProp prop;
  CUDACHECK(cudaGetDeviceProperties(&prop, cudaDev));
  memcpy(info->gpuUuid, prop.uuid.bytes, sizeof(info->gpuUuid));
  info->computeCapability = prop.major * 10 + prop.minor;
  CUDACHECK(cudaDeviceGetPCIBusId(info->busId, sizeof(info->busId), cudaDev));
  int driverVersion = 0;
  CUDACHECK(cudaDriverGetVersion(&driverVersion));
  info->cudaDriverVersion = driverVersion;
  info->cudaDev = cudaDev;
  return fcclSuccess;
}

/* Tells every rank about every other, and checks that they agree. */
static fcclResult_t exchangePeerInfo(struct fcclComm* comm) {
  comm->peerInfo = calloc((size_t)comm->nranks, sizeof(struct fcclPeerInfo));
  if (!comm->peerInfo)
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of memory for the peer info of %d ranks", comm->nranks);
  struct fcclPeerInfo* mine = &comm->peerInfo[comm->rank];
  FCCLCHECK(fcclPeerInfoFillHost(mine, comm->rank, comm->nranks));
  FCCLCHECK(fillGpuInfo(mine, comm->cudaDev));
  FCCLCHECK(fcclBootstrapAllGather(comm->bootstrap, comm->peerInfo, sizeof(struct fcclPeerInfo)));
  FCCLCHECK(fcclPeerInfoValidate(comm->peerInfo, comm->nranks, comm->allowSharedDevice));
  return fcclSuccess;
}

/*
 * Every peer process is watched for its end: through a pidfd where it runs in this kernel and pid namespace, else
 * through a peer link (another host, another pid namespace, a kernel without pidfd_open, which every rank of this
 * host shares). The rule is symmetric and every rank knows whether any pair needs a link, so either every rank
 * makes the links (a collective exchange) or none does. FCCL_PEER_KEEPALIVE_MS=0: no links.
 */
static fcclResult_t watchPeers(struct fcclComm* comm) {
  const struct fcclPeerInfo* mine = &comm->peerInfo[comm->rank];
  const int n = comm->nranks;
  const int64_t keepaliveMs = fcclParamInt(FCCL_PARAM_PEER_KEEPALIVE_MS);
  const int pidfds = fcclMonitorCanWatchProcesses();
  struct fcclMonitorPeer* peers = calloc((size_t)n, sizeof(*peers));
  uint8_t* linked = calloc((size_t)n, 1);
  int* links = calloc((size_t)n, sizeof(*links));
  fcclResult_t res = fcclSuccess;
  if (!peers || !linked || !links) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of host memory");
    goto out;
  }
  int needLinks = n > 1 && !pidfds;
  for (int r = 0; r < n; r++) {
    const struct fcclPeerInfo* info = &comm->peerInfo[r];
    linked[r] = r != comm->rank && (info->hostHash != mine->hostHash || info->pidNs != mine->pidNs || !pidfds);
    needLinks |= info->hostHash != comm->peerInfo[0].hostHash || info->pidNs != comm->peerInfo[0].pidNs;
  }
  needLinks = needLinks && keepaliveMs > 0;
  if (needLinks) {
    FCCLCHECKGOTO(fcclBootstrapPeerLinks(comm->bootstrap, linked, keepaliveMs > INT32_MAX ? INT32_MAX : (int)keepaliveMs,
                                         links),
                  res, out);
  } else {
    for (int r = 0; r < n; r++) links[r] = -1;
  }
  int count = 0;
  for (int r = 0; r < n; r++) {
    const struct fcclPeerInfo* info = &comm->peerInfo[r];
    if (r == comm->rank) continue;
    if (links[r] < 0 && (linked[r] || info->pid == mine->pid)) continue; /* no link, or this very process */
    peers[count].rank = r;
    peers[count].pid = info->pid;
    peers[count].link = links[r];
    links[r] = -1; /* the monitor's now */
    snprintf(peers[count].host, sizeof(peers[count].host), "%s", info->hostname);
    count++;
  }
  res = count > 0 ? fcclMonitorWatch(comm, peers, count) : fcclSuccess;
out:
  if (links)
    for (int r = 0; r < n; r++)
      if (links[r] >= 0) fcclBootstrapPeerLinkClose(&links[r]);
  free(links);
  free(linked);
  free(peers);
  return res;
}

/* Whether this rank's GPU may reach the GPU of every other rank of its host: cudaDeviceCanAccessPeer for each one
 * visible here (found by bus id); one that is not visible is left to the transport's write/read-back check. */
static fcclResult_t localPeerAccess(const struct fcclComm* comm, int32_t* granted) {
  const struct fcclPeerInfo* mine = &comm->peerInfo[comm->rank];
  *granted = 1;
  for (int r = 0; r < comm->nranks && *granted; r++) {
    const struct fcclPeerInfo* info = &comm->peerInfo[r];
    if (r == comm->rank || info->hostHash != mine->hostHash || memcmp(info->gpuUuid, mine->gpuUuid, 16) == 0)
      continue;
    char busId[FCCL_PEER_BUSID_BYTES];
    memcpy(busId, info->busId, sizeof(busId));
    busId[sizeof(busId) - 1] = '\0';
    int local = -1;
    if (cudaDeviceGetByPCIBusId(&local, busId) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    if (local == comm->cudaDev) continue;
    int canAccess = 0;
    CUDACHECK(cudaDeviceCanAccessPeer(&canAccess, comm->cudaDev, local));
    if (!canAccess) *granted = 0;
  }
  return fcclSuccess;
}

/* The path (path.c) from what every rank says: sets comm->path and its reason; *decision says whether to make an
 * NCCL communicator. Collective (one bootstrap all-gather); every rank decides alike. */
static fcclResult_t choosePath(struct fcclComm* comm, struct fcclPathDecision* decision) {
  struct fcclPathInput in = {.infos = comm->peerInfo, .nranks = comm->nranks, .sassArchs = FCCL_BUILD_SASS_ARCHS,
                             .ptxArch = FCCL_BUILD_PTX_ARCH};
  struct fcclPathRecord* records = calloc((size_t)comm->nranks, sizeof(*records));
  if (!records) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of host memory");
  struct fcclPathRecord* mine = &records[comm->rank];
  /* A value that does not parse is this rank's error, told to the others in the record rather than by leaving them
   * waiting in the all-gather. A host communicator of the hierarchical path reads no setting: its parent did. */
  fcclResult_t parsed = fcclSuccess;
  in.hostPart = comm->hierParent != NULL;
  if (!in.hostPart) {
    parsed = fcclPathParseRequest(fcclParamString(FCCL_PARAM_PATH), &in.request);
    mine->request = parsed == fcclSuccess ? (int32_t)in.request : -1;
    fcclResult_t parsedComm = fcclPathParseNcclComm(fcclParamString(FCCL_PARAM_NCCL_COMM), &in.ncclComm);
    mine->ncclComm = parsedComm == fcclSuccess ? (int32_t)in.ncclComm : -1;
    if (parsed == fcclSuccess) parsed = parsedComm;
    in.p2pDisable = fcclParamInt(FCCL_PARAM_P2P_DISABLE) != 0;
    mine->p2pDisable = in.p2pDisable;
  }
  fcclResult_t res = localPeerAccess(comm, &mine->peerAccess);
  mine->ncclLoaded = fcclNcclLoaded(&in.ncclWhy);
  /* NCCL reads NCCL_HOSTID itself (not a parameter of fccl's): the host NCCL will see this process on. */
  mine->ncclHost = fcclPathNcclHost(getenv("NCCL_HOSTID"), fcclPeerMachineHash());
  if (res == fcclSuccess) res = fcclBootstrapAllGather(comm->bootstrap, records, sizeof(*records));
  if (res == fcclSuccess && parsed != fcclSuccess) res = parsed; /* described when it was parsed */
  if (res == fcclSuccess) res = fcclPathCheckAgreement(records, comm->nranks);
  in.records = records;
  if (res == fcclSuccess) res = fcclPathDecide(&in, decision);
  free(records);
  FCCLCHECK(res);
  comm->path = decision->path;
  snprintf(comm->pathReason, sizeof(comm->pathReason), "%s", decision->reason);
  snprintf(comm->ncclMissing, sizeof(comm->ncclMissing), "%s", decision->p2pReason);
  return fcclSuccess;
}

/* The communicator's bootstrap as the transport's exchange. */
static fcclResult_t bootstrapAllGather(void* ctx, void* allData, size_t bytesPerRank) {
  return fcclBootstrapAllGather((struct fcclBootstrap*)ctx, allData, bytesPerRank);
}

static fcclResult_t bootstrapBarrier(void* ctx) { return fcclBootstrapBarrier((struct fcclBootstrap*)ctx); }

static fcclResult_t initHostPart(struct fcclComm* parent, const fcclUniqueId* id, int nranks, int rank,
                                 struct fcclComm** out);
static fcclResult_t freeHostPart(struct fcclComm* comm);

/* How the hierarchical path makes, destroys and reads its host communicator: this layer's calls, handed down. */
static const struct fcclHierHostOps hierHostOps = {
    .create = initHostPart, .destroy = freeHostPart, .state = fcclCommAsyncState};

/* The whole init after the comm exists. Whatever it made stays on comm for commFree. */
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
    FCCLCHECK(fcclBootstrapTcpInit(&job->id, comm->rank, comm->nranks, comm->timeoutMs, comm->abortFlag,
                                   &comm->bootstrap));
  else if (job->kind == INIT_ENV)
    FCCLCHECK(fcclBootstrapEnvInit(&job->launch, comm->timeoutMs, comm->abortFlag, &comm->bootstrap));
  FCCLCHECK(exchangePeerInfo(comm));
  /* A host communicator's peers are its parent's, which the parent's monitor watches already (and a death it sees
   * sets the abort flag the two share). */
  if (!comm->hierParent) FCCLCHECK(watchPeers(comm));
  struct fcclPathDecision decision;
  FCCLCHECK(choosePath(comm, &decision));

  /* Layers: each sets its own comm field only when it succeeded (or leaves enough there for its teardown in
   * commFree to undo a partial setup); a failure returns, and commFree runs every teardown. */

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
        .slotBytes = fcclDeviceSlotBytes(comm->nranks),
        .ex = {.ctx = comm->bootstrap, .allGather = bootstrapAllGather, .barrier = bootstrapBarrier},
    };
    FCCLCHECK(fcclTransportInit(&transport, &comm->transport));

    /* collectives: epochs past every flag left in a reused slot, error words, abort page mapped (comm->device) */
    FCCLCHECK(fcclDeviceInit(comm));
  }

  /* NCCL: the NCCL path's engine, send/recv/all-to-all on the fccl path (FCCL_NCCL_COMM), every call but the
   * all-reduce on the hierarchical path */
  if (decision.ncclComm) FCCLCHECK(fcclNcclCommCreate(comm, decision.ncclRequired));

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
  /* fcclCommAbort returned while an application callback held this thread (commAbort): the comm is ours to free. */
  if (__atomic_exchange_n(&comm->initJob->threadState, INIT_THREAD_DONE, __ATOMIC_ACQ_REL) == INIT_THREAD_ABANDONED) {
    __atomic_store_n(comm->abortFlag, 1, __ATOMIC_RELEASE);
    (void)commFree(comm);
  }
  return NULL;
}

/* Runs the init (here, or on a thread for a non-blocking one). On failure of a blocking init the comm is freed. */
static fcclResult_t commStart(struct fcclComm* comm, int blocking, fcclComm_t* out) {
  if (blocking) {
    fcclResult_t res = commInitTask(comm);
    if (res != fcclSuccess) {
      commFreeAfterFailure(comm);
      return res;
    }
    __atomic_store_n(&comm->asyncError, fcclSuccess, __ATOMIC_RELEASE);
    *out = comm;
    return fcclSuccess;
  }
  fcclResult_t started = fcclSuccess;
  PTHREADCHECKGOTO(pthread_create(&comm->initThread, NULL, initThreadMain, comm), "starting the init thread",
                   started, noThread);
  comm->initThreadActive = 1;
  *out = comm;
  return fcclInProgress;
noThread:
  commFreeAfterFailure(comm);
  return started;
}

static fcclResult_t currentDevice(int* dev) {
  CUDACHECK(cudaGetDevice(dev));
  return fcclSuccess;
}

/*
 * What every init on the caller's current device starts with: the config checked, unknown FCCL_* variables warned
 * about, the device read, and the comm made with an empty job of the given kind (the caller fills the job).
 */
static fcclResult_t commPrepare(const fcclConfig_t* config, const char* caller, int rank, int nranks,
                                fcclInitKind_t kind, struct commSettings* settings, struct fcclComm** out) {
  FCCLCHECK(resolveConfig(config, caller, settings));
  fcclParamWarnUnknown();
  int dev;
  FCCLCHECK(currentDevice(&dev));
  struct fcclInitJob* job = calloc(1, sizeof(*job));
  if (!job) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "%s: out of memory", caller);
  job->kind = kind;
  return commNew(settings, rank, nranks, dev, job, out);
}

/* ---- the hierarchical path's host communicators (comm.h) ---- */

/* struct fcclHierHostOps.create (hier.h). */
static fcclResult_t initHostPart(struct fcclComm* parent, const fcclUniqueId* id, int nranks, int rank,
                                 struct fcclComm** out) {
  struct commSettings settings = {.blocking = 1, .timeoutMs = parent->timeoutMs,
                                  .allowSharedDevice = parent->allowSharedDevice};
  snprintf(settings.name, sizeof(settings.name), "%s", parent->name);
  struct fcclInitJob* job = calloc(1, sizeof(*job));
  if (!job) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of memory for a host communicator");
  job->kind = INIT_TCP;
  job->id = *id;
  struct fcclComm* comm;
  FCCLCHECK(commNew(&settings, rank, nranks, parent->cudaDev, job, &comm));
  free((void*)comm->abortFlag);
  comm->abortFlag = parent->abortFlag;
  comm->hierParent = parent;
  fcclResult_t res = commInitTask(comm);
  fcclLogSetContext(parent->rank, parent->cudaDev);
  if (res != fcclSuccess) {
    commFreeAfterFailure(comm);
    return res;
  }
  __atomic_store_n(&comm->asyncError, fcclSuccess, __ATOMIC_RELEASE);
  *out = comm;
  return fcclSuccess;
}

/* ---- public API ---- */

FCCL_API fcclResult_t fcclGetUniqueId(fcclUniqueId* uniqueId) {
  fcclClearError();
  FCCL_REQUIRE(uniqueId != NULL, "fcclGetUniqueId: uniqueId is NULL");
  fcclParamWarnUnknown();
  return fcclBootstrapGetUniqueId(uniqueId, fcclBootstrapTimeoutMs(-1));
}

FCCL_API fcclResult_t fcclCommInitRankConfig(fcclComm_t* comm, int nranks, fcclUniqueId commId, int rank,
                                             const fcclConfig_t* config) {
  fcclClearError();
  FCCL_REQUIRE(comm != NULL, "fcclCommInitRank: comm is NULL");
  FCCLCHECK(checkRanks("fcclCommInitRank", nranks, rank));
  FCCLCHECK(fcclBootstrapCheckUniqueId(&commId));
  struct commSettings settings;
  struct fcclComm* created;
  FCCLCHECK(commPrepare(config, "fcclCommInitRank", rank, nranks, INIT_TCP, &settings, &created));
  created->initJob->id = commId;
  return commStart(created, settings.blocking, comm);
}

FCCL_API fcclResult_t fcclCommInitRank(fcclComm_t* comm, int nranks, fcclUniqueId commId, int rank) {
  return fcclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

struct initAllRank {
  int dev;
  int rank;
  int ndev;
  fcclUniqueId id;
  fcclComm_t comm;
  fcclResult_t result;
  char error[FCCL_LAST_ERROR_MAX];
};

/* Destroy of one communicator, the part that may talk to its peers (collective unless aborted). */
static fcclResult_t destroyNow(struct fcclComm* comm) {
  fcclLogSetContext(comm->rank, comm->cudaDev);
  if (comm->initThreadActive) {
    pthread_join(comm->initThread, NULL); /* the init is bounded by its timeout */
    comm->initThreadActive = 0;
  }
  if (__atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE) != fcclSuccess)
    __atomic_store_n(comm->abortFlag, 1, __ATOMIC_RELEASE); /* a failed comm only frees what it has */
  return commFree(comm);
}

/* struct fcclHierHostOps.destroy (hier.h). */
static fcclResult_t freeHostPart(struct fcclComm* comm) {
  const int parentRank = comm->hierParent->rank, dev = comm->cudaDev;
  fcclResult_t res = destroyNow(comm);
  fcclLogSetContext(parentRank, dev);
  return res;
}

/* fcclCommInitAll's members are torn down together on threads of their own (local_group.h). */
static fcclResult_t groupMemberTeardown(void* member) {
  struct fcclComm* comm = member;
  CUDACHECK(cudaSetDevice(comm->cudaDev));
  return destroyNow(comm);
}

static void groupMemberAbort(void* member) {
  __atomic_store_n(((struct fcclComm*)member)->abortFlag, 1, __ATOMIC_RELEASE);
}

static void* initAllThread(void* arg) {
  struct initAllRank* r = arg;
  cudaError_t err = cudaSetDevice(r->dev);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    r->result = fcclUnhandledCudaError;
    snprintf(r->error, sizeof(r->error), "cudaSetDevice(%d) failed: %s", r->dev, cudaGetErrorString(err));
    return NULL;
  }
  r->result = fcclCommInitRankConfig(&r->comm, r->ndev, r->id, r->rank, NULL);
  if (r->result != fcclSuccess) snprintf(r->error, sizeof(r->error), "%s", fcclThreadLastError());
  return NULL;
}

/*
 * With the abort flag set, waits for a non-blocking init's thread to finish: every wait of fccl's own polls the flag
 * and ends within a poll slice. An application's callback (fcclCommInitExternal) is the one wait fccl cannot bound:
 * while the thread is inside one, it is left to finish, and to free the comm itself once the callback returns
 * (no callback starts after that: the flag is checked before each). Returns 1 when the thread was left so; the comm
 * must not be touched then.
 */
static int commAbortInitThread(struct fcclComm* comm) {
  struct fcclInitJob* job = comm->initJob;
  const pthread_t thread = comm->initThread; /* read first: once the thread owns the comm it may free it at once */
  const int callbacks = job->kind == INIT_PREMADE; /* comm->bootstrap set before the thread started */
  for (;;) {
    if (__atomic_load_n(&job->threadState, __ATOMIC_ACQUIRE) == INIT_THREAD_DONE) break;
    if (callbacks && fcclBootstrapInCallback(comm->bootstrap)) {
      comm->magic = FCCL_COMM_MAGIC_DEFERRED; /* dead to the caller now; refused while the thread keeps it */
      int running = INIT_THREAD_RUNNING;
      if (__atomic_compare_exchange_n(&job->threadState, &running, INIT_THREAD_ABANDONED, 0, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE)) {
        pthread_detach(thread);
        return 1;
      }
      break; /* it finished meanwhile */
    }
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&pause, NULL);
  }
  pthread_join(thread, NULL);
  comm->initThreadActive = 0;
  return 0;
}

/* fcclCommAbort after the handle was checked; leaves the thread's last error alone (internal callers report). */
static void commAbort(struct fcclComm* comm) {
  __atomic_store_n(comm->abortFlag, 1, __ATOMIC_RELEASE);
  if (comm->localGroup) {
    fcclLocalGroupAbort(comm->localGroup, comm); /* the members share a process: they all give up */
    comm->localGroup = NULL;
  }
  if (comm->initThreadActive && commAbortInitThread(comm)) return; /* the init thread frees it */
  (void)commFree(comm);
}

FCCL_API fcclResult_t fcclCommInitAll(fcclComm_t* comms, int ndev, const int* devlist) {
  fcclClearError();
  FCCL_REQUIRE(comms != NULL, "fcclCommInitAll: comms is NULL");
  /* Checked before any CUDA call: the communicators of one process form a group of at most this many. */
  FCCL_REQUIRE(ndev >= 1 && ndev <= FCCL_LOCAL_GROUP_MAX, "fcclCommInitAll: ndev %d outside 1..%d", ndev,
               FCCL_LOCAL_GROUP_MAX);
  int count = 0;
  CUDACHECK(cudaGetDeviceCount(&count));
  for (int i = 0; i < ndev; i++) {
    int dev = devlist ? devlist[i] : i;
    FCCL_REQUIRE(dev >= 0 && dev < count, "fcclCommInitAll: device %d (entry %d) is not one of the %d visible", dev,
                 i, count);
    for (int j = 0; j < i && devlist; j++)
      FCCL_REQUIRE(devlist[j] != dev, "fcclCommInitAll: device %d is listed twice (entries %d and %d)", dev, j, i);
  }
  struct initAllRank* ranks = calloc((size_t)ndev, sizeof(*ranks));
  pthread_t* threads = calloc((size_t)ndev, sizeof(*threads));
  if (!ranks || !threads) {
    free(ranks);
    free(threads);
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of memory");
  }
  fcclUniqueId id;
  fcclResult_t res = fcclBootstrapGetUniqueId(&id, fcclBootstrapTimeoutMs(-1));
  int started = 0;
  for (int i = 0; i < ndev && res == fcclSuccess; i++) {
    ranks[i] = (struct initAllRank){.dev = devlist ? devlist[i] : i, .rank = i, .ndev = ndev, .id = id};
    PTHREADCHECKGOTO(pthread_create(&threads[i], NULL, initAllThread, &ranks[i]), "fcclCommInitAll: starting a rank's "
                     "thread", res, notStarted);
    started++;
  notStarted:;
  }
  /* A rank that never started would keep the others waiting for it until their timeout: stopping the root now
   * makes those already waiting for the welcome (which needs every rank) fail at once. */
  if (res != fcclSuccess && started > 0) fcclBootstrapStopRoot(&id);
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  int failed = -1;
  for (int i = 0; i < started; i++) {
    if (ranks[i].result == fcclSuccess) continue;
    /* The root cause, rather than the peers that saw it go: the first error that is not a remote one. */
    if (failed < 0 || (ranks[failed].result == fcclRemoteError && ranks[i].result != fcclRemoteError)) failed = i;
  }
  if (res == fcclSuccess && failed >= 0)
    res = FCCL_ERROR(ranks[failed].result, FCCL_SUBSYS_INIT, "fcclCommInitAll: rank %d (device %d): %s", failed,
                     ranks[failed].dev, ranks[failed].error);
  struct fcclLocalGroup* group = NULL;
  if (res == fcclSuccess) {
    void* members[FCCL_LOCAL_GROUP_MAX];
    for (int i = 0; i < ndev; i++) members[i] = ranks[i].comm;
    group = fcclLocalGroupNew(members, ndev, groupMemberTeardown, groupMemberAbort);
    if (!group) res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of memory");
  }
  if (res == fcclSuccess) {
    for (int i = 0; i < ndev; i++) {
      ranks[i].comm->localGroup = group;
      comms[i] = ranks[i].comm;
    }
  } else {
    /* Not fcclCommAbort: it would clear this thread's last error, the cause reported above. */
    for (int i = 0; i < started; i++)
      if (ranks[i].result == fcclSuccess) commAbort(ranks[i].comm);
  }
  free(ranks);
  free(threads);
  return res;
}

FCCL_API fcclResult_t fcclCommInitFromEnv(fcclComm_t* comm, const fcclConfig_t* config) {
  fcclClearError();
  FCCL_REQUIRE(comm != NULL, "fcclCommInitFromEnv: comm is NULL");
  struct commSettings settings;
  FCCLCHECK(resolveConfig(config, "fcclCommInitFromEnv", &settings));
  fcclParamWarnUnknown();
  struct fcclInitJob* job = calloc(1, sizeof(*job));
  if (!job) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of memory");
  job->kind = INIT_ENV;
  fcclResult_t res = fcclBootstrapEnvResolve(&job->launch);
  if (res != fcclSuccess) {
    free(job);
    return res;
  }
  /* The device: the caller's, when this thread already has a CUDA context (cudaSetDevice, torch.cuda.set_device);
   * otherwise LOCAL_RANK modulo the visible devices, made current for the caller too. */
  int dev = -1;
  CUcontext context = NULL;
  if (fcclCudaDriverLoad() == fcclSuccess && pfn_cuCtxGetCurrent(&context) == CUDA_SUCCESS && context != NULL) {
    res = currentDevice(&dev);
  } else if (job->launch.localRank >= 0) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count < 1) {
      (void)cudaGetLastError();
      res = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_INIT, "fcclCommInitFromEnv: no CUDA device (%s)",
                       err != cudaSuccess ? cudaGetErrorString(err) : "none visible");
    } else {
      dev = job->launch.localRank % count;
      err = cudaSetDevice(dev);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        res = FCCL_ERROR(fcclUnhandledCudaError, FCCL_SUBSYS_INIT, "cudaSetDevice(%d) failed: %s", dev,
                         cudaGetErrorString(err));
      }
    }
  } else {
    res = currentDevice(&dev);
  }
  if (res != fcclSuccess) {
    free(job);
    return res;
  }
  struct fcclComm* created;
  FCCLCHECK(commNew(&settings, job->launch.rank, job->launch.nranks, dev, job, &created));
  return commStart(created, settings.blocking, comm);
}

FCCL_API fcclResult_t fcclCommInitExternal(fcclComm_t* comm, int nranks, int rank,
                                           const fcclBootstrapCallbacks_t* callbacks, const fcclConfig_t* config) {
  fcclClearError();
  FCCL_REQUIRE(comm != NULL, "fcclCommInitExternal: comm is NULL");
  FCCL_REQUIRE(callbacks != NULL && callbacks->allgather != NULL,
               "fcclCommInitExternal: callbacks or callbacks->allgather is NULL");
  FCCLCHECK(checkRanks("fcclCommInitExternal", nranks, rank));
  struct commSettings settings;
  struct fcclComm* created;
  FCCLCHECK(commPrepare(config, "fcclCommInitExternal", rank, nranks, INIT_PREMADE, &settings, &created));
  fcclResult_t res = fcclBootstrapExternalInit(callbacks, rank, nranks, created->abortFlag, &created->bootstrap);
  if (res != fcclSuccess) {
    commFreeAfterFailure(created);
    return res;
  }
  return commStart(created, settings.blocking, comm);
}

FCCL_API fcclResult_t fcclCommInitFromNccl(fcclComm_t* comm, void* ncclComm, const fcclConfig_t* config) {
  fcclClearError();
  FCCL_REQUIRE(comm != NULL, "fcclCommInitFromNccl: comm is NULL");
  FCCL_REQUIRE(ncclComm != NULL, "fcclCommInitFromNccl: ncclComm is NULL");
  struct commSettings settings;
  struct fcclComm* created;
  /* rank and nranks are the NCCL communicator's, known once the bootstrap is up */
  FCCLCHECK(commPrepare(config, "fcclCommInitFromNccl", -1, 0, INIT_PREMADE, &settings, &created));
  fcclResult_t res = fcclBootstrapNcclInit(ncclComm, settings.timeoutMs, created->abortFlag, &created->bootstrap);
  if (res != fcclSuccess) {
    commFreeAfterFailure(created);
    return res;
  }
  created->rank = created->bootstrap->rank;
  created->nranks = created->bootstrap->nranks;
  return commStart(created, settings.blocking, comm);
}

FCCL_API fcclResult_t fcclCommDestroy(fcclComm_t comm) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommDestroy: invalid communicator handle %p", (void*)comm);
  FCCLCHECK(fcclCommCheckOwner(comm, "fcclCommDestroy"));
  if (comm->localGroup) {
    /* The handle is dead for the caller now; the members are torn down together by the last destroy. */
    comm->magic = FCCL_COMM_MAGIC_DEFERRED;
    return fcclLocalGroupRelease(comm->localGroup, comm, NULL);
  }
  return destroyNow(comm);
}

FCCL_API fcclResult_t fcclCommAbort(fcclComm_t comm) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommAbort: invalid communicator handle %p", (void*)comm);
  FCCLCHECK(fcclCommCheckOwner(comm, "fcclCommAbort"));
  commAbort(comm);
  return fcclSuccess;
}

fcclResult_t fcclCommAsyncState(struct fcclComm* comm) {
  fcclResult_t state = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  /* collectives: an error a kernel recorded (spin timeout), described once */
  if (state == fcclSuccess) state = fcclDeviceAsyncError(comm);
  /* NCCL's asynchronous error (a peer lost, a failed kernel), as fccl's */
  if (state == fcclSuccess) state = fcclNcclAsyncError(comm);
  /* hierarchical: the host communicator's state and the rail's NCCL error */
  if (state == fcclSuccess) state = fcclHierAsyncError(comm);
  return state;
}

FCCL_API fcclResult_t fcclCommGetAsyncError(fcclComm_t comm, fcclResult_t* asyncError) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommGetAsyncError: invalid communicator handle %p", (void*)comm);
  FCCL_REQUIRE(asyncError != NULL, "fcclCommGetAsyncError: asyncError is NULL");
  FCCLCHECK(fcclCommCheckOwner(comm, "fcclCommGetAsyncError"));
  *asyncError = fcclCommAsyncState(comm);
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclCommGetPath(const fcclComm_t comm, fcclPath_t* path, const char** reason) {
  fcclClearError();
  FCCL_REQUIRE(path != NULL, "fcclCommGetPath: path is NULL");
  FCCLCHECK(fcclCommEnsureReady(comm, "fcclCommGetPath"));
  *path = comm->path;
  if (reason) *reason = comm->pathReason;
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclCommCount(const fcclComm_t comm, int* count) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommCount: invalid communicator handle %p", (void*)comm);
  FCCL_REQUIRE(count != NULL, "fcclCommCount: count is NULL");
  *count = comm->nranks;
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclCommCuDevice(const fcclComm_t comm, int* device) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommCuDevice: invalid communicator handle %p", (void*)comm);
  FCCL_REQUIRE(device != NULL, "fcclCommCuDevice: device is NULL");
  *device = comm->cudaDev;
  return fcclSuccess;
}

FCCL_API fcclResult_t fcclCommUserRank(const fcclComm_t comm, int* rank) {
  fcclClearError();
  FCCL_REQUIRE(fcclCommIsValid(comm), "fcclCommUserRank: invalid communicator handle %p", (void*)comm);
  FCCL_REQUIRE(rank != NULL, "fcclCommUserRank: rank is NULL");
  *rank = comm->rank;
  return fcclSuccess;
}
