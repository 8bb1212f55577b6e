/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The path decision over recorded peer tables: one host of peer-accessible GPUs runs fccl's kernels; several hosts,
 * more than 8 ranks, refused peer access, a GPU without kernels, FCCL_P2P_DISABLE and FCCL_PATH=nccl run NCCL;
 * FCCL_PATH=fccl where the kernels cannot, and NCCL needed but missing, fail with a message saying why.
 */
#include "bootstrap.h"
#include "check.h"
#include "fccl_build_config.h"
#include "ncclwrap.h"
#include "path.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

enum { MAX_RANKS = 16 };

/* A recorded table: nranks ranks, ranks/perHost hosts, each rank on a GPU of its own (compute capability 9.0). */
struct table {
  struct fcclPeerInfo infos[MAX_RANKS];
  struct fcclPathRecord records[MAX_RANKS];
  struct fcclPathInput in;
};

static void makeTable(struct table* t, int nranks, int perHost) {
  memset(t, 0, sizeof(*t));
  for (int r = 0; r < nranks; r++) {
    struct fcclPeerInfo* info = &t->infos[r];
    info->hostHash = 0x1000 + (uint64_t)(r / perHost);
    info->pidNs = 7;
    info->pid = 100 + r;
    info->rank = r;
    info->nranks = nranks;
    info->cudaDev = r % perHost;
    info->computeCapability = 90;
    for (int i = 0; i < 16; i++) info->gpuUuid[i] = (uint8_t)(0x10 * r + i + 1);
    snprintf(info->busId, sizeof(info->busId), "0000:%02x:00.0", 0x10 + r % perHost);
    snprintf(info->hostname, sizeof(info->hostname), "node%d", r / perHost);
    t->records[r].peerAccess = 1;
    t->records[r].ncclLoaded = 1;
    t->records[r].ncclHost = info->hostHash;
  }
  t->in = (struct fcclPathInput){.infos = t->infos, .records = t->records, .nranks = nranks,
                                 .request = FCCL_PATH_REQUEST_AUTO, .ncclComm = FCCL_NCCL_COMM_AUTO,
                                 .sassArchs = "80 90", .ptxArch = 90};
}

static struct fcclPathDecision decide(const struct table* t, fcclResult_t expected) {
  struct fcclPathDecision d;
  memset(&d, 0x5a, sizeof(d));
  fcclClearError();
  EXPECT_EQ_INT(fcclPathDecide(&t->in, &d), expected);
  return d;
}

static void testOneHost(void) {
  struct table t;
  for (int n = 1; n <= 8; n++) {
    makeTable(&t, n, n);
    struct fcclPathDecision d = decide(&t, fcclSuccess);
    EXPECT_EQ_INT(d.path, fcclPathFccl);
    EXPECT_STR_CONTAINS(d.reason, "on one host");
    EXPECT_EQ_INT(d.ncclComm, 1); /* NCCL loads and takes the layout: send/recv available */
    EXPECT_EQ_INT(d.ncclRequired, 0);
    EXPECT(d.p2pReason[0] == '\0');
  }
}

static void testSeveralHosts(void) {
  struct table t;
  makeTable(&t, 4, 1); /* 4 hosts of one rank */
  struct fcclPathDecision d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_STR_CONTAINS(d.reason, "the 4 ranks are on 4 hosts");
  EXPECT_EQ_INT(d.ncclComm, 1);
  EXPECT_EQ_INT(d.ncclRequired, 1);

  makeTable(&t, 4, 2); /* 2 hosts x 2 ranks: what a hierarchical path would take, NCCL for now */
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_STR_CONTAINS(d.reason, "on 2 hosts");
  EXPECT_STR_CONTAINS(d.reason, "no hierarchical path");

  /* An uneven split, one host with a single rank: no hierarchical note. */
  makeTable(&t, 3, 2);
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT(strstr(d.reason, "hierarchical") == NULL);
}

static void testManyRanks(void) {
  struct table t;
  makeTable(&t, 9, 9);
  struct fcclPathDecision d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_STR_CONTAINS(d.reason, "9 ranks, more than fccl's kernels take (8)");
  makeTable(&t, 16, 16);
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_STR_CONTAINS(d.reason, "16 ranks");
}

static void testPeerAccessRefused(void) {
  struct table t;
  makeTable(&t, 4, 4);
  t.records[2].peerAccess = 0;
  struct fcclPathDecision d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_STR_CONTAINS(d.reason, "rank 2's GPU has no peer access");

  makeTable(&t, 2, 2);
  t.in.p2pDisable = 1;
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_STR_CONTAINS(d.reason, "FCCL_P2P_DISABLE=1");
}

