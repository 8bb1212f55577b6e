/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL path and fccl's NCCL-carried calls, on forked ranks that share one GPU (or use several when there are).
 * NCCL refuses two ranks on one GPU of one host, so every rank claims its own NCCL host (NCCL_HOSTID) and NCCL runs
 * them over its socket transport on loopback; FCCL_HOSTID decides whether fccl sees one host or several.
 *
 *   nccl N        FCCL_PATH=nccl, one fccl host: every call (the four collectives on random data of several types and
 *                 ops, barrier, send/recv in a group, all-to-all, registration, graph capture; the reduce, bcast,
 *                 gather, scatter and pre-multiplied sums: test_nccl_path_rooted.c) against a float64 host
 *                 reference; argument checks of the new calls.
 *   hosts N       every rank its own FCCL_HOSTID: NCCL chosen automatically (the reason names the hosts); same calls.
 *   hier          4 ranks as 2 simulated hosts x 2 (FCCL_HOSTID per pair): the hierarchical path, chosen automatically;
 *                 the same calls, plus all-reduces of every type and op at counts with and without a remainder over
 *                 the 2 local ranks, and the all-reduce refused inside a group; the hierarchical all-gather,
 *                 broadcast (every root) and reduce-scatter (every op) in place and not, captured in a graph, and
 *                 the all-gather in a group.
 *   many [N]      9 ranks (N) on one fccl host: more than fccl's kernels take, so NCCL chosen automatically (the
 *                 reason says so), as on a 16-GPU NVSwitch system; the same calls.
 *   hierinterleaved  the hierarchical path with ranks 0, 2 on one host and 1, 3 on the other: the same calls and
 *                 extras (the all-gather and the reduce-scatter then run on the world NCCL communicator, the
 *                 broadcast maps the root to its host).
 *   hierforced    the same layout with FCCL_PATH=hier: the hierarchical path, the reason says it was asked for;
 *                 the same calls.
 *   hierrefused   FCCL_PATH=hier with one fccl host: init fails on every rank with fcclInvalidUsage saying why.
 *   p2pdisable    FCCL_P2P_DISABLE=1: NCCL; same calls.
 *   fcclp2p N     one host identity for fccl, distinct NCCL_HOSTIDs, FCCL_NCCL_COMM=init: the fccl path, with
 *                 send/recv/all-to-all through the NCCL communicator; same calls.
 *   p2pmissing    the fccl path without an NCCL communicator (FCCL_NCCL_COMM's default, off): fcclSend and
 *                 fcclAllToAll fail with fcclInvalidUsage saying why, the collectives work.
 *   abort         NCCL path: rank 0's all-reduce that rank 1 never joins is stopped by fcclCommAbort, promptly.
 *   dead          NCCL path, one fccl host: rank 1 exits; rank 0's fcclCommGetAsyncError reports it (fccl's
 *                 monitor), and fcclCommAbort returns.
 *   deadhosts     the same with every rank its own host: NCCL's own error detection reports it.
 *   vanishedhosts two ranks, each its own host in a network namespace of its own, joined by a veth pair
 *                 (test_wire.h) that carries fccl's bootstrap, its peer links and NCCL's sockets; while both ranks'
 *                 all-reduces wait in NCCL, rank 1 takes its end down (no end of stream, no reset: a host that
 *                 stopped answering): each rank's fcclCommGetAsyncError reports fcclRemoteError naming the other
 *                 from the peer link's keepalive, within its bound, and fcclCommAbort returns with NCCL's kernel
 *                 stopped. Skipped where the wire cannot be laid (it needs what root has).
 *   ncclinitfail  NCCL path: rank 1's ncclCommInitRankConfig fails at once (NCCL_SOCKET_IFNAME names no interface)
 *                 while rank 0's is under way: rank 0 returns fcclRemoteError naming rank 1 instead of waiting in
 *                 NCCL's rendezvous, rank 1 its own cause (test_nccl_path_faults.c).
 *   mps           rank 1's GPU faked as shared through CUDA MPS (no MPS server): the NCCL path, the reason says
 *                 why, an all-reduce checked; FCCL_PATH=fccl refused on every rank with fcclInvalidUsage.
 *   hierabort     hierarchical path, 4 ranks: the first host's all-reduce, which the second host never joins (its
 *                 NCCL step across hosts waits), is stopped by fcclCommAbort on both of its ranks, promptly.
 *   hierdead      hierarchical path, 4 ranks: rank 1 exits; every other rank's fcclCommGetAsyncError reports an error
 *                 (rank 0 through fccl's monitor, the others through NCCL or their own peers' aborts), bounded.
 * Results of NCCL's reductions are checked within the dtype's tolerance with NCCL's own rules (float max/min ignore
 * NaN, 16-bit floats accumulate in their own precision); moves (all-gather, broadcast, send/recv, all-to-all)
 * bit for bit.
 * The files: test_nccl_path.c (the modes that run every call, and main), test_nccl_path_calls.c (one rank's
 * calls and their checks), test_nccl_path_rooted.c (the rooted collectives and pre-multiplied sums),
 * test_nccl_path_ref.c (NCCL's results against the reference), test_nccl_path_faults.c
 * (a call stopped by fcclCommAbort, a dead rank, a vanished host).
 */
#include "test_nccl_path.h"

#include "cudawrap.h"
#include "param.h"
#include "test.h"
#include "test_allreduce_common.h"
#include "test_allreduce_ref.h"
#include "test_shm.h"
#include "test_wire.h"

#include <cuda_runtime.h>
#include <fccl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- identities ---- */

/* Before any fccl call of the rank: its NCCL host (always its own), its fccl host, and the test's knobs. */
void setIdentity(int rank, int fcclHosts, const char* path) {
  char value[96];
  snprintf(value, sizeof(value), "fccl-test-%d-rank%d", (int)getppid(), rank);
  setenv("NCCL_HOSTID", value, 1);
  if (fcclHosts == FCCL_HOST_PER_RANK) setenv("FCCL_HOSTID", value, 1);
  if (fcclHosts == FCCL_HOST_PER_PAIR || fcclHosts == FCCL_HOST_INTERLEAVED) {
    /* Pairs of consecutive ranks, or ranks 0, 2 on one host and 1, 3 on the other (of 4). */
    snprintf(value, sizeof(value), "fccl-test-%d-host%d", (int)getppid(),
             fcclHosts == FCCL_HOST_PER_PAIR ? rank / 2 : rank % 2);
    setenv("FCCL_HOSTID", value, 1);
  }
  if (path) setenv("FCCL_PATH", path, 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1); /* never multicast objects */
  setenv("NCCL_NET", "Socket", 0);    /* one machine posing as several hosts: loopback sockets */
  fcclParamResetForTest();
}

/* ---- modes ---- */

struct modeSpec {
  const char* name;
  int fcclHosts;
  const char* path;      /* FCCL_PATH, or NULL */
  fcclPath_t expected;
  const char* reasonPart;
};

static const struct modeSpec kEverything[] = {
    {"nccl", FCCL_HOST_ONE, "nccl", fcclPathNccl, "FCCL_PATH=nccl"},
    {"hosts", FCCL_HOST_PER_RANK, NULL, fcclPathNccl, "hosts"},
    {"many", FCCL_HOST_ONE, NULL, fcclPathNccl, "more than fccl's kernels take"},
    {"hier", FCCL_HOST_PER_PAIR, NULL, fcclPathHier, "the 4 ranks are on 2 hosts of 2"},
    {"hierforced", FCCL_HOST_PER_PAIR, "hier", fcclPathHier, "FCCL_PATH=hier"},
    {"hierinterleaved", FCCL_HOST_INTERLEAVED, NULL, fcclPathHier, "the 4 ranks are on 2 hosts of 2"},
    {"p2pdisable", FCCL_HOST_ONE, NULL, fcclPathNccl, "FCCL_P2P_DISABLE=1"},
    {"fcclp2p", FCCL_HOST_ONE, NULL, fcclPathFccl, "on one host"},
};

static int rankEverything(int rank, int nranks, const struct modeSpec* m, struct testArgs* args) {
  setIdentity(rank, m->fcclHosts, m->path);
  if (strcmp(m->name, "p2pdisable") == 0) setenv("FCCL_P2P_DISABLE", "1", 1);
  if (strcmp(m->name, "fcclp2p") == 0) setenv("FCCL_NCCL_COMM", "init", 1);
  fcclParamResetForTest();
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct rankState state, *s = &state;
  int failed = stateInit(s, comm, rank, nranks, args->seed);
  if (!failed) failed = expectPath(s, m->expected, m->reasonPart);
  if (m->expected == fcclPathHier) s->hostRanks = 2;
  s->hostsInterleaved = m->fcclHosts == FCCL_HOST_INTERLEAVED;
  if (!failed) failed = runEverything(s, args->shared);
  if (!failed && (strcmp(m->name, "hier") == 0 || strcmp(m->name, "hierinterleaved") == 0)) failed = runHierExtras(s);
  stateFini(s);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  (void)failed;
  return testSummary(m->name);
}

/* FCCL_PATH=hier where fccl sees one host: every rank's init fails with fcclInvalidUsage naming the rule. */
static int rankHierRefused(int rank, int nranks, struct testArgs* args) {
  setIdentity(rank, FCCL_HOST_ONE, "hier");
  fcclUniqueId id;
  if (!collShareId(args->shared, rank, 0, &id)) return 1;
  EXPECT_EQ_INT(cudaSetDevice(rank % args->gpus), cudaSuccess);
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = nranks > args->gpus;
  config.timeoutMs = 60000;
  fcclComm_t comm = NULL;
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, nranks, id, rank, &config), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "FCCL_PATH=hier, but the hierarchical path needs");
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "on one host");
  EXPECT(comm == NULL);
  return testSummary("hierrefused");
}

