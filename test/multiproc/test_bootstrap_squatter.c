/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A process of another user (nobody, when run as root) that binds fcclCommInitFromEnv's rendezvous port before rank
 * 0 does. It plays the root as well as it can: it takes every connection, records every byte the ranks send, and
 * answers their hellos with a challenge of its own making. Then the job starts again with the same environment, the
 * squatter lets the real root have the port and replays what it recorded to join as the late rank 2.
 *
 * The ranks must not take the squatter for their root (they fail, saying it cannot prove the secret), must send it
 * nothing from which the secret could be learnt (neither the launch's secret nor any 8 bytes of the key derived
 * from it appear in what it recorded), and its replay must not take the late rank's place: the restarted job's
 * three ranks meet and exchange their data.
 */
#include "bootstrap.h"
#include "check.h"
#include "param.h"
#include "socket.h"
#include "test.h"
#include "test_bootstrap_util.h"
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define NRANKS 3
#define SQUATTER NRANKS /* the process number of the squatter */
#define SQUAT_TIMEOUT_MS 3000
#define RESTART_TIMEOUT_MS 10000
#define CAPTURE_SLOTS 16 /* connections taken and recorded */
#define SLOT_BYTES 1024
#define CAPTURE_BYTES (CAPTURE_SLOTS * SLOT_BYTES)
#define SECRET_TEXT "a5f0c3d2e1b49687a5f0c3d2e1b49687"

enum { FLAG_BOUND = 0, FLAG_PHASE1_DONE = 1, FLAG_RELEASED = 4, FLAG_REPLAYED = 5, FLAG_RANK0_LISTENS = 6 };

struct squat {
  struct testShm* shm;
  int port;
  int flags[16];
  int rankDone[NRANKS];
  /* What the squatter received, a slot per connection, in the order the connections came. */
  uint8_t captured[CAPTURE_BYTES];
  size_t rank2Start, rank2Bytes; /* the part that came from rank 2's connection (its pid said so), for the replay */
  int connections;
  int replayTookPlace; /* the genuine root welcomed the replay */
  int becameNobody;
};

static void setLaunch(int rank, int port) {
  char text[64];
  snprintf(text, sizeof(text), "%d", rank);
  setenv("OMPI_COMM_WORLD_RANK", text, 1);
  snprintf(text, sizeof(text), "%d", NRANKS);
  setenv("OMPI_COMM_WORLD_SIZE", text, 1);
  snprintf(text, sizeof(text), "127.0.0.1:%d", port);
  setenv("FCCL_COMM_ID", text, 1);
  setenv("FCCL_COMM_SECRET", SECRET_TEXT, 1);
  fcclParamResetForTest();
}

/* ---- the squatter ---- */

struct squatConn {
  int fd;
  size_t start; /* where its slot begins in captured */
  size_t got;
  int answered;
};

/* Takes connections on the rendezvous port and plays the root: records, and answers each hello with a challenge. */
static void squatPort(struct squat* sq, int listenFd) {
  struct squatConn conns[CAPTURE_SLOTS];
  int count = 0;
  const int64_t end = bootNowMs() + SQUAT_TIMEOUT_MS + 2000;
  while (bootNowMs() < end && !__atomic_load_n(&sq->flags[FLAG_PHASE1_DONE], __ATOMIC_ACQUIRE)) {
    struct pollfd fds[1 + CAPTURE_SLOTS];
    fds[0] = (struct pollfd){.fd = listenFd, .events = POLLIN};
    for (int i = 0; i < count; i++) fds[1 + i] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
    const int polled = count;
    if (poll(fds, (nfds_t)(1 + polled), 20) <= 0) continue;
    if ((fds[0].revents & POLLIN) && count < CAPTURE_SLOTS) {
      int fd = accept(listenFd, NULL, NULL);
      if (fd >= 0) {
        /* Each connection's bytes in a slot of their own. */
        conns[count++] = (struct squatConn){.fd = fd, .start = (size_t)sq->connections * SLOT_BYTES};
        sq->connections++;
      }
    }
    for (int i = 0; i < polled; i++) {
      if (!(fds[1 + i].revents & (POLLIN | POLLHUP | POLLERR)) || conns[i].fd < 0) continue;
      uint8_t* into = sq->captured + conns[i].start + conns[i].got;
      size_t room = SLOT_BYTES - conns[i].got;
      ssize_t rc = room ? recv(conns[i].fd, into, room, MSG_DONTWAIT) : 0;
      if (rc < 0 && errno == EAGAIN) continue;
      if (rc <= 0) {
        close(conns[i].fd);
        conns[i].fd = -1;
        continue;
      }
      conns[i].got += (size_t)rc;
      struct fcclWireHello hello;
      const uint8_t* base = sq->captured + conns[i].start;
      if (!conns[i].answered && conns[i].got >= FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES) {
        if (fcclWireParseHello(base + FCCL_WIRE_HEADER_BYTES, FCCL_WIRE_HELLO_BYTES, &hello, NULL, 0) == FCCL_WIRE_OK &&
            hello.rank == 2) {
          sq->rank2Start = conns[i].start;
          sq->rank2Bytes = FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES;
        }
        /* The best a root without the secret can do: a challenge of random bytes. */
        struct fcclWireChallenge challenge;
        if (getrandom(&challenge, sizeof(challenge), 0) != (ssize_t)sizeof(challenge)) memset(&challenge, 7, 64);
        uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_CHALLENGE_BYTES];
        (void)send(conns[i].fd, frame, fcclWireEncodeChallenge(frame, &challenge), MSG_NOSIGNAL);
        conns[i].answered = 1;
      }
    }
  }
  for (int i = 0; i < count; i++)
    if (conns[i].fd >= 0) close(conns[i].fd);
}

