/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TCP bootstrap's rank side: a rank says hello to the root and waits for its welcome (or its verdict), then
 * connects to the next rank and accepts the previous one, and runs all-gathers and barriers around that ring.
 * A rank that fails tells both neighbours, which pass it on. tcp.h has the method's outline;
 * docs/bootstrap.md#all-gather-and-barrier-on-the-ring and docs/bootstrap.md#failures the details.
 */
#include "bootstrap.h"

#include "check.h"
#include "debug.h"
#include "param.h"
#include "socket.h"
#include "tcp.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* A rank waits for the root's verdict a little longer than the root waits for the ranks, so that the root (which
 * knows who is missing) reports first (docs/bootstrap.md#failures). */
static int verdictGraceMs(int timeoutMs) {
  int grace = timeoutMs / 4 + 100;
  return grace > 2000 ? 2000 : grace;
}

/* This host's name for the hello: NUL-terminated and printable, as the root's hello parser requires. */
static void localHostName(char* out, size_t size) {
  if (gethostname(out, size) != 0) snprintf(out, size, "unknown");
  out[size - 1] = '\0';
  for (char* p = out; *p; p++)
    if (*p < 0x20 || *p > 0x7e) *p = '?';
}

struct tcpState {
  int fdNext; /* to (rank + 1) % nranks: we send */
  int fdPrev; /* from (rank - 1) % nranks: we receive */
  uint64_t secret;
  uint32_t seq;
  fcclResult_t broken; /* an earlier operation failed: the ring is out of step */
};

static const char* opName(uint16_t type) {
  switch (type) {
    case FCCL_WIRE_ALLGATHER: return "all-gather";
    case FCCL_WIRE_BARRIER: return "barrier";
    case FCCL_WIRE_ERROR: return "error notice";
    case FCCL_WIRE_HELLO: return "hello";
    case FCCL_WIRE_WELCOME: return "welcome";
    case FCCL_WIRE_RING_HELLO: return "ring hello";
  }
  return "unknown message";
}

/*
 * Reports a failure once (FCCL_ERROR), and tells the ring neighbours so they stop waiting and name the same
 * culprit. toNext: whether the stream to next is at a frame boundary (a notice mid-frame would be read as data).
 * docs/bootstrap.md#failures has what each failure looks like to the other ranks.
 */
static fcclResult_t ringFail(struct tcpState* t, int rank, fcclResult_t result, int culprit, int toNext,
                             const char* fmt, ...) __attribute__((format(printf, 6, 7)));
static fcclResult_t ringFail(struct tcpState* t, int rank, fcclResult_t result, int culprit, int toNext,
                             const char* fmt, ...) {
  char text[FCCL_WIRE_ERROR_TEXT_MAX];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  /* An abort (fcclInvalidUsage naming ourselves) is this rank's own doing; to the others it is a peer gone. */
  fcclResult_t notice = result == fcclInvalidUsage && culprit == rank ? fcclRemoteError : result;
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX];
  size_t size = fcclTcpEncodeErrorFrame(frame, notice, culprit, rank, text);
  if (toNext) fcclTcpSendNotice(t->fdNext, frame, size);
  fcclTcpSendNotice(t->fdPrev, frame, size);
  t->broken = result;
  return FCCL_ERROR(result, FCCL_SUBSYS_BOOT, "%s", text);
}

/* An error frame arrived (payload in buf); pass it on and report it. */
static fcclResult_t ringRelay(struct tcpState* t, int rank, int toNext, const uint8_t* payload, size_t size,
                              int from, const char* op) {
  struct fcclWireError error;
  char why[256];
  if (fcclWireParseError(payload, size, &error, why, sizeof(why)) != FCCL_WIRE_OK)
    return ringFail(t, rank, fcclRemoteError, from, toNext, "rank %d sent a malformed error notice during %s: %s",
                    from, op, why);
  if (error.reporter == rank) { /* our own notice came around the ring */
    t->broken = (fcclResult_t)error.result;
    return FCCL_ERROR((fcclResult_t)error.result, FCCL_SUBSYS_BOOT, "%s", error.text);
  }
  /* Relay as is: the text already names the culprit and the reporter. */
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX];
  size_t frameSize = fcclWireEncodeError(frame, &error);
  if (toNext) fcclTcpSendNotice(t->fdNext, frame, frameSize);
  fcclTcpSendNotice(t->fdPrev, frame, frameSize);
  t->broken = (fcclResult_t)error.result;
  return FCCL_ERROR((fcclResult_t)error.result, FCCL_SUBSYS_BOOT, "%s (reported by rank %d)", error.text,
                    (int)error.reporter);
}

