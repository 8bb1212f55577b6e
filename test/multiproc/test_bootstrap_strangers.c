/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Strangers at the bootstrap's listeners: a local process floods the root's port, or a rank's ring listener,
 * with connections that never speak, that send a hello one byte at a time, and that send garbage and reconnect,
 * all the while the real ranks join. The real ranks must get through (a stranger never takes a rank's place) and
 * the log of the process whose listener is flooded must stay small (refusals are rate-limited). And a thousand
 * drippers (a byte every 90 ms each, connecting again whenever they are closed) must not stop a rendezvous: every
 * one of several rendezvous through them completes.
 * Time bounds are generous (CI machines are slow and the ASan build slower): they catch hangs, not speed.
 */
#include "bootstrap.h"
#include "check.h"
#include "socket.h"
#include "tcp.h"
#include "test.h"
#include "test_bootstrap_util.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/resource.h>

#define RANK_TIMEOUT_MS 10000
#define FLOOD_SILENT 240  /* connect, then say nothing */
#define FLOOD_SLOW 40     /* a hello header one byte every SLOW_BYTE_MS */
#define FLOOD_GARBAGE 16  /* 16 bytes of junk, then reconnect when refused */
#define FLOOD_MAX (FLOOD_SILENT + FLOOD_SLOW + FLOOD_GARBAGE)
#define SLOW_BYTE_MS 40
#define FLOOD_MAX_MS 20000
/* What the flooded process may log: a few lines one by one, then a summary every couple of seconds. */
#define LOG_MAX_BYTES 8192

static uint64_t seed;

/* ---- the log of this process, counted ---- */

static long logLines, logBytes;
static int logSummaries;

static void countLog(void* user, fcclLogLevel_t level, const char* subsys, const char* line) {
  (void)user;
  (void)subsys;
  if (level > fcclLogWarn) return;
  logLines++;
  logBytes += (long)strlen(line) + 1;
  if (strstr(line, "more connection")) logSummaries++;
}

static void expectSmallLog(const char* who) {
  printf("%s: %ld warning lines, %ld bytes (%d summaries)\n", who, logLines, logBytes, logSummaries);
  EXPECT_MSG(logBytes <= LOG_MAX_BYTES, "%s logged %ld bytes in %ld lines during the flood (bound %d)", who, logBytes,
             logLines, LOG_MAX_BYTES);
}

/* ---- the flood ---- */

enum { CONN_SILENT, CONN_SLOW, CONN_GARBAGE };

struct floodConn {
  int fd;
  int kind;
  size_t sent;
  int64_t nextByteMs;
};

struct flood {
  union fcclSocketAddress target;
  struct floodConn conns[FLOOD_MAX];
  int count;
  long closedByPeer; /* connections the listener closed (and that were opened again) */
  long refused;      /* connection attempts refused: the listener is gone */
  uint8_t slowFrame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES];
  uint8_t junk[16];
};

/* A non-blocking connect that does not wait: the flood never blocks on one connection. */
static void floodOpen(struct flood* f, struct floodConn* c) {
  c->sent = 0;
  c->nextByteMs = 0;
  c->fd = socket(f->target.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0) return;
  if (connect(c->fd, &f->target.sa, fcclSocketAddrLen(&f->target)) != 0 && errno != EINPROGRESS) {
    close(c->fd);
    c->fd = -1;
    f->refused++;
  }
}

static void floodStart(struct flood* f, const union fcclSocketAddress* target) {
  memset(f, 0, sizeof(*f));
  f->target = *target;
  /* A hello that would be refused (wrong secret) if it ever arrived whole; it never does in time. */
  struct fcclWireHello hello;
  memset(&hello, 0, sizeof(hello));
  hello.nonce[0] = 0x5e;
  hello.rank = 0;
  hello.nranks = 2;
  hello.timeoutMs = 1000;
  hello.pid = getpid();
  fcclSocketLoopback(&hello.listenAddr, 1);
  snprintf(hello.host, sizeof(hello.host), "stranger");
  fcclWireEncodeHello(f->slowFrame, &hello);
  uint64_t state = seed;
  for (size_t i = 0; i < sizeof(f->junk); i++) f->junk[i] = (uint8_t)testRandom(&state);
  for (int i = 0; i < FLOOD_MAX; i++) {
    struct floodConn* c = &f->conns[f->count++];
    c->kind = i < FLOOD_SILENT ? CONN_SILENT : i < FLOOD_SILENT + FLOOD_SLOW ? CONN_SLOW : CONN_GARBAGE;
    floodOpen(f, c);
  }
}

