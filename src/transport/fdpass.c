/* SPDX-License-Identifier: Apache-2.0 */
/* File-descriptor passing between processes of one host: pidfd_getfd, and SCM_RIGHTS over abstract Unix sockets. */
#include "fdpass.h"

#include "check.h"
#include "debug.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_IPC

/* The generic syscall numbers (x86-64 and aarch64 share them); libc headers older than the kernel may lack them. */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define FD_MESSAGE_MAGIC 0x66636c66647061ull /* "fclfdpa" */
#define FD_PER_MESSAGE 64                    /* well under the kernel's SCM_MAX_FD (253) */

struct fdMessage {
  uint64_t magic;
  uint64_t tag;
  int32_t senderRank;
  uint32_t first; /* index of the first descriptor of this message in the sender's list for the receiver */
  uint32_t count;
  uint32_t total;
};

uint64_t fcclRandom64(void) {
  uint64_t value = 0;
  ssize_t got;
  do {
    got = getrandom(&value, sizeof(value), 0);
  } while (got == -1 && errno == EINTR);
  if (got != (ssize_t)sizeof(value)) {
    /* getrandom cannot fail for 8 bytes once the pool is ready; keep something unique anyway. */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    value = ((uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec) ^ ((uint64_t)getpid() << 40);
  }
  return value;
}

fcclResult_t fcclFdPidGet(int pid, int remoteFd, int* localFd, int* unsupported) {
  *unsupported = 0;
  long pidfd;
  do {
    pidfd = syscall(SYS_pidfd_open, (pid_t)pid, 0);
  } while (pidfd == -1 && errno == EINTR);
  if (pidfd == -1) {
    int err = errno;
    if (err == ENOSYS || err == EPERM || err == EACCES) {
      *unsupported = 1;
      FCCL_TRACE(FCCL_SUBSYS_IPC, "pidfd_open(%d) not available: %s", pid, strerror(err));
      return fcclSystemError;
    }
    return FCCL_ERROR(err == ESRCH ? fcclRemoteError : fcclSystemError, FCCL_SUBSYS_IPC,
                      "pidfd_open of peer process %d failed: %s", pid, strerror(err));
  }
  long fd;
  do {
    fd = syscall(SYS_pidfd_getfd, (int)pidfd, remoteFd, 0);
  } while (fd == -1 && errno == EINTR);
  int err = errno;
  close((int)pidfd);
  if (fd == -1) {
    if (err == ENOSYS || err == EPERM || err == EACCES) {
      *unsupported = 1;
      FCCL_TRACE(FCCL_SUBSYS_IPC, "pidfd_getfd(pid %d, fd %d) not allowed: %s", pid, remoteFd, strerror(err));
      return fcclSystemError;
    }
    return FCCL_ERROR(err == ESRCH || err == EBADF ? fcclRemoteError : fcclSystemError, FCCL_SUBSYS_IPC,
                      "pidfd_getfd of descriptor %d of peer process %d failed: %s", remoteFd, pid, strerror(err));
  }
  *localFd = (int)fd;
  return fcclSuccess;
}

static socklen_t abstractAddress(const char* name, struct sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  size_t length = strnlen(name, FCCL_FD_SOCKET_NAME_BYTES - 1);
  memcpy(addr->sun_path + 1, name, length); /* sun_path[0] == '\0': the abstract namespace */
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + length);
}

fcclResult_t fcclFdSocketOpen(struct fcclFdSocket* sock) {
  sock->fd = -1;
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd == -1)
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "socket(AF_UNIX, SOCK_DGRAM) failed: %s", strerror(errno));
  for (int attempt = 0; attempt < 8; attempt++) {
    snprintf(sock->name, sizeof(sock->name), "fccl-fd-%d-%016" PRIx64, (int)getpid(), fcclRandom64());
    struct sockaddr_un addr;
    socklen_t length = abstractAddress(sock->name, &addr);
    if (bind(fd, (struct sockaddr*)&addr, length) == 0) {
      sock->fd = fd;
      return fcclSuccess;
    }
    if (errno != EADDRINUSE) break;
  }
  int err = errno;
  close(fd);
  return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "bind of abstract socket %s failed: %s", sock->name,
                    strerror(err));
}