/*
 * One all-gather (data: nranks chunks of bytes, ours in place) or barrier (bytes 0) around the ring, in n - 1
 * steps: step s sends the chunk of rank - s to next and receives the chunk of rank - s - 1 from prev, straight
 * into place. Sends and receives are non-blocking and interleaved (a step's send needs only the previous step's
 * receive), so chunks larger than the socket buffers cannot deadlock the ring. Every frame carries the type, the
 * sequence number and the length, so ranks that called different operations (or all-gathers of different sizes)
 * fail instead of mixing their data. docs/bootstrap.md#all-gather-and-barrier-on-the-ring
 */
static fcclResult_t ringOp(struct fcclBootstrap* b, uint16_t type, uint8_t* data, size_t bytes) {
  struct tcpState* t = b->impl;
  const int n = b->nranks, rank = b->rank;
  const int prev = (rank - 1 + n) % n, next = (rank + 1) % n;
  const char* op = opName(type);
  if (t->broken != fcclSuccess)
    return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                      "bootstrap %s after an earlier bootstrap failure: the communicator cannot be used", op);
  if (bytes > FCCL_WIRE_MAX_DATA_BYTES)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "bootstrap all-gather of %zu bytes per rank (limit %u)",
                      bytes, FCCL_WIRE_MAX_DATA_BYTES);
  const uint32_t seq = ++t->seq;
  const int steps = n - 1;
  const int64_t deadline = fcclTimeMs() + b->timeoutMs;

  uint8_t sendHeader[FCCL_WIRE_HEADER_BYTES];
  fcclWireEncodeHeader(sendHeader, type, (uint32_t)bytes, seq);
  int sendStep = 0;
  size_t sendOff = 0; /* within the current frame: header, then chunk */
  int recvStep = 0;
  size_t recvOff = 0;
  uint8_t recvHeader[FCCL_WIRE_HEADER_BYTES];
  int recvIsError = 0;
  uint8_t errorPayload[FCCL_WIRE_SMALL_MAX];
  struct fcclWireReader backward; /* error notices from next */
  fcclWireReaderInit(&backward);
  const size_t frameSize = FCCL_WIRE_HEADER_BYTES + bytes;

  while (sendStep < steps || recvStep < steps) {
    int progressed = 0;
    /* Send: step s forwards the chunk received at step s - 1 (step 0: our own). */
    while (sendStep < steps && sendStep <= recvStep) {
      int chunk = (rank - sendStep + n) % n;
      struct iovec iov[2];
      int iovcnt = 0;
      if (sendOff < FCCL_WIRE_HEADER_BYTES)
        iov[iovcnt++] = (struct iovec){.iov_base = sendHeader + sendOff, .iov_len = FCCL_WIRE_HEADER_BYTES - sendOff};
      size_t dataOff = sendOff > FCCL_WIRE_HEADER_BYTES ? sendOff - FCCL_WIRE_HEADER_BYTES : 0;
      if (bytes > dataOff)
        iov[iovcnt++] = (struct iovec){.iov_base = data + (size_t)chunk * bytes + dataOff, .iov_len = bytes - dataOff};
      struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
      ssize_t rc;
      do {
        rc = sendmsg(t->fdNext, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      } while (rc < 0 && errno == EINTR);
      if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (rc < 0 && errno == ETIMEDOUT)
        return ringFail(t, rank, fcclRemoteError, next, 0,
                        "rank %d stopped answering (its connection's keepalive failed) during bootstrap %s #%u", next,
                        op, seq);
      if (rc < 0)
        return ringFail(t, rank, fcclRemoteError, next, 0,
                        "rank %d closed its connection: sending to it failed during bootstrap %s #%u (%s)", next, op,
                        seq, strerror(errno));
      sendOff += (size_t)rc;
      progressed = 1;
      if (sendOff == frameSize) {
        sendStep++;
        sendOff = 0;
      }
    }
    /* Receive: header, then the chunk straight into place (or an error notice). */
    while (recvStep < steps) {
      uint8_t* dst;
      size_t want;
      if (recvOff < FCCL_WIRE_HEADER_BYTES) {
        dst = recvHeader + recvOff;
        want = FCCL_WIRE_HEADER_BYTES - recvOff;
      } else if (recvIsError) {
        struct fcclWireHeader h;
        (void)fcclWireParseHeader(recvHeader, FCCL_WIRE_HEADER_BYTES, &h, NULL, 0);
        size_t off = recvOff - FCCL_WIRE_HEADER_BYTES;
        if (off == h.length)
          return ringRelay(t, rank, sendOff == 0, errorPayload, h.length, prev, op);
        dst = errorPayload + off;
        want = h.length - off;
      } else {
        size_t off = recvOff - FCCL_WIRE_HEADER_BYTES;
        want = bytes - off;
        if (want == 0) {
          recvStep++;
          recvOff = 0;
          progressed = 1;
          continue;
        }
        int chunk = (rank - recvStep - 1 + 2 * n) % n;
        dst = data + (size_t)chunk * bytes + off;
      }
      long rc = fcclSocketTryRecv(t->fdPrev, dst, want);
      if (rc == 0)
        return ringFail(t, rank, fcclRemoteError, prev, sendOff == 0,
                        "rank %d closed its connection during bootstrap %s #%u", prev, op, seq);
      if (rc < 0 && errno == EAGAIN) break;
      if (rc < 0 && errno == ETIMEDOUT)
        return ringFail(t, rank, fcclRemoteError, prev, sendOff == 0,
                        "rank %d stopped answering (its connection's keepalive failed) during bootstrap %s #%u", prev,
                        op, seq);
      if (rc < 0)
        return ringFail(t, rank, fcclRemoteError, prev, sendOff == 0,
                        "receiving from rank %d failed during bootstrap %s #%u: %s%s", prev, op, seq,
                        strerror(errno), errno == ECONNRESET ? " (it closed its connection)" : "");
      progressed = 1;
      recvOff += (size_t)rc;
      if (recvOff == FCCL_WIRE_HEADER_BYTES) {
        struct fcclWireHeader h;
        char why[256];
        fcclWireStatus_t status = fcclWireParseHeader(recvHeader, FCCL_WIRE_HEADER_BYTES, &h, why, sizeof(why));
        if (status != FCCL_WIRE_OK)
          return ringFail(t, rank, fcclRemoteError, prev, sendOff == 0,
                          "rank %d sent a malformed frame during bootstrap %s #%u: %s", prev, op, seq, why);
        if (h.type == FCCL_WIRE_ERROR) {
          if (h.length > FCCL_WIRE_SMALL_MAX)
            return ringFail(t, rank, fcclRemoteError, prev, sendOff == 0, "rank %d sent an oversized error notice",
                            prev);
          recvIsError = 1;
          continue;
        }
        if (h.type != type || h.seq != seq || h.length != bytes)
          return ringFail(t, rank, fcclInvalidUsage, prev, sendOff == 0,
                          "rank %d sent %s #%u of %u bytes while this rank is in %s #%u of %zu bytes: the ranks "
                          "called different bootstrap operations",
                          prev, opName(h.type), h.seq, h.length, op, seq, bytes);
      }
    }
    if (sendStep == steps && recvStep == steps) break;

    /* Backward notices: next only ever sends us an error; its closing matters only while we still owe it data. */
    if (sendStep < steps) {
      int err = 0;
      fcclWireStatus_t status;
      char why[256];
      fcclWireReadResult_t rr = fcclWireReaderProgress(&backward, t->fdNext, &err, &status, why, sizeof(why));
      if (rr == FCCL_READ_FRAME) {
        if (backward.header.type == FCCL_WIRE_ERROR)
          return ringRelay(t, rank, 0, backward.buf + FCCL_WIRE_HEADER_BYTES, backward.header.length, next, op);
        return ringFail(t, rank, fcclRemoteError, next, 0, "rank %d sent an unexpected %s backwards during %s", next,
                        opName(backward.header.type), op);
      }
      if (rr == FCCL_READ_CLOSED || rr == FCCL_READ_ERROR)
        return ringFail(t, rank, fcclRemoteError, next, 0,
                        "rank %d closed its connection during bootstrap %s #%u", next, op, seq);
      if (rr == FCCL_READ_MALFORMED)
        return ringFail(t, rank, fcclRemoteError, next, 0, "rank %d sent a malformed frame backwards: %s", next, why);
    }
    if (progressed) continue;

    if (fcclAborted(b->abortFlag))
      return ringFail(t, rank, fcclInvalidUsage, rank, sendOff == 0, "rank %d aborted (fcclCommAbort) during %s", rank,
                      op);
    int64_t now = fcclTimeMs();
    if (now >= deadline) {
      if (recvStep < steps) {
        /* Step s brings the data of rank - s - 1. The data of ranks rank-1 .. rank-s came, so those ranks entered
         * this operation and pass on what they get: the nearest rank not heard from is the one that is stuck. */
        int missing = (rank - recvStep - 1 + 2 * n) % n;
        if (recvStep == 0)
          return ringFail(t, rank, fcclTimeout, missing, sendOff == 0,
                          "rank %d did not reach bootstrap %s #%u within %d ms (it is stuck, or has not called it)",
                          missing, op, seq, b->timeoutMs);
        return ringFail(t, rank, fcclTimeout, missing, sendOff == 0,
                        "rank %d did not reach bootstrap %s #%u within %d ms (it is stuck, or has not called it; "
                        "ranks %d..%d before this rank in the ring did)",
                        missing, op, seq, b->timeoutMs, (rank - recvStep + n) % n, prev);
      }
      return ringFail(t, rank, fcclTimeout, next, 0,
                      "timed out after %d ms in bootstrap %s #%u sending to rank %d, which does not read", b->timeoutMs,
                      op, seq, next);
    }
    /* A socket this rank is done with is left out (fd -1), not polled for no events: poll would still report its
     * peer's reset (POLLHUP, POLLERR) at once, every slice, and this loop would spin until the deadline. */
    struct pollfd fds[2];
    fds[0] = (struct pollfd){.fd = sendStep < steps ? t->fdNext : -1,
                             .events = (short)(POLLIN | (sendStep <= recvStep ? POLLOUT : 0))};
    fds[1] = (struct pollfd){.fd = recvStep < steps ? t->fdPrev : -1, .events = POLLIN};
    int64_t left = deadline - now;
    (void)poll(fds, 2, left < FCCL_SOCKET_POLL_SLICE_MS ? (int)left : FCCL_SOCKET_POLL_SLICE_MS);
  }
  return fcclSuccess;
}

