/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Connections a bootstrap listener holds before they proved the secret: read as they arrive, each closed when its
 * handshake is not done a fixed time after its accept, bounded in number (the oldest closed when the table is full
 * and others are queued), refusals logged at a bounded rate. tcp.h has the rules; docs/bootstrap.md#strangers the
 * reasons.
 */
#include "tcp.h"

#include "debug.h"
#include "socket.h"
#include "wire.h"

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* After a failed accept (out of file descriptors, say) the listener is left alone this long: the connection stays
 * queued and the listener readable, so polling it again at once would spin. */
#define ACCEPT_BACKOFF_MS 100

void fcclTcpPendingInit(struct fcclTcpPending* p, int listenFd, const char* owner) {
  p->listenFd = listenFd;
  p->count = 0;
  p->acceptAfterMs = 0;
  snprintf(p->owner, sizeof(p->owner), "%s", owner);
  p->refusalsLogged = 0;
  p->refusalsUnlogged = 0;
  p->refusalSummaryMs = fcclTimeMs();
}

/* Whether the listener has a connection waiting in its backlog. */
static int backlogWaiting(int listenFd) {
  struct pollfd fd = {.fd = listenFd, .events = POLLIN, .revents = 0};
  return poll(&fd, 1, 0) == 1 && (fd.revents & POLLIN);
}

int fcclTcpPendingAccept(struct fcclTcpPending* p, int64_t now) {
  if (now < p->acceptAfterMs) return -1;
  if (p->count == FCCL_TCP_PENDING_MAX) {
    /* Full: the oldest goes, so that a flood delays a rank by the time it takes to accept and close the connections
     * queued ahead of it, never by a timer per connection. A rank whose connection goes connects again. */
    if (!backlogWaiting(p->listenFd)) return -1;
    int oldest = 0;
    for (int i = 1; i < p->count; i++)
      if (p->conns[i].acceptedMs < p->conns[oldest].acceptedMs) oldest = i;
    fcclTcpPendingRefuse(p, oldest, fcclLogWarn,
                         "the oldest of %d connections still without proof of the secret, "
                         "%lld ms after its accept, while others wait",
                         FCCL_TCP_PENDING_MAX, (long long)(now - p->conns[oldest].acceptedMs));
  }
  int fd;
  union fcclSocketAddress peer;
  if (fcclSocketAcceptPending(p->listenFd, &fd, &peer) != fcclSuccess) {
    p->acceptAfterMs = now + ACCEPT_BACKOFF_MS; /* logged there; the failure may pass */
    return -1;
  }
  if (fd < 0) return -1;
  struct fcclTcpConn* conn = &p->conns[p->count];
  conn->fd = fd;
  conn->peer = peer;
  fcclWireReaderInit(&conn->reader);
  conn->acceptedMs = now;
  conn->challenged = 0;
  return p->count++;
}

fcclWireReadResult_t fcclTcpPendingRead(struct fcclTcpPending* p, int i, int* err, fcclWireStatus_t* status, char* why,
                                        size_t whySize) {
  struct fcclTcpConn* conn = &p->conns[i];
  return fcclWireReaderProgress(&conn->reader, conn->fd, err, status, why, whySize);
}

static void removeAt(struct fcclTcpPending* p, int i) {
  p->conns[i] = p->conns[p->count - 1];
  p->count--;
}

int fcclTcpPendingTake(struct fcclTcpPending* p, int i) {
  int fd = p->conns[i].fd;
  removeAt(p, i);
  return fd;
}

static void logSummary(struct fcclTcpPending* p, int64_t now, const char* latest) {
  if (p->refusalsUnlogged == 0) return;
  char text[400];
  snprintf(text, sizeof(text), "%s: refused %lu more connection%s in the last %.1f s%s%s", p->owner,
           p->refusalsUnlogged, p->refusalsUnlogged == 1 ? "" : "s", (double)(now - p->refusalSummaryMs) / 1000.0,
           latest ? "; the latest " : "", latest ? latest : "");
  FCCL_WARN(FCCL_SUBSYS_BOOT, "%s", text);
  p->refusalsUnlogged = 0;
  p->refusalSummaryMs = now;
}

