/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bootstrap working: 2, 3, 4 and 8 forked ranks meet over loopback and all-gather random data of several
 * sizes (every byte checked) and barrier; two communicators side by side; ranks as threads of one process; the
 * a host's own rendezvous on loopback whatever FCCL_SOCKET_IFNAME and FCCL_COMM_ID say; the launcher-variable form
 * (torchrun and mpirun variables); the application-callback form over socketpairs.
 * No GPU needed.
 */
#include "bootstrap.h"
#include "check.h"
#include "param.h"
#include "test.h"
#include "test_bootstrap_util.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>

#define TIMEOUT_MS 10000

static const size_t sizes[] = {1, 13, 4096, 0, 300000, sizeof(struct fcclPeerInfo)};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/*
 * All-gathers of every size and barriers on b; returns the number of wrong bytes plus failed calls, each described
 * on stderr (no EXPECT here: ranks may be threads, and the test counters are not thread-safe).
 */
static long exercise(struct fcclBootstrap* b, uint64_t seed, int opBase) {
  long wrong = 0;
  for (size_t s = 0; s < NSIZES; s++) {
    size_t bytes = sizes[s];
    uint8_t* buf = malloc(bytes * (size_t)b->nranks + 1);
    for (int r = 0; r < b->nranks; r++)
      for (size_t i = 0; i < bytes; i++)
        buf[(size_t)r * bytes + i] = r == b->rank ? bootByte(seed, opBase + (int)s, r, i)
                                                  : (uint8_t)~bootByte(seed, opBase + (int)s, r, i);
    fcclResult_t res = fcclBootstrapAllGather(b, buf, bytes);
    if (res != fcclSuccess) {
      fprintf(stderr, "rank %d: all-gather of %zu bytes: %s\n", b->rank, bytes, fcclGetLastError(NULL));
      wrong++;
    }
    for (int r = 0; r < b->nranks && res == fcclSuccess; r++)
      for (size_t i = 0; i < bytes; i++) wrong += buf[(size_t)r * bytes + i] != bootByte(seed, opBase + (int)s, r, i);
    free(buf);
    for (int i = 0; i < (s % 2 == 0 ? 1 : 0) + (s + 1 == NSIZES ? 3 : 0); i++) {
      if (fcclBootstrapBarrier(b) != fcclSuccess) {
        fprintf(stderr, "rank %d: barrier: %s\n", b->rank, fcclGetLastError(NULL));
        wrong++;
      }
    }
  }
  return wrong;
}

/*
 * Ids are always made in a forked process, never in this parent: forking while the parent has a root thread
 * starting (inside malloc, say) is how a child inherits a held lock.
 */
struct meetArgs {
  struct bootShared* shared;
  int nranks;
  int rootInRank0; /* else an extra process, not a rank, makes the id and runs the root */
};

