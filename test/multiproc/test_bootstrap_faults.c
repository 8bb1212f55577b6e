/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bootstrap failing well: a wrong secret, another protocol version and garbage bytes are refused without
 * disturbing the real ranks; a duplicate rank and an nranks mismatch fail every rank with a message naming the
 * rank; a rank that never arrives, a rank killed mid-init, a rank killed before an all-gather, a dead root and a
 * rank that stops calling give fcclTimeout/fcclRemoteError naming the missing rank, well within the timeout;
 * fcclCommAbort's flag ends blocked waits promptly; ranks calling different operations are told so; a root out of
 * file descriptors backs off instead of spinning, and recovers.
 * Time bounds here are generous (CI machines are slow and the ASan build slower): they catch hangs, not speed.
 */
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "param.h"
#include "socket.h"
#include "test.h"
#include "test_bootstrap_util.h"
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#define LONG_TIMEOUT_MS 8000 /* waits that must end early, for another reason than their timeout */

static uint64_t seed;

/* Init, then one all-gather checked byte by byte. */
static int legitRank(const fcclUniqueId* id, int rank, int nranks) {
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(id, rank, nranks, LONG_TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init failed: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  uint8_t data[8 * 100];
  for (size_t i = 0; i < 100; i++) data[(size_t)rank * 100 + i] = bootByte(seed, 0, rank, i);
  EXPECT_EQ_INT(fcclBootstrapAllGather(b, data, 100), fcclSuccess);
  long wrong = 0;
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < 100; i++) wrong += data[(size_t)r * 100 + i] != bootByte(seed, 0, r, i);
  EXPECT_EQ_INT(wrong, 0);
  fcclBootstrapDestroy(b);
  if (rank == 0) EXPECT_EQ_INT(fcclBootstrapRootsWait(0), 0); /* the root served the real ranks; rank 0 joined it */
  return testFailed != 0;
}

/* Runs one bootstrap init expected to fail with result, a message containing each of the texts, within maxMs. */
static void expectInitFails(const fcclUniqueId* id, int rank, int nranks, int timeoutMs, fcclResult_t result,
                            const char* text1, const char* text2, int64_t maxMs) {
  struct fcclBootstrap* b = NULL;
  int64_t start = bootNowMs();
  fcclResult_t res = fcclBootstrapTcpInit(id, rank, nranks, timeoutMs, NULL, &b);
  int64_t elapsed = bootNowMs() - start;
  EXPECT_MSG(res == result, "rank %d: init returned %s (%d), expected %s: %s", rank, fcclGetErrorString(res), res,
             fcclGetErrorString(result), fcclGetLastError(NULL));
  if (text1) EXPECT_STR_CONTAINS(fcclGetLastError(NULL), text1);
  if (text2) EXPECT_STR_CONTAINS(fcclGetLastError(NULL), text2);
  EXPECT_MSG(elapsed <= maxMs, "rank %d: failing took %lld ms (bound %lld)", rank, (long long)elapsed,
             (long long)maxMs);
  if (res == fcclSuccess) fcclBootstrapDestroy(b);
}

static int connectRoot(const fcclUniqueId* id) {
  struct fcclWireId wid;
  char why[128];
  if (fcclWireParseId((const uint8_t*)id->internal, FCCL_UNIQUE_ID_BYTES, &wid, why, sizeof(why)) != FCCL_WIRE_OK)
    return -1;
  int fd = -1;
  if (fcclSocketConnect(&wid.rootAddr, bootNowMs() + 2000, NULL, 1, "the root", &fd) != fcclSuccess) return -1;
  return fd;
}

struct faultArgs {
  fcclUniqueId id;
  struct bootShared* shared;
};

/*
 * The id is made by rank 0's process (which then runs the root), never by this parent: forking while the parent
 * has a root thread starting (inside malloc, say) is how a child inherits a held lock.
 */
static struct faultArgs* newArgs(int nprocs) {
  struct faultArgs* args = calloc(1, sizeof(*args));
  args->shared = bootSharedNew(nprocs);
  return args;
}

/* In a forked rank: rank 0 makes the id and publishes it, the others wait for it; args->id holds it after. */
static int rankId(struct faultArgs* args, int rank) {
  if (rank == 0) {
    if (fcclBootstrapGetUniqueId(&args->id, LONG_TIMEOUT_MS) != fcclSuccess) return 0;
    bootPublishId(args->shared, &args->id);
    return 1;
  }
  return bootWaitId(args->shared, &args->id);
}

static void freeArgs(struct faultArgs* args) {
  bootSharedFree(args->shared);
  free(args);
}

