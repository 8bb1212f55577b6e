/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A unique id handed from one process of a host to others over an abstract Unix socket (fcclCommShrink's
 * rendezvous: the survivors of a communicator have no exchange left that spans them, as the dead rank's ring links
 * are gone). Who is at the other end is the kernel's word (SO_PEERCRED), checked against the members' pids, so a
 * stranger never sees the id. Any local process can connect to an abstract socket and read its name in
 * /proc/net/unix, so strangers must cost the members nothing: member 0 drops a connection whose process is not a
 * member the moment it accepts it, and serves the members' connections side by side, each for a bounded time, so a
 * slow or silent one holds up nobody. And the name of each attempt is a MAC that only members can compute
 * (fcclBootstrapShareName), so a stranger cannot take the name of a retry before the members do.
 */
#include "bootstrap.h"

#include "check.h"
#include "crypto.h"
#include "debug.h"
#include "socket.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_BOOT

#define SHARE_HELLO_MAGIC 0x6663636c73686172ull /* "fcclshar" */
#define SHARE_POLL_MS 10
/* Members' connections served at once; more wait in the backlog. */
#define SHARE_MAX_CONNS 64
/* A member's connection has this long from its accept to say who it is and take the id. */
#define SHARE_CONN_MS 1000
/* Refused strangers logged one by one; the rest are counted in one line at the end. */
#define SHARE_REFUSALS_LOGGED 4

struct shareHello {
  uint64_t magic;
  int32_t member; /* the client's index among the members */
  int32_t pad;
};

static socklen_t shareAddress(const char* name, struct sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  /* Abstract: sun_path[0] == 0, no file to clean up after a crash. */
  int len = snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1, "fccl-share-%s", name);
  if (len < 0 || (size_t)len >= sizeof(addr->sun_path) - 1) len = (int)sizeof(addr->sun_path) - 2;
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
}

static int peerPid(int fd) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
  return (int)cred.pid;
}