static void testArch(void) {
  struct table t;
  makeTable(&t, 2, 2);
  t.infos[1].computeCapability = 75; /* Turing: neither SASS of 8.0/9.0 nor PTX of 9.0 runs there */
  struct fcclPathDecision d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_STR_CONTAINS(d.reason, "rank 1's GPU cannot run fccl's kernels");
  EXPECT_STR_CONTAINS(d.reason, "7.5");
  /* Newer than every SASS: the PTX of 9.0 runs. */
  makeTable(&t, 2, 2);
  t.infos[0].computeCapability = 100;
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathFccl);
  /* A build with no PTX refuses it. */
  t.in.ptxArch = 0;
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
}

static void testRequests(void) {
  struct table t;
  makeTable(&t, 2, 2);
  t.in.request = FCCL_PATH_REQUEST_NCCL;
  struct fcclPathDecision d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_STR_CONTAINS(d.reason, "FCCL_PATH=nccl");
  EXPECT_EQ_INT(d.ncclRequired, 1);

  t.in.request = FCCL_PATH_REQUEST_FCCL;
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathFccl);
  EXPECT_STR_CONTAINS(d.reason, "FCCL_PATH=fccl");

  /* Forced fccl where it cannot work: a clear error naming the cause. */
  makeTable(&t, 2, 1);
  t.in.request = FCCL_PATH_REQUEST_FCCL;
  decide(&t, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "FCCL_PATH=fccl, but fccl's kernels cannot");
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "on 2 hosts");
  makeTable(&t, 12, 12);
  t.in.request = FCCL_PATH_REQUEST_FCCL;
  decide(&t, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "12 ranks");
  makeTable(&t, 2, 2);
  t.records[0].peerAccess = 0;
  t.in.request = FCCL_PATH_REQUEST_FCCL;
  decide(&t, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "peer access");

  fcclPathRequest_t request;
  EXPECT_EQ_INT(fcclPathParseRequest("", &request), fcclSuccess);
  EXPECT_EQ_INT(request, FCCL_PATH_REQUEST_AUTO);
  EXPECT_EQ_INT(fcclPathParseRequest("nccl", &request), fcclSuccess);
  EXPECT_EQ_INT(request, FCCL_PATH_REQUEST_NCCL);
  EXPECT_EQ_INT(fcclPathParseRequest("fccl", &request), fcclSuccess);
  EXPECT_EQ_INT(request, FCCL_PATH_REQUEST_FCCL);
  EXPECT_EQ_INT(fcclPathParseRequest("mpi", &request), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "FCCL_PATH=mpi");
  fcclNcclCommMode_t mode;
  EXPECT_EQ_INT(fcclPathParseNcclComm("init", &mode), fcclSuccess);
  EXPECT_EQ_INT(mode, FCCL_NCCL_COMM_INIT);
  EXPECT_EQ_INT(fcclPathParseNcclComm("off", &mode), fcclSuccess);
  EXPECT_EQ_INT(mode, FCCL_NCCL_COMM_OFF);
  EXPECT_EQ_INT(fcclPathParseNcclComm("auto", &mode), fcclSuccess);
  EXPECT_EQ_INT(mode, FCCL_NCCL_COMM_AUTO);
  EXPECT_EQ_INT(fcclPathParseNcclComm("", &mode), fcclSuccess); /* the default */
  EXPECT_EQ_INT(mode, FCCL_NCCL_COMM_OFF);
  EXPECT_EQ_INT(fcclPathParseNcclComm("1", &mode), fcclInvalidArgument);

  EXPECT_STR_CONTAINS(fcclGetPathName(fcclPathFccl), "fccl");
  EXPECT_STR_CONTAINS(fcclGetPathName(fcclPathNccl), "nccl");
  EXPECT_STR_CONTAINS(fcclGetPathName((fcclPath_t)7), "unknown");
}

static void testNcclMissing(void) {
  struct table t;
  makeTable(&t, 4, 2);
  t.records[3].ncclLoaded = 0;
  decide(&t, fcclSystemError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 3 cannot load libnccl.so.2: install NCCL 2.x");
  t.in.ncclWhy = "this fccl was built without NCCL";
  decide(&t, fcclSystemError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "on this rank: this fccl was built without NCCL");
  t.in.ncclWhy = NULL;

  /* The fccl path goes on without NCCL, and says why send/recv are missing; FCCL_NCCL_COMM=init refuses. */
  makeTable(&t, 2, 2);
  t.records[1].ncclLoaded = 0;
  struct fcclPathDecision d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathFccl);
  EXPECT_EQ_INT(d.ncclComm, 0);
  EXPECT_STR_CONTAINS(d.p2pReason, "rank 1 cannot load libnccl.so.2");
  t.in.ncclComm = FCCL_NCCL_COMM_INIT;
  decide(&t, fcclSystemError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "install NCCL 2.x");
  makeTable(&t, 2, 2);
  t.in.ncclComm = FCCL_NCCL_COMM_OFF;
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.ncclComm, 0);
  EXPECT_STR_CONTAINS(d.p2pReason, "set FCCL_NCCL_COMM=init");
}