/* Marks this rank done; rank 0, whose process runs the root, stays until every rank is (late ones need the root). */
static void rankDone(struct faultArgs* args, int rank, int nranks) {
  testShmPost(&args->shared->flags[32 + rank], 1);
  if (rank != 0) return;
  for (int r = 0; r < nranks; r++) {
    char what[32];
    snprintf(what, sizeof(what), "rank %d's end", r);
    /* Not a check: each rank checks its own init; rank 0 only keeps the root up for the late ones. */
    (void)testShmWait(args->shared->shm, &args->shared->flags[32 + r], 1, 10000, what);
  }
}

/* The real ranks start once the intruder (rank 2) has done its harm, so that the root meets it first; they wait at
 * most 2 s, since a late intruder makes the test weaker, not wrong. */
static void waitIntruder(struct faultArgs* args) {
  (void)testShmWait(args->shared->shm, &args->shared->flags[2], 1, 2000, "the intruder");
}

/* ---- intruders: the real ranks must not notice ---- */

static int wrongSecretRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  if (!rankId(args, rank)) return 1;
  (void)nranks;
  if (rank == 2) {
    fcclUniqueId forged = args->id;
    forged.internal[8] ^= 0x5a; /* the secret */
    expectInitFails(&forged, 1, 2, LONG_TIMEOUT_MS, fcclRemoteError, "cannot prove that it knows this communicator's",
                    NULL, 2000);
    testShmPost(&args->shared->flags[2], 1);
    return testFailed != 0;
  }
  waitIntruder(args);
  return legitRank(&args->id, rank, 2);
}

static int wrongVersionRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  if (!rankId(args, rank)) return 1;
  (void)nranks;
  if (rank == 2) {
    int fd = connectRoot(&args->id);
    EXPECT(fd >= 0);
    struct fcclWireHello hello;
    memset(&hello, 0, sizeof(hello));
    hello.rank = 0;
    hello.nranks = 2;
    hello.timeoutMs = 1000;
    hello.pid = getpid();
    fcclSocketLoopback(&hello.listenAddr, 1);
    uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES];
    size_t size = fcclWireEncodeHello(frame, &hello);
    frame[4] = 99; /* a future protocol version */
    EXPECT_EQ_INT(fcclSocketSendAll(fd, frame, size, bootNowMs() + 2000, NULL, "the root"), fcclSuccess);
    uint8_t reply[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX];
    struct fcclWireHeader header;
    char why[256];
    EXPECT_EQ_INT(fcclSocketRecvAll(fd, reply, FCCL_WIRE_HEADER_BYTES, bootNowMs() + 2000, NULL, "the root"),
                  fcclSuccess);
    EXPECT_EQ_INT(fcclWireParseHeader(reply, FCCL_WIRE_HEADER_BYTES, &header, why, sizeof(why)), FCCL_WIRE_OK);
    EXPECT_EQ_INT(header.type, FCCL_WIRE_ERROR);
    if (header.type == FCCL_WIRE_ERROR && header.length <= FCCL_WIRE_SMALL_MAX) {
      EXPECT_EQ_INT(fcclSocketRecvAll(fd, reply + FCCL_WIRE_HEADER_BYTES, header.length, bootNowMs() + 2000, NULL,
                                      "the root"),
                    fcclSuccess);
      struct fcclWireError error;
      EXPECT_EQ_INT(fcclWireParseError(reply + FCCL_WIRE_HEADER_BYTES, header.length, &error, why, sizeof(why)),
                    FCCL_WIRE_OK);
      EXPECT_EQ_INT(error.result, fcclRemoteError);
      EXPECT_STR_CONTAINS(error.text, "protocol version 99");
    }
    fcclSocketClose(&fd);
    testShmPost(&args->shared->flags[2], 1);
    return testFailed != 0;
  }
  waitIntruder(args);
  return legitRank(&args->id, rank, 2);
}

