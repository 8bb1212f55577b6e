/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Peer links (bootstrap.h): a TCP connection per pair of ranks that cannot watch each other's processes, so that a
 * peer's end is seen as its link's end. Setup: every rank that watches somebody listens where it reaches its peers
 * from and draws a secret; the all-gather hands every rank's card (address, secret) round; the lower rank of each
 * watched pair connects and says who it is with a ring hello frame carrying the higher rank's secret; the higher
 * rank accepts, refusing strangers as the ring listener does (tcp_pending.c). Then the listener closes.
 */
#include "bootstrap.h"

#include "check.h"
#include "debug.h"
#include "param.h"
#include "socket.h"
#include "tcp.h"
#include "wire.h"

#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_BOOT

struct linkCard {
  union fcclSocketAddress addr; /* family 0: this rank listens for nobody */
  uint64_t secret;
};

/* The address to listen at: FCCL_SOCKET_IFNAME's, else the bootstrap's own end, else the first interface that is up
 * and not loopback, else loopback (one host). */
static fcclResult_t listenAddress(const struct fcclBootstrap* b, union fcclSocketAddress* addr) {
  const char* ifname = fcclParamString(FCCL_PARAM_SOCKET_IFNAME);
  if (ifname[0] != '\0') {
    FCCLCHECK(fcclSocketInterfaceAddress(ifname, addr));
    addr->sin.sin_port = 0;
    return fcclSuccess;
  }
  if (b->ops->localAddress && b->ops->localAddress(b, addr) == 0) return fcclSuccess;
  struct ifaddrs* list = NULL;
  int found = 0;
  if (getifaddrs(&list) == 0) {
    for (const struct ifaddrs* ifa = list; ifa && !found; ifa = ifa->ifa_next) {
      if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET || !(ifa->ifa_flags & IFF_UP) ||
          (ifa->ifa_flags & IFF_LOOPBACK))
        continue;
      memset(addr, 0, sizeof(*addr));
      memcpy(&addr->sin, ifa->ifa_addr, sizeof(struct sockaddr_in));
      addr->sin.sin_port = 0;
      found = 1;
    }
    freeifaddrs(list);
  }
  if (!found) fcclSocketLoopback(addr, 0);
  return fcclSuccess;
}

/* Reads pending connection i: 1 when it is a watched lower rank's valid hello (its link is then in links). */
static int handlePending(const struct fcclBootstrap* b, const uint8_t* watched, uint64_t secret,
                         struct fcclTcpPending* pending, int i, int64_t now, int* links) {
  struct fcclWireRingHello hello;
  if (!fcclTcpPendingReadHello(pending, i, now, secret, "peer link's hello", &hello)) return 0;
  if (hello.nranks != b->nranks || hello.rank < 0 || hello.rank >= b->rank || !watched[hello.rank] ||
      links[hello.rank] >= 0) {
    fcclTcpPendingRefuse(pending, i, fcclLogWarn, "rank %d of %d is not a peer link this rank waits for",
                         (int)hello.rank, (int)hello.nranks);
    return 0;
  }
  links[hello.rank] = fcclTcpPendingTake(pending, i);
  return 1;
}

/* Accepts the links of the watched lower ranks. */
static fcclResult_t acceptLinks(const struct fcclBootstrap* b, const uint8_t* watched, uint64_t secret, int listenFd,
                                int64_t deadline, int* links) {
  int missing = 0;
  for (int r = 0; r < b->rank; r++) missing += watched[r] != 0;
  if (missing == 0) return fcclSuccess;
  struct fcclTcpPending* pending = malloc(sizeof(*pending));
  if (!pending) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for the peer links");
  char owner[48];
  snprintf(owner, sizeof(owner), "rank %d's peer link listener", b->rank);
  fcclTcpPendingInit(pending, listenFd, owner);
  fcclResult_t res = fcclSuccess;
  while (missing > 0) {
    const int64_t now = fcclTimeMs();
    for (int i = pending->count - 1; i >= 0 && missing > 0; i--)
      missing -= handlePending(b, watched, secret, pending, i, now, links);
    for (int accepted = 0; missing > 0 && accepted < 2 * FCCL_TCP_PENDING_MAX; accepted++) {
      const int i = fcclTcpPendingAccept(pending, now);
      if (i < 0) {
        const int before = pending->count;
        fcclTcpPendingEvict(pending, now);
        if (pending->count == before) break;
        continue;
      }
      missing -= handlePending(b, watched, secret, pending, i, now, links);
    }
    if (missing == 0) break;
    if (fcclAborted(b->abortFlag)) {
      res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT, "rank %d aborted while its peer links were made", b->rank);
      break;
    }
    if (now >= deadline) {
      int first = -1;
      for (int r = 0; r < b->rank && first < 0; r++)
        if (watched[r] && links[r] < 0) first = r;
      res = FCCL_ERROR(fcclTimeout, FCCL_SUBSYS_BOOT,
                       "rank %d did not open its peer link to rank %d within the bootstrap timeout of %d ms", first,
                       b->rank, b->timeoutMs);
      break;
    }
    struct pollfd fds[1 + FCCL_TCP_PENDING_MAX];
    const nfds_t nfds = (nfds_t)fcclTcpPendingPollFds(pending, fds, now);
    const int64_t left = deadline - now;
    (void)poll(fds, nfds, left < FCCL_SOCKET_POLL_SLICE_MS ? (int)left : FCCL_SOCKET_POLL_SLICE_MS);
  }
  fcclTcpPendingClose(pending);
  free(pending);
  return res;
}