static int meetRank(int rank, int total, void* arg) {
  testFailed = 0; /* this process's own count: the parent's earlier failures are not ours */
  struct meetArgs* args = arg;
  int nranks = args->nranks;
  (void)total;
  fcclUniqueId id;
  if (rank == nranks) { /* the root's process */
    EXPECT_EQ_INT(fcclBootstrapGetUniqueId(&id, TIMEOUT_MS), fcclSuccess);
    bootPublishId(args->shared, &id);
    EXPECT_EQ_INT(fcclBootstrapRootsWait(TIMEOUT_MS), 0); /* it finishes once every rank has its addresses */
    return testFailed != 0;
  }
  if (args->rootInRank0 && rank == 0) {
    EXPECT_EQ_INT(fcclBootstrapGetUniqueId(&id, TIMEOUT_MS), fcclSuccess);
    bootPublishId(args->shared, &id);
  } else if (!bootWaitId(args->shared, &id)) {
    fprintf(stderr, "rank %d: no unique id\n", rank);
    return 1;
  }
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapTcpInit(&id, rank, nranks, TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d of %d: init: %s", rank, nranks, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  EXPECT_EQ_INT(b->rank, rank);
  EXPECT_EQ_INT(b->nranks, nranks);
  long wrong = exercise(b, args->shared->seed, 0);
  EXPECT_MSG(wrong == 0, "rank %d of %d: %ld bytes wrong", rank, nranks, wrong);
  fcclBootstrapDestroy(b);
  /* The root thread of rank 0's process was joined by its rank: nothing of it is left. */
  if (args->rootInRank0 && rank == 0) EXPECT_EQ_INT(fcclBootstrapRootsWait(0), 0);
  return testFailed != 0;
}

static void testMeet(int nranks, int rootInRank0) {
  struct bootShared* shared = bootSharedNew(nranks + !rootInRank0);
  shared->seed = testSeed();
  struct meetArgs args = {shared, nranks, rootInRank0};
  int codes[64];
  int failed = testForkRanks(nranks + !rootInRank0, meetRank, &args, 60, codes);
  EXPECT_MSG(failed == 0, "%d of %d processes failed (root in %s)", failed, nranks + !rootInRank0,
             rootInRank0 ? "rank 0" : "another process");
  bootSharedFree(shared);
  printf("meet: %d ranks, root in %s: %s\n", nranks, rootInRank0 ? "rank 0" : "a process of its own",
         failed ? "FAILED" : "ok");
}

/* ---- two communicators over the same ranks, used alternately ---- */

struct twoArgs {
  struct bootShared* shared[2];
  uint64_t seed;
};

static int twoRank(int rank, int nranks, void* arg) {
  testFailed = 0; /* this process's own count: the parent's earlier failures are not ours */
  struct twoArgs* args = arg;
  struct fcclBootstrap* b[2] = {NULL, NULL};
  fcclUniqueId ids[2];
  for (int which = 0; which < 2; which++) {
    if (rank == 0) { /* two roots in rank 0's process */
      EXPECT_EQ_INT(fcclBootstrapGetUniqueId(&ids[which], TIMEOUT_MS), fcclSuccess);
      bootPublishId(args->shared[which], &ids[which]);
    } else if (!bootWaitId(args->shared[which], &ids[which])) {
      return 1;
    }
  }
  for (int which = 0; which < 2; which++) {
    fcclResult_t res = fcclBootstrapTcpInit(&ids[which], rank, nranks, TIMEOUT_MS, NULL, &b[which]);
    EXPECT_MSG(res == fcclSuccess, "rank %d: init of communicator %d: %s", rank, which, fcclGetLastError(NULL));
    if (res != fcclSuccess) return 1;
  }
  for (int round = 0; round < 3; round++) {
    long wrong = exercise(b[round % 2], args->seed, 100 * round) + exercise(b[1 - round % 2], args->seed, 1000 + round);
    EXPECT_MSG(wrong == 0, "rank %d: %ld bytes wrong in round %d", rank, wrong, round);
  }
  fcclBootstrapDestroy(b[0]);
  fcclBootstrapDestroy(b[1]);
  if (rank == 0) EXPECT_EQ_INT(fcclBootstrapRootsWait(0), 0); /* both roots joined by their rank */
  return testFailed != 0;
}

static void testTwoCommunicators(void) {
  struct twoArgs args;
  args.seed = testSeed();
  for (int k = 0; k < 2; k++) args.shared[k] = bootSharedNew(3);
  EXPECT_EQ_INT(testForkRanks(3, twoRank, &args, 60, NULL), 0);
  for (int k = 0; k < 2; k++) bootSharedFree(args.shared[k]);
}

/* ---- ranks as threads of one process (what fcclCommInitAll does) ---- */

struct threadRank {
  fcclUniqueId id;
  int rank, nranks;
  uint64_t seed;
  long wrong;
  fcclResult_t result;
};

static void* threadMain(void* arg) {
  struct threadRank* t = arg;
  struct fcclBootstrap* b = NULL;
  t->result = fcclBootstrapTcpInit(&t->id, t->rank, t->nranks, TIMEOUT_MS, NULL, &b);
  if (t->result != fcclSuccess) return NULL;
  t->wrong = exercise(b, t->seed, 7);
  fcclBootstrapDestroy(b);
  return NULL;
}

static void testThreads(void) {
  enum { N = 4 };
  struct threadRank ranks[N];
  pthread_t threads[N];
  fcclUniqueId id;
  int fdsBefore = bootCountFds();
  EXPECT_EQ_INT(fcclBootstrapGetUniqueId(&id, TIMEOUT_MS), fcclSuccess);
  uint64_t seed = testSeed();
  for (int r = 0; r < N; r++) {
    ranks[r] = (struct threadRank){.id = id, .rank = r, .nranks = N, .seed = seed};
    pthread_create(&threads[r], NULL, threadMain, &ranks[r]);
  }
  for (int r = 0; r < N; r++) {
    pthread_join(threads[r], NULL);
    EXPECT_EQ_INT(ranks[r].result, fcclSuccess);
    EXPECT_EQ_INT(ranks[r].wrong, 0);
  }
  EXPECT_EQ_INT(fcclBootstrapRootsWait(0), 0); /* one of the ranks joined this process's root */
  EXPECT_EQ_INT(bootCountFds(), fdsBefore);
}

/* ---- a rendezvous of one host's processes (the hierarchical path's host communicators) ---- */

/* Ranks meeting through the id, as threads of this process (one of them joins the id's root). */
static void meetThreads(const fcclUniqueId* id, int n) {
  struct threadRank ranks[8];
  pthread_t threads[8];
  uint64_t seed = testSeed();
  for (int r = 0; r < n; r++) {
    ranks[r] = (struct threadRank){.id = *id, .rank = r, .nranks = n, .seed = seed};
    pthread_create(&threads[r], NULL, threadMain, &ranks[r]);
  }
  for (int r = 0; r < n; r++) {
    pthread_join(threads[r], NULL);
    EXPECT_EQ_INT(ranks[r].result, fcclSuccess);
    EXPECT_EQ_INT(ranks[r].wrong, 0);
  }
}

static int freePort(void);

/* fcclBootstrapGetLocalUniqueId listens on loopback whatever FCCL_SOCKET_IFNAME and FCCL_COMM_ID say: with an
 * interface that does not exist, where fcclBootstrapGetUniqueId fails, its ranks meet; with FCCL_COMM_ID naming a
 * port, it leaves that port to the communicator FCCL_COMM_ID is for. */
static void testLocalId(void) {
  int fdsBefore = bootCountFds();
  fcclUniqueId id, world;
  setenv("FCCL_SOCKET_IFNAME", "fccl-no-such-if", 1);
  fcclParamResetForTest();
  EXPECT(fcclBootstrapGetUniqueId(&world, TIMEOUT_MS) != fcclSuccess);
  EXPECT_EQ_INT(fcclBootstrapGetLocalUniqueId(&id, TIMEOUT_MS), fcclSuccess);
  meetThreads(&id, 3);
  EXPECT_EQ_INT(fcclBootstrapRootsWait(0), 0);
  unsetenv("FCCL_SOCKET_IFNAME");

  char text[64];
  snprintf(text, sizeof(text), "127.0.0.1:%d", freePort());
  setenv("FCCL_COMM_ID", text, 1);
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclBootstrapGetLocalUniqueId(&id, TIMEOUT_MS), fcclSuccess);
  EXPECT_EQ_INT(fcclBootstrapGetUniqueId(&world, TIMEOUT_MS), fcclSuccess); /* the port is still free */
  meetThreads(&id, 2);
  meetThreads(&world, 2);
  EXPECT_EQ_INT(fcclBootstrapRootsWait(0), 0);
  unsetenv("FCCL_COMM_ID");
  fcclParamResetForTest();
  EXPECT_EQ_INT(bootCountFds(), fdsBefore);
}

