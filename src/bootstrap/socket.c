/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bounded, abortable TCP primitives. Every socket is non-blocking; waits are poll() calls of at most
 * FCCL_SOCKET_POLL_SLICE_MS, after each of which the abort flag and the deadline are checked. Every socket made
 * here is close-on-exec and known to the fork handler below, which takes it from a child of fork().
 */
#include "socket.h"

#include "check.h"
#include "debug.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- every bootstrap socket of the process, for fork() ---- */

/*
 * A child of fork() that does not exec (a data-loader worker, a multiprocessing pool) inherits a copy of every
 * descriptor. While such a child lives, a bootstrap connection stays open on its side even after the rank that owns
 * it dies, so the rank's peers see no end of stream and wait their whole timeout, blaming live ranks. So every
 * bootstrap socket (listeners, ring and root connections, connections not yet admitted) is recorded here by
 * descriptor, with its inode, and the fork handler replaces each one in the child by a socket that was never
 * connected: the connections are the parent's alone again, while the child's copy of the bootstrap's state still
 * names valid descriptors, whose use fails at once and whose close closes nothing of the parent's.
 * Sockets are made and closed under socketsLock, which fork() takes too, so none escapes between the two.
 */
static pthread_mutex_t socketsLock = PTHREAD_MUTEX_INITIALIZER;
static ino_t* socketInodes; /* indexed by descriptor: its inode while a bootstrap socket, else 0; socketsLock */
static int socketSlots;

static void socketsLockForFork(void) { pthread_mutex_lock(&socketsLock); }
static void socketsUnlockInParent(void) { pthread_mutex_unlock(&socketsLock); }

/* Runs in the child, where only the forking thread exists; async-signal-safe calls only. */
static void socketsReleaseInChild(void) {
  int placeholder = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct stat st;
  ino_t placeholderInode = placeholder >= 0 && fstat(placeholder, &st) == 0 ? st.st_ino : 0;
  for (int fd = 0; fd < socketSlots; fd++) {
    if (socketInodes[fd] == 0) continue;
    /* A descriptor closed behind our back (not through fcclSocketClose) and reused is someone else's now. */
    if (fd == placeholder || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_ino != socketInodes[fd]) {
      socketInodes[fd] = 0;
      continue;
    }
    if (placeholderInode != 0 && dup3(placeholder, fd, O_CLOEXEC) == fd) {
      socketInodes[fd] = placeholderInode;
    } else {
      close(fd); /* no placeholder to be had: the child's copy of the state then names a closed descriptor */
      socketInodes[fd] = 0;
    }
  }
  if (placeholder >= 0) close(placeholder);
  pthread_mutex_unlock(&socketsLock);
}

static void socketsRegisterForkHandlers(void) {
  pthread_atfork(socketsLockForFork, socketsUnlockInParent, socketsReleaseInChild);
}
static pthread_once_t socketsForkOnce = PTHREAD_ONCE_INIT;

/* Records fd (a socket just made) under socketsLock; 0 when there is no memory to record it. */
static int socketTrack(int fd) {
  if (fd >= socketSlots) {
    int slots = socketSlots ? socketSlots : 64;
    while (slots <= fd) slots *= 2;
    ino_t* grown = realloc(socketInodes, (size_t)slots * sizeof(*grown));
    if (!grown) return 0;
    memset(grown + socketSlots, 0, (size_t)(slots - socketSlots) * sizeof(*grown));
    socketInodes = grown;
    socketSlots = slots;
  }
  struct stat st;
  socketInodes[fd] = fstat(fd, &st) == 0 ? st.st_ino : 0;
  return 1;
}

/* socket() or accept4() (accepting from listenFd when it is >= 0), recorded; -1 with errno on failure. */
static int socketMake(int family, int listenFd, union fcclSocketAddress* peer, socklen_t* length) {
  pthread_once(&socketsForkOnce, socketsRegisterForkHandlers);
  pthread_mutex_lock(&socketsLock);
  int fd;
  if (listenFd >= 0) {
    do {
      fd = accept4(listenFd, &peer->sa, length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
  } else {
    fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  }
  if (fd >= 0 && !socketTrack(fd)) {
    close(fd);
    fd = -1;
    errno = ENOMEM;
  }
  pthread_mutex_unlock(&socketsLock);
  return fd;
}

static void socketRelease(int fd) {
  pthread_mutex_lock(&socketsLock);
  if (fd < socketSlots) socketInodes[fd] = 0;
  close(fd);
  pthread_mutex_unlock(&socketsLock);
}

int64_t fcclTimeMs(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

const char* fcclSocketAddrToString(const union fcclSocketAddress* addr, char* buf, size_t size) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr->sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &addr->sin.sin_addr, host, sizeof(host));
    snprintf(buf, size, "%s:%u", host, (unsigned)ntohs(addr->sin.sin_port));
  } else if (addr->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &addr->sin6.sin6_addr, host, sizeof(host));
    snprintf(buf, size, "[%s]:%u", host, (unsigned)ntohs(addr->sin6.sin6_port));
  } else {
    snprintf(buf, size, "(address family %d)", (int)addr->sa.sa_family);
  }
  return buf;
}

