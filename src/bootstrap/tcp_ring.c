/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TCP bootstrap's operations: all-gathers and barriers around the ring that tcp_join.c connected. A rank that
 * fails tells both neighbours, which pass it on; a rank whose wait times out first asks its previous rank whether it
 * is waiting too (a probe), so that the rank named is the one that is stuck, not one held up behind it.
 * tcp.h has the method's outline; docs/bootstrap.md#all-gather-and-barrier-on-the-ring and
 * docs/bootstrap.md#failures the details.
 */
#include "bootstrap.h"

#include "check.h"
#include "debug.h"
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

static const char* opName(uint16_t type) {
  switch (type) {
    case FCCL_WIRE_ALLGATHER: return "all-gather";
    case FCCL_WIRE_BARRIER: return "barrier";
    case FCCL_WIRE_ERROR: return "error notice";
    case FCCL_WIRE_HELLO: return "hello";
    case FCCL_WIRE_WELCOME: return "welcome";
    case FCCL_WIRE_RING_HELLO: return "ring hello";
    case FCCL_WIRE_RING_ACK: return "ring ack";
    case FCCL_WIRE_CHALLENGE: return "challenge";
    case FCCL_WIRE_PROOF: return "proof";
    case FCCL_WIRE_PROBE: return "probe";
    case FCCL_WIRE_PROBE_ACK: return "probe ack";
  }
  return "unknown message";
}

fcclResult_t fcclTcpRingFail(struct fcclTcpState* t, int rank, fcclResult_t result, int culprit, int toNext,
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
  if (!t->prevPartial) fcclTcpSendNotice(t->fdPrev, frame, size);
  t->broken = result;
  return FCCL_ERROR(result, FCCL_SUBSYS_BOOT, "%s", text);
}

fcclResult_t fcclTcpRingRelay(struct fcclTcpState* t, int rank, int toNext, const uint8_t* payload, size_t size,
                              int from, const char* op) {
  struct fcclWireError error;
  char why[256];
  if (fcclWireParseError(payload, size, &error, why, sizeof(why)) != FCCL_WIRE_OK)
    return fcclTcpRingFail(t, rank, fcclRemoteError, from, toNext,
                           "rank %d sent a malformed error notice during %s: %s", from, op, why);
  if (error.reporter == rank) { /* our own notice came around the ring */
    t->broken = (fcclResult_t)error.result;
    return FCCL_ERROR((fcclResult_t)error.result, FCCL_SUBSYS_BOOT, "%s", error.text);
  }
  /* Relay as is: the text already names the culprit and the reporter. */
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX];
  size_t frameSize = fcclWireEncodeError(frame, &error);
  if (toNext) fcclTcpSendNotice(t->fdNext, frame, frameSize);
  if (!t->prevPartial) fcclTcpSendNotice(t->fdPrev, frame, frameSize);
  t->broken = (fcclResult_t)error.result;
  return FCCL_ERROR((fcclResult_t)error.result, FCCL_SUBSYS_BOOT, "%s (reported by rank %d)", error.text,
                    (int)error.reporter);
}

/* A small control frame (a probe or its ack) on its way, sent a piece at a time between data frames. */
struct outFrame {
  uint8_t bytes[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_PROBE_BYTES];
  size_t size, sent;
};

static int outPending(const struct outFrame* out) { return out->sent < out->size; }

/* Sends what the socket takes of out; -1 with errno when the connection failed. */
static int outFlush(int fd, struct outFrame* out) {
  if (!outPending(out)) return 0;
  long rc = fcclSocketTrySend(fd, out->bytes + out->sent, out->size - out->sent);
  if (rc < 0) return -1;
  out->sent += (size_t)rc;
  return 0;
}

