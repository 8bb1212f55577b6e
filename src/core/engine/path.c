/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The path decision (path.h): fccl's kernels where they can run, the hierarchical path where several hosts of
 * equal size could each run them, NCCL everywhere else, and whether the
 * communicator holds an NCCL communicator for send, receive and all-to-all. Plain data in, plain data out: no
 * CUDA, no environment (the caller reads FCCL_PATH, FCCL_P2P_DISABLE and FCCL_NCCL_COMM), so the unit tests run it
 * over recorded peer tables. docs/paths.md explains each rule.
 */
#include "path.h"

#include "check.h"
#include "device_host.h"
#include "device_state.h"

#include <stdio.h>
#include <string.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

_Static_assert(sizeof(struct fcclPathRecord) == 32, "fcclPathRecord travels as bytes: no padding, fixed size");

FCCL_API const char* fcclGetPathName(fcclPath_t path) {
  switch (path) {
    case fcclPathFccl: return "fccl";
    case fcclPathNccl: return "nccl";
    case fcclPathHier: return "hier";
    default: return "unknown";
  }
}

fcclResult_t fcclPathParseRequest(const char* text, fcclPathRequest_t* out) {
  if (text == NULL || text[0] == '\0' || strcmp(text, "auto") == 0) *out = FCCL_PATH_REQUEST_AUTO;
  else if (strcmp(text, "fccl") == 0) *out = FCCL_PATH_REQUEST_FCCL;
  else if (strcmp(text, "nccl") == 0) *out = FCCL_PATH_REQUEST_NCCL;
  else if (strcmp(text, "hier") == 0) *out = FCCL_PATH_REQUEST_HIER;
  else
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "FCCL_PATH=%s: give auto, fccl, nccl or hier", text);
  return fcclSuccess;
}

fcclResult_t fcclPathParseNcclComm(const char* text, fcclNcclCommMode_t* out) {
  if (text == NULL || text[0] == '\0' || strcmp(text, "off") == 0) *out = FCCL_NCCL_COMM_OFF;
  else if (strcmp(text, "init") == 0) *out = FCCL_NCCL_COMM_INIT;
  else if (strcmp(text, "auto") == 0) *out = FCCL_NCCL_COMM_AUTO;
  else
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "FCCL_NCCL_COMM=%s: give off, init or auto", text);
  return fcclSuccess;
}

fcclResult_t fcclPathCheckAgreement(const struct fcclPathRecord* records, int nranks) {
  static const char* const names[] = {"FCCL_PATH", "FCCL_P2P_DISABLE", "FCCL_NCCL_COMM"};
  for (int r = 0; r < nranks; r++) {
    if (records[r].request < 0 || records[r].ncclComm < 0)
      return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT, "rank %d's %s is not a valid value (see its log)", r,
                        records[r].request < 0 ? names[0] : names[2]);
    const int differs[3] = {records[r].request != records[0].request,
                            records[r].p2pDisable != records[0].p2pDisable,
                            records[r].ncclComm != records[0].ncclComm};
    for (int i = 0; i < 3; i++)
      if (differs[i])
        return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                          "rank %d's %s differs from rank 0's: set it alike on every rank (it decides the path)", r,
                          names[i]);
  }
  return fcclSuccess;
}

uint64_t fcclPathNcclHost(const char* ncclHostId, uint64_t hostHash) {
  if (ncclHostId == NULL || ncclHostId[0] == '\0') return hostHash;
  uint64_t hash = 0xcbf29ce484222325ull; /* FNV-1a, as the host identity */
  for (const char* c = "NCCL_HOSTID="; *c; c++) hash = (hash ^ (unsigned char)*c) * 0x100000001b3ull;
  for (const char* c = ncclHostId; *c; c++) hash = (hash ^ (unsigned char)*c) * 0x100000001b3ull;
  return hash;
}

/* The shape of the communicator in hosts, as the decision needs it. */
struct layout {
  int hosts;
  int minPerHost; /* ranks of the host with the fewest */
  int maxPerHost; /* ranks of the host with the most */
  int noAccess;   /* a rank whose GPU is refused peer access to another of its host, or -1 */
  int noArch;     /* a rank whose GPU this build has no kernels for, or -1 */
  int mps;        /* a rank whose GPU shares its contexts through CUDA MPS, or -1 */
  int noNccl;     /* a rank that cannot load NCCL, or -1 */
  int sharedA, sharedB; /* two ranks on one GPU that NCCL sees on one host, or -1 */
  char archWhy[180];
};