static int garbageRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  if (!rankId(args, rank)) return 1;
  (void)nranks;
  if (rank == 2) {
    uint64_t state = seed;
    uint8_t junk[4096];
    for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (uint8_t)testRandom(&state);
    int noisy = connectRoot(&args->id);
    int silent = connectRoot(&args->id); /* connects and never says a word */
    int huge = connectRoot(&args->id);
    EXPECT(noisy >= 0 && silent >= 0 && huge >= 0);
    EXPECT_EQ_INT(fcclSocketSendAll(noisy, junk, sizeof(junk), bootNowMs() + 2000, NULL, "the root"), fcclSuccess);
    uint8_t header[FCCL_WIRE_HEADER_BYTES];
    fcclWireEncodeHeader(header, FCCL_WIRE_HELLO, 0xffffffffu, 0); /* a length no limit allows */
    EXPECT_EQ_INT(fcclSocketSendAll(huge, header, sizeof(header), bootNowMs() + 2000, NULL, "the root"), fcclSuccess);
    testShmPost(&args->shared->flags[2], 1);
    /* The root hangs up on the noisy ones; the silent one stays until the real ranks are done. */
    uint8_t byte;
    struct pollfd p = {.fd = noisy, .events = POLLIN};
    EXPECT(poll(&p, 1, 2000) == 1);
    long rc = fcclSocketTryRecv(noisy, &byte, 1);
    EXPECT_MSG(rc <= 0, "the root answered garbage with %ld bytes", rc);
    for (int r = 0; r < 2; r++) (void)testShmWait(args->shared->shm, &args->shared->flags[r], 1, 4000, "a real rank");
    fcclSocketClose(&noisy);
    fcclSocketClose(&silent);
    fcclSocketClose(&huge);
    return testFailed != 0;
  }
  waitIntruder(args);
  int status = legitRank(&args->id, rank, 2);
  testShmPost(&args->shared->flags[rank], 1);
  return status;
}

static void testIntruder(int (*fn)(int, int, void*), const char* name) {
  struct faultArgs* args = newArgs(3);
  int codes[3];
  int failed = testForkRanks(3, fn, args, 30, codes);
  EXPECT_MSG(failed == 0, "%s: %d processes failed (exit codes %d %d %d)", name, failed, codes[0], codes[1], codes[2]);
  freeArgs(args);
  printf("%s: %s\n", name, failed ? "FAILED" : "ok");
}

/* ---- inconsistent ranks: every rank fails, told which rank is wrong ---- */

static int duplicateRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  if (!rankId(args, rank)) return 1;
  int claimed = rank == 2 ? 1 : rank; /* two processes say they are rank 1 */
  expectInitFails(&args->id, claimed, nranks, LONG_TIMEOUT_MS, fcclRemoteError, "rank 1 was claimed twice", NULL,
                  3000);
  rankDone(args, rank, nranks);
  return testFailed != 0;
}

static int mismatchRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  if (!rankId(args, rank)) return 1;
  if (rank == 1) bootSleepMs(100); /* rank 0 defines nranks; rank 1 contradicts it */
  expectInitFails(&args->id, rank, rank == 1 ? nranks + 1 : nranks, LONG_TIMEOUT_MS, fcclRemoteError,
                  "nranks mismatch", "rank 1", 3000);
  rankDone(args, rank, nranks);
  return testFailed != 0;
}

static void testAllFail(int (*fn)(int, int, void*), int nranks, const char* name) {
  struct faultArgs* args = newArgs(nranks);
  int failed = testForkRanks(nranks, fn, args, 30, NULL);
  EXPECT_MSG(failed == 0, "%s: %d ranks did not fail as expected", name, failed);
  freeArgs(args);
  printf("%s: %s\n", name, failed ? "FAILED" : "ok");
}

/* ---- missing and dying ranks ---- */

static int neverArrivesRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  if (!rankId(args, rank)) return 1;
  if (rank == 2) { /* never calls init */
    rankDone(args, rank, nranks);
    return 0;
  }
  expectInitFails(&args->id, rank, nranks, 500, fcclTimeout, "rank 2 did not arrive", NULL, 3000);
  rankDone(args, rank, nranks);
  return testFailed != 0;
}

static void* killSelfSoon(void* arg) {
  bootSleepMs((int)(intptr_t)arg);
  raise(SIGKILL);
  return NULL;
}

static int killedInRendezvousRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  if (!rankId(args, rank)) return 1;
  if (rank == 2) {
    rankDone(args, rank, nranks); /* rank 0 need not wait for it */
    pthread_t killer;
    pthread_create(&killer, NULL, killSelfSoon, (void*)(intptr_t)100);
    struct fcclBootstrap* b = NULL;
    fcclBootstrapTcpInit(&args->id, rank, nranks, LONG_TIMEOUT_MS, NULL, &b); /* blocks: the others come later */
    return 3;                                                                /* not reached */
  }
  bootSleepMs(400);
  expectInitFails(&args->id, rank, nranks, LONG_TIMEOUT_MS, fcclRemoteError, "rank 2", "disconnected", 3000);
  /* Every live rank has its answer and the dead one needs none: the root ends now, not at its deadline, so that it
   * holds no thread or socket in a process that goes on. */
  if (rank == 0) EXPECT_EQ_INT(fcclBootstrapRootsWait(2000), 0);
  rankDone(args, rank, nranks);
  return testFailed != 0;
}

