/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The public creators: fcclGetUniqueId, fcclCommInitRank(Config), fcclCommInitAll, fcclCommInitFromEnv,
 * fcclCommInitExternal and fcclCommInitFromNccl. Each checks its arguments, makes what its bootstrap needs and
 * hands the comm to the task every init runs (init_task.c); fcclCommInitAll runs fcclCommInitRankConfig for each
 * device on a thread of its own and ties the communicators into one group (local_group.h).
 */
#include "init.h"

#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "cudawrap.h"
#include "local_group.h"
#include "param.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

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
  FCCLCHECK(fcclCommCheckRanks("fcclCommInitRank", nranks, rank));
  FCCLCHECK(fcclBootstrapCheckUniqueId(&commId));
  struct fcclCommSettings settings;
  struct fcclComm* created;
  FCCLCHECK(fcclCommPrepare(config, "fcclCommInitRank", rank, nranks, INIT_TCP, &settings, &created));
  created->initJob->id = commId;
  return fcclCommStart(created, settings.blocking, comm);
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

/* fcclCommInitAll's members are torn down together on threads of their own (local_group.h). */
static fcclResult_t groupMemberTeardown(void* member) {
  struct fcclComm* comm = member;
  CUDACHECK(cudaSetDevice(comm->cudaDev));
  return fcclCommDestroyNow(comm);
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

FCCL_API fcclResult_t fcclCommInitAll(fcclComm_t* comms, int ndev, const int* devlist) {
  fcclClearError();
  FCCL_REQUIRE(comms != NULL, "fcclCommInitAll: comms is NULL");
  /* Checked before any CUDA call: the communicators of one process form a group of at most this many. */
  FCCL_REQUIRE(ndev >= 1 && ndev <= FCCL_LOCAL_GROUP_MAX, "fcclCommInitAll: ndev %d outside 1..%d", ndev,
               FCCL_LOCAL_GROUP_MAX);
  int count = 0;
  cudaError_t countErr = cudaGetDeviceCount(&count);
  if (countErr != cudaSuccess) {
    (void)cudaGetLastError();
    return FCCL_CUDA_INIT_FAILED(countErr, "cudaGetDeviceCount"); /* no driver or no GPU, in fccl's words */
  }
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
      if (ranks[i].result == fcclSuccess) fcclCommAbortNow(ranks[i].comm);
  }
  free(ranks);
  free(threads);
  return res;
}

FCCL_API fcclResult_t fcclCommInitFromEnv(fcclComm_t* comm, const fcclConfig_t* config) {
  fcclClearError();
  FCCL_REQUIRE(comm != NULL, "fcclCommInitFromEnv: comm is NULL");
  struct fcclCommSettings settings;
  FCCLCHECK(fcclCommResolveConfig(config, "fcclCommInitFromEnv", &settings));
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
    res = fcclCommCurrentDevice(&dev);
  } else if (job->launch.localRank >= 0) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count < 1) {
      (void)cudaGetLastError();
      res = FCCL_CUDA_INIT_FAILED(err != cudaSuccess ? err : cudaErrorNoDevice, "cudaGetDeviceCount");
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
    res = fcclCommCurrentDevice(&dev);
  }
  if (res != fcclSuccess) {
    free(job);
    return res;
  }
  struct fcclComm* created;
  FCCLCHECK(fcclCommNew(&settings, job->launch.rank, job->launch.nranks, dev, job, &created));
  return fcclCommStart(created, settings.blocking, comm);
}

FCCL_API fcclResult_t fcclCommInitExternal(fcclComm_t* comm, int nranks, int rank,
                                           const fcclBootstrapCallbacks_t* callbacks, const fcclConfig_t* config) {
  fcclClearError();
  FCCL_REQUIRE(comm != NULL, "fcclCommInitExternal: comm is NULL");
  FCCL_REQUIRE(callbacks != NULL && callbacks->allgather != NULL,
               "fcclCommInitExternal: callbacks or callbacks->allgather is NULL");
  FCCLCHECK(fcclCommCheckRanks("fcclCommInitExternal", nranks, rank));
  struct fcclCommSettings settings;
  struct fcclComm* created;
  FCCLCHECK(fcclCommPrepare(config, "fcclCommInitExternal", rank, nranks, INIT_PREMADE, &settings, &created));
  fcclResult_t res = fcclBootstrapExternalInit(callbacks, rank, nranks, created->abortFlag, &created->bootstrap);
  if (res != fcclSuccess) {
    fcclCommFreeAfterFailure(created);
    return res;
  }
  return fcclCommStart(created, settings.blocking, comm);
}

FCCL_API fcclResult_t fcclCommInitFromNccl(fcclComm_t* comm, void* ncclComm, const fcclConfig_t* config) {
  fcclClearError();
  FCCL_REQUIRE(comm != NULL, "fcclCommInitFromNccl: comm is NULL");
  FCCL_REQUIRE(ncclComm != NULL, "fcclCommInitFromNccl: ncclComm is NULL");
  struct fcclCommSettings settings;
  struct fcclComm* created;
  /* rank and nranks are the NCCL communicator's, known once the bootstrap is up */
  FCCLCHECK(fcclCommPrepare(config, "fcclCommInitFromNccl", -1, 0, INIT_PREMADE, &settings, &created));
  fcclResult_t res = fcclBootstrapNcclInit(ncclComm, settings.timeoutMs, created->abortFlag, &created->bootstrap);
  if (res != fcclSuccess) {
    fcclCommFreeAfterFailure(created);
    return res;
  }
  created->rank = created->bootstrap->rank;
  created->nranks = created->bootstrap->nranks;
  return fcclCommStart(created, settings.blocking, comm);
}
