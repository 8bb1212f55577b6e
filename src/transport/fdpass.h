/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Passing file descriptors (cuMem export handles) between processes of one host.
 *
 * Two ways, tried in this order:
 *  - pull: pidfd_open(exporter pid) + pidfd_getfd(exporter's fd number). Needs Linux 5.6 and ptrace-attach
 *    permission over the exporter (same user, and Yama's ptrace_scope allowing it); no cooperation from the
 *    exporter beyond keeping the descriptor open.
 *  - push: the exporter sends the descriptors with SCM_RIGHTS over a Unix datagram socket in the abstract
 *    namespace, whose name the receiver published through the bootstrap all-gather. Every message carries a
 *    random tag agreed through the bootstrap; messages with another tag are dropped (their descriptors closed).
 * Internal to the transport layer (and its tests).
 */
#ifndef FCCL_FDPASS_H_
#define FCCL_FDPASS_H_

#include "fccl.h"

#include <stdint.h>

#define FCCL_FD_SOCKET_NAME_BYTES 48 /* printable abstract name, NUL-terminated; the socket's address is "\0" name */

struct fcclFdSocket {
  int fd;
  char name[FCCL_FD_SOCKET_NAME_BYTES];
};

/*
 * Copies descriptor remoteFd of process pid into this process (close-on-exec). When the kernel or the
 * permissions do not allow it (no pidfd_getfd, EPERM, EACCES) *unsupported is set, nothing is logged at WARN and
 * fcclSystemError is returned, so the caller can fall back to the socket. Other failures (the process is gone,
 * the descriptor is not open there) are errors with *unsupported 0.
 */
fcclResult_t fcclFdPidGet(int pid, int remoteFd, int* localFd, int* unsupported);

/* Binds a non-blocking datagram socket at a fresh abstract name (fccl-fd-<pid>-<random>). */
fcclResult_t fcclFdSocketOpen(struct fcclFdSocket* sock);
void fcclFdSocketClose(struct fcclFdSocket* sock);

/* Descriptors for one peer: its socket name and the list, sent in order. */
struct fcclFdSend {
  const char* peerName;
  int peerRank;
  int count;
  const int* fds;
};

/* Descriptors expected from one peer; fds (count entries) is filled in order, each one owned by the caller
 * afterwards. */
struct fcclFdRecv {
  int peerRank;
  int count;
  int* fds;
};

/*
 * Sends every fcclFdSend and receives every fcclFdRecv, interleaved so that full socket queues on both sides
 * cannot deadlock. Messages are matched by tag and sender rank. Bounded by timeoutMs (fcclTimeout, naming the
 * ranks still missing) and by *abortFlag (fcclInvalidUsage); on failure every descriptor received so far is closed
 * and the recv lists hold -1.
 */
fcclResult_t fcclFdExchange(struct fcclFdSocket* sock, uint64_t tag, int myRank, int nSends,
                            const struct fcclFdSend* sends, int nRecvs, struct fcclFdRecv* recvs, int timeoutMs,
                            volatile int* abortFlag);

/* 64 random bits from the kernel (getrandom), for socket names, tags and nonces. */
uint64_t fcclRandom64(void);

#endif /* FCCL_FDPASS_H_ */
