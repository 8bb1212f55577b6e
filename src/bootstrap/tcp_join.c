/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TCP bootstrap's rank side of init: the handshake with the root (hello, the root's challenge and proof, this
 * rank's proof, then the welcome or the root's verdict), then the ring: connect to the next rank, accept the previous
 * one, each proving the secret to the other. Nothing that carries the secret is ever sent: only MACs over nonces.
 * tcp.h has the method's outline; docs/bootstrap.md#the-handshake and docs/bootstrap.md#rendezvous the protocol.
 */
#include "bootstrap.h"

#include "check.h"
#include "crypto.h"
#include "debug.h"
#include "param.h"
#include "socket.h"
#include "tcp.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Pause before connecting again to a listener that closed a connection of ours unanswered. */
#define RECONNECT_PAUSE_MS 10

/* This host's name for the hello: NUL-terminated and printable, as the root's hello parser requires. */
static void localHostName(char* out, size_t size) {
  if (gethostname(out, size) != 0) snprintf(out, size, "unknown");
  out[size - 1] = '\0';
  for (char* p = out; *p; p++)
    if (*p < 0x20 || *p > 0x7e) *p = '?';
}

static void pauseMs(int ms) {
  struct timespec pause = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
  nanosleep(&pause, NULL);
}

/* ---- the root ---- */

struct rootLink {
  const struct fcclWireId* wid;
  const char* rootText; /* the root's address, for messages */
  int rank;
  volatile int* abortFlag;
  int fd;
  int closed; /* set by readRootFrame: the root closed the connection without a word */
};

/*
 * Reads one frame from the root (payload malloc'ed): a challenge, a welcome or an error. A connection the root
 * closes before a frame is not an error here (link->closed is set): it was taken for a stranger's and the caller
 * connects again.
 */
static fcclResult_t readRootFrame(struct rootLink* link, int64_t deadline, const char* waitingFor,
                                  struct fcclWireHeader* header, uint8_t** payload) {
  uint8_t buf[FCCL_WIRE_HEADER_BYTES];
  size_t got = 0, bodyGot = 0;
  uint8_t* body = NULL;
  *payload = NULL;
  link->closed = 0;
  for (;;) {
    uint8_t* dst;
    size_t want;
    if (got < FCCL_WIRE_HEADER_BYTES) {
      dst = buf + got;
      want = FCCL_WIRE_HEADER_BYTES - got;
    } else {
      if (bodyGot == header->length) break;
      dst = body + bodyGot;
      want = header->length - bodyGot;
    }
    long rc = fcclSocketTryRecv(link->fd, dst, want);
    if (rc == 0 || (rc < 0 && (errno == ECONNRESET || errno == EPIPE))) {
      free(body);
      link->closed = 1;
      return fcclSuccess;
    }
    if (rc < 0 && errno != EAGAIN) {
      free(body);
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                        "rank %d: receiving from the bootstrap root at %s failed: %s", link->rank, link->rootText,
                        strerror(errno));
    }
    if (rc > 0) {
      if (got < FCCL_WIRE_HEADER_BYTES) {
        got += (size_t)rc;
        if (got == FCCL_WIRE_HEADER_BYTES) {
          char why[256];
          if (fcclWireParseHeader(buf, got, header, why, sizeof(why)) != FCCL_WIRE_OK)
            return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                              "rank %d: the bootstrap root at %s sent a malformed reply: %s", link->rank,
                              link->rootText, why);
          if (header->type != FCCL_WIRE_CHALLENGE && header->type != FCCL_WIRE_WELCOME &&
              header->type != FCCL_WIRE_ERROR)
            return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                              "rank %d: the bootstrap root at %s sent a message of type %u where %s belongs",
                              link->rank, link->rootText, (unsigned)header->type, waitingFor);
          body = malloc(header->length ? header->length : 1);
          if (!body) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for the bootstrap welcome");
        }
      } else {
        bodyGot += (size_t)rc;
      }
      continue;
    }
    if (fcclAborted(link->abortFlag)) {
      free(body);
      return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT,
                        "rank %d: aborted (fcclCommAbort) while waiting for the other ranks to arrive", link->rank);
    }
    if (fcclTimeMs() >= deadline) {
      free(body);
      return FCCL_ERROR(fcclTimeout, FCCL_SUBSYS_BOOT,
                        "rank %d: timed out waiting for %s from the bootstrap root at %s (the root did not answer: is "
                        "it stuck?)",
                        link->rank, waitingFor, link->rootText);
    }
    struct pollfd p = {.fd = link->fd, .events = POLLIN, .revents = 0};
    (void)poll(&p, 1, FCCL_SOCKET_POLL_SLICE_MS);
  }
  *payload = body;
  return fcclSuccess;
}