/* Reads or writes exactly size bytes before deadline: poll, then a non-blocking transfer of what is ready. */
static int transfer(int fd, void* buf, size_t size, int writing, int64_t deadline) {
  size_t done = 0;
  while (done < size) {
    const int64_t left = deadline - fcclTimeMs();
    if (left <= 0) return 0;
    struct pollfd p = {.fd = fd, .events = writing ? POLLOUT : POLLIN, .revents = 0};
    int ready = poll(&p, 1, (int)(left < SHARE_POLL_MS ? left : SHARE_POLL_MS));
    if (ready < 0 && errno != EINTR) return 0;
    if (ready <= 0) continue;
    ssize_t rc = writing ? send(fd, (const char*)buf + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                         : recv(fd, (char*)buf + done, size - done, MSG_DONTWAIT);
    if (rc == 0) return 0;
    if (rc < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return 0;
    }
    done += (size_t)rc;
  }
  return 1;
}

/* A member's connection being served: its hello read, then the id written, without blocking. */
struct shareConn {
  int fd;
  int pid;
  int64_t acceptedMs;
  size_t got;  /* hello bytes read */
  size_t sent; /* id bytes written */
  struct shareHello hello;
};

/* Whether pid is the process of a member other than member 0 (several members may share one process). */
static int isMemberPid(const int32_t* pids, int n, int pid) {
  for (int m = 1; m < n; m++)
    if (pids[m] == pid) return 1;
  return 0;
}

/* Advances connection c: 1 while it goes on, 0 when it is done (served or refused; fd closed). */
static int serveConn(const char* name, const int32_t* pids, int n, const fcclUniqueId* id, char* served, int* left,
                     struct shareConn* c) {
  while (c->got < sizeof(c->hello)) {
    ssize_t rc = recv(c->fd, (char*)&c->hello + c->got, sizeof(c->hello) - c->got, MSG_DONTWAIT);
    if (rc < 0 && (errno == EAGAIN || errno == EINTR)) return 1;
    if (rc <= 0) break;
    c->got += (size_t)rc;
  }
  const int member = c->hello.member;
  if (c->got < sizeof(c->hello) || c->hello.magic != SHARE_HELLO_MAGIC || member <= 0 || member >= n ||
      served[member] || pids[member] != c->pid) {
    FCCL_INFO(FCCL_LOG_SUBSYS, "unique id share %s: refused a connection from pid %d (not a waiting member)", name,
              c->pid);
    close(c->fd);
    return 0;
  }
  while (c->sent < sizeof(*id)) {
    ssize_t rc = send(c->fd, (const char*)id + c->sent, sizeof(*id) - c->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc < 0 && (errno == EAGAIN || errno == EINTR)) return 1;
    if (rc <= 0) {
      close(c->fd); /* it went: it comes again if it still waits */
      return 0;
    }
    c->sent += (size_t)rc;
  }
  served[member] = 1;
  (*left)--;
  close(c->fd);
  return 0;
}

/* Member 0: serves *id to every other member once, refusing whoever is not one. */
static fcclResult_t serve(const char* name, const int32_t* pids, const int32_t* ranks, int n, const fcclUniqueId* id,
                          int timeoutMs) {
  struct sockaddr_un addr;
  const socklen_t addrLen = shareAddress(name, &addr);
  int listenFd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listenFd < 0)
    return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "unique id share %s: socket: %s", name, strerror(errno));
  if (bind(listenFd, (struct sockaddr*)&addr, addrLen) != 0 || listen(listenFd, SOMAXCONN) != 0) {
    const int err = errno;
    close(listenFd);
    return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "unique id share %s: cannot listen: %s", name,
                      strerror(err));
  }
  char* served = calloc((size_t)n, 1);
  struct shareConn* conns = calloc(SHARE_MAX_CONNS, sizeof(*conns));
  if (!served || !conns) {
    free(served);
    free(conns);
    close(listenFd);
    return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "out of host memory");
  }
  served[0] = 1;
  int left = n - 1, count = 0;
  unsigned long strangers = 0;
  const int64_t deadline = fcclTimeMs() + timeoutMs;
  while (left > 0 && fcclTimeMs() < deadline) {
    struct pollfd fds[1 + SHARE_MAX_CONNS];
    fds[0] = (struct pollfd){.fd = count < SHARE_MAX_CONNS ? listenFd : -1, .events = POLLIN};
    for (int i = 0; i < count; i++)
      fds[1 + i] = (struct pollfd){.fd = conns[i].fd,
                                   .events = (short)(conns[i].got < sizeof(conns[i].hello) ? POLLIN : POLLOUT)};
    if (poll(fds, (nfds_t)(1 + count), SHARE_POLL_MS) < 0 && errno != EINTR) break;
    const int64_t now = fcclTimeMs();
    /* Members' connections, side by side; one that had its time goes (its member connects again). */
    for (int i = count - 1; i >= 0; i--) {
      int going = (fds[1 + i].revents == 0 && now - conns[i].acceptedMs < SHARE_CONN_MS) ||
                  serveConn(name, pids, n, id, served, &left, &conns[i]);
      if (going && now - conns[i].acceptedMs >= SHARE_CONN_MS) {
        close(conns[i].fd);
        going = 0;
      }
      if (!going) conns[i] = conns[--count];
    }
    /* Whoever waits: a process that is not a member is dropped at once, before it is read or written. */
    while (count < SHARE_MAX_CONNS) {
      int fd = accept4(listenFd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      const int pid = peerPid(fd);
      if (!isMemberPid(pids, n, pid)) {
        if (strangers++ < SHARE_REFUSALS_LOGGED)
          FCCL_WARN(FCCL_LOG_SUBSYS, "unique id share %s: refused a connection from pid %d (not a member)", name, pid);
        close(fd);
        continue;
      }
      conns[count++] = (struct shareConn){.fd = fd, .pid = pid, .acceptedMs = now};
    }
  }
  for (int i = 0; i < count; i++) close(conns[i].fd);
  close(listenFd);
  free(conns);
  if (strangers > SHARE_REFUSALS_LOGGED)
    FCCL_WARN(FCCL_LOG_SUBSYS, "unique id share %s: refused %lu connections of processes that are not members", name,
              strangers);
  fcclResult_t res = fcclSuccess;
  if (left > 0) {
    char missing[256] = "";
    size_t used = 0;
    for (int m = 1; m < n && used + 16 < sizeof(missing); m++)
      if (!served[m])
        used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%d", used ? ", " : "", ranks[m]);
    res = FCCL_ERROR(fcclTimeout, FCCL_LOG_SUBSYS, "unique id share %s: rank%s %s did not come within %d ms", name,
                     left == 1 ? "" : "s", missing, timeoutMs);
  }
  free(served);
  return res;
}