static int killedBeforeAllGatherRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  if (!rankId(args, rank)) return 1;
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&args->id, rank, nranks, LONG_TIMEOUT_MS, NULL, &b);
  EXPECT_EQ_INT(res, fcclSuccess);
  if (res != fcclSuccess) return 1;
  /* The victim dies once every rank is through init (dying earlier fails their init instead, as it should). */
  EXPECT_EQ_INT(testShmBarrier(args->shared->shm, rank), TEST_SHM_OK);
  if (rank == 1) raise(SIGKILL);
  uint8_t data[8 * 16] = {0};
  int64_t start = bootNowMs();
  res = fcclBootstrapAllGather(b, data, 16);
  int64_t elapsed = bootNowMs() - start;
  EXPECT_MSG(res == fcclRemoteError, "rank %d: all-gather returned %d: %s", rank, res, fcclGetLastError(NULL));
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 1");
  EXPECT_MSG(elapsed < 3000, "rank %d: took %lld ms to notice", rank, (long long)elapsed);
  /* The bootstrap is broken from now on, and says so at once. */
  EXPECT_EQ_INT(fcclBootstrapBarrier(b), fcclRemoteError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "earlier bootstrap failure");
  fcclBootstrapDestroy(b);
  return testFailed != 0;
}

static int rootDiesRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  if (rank == 0) { /* the root's process: publishes the id, never joins, dies */
    fcclUniqueId id;
    EXPECT_EQ_INT(fcclBootstrapGetUniqueId(&id, LONG_TIMEOUT_MS), fcclSuccess);
    bootPublishId(args->shared, &id);
    bootSleepMs(300);
    raise(SIGKILL);
  }
  fcclUniqueId id;
  if (!bootWaitId(args->shared, &id)) return 1;
  expectInitFails(&id, rank, nranks, LONG_TIMEOUT_MS, fcclRemoteError, "bootstrap root", "closed the connection",
                  3000);
  return testFailed != 0;
}

static int stalledRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  if (!rankId(args, rank)) return 1;
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&args->id, rank, nranks, 500, NULL, &b);
  EXPECT_EQ_INT(res, fcclSuccess);
  if (res != fcclSuccess) return 1;
  if (rank == 2) { /* alive, but never reaches the all-gather */
    bootSleepMs(1500);
    fcclBootstrapDestroy(b);
    return 0;
  }
  uint8_t data[3 * 8] = {0};
  int64_t start = bootNowMs();
  res = fcclBootstrapAllGather(b, data, 8);
  int64_t elapsed = bootNowMs() - start;
  EXPECT_MSG(res == fcclTimeout || res == fcclRemoteError, "rank %d: all-gather returned %d", rank, res);
  /* Rank 0 waits on rank 2 directly; rank 1 waits on rank 0, which is itself stuck behind rank 2. */
  if (rank == 0) EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 2");
  EXPECT_MSG(elapsed < 1400, "rank %d: took %lld ms with a 500 ms timeout", rank, (long long)elapsed);
  fcclBootstrapDestroy(b);
  return testFailed != 0;
}

static void testDeath(int (*fn)(int, int, void*), int nranks, int victim, const char* name) {
  struct faultArgs* args = newArgs(nranks);
  int codes[8];
  testForkRanks(nranks, fn, args, 30, codes);
  int bad = 0;
  for (int r = 0; r < nranks; r++) {
    int expected = r == victim ? -1 : 0; /* the victim was killed by a signal */
    EXPECT_MSG(codes[r] == expected, "%s: rank %d exited with %d, expected %d", name, r, codes[r], expected);
    bad += codes[r] != expected;
  }
  freeArgs(args);
  printf("%s: %s\n", name, bad ? "FAILED" : "ok");
}

/* Launcher-variable init failing on rank 0 frees its fixed port at once: a retry there succeeds. */
static int envRetryRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  char text[64];
  snprintf(text, sizeof(text), "%d", rank);
  setenv("OMPI_COMM_WORLD_RANK", text, 1);
  snprintf(text, sizeof(text), "%d", nranks);
  setenv("OMPI_COMM_WORLD_SIZE", text, 1);
  snprintf(text, sizeof(text), "127.0.0.1:%d", args->shared->port);
  setenv("FCCL_COMM_ID", text, 1);
  setenv("FCCL_COMM_SECRET", "retry-on-the-same-port-secret", 1);
  fcclParamResetForTest();
  struct fcclEnvLaunch launch;
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  struct fcclBootstrap* b = NULL;
  if (rank == 0) {
    EXPECT_EQ_INT(fcclBootstrapEnvInit(&launch, 300, NULL, &b), fcclTimeout);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 1 did not arrive");
    EXPECT_EQ_INT(fcclBootstrapRootsWait(0), 0); /* stopped and joined, port released */
    testShmPost(&args->shared->flags[0], 1);
  } else {
    /* Not a check: rank 0's retry (the one that matters) waits LONG_TIMEOUT_MS for this one. */
    (void)testShmWait(args->shared->shm, &args->shared->flags[0], 1, 5000, "rank 0's failed init");
  }
  fcclResult_t res = fcclBootstrapEnvInit(&launch, LONG_TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: retry: %s", rank, fcclGetLastError(NULL));
  if (res == fcclSuccess) {
    EXPECT_EQ_INT(fcclBootstrapBarrier(b), fcclSuccess);
    fcclBootstrapDestroy(b);
  }
  return testFailed != 0;
}