static fcclResult_t tcpAllGather(struct fcclBootstrap* b, void* allData, size_t bytesPerRank) {
  return ringOp(b, FCCL_WIRE_ALLGATHER, allData, bytesPerRank);
}

static fcclResult_t tcpBarrier(struct fcclBootstrap* b) { return ringOp(b, FCCL_WIRE_BARRIER, NULL, 0); }

static void tcpDestroy(struct fcclBootstrap* b) {
  struct tcpState* t = b->impl;
  if (t) {
    fcclSocketClose(&t->fdNext);
    fcclSocketClose(&t->fdPrev);
    free(t);
  }
  free(b);
}

/* The address of our end of the ring: the one we reach the root and the other ranks from. */
static int tcpLocalAddress(const struct fcclBootstrap* b, void* addr) {
  const struct tcpState* t = b->impl;
  const int fd = t == NULL ? -1 : t->fdNext >= 0 ? t->fdNext : t->fdPrev;
  if (fd < 0) return -1;
  union fcclSocketAddress* local = addr;
  socklen_t length = sizeof(*local);
  if (getsockname(fd, &local->sa, &length) != 0) return -1;
  local->sin.sin_port = 0; /* same offset as sin6_port */
  return 0;
}

static const struct fcclBootstrapOps tcpOps = {.name = "tcp",
                                               .allGather = tcpAllGather,
                                               .barrier = tcpBarrier,
                                               .destroy = tcpDestroy,
                                               .localAddress = tcpLocalAddress};