/* The root's error frame (payload) as this rank's error. */
static fcclResult_t rootError(const struct rootLink* link, const uint8_t* payload, uint32_t length) {
  struct fcclWireError error;
  char why[256];
  if (fcclWireParseError(payload, length, &error, why, sizeof(why)) != FCCL_WIRE_OK)
    return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT, "rank %d: the bootstrap root sent a malformed error: %s",
                      link->rank, why);
  return FCCL_ERROR((fcclResult_t)error.result, FCCL_SUBSYS_BOOT, "rank %d: %s", link->rank, error.text);
}

/*
 * The handshake with the root (docs/bootstrap.md#the-handshake) on the connection link->fd, until the welcome
 * (*welcome, malloc'ed, its MAC checked) or the root's verdict. helloFrame: this rank's hello. A connection the root
 * closes before its verdict was taken for a stranger's (a full table, or the handshake's time ran out): this rank
 * connects again and, knowing the root's nonce by then, sends its proof with its hello, so the root can admit it the
 * moment it accepts it.
 */
static fcclResult_t joinRoot(struct rootLink* link, const uint8_t* secret, const uint8_t* helloFrame, int64_t deadline,
                             int64_t verdictDeadline, int64_t keepaliveMs, struct fcclWireHeader* header,
                             uint8_t** welcome) {
  const uint8_t* helloPayload = helloFrame + FCCL_WIRE_HEADER_BYTES;
  uint8_t rootNonce[FCCL_WIRE_NONCE_BYTES];
  int knowNonce = 0;
  uint8_t* payload = NULL;
  fcclResult_t res = fcclSuccess;
  for (int attempt = 0;; attempt++) {
    if (attempt > 0) { /* the first attempt uses the connection link->fd holds */
      fcclSocketClose(&link->fd);
      pauseMs(RECONNECT_PAUSE_MS);
      res = fcclSocketConnect(&link->wid->rootAddr, deadline, link->abortFlag, 0, "the bootstrap root", &link->fd);
      if (res == fcclRemoteError) /* refused after the root had taken a connection of ours: it is gone */
        return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                          "rank %d: the bootstrap root at %s closed the connection before every rank arrived, and "
                          "nothing listens there any more (the process that called fcclGetUniqueId exited, or "
                          "stopped serving the id)",
                          link->rank, link->rootText);
      if (res != fcclSuccess) return res;
    }
    fcclSocketSetKeepalive(link->fd, keepaliveMs, 1);
    uint8_t frames[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES + FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_PROOF_BYTES];
    size_t size = FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES;
    memcpy(frames, helloFrame, size);
    if (knowNonce) {
      uint8_t mac[FCCL_WIRE_MAC_BYTES];
      FCCLCHECK(fcclTcpHandshakeMac(secret, 0, helloPayload, rootNonce, mac));
      size += fcclWireEncodeProof(frames + size, mac);
    }
    if (!fcclTcpSendFresh(link->fd, frames, size)) continue; /* closed already */

    FCCLCHECK(readRootFrame(link, deadline, "its challenge", header, &payload));
    if (link->closed) continue;
    if (header->type == FCCL_WIRE_ERROR) {
      res = rootError(link, payload, header->length);
      free(payload);
      return res;
    }
    struct fcclWireChallenge challenge;
    char why[256];
    fcclWireStatus_t status = header->type == FCCL_WIRE_CHALLENGE
                                  ? fcclWireParseChallenge(payload, header->length, &challenge, why, sizeof(why))
                                  : FCCL_WIRE_BAD_TYPE;
    free(payload);
    if (status != FCCL_WIRE_OK)
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                        "rank %d: the bootstrap root at %s answered the hello with a %s instead of a challenge",
                        link->rank, link->rootText, header->type == FCCL_WIRE_WELCOME ? "welcome" : "malformed frame");
    uint8_t expected[FCCL_WIRE_MAC_BYTES];
    FCCLCHECK(fcclTcpHandshakeMac(secret, 1, helloPayload, challenge.nonce, expected));
    if (!fcclMacEqual(expected, challenge.mac))
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                        "rank %d: the bootstrap root at %s cannot prove that it knows this communicator's secret (it "
                        "serves another communicator's unique id, or a process that is not the root listens there); "
                        "nothing from which the secret could be learnt was sent to it",
                        link->rank, link->rootText);
    if (knowNonce && memcmp(challenge.nonce, rootNonce, sizeof(rootNonce)) != 0) {
      knowNonce = 0; /* another root serves the id now: the proof sent ahead was for the old one */
      continue;
    }
    if (!knowNonce) {
      memcpy(rootNonce, challenge.nonce, sizeof(rootNonce));
      knowNonce = 1;
      uint8_t mac[FCCL_WIRE_MAC_BYTES];
      FCCLCHECK(fcclTcpHandshakeMac(secret, 0, helloPayload, rootNonce, mac));
      uint8_t proof[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_PROOF_BYTES];
      if (fcclSocketTrySend(link->fd, proof, fcclWireEncodeProof(proof, mac)) != (long)sizeof(proof)) continue;
    }

    FCCLCHECK(readRootFrame(link, verdictDeadline, "the welcome", header, &payload));
    if (link->closed) continue;
    if (header->type == FCCL_WIRE_ERROR) {
      res = rootError(link, payload, header->length);
      free(payload);
      return res;
    }
    if (header->type != FCCL_WIRE_WELCOME) {
      free(payload);
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                        "rank %d: the bootstrap root at %s sent a second challenge where the welcome belongs",
                        link->rank, link->rootText);
    }
    const size_t bodyBytes = header->length - FCCL_WIRE_MAC_BYTES;
    res = fcclTcpWelcomeMac(secret, helloPayload, rootNonce, payload, bodyBytes, expected);
    if (res == fcclSuccess && !fcclMacEqual(expected, payload + bodyBytes))
      res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                       "rank %d: the welcome from the bootstrap root at %s does not carry the root's MAC (the "
                       "connection was tampered with)",
                       link->rank, link->rootText);
    if (res != fcclSuccess) {
      free(payload);
      return res;
    }
    *welcome = payload;
    return fcclSuccess;
  }
}