/* Another member: connects (the server may not listen yet), checks it is member 0's process, receives *id. */
static fcclResult_t fetch(const char* name, const int32_t* pids, const int32_t* ranks, int me, fcclUniqueId* id,
                          int timeoutMs) {
  struct sockaddr_un addr;
  const socklen_t addrLen = shareAddress(name, &addr);
  const int64_t deadline = fcclTimeMs() + timeoutMs;
  while (fcclTimeMs() < deadline) {
    /* Non-blocking: a connect to a full backlog (strangers may fill it) fails with EAGAIN instead of waiting. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
      return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "unique id share %s: socket: %s", name, strerror(errno));
    if (connect(fd, (struct sockaddr*)&addr, addrLen) != 0) { /* not listening yet, or its backlog is full */
      close(fd);
      usleep(SHARE_POLL_MS * 1000);
      continue;
    }
    const int pid = peerPid(fd);
    if (pid != pids[0]) {
      close(fd);
      return FCCL_ERROR(fcclRemoteError, FCCL_LOG_SUBSYS,
                        "unique id share %s: the socket is held by pid %d, not by rank %d's process (pid %d)", name,
                        pid, ranks[0], pids[0]);
    }
    const struct shareHello hello = {SHARE_HELLO_MAGIC, me, 0};
    const int ok =
        transfer(fd, (void*)&hello, sizeof(hello), 1, deadline) && transfer(fd, id, sizeof(*id), 0, deadline);
    close(fd);
    if (ok) return fcclSuccess;
    /* Refused or cut: another member's turn may have raced ours; try again until the deadline. */
    usleep(SHARE_POLL_MS * 1000);
  }
  return FCCL_ERROR(fcclTimeout, FCCL_LOG_SUBSYS, "unique id share %s: no id from rank %d (pid %d) within %d ms",
                    name, ranks[0], pids[0], timeoutMs);
}

fcclResult_t fcclBootstrapLocalShare(const char* name, const int32_t* pids, const int32_t* ranks, int n, int me,
                                     fcclUniqueId* id, int timeoutMs) {
  if (!name || !pids || !ranks || !id || n < 1 || me < 0 || me >= n || timeoutMs <= 0)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_LOG_SUBSYS, "unique id share: bad arguments (n %d, me %d)", n, me);
  if (n == 1) return fcclSuccess;
  return me == 0 ? serve(name, pids, ranks, n, id, timeoutMs) : fetch(name, pids, ranks, me, id, timeoutMs);
}

fcclResult_t fcclBootstrapShareName(const struct fcclBootstrap* bootstrap, const void* context, size_t contextBytes,
                                    unsigned attempt, char* name, size_t size) {
  if (!context || !name || size < 2 * FCCL_SHARE_NAME_BYTES + 1)
    return FCCL_ERROR(fcclInvalidArgument, FCCL_LOG_SUBSYS, "unique id share name: bad arguments");
  uint8_t key[FCCL_BOOTSTRAP_SECRET_BYTES];
  size_t keyBytes = 0;
  if (bootstrap && bootstrap->ops && bootstrap->ops->secret && bootstrap->ops->secret(bootstrap, key) == 0)
    keyBytes = sizeof(key);
  uint8_t attemptBytes[4];
  for (int i = 0; i < 4; i++) attemptBytes[i] = (uint8_t)(attempt >> (8 * i));
  static const char label[] = "fccl unique id share";
  const struct fcclMacPart parts[] = {{label, sizeof(label)}, {context, contextBytes}, {attemptBytes, 4}};
  uint8_t mac[FCCL_MAC_BYTES];
  FCCLCHECK(fcclMac(key, keyBytes, parts, 3, mac));
  for (int i = 0; i < FCCL_SHARE_NAME_BYTES; i++) snprintf(name + 2 * i, 3, "%02x", mac[i]);
  return fcclSuccess;
}
