/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which engine carries a communicator's calls (src/core/engine/path.c): fccl's kernels inside one host of
 * peer-accessible GPUs, the hierarchical path (fccl inside each host, NCCL across hosts) for several such hosts of
 * equal size, or NCCL for everything else, and whether the communicator also holds an NCCL communicator for the calls
 * fccl has no kernels for (send, receive, all-to-all). A pure function of what the ranks told each other at init,
 * so that every rank decides alike and the unit tests can feed it recorded peer tables. docs/paths.md.
 */
#ifndef FCCL_PATH_H_
#define FCCL_PATH_H_

#include "bootstrap.h"
#include "fccl.h"

#include <stddef.h>
#include <stdint.h>

/* What each rank tells the others for the decision, all-gathered after the peer information. */
struct fcclPathRecord {
  int32_t peerAccess; /* 1: every GPU of this host's other ranks that is visible here grants peer access */
  int32_t ncclLoaded; /* 1: libnccl.so.2 loaded with every function fccl uses */
  uint64_t ncclHost;  /* the host NCCL sees this rank on: a hash of NCCL_HOSTID when set, else the machine's */
  int32_t request;    /* this rank's FCCL_PATH (fcclPathRequest_t); -1: it did not parse */
  int32_t p2pDisable; /* this rank's FCCL_P2P_DISABLE != 0 */
  int32_t ncclComm;   /* this rank's FCCL_NCCL_COMM (fcclNcclCommMode_t); -1: it did not parse */
  int32_t mps;        /* 1: this rank's GPU shares its contexts through CUDA MPS (CU_DEVICE_ATTRIBUTE_MPS_ENABLED) */
};

typedef enum {
  FCCL_PATH_REQUEST_AUTO = 0,
  FCCL_PATH_REQUEST_FCCL,
  FCCL_PATH_REQUEST_NCCL,
  FCCL_PATH_REQUEST_HIER
} fcclPathRequest_t;

/* FCCL_NCCL_COMM: whether a communicator on the fccl path also creates an NCCL communicator at init (off by
 * default: NCCL's init is a wait fccl cannot bound, which a communicator that makes no send need not have). */
typedef enum { FCCL_NCCL_COMM_OFF = 0, FCCL_NCCL_COMM_INIT, FCCL_NCCL_COMM_AUTO } fcclNcclCommMode_t;

struct fcclPathInput {
  const struct fcclPeerInfo* infos;     /* nranks entries, as exchanged at init */
  const struct fcclPathRecord* records; /* nranks entries */
  int nranks;
  fcclPathRequest_t request;  /* FCCL_PATH */
  int p2pDisable;             /* FCCL_P2P_DISABLE */
  fcclNcclCommMode_t ncclComm; /* FCCL_NCCL_COMM */
  const char* ncclWhy;        /* why this rank cannot load NCCL (fcclNcclLoaded), quoted in the error; may be NULL */
  const char* sassArchs;      /* the build's FCCL_BUILD_SASS_ARCHS */
  int ptxArch;                /* the build's FCCL_BUILD_PTX_ARCH */
  int hostPart;               /* 1: the host communicator of a hierarchical one (core/engine/hier.c): fccl's
                               * kernels or a failure, no NCCL communicator, request and ncclComm ignored */
};

#define FCCL_PATH_REASON_BYTES 256

struct fcclPathDecision {
  fcclPath_t path;
  int ncclComm;     /* 1: init creates an NCCL communicator */
  int ncclRequired; /* 1: failing to create it fails init; 0 (fccl path, FCCL_NCCL_COMM=auto): init goes on without */
  char reason[FCCL_PATH_REASON_BYTES];    /* why this path */
  char p2pReason[FCCL_PATH_REASON_BYTES]; /* why there is no NCCL communicator ("" when there is one) */
};

/*
 * Decides. fcclInvalidUsage when FCCL_PATH=fccl asks for what fccl's kernels cannot do, or NCCL would refuse the
 * layout (two ranks on one GPU that NCCL sees on one host); fcclSystemError when NCCL is needed and a rank cannot
 * load it (the message says what to install); fcclInvalidArgument for bad input. Every rank gets the same answer.
 */
fcclResult_t fcclPathDecide(const struct fcclPathInput* in, struct fcclPathDecision* out);

/* The settings every rank must share (FCCL_PATH, FCCL_P2P_DISABLE, FCCL_NCCL_COMM) are equal in every record and
 * parsed on every rank: else fcclInvalidUsage naming a rank that differs, so that no rank takes another path. */
fcclResult_t fcclPathCheckAgreement(const struct fcclPathRecord* records, int nranks);

/* FCCL_PATH's text: "", "auto", "fccl", "nccl" or "hier" (fcclInvalidArgument otherwise). */
fcclResult_t fcclPathParseRequest(const char* text, fcclPathRequest_t* out);

/* FCCL_NCCL_COMM's text: "" or "off", "init", "auto" (fcclInvalidArgument otherwise). */
fcclResult_t fcclPathParseNcclComm(const char* text, fcclNcclCommMode_t* out);

/* The host NCCL sees a process on: a hash of NCCL_HOSTID's value when it is set, else hostHash. */
uint64_t fcclPathNcclHost(const char* ncclHostId, uint64_t hostHash);

/* Where a rank stands on the hierarchical path: hosts numbered by their first rank, the ranks of a host numbered in
 * rank order (the local rank), a rail the ranks of one local rank across the hosts. */
struct fcclHierLayout {
  int hosts;       /* hosts of the communicator */
  int localRanks;  /* ranks on each host (equal on every host) */
  int host;        /* this rank's host, 0..hosts-1: its rank on its rail */
  int localRank;   /* this rank's index among its host's ranks, 0..localRanks-1 */
  int hostLeader;  /* the rank of local rank 0 of this rank's host */
  int railLeader;  /* the rank of host 0 with this rank's local rank */
};

/* The layout of rank among nranks (pure). fcclInvalidArgument when the hosts do not have equal numbers of ranks. */
fcclResult_t fcclPathHierLayout(const struct fcclPeerInfo* infos, int nranks, int rank, struct fcclHierLayout* out);

/* Every rank's host (its rank on its rail) and local rank, in one pass (pure; hostOf and localOf hold nranks each),
 * and whether each host's ranks are consecutive (rank = host x localRanks + local rank, as launchers number them).
 * fcclInvalidArgument as fcclPathHierLayout. */
fcclResult_t fcclPathHierRanks(const struct fcclPeerInfo* infos, int nranks, int* hostOf, int* localOf,
                               int* consecutive);

#endif /* FCCL_PATH_H_ */