static void readLayout(const struct fcclPathInput* in, struct layout* l) {
  memset(l, 0, sizeof(*l));
  l->noAccess = l->noArch = l->mps = l->noNccl = l->sharedA = l->sharedB = -1;
  l->minPerHost = in->nranks;
  l->maxPerHost = 0;
  for (int r = 0; r < in->nranks; r++) {
    const struct fcclPeerInfo* info = &in->infos[r];
    int first = 1, perHost = 0;
    for (int o = 0; o < in->nranks; o++) {
      if (in->infos[o].hostHash != info->hostHash) continue;
      if (o < r) first = 0;
      perHost++;
    }
    if (first) {
      l->hosts++;
      if (perHost < l->minPerHost) l->minPerHost = perHost;
      if (perHost > l->maxPerHost) l->maxPerHost = perHost;
    }
    if (!in->records[r].peerAccess && l->noAccess < 0) l->noAccess = r;
    if (in->records[r].mps && l->mps < 0) l->mps = r;
    if (!in->records[r].ncclLoaded && l->noNccl < 0) l->noNccl = r;
    if (info->computeCapability > 0 && l->noArch < 0 &&
        !fcclDeviceArchRunnable(info->computeCapability, in->sassArchs, in->ptxArch, l->archWhy,
                                sizeof(l->archWhy)))
      l->noArch = r;
    static const uint8_t zero[16];
    for (int o = 0; o < r && l->sharedA < 0; o++)
      if (memcmp(info->gpuUuid, zero, 16) != 0 && memcmp(info->gpuUuid, in->infos[o].gpuUuid, 16) == 0 &&
          in->records[o].ncclHost == in->records[r].ncclHost) {
        l->sharedA = o;
        l->sharedB = r;
      }
  }
}

/* The rules of every host's GPUs, on both paths that run fccl's kernels: why they cannot, into why; 0 when they can. */
static int gpusCannot(const struct layout* l, char* why, size_t size) {
  if (l->noAccess >= 0) {
    snprintf(why, size, "rank %d's GPU has no peer access to another GPU of its host", l->noAccess);
  } else if (l->noArch >= 0) {
    snprintf(why, size, "rank %d's GPU cannot run fccl's kernels: %s", l->noArch, l->archWhy);
  } else if (l->mps >= 0) {
    /* Under MPS every client's kernels share one context with no time slicing between them, so a kernel of fccl's
     * that waits for a peer's kernel on the same GPU may hold the SMs the peer's needs; and a fault in one client
     * is fatal to every client of the GPU. docs/paths.md#cuda-mps. */
    snprintf(why, size,
             "rank %d's GPU shares its contexts through CUDA MPS, under which fccl's kernels may wait for peer kernels "
             "that cannot start",
             l->mps);
  } else {
    return 0;
  }
  return 1;
}

/* Why fccl's kernels cannot carry this communicator, into why; 0 when they can. */
static int fcclCannot(const struct fcclPathInput* in, const struct layout* l, char* why, size_t size) {
  if (in->p2pDisable) {
    snprintf(why, size, "FCCL_P2P_DISABLE=1");
  } else if (l->hosts > 1) {
    snprintf(why, size, "the %d ranks are on %d hosts", in->nranks, l->hosts);
  } else if (in->nranks > FCCL_DEVICE_MAX_RANKS) {
    snprintf(why, size, "%d ranks, more than fccl's kernels take (%d)", in->nranks, FCCL_DEVICE_MAX_RANKS);
  } else {
    return gpusCannot(l, why, size);
  }
  return 1;
}

/* Why the hierarchical path cannot carry this communicator, into why; 0 when it can. Its host communicators are
 * fccl path communicators of one host each, so every rule of the fccl path but the one host applies to each. */
static int hierCannot(const struct fcclPathInput* in, const struct layout* l, char* why, size_t size) {
  if (in->p2pDisable) {
    snprintf(why, size, "FCCL_P2P_DISABLE=1");
  } else if (l->hosts < 2) {
    snprintf(why, size, "the %d rank%s on one host", in->nranks, in->nranks > 1 ? "s are" : " is");
  } else if (l->minPerHost < 2) {
    snprintf(why, size, "a host has a single rank");
  } else if (l->minPerHost != l->maxPerHost) {
    snprintf(why, size, "the hosts have different numbers of ranks (%d to %d)", l->minPerHost, l->maxPerHost);
  } else if (l->maxPerHost > FCCL_DEVICE_MAX_RANKS) {
    snprintf(why, size, "%d ranks per host, more than fccl's kernels take (%d)", l->maxPerHost,
             FCCL_DEVICE_MAX_RANKS);
  } else {
    return gpusCannot(l, why, size);
  }
  return 1;
}