/* ---- the ring ---- */

struct ringSetup {
  struct fcclBootstrap* b;
  struct fcclTcpState* t;
  const union fcclSocketAddress* addrs;
  const uint8_t* nonces; /* every rank's, from the welcome */
  int64_t deadline;
};

static const uint8_t* nonceOf(const struct ringSetup* s, int rank) {
  return s->nonces + (size_t)rank * FCCL_WIRE_NONCE_BYTES;
}

/* Connects to next and sends the ring hello: this rank's proof over next's nonce. */
static fcclResult_t connectNext(const struct ringSetup* s) {
  const int n = s->b->nranks, rank = s->b->rank, next = (rank + 1) % n;
  char what[32];
  snprintf(what, sizeof(what), "rank %d", next);
  FCCLCHECK(fcclSocketConnect(&s->addrs[next], s->deadline, s->b->abortFlag, 0, what, &s->t->fdNext));
  struct fcclWireRingHello hello = {.rank = rank, .nranks = n};
  FCCLCHECK(fcclTcpRingMac(s->t->secret, FCCL_WIRE_RING_HELLO, nonceOf(s, next), rank, n, hello.mac));
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_RING_HELLO_BYTES];
  return fcclSocketSendAll(s->t->fdNext, frame, fcclWireEncodeRingHello(frame, FCCL_WIRE_RING_HELLO, &hello),
                           s->deadline, s->b->abortFlag, what);
}