/* ---- launcher variables ---- */

static int freePort(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t length = sizeof(addr);
  if (bind(fd, (struct sockaddr*)&addr, sizeof(addr)) != 0 || getsockname(fd, (struct sockaddr*)&addr, &length) != 0)
    return -1;
  close(fd);
  return ntohs(addr.sin_port);
}

struct envArgs {
  int port;
  int mpi; /* Open MPI variables and FCCL_COMM_ID, else torchrun's */
  uint64_t seed;
  char secret[40]; /* FCCL_COMM_SECRET */
};

static int envRank(int rank, int nranks, void* arg) {
  testFailed = 0; /* this process's own count: the parent's earlier failures are not ours */
  struct envArgs* args = arg;
  char text[64];
  if (args->mpi) {
    snprintf(text, sizeof(text), "%d", rank);
    setenv("OMPI_COMM_WORLD_RANK", text, 1);
    snprintf(text, sizeof(text), "%d", nranks);
    setenv("OMPI_COMM_WORLD_SIZE", text, 1);
    snprintf(text, sizeof(text), "127.0.0.1:%d", args->port);
    setenv("FCCL_COMM_ID", text, 1);
    /* Rank 0 comes last: the others must keep retrying until its root listens. */
    if (rank == 0) bootSleepMs(300);
  } else {
    snprintf(text, sizeof(text), "%d", rank);
    setenv("RANK", text, 1);
    setenv("LOCAL_RANK", text, 1);
    snprintf(text, sizeof(text), "%d", nranks);
    setenv("WORLD_SIZE", text, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(text, sizeof(text), "%d", args->port - 1); /* fccl listens at MASTER_PORT + 1 */
    setenv("MASTER_PORT", text, 1);
  }
  setenv("FCCL_COMM_SECRET", args->secret, 1); /* what the launcher exports to every rank */
  fcclParamResetForTest();
  struct fcclEnvLaunch launch;
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  EXPECT_EQ_INT(launch.rank, rank);
  EXPECT_EQ_INT(launch.nranks, nranks);
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapEnvInit(&launch, TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: env init: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  EXPECT_EQ_INT(exercise(b, args->seed, 3), 0);
  fcclBootstrapDestroy(b);
  return testFailed != 0;
}

static void testEnv(int mpi) {
  struct envArgs args = {.port = freePort(), .mpi = mpi, .seed = testSeed()};
  snprintf(args.secret, sizeof(args.secret), "%016llx%016llx", (unsigned long long)testRandom(&args.seed),
           (unsigned long long)testRandom(&args.seed));
  EXPECT(args.port > 1);
  EXPECT_MSG(testForkRanks(3, envRank, &args, 60, NULL) == 0, "launcher variables (%s) failed",
             mpi ? "Open MPI" : "torchrun");
}

/* ---- application callbacks over a full mesh of socketpairs ---- */

struct externalArgs {
  int fds[8][8]; /* fds[i][j]: rank i's end of the pair shared with rank j */
  int nranks;
  int rank;
  int shuffle; /* a broken callback that gathers out of rank order */
  int calls;
};

static int writeAll(int fd, const void* buf, size_t size) {
  const char* p = buf;
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n <= 0) return 0;
    p += n;
    size -= (size_t)n;
  }
  return 1;
}