socklen_t fcclSocketAddrLen(const union fcclSocketAddress* addr) {
  if (addr->sa.sa_family == AF_INET) return sizeof(struct sockaddr_in);
  if (addr->sa.sa_family == AF_INET6) return sizeof(struct sockaddr_in6);
  return 0;
}

void fcclSocketLoopback(union fcclSocketAddress* addr, uint16_t port) {
  memset(addr, 0, sizeof(*addr));
  addr->sin.sin_family = AF_INET;
  addr->sin.sin_port = htons(port);
  addr->sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

fcclResult_t fcclSocketParseHostPort(const char* text, union fcclSocketAddress* addr) {
  char host[256];
  const char* port;
  if (text == NULL || text[0] == '\0')
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "empty address: expected host:port");
  if (text[0] == '[') {
    const char* close = strchr(text, ']');
    if (!close || close[1] != ':' || (size_t)(close - text - 1) >= sizeof(host))
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "address '%s': expected [ipv6]:port", text);
    memcpy(host, text + 1, (size_t)(close - text - 1));
    host[close - text - 1] = '\0';
    port = close + 2;
  } else {
    const char* colon = strrchr(text, ':');
    if (!colon || (size_t)(colon - text) >= sizeof(host))
      return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "address '%s': expected host:port", text);
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    port = colon + 1;
  }
  char* end = NULL;
  errno = 0;
  long portNumber = strtol(port, &end, 10);
  if (port[0] == '\0' || *end != '\0' || errno != 0 || portNumber < 1 || portNumber > 65535)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "address '%s': port '%s' is not in 1..65535", text,
                      port);
  if (host[0] == '\0')
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "address '%s': empty host", text);

  struct addrinfo hints, *result = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  int rc = getaddrinfo(host, port, &hints, &result);
  if (rc != 0 || result == NULL)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "address '%s': cannot resolve '%s': %s", text, host,
                      rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
  fcclResult_t res = fcclSuccess;
  memset(addr, 0, sizeof(*addr));
  if ((result->ai_family == AF_INET || result->ai_family == AF_INET6) && result->ai_addrlen <= sizeof(*addr))
    memcpy(addr, result->ai_addr, result->ai_addrlen);
  else
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT, "address '%s': not an IPv4 or IPv6 address", text);
  freeaddrinfo(result);
  return res;
}

fcclResult_t fcclSocketInterfaceAddress(const char* prefix, union fcclSocketAddress* addr) {
  struct ifaddrs* list = NULL;
  if (getifaddrs(&list) != 0)
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "getifaddrs failed: %s", strerror(errno));
  const struct ifaddrs* best = NULL;
  for (const struct ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || strncmp(ifa->ifa_name, prefix, strlen(prefix)) != 0) continue;
    if (!(ifa->ifa_flags & IFF_UP)) continue;
    int family = ifa->ifa_addr->sa_family;
    if (family == AF_INET) {
      best = ifa;
      break;
    }
    if (family == AF_INET6 && !best) {
      const struct sockaddr_in6* sin6 = (const struct sockaddr_in6*)ifa->ifa_addr;
      if (!IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr)) best = ifa;
    }
  }
  fcclResult_t res = fcclSuccess;
  if (best) {
    memset(addr, 0, sizeof(*addr));
    memcpy(addr, best->ifa_addr,
           best->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
  } else {
    res = FCCL_ERROR(fcclInvalidArgument, FCCL_SUBSYS_BOOT,
                     "FCCL_SOCKET_IFNAME=%s: no interface that is up has that name (prefix) and an IP address",
                     prefix);
  }
  freeifaddrs(list);
  return res;
}

