/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL path's test (test_nccl_path.c): failures. An all-reduce a peer never joins, stopped by fcclCommAbort; a
 * rank that exits; a host that stops answering (its network end taken down). Each survivor's error, bounded.
 */
#include "test_nccl_path.h"

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

/* fcclCommAbort stops an all-reduce that a peer never joins, and returns promptly. NCCL path: rank 0 calls, rank 1
 * never does. Hierarchical path (hier): the first host's ranks call, and their reduce-scatter inside the host
 * completes, but the second host's never do: the step across hosts waits. */
int rankAbort(int rank, int nranks, struct testArgs* args, int hier) {
  setIdentity(rank, hier ? FCCL_HOST_PER_PAIR : FCCL_HOST_ONE, hier ? NULL : "nccl");
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct rankState state, *s = &state;
  const int calls = hier ? rank < 2 : rank == 0;
  int ready = stateInit(s, comm, rank, nranks, args->seed) == 0;
  if (ready && hier) ready = expectPath(s, fcclPathHier, NULL) == 0;
  /* Together first: NCCL connects to its peers at a communicator's first call, which needs both. */
  if (ready && runAllReduce(s, fcclFloat32, fcclSum, 1 << 18, 0) == 0 && calls) {
    EXPECT_EQ_INT(fcclAllReduce(s->send, s->recv, 1 << 18, fcclFloat32, fcclSum, comm, s->stream), fcclSuccess);
    struct timespec pause = {.tv_sec = 1, .tv_nsec = 0};
    nanosleep(&pause, NULL);
    EXPECT_EQ_INT(cudaStreamQuery(s->stream), cudaErrorNotReady); /* waits for a peer that never comes */
    const int64_t start = collNowNs();
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    const double seconds = (double)(collNowNs() - start) / 1e9;
    EXPECT_MSG(seconds < 30.0, "fcclCommAbort took %.1f s", seconds);
    cudaError_t synced = cudaStreamSynchronize(s->stream); /* NCCL's abort ended the kernel */
    (void)synced;
    (void)cudaGetLastError();
    if (rank == 0) testShmPost(&args->shared->flags[1], 1);
  } else if (!calls) {
    EXPECT_EQ_INT(testShmWait(args->shared->shm, &args->shared->flags[1], 1, 120000, "rank 0's abort"), TEST_SHM_OK);
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
  }
  stateFini(s);
  return testSummary(hier ? "hierabort" : "abort");
}

/* A rank that dies: its peers' fcclCommGetAsyncError reports it (bounded), and fcclCommAbort returns. path NULL:
 * the path fccl chooses (the hierarchical one for FCCL_HOST_PER_PAIR). */
int rankDead(int rank, int nranks, struct testArgs* args, int fcclHosts, const char* path, const char* name) {
  setIdentity(rank, fcclHosts, path);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct rankState state, *s = &state;
  /* Together first (NCCL connects at the first call), every rank's result checked before anybody goes on; then
   * rank 1 dies without a word: no destroy, no abort. */
  int ready = stateInit(s, comm, rank, nranks, args->seed) == 0 && runAllReduce(s, fcclFloat32, fcclSum, 4096, 0) == 0;
  EXPECT_EQ_INT(testShmBarrier(args->shared->shm, rank), TEST_SHM_OK);
  if (rank == 1) _exit(ready ? 0 : 1);
  if (ready) {
    /* The death may be seen before this call (a peer link ends in milliseconds): then the call itself reports it. */
    const fcclResult_t issued = fcclAllReduce(s->send, s->recv, 1 << 16, fcclFloat32, fcclSum, comm, s->stream);
    EXPECT_MSG(issued == fcclSuccess || issued == fcclRemoteError, "rank %d: the all-reduce after the death: %s: %s",
               rank, fcclGetErrorString(issued), fcclGetLastError(comm));
    fcclResult_t async = fcclSuccess;
    const int64_t start = collNowNs();
    while (async == fcclSuccess && collNowNs() - start < (int64_t)120 * 1000000000) {
      EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
      struct timespec pause = {.tv_sec = 0, .tv_nsec = 10 * 1000000};
      nanosleep(&pause, NULL);
    }
    EXPECT_MSG(async != fcclSuccess, "rank %d: no error reported 120 s after rank 1 died", rank);
    printf("rank %d: after %.1f s: %s: %s\n", rank, (double)(collNowNs() - start) / 1e9, fcclGetErrorString(async),
           fcclGetLastError(comm));
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    (void)cudaStreamSynchronize(s->stream);
    (void)cudaGetLastError();
  }
  stateFini(s);
  return testSummary(name);
}

