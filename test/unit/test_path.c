/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The path decision over recorded peer tables: one host of peer-accessible GPUs runs fccl's kernels; several hosts
 * of equal size with peer access inside each run the hierarchical path (and its layout of hosts, local ranks and
 * rails); several hosts otherwise, more than 8 ranks, refused peer access, a GPU without kernels, a GPU shared through
 * CUDA MPS, FCCL_P2P_DISABLE and FCCL_PATH=nccl run NCCL; FCCL_PATH=fccl where the kernels cannot, and NCCL needed but
 * missing, fail with a message saying why.
 */
#include "bootstrap.h"
#include "check.h"
#include "fccl_build_config.h"
#include "ncclwrap.h"
#include "path.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

enum { MAX_RANKS = 24 };

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

  /* An uneven split, one host with a single rank: NCCL, and the reason says why not hierarchically. */
  makeTable(&t, 3, 2);
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_STR_CONTAINS(d.reason, "not hierarchical: a host has a single rank");
}

/* Several hosts of equal size with peer access inside each: the hierarchical path, chosen or forced; refused with
 * the rule that fails where the layout does not allow it. */
static void testHier(void) {
  struct table t;
  makeTable(&t, 4, 2); /* 2 hosts x 2 ranks */
  struct fcclPathDecision d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathHier);
  EXPECT_STR_CONTAINS(d.reason, "the 4 ranks are on 2 hosts of 2");
  EXPECT_EQ_INT(d.ncclComm, 1);
  EXPECT_EQ_INT(d.ncclRequired, 1);
  makeTable(&t, 16, 8); /* 2 hosts x 8 */
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathHier);
  EXPECT_STR_CONTAINS(d.reason, "on 2 hosts of 8");
  makeTable(&t, 12, 4); /* 3 hosts x 4 */
  t.in.request = FCCL_PATH_REQUEST_HIER;
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathHier);
  EXPECT_STR_CONTAINS(d.reason, "FCCL_PATH=hier; the 12 ranks are on 3 hosts of 4");

  /* Forced off: FCCL_PATH=nccl. */
  makeTable(&t, 4, 2);
  t.in.request = FCCL_PATH_REQUEST_NCCL;
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_STR_CONTAINS(d.reason, "FCCL_PATH=nccl");

  /* Layouts it cannot take: NCCL in auto, a refusal naming the rule with FCCL_PATH=hier. */
  struct {
    int nranks, perHost;
    int noAccess, noArch, p2pDisable, unequal;
    const char* why;
  } cases[] = {
      {4, 4, -1, -1, 0, 0, "on one host"},
      {4, 1, -1, -1, 0, 0, "a host has a single rank"},
      {5, 2, -1, -1, 0, 0, "a host has a single rank"},
      {6, 3, -1, -1, 0, 1, "different numbers of ranks (2 to 4)"},
      {18, 9, -1, -1, 0, 0, "9 ranks per host, more than fccl's kernels take (8)"},
      {4, 2, 3, -1, 0, 0, "rank 3's GPU has no peer access"},
      {4, 2, -1, 1, 0, 0, "rank 1's GPU cannot run fccl's kernels"},
      {4, 2, -1, -1, 1, 0, "FCCL_P2P_DISABLE=1"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    for (int forced = 0; forced < 2; forced++) {
      makeTable(&t, cases[i].nranks, cases[i].perHost);
      if (cases[i].unequal) t.infos[2].hostHash = t.infos[3].hostHash; /* hosts of 2 and 4 ranks */
      if (cases[i].noAccess >= 0) t.records[cases[i].noAccess].peerAccess = 0;
      if (cases[i].noArch >= 0) t.infos[cases[i].noArch].computeCapability = 75;
      t.in.p2pDisable = cases[i].p2pDisable;
      if (forced) {
        t.in.request = FCCL_PATH_REQUEST_HIER;
        decide(&t, fcclInvalidUsage);
        EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "FCCL_PATH=hier, but the hierarchical path needs");
        EXPECT_STR_CONTAINS(fcclGetLastError(NULL), cases[i].why);
      } else {
        d = decide(&t, fcclSuccess);
        EXPECT_MSG(d.path != fcclPathHier, "case %zu (%s): hierarchical", i, cases[i].why);
        if (cases[i].perHost > 1 && cases[i].perHost < cases[i].nranks) EXPECT_STR_CONTAINS(d.reason, cases[i].why);
      }
    }
  }

  /* NCCL is needed across hosts: missing, the path fails as the NCCL path does; two ranks on one GPU that NCCL sees
   * on one host are refused; distinct NCCL_HOSTIDs (tests) take them. */
  makeTable(&t, 4, 2);
  t.records[2].ncclLoaded = 0;
  decide(&t, fcclSystemError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 2 cannot load libnccl.so.2");
  makeTable(&t, 4, 2);
  memcpy(t.infos[1].gpuUuid, t.infos[0].gpuUuid, 16);
  decide(&t, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "ranks 0 and 1 use one GPU");
  for (int r = 0; r < 4; r++) t.records[r].ncclHost = 0x9000 + (uint64_t)r;
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathHier);

  /* The host communicator of a hierarchical one: fccl's kernels, no NCCL communicator, FCCL_PATH ignored. */
  makeTable(&t, 2, 2);
  t.in.hostPart = 1;
  t.in.request = FCCL_PATH_REQUEST_HIER;
  t.in.ncclComm = FCCL_NCCL_COMM_INIT;
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathFccl);
  EXPECT_EQ_INT(d.ncclComm, 0);
  EXPECT_STR_CONTAINS(d.reason, "host communicator of a hierarchical one");
  t.records[1].peerAccess = 0;
  decide(&t, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "peer access");

  fcclPathRequest_t request;
  EXPECT_EQ_INT(fcclPathParseRequest("hier", &request), fcclSuccess);
  EXPECT_EQ_INT(request, FCCL_PATH_REQUEST_HIER);
  EXPECT_STR_CONTAINS(fcclGetPathName(fcclPathHier), "hier");
}