fcclResult_t fcclBootstrapPeerLinks(struct fcclBootstrap* b, const uint8_t* watched, int keepaliveMs, int* links) {
  if (b == NULL || watched == NULL || links == NULL || keepaliveMs <= 0 || b->nranks < 1 ||
      b->nranks > FCCL_BOOTSTRAP_MAX_RANKS)
    return FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_BOOT, "peer links: invalid arguments");
  const int n = b->nranks, me = b->rank;
  for (int r = 0; r < n; r++) links[r] = -1;
  int any = 0;
  for (int r = 0; r < n; r++) any |= r != me && watched[r];
  struct linkCard* cards = calloc((size_t)n, sizeof(*cards));
  if (!cards) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for %d peer link cards", n);
  fcclResult_t res = fcclSuccess;
  int listenFd = -1;
  if (any) {
    union fcclSocketAddress at;
    FCCLCHECKGOTO(listenAddress(b, &at), res, out);
    FCCLCHECKGOTO(fcclSocketListen(&at, &listenFd, &cards[me].addr), res, out);
    ssize_t got;
    do {
      got = getrandom(&cards[me].secret, sizeof(cards[me].secret), 0);
    } while (got < 0 && errno == EINTR);
    if (got != (ssize_t)sizeof(cards[me].secret)) {
      res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "getrandom for a peer link secret failed: %s",
                       got < 0 ? strerror(errno) : "short read");
      goto out;
    }
  }
  FCCLCHECKGOTO(fcclBootstrapAllGather(b, cards, sizeof(*cards)), res, out);
  if (!any) goto out;
  const int64_t deadline = fcclTimeMs() + b->timeoutMs;
  /* Connect first (a connection completes in the peer's backlog before it accepts), then accept: no cycle waits. */
  for (int r = me + 1; r < n; r++) {
    if (!watched[r]) continue;
    if (cards[r].addr.sa.sa_family == 0) {
      res = FCCL_ERROR(fcclInternalError, FCCL_SUBSYS_BOOT, "rank %d opened no peer link listener for rank %d", r, me);
      goto out;
    }
    char what[48];
    snprintf(what, sizeof(what), "rank %d's peer link listener", r);
    FCCLCHECKGOTO(fcclSocketConnect(&cards[r].addr, deadline, b->abortFlag, 0, what, &links[r]), res, out);
    struct fcclWireRingHello hello = {.secret = cards[r].secret, .rank = me, .nranks = n};
    uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_RING_HELLO_BYTES];
    const size_t size = fcclWireEncodeRingHello(frame, &hello);
    FCCLCHECKGOTO(fcclSocketSendAll(links[r], frame, size, deadline, b->abortFlag, what), res, out);
  }
  FCCLCHECKGOTO(acceptLinks(b, watched, cards[me].secret, listenFd, deadline, links), res, out);
  for (int r = 0; r < n; r++)
    if (links[r] >= 0) fcclSocketSetKeepalive(links[r], keepaliveMs);
out:
  fcclSocketClose(&listenFd);
  free(cards);
  if (res != fcclSuccess)
    for (int r = 0; r < n; r++) fcclSocketClose(&links[r]);
  return res;
}

fcclLinkState_t fcclBootstrapPeerLinkRead(int link, int* err) {
  uint8_t byte;
  *err = 0;
  const long got = fcclSocketTryRecv(link, &byte, 1);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return FCCL_LINK_QUIET;
  if (got < 0) {
    *err = errno;
    return FCCL_LINK_ENDED;
  }
  if (got == 0) return FCCL_LINK_ENDED;
  if (byte == FCCL_LINK_GOODBYE) return FCCL_LINK_GOODBYE_SEEN;
  *err = EPROTO;
  return FCCL_LINK_ENDED;
}

void fcclBootstrapPeerLinkGoodbye(int link) {
  const uint8_t byte = FCCL_LINK_GOODBYE;
  (void)fcclSocketTrySend(link, &byte, 1);
}

void fcclBootstrapPeerLinkClose(int* link) { fcclSocketClose(link); }