void fcclTcpPendingRefuse(struct fcclTcpPending* p, int i, fcclLogLevel_t level, const char* fmt, ...) {
  struct fcclTcpConn* conn = &p->conns[i];
  char why[320], peer[FCCL_SOCKET_ADDR_STR];
  va_list args;
  va_start(args, fmt);
  vsnprintf(why, sizeof(why), fmt, args);
  va_end(args);
  fcclSocketAddrToString(&conn->peer, peer, sizeof(peer));
  int64_t now = fcclTimeMs();
  if (p->refusalsLogged < FCCL_TCP_REFUSALS_LOGGED) {
    /* The first ones one by one: a misconfigured rank of another job is among these, and says who it is. */
    p->refusalsLogged++;
    if (fcclLogEnabled(level, FCCL_SUBSYS_BOOT))
      fcclLog(level, FCCL_SUBSYS_BOOT, __FILE__, __LINE__, "%s: refused a connection from %s: %s%s", p->owner, peer,
              why,
              p->refusalsLogged == FCCL_TCP_REFUSALS_LOGGED ? " (further refusals are counted, not logged one by one)"
                                                            : "");
    p->refusalSummaryMs = now;
  } else {
    /* A flood must not flood the log (nor hold the log lock, which fork() takes too). */
    p->refusalsUnlogged++;
    if (now - p->refusalSummaryMs >= FCCL_TCP_REFUSAL_SUMMARY_MS) {
      char latest[400];
      snprintf(latest, sizeof(latest), "from %s: %s", peer, why);
      logSummary(p, now, latest);
    }
  }
  fcclSocketClose(&conn->fd);
  removeAt(p, i);
}

void fcclTcpPendingExpire(struct fcclTcpPending* p, int64_t now) {
  for (int i = p->count - 1; i >= 0; i--) {
    const struct fcclTcpConn* conn = &p->conns[i];
    if (now - conn->acceptedMs >= FCCL_TCP_HANDSHAKE_MS)
      fcclTcpPendingRefuse(p, i, fcclLogWarn, "no proof of the secret %lld ms after its accept (%s)",
                           (long long)(now - conn->acceptedMs),
                           conn->challenged   ? "challenged, no proof"
                           : conn->reader.got ? "its first message incomplete"
                                              : "silent");
  }
}

int fcclTcpPendingPollFds(const struct fcclTcpPending* p, struct pollfd* fds, int64_t now) {
  fds[0] = (struct pollfd){.fd = now >= p->acceptAfterMs ? p->listenFd : -1, .events = POLLIN};
  for (int i = 0; i < p->count; i++) fds[1 + i] = (struct pollfd){.fd = p->conns[i].fd, .events = POLLIN};
  return 1 + p->count;
}

void fcclTcpPendingClose(struct fcclTcpPending* p) {
  for (int i = 0; i < p->count; i++) fcclSocketClose(&p->conns[i].fd);
  p->count = 0;
  logSummary(p, fcclTimeMs(), NULL);
}

int fcclTcpPendingReadHello(struct fcclTcpPending* p, int i, const char* what, struct fcclWireRingHello* hello) {
  char why[256] = "";
  int err = 0;
  fcclWireStatus_t status;
  fcclWireReadResult_t rr = fcclTcpPendingRead(p, i, &err, &status, why, sizeof(why));
  if (rr == FCCL_READ_MORE) return 0;
  if (rr == FCCL_READ_CLOSED || rr == FCCL_READ_ERROR) {
    fcclTcpPendingRefuse(p, i, fcclLogInfo, "closed before its %s (%s)", what,
                         rr == FCCL_READ_ERROR ? strerror(err) : "EOF");
    return 0;
  }
  if (rr == FCCL_READ_MALFORMED) {
    fcclTcpPendingRefuse(p, i, fcclLogWarn, "%s", why);
    return 0;
  }
  const struct fcclWireReader* reader = &p->conns[i].reader;
  if (reader->header.type != FCCL_WIRE_RING_HELLO) {
    fcclTcpPendingRefuse(p, i, fcclLogWarn, "message type %u where a %s belongs", (unsigned)reader->header.type,
                         what);
  } else if (fcclWireParseRingHello(reader->buf + FCCL_WIRE_HEADER_BYTES, reader->header.length, hello, why,
                                    sizeof(why)) != FCCL_WIRE_OK) {
    fcclTcpPendingRefuse(p, i, fcclLogWarn, "invalid %s: %s", what, why);
  } else {
    return 1;
  }
  return 0;
}

int fcclTcpSendFresh(int fd, const uint8_t* frame, size_t size) {
  return fcclSocketTrySend(fd, frame, size) == (long)size;
}