/* Connects to the genuine root and replays rank 2's recorded bytes, then whatever a proof could be. */
static void replayAsRank2(struct squat* sq) {
  union fcclSocketAddress root;
  fcclSocketLoopback(&root, (uint16_t)sq->port);
  int fd = -1;
  if (fcclSocketConnect(&root, bootNowMs() + 5000, NULL, 1, "the root", &fd) != fcclSuccess) return;
  if (sq->rank2Bytes)
    (void)fcclSocketSendAll(fd, sq->captured + sq->rank2Start, sq->rank2Bytes, bootNowMs() + 2000, NULL, "the root");
  /* Whatever comes back, a proof the squatter makes up (it has none to replay: the rank never sent one). */
  uint8_t reply[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_CHALLENGE_BYTES];
  if (fcclSocketRecvAll(fd, reply, sizeof(reply), bootNowMs() + 2000, NULL, "the root") == fcclSuccess) {
    uint8_t mac[FCCL_WIRE_MAC_BYTES];
    memcpy(mac, reply + FCCL_WIRE_HEADER_BYTES, sizeof(mac)); /* its own nonce, sent back as a proof */
    uint8_t proof[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_PROOF_BYTES];
    (void)fcclSocketSendAll(fd, proof, fcclWireEncodeProof(proof, mac), bootNowMs() + 2000, NULL, "the root");
  }
  /* A welcome would be the replay taking rank 2's place; a refusal or a close is what must come. */
  uint8_t header[FCCL_WIRE_HEADER_BYTES];
  struct fcclWireHeader h;
  if (fcclSocketRecvAll(fd, header, sizeof(header), bootNowMs() + RESTART_TIMEOUT_MS, NULL, "the root") ==
          fcclSuccess &&
      fcclWireParseHeader(header, sizeof(header), &h, NULL, 0) == FCCL_WIRE_OK && h.type == FCCL_WIRE_WELCOME)
    sq->replayTookPlace = 1;
  fcclSocketClose(&fd);
}

static int squatter(struct squat* sq) {
  sq->becameNobody = bootBecomeNobody();
  if (sq->becameNobody < 0) return 1;
  union fcclSocketAddress at, bound;
  fcclSocketLoopback(&at, (uint16_t)sq->port);
  int listenFd = -1;
  if (fcclSocketListen(&at, &listenFd, &bound) != fcclSuccess) return 1;
  testShmPost(&sq->flags[FLAG_BOUND], 1);
  squatPort(sq, listenFd);
  fcclSocketClose(&listenFd);
  testShmPost(&sq->flags[FLAG_RELEASED], 1);
  (void)testShmWait(sq->shm, &sq->flags[FLAG_RANK0_LISTENS], 1, 10000, "rank 0's restart");
  replayAsRank2(sq);
  testShmPost(&sq->flags[FLAG_REPLAYED], 1);
  return 0;
}

/* ---- the ranks ---- */

/* Whether any 8 bytes of secret, or the launch's secret text, appear in what the squatter recorded. */
static int leaked(const struct squat* sq, const uint8_t* secret) {
  const size_t text = strlen(SECRET_TEXT);
  for (size_t at = 0; at + 8 <= CAPTURE_BYTES; at++) {
    for (size_t s = 0; s + 8 <= FCCL_BOOTSTRAP_SECRET_BYTES; s++)
      if (memcmp(sq->captured + at, secret + s, 8) == 0) return 1;
    if (at + text <= CAPTURE_BYTES && memcmp(sq->captured + at, SECRET_TEXT, text) == 0) return 1;
  }
  return 0;
}

