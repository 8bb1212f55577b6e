/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The init task's steps with its peers (init_task.c): every rank's information gathered and checked, the peer
 * processes watched for their end (monitor.c), and the path every rank decides alike (path.c; a GPU shared through
 * CUDA MPS is one of its inputs). Each step is collective over the communicator's bootstrap.
 */
#include "init.h"

#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "cudawrap.h"
#include "fccl_build_config.h"
#include "monitor.h"
#include "ncclwrap.h"
#include "param.h"
#include "path.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

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
fcclResult_t fcclCommExchangePeerInfo(struct fcclComm* comm) {
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
fcclResult_t fcclCommWatchPeers(struct fcclComm* comm) {
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
    const int keepalive = keepaliveMs > INT32_MAX ? INT32_MAX : (int)keepaliveMs;
    FCCLCHECKGOTO(fcclBootstrapPeerLinks(comm->bootstrap, linked, keepalive, links), res, out);
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
    if (r == comm->rank || info->hostHash != mine->hostHash || memcmp(info->gpuUuid, mine->gpuUuid, 16) == 0) continue;
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
fcclResult_t fcclCommChoosePath(struct fcclComm* comm, struct fcclPathDecision* decision) {
  struct fcclPathInput in = {.infos = comm->peerInfo,
                             .nranks = comm->nranks,
                             .sassArchs = FCCL_BUILD_SASS_ARCHS,
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
  /* Whether this GPU is shared through CUDA MPS travels in the record: every rank decides with every GPU's. */
  int mps = 0;
  if (res == fcclSuccess) res = fcclCudaDeviceMpsEnabled(comm->cudaDev, &mps);
  mine->mps = mps;
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
