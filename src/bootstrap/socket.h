/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TCP sockets for the bootstrap: addresses, and connect/accept/send/receive whose every wait is bounded by a
 * deadline and polls an abort flag in short slices. Private to src/bootstrap (tests of this layer include it).
 * No CUDA here.
 */
#ifndef FCCL_BOOTSTRAP_SOCKET_H_
#define FCCL_BOOTSTRAP_SOCKET_H_

#include "fccl.h"

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Longest poll() slice: how long an abort or a deadline can go unnoticed. */
#define FCCL_SOCKET_POLL_SLICE_MS 10

union fcclSocketAddress {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
};

/* "127.0.0.1:5000" or "[::1]:5000"; always NUL-terminated. */
#define FCCL_SOCKET_ADDR_STR 64
const char* fcclSocketAddrToString(const union fcclSocketAddress* addr, char* buf, size_t size);

/* Length to pass to bind/connect for this address; 0 for an unknown family. */
socklen_t fcclSocketAddrLen(const union fcclSocketAddress* addr);

/* 127.0.0.1 with the given port. */
void fcclSocketLoopback(union fcclSocketAddress* addr, uint16_t port);

/*
 * Parses "host:port", "[ipv6]:port" or "ipv6-literal" forms with a port; host may be a name (resolved with
 * getaddrinfo, first result). fcclInvalidArgument with the reason when it cannot be parsed or resolved.
 */
fcclResult_t fcclSocketParseHostPort(const char* text, union fcclSocketAddress* addr);

/* The first IPv4 (else IPv6, not link-local) address of the first interface whose name starts with prefix. */
fcclResult_t fcclSocketInterfaceAddress(const char* prefix, union fcclSocketAddress* addr);

/* Monotonic clock in milliseconds. */
int64_t fcclTimeMs(void);

/*
 * A non-blocking, close-on-exec listening socket at addr (port 0: any free port); SO_REUSEADDR so a fixed port
 * left in TIME_WAIT by an earlier run can be bound again. The bound address (with its port) goes to bound.
 */
fcclResult_t fcclSocketListen(const union fcclSocketAddress* addr, int* fd, union fcclSocketAddress* bound);

/*
 * Connects to addr, retrying refused or unreachable attempts (the listener may not exist yet) until deadlineMs
 * (fcclTimeMs clock). retry = 0 fails at once on a refusal (the peer's listener is known to exist).
 * Returns a non-blocking socket with TCP_NODELAY. fcclTimeout, fcclRemoteError, fcclSystemError; aborted:
 * fcclInvalidUsage. what names the peer in messages ("the bootstrap root", "rank 3").
 */
fcclResult_t fcclSocketConnect(const union fcclSocketAddress* addr, int64_t deadlineMs, volatile int* abortFlag,
                               int retry, const char* what, int* fd);

/* Accepts one pending connection (non-blocking, TCP_NODELAY); *fd = -1 when none is pending. */
fcclResult_t fcclSocketAcceptPending(int listenFd, int* fd, union fcclSocketAddress* peer);

/* Sends all of buf. Same bounds and codes as fcclSocketConnect; a closed peer is fcclRemoteError. */
fcclResult_t fcclSocketSendAll(int fd, const void* buf, size_t size, int64_t deadlineMs, volatile int* abortFlag,
                               const char* what);

/* Receives exactly size bytes. A peer that closes first is fcclRemoteError. */
fcclResult_t fcclSocketRecvAll(int fd, void* buf, size_t size, int64_t deadlineMs, volatile int* abortFlag,
                               const char* what);

/*
 * One non-blocking attempt: sends what the socket takes now (0 when it is full). -1 with errno on failure;
 * never raises SIGPIPE.
 */
long fcclSocketTrySend(int fd, const void* buf, size_t size);
/* One non-blocking attempt: >0 bytes, 0 end of stream, -1 with errno (EAGAIN: nothing yet). */
long fcclSocketTryRecv(int fd, void* buf, size_t size);

/* Whether the abort flag is set (NULL: never). */
static inline int fcclAborted(volatile int* abortFlag) {
  return abortFlag != NULL && __atomic_load_n(abortFlag, __ATOMIC_ACQUIRE) != 0;
}

/* Closes fd when it is >= 0 and sets it to -1. */
void fcclSocketClose(int* fd);

/*
 * Keepalive probes from a second of silence on, every second, so that a connection whose peer host stops answering
 * (lost power or network: no end of stream, no reset) fails with ETIMEDOUT. A peer process that is merely slow does
 * not trip them: its kernel answers the probes. keepaliveMs <= 0: none. Best effort: a socket without them still
 * sees its peer's process end.
 *
 * userTimeout: also the kernel's TCP_USER_TIMEOUT of keepaliveMs, which ends the connection after about keepaliveMs
 * of silence even while data waits for an acknowledgement (probes alone give up only after their count, and
 * unacknowledged data only after TCP's retransmissions, minutes). Only for connections that send small messages:
 * Linux applies the user timeout to a peer's closed receive window as well, so a live peer that stops reading for
 * longer than keepaliveMs while this side has more to send than its window takes would fail the connection although
 * it answers every probe. Without it, the probes end an idle connection after their count (keepaliveMs / 1 s of them
 * after the first second).
 */
void fcclSocketSetKeepalive(int fd, int64_t keepaliveMs, int userTimeout);

/*
 * Closes a connection whose peer has already closed its end (we saw end of stream) without leaving it in
 * TIME_WAIT: the reset is harmless because the peer has read everything and gone.
 */
void fcclSocketCloseAfterPeer(int* fd);

#endif /* FCCL_BOOTSTRAP_SOCKET_H_ */
