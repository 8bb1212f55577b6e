/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Peer links (bootstrap.h): a TCP connection per pair of ranks that cannot watch each other's processes, so that a
 * peer's end is seen as its link's end. Setup: every rank that watches somebody listens where it reaches its peers
 * from and draws a link key; the all-gather hands every rank's card (address, key) round, so only the ranks learn
 * them; the lower rank of each watched pair connects and says who it is with a ring hello frame whose MAC is keyed
 * with the higher rank's key; the higher rank accepts, refusing strangers as the ring listener does (tcp_pending.c),
 * and answers with its own MAC (a ring ack), which the lower rank checks. Keys never travel but in the all-gather.
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
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_BOOT

struct linkCard {
  union fcclSocketAddress addr; /* family 0: this rank listens for nobody */
  uint8_t key[FCCL_WIRE_SECRET_BYTES];
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

/* Reads pending connection i: 1 when it is a watched lower rank's hello with its proof (its link is then in links,
 * and it has this rank's ack). */
static int handlePending(const struct fcclBootstrap* b, const uint8_t* watched, const uint8_t* key,
                         struct fcclTcpPending* pending, int i, int* links) {
  struct fcclWireRingHello hello;
  if (!fcclTcpPendingReadHello(pending, i, "peer link's hello", &hello)) return 0;
  if (hello.nranks != b->nranks || hello.rank < 0 || hello.rank >= b->rank || !watched[hello.rank] ||
      links[hello.rank] >= 0) {
    fcclTcpPendingRefuse(pending, i, fcclLogWarn, "rank %d of %d is not a peer link this rank waits for",
                         (int)hello.rank, (int)hello.nranks);
    return 0;
  }
  uint8_t expected[FCCL_WIRE_MAC_BYTES];
  if (fcclTcpLinkMac(key, FCCL_WIRE_RING_HELLO, hello.rank, b->rank, b->nranks, expected) != fcclSuccess ||
      !fcclMacEqual(expected, hello.mac)) {
    fcclTcpPendingRefuse(pending, i, fcclLogWarn, "claims rank %d and cannot prove its link key", (int)hello.rank);
    return 0;
  }
  struct fcclWireRingHello ack = {.rank = b->rank, .nranks = b->nranks};
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_RING_HELLO_BYTES];
  if (fcclTcpLinkMac(key, FCCL_WIRE_RING_ACK, hello.rank, b->rank, b->nranks, ack.mac) != fcclSuccess ||
      !fcclTcpSendFresh(pending->conns[i].fd, frame, fcclWireEncodeRingHello(frame, FCCL_WIRE_RING_ACK, &ack))) {
    fcclTcpPendingRefuse(pending, i, fcclLogWarn, "rank %d's peer link did not take this rank's ack", (int)hello.rank);
    return 0;
  }
  links[hello.rank] = fcclTcpPendingTake(pending, i);
  return 1;
}