/* Reads connection i of the ring listener: 1 when it is prev's ring hello with prev's proof (t->fdPrev is then set,
 * and prev has this rank's ack). */
static int ringHandlePending(const struct ringSetup* s, struct fcclTcpPending* pending, int i) {
  const int n = s->b->nranks, rank = s->b->rank, prev = (rank - 1 + n) % n;
  struct fcclWireRingHello hello;
  if (!fcclTcpPendingReadHello(pending, i, "ring hello", &hello)) return 0;
  if (hello.nranks != n || hello.rank != prev) {
    fcclTcpPendingRefuse(pending, i, fcclLogWarn, "rank %d of %d connected where rank %d of %d belongs",
                         (int)hello.rank, (int)hello.nranks, prev, n);
    return 0;
  }
  uint8_t expected[FCCL_WIRE_MAC_BYTES];
  if (fcclTcpRingMac(s->t->secret, FCCL_WIRE_RING_HELLO, nonceOf(s, rank), prev, n, expected) != fcclSuccess ||
      !fcclMacEqual(expected, hello.mac)) {
    fcclTcpPendingRefuse(pending, i, fcclLogWarn, "claims rank %d and cannot prove the secret", (int)hello.rank);
    return 0;
  }
  struct fcclWireRingHello ack = {.rank = rank, .nranks = n};
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_RING_HELLO_BYTES];
  if (fcclTcpRingMac(s->t->secret, FCCL_WIRE_RING_ACK, nonceOf(s, prev), rank, n, ack.mac) != fcclSuccess ||
      !fcclTcpSendFresh(pending->conns[i].fd, frame, fcclWireEncodeRingHello(frame, FCCL_WIRE_RING_ACK, &ack))) {
    fcclTcpPendingRefuse(pending, i, fcclLogWarn, "rank %d's ring connection did not take this rank's ack", prev);
    return 0;
  }
  s->t->fdPrev = fcclTcpPendingTake(pending, i);
  return 1;
}

/* A whole frame from next during the setup: its ack (1 once checked), or an error notice. */
static fcclResult_t ringNextFrame(const struct ringSetup* s, struct fcclWireReader* reader, int* acked) {
  const int n = s->b->nranks, rank = s->b->rank, next = (rank + 1) % n;
  const uint8_t* payload = reader->buf + FCCL_WIRE_HEADER_BYTES;
  if (reader->header.type == FCCL_WIRE_ERROR)
    return fcclTcpRingRelay(s->t, rank, 0, payload, reader->header.length, next, "ring setup");
  struct fcclWireRingHello ack;
  char why[256];
  uint8_t expected[FCCL_WIRE_MAC_BYTES];
  if (*acked || reader->header.type != FCCL_WIRE_RING_ACK ||
      fcclWireParseRingHello(payload, reader->header.length, &ack, why, sizeof(why)) != FCCL_WIRE_OK ||
      ack.rank != next || ack.nranks != n)
    return fcclTcpRingFail(s->t, rank, fcclRemoteError, next, 0, "rank %d sent an unexpected %s during ring setup",
                           next, *acked ? "message" : "reply to the ring hello");
  FCCLCHECK(fcclTcpRingMac(s->t->secret, FCCL_WIRE_RING_ACK, nonceOf(s, rank), next, n, expected));
  if (!fcclMacEqual(expected, ack.mac))
    return fcclTcpRingFail(s->t, rank, fcclRemoteError, next, 0,
                           "the listener of rank %d cannot prove the communicator's secret (it is not rank %d's)", next,
                           next);
  *acked = 1;
  fcclWireReaderInit(reader);
  return fcclSuccess;
}

/*
 * Accepts connections until one is prev's ring hello with its proof, and reads next's ack of our own hello. Strangers
 * are refused (tcp.h: they never take prev's place); a connection to next closed before its ack was taken for a
 * stranger's by next's listener, and is made again.
 */