/* One round of at most 10 ms: slow connections send their next byte, garbage is sent, and every connection the
 * listener closed is opened again (until the listener is gone). */
static void floodStep(struct flood* f) {
  struct pollfd fds[FLOOD_MAX];
  int64_t now = bootNowMs();
  for (int i = 0; i < f->count; i++) {
    struct floodConn* c = &f->conns[i];
    short events = POLLIN;
    if (c->kind == CONN_SLOW && c->sent < sizeof(f->slowFrame) && now >= c->nextByteMs) events |= POLLOUT;
    if (c->kind == CONN_GARBAGE && c->sent == 0) events |= POLLOUT;
    fds[i] = (struct pollfd){.fd = c->fd, .events = events};
  }
  if (poll(fds, (nfds_t)f->count, 10) <= 0) return;
  now = bootNowMs();
  for (int i = 0; i < f->count; i++) {
    struct floodConn* c = &f->conns[i];
    if (c->fd < 0 || fds[i].revents == 0) continue;
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      uint8_t sink[256];
      long rc = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
      if (rc > 0 || (rc < 0 && errno == EAGAIN)) continue; /* a reply to read, not the end */
      int err = 0;
      socklen_t length = sizeof(err);
      (void)getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &length);
      close(c->fd);
      c->fd = -1;
      if (err == ECONNREFUSED || (rc < 0 && errno == ECONNREFUSED)) {
        f->refused++; /* the listener is closed: its owner is done with it */
        continue;
      }
      f->closedByPeer++;
      floodOpen(f, c);
      continue;
    }
    if (fds[i].revents & POLLOUT) {
      const uint8_t* bytes = c->kind == CONN_SLOW ? f->slowFrame + c->sent : f->junk;
      size_t size = c->kind == CONN_SLOW ? 1 : sizeof(f->junk);
      if (send(c->fd, bytes, size, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)size) c->sent += size;
      c->nextByteMs = now + SLOW_BYTE_MS;
    }
  }
}

static void floodStop(struct flood* f) {
  for (int i = 0; i < f->count; i++)
    if (f->conns[i].fd >= 0) close(f->conns[i].fd);
  f->count = 0;
}

/* A last 200 ms of the flood, to see the listener close what it still held when its ranks were through. */
static void floodDrain(struct flood* f) {
  for (int64_t end = bootNowMs() + 200; bootNowMs() < end;) floodStep(f);
}

/* Floods until every flag in done[0..n) is set (or FLOOD_MAX_MS). */
static void floodUntil(struct flood* f, struct bootShared* shared, const int* done, int n) {
  int64_t end = bootNowMs() + FLOOD_MAX_MS;
  for (;;) {
    int all = 1;
    for (int r = 0; r < n; r++) all &= __atomic_load_n(&done[r], __ATOMIC_ACQUIRE) != 0;
    if (all || bootNowMs() >= end || testShmAborted(shared->shm)) break;
    floodStep(f);
  }
  floodDrain(f);
}

/* ---- a real rank ---- */

/* Init through the flood, then one all-gather checked byte by byte. */
static int realRank(const fcclUniqueId* id, int rank, int nranks) {
  struct fcclBootstrap* b = NULL;
  int64_t start = bootNowMs();
  fcclResult_t res = fcclBootstrapTcpInit(id, rank, nranks, RANK_TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init through the flood failed: %s", rank, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 0;
  printf("rank %d: init through the flood in %lld ms\n", rank, (long long)(bootNowMs() - start));
  uint8_t data[4 * 64];
  for (size_t i = 0; i < 64; i++) data[(size_t)rank * 64 + i] = bootByte(seed, 0, rank, i);
  EXPECT_EQ_INT(fcclBootstrapAllGather(b, data, 64), fcclSuccess);
  long wrong = 0;
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < 64; i++) wrong += data[(size_t)r * 64 + i] != bootByte(seed, 0, r, i);
  EXPECT_EQ_INT(wrong, 0);
  fcclBootstrapDestroy(b);
  return 1;
}

/* ---- the root flooded ---- */