/* Two ranks on one GPU (tests): NCCL takes them only when each claims its own NCCL host. */
static void testSharedGpu(void) {
  struct table t;
  makeTable(&t, 2, 2);
  memcpy(t.infos[1].gpuUuid, t.infos[0].gpuUuid, 16);
  struct fcclPathDecision d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathFccl);
  EXPECT_EQ_INT(d.ncclComm, 0);
  EXPECT_STR_CONTAINS(d.p2pReason, "NCCL_HOSTID");
  t.in.request = FCCL_PATH_REQUEST_NCCL;
  decide(&t, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "ranks 0 and 1 use one GPU");
  /* Distinct NCCL_HOSTIDs: NCCL sees two hosts; fccl still sees one (the fccl path with NCCL for send/recv). */
  t.records[0].ncclHost = fcclPathNcclHost("a", t.infos[0].hostHash);
  t.records[1].ncclHost = fcclPathNcclHost("b", t.infos[1].hostHash);
  EXPECT(t.records[0].ncclHost != t.records[1].ncclHost);
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  t.in.request = FCCL_PATH_REQUEST_AUTO;
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathFccl);
  EXPECT_EQ_INT(d.ncclComm, 1);
  EXPECT_EQ_INT(fcclPathNcclHost("", 42), 42);
  EXPECT_EQ_INT(fcclPathNcclHost(NULL, 42), 42);
}

/* The settings that decide the path must be equal on every rank, and valid. */
static void testAgreement(void) {
  struct table t;
  makeTable(&t, 3, 3);
  EXPECT_EQ_INT(fcclPathCheckAgreement(t.records, 3), fcclSuccess);
  t.records[2].request = FCCL_PATH_REQUEST_NCCL;
  EXPECT_EQ_INT(fcclPathCheckAgreement(t.records, 3), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 2's FCCL_PATH differs from rank 0's");
  makeTable(&t, 3, 3);
  t.records[1].p2pDisable = 1;
  EXPECT_EQ_INT(fcclPathCheckAgreement(t.records, 3), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 1's FCCL_P2P_DISABLE differs");
  makeTable(&t, 3, 3);
  t.records[2].ncclComm = FCCL_NCCL_COMM_INIT;
  EXPECT_EQ_INT(fcclPathCheckAgreement(t.records, 3), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "FCCL_NCCL_COMM differs");
  makeTable(&t, 3, 3);
  t.records[1].request = -1;
  EXPECT_EQ_INT(fcclPathCheckAgreement(t.records, 3), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 1's FCCL_PATH is not a valid value");
}

/* Groups need NCCL: with it they nest and end; without it (a build without nccl.h, or no libnccl.so.2) the call
 * says what to install. No GPU is needed for an empty group. */
static void testGroups(void) {
  const char* why = NULL;
  if (fcclNcclLoaded(&why)) {
    EXPECT_EQ_INT(fcclGroupStart(), fcclSuccess);
    EXPECT_EQ_INT(fcclGroupStart(), fcclSuccess);
    EXPECT_EQ_INT(fcclGroupEnd(), fcclSuccess);
    EXPECT_EQ_INT(fcclGroupEnd(), fcclSuccess);
    EXPECT_EQ_INT(fcclGroupEnd(), fcclInvalidUsage);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "no group was started");
  } else {
    EXPECT_STR_CONTAINS(why, FCCL_HAVE_NCCL ? "libnccl.so.2" : "built without NCCL");
    EXPECT_EQ_INT(fcclGroupStart(), fcclInvalidUsage);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "install NCCL 2.x");
    EXPECT_EQ_INT(fcclGroupEnd(), fcclInvalidUsage);
  }
}

static void testBadInput(void) {
  EXPECT_EQ_INT(fcclPathDecide(NULL, NULL), fcclInvalidArgument);
  struct table t;
  makeTable(&t, 2, 2);
  t.in.records = NULL;
  struct fcclPathDecision d;
  EXPECT_EQ_INT(fcclPathDecide(&t.in, &d), fcclInvalidArgument);
}

int main(void) {
  testOneHost();
  testSeveralHosts();
  testManyRanks();
  testPeerAccessRefused();
  testArch();
  testRequests();
  testNcclMissing();
  testSharedGpu();
  testAgreement();
  testGroups();
  testBadInput();
  return testSummary("path");
}