/* Receives one frame from the root: the welcome (payload malloc'ed) or an error, whose text is reported. */
static fcclResult_t recvFromRoot(int fd, const char* rootText, int64_t deadline, volatile int* abortFlag, int rank,
                                 struct fcclWireHeader* header, uint8_t** payload) {
  uint8_t buf[FCCL_WIRE_HEADER_BYTES];
  size_t got = 0;
  uint8_t* body = NULL;
  size_t bodyGot = 0;
  *payload = NULL;
  for (;;) {
    size_t want;
    uint8_t* dst;
    if (got < FCCL_WIRE_HEADER_BYTES) {
      dst = buf + got;
      want = FCCL_WIRE_HEADER_BYTES - got;
    } else {
      if (bodyGot == header->length) break;
      dst = body + bodyGot;
      want = header->length - bodyGot;
    }
    long rc = fcclSocketTryRecv(fd, dst, want);
    if (rc == 0) {
      free(body);
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                        "rank %d: the bootstrap root at %s closed the connection before every rank arrived (the "
                        "process that called fcclGetUniqueId exited, or stopped serving the id)",
                        rank, rootText);
    }
    if (rc < 0 && errno != EAGAIN) {
      free(body);
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                        "rank %d: receiving from the bootstrap root at %s failed: %s", rank, rootText, strerror(errno));
    }
    if (rc > 0) {
      if (got < FCCL_WIRE_HEADER_BYTES) {
        got += (size_t)rc;
        if (got == FCCL_WIRE_HEADER_BYTES) {
          char why[256];
          if (fcclWireParseHeader(buf, got, header, why, sizeof(why)) != FCCL_WIRE_OK)
            return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                              "rank %d: the bootstrap root at %s sent a malformed reply: %s", rank, rootText, why);
          if (header->type != FCCL_WIRE_WELCOME && header->type != FCCL_WIRE_ERROR)
            return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                              "rank %d: the bootstrap root at %s replied with a %s instead of a welcome", rank,
                              rootText, opName(header->type));
          body = malloc(header->length ? header->length : 1);
          if (!body) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for the bootstrap welcome");
        }
      } else {
        bodyGot += (size_t)rc;
      }
      continue;
    }
    if (fcclAborted(abortFlag)) {
      free(body);
      return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT,
                        "rank %d: aborted (fcclCommAbort) while waiting for the other ranks to arrive", rank);
    }
    if (fcclTimeMs() >= deadline) {
      free(body);
      return FCCL_ERROR(fcclTimeout, FCCL_SUBSYS_BOOT,
                        "rank %d: timed out waiting for the bootstrap root at %s to hear from every rank (the root "
                        "did not answer: is it stuck?)",
                        rank, rootText);
    }
    struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
    (void)poll(&p, 1, FCCL_SOCKET_POLL_SLICE_MS);
  }
  *payload = body;
  return fcclSuccess;
}