static void setNoDelay(int fd) {
  int one = 1;
  /* Best effort: small frames are latency-bound, but a socket without it still works. */
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

fcclResult_t fcclSocketListen(const union fcclSocketAddress* addr, int* fd, union fcclSocketAddress* bound) {
  char text[FCCL_SOCKET_ADDR_STR];
  int sock = socketMake(addr->sa.sa_family, -1, NULL, NULL);
  if (sock < 0)
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "socket() for a listener at %s failed: %s",
                      fcclSocketAddrToString(addr, text, sizeof(text)), strerror(errno));
  int one = 1;
  if (setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(sock, &addr->sa, fcclSocketAddrLen(addr)) != 0 || listen(sock, SOMAXCONN) != 0) {
    int err = errno;
    socketRelease(sock);
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "cannot listen at %s: %s%s",
                      fcclSocketAddrToString(addr, text, sizeof(text)), strerror(err),
                      err == EADDRNOTAVAIL ? " (it is not an address of this host)"
                      : err == EADDRINUSE  ? " (another socket listens there)"
                                           : "");
  }
  socklen_t length = sizeof(*bound);
  if (getsockname(sock, &bound->sa, &length) != 0) {
    int err = errno;
    socketRelease(sock);
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "getsockname on a listener failed: %s", strerror(err));
  }
  *fd = sock;
  return fcclSuccess;
}

static fcclResult_t abortedError(const char* what) {
  return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT, "aborted (fcclCommAbort) while waiting for %s", what);
}

/* Waits up to one slice for events on fd; returns revents (0 on a quiet slice), or -1 when poll fails. */
static int pollOne(int fd, short events, int64_t deadlineMs) {
  int64_t left = deadlineMs - fcclTimeMs();
  int slice = left < FCCL_SOCKET_POLL_SLICE_MS ? (left > 0 ? (int)left : 0) : FCCL_SOCKET_POLL_SLICE_MS;
  struct pollfd p = {.fd = fd, .events = events, .revents = 0};
  int rc = poll(&p, 1, slice);
  if (rc < 0) return errno == EINTR ? 0 : -1;
  return rc == 0 ? 0 : p.revents;
}

fcclResult_t fcclSocketConnect(const union fcclSocketAddress* addr, int64_t deadlineMs, volatile int* abortFlag,
                               int retry, const char* what, int* fd) {
  char text[FCCL_SOCKET_ADDR_STR];
  fcclSocketAddrToString(addr, text, sizeof(text));
  int backoffMs = 1;
  int lastErr = 0;
  for (;;) {
    if (fcclAborted(abortFlag)) return abortedError(what);
    int sock = socketMake(addr->sa.sa_family, -1, NULL, NULL);
    if (sock < 0)
      return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "socket() to connect to %s failed: %s", what,
                        strerror(errno));
    int rc;
    do {
      rc = connect(sock, &addr->sa, fcclSocketAddrLen(addr));
    } while (rc != 0 && errno == EINTR);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      /* Wait for the handshake in slices. */
      err = ETIMEDOUT;
      for (;;) {
        if (fcclAborted(abortFlag)) {
          socketRelease(sock);
          return abortedError(what);
        }
        int revents = pollOne(sock, POLLOUT, deadlineMs);
        if (revents < 0) {
          err = errno;
          break;
        }
        if (revents != 0) {
          socklen_t length = sizeof(err);
          if (getsockopt(sock, SOL_SOCKET, SO_ERROR, &err, &length) != 0) err = errno;
          break;
        }
        if (fcclTimeMs() >= deadlineMs) break;
      }
    }
    if (err == 0) {
      setNoDelay(sock);
      *fd = sock;
      return fcclSuccess;
    }
    socketRelease(sock);
    lastErr = err;
    int transient = err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
                    err == ECONNRESET || err == EAGAIN;
    if (!transient)
      return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "connect to %s at %s failed: %s", what, text,
                        strerror(err));
    if (!retry)
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT, "cannot reach %s at %s: %s%s", what, text, strerror(err),
                        err == ECONNREFUSED ? " (nothing listens there any more)" : "");
    int64_t now = fcclTimeMs();
    if (now >= deadlineMs) break;
    /* Back off up to 50 ms: a late listener is found quickly without spinning. */
    int64_t sleepMs = backoffMs < deadlineMs - now ? backoffMs : deadlineMs - now;
    struct timespec pause = {.tv_sec = 0, .tv_nsec = (long)sleepMs * 1000000L};
    nanosleep(&pause, NULL);
    backoffMs = backoffMs * 2 > 50 ? 50 : backoffMs * 2;
  }
  return FCCL_ERROR(fcclTimeout, FCCL_SUBSYS_BOOT, "timed out connecting to %s at %s (last error: %s)", what, text,
                    strerror(lastErr));
}