/* Process 0 makes the id (its process runs the root) and is rank 0, process 1 is rank 1, process 2 floods. */
static int rootFloodProcess(int proc, int nprocs, void* arg) {
  (void)nprocs;
  testFailed = 0;
  struct bootShared* shared = arg;
  fcclUniqueId id;
  if (proc == 2) {
    if (!bootWaitId(shared, &id)) return 1;
    struct fcclWireId wid;
    EXPECT_EQ_INT(fcclWireParseId((const uint8_t*)id.internal, FCCL_UNIQUE_ID_BYTES, &wid, NULL, 0), FCCL_WIRE_OK);
    static struct flood f;
    floodStart(&f, &wid.rootAddr);
    for (int64_t end = bootNowMs() + 300; bootNowMs() < end;) floodStep(&f); /* the queue fills first */
    testShmPost(&shared->flags[2], 1);
    floodUntil(&f, shared, shared->flags, 2);
    printf("root flood: %ld connections closed by the root and opened again, %ld refused\n", f.closedByPeer,
           f.refused);
    EXPECT_MSG(f.closedByPeer > 0, "the root never closed a stranger: the flood did not reach it");
    floodStop(&f);
    return testFailed != 0;
  }
  if (proc == 0) {
    fcclSetLogCallback(countLog, NULL);
    if (fcclBootstrapGetUniqueId(&id, RANK_TIMEOUT_MS) != fcclSuccess) return 1;
    bootPublishId(shared, &id);
  } else if (!bootWaitId(shared, &id)) {
    return 1;
  }
  EXPECT_EQ_INT(testShmWait(shared->shm, &shared->flags[2], 1, 10000, "the flood"), TEST_SHM_OK);
  realRank(&id, proc, 2);
  testShmPost(&shared->flags[proc], 1);
  if (proc == 0) {
    EXPECT_EQ_INT(fcclBootstrapRootsWait(5000), 0); /* the root is done: everything it logged is counted */
    expectSmallLog("the root's process");
  }
  return testFailed != 0;
}

static void testRootFlood(void) {
  struct bootShared* shared = bootSharedNew(3);
  int codes[3];
  int failed = testShmForkRanks(shared->shm, rootFloodProcess, shared, 60, codes);
  EXPECT_MSG(failed == 0, "root flood: %d processes failed (exit codes %d %d %d)", failed, codes[0], codes[1],
             codes[2]);
  bootSharedFree(shared);
  printf("a flood of strangers at the root while the ranks join: %s\n", failed ? "FAILED" : "ok");
}

/* ---- the ring listeners flooded ---- */

/*
 * Process 0 plays the root (it learns the ranks' ring listeners from their hellos), floods both listeners, and
 * only then welcomes the ranks, which must find each other through the strangers queued ahead of them. Processes
 * 1 and 2 are ranks 0 and 1.
 */