static int readAll(int fd, void* buf, size_t size) {
  char* p = buf;
  while (size > 0) {
    ssize_t n = read(fd, p, size);
    if (n <= 0) return 0;
    p += n;
    size -= (size_t)n;
  }
  return 1;
}

static fcclResult_t meshAllgather(void* ctx, const void* send, void* recv, size_t bytes) {
  struct externalArgs* mesh = ctx;
  mesh->calls++;
  for (int peer = 0; peer < mesh->nranks; peer++)
    if (peer != mesh->rank && !writeAll(mesh->fds[mesh->rank][peer], send, bytes)) return fcclRemoteError;
  for (int peer = 0; peer < mesh->nranks; peer++) {
    int slot = mesh->shuffle ? (peer + 1) % mesh->nranks : peer;
    char* dst = (char*)recv + (size_t)slot * bytes;
    if (peer == mesh->rank)
      memcpy(dst, send, bytes);
    else if (!readAll(mesh->fds[mesh->rank][peer], dst, bytes))
      return fcclRemoteError;
  }
  return fcclSuccess;
}

static fcclResult_t meshBarrier(void* ctx) {
  char token = 1;
  char all[8];
  return meshAllgather(ctx, &token, all, 1);
}

static int externalRank(int rank, int nranks, void* arg) {
  testFailed = 0; /* this process's own count: the parent's earlier failures are not ours */
  struct externalArgs* mesh = arg;
  mesh->rank = rank;
  for (int i = 0; i < nranks; i++)
    for (int j = 0; j < nranks; j++)
      if (i != rank && i != j) close(mesh->fds[i][j]);
  fcclBootstrapCallbacks_t callbacks = {mesh, meshAllgather, rank % 2 ? meshBarrier : NULL};
  struct fcclBootstrap* b = NULL;
  EXPECT_EQ_INT(fcclBootstrapExternalInit(&callbacks, rank, nranks, NULL, &b), fcclSuccess);
  if (!b) return 1;
  /* What init does with it: everyone's peer info, checked. */
  struct fcclPeerInfo infos[8];
  EXPECT_EQ_INT(fcclPeerInfoFillHost(&infos[rank], rank, nranks), fcclSuccess);
  EXPECT_EQ_INT(fcclBootstrapAllGather(b, infos, sizeof(infos[0])), fcclSuccess);
  EXPECT_EQ_INT(fcclPeerInfoValidate(infos, nranks, 0), fcclSuccess);
  for (int r = 0; r < nranks; r++) EXPECT_EQ_INT(infos[r].rank, r);
  EXPECT_EQ_INT(fcclBootstrapBarrier(b), fcclSuccess);
  EXPECT(mesh->calls >= 2);
  uint64_t seed = 0x5eed;
  uint8_t data[8 * 64];
  for (size_t i = 0; i < 64; i++) data[(size_t)rank * 64 + i] = bootByte(seed, 1, rank, i);
  EXPECT_EQ_INT(fcclBootstrapAllGather(b, data, 64), fcclSuccess);
  long wrong = 0;
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < 64; i++) wrong += data[(size_t)r * 64 + i] != bootByte(seed, 1, r, i);
  EXPECT_EQ_INT(wrong, 0);
  /* A callback that does not gather in rank order is caught. */
  mesh->shuffle = 1;
  EXPECT_EQ_INT(fcclBootstrapAllGather(b, data, 64), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "rank order");
  fcclBootstrapDestroy(b);
  return testFailed != 0;
}