/* The fccl path without an NCCL communicator: the NCCL-only calls say why; the collectives work. */
static int rankP2pMissing(int rank, int nranks, struct testArgs* args) {
  unsetenv("FCCL_NCCL_COMM"); /* the default: off */
  fcclParamResetForTest();
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct rankState state, *s = &state;
  if (stateInit(s, comm, rank, nranks, args->seed) == 0 && expectPath(s, fcclPathFccl, NULL) == 0) {
    EXPECT_EQ_INT(fcclSend(s->send, 16, fcclFloat32, (rank + 1) % nranks, comm, s->stream), fcclInvalidUsage);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "set FCCL_NCCL_COMM=init");
    EXPECT_EQ_INT(fcclAllToAll(s->send, s->recv, 16, fcclFloat32, comm, s->stream), fcclInvalidUsage);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "no NCCL communicator");
    runAllReduce(s, fcclFloat32, fcclSum, 1000, 0);
  }
  stateFini(s);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  return testSummary("p2pmissing");
}

/* A GPU shared through CUDA MPS, faked (fcclCudaFakeMpsForTest; no MPS server is started): rank 1's answer takes
 * the communicator to NCCL, whose calls work; FCCL_PATH=fccl is refused on every rank, naming rank 1 and MPS. */
static int rankMps(int rank, int nranks, struct testArgs* args) {
  setIdentity(rank, FCCL_HOST_ONE, NULL);
  if (rank == 1) fcclCudaFakeMpsForTest(1);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct rankState state, *s = &state;
  if (stateInit(s, comm, rank, nranks, args->seed) == 0 &&
      expectPath(s, fcclPathNccl, "rank 1's GPU shares its contexts through CUDA MPS") == 0)
    runAllReduce(s, fcclFloat32, fcclSum, 4099, 0);
  stateFini(s);
  EXPECT_EQ_INT(fcclCommDestroy(comm), fcclSuccess);
  setenv("FCCL_PATH", "fccl", 1);
  fcclParamResetForTest();
  fcclUniqueId id;
  if (!collShareId(args->shared, rank, 1, &id)) return 1;
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = nranks > args->gpus;
  config.timeoutMs = 60000;
  comm = NULL;
  EXPECT_EQ_INT(fcclCommInitRankConfig(&comm, nranks, id, rank, &config), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 1's GPU shares its contexts through CUDA MPS");
  EXPECT(comm == NULL);
  return testSummary("mps");
}

static int rankMain(int rank, int nranks, void* arg) {
  struct testArgs* args = arg;
  for (size_t i = 0; i < sizeof(kEverything) / sizeof(kEverything[0]); i++)
    if (strcmp(args->mode, kEverything[i].name) == 0) return rankEverything(rank, nranks, &kEverything[i], args);
  if (strcmp(args->mode, "p2pmissing") == 0) return rankP2pMissing(rank, nranks, args);
  if (strcmp(args->mode, "hierrefused") == 0) return rankHierRefused(rank, nranks, args);
  if (strcmp(args->mode, "abort") == 0) return rankAbort(rank, nranks, args, 0);
  if (strcmp(args->mode, "hierabort") == 0) return rankAbort(rank, nranks, args, 1);
  if (strcmp(args->mode, "dead") == 0) return rankDead(rank, nranks, args, FCCL_HOST_ONE, "nccl", "dead");
  if (strcmp(args->mode, "deadhosts") == 0)
    return rankDead(rank, nranks, args, FCCL_HOST_PER_RANK, "nccl", "deadhosts");
  if (strcmp(args->mode, "hierdead") == 0) return rankDead(rank, nranks, args, FCCL_HOST_PER_PAIR, NULL, "hierdead");
  if (strcmp(args->mode, "vanishedhosts") == 0) return rankVanished(rank, nranks, args);
  if (strcmp(args->mode, "ncclinitfail") == 0) return rankNcclInitFails(rank, nranks, args);
  if (strcmp(args->mode, "mps") == 0) return rankMps(rank, nranks, args);
  return 2;
}

int main(int argc, char** argv) {
  struct testArgs args = {argc > 1 ? argv[1] : "nccl", NULL, 0, 0, NULL};
  int nranks = argc > 2 ? atoi(argv[2]) : 2;
  /* The hierarchical modes: 2 simulated hosts x 2 ranks. */
  if (strncmp(args.mode, "hier", 4) == 0) nranks = 4;
  if (strcmp(args.mode, "many") == 0 && argc <= 2) nranks = 9;
  int known = strcmp(args.mode, "p2pmissing") == 0 || strcmp(args.mode, "abort") == 0 ||
              strcmp(args.mode, "dead") == 0 || strcmp(args.mode, "deadhosts") == 0 ||
              strcmp(args.mode, "hierrefused") == 0 || strcmp(args.mode, "hierabort") == 0 ||
              strcmp(args.mode, "hierdead") == 0 || strcmp(args.mode, "vanishedhosts") == 0 ||
              strcmp(args.mode, "ncclinitfail") == 0 || strcmp(args.mode, "mps") == 0;
  for (size_t i = 0; i < sizeof(kEverything) / sizeof(kEverything[0]); i++)
    known |= strcmp(args.mode, kEverything[i].name) == 0;
  if (!known || nranks < 2 || nranks > REF_MAX_RANKS) {
    fprintf(stderr,
            "usage: %s nccl|hosts|many|hier|hierinterleaved|hierforced|hierrefused|p2pdisable|fcclp2p|p2pmissing|"
            "abort|hierabort|dead|deadhosts|hierdead|vanishedhosts|ncclinitfail|mps [nranks 2..%d]\n",
            argv[0], REF_MAX_RANKS);
    return 2;
  }
  args.gpus = testGpuCount();
  if (args.gpus < 1) {
    printf("SKIP: no GPU\n");
    return TEST_SKIP;
  }
  struct testWire wire;
  if (strcmp(args.mode, "vanishedhosts") == 0) {
    if (nranks != 2) {
      fprintf(stderr, "%s: vanishedhosts takes 2 ranks, not %d\n", argv[0], nranks);
      return 2;
    }
    const char* why = testWireLay(&wire);
    if (why) {
      printf("SKIP: %s\n", why);
      return TEST_SKIP;
    }
    args.wire = &wire;
  }
  args.seed = testSeed();
  args.shared = collSharedNew(nranks);
  printf("nccl_path %s: %d ranks on %d GPU(s)\n", args.mode, nranks, args.gpus);
  int codes[REF_MAX_RANKS];
  const int failed = testShmForkRanks(args.shared->shm, rankMain, &args, 540, codes);
  for (int r = 0; r < nranks; r++)
    if (codes[r] != 0) testFail(__FILE__, __LINE__, "rank %d exited with %d", r, codes[r]);
  EXPECT_EQ_INT(failed, 0);
  collSharedFree(args.shared);
  if (args.wire) testWireFree(args.wire);
  return testSummary("nccl_path");
}