static int ringFloodProcess(int proc, int nprocs, void* arg) {
  (void)nprocs;
  testFailed = 0;
  struct bootShared* shared = arg;
  const int nranks = 2;
  if (proc == 0) {
    union fcclSocketAddress loopback, bound;
    fcclSocketLoopback(&loopback, 0);
    int listenFd = -1;
    if (fcclSocketListen(&loopback, &listenFd, &bound) != fcclSuccess) return 1;
    struct fcclWireId wid;
    memset(&wid, 0, sizeof(wid));
    wid.protocolVersion = FCCL_BOOTSTRAP_PROTOCOL_VERSION;
    if (getrandom(wid.secret, sizeof(wid.secret), 0) != (ssize_t)sizeof(wid.secret)) return 1;
    wid.rootAddr = bound;
    fcclUniqueId id;
    fcclWireEncodeId((uint8_t*)id.internal, &wid);
    bootPublishId(shared, &id);
    int rankFd[2] = {-1, -1};
    union fcclSocketAddress listeners[2];
    uint8_t nonces[2 * FCCL_WIRE_NONCE_BYTES];
    struct fcclWireChallenge challenge;
    EXPECT_EQ_INT(getrandom(challenge.nonce, sizeof(challenge.nonce), 0), (ssize_t)sizeof(challenge.nonce));
    for (int n = 0; n < nranks; n++) {
      /* The root's side of the handshake (docs/bootstrap.md#the-handshake), as tcp_root.c does it. */
      int fd = -1;
      struct pollfd p = {.fd = listenFd, .events = POLLIN};
      union fcclSocketAddress peer;
      EXPECT(poll(&p, 1, 10000) == 1);
      EXPECT_EQ_INT(fcclSocketAcceptPending(listenFd, &fd, &peer), fcclSuccess);
      if (fd < 0) return 1;
      uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES];
      EXPECT_EQ_INT(fcclSocketRecvAll(fd, frame, sizeof(frame), bootNowMs() + 10000, NULL, "a rank"), fcclSuccess);
      const uint8_t* payload = frame + FCCL_WIRE_HEADER_BYTES;
      struct fcclWireHello hello;
      EXPECT_EQ_INT(fcclWireParseHello(payload, FCCL_WIRE_HELLO_BYTES, &hello, NULL, 0), FCCL_WIRE_OK);
      if (hello.rank < 0 || hello.rank >= nranks || rankFd[hello.rank] >= 0) return 1;
      EXPECT_EQ_INT(fcclTcpHandshakeMac(wid.secret, 1, payload, challenge.nonce, challenge.mac), fcclSuccess);
      uint8_t reply[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_CHALLENGE_BYTES];
      EXPECT_EQ_INT(fcclSocketSendAll(fd, reply, fcclWireEncodeChallenge(reply, &challenge), bootNowMs() + 5000, NULL,
                                      "a rank"),
                    fcclSuccess);
      uint8_t proof[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_PROOF_BYTES], expected[FCCL_WIRE_MAC_BYTES];
      EXPECT_EQ_INT(fcclSocketRecvAll(fd, proof, sizeof(proof), bootNowMs() + 10000, NULL, "a rank"), fcclSuccess);
      EXPECT_EQ_INT(fcclTcpHandshakeMac(wid.secret, 0, payload, challenge.nonce, expected), fcclSuccess);
      EXPECT(memcmp(expected, proof + FCCL_WIRE_HEADER_BYTES, sizeof(expected)) == 0);
      rankFd[hello.rank] = fd;
      listeners[hello.rank] = hello.listenAddr;
      memcpy(nonces + hello.rank * FCCL_WIRE_NONCE_BYTES, hello.nonce, FCCL_WIRE_NONCE_BYTES);
    }
    static struct flood floods[2];
    for (int r = 0; r < nranks; r++) floodStart(&floods[r], &listeners[r]);
    for (int64_t end = bootNowMs() + 300; bootNowMs() < end;)
      for (int r = 0; r < nranks; r++) floodStep(&floods[r]);
    uint8_t welcome[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_WELCOME_BYTES(2)];
    size_t size = fcclWireEncodeWelcome(welcome, listeners, nonces, nranks);
    uint8_t* mac = welcome + size - FCCL_WIRE_MAC_BYTES;
    for (int r = 0; r < nranks; r++) {
      const uint8_t* body = welcome + FCCL_WIRE_HEADER_BYTES;
      EXPECT_EQ_INT(fcclTcpWelcomeMac(wid.secret, nonces + r * FCCL_WIRE_NONCE_BYTES, challenge.nonce, body,
                                      (size_t)(mac - body), mac),
                    fcclSuccess);
      EXPECT_EQ_INT(fcclSocketSendAll(rankFd[r], welcome, size, bootNowMs() + 5000, NULL, "a rank"), fcclSuccess);
    }
    /* Flood on while the ranks connect their ring, until both are done (their listeners close then). */
    int64_t end = bootNowMs() + FLOOD_MAX_MS;
    while ((!__atomic_load_n(&shared->flags[1], __ATOMIC_ACQUIRE) ||
            !__atomic_load_n(&shared->flags[2], __ATOMIC_ACQUIRE)) &&
           bootNowMs() < end && !testShmAborted(shared->shm))
      for (int r = 0; r < nranks; r++) floodStep(&floods[r]);
    for (int r = 0; r < nranks; r++) floodDrain(&floods[r]);
    for (int r = 0; r < nranks; r++) {
      printf("ring flood of rank %d: %ld connections closed by its listener and opened again, %ld refused\n", r,
             floods[r].closedByPeer, floods[r].refused);
      EXPECT_MSG(floods[r].closedByPeer > 0, "rank %d's listener never closed a stranger: the flood missed it", r);
      floodStop(&floods[r]);
      fcclSocketClose(&rankFd[r]);
    }
    fcclSocketClose(&listenFd);
    return testFailed != 0;
  }
  const int rank = proc - 1;
  fcclSetLogCallback(countLog, NULL);
  fcclUniqueId id;
  if (!bootWaitId(shared, &id)) return 1;
  realRank(&id, rank, nranks);
  testShmPost(&shared->flags[proc], 1);
  char who[32];
  snprintf(who, sizeof(who), "rank %d", rank);
  expectSmallLog(who);
  return testFailed != 0;
}

