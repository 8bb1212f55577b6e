/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TCP bootstrap's root server: the thread that serves a unique id. It takes connections (strangers until they
 * prove the secret: hello, the root's challenge with its own proof, the rank's proof), admits one rank per slot,
 * answers every rank with all ranks' listen addresses and nonces (the welcome, under the root's MAC) or with the
 * reason the rendezvous failed, and exits by itself. The process-wide list of roots lets
 * a rank of this process, a later fcclGetUniqueId, fcclBootstrapStopRoot or the library's destructor join it.
 * tcp.h has the method's outline; docs/bootstrap.md#rendezvous the protocol.
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
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_BOOT

/* Roots this process may have running at once (unused unique ids keep theirs until the timeout). */
#define MAX_LIVE_ROOTS 1024
/* How long the root waits for ranks to close after the welcome, to leave no socket in TIME_WAIT. */
#define ROOT_LINGER_MS 1000
/* Connections accepted in one go before the root looks at its ranks and its deadline again. */
#define ROOT_ACCEPT_BURST (2 * FCCL_TCP_PENDING_MAX)

struct tcpRoot {
  int listenFd;
  union fcclSocketAddress addr;
  uint8_t secret[FCCL_WIRE_SECRET_BYTES];
  uint8_t nonce[FCCL_WIRE_NONCE_BYTES]; /* drawn at start: every rank's proof covers it, so no old proof passes */
  int timeoutMs; /* wait for the first rank */
  pid_t pid;     /* the process that started it: a forked child must not join its parent's thread */
  pthread_t thread;
  int done; /* atomic: the thread finished and can be joined at once */
  int stop; /* atomic: fcclBootstrapStopRoot asks it to close now */
  struct tcpRoot* next;
};

static pthread_mutex_t rootsLock = PTHREAD_MUTEX_INITIALIZER;
static struct tcpRoot* roots; /* guarded by rootsLock */
static int rootsStop;         /* atomic: set at process exit, every root returns within a slice */

struct rootRank {
  int fd; /* -1 until the rank arrived */
  struct fcclWireHello hello;
};

struct rootState {
  struct tcpRoot* root;
  struct fcclTcpPending pending; /* connections before their hello */
  struct rootRank* ranks; /* nranks entries once the first rank arrived */
  int nranks;
  int arrived;
  int64_t deadline;
  /* After a fatal error every authenticated rank, arrived or arriving, is told about it. */
  fcclResult_t fatal;
  int fatalCulprit;
  char fatalText[FCCL_WIRE_ERROR_TEXT_MAX];
  int answered; /* ranks told the outcome, or gone and needing no answer */
};

static void rootReplyError(int* fd, fcclResult_t result, int culprit, const char* text) {
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_SMALL_MAX];
  size_t size = fcclTcpEncodeErrorFrame(frame, result, culprit, -1, text);
  fcclTcpSendNotice(*fd, frame, size);
  fcclTcpDrainAndClose(fd);
}

/* Fails the rendezvous (the first failure wins): logs it once and sends the error to every arrived rank; ranks that
 * arrive later get it from rootAdmit. */