void fcclFdSocketClose(struct fcclFdSocket* sock) {
  if (sock->fd >= 0) close(sock->fd);
  sock->fd = -1;
}

/* One message of up to FD_PER_MESSAGE descriptors. *sent 1: sent, 0: the peer's queue is full (try later). */
static fcclResult_t sendMessage(int sockFd, const char* peerName, int peerRank, const struct fdMessage* header,
                                const int* fds, int* sent) {
  struct sockaddr_un addr;
  socklen_t addrLength = abstractAddress(peerName, &addr);
  union {
    char buf[CMSG_SPACE(sizeof(int) * FD_PER_MESSAGE)];
    struct cmsghdr align;
  } control;
  memset(&control, 0, sizeof(control));
  struct iovec iov = {.iov_base = (void*)header, .iov_len = sizeof(*header)};
  struct msghdr msg = {.msg_name = &addr, .msg_namelen = addrLength, .msg_iov = &iov, .msg_iovlen = 1};
  msg.msg_control = control.buf;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * header->count);
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * header->count);
  memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * header->count);
  ssize_t res;
  do {
    res = sendmsg(sockFd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (res == -1 && errno == EINTR);
  if (res == (ssize_t)sizeof(*header)) {
    *sent = 1;
    return fcclSuccess;
  }
  if (res == -1 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) {
    *sent = 0;
    return fcclSuccess;
  }
  return FCCL_ERROR(fcclRemoteError, FCCL_SUBSYS_IPC, "sending %u descriptors to rank %d at @%s failed: %s",
                    header->count, peerRank, peerName, res == -1 ? strerror(errno) : "short write");
}

/* Receives one message if one is queued; 1 in *got when it did. Descriptors of messages that match nothing are
 * closed. */
static fcclResult_t receiveMessage(int sockFd, uint64_t tag, int nRecvs, struct fcclFdRecv* recvs, int* filled,
                                   int* got) {
  *got = 0;
  struct fdMessage header;
  union {
    char buf[CMSG_SPACE(sizeof(int) * FD_PER_MESSAGE)];
    struct cmsghdr align;
  } control;
  struct iovec iov = {.iov_base = &header, .iov_len = sizeof(header)};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof(control.buf)};
  ssize_t res;
  do {
    res = recvmsg(sockFd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (res == -1 && errno == EINTR);
  if (res == -1) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return fcclSuccess;
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "recvmsg on the descriptor socket failed: %s",
                      strerror(errno));
  }
  *got = 1;
  int fds[FD_PER_MESSAGE];
  int nfds = 0;
  for (struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    int n = (int)((cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
      if (nfds < FD_PER_MESSAGE)
        fds[nfds++] = fd;
      else
        close(fd);
    }
  }
  struct fcclFdRecv* target = NULL;
  int valid = res == (ssize_t)sizeof(header) && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
              header.magic == FD_MESSAGE_MAGIC && header.tag == tag && (uint32_t)nfds == header.count;
  for (int r = 0; valid && r < nRecvs; r++)
    if (recvs[r].peerRank == header.senderRank) target = &recvs[r];
  if (target && header.first <= (uint32_t)target->count && header.count <= (uint32_t)target->count - header.first &&
      header.total == (uint32_t)target->count) {
    for (uint32_t i = 0; i < header.count; i++) {
      if (target->fds[header.first + i] != -1) close(target->fds[header.first + i]); /* a duplicate: keep the latest */
      else (*filled)++;
      target->fds[header.first + i] = fds[i];
    }
    return fcclSuccess;
  }
  FCCL_INFO(FCCL_SUBSYS_IPC, "dropped a descriptor message (%zd bytes, %d descriptors, sender rank %d) that belongs "
            "to no exchange of ours", res, nfds, res == (ssize_t)sizeof(header) ? header.senderRank : -1);
  for (int i = 0; i < nfds; i++) close(fds[i]);
  return fcclSuccess;
}

static int64_t elapsedMs(const struct timespec* start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)(now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

fcclResult_t fcclFdExchange(struct fcclFdSocket* sock, uint64_t tag, int myRank, int nSends,
                            const struct fcclFdSend* sends, int nRecvs, struct fcclFdRecv* recvs, int timeoutMs,
                            volatile int* abortFlag) {
  fcclResult_t res = fcclSuccess;
  int expected = 0, filled = 0;
  for (int r = 0; r < nRecvs; r++) {
    for (int i = 0; i < recvs[r].count; i++) recvs[r].fds[i] = -1;
    expected += recvs[r].count;
  }
  int* progress = calloc((size_t)(nSends > 0 ? nSends : 1), sizeof(int)); /* descriptors sent to each peer */
  if (!progress) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "out of host memory");
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);

  for (;;) {
    int pending = 0;
    for (int s = 0; s < nSends; s++) {
      while (progress[s] < sends[s].count) {
        struct fdMessage header = {.magic = FD_MESSAGE_MAGIC, .tag = tag, .senderRank = myRank,
                                   .first = (uint32_t)progress[s], .total = (uint32_t)sends[s].count};
        int left = sends[s].count - progress[s];
        header.count = (uint32_t)(left < FD_PER_MESSAGE ? left : FD_PER_MESSAGE);
        int sent = 0;
        res = sendMessage(sock->fd, sends[s].peerName, sends[s].peerRank, &header, sends[s].fds + progress[s], &sent);
        if (res != fcclSuccess) goto fail;
        if (!sent) break;
        progress[s] += (int)header.count;
      }
      if (progress[s] < sends[s].count) pending = 1;
    }
    int got = 1;
    while (got && filled < expected)
      FCCLCHECKGOTO(receiveMessage(sock->fd, tag, nRecvs, recvs, &filled, &got), res, fail);
    if (!pending && filled == expected) break;

    if (abortFlag && __atomic_load_n(abortFlag, __ATOMIC_ACQUIRE)) {
      res = FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_IPC, "descriptor exchange aborted (communicator aborted)");
      goto fail;
    }
    int64_t elapsed = elapsedMs(&start);
    if (timeoutMs >= 0 && elapsed >= timeoutMs) {
      char missing[256] = "";
      size_t used = 0;
      for (int r = 0; r < nRecvs; r++) {
        int have = 0;
        for (int i = 0; i < recvs[r].count; i++) have += recvs[r].fds[i] != -1;
        if (have < recvs[r].count && used < sizeof(missing))
          used += (size_t)snprintf(missing + used, sizeof(missing) - used, " %d", recvs[r].peerRank);
      }
      res = FCCL_ERROR(fcclTimeout, FCCL_SUBSYS_IPC,
                       "rank %d: descriptor exchange timed out after %d ms; still waiting for ranks:%s%s", myRank,
                       timeoutMs, missing[0] ? missing : " none", pending ? " (and peers' queues stayed full)" : "");
      goto fail;
    }
    /* Wait for a message, or a little while before retrying a send to a full queue. */
    struct pollfd pfd = {.fd = sock->fd, .events = POLLIN};
    int waitMs = pending ? 1 : 50;
    if (filled == expected) {
      usleep(1000);
    } else if (poll(&pfd, 1, waitMs) == -1 && errno != EINTR) {
      res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_IPC, "poll on the descriptor socket failed: %s", strerror(errno));
      goto fail;
    }
  }
  free(progress);
  return fcclSuccess;

fail:
  for (int r = 0; r < nRecvs; r++)
    for (int i = 0; i < recvs[r].count; i++)
      if (recvs[r].fds[i] != -1) {
        close(recvs[r].fds[i]);
        recvs[r].fds[i] = -1;
      }
  free(progress);
  return res;
}