static void testRingFlood(void) {
  struct bootShared* shared = bootSharedNew(3);
  int codes[3];
  int failed = testShmForkRanks(shared->shm, ringFloodProcess, shared, 60, codes);
  EXPECT_MSG(failed == 0, "ring flood: %d processes failed (exit codes %d %d %d)", failed, codes[0], codes[1],
             codes[2]);
  bootSharedFree(shared);
  printf("a flood of strangers at the ring listeners while the ring connects: %s\n", failed ? "FAILED" : "ok");
}

/* ---- a thousand drippers at the root ---- */

#define DRIPPERS 1000
#define DRIP_MS 90
#define DRIP_TRIALS 3
/* Far longer than two ranks take to meet through the drippers; far shorter than a thousand of them at 64 a second. */
#define DRIP_RANK_TIMEOUT_MS 4000

struct dripper {
  int fd;
  size_t sent;
  int64_t nextMs;
};

struct drip {
  union fcclSocketAddress target;
  struct dripper* conns;
  int count;
  long reopened;
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES];
};

static void dripOpen(struct drip* d, struct dripper* c, int64_t now) {
  c->sent = 0;
  c->nextMs = now + DRIP_MS;
  c->fd = socket(d->target.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd >= 0 && connect(c->fd, &d->target.sa, fcclSocketAddrLen(&d->target)) != 0 && errno != EINPROGRESS) {
    close(c->fd);
    c->fd = -1;
  }
}

/* One round of at most 10 ms: each connection due sends its next byte; one the root closed connects again. */
static void dripStep(struct drip* d, struct pollfd* fds) {
  int64_t now = bootNowMs();
  for (int i = 0; i < d->count; i++) {
    if (d->conns[i].fd < 0) dripOpen(d, &d->conns[i], now);
    fds[i] = (struct pollfd){.fd = d->conns[i].fd, .events = POLLIN};
  }
  (void)poll(fds, (nfds_t)d->count, 10);
  now = bootNowMs();
  for (int i = 0; i < d->count; i++) {
    struct dripper* c = &d->conns[i];
    if (c->fd < 0) continue;
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      uint8_t sink[256];
      long rc = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
      if (rc > 0 || (rc < 0 && errno == EAGAIN)) continue; /* a challenge or a refusal to read, not the end */
      close(c->fd);
      c->fd = -1;
      d->reopened++;
      continue;
    }
    if (now >= c->nextMs) {
      if (send(c->fd, d->frame + c->sent % sizeof(d->frame), 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) c->sent++;
      c->nextMs = now + DRIP_MS;
    }
  }
}

/* The fds a thousand drippers need: the soft limit raised as far as the hard one allows. */
static int dripperCount(void) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 200;
  rlim_t want = DRIPPERS + 64;
  if (limit.rlim_cur < want) {
    limit.rlim_cur = limit.rlim_max < want ? limit.rlim_max : want;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 200;
  return limit.rlim_cur >= want ? DRIPPERS : (int)limit.rlim_cur - 64;
}

struct dripShared {
  struct testShm* shm;
  fcclUniqueId ids[DRIP_TRIALS];
  int idReady[DRIP_TRIALS];
  int flooding[DRIP_TRIALS];
  int done[DRIP_TRIALS][2];
  int succeeded[DRIP_TRIALS][2];
  int drippers;
};

/* Process 2: for each trial, a thousand drippers at its root until both ranks are through. */
static int dripFlood(struct dripShared* sh) {
  static struct drip d;
  sh->drippers = dripperCount();
  d.count = sh->drippers;
  d.conns = calloc((size_t)d.count, sizeof(*d.conns));
  struct pollfd* fds = calloc((size_t)d.count, sizeof(*fds));
  if (!d.conns || !fds) return 1;
  struct fcclWireHello hello;
  memset(&hello, 0, sizeof(hello));
  hello.rank = 1;
  hello.nranks = 2;
  hello.timeoutMs = 1000;
  hello.pid = getpid();
  fcclSocketLoopback(&hello.listenAddr, 1);
  fcclWireEncodeHello(d.frame, &hello);
  for (int t = 0; t < DRIP_TRIALS; t++) {
    if (testShmWait(sh->shm, &sh->idReady[t], 1, 30000, "the trial's unique id") != TEST_SHM_OK) return 1;
    struct fcclWireId wid;
    if (fcclWireParseId((const uint8_t*)sh->ids[t].internal, FCCL_UNIQUE_ID_BYTES, &wid, NULL, 0) != FCCL_WIRE_OK)
      return 1;
    d.target = wid.rootAddr;
    d.reopened = 0;
    for (int i = 0; i < d.count; i++) d.conns[i].fd = -1;
    for (int64_t end = bootNowMs() + 500; bootNowMs() < end;) dripStep(&d, fds); /* all queued before the ranks */
    testShmPost(&sh->flooding[t], 1);
    for (int64_t end = bootNowMs() + 2 * DRIP_RANK_TIMEOUT_MS;
         bootNowMs() < end &&
         !(__atomic_load_n(&sh->done[t][0], __ATOMIC_ACQUIRE) && __atomic_load_n(&sh->done[t][1], __ATOMIC_ACQUIRE));)
      dripStep(&d, fds);
    printf("trial %d: %d drippers, closed by the root and reconnected %ld times\n", t, d.count, d.reopened);
    for (int i = 0; i < d.count; i++)
      if (d.conns[i].fd >= 0) close(d.conns[i].fd);
  }
  free(d.conns);
  free(fds);
  return 0;
}