static void testEnvRetry(void) {
  struct faultArgs* args = newArgs(2);
  union fcclSocketAddress loopback, bound;
  fcclSocketLoopback(&loopback, 0);
  int fd = -1;
  EXPECT_EQ_INT(fcclSocketListen(&loopback, &fd, &bound), fcclSuccess);
  args->shared->port = ntohs(bound.sin.sin_port); /* a free port, for FCCL_COMM_ID */
  fcclSocketClose(&fd);
  int failed = testForkRanks(2, envRetryRank, args, 30, NULL);
  EXPECT_MSG(failed == 0, "launcher-variable retry: %d ranks failed", failed);
  freeArgs(args);
  printf("launcher-variable retry on the same port: %s\n", failed ? "FAILED" : "ok");
}

/* Sets the variables of an Open MPI launch of nranks at FCCL_COMM_ID=host:port, with the given FCCL_COMM_SECRET. */
static void setEnvLaunch(int rank, int nranks, const char* host, int port, const char* secret) {
  char text[96];
  snprintf(text, sizeof(text), "%d", rank);
  setenv("OMPI_COMM_WORLD_RANK", text, 1);
  snprintf(text, sizeof(text), "%d", nranks);
  setenv("OMPI_COMM_WORLD_SIZE", text, 1);
  snprintf(text, sizeof(text), "%s:%d", host, port);
  setenv("FCCL_COMM_ID", text, 1);
  setenv("FCCL_COMM_SECRET", secret, 1);
  fcclParamResetForTest();
}

static int freeLoopbackPort(void) {
  union fcclSocketAddress loopback, bound;
  fcclSocketLoopback(&loopback, 0);
  int fd = -1;
  if (fcclSocketListen(&loopback, &fd, &bound) != fcclSuccess) return -1;
  fcclSocketClose(&fd);
  return ntohs(bound.sin.sin_port);
}

/*
 * A process that knows what every local process can see of a launch (the address, the world size) but not its
 * FCCL_COMM_SECRET joins as the missing rank 1, before the real one: it is refused, and the real ranks meet.
 */
static int envStrangerRank(int rank, int nranks, void* arg) {
  testFailed = 0;
  struct faultArgs* args = arg;
  (void)nranks;
  const char* secret = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
  if (rank == 2) {
    (void)testShmWait(args->shared->shm, &args->shared->flags[0], 1, 5000, "rank 0's root");
    bootSleepMs(100); /* rank 0 posts just before its init starts the root; the stranger retries until it listens */
    setEnvLaunch(1, 2, "127.0.0.1", args->shared->port, "guessed-from-what-anyone-sees");
    struct fcclEnvLaunch launch;
    EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
    EXPECT_EQ_INT(fcclBootstrapEnvSecret("", launch.addr, launch.nranks, launch.secret), fcclSuccess);
    struct fcclBootstrap* b = NULL;
    EXPECT_EQ_INT(fcclBootstrapEnvInit(&launch, 3000, NULL, &b), fcclRemoteError);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "cannot prove that it knows this communicator's secret");
    testShmPost(&args->shared->flags[2], 1);
    return testFailed != 0;
  }
  setEnvLaunch(rank, 2, "127.0.0.1", args->shared->port, secret);
  struct fcclEnvLaunch launch;
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  if (rank == 0) testShmPost(&args->shared->flags[0], 1);
  if (rank == 1) waitIntruder(args);
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapEnvInit(&launch, LONG_TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: %s", rank, fcclGetLastError(NULL));
  if (res == fcclSuccess) {
    EXPECT_EQ_INT(fcclBootstrapBarrier(b), fcclSuccess);
    fcclBootstrapDestroy(b);
  }
  return testFailed != 0;
}

static void testEnvStranger(void) {
  struct faultArgs* args = newArgs(3);
  args->shared->port = freeLoopbackPort();
  int codes[3];
  int failed = testShmForkRanks(args->shared->shm, envStrangerRank, args, 30, codes);
  EXPECT_MSG(failed == 0, "launcher-variable stranger: %d processes failed (exit codes %d %d %d)", failed, codes[0],
             codes[1], codes[2]);
  freeArgs(args);
  printf("launcher-variable launch, a stranger without FCCL_COMM_SECRET: %s\n", failed ? "FAILED" : "ok");
}