/* Accepts the links of the watched lower ranks. */
static fcclResult_t acceptLinks(const struct fcclBootstrap* b, const uint8_t* watched, const uint8_t* key, int listenFd,
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
      missing -= handlePending(b, watched, key, pending, i, links);
    for (int accepted = 0; missing > 0 && accepted < 2 * FCCL_TCP_PENDING_MAX; accepted++) {
      const int i = fcclTcpPendingAccept(pending, now);
      if (i < 0) break;
      missing -= handlePending(b, watched, key, pending, i, links);
    }
    fcclTcpPendingExpire(pending, now);
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

/* Reads the ack of every watched higher rank on its link: each proves it holds its own link key. */
static fcclResult_t readAcks(const struct fcclBootstrap* b, const uint8_t* watched, const struct linkCard* cards,
                             int64_t deadline, const int* links) {
  const int n = b->nranks, me = b->rank;
  struct fcclWireReader* readers = calloc((size_t)n, sizeof(*readers));
  struct pollfd* fds = calloc((size_t)n, sizeof(*fds));
  uint8_t* acked = calloc((size_t)n, 1);
  fcclResult_t res = fcclSuccess;
  if (!readers || !fds || !acked) {
    res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for %d peer link acks", n);
    goto out;
  }
  for (;;) {
    nfds_t nfds = 0;
    for (int r = me + 1; r < n; r++) {
      if (!watched[r] || acked[r]) continue;
      int err = 0;
      fcclWireStatus_t status;
      char why[256];
      fcclWireReadResult_t rr = fcclWireReaderProgress(&readers[r], links[r], &err, &status, why, sizeof(why));
      if (rr == FCCL_READ_MORE) {
        fds[nfds++] = (struct pollfd){.fd = links[r], .events = POLLIN};
        continue;
      }
      struct fcclWireRingHello ack;
      uint8_t expected[FCCL_WIRE_MAC_BYTES];
      if (rr != FCCL_READ_FRAME || readers[r].header.type != FCCL_WIRE_RING_ACK ||
          fcclWireParseRingHello(readers[r].buf + FCCL_WIRE_HEADER_BYTES, readers[r].header.length, &ack, why,
                                 sizeof(why)) != FCCL_WIRE_OK ||
          ack.rank != r || ack.nranks != n) {
        res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                         "rank %d %s its peer link to rank %d instead of acknowledging it", r,
                         rr == FCCL_READ_CLOSED || rr == FCCL_READ_ERROR ? "closed" : "sent something else on", me);
        goto out;
      }
      FCCLCHECKGOTO(fcclTcpLinkMac(cards[r].key, FCCL_WIRE_RING_ACK, me, r, n, expected), res, out);
      if (!fcclMacEqual(expected, ack.mac)) {
        res = FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT,
                         "the peer link listener of rank %d cannot prove rank %d's link key (it is not rank %d's)", r,
                         r, r);
        goto out;
      }
      acked[r] = 1;
    }
    if (nfds == 0) break;
    if (fcclAborted(b->abortFlag)) {
      res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT, "rank %d aborted while its peer links were made", me);
      goto out;
    }
    const int64_t left = deadline - fcclTimeMs();
    if (left <= 0) {
      int first = -1;
      for (int r = me + 1; r < n && first < 0; r++)
        if (watched[r] && !acked[r]) first = r;
      res = FCCL_ERROR(fcclTimeout, FCCL_SUBSYS_BOOT,
                       "rank %d did not acknowledge its peer link to rank %d within the bootstrap timeout of %d ms",
                       first, me, b->timeoutMs);
      goto out;
    }
    (void)poll(fds, nfds, left < FCCL_SOCKET_POLL_SLICE_MS ? (int)left : FCCL_SOCKET_POLL_SLICE_MS);
  }
out:
  free(readers);
  free(fds);
  free(acked);
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
    FCCLCHECKGOTO(fcclRandomBytes(cards[me].key, sizeof(cards[me].key), "a peer link key"), res, out);
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
    struct fcclWireRingHello hello = {.rank = me, .nranks = n};
    FCCLCHECKGOTO(fcclTcpLinkMac(cards[r].key, FCCL_WIRE_RING_HELLO, me, r, n, hello.mac), res, out);
    uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_RING_HELLO_BYTES];
    const size_t size = fcclWireEncodeRingHello(frame, FCCL_WIRE_RING_HELLO, &hello);
    FCCLCHECKGOTO(fcclSocketSendAll(links[r], frame, size, deadline, b->abortFlag, what), res, out);
  }
  FCCLCHECKGOTO(acceptLinks(b, watched, cards[me].key, listenFd, deadline, links), res, out);
  FCCLCHECKGOTO(readAcks(b, watched, cards, deadline, links), res, out);
  /* A link carries one byte at most: the user timeout cannot meet a closed window there (socket.h). */
  for (int r = 0; r < n; r++)
    if (links[r] >= 0) fcclSocketSetKeepalive(links[r], keepaliveMs, 1);
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