static int dripProcess(int proc, int nprocs, void* arg) {
  (void)nprocs;
  testFailed = 0;
  struct dripShared* sh = arg;
  if (proc == 2) return dripFlood(sh);
  fcclSetLogCallback(countLog, NULL);
  for (int t = 0; t < DRIP_TRIALS; t++) {
    logLines = logBytes = logSummaries = 0;
    if (proc == 0) {
      if (fcclBootstrapGetUniqueId(&sh->ids[t], DRIP_RANK_TIMEOUT_MS) != fcclSuccess) return 1;
      testShmPost(&sh->idReady[t], 1);
    }
    if (testShmWait(sh->shm, &sh->flooding[t], 1, 30000, "the drippers") != TEST_SHM_OK) return 1;
    struct fcclBootstrap* b = NULL;
    const int64_t start = bootNowMs();
    fcclResult_t res = fcclBootstrapTcpInit(&sh->ids[t], proc, 2, DRIP_RANK_TIMEOUT_MS, NULL, &b);
    if (res == fcclSuccess) {
      uint8_t data[2 * 16];
      for (int i = 0; i < 16; i++) data[proc * 16 + i] = (uint8_t)(proc + i);
      res = fcclBootstrapAllGather(b, data, 16);
      for (int i = 0; i < 16 && res == fcclSuccess; i++)
        if (data[(1 - proc) * 16 + i] != (uint8_t)(1 - proc + i)) res = fcclInternalError;
      fcclBootstrapDestroy(b);
    }
    printf("trial %d, rank %d: %s in %lld ms%s%s\n", t, proc, res == fcclSuccess ? "met" : "failed",
           (long long)(bootNowMs() - start), res == fcclSuccess ? "" : ": ",
           res == fcclSuccess ? "" : fcclGetLastError(NULL));
    sh->succeeded[t][proc] = res == fcclSuccess;
    testShmPost(&sh->done[t][proc], 1);
    if (proc == 0) {
      EXPECT_EQ_INT(fcclBootstrapRootsWait(5000), 0); /* the root is done: everything it logged is counted */
      expectSmallLog("the root's process, through the drippers");
    }
  }
  return testFailed != 0;
}

static void testRootDrippers(void) {
  struct testShm* shm = testShmCreate(3, 0, sizeof(struct dripShared), 60000);
  if (!shm) exit(1);
  struct dripShared* sh = testShmUser(shm);
  sh->shm = shm;
  int codes[3];
  int failed = testShmForkRanks(shm, dripProcess, sh, 110, codes);
  EXPECT_MSG(failed == 0, "drippers: %d processes failed (exit codes %d %d %d)", failed, codes[0], codes[1], codes[2]);
  int met = 0;
  for (int t = 0; t < DRIP_TRIALS; t++) met += sh->succeeded[t][0] && sh->succeeded[t][1];
  EXPECT_MSG(met == DRIP_TRIALS, "%d of %d rendezvous through %d drippers completed", met, DRIP_TRIALS, sh->drippers);
  printf("%d of %d rendezvous through %d drippers at the root: %s\n", met, DRIP_TRIALS, sh->drippers,
         met == DRIP_TRIALS ? "ok" : "FAILED");
  testShmDestroy(shm);
}

int main(void) {
  seed = testSeed();
  testRootFlood();
  testRingFlood();
  testRootDrippers();
  return testSummary("bootstrap_strangers");
}