fcclResult_t fcclSocketAcceptPending(int listenFd, int* fd, union fcclSocketAddress* peer) {
  socklen_t length = sizeof(*peer);
  memset(peer, 0, sizeof(*peer));
  int sock = socketMake(AF_UNSPEC, listenFd, peer, &length);
  if (sock < 0) {
    *fd = -1;
    /* A connection that was reset while queued is not our failure; nothing else is pending either. */
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EPROTO) return fcclSuccess;
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "accept failed: %s", strerror(errno));
  }
  setNoDelay(sock);
  *fd = sock;
  return fcclSuccess;
}

long fcclSocketTrySend(int fd, const void* buf, size_t size) {
  long rc;
  do {
    rc = send(fd, buf, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  return rc;
}

long fcclSocketTryRecv(int fd, void* buf, size_t size) {
  long rc;
  do {
    rc = recv(fd, buf, size, MSG_DONTWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0 && errno == EWOULDBLOCK) errno = EAGAIN;
  return rc;
}

fcclResult_t fcclSocketSendAll(int fd, const void* buf, size_t size, int64_t deadlineMs, volatile int* abortFlag,
                               const char* what) {
  const char* bytes = buf;
  size_t done = 0;
  while (done < size) {
    long rc = fcclSocketTrySend(fd, bytes + done, size - done);
    if (rc < 0)
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT, "sending to %s failed: %s%s", what, strerror(errno),
                        errno == EPIPE || errno == ECONNRESET ? " (it closed its connection)" : "");
    done += (size_t)rc;
    if (done == size) break;
    if (fcclAborted(abortFlag)) return abortedError(what);
    if (fcclTimeMs() >= deadlineMs)
      return FCCL_ERROR(fcclTimeout, FCCL_SUBSYS_BOOT, "timed out sending to %s (%zu of %zu bytes sent)", what,
                        done, size);
    if (pollOne(fd, POLLOUT, deadlineMs) < 0)
      return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "poll failed: %s", strerror(errno));
  }
  return fcclSuccess;
}

fcclResult_t fcclSocketRecvAll(int fd, void* buf, size_t size, int64_t deadlineMs, volatile int* abortFlag,
                               const char* what) {
  char* bytes = buf;
  size_t done = 0;
  while (done < size) {
    long rc = fcclSocketTryRecv(fd, bytes + done, size - done);
    if (rc == 0)
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT, "%s closed the connection (%zu of %zu bytes received)",
                        what, done, size);
    if (rc < 0 && errno != EAGAIN)
      return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_BOOT, "receiving from %s failed: %s", what, strerror(errno));
    if (rc > 0) {
      done += (size_t)rc;
      continue;
    }
    if (fcclAborted(abortFlag)) return abortedError(what);
    if (fcclTimeMs() >= deadlineMs)
      return FCCL_ERROR(fcclTimeout, FCCL_SUBSYS_BOOT, "timed out waiting for %s (%zu of %zu bytes received)", what,
                        done, size);
    if (pollOne(fd, POLLIN, deadlineMs) < 0)
      return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "poll failed: %s", strerror(errno));
  }
  return fcclSuccess;
}

void fcclSocketSetKeepalive(int fd, int64_t keepaliveMs, int userTimeout) {
  if (keepaliveMs <= 0) return;
  if (keepaliveMs > INT32_MAX) keepaliveMs = INT32_MAX;
  int one = 1, idle = 1, interval = 1;
  int count = keepaliveMs / 1000 > 1 ? (int)(keepaliveMs / 1000) : 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  if (userTimeout) {
    unsigned int ms = (unsigned int)keepaliveMs;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
  }
}

void fcclSocketClose(int* fd) {
  if (*fd >= 0) socketRelease(*fd);
  *fd = -1;
}

void fcclSocketCloseAfterPeer(int* fd) {
  if (*fd < 0) return;
  struct linger abortive = {.l_onoff = 1, .l_linger = 0};
  (void)setsockopt(*fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
  socketRelease(*fd);
  *fd = -1;
}