/*
 * One all-gather (data: nranks chunks of bytes, ours in place) or barrier (bytes 0) around the ring, in n - 1
 * steps: step s sends the chunk of rank - s to next and receives the chunk of rank - s - 1 from prev, straight
 * into place. Sends and receives are non-blocking and interleaved (a step's send needs only the previous step's
 * receive), so chunks larger than the socket buffers cannot deadlock the ring. Every frame carries the type, the
 * sequence number and the length, so ranks that called different operations (or all-gathers of different sizes)
 * fail instead of mixing their data.
 *
 * Who is stuck: a rank whose data stopped coming knows only that prev sent no more; prev may be stuck, or waiting
 * for its own prev, as every rank after a stuck one is. So at its deadline a waiting rank sends prev a probe. A
 * prev that is in this operation and waiting itself answers at once (a probe ack, between two data frames) and
 * probes its own prev in turn; the first rank whose prev does not answer within the grace names it, and that
 * notice travels around the ring to every rank. docs/bootstrap.md#all-gather-and-barrier-on-the-ring
 */
static fcclResult_t ringOp(struct fcclBootstrap* b, uint16_t type, uint8_t* data, size_t bytes) {
  struct fcclTcpState* t = b->impl;
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
  const int probeWaitMs = fcclTcpGraceMs(b->timeoutMs);
  /* After prev answered a probe, the notice naming the stuck rank comes once the probes reached the rank after it
   * and that rank's grace ran out: one grace, plus a hop per rank each way. */
  const int64_t relayWaitMs = 2 * (int64_t)probeWaitMs + 10 * (int64_t)n + 1000;

  uint8_t sendHeader[FCCL_WIRE_HEADER_BYTES];
  fcclWireEncodeHeader(sendHeader, type, (uint32_t)bytes, seq);
  int sendStep = 0;
  size_t sendOff = 0; /* within the current frame: header, then chunk */
  int recvStep = 0;
  size_t recvOff = 0;
  uint8_t recvHeader[FCCL_WIRE_HEADER_BYTES];
  struct fcclWireHeader small; /* an error notice or probe ack arriving from prev */
  int recvSmall = 0;
  uint8_t smallPayload[FCCL_WIRE_SMALL_MAX];
  struct fcclWireReader backward; /* error notices and probes from next */
  fcclWireReaderInit(&backward);
  const size_t frameSize = FCCL_WIRE_HEADER_BYTES + bytes;
  struct outFrame toNext = {.size = 0, .sent = 0}, toPrev = {.size = 0, .sent = 0};
  int nextGone = 0;         /* next closed its connection after we sent it all we owed */
  int64_t probeAt = -1;     /* when this rank probed prev */
  int64_t prevAnswered = 0; /* when prev answered a probe, or sent data after it */

  while (sendStep < steps || recvStep < steps) {
    int progressed = 0;
    /* A probe ack goes between two data frames. */
    if (outPending(&toNext) && sendOff == 0) {
      if (outFlush(t->fdNext, &toNext) < 0)
        return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0,
                               "rank %d closed its connection: sending to it failed during bootstrap %s #%u (%s)", next,
                               op, seq, strerror(errno));
      progressed = 1;
    }
    /* Send: step s forwards the chunk received at step s - 1 (step 0: our own). */
    while (!outPending(&toNext) && sendStep < steps && sendStep <= recvStep) {
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
        return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0,
                               "rank %d stopped answering (its connection's keepalive failed) during bootstrap %s #%u",
                               next, op, seq);
      if (rc < 0)
        return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0,
                               "rank %d closed its connection: sending to it failed during bootstrap %s #%u (%s)", next,
                               op, seq, strerror(errno));
      sendOff += (size_t)rc;
      progressed = 1;
      if (sendOff == frameSize) {
        sendStep++;
        sendOff = 0;
      }
    }
    const int nextAtBoundary = sendOff == 0 && !outPending(&toNext);
    /* A probe to prev goes whole or the connection is no longer at a frame boundary. */
    if (outPending(&toPrev)) {
      (void)outFlush(t->fdPrev, &toPrev); /* a failure shows on the receiving side below */
      t->prevPartial = outPending(&toPrev) && toPrev.sent > 0;
    }
    /* Receive: header, then the chunk straight into place (or an error notice, or a probe ack). */
    while (recvStep < steps) {
      uint8_t* dst;
      size_t want;
      if (recvOff < FCCL_WIRE_HEADER_BYTES) {
        dst = recvHeader + recvOff;
        want = FCCL_WIRE_HEADER_BYTES - recvOff;
      } else if (recvSmall) {
        size_t off = recvOff - FCCL_WIRE_HEADER_BYTES;
        if (off == small.length) {
          if (small.type == FCCL_WIRE_ERROR)
            return fcclTcpRingRelay(t, rank, nextAtBoundary, smallPayload, small.length, prev, op);
          int32_t from;
          char why[128];
          if (fcclWireParseProbe(smallPayload, small.length, &from, why, sizeof(why)) != FCCL_WIRE_OK || from != prev)
            return fcclTcpRingFail(t, rank, fcclRemoteError, prev, nextAtBoundary,
                                   "rank %d sent a malformed probe ack during bootstrap %s #%u", prev, op, seq);
          if (small.seq == seq && probeAt >= 0 && prevAnswered == 0) prevAnswered = fcclTimeMs(); /* else stale */
          recvSmall = 0;
          recvOff = 0;
          progressed = 1;
          continue;
        }
        dst = smallPayload + off;
        want = small.length - off;
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
        return fcclTcpRingFail(t, rank, fcclRemoteError, prev, nextAtBoundary,
                               "rank %d closed its connection during bootstrap %s #%u", prev, op, seq);
      if (rc < 0 && errno == EAGAIN) break;
      if (rc < 0 && errno == ETIMEDOUT)
        return fcclTcpRingFail(t, rank, fcclRemoteError, prev, nextAtBoundary,
                               "rank %d stopped answering (its connection's keepalive failed) during bootstrap %s #%u",
                               prev, op, seq);
      if (rc < 0)
        return fcclTcpRingFail(t, rank, fcclRemoteError, prev, nextAtBoundary,
                               "receiving from rank %d failed during bootstrap %s #%u: %s%s", prev, op, seq,
                               strerror(errno), errno == ECONNRESET ? " (it closed its connection)" : "");
      progressed = 1;
      recvOff += (size_t)rc;
      if (probeAt >= 0 && prevAnswered == 0 && !recvSmall && recvOff > FCCL_WIRE_HEADER_BYTES)
        prevAnswered = fcclTimeMs(); /* data came after the probe: prev is in this operation */
      if (recvOff == FCCL_WIRE_HEADER_BYTES) {
        struct fcclWireHeader h;
        char why[256];
        fcclWireStatus_t status = fcclWireParseHeader(recvHeader, FCCL_WIRE_HEADER_BYTES, &h, why, sizeof(why));
        if (status != FCCL_WIRE_OK)
          return fcclTcpRingFail(t, rank, fcclRemoteError, prev, nextAtBoundary,
                                 "rank %d sent a malformed frame during bootstrap %s #%u: %s", prev, op, seq, why);
        if (h.type == FCCL_WIRE_ERROR || h.type == FCCL_WIRE_PROBE_ACK) {
          if (h.length > FCCL_WIRE_SMALL_MAX)
            return fcclTcpRingFail(t, rank, fcclRemoteError, prev, nextAtBoundary, "rank %d sent an oversized %s", prev,
                                   opName(h.type));
          small = h;
          recvSmall = 1;
          continue;
        }
        if (h.type != type || h.seq != seq || h.length != bytes)
          return fcclTcpRingFail(t, rank, fcclInvalidUsage, prev, nextAtBoundary,
                                 "rank %d sent %s #%u of %u bytes while this rank is in %s #%u of %zu bytes: the "
                                 "ranks called different bootstrap operations",
                                 prev, opName(h.type), h.seq, h.length, op, seq, bytes);
      }
    }
    if (sendStep == steps && recvStep == steps) break;
    const int atBoundary = sendOff == 0 && !outPending(&toNext);

    /* Backward frames: next only ever sends us error notices and probes. Its closing matters only while we still
     * owe it data: done with our sends, we keep reading only for probes (next may be an operation ahead, waiting
     * for us while we wait for prev) and notices, and a closed connection just ends that. */
    while (!nextGone) {
      int err = 0;
      fcclWireStatus_t status;
      char why[256];
      fcclWireReadResult_t rr = fcclWireReaderProgress(&backward, t->fdNext, &err, &status, why, sizeof(why));
      if (rr == FCCL_READ_MORE) break;
      if ((rr == FCCL_READ_CLOSED || rr == FCCL_READ_ERROR) && sendStep == steps) {
        nextGone = 1;
        break;
      }
      if (rr == FCCL_READ_CLOSED || rr == FCCL_READ_ERROR)
        return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0,
                               "rank %d closed its connection during bootstrap %s #%u", next, op, seq);
      if (rr == FCCL_READ_MALFORMED)
        return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0, "rank %d sent a malformed frame backwards: %s", next,
                               why);
      const uint8_t* payload = backward.buf + FCCL_WIRE_HEADER_BYTES;
      if (backward.header.type == FCCL_WIRE_ERROR)
        return fcclTcpRingRelay(t, rank, 0, payload, backward.header.length, next, op);
      int32_t from;
      if (backward.header.type != FCCL_WIRE_PROBE ||
          fcclWireParseProbe(payload, backward.header.length, &from, why, sizeof(why)) != FCCL_WIRE_OK || from != next)
        return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0, "rank %d sent an unexpected %s backwards during %s",
                               next, opName(backward.header.type), op);
      /* Next waits for us, in this operation or (done with it) in the next one: say we are here, and if we wait
       * too, find out for whom. A probe of an operation we have finished is stale. */
      const uint32_t probed = backward.header.seq;
      if ((probed == seq || probed == seq + 1) && !outPending(&toNext)) {
        toNext.size = fcclWireEncodeProbe(toNext.bytes, FCCL_WIRE_PROBE_ACK, probed, rank);
        toNext.sent = 0;
        if (recvStep < steps && probeAt < 0) {
          toPrev.size = fcclWireEncodeProbe(toPrev.bytes, FCCL_WIRE_PROBE, seq, rank);
          toPrev.sent = 0;
          probeAt = fcclTimeMs();
        }
        progressed = 1;
      }
      fcclWireReaderInit(&backward);
    }
    if (progressed) continue;

    if (fcclAborted(b->abortFlag))
      return fcclTcpRingFail(t, rank, fcclInvalidUsage, rank, atBoundary, "rank %d aborted (fcclCommAbort) during %s",
                             rank, op);
    const int64_t now = fcclTimeMs();
    if (now >= deadline && probeAt < 0) {
      if (recvStep == steps)
        return fcclTcpRingFail(t, rank, fcclTimeout, next, 0,
                               "timed out after %d ms in bootstrap %s #%u sending to rank %d, which does not read",
                               b->timeoutMs, op, seq, next);
      toPrev.size = fcclWireEncodeProbe(toPrev.bytes, FCCL_WIRE_PROBE, seq, rank);
      toPrev.sent = 0;
      probeAt = now;
      continue;
    }
    if (probeAt >= 0 && prevAnswered == 0 && now >= probeAt + probeWaitMs) {
      if (recvStep == 0)
        return fcclTcpRingFail(t, rank, fcclTimeout, prev, atBoundary,
                               "rank %d did not reach bootstrap %s #%u within %d ms (it is stuck, or has not called "
                               "it)",
                               prev, op, seq, b->timeoutMs);
      return fcclTcpRingFail(t, rank, fcclTimeout, prev, atBoundary,
                             "rank %d stopped passing data on in bootstrap %s #%u (it passed on %d of %d chunks, then "
                             "did not answer for %d ms: it is stuck)",
                             prev, op, seq, recvStep, steps, probeWaitMs);
    }
    if (prevAnswered > 0 && now >= prevAnswered + relayWaitMs)
      return fcclTcpRingFail(t, rank, fcclTimeout, -1, atBoundary,
                             "timed out after %d ms in bootstrap %s #%u: rank %d and the ranks before it answer, but "
                             "the data did not come and no rank was found stuck (is the operation slower than the "
                             "timeout?)",
                             b->timeoutMs, op, seq, prev);
    /* A socket this rank is done with is left out (fd -1), not polled for no events: poll would still report its
     * peer's reset (POLLHUP, POLLERR) at once, every slice, and this loop would spin until the deadline. */
    const int wantSend = outPending(&toNext) || (sendStep < steps && sendStep <= recvStep);
    struct pollfd fds[2];
    fds[0] = (struct pollfd){.fd = nextGone ? -1 : t->fdNext, .events = (short)(POLLIN | (wantSend ? POLLOUT : 0))};
    fds[1] = (struct pollfd){.fd = recvStep < steps ? t->fdPrev : -1,
                             .events = (short)(POLLIN | (outPending(&toPrev) ? POLLOUT : 0))};
    int64_t wake = probeAt >= 0 ? now + FCCL_SOCKET_POLL_SLICE_MS : deadline;
    int64_t left = wake - now;
    (void)poll(fds, 2, left < FCCL_SOCKET_POLL_SLICE_MS ? (int)(left > 0 ? left : 0) : FCCL_SOCKET_POLL_SLICE_MS);
  }
  /* A probe ack still owed goes out now, after our last frame: next reads it as stale in its next operation. */
  for (const int64_t end = fcclTimeMs() + 100; outPending(&toNext) && fcclTimeMs() < end;) {
    if (outFlush(t->fdNext, &toNext) < 0) break;
    struct pollfd p = {.fd = t->fdNext, .events = POLLOUT, .revents = 0};
    if (outPending(&toNext)) (void)poll(&p, 1, 5);
  }
  if (outPending(&toNext) && toNext.sent > 0)
    return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0,
                           "rank %d did not take a probe ack at the end of bootstrap %s #%u", next, op, seq);
  return fcclSuccess;
}