static fcclResult_t ncclMissing(const struct fcclPathInput* in, const struct layout* l, const char* why) {
  return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT,
                    "the communicator needs NCCL (%s) but rank %d cannot load libnccl.so.2: install NCCL 2.x (the "
                    "libnccl2 package, or libnccl.so.2 on LD_LIBRARY_PATH)%s%s",
                    why, l->noNccl, in->ncclWhy ? "; on this rank: " : "", in->ncclWhy ? in->ncclWhy : "");
}

static fcclResult_t ncclRefusesShared(const struct layout* l, const char* why) {
  return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                    "the communicator needs NCCL (%s) but ranks %d and %d use one GPU on what NCCL sees as one host, "
                    "which NCCL refuses: give each process its own GPU, or (tests) its own NCCL_HOSTID",
                    why, l->sharedA, l->sharedB);
}

fcclResult_t fcclPathDecide(const struct fcclPathInput* in, struct fcclPathDecision* out) {
  if (in == NULL || out == NULL || in->infos == NULL || in->records == NULL || in->nranks < 1)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "path decision without its input");
  struct layout l;
  readLayout(in, &l);
  struct fcclPathDecision d;
  memset(&d, 0, sizeof(d));
  char cannot[FCCL_PATH_REASON_BYTES], hierNot[FCCL_PATH_REASON_BYTES];
  const int fcclNo = fcclCannot(in, &l, cannot, sizeof(cannot));
  const int hierNo = hierCannot(in, &l, hierNot, sizeof(hierNot));

  if (in->hostPart) {
    /* The hierarchical decision saw these rules hold on every host: reached only if a rank's view changed since. */
    if (fcclNo)
      return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                        "the hierarchical path's host communicator cannot run fccl's kernels: %s", cannot);
    d.path = fcclPathFccl;
    snprintf(d.reason, sizeof(d.reason), "the host communicator of a hierarchical one: %d rank%s on one host",
             in->nranks, in->nranks > 1 ? "s" : "");
    snprintf(d.p2pReason, sizeof(d.p2pReason), "the hierarchical communicator's NCCL communicator carries them");
    *out = d;
    return fcclSuccess;
  }
  if (in->request == FCCL_PATH_REQUEST_FCCL && fcclNo)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                      "FCCL_PATH=fccl, but fccl's kernels cannot carry this communicator: %s (unset FCCL_PATH to let "
                      "NCCL carry it)",
                      cannot);
  if (in->request == FCCL_PATH_REQUEST_HIER && hierNo)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_INIT,
                      "FCCL_PATH=hier, but the hierarchical path needs several hosts with the same number of ranks "
                      "(2 to %d each) and fccl's kernels inside each: %s (unset FCCL_PATH to let fccl choose)",
                      FCCL_DEVICE_MAX_RANKS, hierNot);
  /* Hierarchical when asked, or when fccl's kernels cannot carry the whole communicator but can carry each host. */
  if (in->request == FCCL_PATH_REQUEST_HIER || (in->request == FCCL_PATH_REQUEST_AUTO && fcclNo && !hierNo)) {
    d.path = fcclPathHier;
    snprintf(d.reason, sizeof(d.reason),
             "%sthe %d ranks are on %d hosts of %d, peer access inside each: the all-reduce, all-gather, "
             "reduce-scatter and broadcast on fccl's kernels inside each host and NCCL across them, the other calls "
             "on NCCL",
             in->request == FCCL_PATH_REQUEST_HIER ? "FCCL_PATH=hier; " : "", in->nranks, l.hosts, l.minPerHost);
    if (l.noNccl >= 0) return ncclMissing(in, &l, d.reason);
    if (l.sharedA >= 0) return ncclRefusesShared(&l, d.reason);
    d.ncclComm = 1;
    d.ncclRequired = 1;
    *out = d;
    return fcclSuccess;
  }
  if (in->request == FCCL_PATH_REQUEST_NCCL || fcclNo) {
    d.path = fcclPathNccl;
    if (in->request == FCCL_PATH_REQUEST_NCCL)
      snprintf(d.reason, sizeof(d.reason), "FCCL_PATH=nccl");
    else
      snprintf(d.reason, sizeof(d.reason), "%s", cannot);
    /* A host of several ranks among several hosts: NCCL carries the traffic inside it too, and the reason says why
     * not hierarchically. */
    const int inside = l.hosts > 1 && l.maxPerHost > 1;
    if (inside)
      snprintf(d.reason + strlen(d.reason), sizeof(d.reason) - strlen(d.reason), "; NCCL inside each host too%s%s",
               hierNo ? " (not hierarchical: " : "", hierNo ? hierNot : "");
    if (inside && hierNo) snprintf(d.reason + strlen(d.reason), sizeof(d.reason) - strlen(d.reason), ")");
    if (l.noNccl >= 0) return ncclMissing(in, &l, d.reason);
    if (l.sharedA >= 0) return ncclRefusesShared(&l, d.reason);
    d.ncclComm = 1;
    d.ncclRequired = 1;
    *out = d;
    return fcclSuccess;
  }

  d.path = fcclPathFccl;
  snprintf(d.reason, sizeof(d.reason), "%s%d rank%s on one host, peer access granted, kernels for the GPU%s",
           in->request == FCCL_PATH_REQUEST_FCCL ? "FCCL_PATH=fccl; " : "", in->nranks, in->nranks > 1 ? "s" : "",
           in->nranks > 1 ? "s" : "");
  /* The NCCL communicator for send, receive and all-to-all. */
  if (in->ncclComm == FCCL_NCCL_COMM_OFF) {
    snprintf(d.p2pReason, sizeof(d.p2pReason),
             "FCCL_NCCL_COMM is off: set FCCL_NCCL_COMM=init on every rank for send, receive and all-to-all");
  } else if (l.noNccl >= 0) {
    if (in->ncclComm == FCCL_NCCL_COMM_INIT) return ncclMissing(in, &l, "FCCL_NCCL_COMM=init");
    snprintf(d.p2pReason, sizeof(d.p2pReason),
             "rank %d cannot load libnccl.so.2 (install NCCL 2.x for send, receive and all-to-all)", l.noNccl);
  } else if (l.sharedA >= 0) {
    if (in->ncclComm == FCCL_NCCL_COMM_INIT) return ncclRefusesShared(&l, "FCCL_NCCL_COMM=init");
    snprintf(d.p2pReason, sizeof(d.p2pReason),
             "ranks %d and %d use one GPU on what NCCL sees as one host, which NCCL refuses (tests: give each "
             "process its own NCCL_HOSTID)",
             l.sharedA, l.sharedB);
  } else {
    d.ncclComm = 1;
    d.ncclRequired = in->ncclComm == FCCL_NCCL_COMM_INIT;
  }
  *out = d;
  return fcclSuccess;
}