/* The first IPv4 address of an interface that is up and not loopback, as text; 0 when there is none. */
static int outsideAddress(char* text, size_t size) {
  struct ifaddrs* list = NULL;
  if (getifaddrs(&list) != 0) return 0;
  int found = 0;
  for (const struct ifaddrs* ifa = list; ifa && !found; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET || !(ifa->ifa_flags & IFF_UP) ||
        (ifa->ifa_flags & IFF_LOOPBACK))
      continue;
    found = inet_ntop(AF_INET, &((const struct sockaddr_in*)ifa->ifa_addr)->sin_addr, text, (socklen_t)size) != NULL;
  }
  freeifaddrs(list);
  return found;
}

/*
 * Rank 0 listens at exactly the address asked for: with FCCL_COMM_ID on an outside interface, the same port on
 * 127.0.0.1 has no listener. And an address this host does not have is refused at once, saying so.
 */
static void testEnvListenAddress(void) {
  char outside[INET_ADDRSTRLEN];
  struct fcclEnvLaunch launch;
  struct fcclBootstrap* b = NULL;
  if (outsideAddress(outside, sizeof(outside))) {
    int port = freeLoopbackPort();
    setEnvLaunch(0, 1, outside, port, "");
    EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
    union fcclSocketAddress addr;
    EXPECT_EQ_INT(fcclSocketParseHostPort(launch.addr, &addr), fcclSuccess);
    fcclUniqueId id;
    EXPECT_EQ_INT(fcclBootstrapStartRoot(&addr, launch.secret, 2000, &id), fcclSuccess);
    union fcclSocketAddress loopback;
    fcclSocketLoopback(&loopback, (uint16_t)port);
    int fd = -1;
    EXPECT_EQ_INT(fcclSocketConnect(&loopback, bootNowMs() + 1000, NULL, 0, "127.0.0.1", &fd), fcclRemoteError);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "Connection refused");
    fcclSocketClose(&fd);
    EXPECT_EQ_INT(fcclSocketConnect(&addr, bootNowMs() + 1000, NULL, 0, "the root", &fd), fcclSuccess);
    fcclSocketClose(&fd);
    fcclBootstrapStopRoot(&id);
    printf("launcher-variable launch at %s:%d: not reachable on 127.0.0.1: ok\n", outside, port);
  } else {
    printf("launcher-variable launch on an outside address: not checked (no interface other than loopback)\n");
  }
  setEnvLaunch(0, 2, "203.0.113.7", 29500, "0123456789abcdef0123456789abcdef"); /* TEST-NET-3: nobody's */
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  int64_t start = bootNowMs();
  EXPECT_EQ_INT(fcclBootstrapEnvInit(&launch, LONG_TIMEOUT_MS, NULL, &b), fcclSystemError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not an address of this host");
  EXPECT(bootNowMs() - start < 1000);
  const char* names[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "FCCL_COMM_ID", "FCCL_COMM_SECRET"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) unsetenv(names[i]);
  fcclParamResetForTest();
}

/* ---- the root out of file descriptors ---- */