static void rootFail(struct rootState* st, fcclResult_t result, int culprit, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void rootFail(struct rootState* st, fcclResult_t result, int culprit, const char* fmt, ...) {
  if (st->fatal != fcclSuccess) return;
  va_list args;
  va_start(args, fmt);
  vsnprintf(st->fatalText, sizeof(st->fatalText), fmt, args);
  va_end(args);
  st->fatal = result;
  st->fatalCulprit = culprit;
  char addr[FCCL_SOCKET_ADDR_STR];
  FCCL_WARN(FCCL_SUBSYS_BOOT, "bootstrap root %s: %s", fcclSocketAddrToString(&st->root->addr, addr, sizeof(addr)),
            st->fatalText);
  for (int r = 0; r < st->nranks; r++) {
    if (st->ranks[r].fd < 0) continue;
    rootReplyError(&st->ranks[r].fd, result, culprit, st->fatalText);
    st->answered++;
  }
}

/* A hello passed the parser; check it against what other ranks said and take the connection. */
static void rootAdmit(struct rootState* st, int fd, const struct fcclWireHello* hello) {
  if (st->fatal != fcclSuccess) {
    rootReplyError(&fd, st->fatal, st->fatalCulprit, st->fatalText);
    st->answered++;
    return;
  }
  if (st->ranks == NULL) {
    st->ranks = calloc((size_t)hello->nranks, sizeof(*st->ranks));
    if (st->ranks == NULL) {
      rootReplyError(&fd, fcclSystemError, -1, "bootstrap root: out of memory");
      st->fatal = fcclSystemError;
      return;
    }
    for (int r = 0; r < hello->nranks; r++) st->ranks[r].fd = -1;
    st->nranks = hello->nranks;
    st->deadline = fcclTimeMs() + hello->timeoutMs; /* from now on, bounded by the arrived ranks' timeouts */
  }
  if (hello->nranks != st->nranks) {
    int first = 0;
    while (first < st->nranks && st->ranks[first].fd < 0) first++;
    rootFail(st, fcclRemoteError, hello->rank,
             "nranks mismatch: rank %d (host %s, pid %d) says nranks=%d, rank %d said nranks=%d", (int)hello->rank,
             hello->host, (int)hello->pid, (int)hello->nranks, first, st->nranks);
    rootReplyError(&fd, st->fatal, st->fatalCulprit, st->fatalText);
    st->answered++;
    return;
  }
  struct rootRank* slot = &st->ranks[hello->rank];
  if (slot->fd >= 0) {
    rootFail(st, fcclRemoteError, hello->rank, "rank %d was claimed twice: by host %s pid %d and by host %s pid %d",
             (int)hello->rank, slot->hello.host, (int)slot->hello.pid, hello->host, (int)hello->pid);
    rootReplyError(&fd, st->fatal, st->fatalCulprit, st->fatalText);
    st->answered++;
    return;
  }
  slot->fd = fd;
  slot->hello = *hello;
  st->arrived++;
  int64_t rankDeadline = fcclTimeMs() + hello->timeoutMs;
  if (rankDeadline < st->deadline) st->deadline = rankDeadline;
  FCCL_TRACE(FCCL_SUBSYS_BOOT, "bootstrap root: rank %d of %d arrived (host %s, pid %d), %d of %d here",
             (int)hello->rank, st->nranks, hello->host, (int)hello->pid, st->arrived, st->nranks);
}

/* A connection's hello: answered with the challenge (the root's nonce and its proof over the hello); 0 when the
 * connection was refused instead. */
static int rootChallenge(struct rootState* st, int index) {
  struct fcclTcpConn* conn = &st->pending.conns[index];
  char why[256];
  if (conn->reader.header.type != FCCL_WIRE_HELLO) {
    fcclTcpPendingRefuse(&st->pending, index, fcclLogWarn, "message type %u where a hello belongs",
                         (unsigned)conn->reader.header.type);
    return 0;
  }
  const uint8_t* payload = conn->reader.buf + FCCL_WIRE_HEADER_BYTES;
  if (fcclWireParseHello(payload, conn->reader.header.length, &conn->hello, why, sizeof(why)) != FCCL_WIRE_OK) {
    rootReplyError(&conn->fd, fcclRemoteError, -1, "bootstrap root refused the hello: invalid fields");
    fcclTcpPendingRefuse(&st->pending, index, fcclLogWarn, "invalid hello: %s", why);
    return 0;
  }
  struct fcclWireChallenge challenge;
  memcpy(challenge.nonce, st->root->nonce, sizeof(challenge.nonce));
  uint8_t frame[FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_CHALLENGE_BYTES];
  if (fcclTcpHandshakeMac(st->root->secret, 1, payload, st->root->nonce, challenge.mac) != fcclSuccess ||
      !fcclTcpSendFresh(conn->fd, frame, fcclWireEncodeChallenge(frame, &challenge))) {
    fcclTcpPendingRefuse(&st->pending, index, fcclLogWarn, "the challenge could not be sent (the connection went)");
    return 0;
  }
  memcpy(conn->helloPayload, payload, sizeof(conn->helloPayload));
  conn->challenged = 1;
  fcclWireReaderInit(&conn->reader);
  return 1;
}

/* A challenged connection's proof: the rank is admitted, or the connection refused. */
static void rootCheckProof(struct rootState* st, int index) {
  struct fcclTcpConn* conn = &st->pending.conns[index];
  const struct fcclWireHello* hello = &conn->hello;
  if (conn->reader.header.type != FCCL_WIRE_PROOF) {
    fcclTcpPendingRefuse(&st->pending, index, fcclLogWarn, "message type %u where a proof belongs",
                         (unsigned)conn->reader.header.type);
    return;
  }
  uint8_t expected[FCCL_WIRE_MAC_BYTES];
  if (fcclTcpHandshakeMac(st->root->secret, 0, conn->helloPayload, st->root->nonce, expected) != fcclSuccess ||
      !fcclMacEqual(expected, conn->reader.buf + FCCL_WIRE_HEADER_BYTES)) {
    rootReplyError(&conn->fd, fcclRemoteError, -1,
                   "bootstrap root refused the connection: wrong secret (its proof does not verify: a unique id of "
                   "another communicator?)");
    fcclTcpPendingRefuse(&st->pending, index, fcclLogWarn,
                         "claims rank %d, host %s, pid %d, and cannot prove the secret (a unique id of another "
                         "communicator, or a stray process)",
                         (int)hello->rank, hello->host, (int)hello->pid);
    return;
  }
  struct fcclWireHello admitted = *hello;
  rootAdmit(st, fcclTcpPendingTake(&st->pending, index), &admitted);
}

static void rootHandlePending(struct rootState* st, int index) {
  for (;;) { /* a rank that connects again sends its proof with its hello: both may be here */
    char why[256] = "";
    int err = 0;
    fcclWireStatus_t status = FCCL_WIRE_OK;
    fcclWireReadResult_t rr = fcclTcpPendingRead(&st->pending, index, &err, &status, why, sizeof(why));
    struct fcclTcpConn* conn = &st->pending.conns[index];
    switch (rr) {
      case FCCL_READ_MORE: return;
      case FCCL_READ_FRAME:
        if (conn->challenged) {
          rootCheckProof(st, index);
          return;
        }
        if (!rootChallenge(st, index)) return;
        continue;
      case FCCL_READ_CLOSED:
      case FCCL_READ_ERROR:
        fcclTcpPendingRefuse(&st->pending, index, fcclLogInfo, "closed before %s (%s)",
                             conn->challenged ? "its proof" : "a hello", rr == FCCL_READ_ERROR ? strerror(err) : "EOF");
        return;
      case FCCL_READ_MALFORMED:
        if (status == FCCL_WIRE_BAD_VERSION) {
          /* An fccl of another version: tell it why, so its user sees the cause instead of a timeout. */
          char text[320];
          snprintf(text, sizeof(text), "bootstrap root refused the connection: %s", why);
          rootReplyError(&conn->fd, fcclRemoteError, -1, text);
        }
        fcclTcpPendingRefuse(&st->pending, index, fcclLogWarn, "%s", why);
        return;
    }
  }
}

/* New connections, each read at once: a rank's hello is usually there already, and it is admitted on the spot. */
static void rootAccept(struct rootState* st, int64_t now) {
  for (int n = 0; n < ROOT_ACCEPT_BURST; n++) {
    int index = fcclTcpPendingAccept(&st->pending, now);
    if (index < 0) return;
    rootHandlePending(st, index);
  }
}

/* An arrived rank's connection became readable: ranks send nothing after the hello, so it closed or misbehaves. */
static void rootCheckRank(struct rootState* st, int rank) {
  uint8_t byte;
  long rc = fcclSocketTryRecv(st->ranks[rank].fd, &byte, 1);
  if (rc < 0 && errno == EAGAIN) return;
  const struct fcclWireHello* hello = &st->ranks[rank].hello;
  fcclSocketClose(&st->ranks[rank].fd);
  st->arrived--;
  st->answered++; /* it is gone and needs no answer: the root must not wait for it until its deadline */
  rootFail(st, fcclRemoteError, rank,
           "rank %d (host %s, pid %d) %s before every rank arrived (%d of %d had arrived)", rank, hello->host,
           (int)hello->pid, rc == 0 ? "disconnected" : rc > 0 ? "sent unexpected data" : "lost its connection",
           st->arrived + 1, st->nranks);
}

/* The deadline passed with ranks missing: the error every arrived rank gets names them (the first 16). */
static void rootTimeout(struct rootState* st) {
  char missing[256] = "";
  size_t used = 0;
  int nmissing = 0, firstMissing = -1;
  for (int r = 0; r < st->nranks; r++) {
    if (st->ranks[r].fd >= 0) continue;
    if (firstMissing < 0) firstMissing = r;
    if (nmissing < 16 && used < sizeof(missing)) {
      int n = snprintf(missing + used, sizeof(missing) - used, "%s%d", nmissing ? ", " : "", r);
      if (n > 0) used += (size_t)n;
    } else if (nmissing == 16 && used + 5 < sizeof(missing)) {
      snprintf(missing + used, sizeof(missing) - used, ", ...");
      used += 5;
    }
    nmissing++;
  }
  rootFail(st, fcclTimeout, nmissing == 1 ? firstMissing : -1,
           "rank%s %s did not arrive in time (%d of %d ranks arrived; timeout of the earliest arrived rank)",
           nmissing == 1 ? "" : "s", missing, st->arrived, st->nranks);
}

/* Everyone arrived: send each rank every listen address and nonce, under a MAC over its own nonce and the root's,
 * then wait for the ranks to hang up first. */
static void rootWelcome(struct rootState* st) {
  size_t size = FCCL_WIRE_HEADER_BYTES + FCCL_WIRE_WELCOME_BYTES(st->nranks);
  uint8_t* frame = malloc(size);
  union fcclSocketAddress* addrs = calloc((size_t)st->nranks, sizeof(*addrs));
  uint8_t* nonces = malloc((size_t)st->nranks * FCCL_WIRE_NONCE_BYTES);
  if (!frame || !addrs || !nonces) {
    free(frame);
    free(addrs);
    free(nonces);
    rootFail(st, fcclSystemError, -1, "bootstrap root: out of memory for the welcome of %d ranks", st->nranks);
    return;
  }
  for (int r = 0; r < st->nranks; r++) {
    addrs[r] = st->ranks[r].hello.listenAddr;
    memcpy(nonces + (size_t)r * FCCL_WIRE_NONCE_BYTES, st->ranks[r].hello.nonce, FCCL_WIRE_NONCE_BYTES);
  }
  fcclWireEncodeWelcome(frame, addrs, nonces, st->nranks);
  free(addrs);
  free(nonces);
  uint8_t* body = frame + FCCL_WIRE_HEADER_BYTES;
  uint8_t* mac = frame + size - FCCL_WIRE_MAC_BYTES;
  int64_t sendDeadline = fcclTimeMs() + 5000 < st->deadline ? fcclTimeMs() + 5000 : st->deadline;
  for (int r = 0; r < st->nranks; r++) {
    char what[32];
    snprintf(what, sizeof(what), "rank %d", r);
    if (fcclTcpWelcomeMac(st->root->secret, st->ranks[r].hello.nonce, st->root->nonce, body, (size_t)(mac - body),
                          mac) != fcclSuccess ||
        fcclSocketSendAll(st->ranks[r].fd, frame, size, sendDeadline, &rootsStop, what) != fcclSuccess)
      fcclSocketClose(&st->ranks[r].fd); /* that rank is gone; its ring neighbours will report it */
  }
  free(frame);
  FCCL_INFO(FCCL_SUBSYS_BOOT, "bootstrap root: all %d ranks arrived", st->nranks);
  int64_t lingerEnd = fcclTimeMs() + ROOT_LINGER_MS;
  int open = 0;
  for (int r = 0; r < st->nranks; r++) open += st->ranks[r].fd >= 0;
  while (open > 0 && fcclTimeMs() < lingerEnd && !__atomic_load_n(&rootsStop, __ATOMIC_ACQUIRE) &&
         !__atomic_load_n(&st->root->stop, __ATOMIC_ACQUIRE)) {
    for (int r = 0; r < st->nranks; r++) {
      if (st->ranks[r].fd < 0) continue;
      uint8_t byte;
      long rc = fcclSocketTryRecv(st->ranks[r].fd, &byte, 1);
      if (rc == 0) {
        fcclSocketCloseAfterPeer(&st->ranks[r].fd);
        open--;
      } else if (rc > 0 || errno != EAGAIN) {
        fcclSocketClose(&st->ranks[r].fd);
        open--;
      }
    }
    if (open > 0) {
      struct pollfd fds[64];
      int nfds = 0;
      for (int r = 0; r < st->nranks && nfds < 64; r++)
        if (st->ranks[r].fd >= 0) fds[nfds++] = (struct pollfd){.fd = st->ranks[r].fd, .events = POLLIN};
      (void)poll(fds, (nfds_t)nfds, FCCL_SOCKET_POLL_SLICE_MS);
    }
  }
}

/*
 * The root thread. It has no abort flag: its polls (at most 50 ms) are bounded by its deadline, and it stops early
 * when fcclBootstrapStopRoot sets root->stop or the process exits (rootsStop). docs/bootstrap.md#failures
 */
static void* rootMain(void* arg) {
  struct tcpRoot* root = arg;
  struct rootState* st = calloc(1, sizeof(*st));
  if (st == NULL) {
    FCCL_WARN(FCCL_SUBSYS_BOOT, "bootstrap root: out of memory");
    fcclSocketClose(&root->listenFd);
    __atomic_store_n(&root->done, 1, __ATOMIC_RELEASE);
    return NULL;
  }
  st->root = root;
  st->deadline = fcclTimeMs() + root->timeoutMs;
  char addr[FCCL_SOCKET_ADDR_STR], owner[FCCL_SOCKET_ADDR_STR + 16];
  snprintf(owner, sizeof(owner), "bootstrap root %s", fcclSocketAddrToString(&root->addr, addr, sizeof(addr)));
  fcclTcpPendingInit(&st->pending, root->listenFd, owner);
  struct pollfd* fds = NULL;
  size_t fdsCap = 0;

  while (!__atomic_load_n(&rootsStop, __ATOMIC_ACQUIRE) && !__atomic_load_n(&root->stop, __ATOMIC_ACQUIRE)) {
    if (st->fatal == fcclSuccess && st->nranks > 0 && st->arrived == st->nranks) {
      rootWelcome(st);
      break;
    }
    if (st->fatal != fcclSuccess && st->answered >= st->nranks) break;
    int64_t now = fcclTimeMs();
    if (now >= st->deadline) {
      if (st->nranks == 0)
        FCCL_INFO(FCCL_SUBSYS_BOOT, "bootstrap root: no rank arrived within %d ms; closing", root->timeoutMs);
      else if (st->fatal == fcclSuccess)
        rootTimeout(st);
      break;
    }
    size_t need = 1 + FCCL_TCP_PENDING_MAX + (size_t)st->nranks;
    if (need > fdsCap) {
      struct pollfd* grown = realloc(fds, need * sizeof(*fds));
      if (!grown) {
        rootFail(st, fcclSystemError, -1, "bootstrap root: out of memory");
        break;
      }
      fds = grown;
      fdsCap = need;
    }
    /* fd -1 is ignored by poll: the listener while it rests, ranks that have not arrived */
    const int npending = st->pending.count;
    nfds_t nfds = (nfds_t)fcclTcpPendingPollFds(&st->pending, fds, now);
    for (int r = 0; r < st->nranks; r++) fds[nfds++] = (struct pollfd){.fd = st->ranks[r].fd, .events = POLLIN};
    int64_t left = st->deadline - now;
    int rc = poll(fds, nfds, left < 50 ? (int)left : 50);
    if (rc < 0 && errno != EINTR) {
      rootFail(st, fcclSystemError, -1, "bootstrap root: poll failed: %s", strerror(errno));
      break;
    }
    now = fcclTimeMs();
    if (rc > 0) {
      /* Arrived ranks first (indices are stable), then pending connections from the back, then new ones. */
      for (int r = 0; r < st->nranks; r++) {
        struct pollfd* p = &fds[1 + npending + r];
        if (p->fd >= 0 && st->ranks[r].fd == p->fd && p->revents) rootCheckRank(st, r);
      }
      for (int i = npending - 1; i >= 0; i--)
        if (fds[1 + i].revents) rootHandlePending(st, i);
      if (fds[0].revents) rootAccept(st, now);
    }
    /* Connections that had their time without proving the secret. */
    fcclTcpPendingExpire(&st->pending, now);
  }

  fcclTcpPendingClose(&st->pending);
  for (int r = 0; r < st->nranks; r++) fcclSocketClose(&st->ranks[r].fd);
  fcclSocketClose(&root->listenFd);
  free(fds);
  free(st->ranks);
  free(st);
  __atomic_store_n(&root->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Joins and frees the roots of this process that have finished. */
static void rootsReap(void) {
  pid_t self = getpid();
  pthread_mutex_lock(&rootsLock);
  struct tcpRoot** link = &roots;
  while (*link) {
    struct tcpRoot* root = *link;
    if (root->pid == self && __atomic_load_n(&root->done, __ATOMIC_ACQUIRE)) {
      *link = root->next;
      pthread_join(root->thread, NULL);
      free(root);
    } else {
      link = &root->next;
    }
  }
  pthread_mutex_unlock(&rootsLock);
}

void fcclTcpRootClaim(const uint8_t* secret) {
  pid_t self = getpid();
  struct tcpRoot* found = NULL;
  pthread_mutex_lock(&rootsLock);
  for (struct tcpRoot** link = &roots; *link; link = &(*link)->next) {
    if ((*link)->pid == self && memcmp((*link)->secret, secret, FCCL_WIRE_SECRET_BYTES) == 0) {
      found = *link;
      *link = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&rootsLock);
  if (found) {
    pthread_join(found->thread, NULL);
    free(found);
  }
}

void fcclBootstrapStopRoot(const fcclUniqueId* id) {
  struct fcclWireId wid;
  if (fcclWireParseId((const uint8_t*)id->internal, FCCL_UNIQUE_ID_BYTES, &wid, NULL, 0) != FCCL_WIRE_OK) return;
  pid_t self = getpid();
  pthread_mutex_lock(&rootsLock);
  for (struct tcpRoot* root = roots; root; root = root->next)
    if (root->pid == self && memcmp(root->secret, wid.secret, FCCL_WIRE_SECRET_BYTES) == 0)
      __atomic_store_n(&root->stop, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&rootsLock);
  fcclTcpRootClaim(wid.secret); /* returns within one poll slice */
}

int fcclBootstrapRootsWait(int timeoutMs) {
  int64_t deadline = fcclTimeMs() + timeoutMs;
  pid_t self = getpid();
  for (;;) {
    rootsReap();
    int running = 0;
    pthread_mutex_lock(&rootsLock);
    for (struct tcpRoot* root = roots; root; root = root->next) running += root->pid == self;
    pthread_mutex_unlock(&rootsLock);
    if (running == 0 || fcclTimeMs() >= deadline) return running;
    usleep(1000);
  }
}

__attribute__((destructor)) static void rootsShutdown(void) {
  __atomic_store_n(&rootsStop, 1, __ATOMIC_RELEASE);
  pid_t self = getpid();
  pthread_mutex_lock(&rootsLock);
  struct tcpRoot** link = &roots;
  while (*link) {
    struct tcpRoot* root = *link;
    if (root->pid == self) {
      *link = root->next;
      pthread_join(root->thread, NULL); /* returns within one poll slice: rootsStop is set */
      free(root);
    } else {
      link = &root->next;
    }
  }
  pthread_mutex_unlock(&rootsLock);
}

/* A fork while another thread holds rootsLock must not leave the child with a lock nobody will release. */
static void rootsLockForFork(void) { pthread_mutex_lock(&rootsLock); }
static void rootsUnlockAfterFork(void) { pthread_mutex_unlock(&rootsLock); }
static void rootsAtforkRegister(void) { pthread_atfork(rootsLockForFork, rootsUnlockAfterFork, rootsUnlockAfterFork); }
static pthread_once_t rootsAtforkOnce = PTHREAD_ONCE_INIT;

static fcclResult_t rootStart(const union fcclSocketAddress* listenAt, const uint8_t* secret, int timeoutMs,
                              fcclUniqueId* id) {
  FCCLCHECK(fcclCryptoCheck()); /* before a thread starts: without MACs no rank could join */
  pthread_once(&rootsAtforkOnce, rootsAtforkRegister);
  rootsReap();
  pid_t self = getpid();
  int live = 0;
  pthread_mutex_lock(&rootsLock);
  for (struct tcpRoot* root = roots; root; root = root->next) live += root->pid == self;
  pthread_mutex_unlock(&rootsLock);
  if (live >= MAX_LIVE_ROOTS)
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT,
                      "%d unique ids are waiting for their ranks; use them or let them time out first", live);

  struct tcpRoot* root = calloc(1, sizeof(*root));
  if (root == NULL) return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_BOOT, "out of memory for a bootstrap root");
  root->listenFd = -1;
  fcclResult_t res = fcclRandomBytes(root->nonce, sizeof(root->nonce), "the bootstrap root's nonce");
  if (res == fcclSuccess) res = fcclSocketListen(listenAt, &root->listenFd, &root->addr);
  if (res != fcclSuccess) {
    free(root);
    return res;
  }
  memcpy(root->secret, secret, FCCL_WIRE_SECRET_BYTES);
  root->timeoutMs = timeoutMs;
  root->pid = self;
  PTHREADCHECKGOTO(pthread_create(&root->thread, NULL, rootMain, root), "starting the bootstrap root thread", res,
                   noThread);
  pthread_mutex_lock(&rootsLock);
  root->next = roots;
  roots = root;
  pthread_mutex_unlock(&rootsLock);

  struct fcclWireId wid;
  memset(&wid, 0, sizeof(wid));
  wid.protocolVersion = FCCL_BOOTSTRAP_PROTOCOL_VERSION;
  memcpy(wid.secret, secret, FCCL_WIRE_SECRET_BYTES);
  wid.rootAddr = root->addr;
  fcclWireEncodeId((uint8_t*)id->internal, &wid);
  char text[FCCL_SOCKET_ADDR_STR];
  FCCL_INFO(FCCL_SUBSYS_BOOT, "bootstrap root listening at %s",
            fcclSocketAddrToString(&root->addr, text, sizeof(text)));
  return fcclSuccess;
noThread:
  fcclSocketClose(&root->listenFd);
  free(root);
  return res;
}

fcclResult_t fcclBootstrapStartRoot(const void* listenAddr, const uint8_t* secret, int timeoutMs, fcclUniqueId* id) {
  return rootStart((const union fcclSocketAddress*)listenAddr, secret, timeoutMs, id);
}

/* A root at listenAt with a secret drawn at random. */
static fcclResult_t rootStartRandom(const union fcclSocketAddress* listenAt, int timeoutMs, fcclUniqueId* id) {
  uint8_t secret[FCCL_WIRE_SECRET_BYTES];
  FCCLCHECK(fcclRandomBytes(secret, sizeof(secret), "the unique id's secret"));
  return rootStart(listenAt, secret, timeoutMs, id);
}

fcclResult_t fcclBootstrapGetUniqueId(fcclUniqueId* id, int timeoutMs) {
  union fcclSocketAddress listenAt;
  const char* commId = fcclParamString(FCCL_PARAM_COMM_ID);
  const char* ifname = fcclParamString(FCCL_PARAM_SOCKET_IFNAME);
  if (commId[0] != '\0') {
    FCCLCHECK(fcclSocketParseHostPort(commId, &listenAt));
  } else if (ifname[0] != '\0') {
    FCCLCHECK(fcclSocketInterfaceAddress(ifname, &listenAt));
    listenAt.sin.sin_port = 0; /* same offset for sin6_port */
  } else {
    fcclSocketLoopback(&listenAt, 0);
  }
  return rootStartRandom(&listenAt, timeoutMs, id);
}

fcclResult_t fcclBootstrapGetLocalUniqueId(fcclUniqueId* id, int timeoutMs) {
  union fcclSocketAddress listenAt;
  fcclSocketLoopback(&listenAt, 0);
  return rootStartRandom(&listenAt, timeoutMs, id);
}

fcclResult_t fcclBootstrapGetUniqueIdNear(const struct fcclBootstrap* near, int local, int timeoutMs,
                                          fcclUniqueId* id) {
  union fcclSocketAddress listenAt;
  const char* ifname = fcclParamString(FCCL_PARAM_SOCKET_IFNAME);
  const char* commId = fcclParamString(FCCL_PARAM_COMM_ID);
  if (near && near->ops && near->ops->localAddress && near->ops->localAddress(near, &listenAt) == 0) {
    /* where this rank already reaches near's peers; port 0 */
  } else if (local) {
    fcclSocketLoopback(&listenAt, 0);
  } else if (ifname[0] != '\0') {
    FCCLCHECK(fcclSocketInterfaceAddress(ifname, &listenAt));
  } else if (commId[0] != '\0') {
    FCCLCHECK(fcclSocketParseHostPort(commId, &listenAt)); /* its host: the port is the first root's */
  } else {
    return FCCL_ERROR(fcclInvalidUsage, FCCL_SUBSYS_BOOT,
                      "the ranks are on several hosts and this communicator's bootstrap (%s) has no address of its "
                      "own: set FCCL_SOCKET_IFNAME to the interface the hosts reach each other on",
                      near && near->ops ? near->ops->name : "none");
  }
  listenAt.sin.sin_port = 0; /* same offset for sin6_port */
  return rootStartRandom(&listenAt, timeoutMs, id);
}