static fcclResult_t tcpAllGather(struct fcclBootstrap* b, void* allData, size_t bytesPerRank) {
  return ringOp(b, FCCL_WIRE_ALLGATHER, allData, bytesPerRank);
}

static fcclResult_t tcpBarrier(struct fcclBootstrap* b) { return ringOp(b, FCCL_WIRE_BARRIER, NULL, 0); }

static void tcpDestroy(struct fcclBootstrap* b) {
  struct fcclTcpState* t = b->impl;
  if (t) {
    fcclSocketClose(&t->fdNext);
    fcclSocketClose(&t->fdPrev);
    free(t);
  }
  free(b);
}

/* The address of our end of the ring: the one we reach the root and the other ranks from. */
static int tcpLocalAddress(const struct fcclBootstrap* b, void* addr) {
  const struct fcclTcpState* t = b->impl;
  const int fd = t == NULL ? -1 : t->fdNext >= 0 ? t->fdNext : t->fdPrev;
  if (fd < 0) return -1;
  union fcclSocketAddress* local = addr;
  socklen_t length = sizeof(*local);
  if (getsockname(fd, &local->sa, &length) != 0) return -1;
  local->sin.sin_port = 0; /* same offset as sin6_port */
  return 0;
}

/* The secret the ranks proved to each other: other layers derive names from it that only the ranks can compute. */
static int tcpSecret(const struct fcclBootstrap* b, uint8_t* out) {
  const struct fcclTcpState* t = b->impl;
  if (t == NULL) return -1;
  memcpy(out, t->secret, sizeof(t->secret));
  return 0;
}

const struct fcclBootstrapOps fcclTcpRingOps = {.name = "tcp",
                                                .allGather = tcpAllGather,
                                                .barrier = tcpBarrier,
                                                .destroy = tcpDestroy,
                                                .localAddress = tcpLocalAddress,
                                                .secret = tcpSecret};