static fcclResult_t ringSetupLoop(const struct ringSetup* s, int listenFd) {
  struct fcclBootstrap* b = s->b;
  struct fcclTcpState* t = s->t;
  const int n = b->nranks, rank = b->rank, prev = (rank - 1 + n) % n, next = (rank + 1) % n;
  struct fcclTcpPending* pending = malloc(sizeof(*pending));
  if (!pending) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for the ring setup");
  char owner[48];
  snprintf(owner, sizeof(owner), "rank %d's ring listener", rank);
  fcclTcpPendingInit(pending, listenFd, owner);
  fcclResult_t res = fcclSuccess;
  struct fcclWireReader fromNext;
  fcclWireReaderInit(&fromNext);
  int acked = 0;

  /* Until prev is in and next acked, and no frame from next is half read (the operations read from a boundary). */
  while (t->fdPrev < 0 || !acked || fromNext.got > 0) {
    int64_t now = fcclTimeMs();
    for (int i = pending->count - 1; i >= 0 && t->fdPrev < 0; i--) ringHandlePending(s, pending, i);
    /* New connections, each read at once: prev's ring hello is usually there by the time it is accepted. */
    for (int accepted = 0; t->fdPrev < 0 && accepted < 2 * FCCL_TCP_PENDING_MAX; accepted++) {
      int i = fcclTcpPendingAccept(pending, now);
      if (i < 0) break;
      ringHandlePending(s, pending, i);
    }
    fcclTcpPendingExpire(pending, now);

    int err = 0;
    fcclWireStatus_t status;
    char why[256];
    fcclWireReadResult_t rr = fcclWireReaderProgress(&fromNext, t->fdNext, &err, &status, why, sizeof(why));
    if (rr == FCCL_READ_FRAME) {
      FCCLCHECKGOTO(ringNextFrame(s, &fromNext, &acked), res, out);
      continue;
    }
    if ((rr == FCCL_READ_CLOSED || rr == FCCL_READ_ERROR) && !acked) {
      fcclSocketClose(&t->fdNext); /* next's listener closed it unread: connect again */
      pauseMs(RECONNECT_PAUSE_MS);
      fcclWireReaderInit(&fromNext);
      FCCLCHECKGOTO(connectNext(s), res, out);
      continue;
    }
    if (rr == FCCL_READ_CLOSED || rr == FCCL_READ_ERROR || rr == FCCL_READ_MALFORMED) {
      res = fcclTcpRingFail(t, rank, fcclRemoteError, next, 0, "rank %d closed its connection during ring setup%s%s",
                            next, rr == FCCL_READ_MALFORMED ? ": " : "", rr == FCCL_READ_MALFORMED ? why : "");
      goto out;
    }
    if (t->fdPrev >= 0 && acked && fromNext.got == 0) break;
    if (fcclAborted(b->abortFlag)) {
      res = fcclTcpRingFail(t, rank, fcclInvalidUsage, rank, 1, "rank %d aborted (fcclCommAbort) during ring setup",
                            rank);
      goto out;
    }
    if (now >= s->deadline) {
      if (t->fdPrev < 0)
        res = fcclTcpRingFail(t, rank, fcclTimeout, prev, 1,
                              "rank %d did not connect to rank %d within the bootstrap timeout of %d ms after the "
                              "rendezvous",
                              prev, rank, b->timeoutMs);
      else
        res = fcclTcpRingFail(t, rank, fcclTimeout, next, 1,
                              "rank %d did not acknowledge rank %d's ring connection within the bootstrap timeout "
                              "of %d ms",
                              next, rank, b->timeoutMs);
      goto out;
    }
    struct pollfd fds[2 + FCCL_TCP_PENDING_MAX];
    nfds_t nfds = t->fdPrev < 0 ? (nfds_t)fcclTcpPendingPollFds(pending, fds, now) : 0;
    fds[nfds++] = (struct pollfd){.fd = t->fdNext, .events = POLLIN};
    int64_t left = s->deadline - now;
    (void)poll(fds, nfds, left < FCCL_SOCKET_POLL_SLICE_MS ? (int)left : FCCL_SOCKET_POLL_SLICE_MS);
  }
out:
  fcclTcpPendingClose(pending);
  free(pending);
  return res;
}