/* Whether rank r is the first of its host's ranks. */
static int firstOfHost(const struct fcclPeerInfo* infos, int r) {
  for (int o = 0; o < r; o++)
    if (infos[o].hostHash == infos[r].hostHash) return 0;
  return 1;
}

fcclResult_t fcclPathHierLayout(const struct fcclPeerInfo* infos, int nranks, int rank, struct fcclHierLayout* out) {
  if (infos == NULL || out == NULL || nranks < 1 || rank < 0 || rank >= nranks)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "hierarchical layout without its input");
  struct fcclHierLayout h = {.hostLeader = -1, .railLeader = -1};
  for (int r = 0; r < nranks; r++) {
    int count = 0;
    for (int o = 0; o < nranks; o++) count += infos[o].hostHash == infos[r].hostHash;
    if (r == 0) h.localRanks = count;
    if (count != h.localRanks)
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT,
                        "the hierarchical path needs hosts of equal size: rank 0's host has %d ranks, rank %d's %d",
                        h.localRanks, r, count);
    if (!firstOfHost(infos, r)) continue;
    if (infos[r].hostHash == infos[rank].hostHash) {
      h.host = h.hosts;
      h.hostLeader = r;
    }
    h.hosts++;
  }
  for (int o = 0; o < rank; o++) h.localRank += infos[o].hostHash == infos[rank].hostHash;
  /* Host 0's ranks in rank order: the one of this local rank leads the rail. */
  for (int r = 0, index = 0; r < nranks && h.railLeader < 0; r++)
    if (infos[r].hostHash == infos[0].hostHash && index++ == h.localRank) h.railLeader = r;
  *out = h;
  return fcclSuccess;
}

fcclResult_t fcclPathHierRanks(const struct fcclPeerInfo* infos, int nranks, int* hostOf, int* localOf,
                               int* consecutive) {
  if (hostOf == NULL || localOf == NULL || consecutive == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_INIT, "hierarchical ranks without their output");
  struct fcclHierLayout first;
  FCCLCHECK(fcclPathHierLayout(infos, nranks, 0, &first)); /* the input and the equal hosts checked */
  int hosts = 0;
  *consecutive = 1;
  for (int r = 0; r < nranks; r++) {
    int leader = r, local = 0; /* the first rank of r's host, and r's index among its host's ranks */
    for (int o = r - 1; o >= 0; o--)
      if (infos[o].hostHash == infos[r].hostHash) {
        leader = o;
        local++;
      }
    hostOf[r] = leader == r ? hosts++ : hostOf[leader];
    localOf[r] = local;
    *consecutive &= r == hostOf[r] * first.localRanks + local;
  }
  return fcclSuccess;
}