/*
 * One rank's ncclCommInitRankConfig fails at once: its NCCL_SOCKET_IFNAME names no interface, so NCCL's bootstrap
 * finds none ("Bootstrap : no socket interface found"). The other rank's NCCL init is then under way, waiting in
 * NCCL's rendezvous for a rank that will never come: it must not stay there. Every rank returns an error (rank 1
 * its own cause, rank 0 fcclRemoteError naming rank 1) and no communicator; rank 0's NCCL communicator is aborted.
 */
int rankNcclInitFails(int rank, int nranks, struct testArgs* args) {
  setIdentity(rank, FCCL_HOST_ONE, "nccl");
  if (rank == 1) setenv("NCCL_SOCKET_IFNAME", "=fccl-no-such-if", 1);
  fcclUniqueId id;
  if (!collShareId(args->shared, rank, 0, &id)) return 1;
  EXPECT_EQ_INT(cudaSetDevice(rank % args->gpus), cudaSuccess);
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = nranks > args->gpus;
  config.timeoutMs = 120000; /* the bound: the test's own is 540 s */
  fcclComm_t comm = NULL;
  const int64_t start = collNowNs();
  const fcclResult_t res = fcclCommInitRankConfig(&comm, nranks, id, rank, &config);
  printf("rank %d: init returned %s after %.0f ms: %s\n", rank, fcclGetErrorString(res),
         (double)(collNowNs() - start) / 1e6, fcclGetLastError(NULL));
  EXPECT(comm == NULL);
  if (rank == 1) {
    EXPECT_MSG(res != fcclSuccess && res != fcclRemoteError, "rank 1: %s: %s", fcclGetErrorString(res),
               fcclGetLastError(NULL));
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "ncclCommInitRankConfig failed");
  } else {
    EXPECT_EQ_INT(res, fcclRemoteError);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 1 could not create its NCCL communicator");
  }
  /* Rank 1 stays until rank 0's init has returned: its process's end, seen by rank 0's monitor, would otherwise race
   * the error rank 0 is to report with another (true, but not the one this test looks for). */
  EXPECT_EQ_INT(testShmBarrier(args->shared->shm, rank), TEST_SHM_OK);
  return testSummary("ncclinitfail");
}

/* How long a rank waits for its error after the cut: the keepalive, the monitor's poll and the kernel's probe timer,
 * with room for a loaded machine; the time taken is printed. */
#define VANISHED_SEEN_MS(keepaliveMs) ((keepaliveMs) + 3000)

