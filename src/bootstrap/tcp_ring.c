/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TCP bootstrap's operations: all-gathers and barriers around the ring that tcp_join.c connected. A rank that
 * fails tells both neighbours, which pass it on.
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
  fcclTcpSendNotice(t->fdPrev, frame, size);
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
        return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0,
                               "rank %d stopped answering (its connection's keepalive failed) during bootstrap %s #%u",
                               next, op, seq);
      if (rc < 0)
        return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0,
                               "rank %d closed its connection: sending to it failed during bootstrap %s #%u (%s)",
                               next, op, seq, strerror(errno));
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
          return fcclTcpRingRelay(t, rank, sendOff == 0, errorPayload, h.length, prev, op);
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
        return fcclTcpRingFail(t, rank, fcclRemoteError, prev, sendOff == 0,
                               "rank %d closed its connection during bootstrap %s #%u", prev, op, seq);
      if (rc < 0 && errno == EAGAIN) break;
      if (rc < 0 && errno == ETIMEDOUT)
        return fcclTcpRingFail(t, rank, fcclRemoteError, prev, sendOff == 0,
                               "rank %d stopped answering (its connection's keepalive failed) during bootstrap %s #%u",
                               prev, op, seq);
      if (rc < 0)
        return fcclTcpRingFail(t, rank, fcclRemoteError, prev, sendOff == 0,
                               "receiving from rank %d failed during bootstrap %s #%u: %s%s", prev, op, seq,
                               strerror(errno), errno == ECONNRESET ? " (it closed its connection)" : "");
      progressed = 1;
      recvOff += (size_t)rc;
      if (recvOff == FCCL_WIRE_HEADER_BYTES) {
        struct fcclWireHeader h;
        char why[256];
        fcclWireStatus_t status = fcclWireParseHeader(recvHeader, FCCL_WIRE_HEADER_BYTES, &h, why, sizeof(why));
        if (status != FCCL_WIRE_OK)
          return fcclTcpRingFail(t, rank, fcclRemoteError, prev, sendOff == 0,
                                 "rank %d sent a malformed frame during bootstrap %s #%u: %s", prev, op, seq, why);
        if (h.type == FCCL_WIRE_ERROR) {
          if (h.length > FCCL_WIRE_SMALL_MAX)
            return fcclTcpRingFail(t, rank, fcclRemoteError, prev, sendOff == 0,
                                   "rank %d sent an oversized error notice", prev);
          recvIsError = 1;
          continue;
        }
        if (h.type != type || h.seq != seq || h.length != bytes)
          return fcclTcpRingFail(t, rank, fcclInvalidUsage, prev, sendOff == 0,
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
          return fcclTcpRingRelay(t, rank, 0, backward.buf + FCCL_WIRE_HEADER_BYTES, backward.header.length, next,
                                  op);
        return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0,
                               "rank %d sent an unexpected %s backwards during %s", next,
                               opName(backward.header.type), op);
      }
      if (rr == FCCL_READ_CLOSED || rr == FCCL_READ_ERROR)
        return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0,
                               "rank %d closed its connection during bootstrap %s #%u", next, op, seq);
      if (rr == FCCL_READ_MALFORMED)
        return fcclTcpRingFail(t, rank, fcclRemoteError, next, 0, "rank %d sent a malformed frame backwards: %s",
                               next, why);
    }
    if (progressed) continue;

    if (fcclAborted(b->abortFlag))
      return fcclTcpRingFail(t, rank, fcclInvalidUsage, rank, sendOff == 0,
                             "rank %d aborted (fcclCommAbort) during %s", rank, op);
    int64_t now = fcclTimeMs();
    if (now >= deadline) {
      if (recvStep < steps) {
        /* Step s brings the data of rank - s - 1. The data of ranks rank-1 .. rank-s came, so those ranks entered
         * this operation and pass on what they get: the nearest rank not heard from is the one that is stuck. */
        int missing = (rank - recvStep - 1 + 2 * n) % n;
        if (recvStep == 0)
          return fcclTcpRingFail(t, rank, fcclTimeout, missing, sendOff == 0,
                                 "rank %d did not reach bootstrap %s #%u within %d ms (it is stuck, or has not called "
                                 "it)",
                                 missing, op, seq, b->timeoutMs);
        return fcclTcpRingFail(t, rank, fcclTimeout, missing, sendOff == 0,
                               "rank %d did not reach bootstrap %s #%u within %d ms (it is stuck, or has not called "
                               "it; ranks %d..%d before this rank in the ring did)",
                               missing, op, seq, b->timeoutMs, (rank - recvStep + n) % n, prev);
      }
      return fcclTcpRingFail(t, rank, fcclTimeout, next, 0,
                             "timed out after %d ms in bootstrap %s #%u sending to rank %d, which does not read",
                             b->timeoutMs, op, seq, next);
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

const struct fcclBootstrapOps fcclTcpRingOps = {.name = "tcp",
                                                .allGather = tcpAllGather,
                                                .barrier = tcpBarrier,
                                                .destroy = tcpDestroy,
                                                .localAddress = tcpLocalAddress};