static int rank(int r, struct squat* sq) {
  setLaunch(r, sq->port);
  struct fcclEnvLaunch launch;
  EXPECT_EQ_INT(fcclBootstrapEnvResolve(&launch), fcclSuccess);
  EXPECT_EQ_INT(testShmWait(sq->shm, &sq->flags[FLAG_BOUND], 1, 10000, "the squatter"), TEST_SHM_OK);

  /* The squatted start: rank 0 cannot listen; the others meet the squatter and refuse it. */
  struct fcclBootstrap* b = NULL;
  fcclResult_t res = fcclBootstrapEnvInit(&launch, SQUAT_TIMEOUT_MS, NULL, &b);
  const char* error = fcclGetLastError(NULL);
  if (r == 0) {
    EXPECT_MSG(res == fcclSystemError, "rank 0 with its port taken: %s", error);
  } else {
    EXPECT_MSG(res == fcclRemoteError, "rank %d took the squatter for its root: %d (%s)", r, res, error);
    EXPECT_STR_CONTAINS(error, "cannot prove that it knows this communicator's secret");
    printf("rank %d, the port squatted: %s\n", r, error);
  }
  if (res == fcclSuccess) fcclBootstrapDestroy(b);
  testShmPost(&sq->rankDone[r], 1);
  if (r == 0) {
    for (int other = 1; other < NRANKS; other++)
      EXPECT_EQ_INT(testShmWait(sq->shm, &sq->rankDone[other], 1, 10000, "a rank's squatted start"), TEST_SHM_OK);
    testShmPost(&sq->flags[FLAG_PHASE1_DONE], 1);
  }
  EXPECT_EQ_INT(testShmWait(sq->shm, &sq->flags[FLAG_RELEASED], 1, 15000, "the squatter's recording"), TEST_SHM_OK);
  if (r == 1) {
    EXPECT_MSG(sq->connections >= NRANKS - 1, "the squatter saw %d connections: it was not in the way",
               sq->connections);
    const int leak = leaked(sq, launch.secret);
    EXPECT_MSG(!leak, "the squatter received bytes of the secret");
    printf("the squatter (%s) recorded %d connections: %s\n", sq->becameNobody ? "user nobody" : "this user",
           sq->connections, leak ? "the secret among them" : "no byte of the secret among them");
  }

  /* The job starts again with the same environment; rank 2 is late, after the squatter's replay. */
  if (r == 2)
    EXPECT_EQ_INT(testShmWait(sq->shm, &sq->flags[FLAG_REPLAYED], 1, 20000, "the squatter's replay"), TEST_SHM_OK);
  if (r == 0) testShmPost(&sq->flags[FLAG_RANK0_LISTENS], 1); /* the squatter retries until the root listens */
  res = fcclBootstrapEnvInit(&launch, RESTART_TIMEOUT_MS, NULL, &b);
  EXPECT_MSG(res == fcclSuccess, "rank %d after the restart: %s", r, fcclGetLastError(NULL));
  if (res != fcclSuccess) return 1;
  uint8_t data[NRANKS * 32];
  for (size_t i = 0; i < 32; i++) data[(size_t)r * 32 + i] = (uint8_t)(r * 31 + i);
  EXPECT_EQ_INT(fcclBootstrapAllGather(b, data, 32), fcclSuccess);
  long wrong = 0;
  for (int o = 0; o < NRANKS; o++)
    for (size_t i = 0; i < 32; i++) wrong += data[(size_t)o * 32 + i] != (uint8_t)(o * 31 + i);
  EXPECT_EQ_INT(wrong, 0);
  fcclBootstrapDestroy(b);
  if (r == 0) EXPECT_MSG(!sq->replayTookPlace, "the root welcomed the squatter's replay of rank 2's hello");
  return 0;
}

static int process(int proc, int nprocs, void* arg) {
  (void)nprocs;
  testFailed = 0;
  struct squat* sq = arg;
  if (proc == SQUATTER) return squatter(sq);
  rank(proc, sq);
  return testFailed != 0;
}

static int freeLoopbackPort(void) {
  union fcclSocketAddress loopback, bound;
  fcclSocketLoopback(&loopback, 0);
  int fd = -1;
  if (fcclSocketListen(&loopback, &fd, &bound) != fcclSuccess) return -1;
  fcclSocketClose(&fd);
  return ntohs(bound.sin.sin_port);
}

int main(void) {
  struct testShm* shm = testShmCreate(NRANKS + 1, 0, sizeof(struct squat), 30000);
  if (!shm) return 1;
  struct squat* sq = testShmUser(shm);
  sq->shm = shm;
  sq->port = freeLoopbackPort();
  int codes[NRANKS + 1];
  int failed = testShmForkRanks(shm, process, sq, 90, codes);
  EXPECT_MSG(failed == 0, "%d processes failed (exit codes %d %d %d, squatter %d)", failed, codes[0], codes[1],
             codes[2], codes[3]);
  testShmDestroy(shm);
  printf("a squatter of the rendezvous port learns nothing and cannot join: %s\n", failed ? "FAILED" : "ok");
  return testSummary("bootstrap_squatter");
}