int rankVanished(int rank, int nranks, struct testArgs* args) {
  enum { FLAG_CUT = 0, FLAG_DONE = 1 };
  if (testWireEnter(args->wire, rank) != 0) {
    testFail(__FILE__, __LINE__, "rank %d: could not enter its network namespace", rank);
    return 1;
  }
  /* NCCL takes only an interface the kernel reports running (up at both ends), which may come a moment after the
   * wire was laid: without it, NCCL's init finds no interface in the namespace. */
  char why[128];
  if (testWireWaitRunning(args->wire, rank, 10000, why, sizeof(why)) != 0) {
    testFail(__FILE__, __LINE__, "rank %d: its end of the wire is not running after 10 s: %s", rank, why);
    return 1;
  }
  setenv("FCCL_SOCKET_IFNAME", args->wire->end[rank], 1); /* fccl's bootstrap and peer links over the pair */
  char ncclIfname[24];
  snprintf(ncclIfname, sizeof(ncclIfname), "=%s", args->wire->end[rank]); /* '=': that name exactly */
  setenv("NCCL_SOCKET_IFNAME", ncclIfname, 1);                            /* and NCCL's */
  setIdentity(rank, FCCL_HOST_PER_RANK, "nccl");
  const int keepaliveMs = (int)fcclParamInt(FCCL_PARAM_PEER_KEEPALIVE_MS);
  fcclComm_t comm = collCommCreate(args->shared, rank, nranks, args->gpus, 0);
  if (!comm) return 1;
  struct rankState state, *s = &state;
  int ready = stateInit(s, comm, rank, nranks, args->seed) == 0 && runAllReduce(s, fcclFloat32, fcclSum, 4096, 0) == 0;
  EXPECT_EQ_INT(testShmBarrier(args->shared->shm, rank), TEST_SHM_OK);
  int* flags = args->shared->flags;
  if (rank == 1) {
    EXPECT_MSG(testWireCut(args->wire, rank) == 0, "rank 1: could not take %s down", args->wire->end[rank]);
    testShmPost(&flags[FLAG_CUT], 1);
  } else {
    EXPECT_EQ_INT(testShmWait(args->shared->shm, &flags[FLAG_CUT], 1, 30000, "the cut"), TEST_SHM_OK);
  }
  const int64_t cut = collNowNs();
  if (ready) {
    /* NCCL's kernel waits for data that will not come: only fccl's keepalive can tell the peer is gone. */
    const fcclResult_t issued = fcclAllReduce(s->send, s->recv, 1 << 16, fcclFloat32, fcclSum, comm, s->stream);
    EXPECT_MSG(issued == fcclSuccess || issued == fcclRemoteError, "rank %d: the all-reduce after the cut: %s: %s",
               rank, fcclGetErrorString(issued), fcclGetLastError(comm));
    fcclResult_t async = fcclSuccess;
    while (async == fcclSuccess && collNowNs() - cut < (int64_t)VANISHED_SEEN_MS(keepaliveMs) * 1000000) {
      EXPECT_EQ_INT(fcclCommGetAsyncError(comm, &async), fcclSuccess);
      struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
      nanosleep(&pause, NULL);
    }
    const double seenMs = (double)(collNowNs() - cut) / 1e6;
    char peer[32];
    snprintf(peer, sizeof(peer), "rank %d", 1 - rank);
    EXPECT_MSG(async == fcclRemoteError, "rank %d: %s %.0f ms after the cut (keepalive %d ms): %s", rank,
               fcclGetErrorString(async), seenMs, keepaliveMs, fcclGetLastError(comm));
    EXPECT_STR_CONTAINS(fcclGetLastError(comm), peer);
    EXPECT_STR_CONTAINS(fcclGetLastError(comm), "stopped answering");
    printf("rank %d: the cut seen in %.0f ms (keepalive %d ms): %s\n", rank, seenMs, keepaliveMs,
           fcclGetLastError(comm));
    const int64_t abortStart = collNowNs();
    EXPECT_EQ_INT(fcclCommAbort(comm), fcclSuccess);
    /* NCCL's kernel stopped: the stream drains without the peer (bounded, not a synchronize that could hang). */
    cudaError_t drained = cudaErrorNotReady;
    while (drained == cudaErrorNotReady && collNowNs() - abortStart < (int64_t)20 * 1000000000) {
      struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
      nanosleep(&pause, NULL);
      drained = cudaStreamQuery(s->stream);
    }
    EXPECT_MSG(drained != cudaErrorNotReady, "rank %d: the stream still runs 20 s after fcclCommAbort", rank);
    (void)cudaGetLastError();
    printf("rank %d: aborted, its stream drained, in %.0f ms\n", rank, (double)(collNowNs() - abortStart) / 1e6);
  }
  /* Neither rank leaves before both looked: a process's end closes nothing over a cut wire, but a GPU's context
   * released early would change what the other sees. */
  testShmPost(&flags[FLAG_DONE + rank], 1);
  EXPECT_EQ_INT(testShmWait(args->shared->shm, &flags[FLAG_DONE + 1 - rank], 1, 60000, "the peer's verdict"),
                TEST_SHM_OK);
  stateFini(s);
  return testSummary("vanishedhosts");
}
