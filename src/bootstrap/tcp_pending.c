/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Connections a bootstrap listener holds before they proved the secret: read as they arrive, bounded in number
 * (the rest wait in the kernel's backlog), strangers closed by idle age when room is needed, refusals logged at a
 * bounded rate. tcp.h has the rules; docs/bootstrap.md#strangers the reasons.
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

int fcclTcpPendingAccept(struct fcclTcpPending* p, int64_t now) {
  if (p->count == FCCL_TCP_PENDING_MAX || now < p->acceptAfterMs) return -1;
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
  conn->activeMs = now;
  conn->challenged = 0;
  return p->count++;
}

fcclWireReadResult_t fcclTcpPendingRead(struct fcclTcpPending* p, int i, int64_t now, int* err,
                                        fcclWireStatus_t* status, char* why, size_t whySize) {
  struct fcclTcpConn* conn = &p->conns[i];
  size_t before = conn->reader.got;
  fcclWireReadResult_t rr = fcclWireReaderProgress(&conn->reader, conn->fd, err, status, why, whySize);
  if (conn->reader.got != before) conn->activeMs = now;
  return rr;
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

/* Whether the listener has a connection waiting in its backlog. */
static int backlogWaiting(int listenFd) {
  struct pollfd fd = {.fd = listenFd, .events = POLLIN, .revents = 0};
  return poll(&fd, 1, 0) == 1 && (fd.revents & POLLIN);
}

void fcclTcpPendingEvict(struct fcclTcpPending* p, int64_t now) {
  if (p->count < FCCL_TCP_PENDING_MAX || now < p->acceptAfterMs || !backlogWaiting(p->listenFd)) return;
  /* Every stranger past either bound goes at once, so a queue of silent connections drains at the table's size per
   * FCCL_TCP_EVICT_IDLE_MS; a rank sends its frame right after connecting, so it is never among them. */
  for (int i = p->count - 1; i >= 0; i--) {
    const struct fcclTcpConn* conn = &p->conns[i];
    if (now - conn->activeMs >= FCCL_TCP_EVICT_IDLE_MS)
      fcclTcpPendingRefuse(p, i, fcclLogWarn, "silent for %lld ms while other connections wait",
                           (long long)(now - conn->activeMs));
    else if (now - conn->acceptedMs >= FCCL_TCP_EVICT_SLOW_MS)
      fcclTcpPendingRefuse(p, i, fcclLogWarn, "its first message is still incomplete (%zu bytes) after %lld ms",
                           conn->reader.got, (long long)(now - conn->acceptedMs));
  }
}

int fcclTcpPendingPollFds(const struct fcclTcpPending* p, struct pollfd* fds, int64_t now) {
  int room = p->count < FCCL_TCP_PENDING_MAX && now >= p->acceptAfterMs;
  fds[0] = (struct pollfd){.fd = room ? p->listenFd : -1, .events = POLLIN};
  for (int i = 0; i < p->count; i++) fds[1 + i] = (struct pollfd){.fd = p->conns[i].fd, .events = POLLIN};
  return 1 + p->count;
}

void fcclTcpPendingClose(struct fcclTcpPending* p) {
  for (int i = 0; i < p->count; i++) fcclSocketClose(&p->conns[i].fd);
  p->count = 0;
  logSummary(p, fcclTimeMs(), NULL);
}

int fcclTcpPendingReadHello(struct fcclTcpPending* p, int i, int64_t now, const char* what,
                            struct fcclWireRingHello* hello) {
  char why[256] = "";
  int err = 0;
  fcclWireStatus_t status;
  fcclWireReadResult_t rr = fcclTcpPendingRead(p, i, now, &err, &status, why, sizeof(why));
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