static void testExternal(void) {
  struct externalArgs mesh;
  memset(&mesh, 0, sizeof(mesh));
  mesh.nranks = 4;
  for (int i = 0; i < mesh.nranks; i++)
    for (int j = i + 1; j < mesh.nranks; j++) {
      int sv[2];
      EXPECT_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
      mesh.fds[i][j] = sv[0];
      mesh.fds[j][i] = sv[1];
    }
  EXPECT_EQ_INT(testForkRanks(mesh.nranks, externalRank, &mesh, 60, NULL), 0);
  for (int i = 0; i < mesh.nranks; i++)
    for (int j = 0; j < mesh.nranks; j++)
      if (i != j) close(mesh.fds[i][j]);
}

/* ---- a callback that blocks: fcclCommAbort learns that it runs, and no call starts once the flag is set ---- */

struct blockingCallback {
  struct fcclBootstrap* b;
  int calls;
  int sawInCallback;
  int entered;  /* atomic */
  int release;  /* atomic */
};

static fcclResult_t blockingAllgather(void* ctx, const void* send, void* recv, size_t bytes) {
  struct blockingCallback* cb = ctx;
  cb->calls++;
  cb->sawInCallback = fcclBootstrapInCallback(cb->b);
  memcpy(recv, send, bytes); /* rank 0 of 2: its own slot; the other one stays as it was */
  memcpy((char*)recv + bytes, send, bytes);
  __atomic_store_n(&cb->entered, 1, __ATOMIC_RELEASE);
  for (int64_t end = bootNowMs() + 10000; !__atomic_load_n(&cb->release, __ATOMIC_ACQUIRE) && bootNowMs() < end;)
    bootSleepMs(1);
  return fcclSuccess;
}

static void* blockingOp(void* arg) {
  struct blockingCallback* cb = arg;
  uint8_t data[2 * 8] = {0};
  (void)fcclBootstrapAllGather(cb->b, data, 8);
  return NULL;
}

static void testCallbackState(void) {
  volatile int abortFlag = 0;
  struct blockingCallback cb;
  memset(&cb, 0, sizeof(cb));
  fcclBootstrapCallbacks_t callbacks = {&cb, blockingAllgather, NULL};
  EXPECT_EQ_INT(fcclBootstrapExternalInit(&callbacks, 0, 2, &abortFlag, &cb.b), fcclSuccess);
  if (!cb.b) return;
  EXPECT(!fcclBootstrapInCallback(cb.b));
  pthread_t thread;
  pthread_create(&thread, NULL, blockingOp, &cb);
  for (int64_t end = bootNowMs() + 5000; !__atomic_load_n(&cb.entered, __ATOMIC_ACQUIRE) && bootNowMs() < end;)
    bootSleepMs(1);
  EXPECT(fcclBootstrapInCallback(cb.b)); /* seen from another thread while the callback blocks */
  __atomic_store_n(&cb.release, 1, __ATOMIC_RELEASE);
  pthread_join(thread, NULL);
  EXPECT(cb.sawInCallback);
  EXPECT(!fcclBootstrapInCallback(cb.b));
  /* Once aborted, no callback starts. */
  __atomic_store_n(&abortFlag, 1, __ATOMIC_RELEASE);
  uint8_t data[2 * 8] = {0};
  EXPECT_EQ_INT(fcclBootstrapAllGather(cb.b, data, 8), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "aborted");
  EXPECT_EQ_INT(fcclBootstrapBarrier(cb.b), fcclInvalidUsage);
  EXPECT_EQ_INT(cb.calls, 1);
  EXPECT(!fcclBootstrapInCallback(NULL));
  fcclBootstrapDestroy(cb.b);
}

int main(void) {
  testMeet(2, 1);
  testMeet(3, 0);
  testMeet(4, 0);
  testMeet(8, 1);
  testTwoCommunicators();
  testThreads();
  testLocalId();
  testEnv(0);
  testEnv(1);
  testExternal();
  testCallbackState();
  return testSummary("bootstrap");
}