/* Hosts, local ranks and rails from recorded tables, hosts interleaved in rank order as a launcher may place them. */
static void testHierLayout(void) {
  struct table t;
  makeTable(&t, 6, 3); /* 2 hosts x 3, contiguous */
  struct fcclHierLayout h;
  EXPECT_EQ_INT(fcclPathHierLayout(t.infos, 6, 4, &h), fcclSuccess);
  EXPECT_EQ_INT(h.hosts, 2);
  EXPECT_EQ_INT(h.localRanks, 3);
  EXPECT_EQ_INT(h.host, 1);
  EXPECT_EQ_INT(h.localRank, 1);
  EXPECT_EQ_INT(h.hostLeader, 3);
  EXPECT_EQ_INT(h.railLeader, 1);
  /* Ranks 0, 2, 4 on host A and 1, 3, 5 on host B. */
  for (int r = 0; r < 6; r++) t.infos[r].hostHash = 0x2000 + (uint64_t)(r % 2);
  for (int r = 0; r < 6; r++) {
    EXPECT_EQ_INT(fcclPathHierLayout(t.infos, 6, r, &h), fcclSuccess);
    EXPECT_EQ_INT(h.hosts, 2);
    EXPECT_EQ_INT(h.localRanks, 3);
    EXPECT_EQ_INT(h.host, r % 2);
    EXPECT_EQ_INT(h.localRank, r / 2);
    EXPECT_EQ_INT(h.hostLeader, r % 2);
    EXPECT_EQ_INT(h.railLeader, 2 * (r / 2));
  }
  /* Every rank's host and local rank at once, and whether the hosts' ranks are consecutive: interleaved here. */
  int hostOf[6], localOf[6], consecutive = -1;
  EXPECT_EQ_INT(fcclPathHierRanks(t.infos, 6, hostOf, localOf, &consecutive), fcclSuccess);
  EXPECT_EQ_INT(consecutive, 0);
  for (int r = 0; r < 6; r++) {
    EXPECT_EQ_INT(hostOf[r], r % 2);
    EXPECT_EQ_INT(localOf[r], r / 2);
  }
  makeTable(&t, 6, 3);
  EXPECT_EQ_INT(fcclPathHierRanks(t.infos, 6, hostOf, localOf, &consecutive), fcclSuccess);
  EXPECT_EQ_INT(consecutive, 1);
  for (int r = 0; r < 6; r++) {
    EXPECT_EQ_INT(hostOf[r], r / 3);
    EXPECT_EQ_INT(localOf[r], r % 3);
  }
  /* Ranks 0-2 on the host of the larger hash: hosts are numbered by their first rank, so still consecutive. */
  for (int r = 0; r < 6; r++) t.infos[r].hostHash = 0x3000 + (uint64_t)(r < 3);
  EXPECT_EQ_INT(fcclPathHierRanks(t.infos, 6, hostOf, localOf, &consecutive), fcclSuccess);
  EXPECT_EQ_INT(consecutive, 1);
  EXPECT_EQ_INT(hostOf[0], 0);
  EXPECT_EQ_INT(hostOf[5], 1);
  /* Two ranks of a host apart: 0, 1, 3 on A and 2, 4, 5 on B. */
  for (int r = 0; r < 6; r++) t.infos[r].hostHash = 0x4000 + (uint64_t)(r == 2 || r >= 4);
  EXPECT_EQ_INT(fcclPathHierRanks(t.infos, 6, hostOf, localOf, &consecutive), fcclSuccess);
  EXPECT_EQ_INT(consecutive, 0);
  EXPECT_EQ_INT(hostOf[3], 0);
  EXPECT_EQ_INT(localOf[3], 2);
  EXPECT_EQ_INT(hostOf[4], 1);
  EXPECT_EQ_INT(localOf[4], 1);
  EXPECT_EQ_INT(fcclPathHierRanks(t.infos, 6, NULL, localOf, &consecutive), fcclInvalidArgument);
  for (int r = 0; r < 6; r++) t.infos[r].hostHash = 0x2000 + (uint64_t)(r % 2);
  t.infos[5].hostHash = 0x2000; /* 4 and 2 */
  EXPECT_EQ_INT(fcclPathHierRanks(t.infos, 6, hostOf, localOf, &consecutive), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclPathHierLayout(t.infos, 6, 0, &h), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "hosts of equal size");
  EXPECT_EQ_INT(fcclPathHierLayout(t.infos, 6, 6, &h), fcclInvalidArgument);
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

/* A GPU shared through CUDA MPS (the device attribute, faked here in the record): fccl's kernels are not used, as
 * for a GPU without them; NCCL carries the communicator, or init fails naming the rank where NCCL cannot. */
static void testMps(void) {
  struct table t;
  makeTable(&t, 2, 2);
  t.records[1].mps = 1;
  struct fcclPathDecision d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_EQ_INT(d.ncclRequired, 1);
  EXPECT_STR_CONTAINS(d.reason, "rank 1's GPU shares its contexts through CUDA MPS");
  /* Two ranks on one GPU under MPS, as on a server that runs one: NCCL refuses them on one host, so init does. */
  memcpy(t.infos[1].gpuUuid, t.infos[0].gpuUuid, 16);
  decide(&t, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "CUDA MPS");
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "ranks 0 and 1 use one GPU");
  /* FCCL_PATH=fccl is refused, saying why. */
  makeTable(&t, 2, 2);
  t.records[0].mps = 1;
  t.in.request = FCCL_PATH_REQUEST_FCCL;
  decide(&t, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 0's GPU shares its contexts through CUDA MPS");
  /* Without NCCL: init fails with the rule and the missing library. */
  makeTable(&t, 2, 2);
  t.records[0].mps = 1;
  t.records[1].ncclLoaded = 0;
  decide(&t, fcclSystemError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "CUDA MPS");
  /* Several hosts: no hierarchical path over an MPS host either (its host communicators are the fccl path's). */
  makeTable(&t, 4, 2);
  t.records[3].mps = 1;
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathNccl);
  EXPECT_STR_CONTAINS(d.reason, "CUDA MPS");
  /* No MPS anywhere: the fccl path, as before. */
  makeTable(&t, 2, 2);
  d = decide(&t, fcclSuccess);
  EXPECT_EQ_INT(d.path, fcclPathFccl);
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
  testHier();
  testHierLayout();
  testManyRanks();
  testPeerAccessRefused();
  testArch();
  testMps();
  testRequests();
  testNcclMissing();
  testSharedGpu();
  testAgreement();
  testGroups();
  testBadInput();
  return testSummary("path");
}