static int64_t cpuMs(void) {
  struct timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/*
 * A connection the root cannot accept (no descriptor left) stays queued and keeps the listener readable: the root
 * must back off rather than spin on it, and accept it once descriptors are free again. Runs in a process of its
 * own: it exhausts that process's descriptors.
 */
static int rootOutOfFdsRank(int rank, int nranks, void* arg) {
  (void)rank;
  (void)nranks;
  (void)arg;
  testFailed = 0;
  fcclUniqueId id;
  if (fcclBootstrapGetUniqueId(&id, LONG_TIMEOUT_MS) != fcclSuccess) return 1;
  struct rlimit saved;
  getrlimit(RLIMIT_NOFILE, &saved);
  struct rlimit low = saved;
  if (low.rlim_cur > 256) low.rlim_cur = 256; /* fewer descriptors to fill */
  setrlimit(RLIMIT_NOFILE, &low);
  int filler[256];
  int nfill = 0;
  while (nfill < 256 && (filler[nfill] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) nfill++;
  EXPECT_MSG(nfill > 0 && nfill < 256 && errno == EMFILE, "could not exhaust descriptors (%d opened)", nfill);
  close(filler[--nfill]); /* exactly one left: the client's socket takes it */
  int client = connectRoot(&id);
  EXPECT(client >= 0);
  int64_t cpuStart = cpuMs();
  bootSleepMs(500);
  int64_t cpuUsed = cpuMs() - cpuStart;
  EXPECT_MSG(cpuUsed < 200, "the root used %lld ms of CPU in 500 ms while it could not accept (it spins)",
             (long long)cpuUsed);
  printf("root out of descriptors: %lld ms of CPU in 500 ms\n", (long long)cpuUsed);
  while (nfill > 0) close(filler[--nfill]);
  setrlimit(RLIMIT_NOFILE, &saved);
  /* Descriptors are back: the root goes on, and a real rank (this one-rank communicator) gets its welcome. */
  struct fcclBootstrap* b = NULL;
  EXPECT_EQ_INT(fcclBootstrapTcpInit(&id, 0, 1, 5000, NULL, &b), fcclSuccess);
  fcclBootstrapDestroy(b);
  fcclSocketClose(&client);
  EXPECT_EQ_INT(fcclBootstrapRootsWait(2000), 0);
  return testFailed != 0;
}

static void testRootOutOfFds(void) {
  int codes[1];
  testForkRanks(1, rootOutOfFdsRank, NULL, 30, codes);
  EXPECT_MSG(codes[0] == 0, "root out of descriptors: the rank process exited with %d", codes[0]);
}

/* ---- abort and disagreement, with ranks as threads ---- */

struct threadRank {
  fcclUniqueId id;
  int rank, nranks, timeoutMs;
  volatile int* abortFlag;
  struct fcclBootstrap* b;
  fcclResult_t result;
  int64_t returnedAt;
  char error[FCCL_LAST_ERROR_MAX];
};

static void* threadInit(void* arg) {
  struct threadRank* t = arg;
  t->result = fcclBootstrapTcpInit(&t->id, t->rank, t->nranks, t->timeoutMs, t->abortFlag, &t->b);
  t->returnedAt = bootNowMs();
  snprintf(t->error, sizeof(t->error), "%s", fcclGetLastError(NULL));
  return NULL;
}

static void testAbortInit(void) {
  volatile int abortFlag = 0;
  struct threadRank t = {.rank = 0, .nranks = 2, .timeoutMs = 30000, .abortFlag = &abortFlag};
  EXPECT_EQ_INT(fcclBootstrapGetUniqueId(&t.id, 30000), fcclSuccess);
  pthread_t thread;
  pthread_create(&thread, NULL, threadInit, &t); /* rank 1 never comes */
  bootSleepMs(200);
  int64_t abortedAt = bootNowMs();
  __atomic_store_n(&abortFlag, 1, __ATOMIC_RELEASE);
  pthread_join(thread, NULL);
  EXPECT_EQ_INT(t.result, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(t.error, "aborted");
  EXPECT_MSG(t.returnedAt - abortedAt < 1000, "abort took %lld ms to end the init",
             (long long)(t.returnedAt - abortedAt));
  printf("abort during init: returned %lld ms after the flag\n", (long long)(t.returnedAt - abortedAt));
}

struct opThread {
  struct fcclBootstrap* b;
  int op; /* 0: all-gather of bytes, 1: barrier */
  size_t bytes;
  fcclResult_t result;
  int64_t returnedAt;
  char error[FCCL_LAST_ERROR_MAX];
};

static void* threadOp(void* arg) {
  struct opThread* t = arg;
  uint8_t data[2 * 64] = {0};
  t->result = t->op ? fcclBootstrapBarrier(t->b) : fcclBootstrapAllGather(t->b, data, t->bytes);
  t->returnedAt = bootNowMs();
  snprintf(t->error, sizeof(t->error), "%s", fcclGetLastError(NULL));
  return NULL;
}

/* Two ranks as threads of this process, connected; the abort flag belongs to rank 0. */
static int pairUp(struct threadRank ranks[2], volatile int* abortFlag) {
  fcclUniqueId id;
  if (fcclBootstrapGetUniqueId(&id, 5000) != fcclSuccess) return 0;
  pthread_t threads[2];
  for (int r = 0; r < 2; r++) {
    ranks[r] = (struct threadRank){.id = id, .rank = r, .nranks = 2, .timeoutMs = 5000,
                                   .abortFlag = r == 0 ? abortFlag : NULL};
    pthread_create(&threads[r], NULL, threadInit, &ranks[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(threads[r], NULL);
  return ranks[0].result == fcclSuccess && ranks[1].result == fcclSuccess;
}

static void testAbortAllGather(void) {
  volatile int abortFlag = 0;
  struct threadRank ranks[2];
  EXPECT(pairUp(ranks, &abortFlag));
  if (ranks[0].result != fcclSuccess || ranks[1].result != fcclSuccess) return;
  struct opThread op = {.b = ranks[0].b, .op = 0, .bytes = 64};
  pthread_t thread;
  pthread_create(&thread, NULL, threadOp, &op); /* rank 1 does not join this all-gather */
  bootSleepMs(200);
  int64_t abortedAt = bootNowMs();
  __atomic_store_n(&abortFlag, 1, __ATOMIC_RELEASE);
  pthread_join(thread, NULL);
  EXPECT_EQ_INT(op.result, fcclInvalidUsage);
  EXPECT_STR_CONTAINS(op.error, "aborted");
  EXPECT_MSG(op.returnedAt - abortedAt < 1000, "abort took %lld ms", (long long)(op.returnedAt - abortedAt));
  /* Rank 1 is told rather than left to time out. Rank 0 had sent its data before the abort, so rank 1's
   * all-gather may still complete (it has all it needs); the operation after it cannot. */
  uint8_t data[2 * 64] = {0};
  int64_t start = bootNowMs();
  fcclResult_t res = fcclBootstrapAllGather(ranks[1].b, data, 64);
  if (res == fcclSuccess) res = fcclBootstrapBarrier(ranks[1].b);
  EXPECT_EQ_INT(res, fcclRemoteError);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank 0 aborted");
  EXPECT(bootNowMs() - start < 1000);
  fcclBootstrapDestroy(ranks[0].b);
  fcclBootstrapDestroy(ranks[1].b);
}

static void testDifferentOperations(int op1, size_t bytes0, size_t bytes1, const char* name) {
  struct threadRank ranks[2];
  EXPECT(pairUp(ranks, NULL));
  if (ranks[0].result != fcclSuccess || ranks[1].result != fcclSuccess) return;
  struct opThread ops[2] = {{.b = ranks[0].b, .op = 0, .bytes = bytes0}, {.b = ranks[1].b, .op = op1, .bytes = bytes1}};
  pthread_t threads[2];
  for (int r = 0; r < 2; r++) pthread_create(&threads[r], NULL, threadOp, &ops[r]);
  for (int r = 0; r < 2; r++) pthread_join(threads[r], NULL);
  for (int r = 0; r < 2; r++) {
    EXPECT_MSG(ops[r].result == fcclInvalidUsage, "%s: rank %d returned %d: %s", name, r, ops[r].result, ops[r].error);
    EXPECT_STR_CONTAINS(ops[r].error, "different bootstrap operations");
  }
  fcclBootstrapDestroy(ranks[0].b);
  fcclBootstrapDestroy(ranks[1].b);
}

/* A rank that closes its connections (it destroyed its communicator) is alive: nobody may be told it died. */
static void testLiveRankCloses(void) {
  struct threadRank ranks[2];
  EXPECT(pairUp(ranks, NULL));
  if (ranks[0].result != fcclSuccess || ranks[1].result != fcclSuccess) return;
  fcclBootstrapDestroy(ranks[1].b); /* this process goes on: rank 1 is alive */
  uint8_t data[2 * 64] = {0};
  int64_t start = bootNowMs();
  EXPECT_EQ_INT(fcclBootstrapAllGather(ranks[0].b, data, 64), fcclRemoteError);
  const char* text = fcclGetLastError(NULL);
  EXPECT_STR_CONTAINS(text, "rank 1 closed its connection");
  EXPECT_MSG(strstr(text, "exited") == NULL && strstr(text, "died") == NULL && strstr(text, "or failed") == NULL,
             "a live rank that closed its connection is said to be gone: %s", text);
  EXPECT(bootNowMs() - start < 1000);
  fcclBootstrapDestroy(ranks[0].b);
  printf("a live rank closes its connections: \"%s\"\n", text);
}

int main(void) {
  seed = testSeed();
  testIntruder(wrongSecretRank, "wrong secret");
  testIntruder(wrongVersionRank, "wrong protocol version");
  testIntruder(garbageRank, "garbage bytes");
  testAllFail(duplicateRank, 3, "duplicate rank");
  testAllFail(mismatchRank, 3, "nranks mismatch");
  testAllFail(neverArrivesRank, 3, "rank never arrives");
  testDeath(killedInRendezvousRank, 3, 2, "rank killed during the rendezvous");
  testDeath(killedBeforeAllGatherRank, 4, 1, "rank killed before an all-gather");
  testDeath(rootDiesRank, 3, 0, "root killed");
  testDeath(stalledRank, 3, -1, "rank stops calling");
  testEnvRetry();
  testEnvStranger();
  testEnvListenAddress();
  testRootOutOfFds();
  testAbortInit();
  testAbortAllGather();
  testDifferentOperations(1, 64, 0, "all-gather against barrier");
  testDifferentOperations(0, 64, 32, "all-gathers of different sizes");
  testLiveRankCloses();
  return testSummary("bootstrap_faults");
}