/* Reads connection i of the ring listener: 1 when it is prev's valid ring hello (t->fdPrev is then set). */
static int ringHandlePending(struct fcclBootstrap* b, struct tcpState* t, struct fcclTcpPending* pending, int i,
                             int64_t now) {
  const int n = b->nranks, prev = (b->rank - 1 + n) % n;
  struct fcclWireRingHello hello;
  if (!fcclTcpPendingReadHello(pending, i, now, t->secret, "ring hello", &hello)) return 0;
  if (hello.nranks != n || hello.rank != prev) {
    fcclTcpPendingRefuse(pending, i, fcclLogWarn, "rank %d of %d connected where rank %d of %d belongs",
                         (int)hello.rank, (int)hello.nranks, prev, n);
    return 0;
  }
  t->fdPrev = fcclTcpPendingTake(pending, i);
  return 1;
}

/*
 * Accepts connections until one is a valid ring hello from prev. Strangers are refused (tcp.h: they never take
 * prev's place); the connection to next is watched for an error notice (or its closing) meanwhile.
 */
static fcclResult_t acceptPrev(struct fcclBootstrap* b, struct tcpState* t, int listenFd, int64_t deadline) {
  const int n = b->nranks, rank = b->rank, prev = (rank - 1 + n) % n, next = (rank + 1) % n;
  struct fcclTcpPending* pending = malloc(sizeof(*pending));
  if (!pending) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for the ring setup");
  char owner[48];
  snprintf(owner, sizeof(owner), "rank %d's ring listener", rank);
  fcclTcpPendingInit(pending, listenFd, owner);
  fcclResult_t res = fcclSuccess;
  struct fcclWireReader backward;
  fcclWireReaderInit(&backward);

  while (t->fdPrev < 0) {
    int64_t now = fcclTimeMs();
    for (int i = pending->count - 1; i >= 0 && t->fdPrev < 0; i--) ringHandlePending(b, t, pending, i, now);
    /* New connections, each read at once: prev's ring hello is usually there by the time it is accepted. */
    for (int accepted = 0; t->fdPrev < 0 && accepted < 2 * FCCL_TCP_PENDING_MAX; accepted++) {
      int i = fcclTcpPendingAccept(pending, now);
      if (i < 0) {
        int before = pending->count;
        fcclTcpPendingEvict(pending, now); /* a full table with more waiting: strangers make room */
        if (pending->count == before) break;
        continue;
      }
      ringHandlePending(b, t, pending, i, now);
    }
    if (t->fdPrev >= 0) break;

    int err = 0;
    fcclWireStatus_t status;
    char why[256];
    fcclWireReadResult_t rr = fcclWireReaderProgress(&backward, t->fdNext, &err, &status, why, sizeof(why));
    if (rr == FCCL_READ_FRAME && backward.header.type == FCCL_WIRE_ERROR) {
      res = ringRelay(t, rank, 0, backward.buf + FCCL_WIRE_HEADER_BYTES, backward.header.length, next, "ring setup");
      goto out;
    }
    if (rr != FCCL_READ_MORE) {
      res = ringFail(t, rank, fcclRemoteError, next, 0,
                     "rank %d closed its connection during ring setup", next);
      goto out;
    }
    if (fcclAborted(b->abortFlag)) {
      res = ringFail(t, rank, fcclInvalidUsage, rank, 1, "rank %d aborted (fcclCommAbort) during ring setup", rank);
      goto out;
    }
    if (now >= deadline) {
      res = ringFail(t, rank, fcclTimeout, prev, 1,
                     "rank %d did not connect to rank %d within the bootstrap timeout of %d ms after the "
                     "rendezvous",
                     prev, rank, b->timeoutMs);
      goto out;
    }
    struct pollfd fds[2 + FCCL_TCP_PENDING_MAX];
    nfds_t nfds = (nfds_t)fcclTcpPendingPollFds(pending, fds, now);
    fds[nfds++] = (struct pollfd){.fd = t->fdNext, .events = POLLIN};
    int64_t left = deadline - now;
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

fcclResult_t fcclBootstrapTcpInit(const fcclUniqueId* id, int rank, int nranks, int timeoutMs,
                                  volatile int* abortFlag, struct fcclBootstrap** out) {
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
  if (status != FCCL_WIRE_OK)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "invalid unique id: %s", why);

  fcclResult_t res = fcclSuccess;
  const int64_t start = fcclTimeMs();
  const int64_t deadline = start + timeoutMs;
  /* A host that stops answering ends its connections within the keepalive, not at the timeout. */
  const int64_t keepaliveMs = fcclParamInt(FCCL_PARAM_PEER_KEEPALIVE_MS);
  int rootFd = -1, listenFd = -1;
  uint8_t* welcome = NULL;
  union fcclSocketAddress* addrs = NULL;
  struct fcclBootstrap* b = calloc(1, sizeof(*b));
  struct tcpState* t = calloc(1, sizeof(*t));
  char rootText[FCCL_SOCKET_ADDR_STR];
  fcclSocketAddrToString(&wid.rootAddr, rootText, sizeof(rootText));
  if (!b || !t) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for the bootstrap");
    goto fail;
  }
  t->fdNext = t->fdPrev = -1;
  t->secret = wid.secret;
  b->ops = &tcpOps;
  b->rank = rank;
  b->nranks = nranks;
  b->timeoutMs = timeoutMs;
  b->abortFlag = abortFlag;
  b->pid = (int)getpid();
  b->impl = t;

  /* 1. Hello to the root; our ring listener sits on the address we reach the root from. */
  FCCLCHECKGOTO(fcclSocketConnect(&wid.rootAddr, deadline, abortFlag, 1, "the bootstrap root", &rootFd), res, fail);
  fcclSocketSetKeepalive(rootFd, keepaliveMs);
  struct fcclWireHello hello;
  memset(&hello, 0, sizeof(hello));
  if (nranks > 1) {
    union fcclSocketAddress local, bound;
    socklen_t length = sizeof(local);
    if (getsockname(rootFd, &local.sa, &length) != 0) {
      res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "getsockname failed: %s", strerror(errno));
      goto fail;
    }
    local.sin.sin_port = 0; /* same offset as sin6_port */
    FCCLCHECKGOTO(fcclSocketListen(&local, &listenFd, &bound), res, fail);
    hello.listenAddr = bound;
  }
  hello.secret = wid.secret;
  hello.rank = rank;
  hello.nranks = nranks;
  hello.timeoutMs = timeoutMs;
  hello.pid = (int32_t)getpid();
  localHostName(hello.host, sizeof(hello.host));
  uint8_t helloFrame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_HELLO_BYTES];
  size_t helloSize = fcclWireEncodeHello(helloFrame, &hello);
  FCCLCHECKGOTO(fcclSocketSendAll(rootFd, helloFrame, helloSize, deadline, abortFlag, "the bootstrap root"), res, fail);

  /* 2. Every rank's address, or the root's verdict. */
  struct fcclWireHeader header;
  const int64_t verdictDeadline = deadline + verdictGraceMs(timeoutMs);
  FCCLCHECKGOTO(recvFromRoot(rootFd, rootText, verdictDeadline, abortFlag, rank, &header, &welcome), res, fail);
  if (header.type == FCCL_WIRE_ERROR) {
    struct fcclWireError error;
    if (fcclWireParseError(welcome, header.length, &error, why, sizeof(why)) != FCCL_WIRE_OK)
      res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT, "rank %d: the bootstrap root sent a malformed error: %s",
                       rank, why);
    else
      res = FCCL_ERROR((fcclResult_t)error.result, FCCL_SUBSYS_BOOT, "rank %d: %s", rank, error.text);
    goto fail;
  }
  addrs = calloc((size_t)nranks, sizeof(*addrs));
  if (!addrs) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for %d addresses", nranks);
    goto fail;
  }
  int count = 0;
  if (fcclWireParseWelcome(welcome, header.length, addrs, nranks, &count, why, sizeof(why)) != FCCL_WIRE_OK ||
      count != nranks) {
    res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT, "rank %d: invalid welcome from the bootstrap root: %s", rank,
                     count != nranks ? "wrong number of ranks" : why);
    goto fail;
  }
  fcclSocketClose(&rootFd); /* we close first; the root resets its end, so no TIME_WAIT is left behind */

  /* 3. The ring: connect to next (its listener exists since before its hello), then accept prev. */
  if (nranks > 1) {
    const int next = (rank + 1) % nranks;
    char what[32];
    snprintf(what, sizeof(what), "rank %d", next);
    res = fcclSocketConnect(&addrs[next], deadline, abortFlag, 0, what, &t->fdNext);
    if (res != fcclSuccess) {
      notifyQueued(listenFd, rank, next, res);
      goto fail;
    }
    struct fcclWireRingHello ringHello = {.secret = wid.secret, .rank = rank, .nranks = nranks};
    uint8_t ringFrame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_RING_HELLO_BYTES];
    size_t ringSize = fcclWireEncodeRingHello(ringFrame, &ringHello);
    res = fcclSocketSendAll(t->fdNext, ringFrame, ringSize, deadline, abortFlag, what);
    if (res != fcclSuccess) {
      notifyQueued(listenFd, rank, next, res);
      goto fail;
    }
    res = acceptPrev(b, t, listenFd, deadline);
    if (res != fcclSuccess) {
      notifyQueued(listenFd, rank, (rank - 1 + nranks) % nranks, res);
      goto fail;
    }
    fcclSocketClose(&listenFd);
    fcclSocketSetKeepalive(t->fdNext, keepaliveMs);
    fcclSocketSetKeepalive(t->fdPrev, keepaliveMs);
  }
  /* The root (when it runs in this process) has finished or is about to: every rank had its welcome. */
  fcclTcpRootClaim(wid.secret);
  free(welcome);
  free(addrs);
  FCCL_INFO(FCCL_SUBSYS_BOOT, "rank %d of %d: tcp bootstrap through %s ready in %lld ms", rank, nranks, rootText,
            (long long)(fcclTimeMs() - start));
  *out = b;
  return fcclSuccess;

fail:
  fcclSocketClose(&listenFd);
  fcclSocketClose(&rootFd);
  free(welcome);
  free(addrs);
  if (t) {
    fcclSocketClose(&t->fdNext);
    fcclSocketClose(&t->fdPrev);
  }
  free(t);
  free(b);
  return res;
}