/* On a failure during ring setup, tells whoever already connected to us (our prev, queued) so it stops waiting. */
static void notifyQueued(int listenFd, int rank, int culprit, fcclResult_t result) {
  const char* text = fcclThreadLastError();
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX];
  size_t size = fcclTcpEncodeErrorFrame(frame, result, culprit, rank, text);
  for (int i = 0; i < FCCL_TCP_PENDING_MAX; i++) {
    int fd;
    union fcclSocketAddress peer;
    if (fcclSocketAcceptPending(listenFd, &fd, &peer) != fcclSuccess || fd < 0) return;
    fcclTcpSendNotice(fd, frame, size);
    fcclTcpDrainAndClose(&fd);
  }
}

fcclResult_t fcclBootstrapCheckUniqueId(const fcclUniqueId* id) {
  struct fcclWireId wid;
  char why[256];
  if (id == NULL) return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "NULL unique id");
  if (fcclWireParseId((const uint8_t*)id->internal, FCCL_UNIQUE_ID_BYTES, &wid, why, sizeof(why)) != FCCL_WIRE_OK)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "invalid unique id: %s", why);
  return fcclSuccess;
}

fcclResult_t fcclBootstrapTcpInit(const fcclUniqueId* id, int rank, int nranks, int timeoutMs, volatile int* abortFlag,
                                  struct fcclBootstrap** out) {
  if (id == NULL || out == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "bootstrap: NULL unique id or output");
  if (nranks < 1 || nranks > FCCL_BOOTSTRAP_MAX_RANKS)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "nranks %d outside 1..%d", nranks,
                      FCCL_BOOTSTRAP_MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "rank %d outside 0..%d", rank, nranks - 1);
  if (timeoutMs <= 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "bootstrap timeout %d ms is not positive", timeoutMs);
  struct fcclWireId wid;
  char why[256];
  fcclWireStatus_t status = fcclWireParseId((const uint8_t*)id->internal, FCCL_UNIQUE_ID_BYTES, &wid, why, sizeof(why));
  if (status != FCCL_WIRE_OK) return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "invalid unique id: %s", why);
  FCCLCHECK(fcclCryptoCheck());

  fcclResult_t res = fcclSuccess;
  const int64_t start = fcclTimeMs();
  const int64_t deadline = start + timeoutMs;
  /* A host that stops answering ends its connections within the keepalive, not at the timeout. */
  const int64_t keepaliveMs = fcclParamInt(FCCL_PARAM_PEER_KEEPALIVE_MS);
  int listenFd = -1;
  uint8_t* welcome = NULL;
  union fcclSocketAddress* addrs = NULL;
  uint8_t* nonces = NULL;
  struct fcclBootstrap* b = calloc(1, sizeof(*b));
  struct fcclTcpState* t = calloc(1, sizeof(*t));
  char rootText[FCCL_SOCKET_ADDR_STR];
  fcclSocketAddrToString(&wid.rootAddr, rootText, sizeof(rootText));
  struct rootLink link = {.wid = &wid, .rootText = rootText, .rank = rank, .abortFlag = abortFlag, .fd = -1};
  if (!b || !t) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for the bootstrap");
    goto fail;
  }
  t->fdNext = t->fdPrev = -1;
  memcpy(t->secret, wid.secret, sizeof(t->secret));
  b->ops = &fcclTcpRingOps;
  b->rank = rank;
  b->nranks = nranks;
  b->timeoutMs = timeoutMs;
  b->abortFlag = abortFlag;
  b->pid = (int)getpid();
  b->impl = t;

  /* 1. The hello; our ring listener sits on the address we reach the root from. */
  struct fcclWireHello hello;
  memset(&hello, 0, sizeof(hello));
  FCCLCHECKGOTO(fcclRandomBytes(hello.nonce, sizeof(hello.nonce), "this rank's bootstrap nonce"), res, fail);
  FCCLCHECKGOTO(fcclSocketConnect(&wid.rootAddr, deadline, abortFlag, 1, "the bootstrap root", &link.fd), res, fail);
  if (nranks > 1) {
    union fcclSocketAddress local, bound;
    socklen_t length = sizeof(local);
    if (getsockname(link.fd, &local.sa, &length) != 0) {
      res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "getsockname failed: %s", strerror(errno));
      goto fail;
    }
    local.sin.sin_port = 0; /* same offset as sin6_port */
    FCCLCHECKGOTO(fcclSocketListen(&local, &listenFd, &bound), res, fail);
    hello.listenAddr = bound;
  }
  hello.rank = rank;
  hello.nranks = nranks;
  hello.timeoutMs = timeoutMs;
  hello.pid = (int32_t)getpid();
  localHostName(hello.host, sizeof(hello.host));
  uint8_t helloFrame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES];
  fcclWireEncodeHello(helloFrame, &hello);

  /* 2. Every rank's address and nonce, or the root's verdict. */
  struct fcclWireHeader header;
  const int64_t verdictDeadline = deadline + fcclTcpGraceMs(timeoutMs);
  FCCLCHECKGOTO(joinRoot(&link, t->secret, helloFrame, deadline, verdictDeadline, keepaliveMs, &header, &welcome), res,
                fail);
  addrs = calloc((size_t)nranks, sizeof(*addrs));
  nonces = malloc((size_t)nranks * FCCL_WIRE_NONCE_BYTES);
  if (!addrs || !nonces) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for %d addresses", nranks);
    goto fail;
  }
  int count = 0;
  if (fcclWireParseWelcome(welcome, header.length, addrs, nonces, nranks, &count, why, sizeof(why)) != FCCL_WIRE_OK ||
      count != nranks || memcmp(nonces + (size_t)rank * FCCL_WIRE_NONCE_BYTES, hello.nonce, sizeof(hello.nonce))) {
    res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT, "rank %d: invalid welcome from the bootstrap root: %s", rank,
                     count != nranks ? "wrong number of ranks" : why);
    goto fail;
  }
  fcclSocketClose(&link.fd); /* we close first; the root resets its end, so no TIME_WAIT is left behind */

  /* 3. The ring: connect to next (its listener exists since before its hello), then accept prev. */
  if (nranks > 1) {
    const struct ringSetup setup = {.b = b, .t = t, .addrs = addrs, .nonces = nonces, .deadline = deadline};
    res = connectNext(&setup);
    if (res != fcclSuccess) {
      notifyQueued(listenFd, rank, (rank + 1) % nranks, res);
      goto fail;
    }
    res = ringSetupLoop(&setup, listenFd);
    if (res != fcclSuccess) {
      notifyQueued(listenFd, rank, (rank - 1 + nranks) % nranks, res);
      goto fail;
    }
    fcclSocketClose(&listenFd);
    /* The receiving end gets the kernel's user timeout: it only ever sends small notices, so a closed window never
     * stalls it. The sending end must not (socket.h: a live rank slow to read would abort it). */
    fcclSocketSetKeepalive(t->fdNext, keepaliveMs, 0);
    fcclSocketSetKeepalive(t->fdPrev, keepaliveMs, 1);
  }
  /* The root (when it runs in this process) has finished or is about to: every rank had its welcome. */
  fcclTcpRootClaim(wid.secret);
  free(welcome);
  free(addrs);
  free(nonces);
  FCCL_INFO(FCCL_SUBSYS_BOOT, "rank %d of %d: tcp bootstrap through %s ready in %lld ms", rank, nranks, rootText,
            (long long)(fcclTimeMs() - start));
  *out = b;
  return fcclSuccess;

fail:
  fcclSocketClose(&listenFd);
  fcclSocketClose(&link.fd);
  free(welcome);
  free(addrs);
  free(nonces);
  if (t) {
    fcclSocketClose(&t->fdNext);
    fcclSocketClose(&t->fdPrev);
  }
  free(t);
  free(b);
  return res;
}
