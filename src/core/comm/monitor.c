/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The monitor thread: poll() over the pidfds and peer links of every watched peer and an eventfd that wakes it when
 * the set changes. A pidfd that becomes readable means its process exited, a link that ends without a goodbye that
 * the peer is gone; the watched communicator with that peer is failed (fcclCommFail) and the peer is not watched
 * any more. One lock guards the set; the monitor calls
 * fcclCommFail with it held, so a communicator that fcclMonitorForget has returned for is never touched.
 */
#include "monitor.h"

#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "debug.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FCCL_LOG_SUBSYS FCCL_SUBSYS_INIT

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

struct watchedPeer {
  struct fcclMonitorPeer peer;
  int pidfd; /* -1 once its process exited (or never opened) */
  int link;  /* its peer link instead of a pidfd; -1 once it ended or said goodbye (or there is none) */
};

struct watch {
  struct watch* next;
  struct fcclComm* comm;
  int n;
  struct watchedPeer* peers;
};

static pthread_mutex_t monitorLock = PTHREAD_MUTEX_INITIALIZER;
static struct watch* watches;   /* guarded by monitorLock */
static int nWatches;
static int wakeFd = -1;         /* eventfd: the set changed, or the thread must stop */
static int running;             /* the thread exists (joined by the last fcclMonitorForget) */
static int stopping;
static unsigned setVersion;     /* bumped whenever a watch is added or removed */
static pthread_t monitorThread;

/* A child made by fork() has no monitor thread and must not fail its parent's communicators. */
static void resetInChild(void) {
  pthread_mutex_init(&monitorLock, NULL);
  for (struct watch* w = watches; w;) {
    struct watch* next = w->next;
    /* The links too (the socket table's own fork handler has already put unconnected sockets in their place, so
     * the parent's connections are its alone): the child watches nothing. */
    for (int i = 0; i < w->n; i++) {
      if (w->peers[i].pidfd >= 0) close(w->peers[i].pidfd);
      if (w->peers[i].link >= 0) close(w->peers[i].link);
    }
    free(w->peers);
    free(w);
    w = next;
  }
  watches = NULL;
  nWatches = 0;
  if (wakeFd >= 0) close(wakeFd);
  wakeFd = -1;
  running = 0;
  stopping = 0;
}
static void lockForFork(void) { pthread_mutex_lock(&monitorLock); }
static void unlockAfterFork(void) { pthread_mutex_unlock(&monitorLock); }
static void registerForkHandlers(void) { pthread_atfork(lockForFork, unlockAfterFork, resetInChild); }
static pthread_once_t forkOnce = PTHREAD_ONCE_INIT;

static void wake(void) {
  uint64_t one = 1;
  ssize_t written;
  do {
    written = write(wakeFd, &one, sizeof(one));
  } while (written < 0 && errno == EINTR);
}

/* The peer of watch w at index i exited: fail the communicator (with monitorLock held). */
static void peerExited(struct watch* w, int i) {
  struct watchedPeer* p = &w->peers[i];
  close(p->pidfd);
  p->pidfd = -1;
  char text[256];
  snprintf(text, sizeof(text), "rank %d (pid %d, host %s) exited", p->peer.rank, p->peer.pid, p->peer.host);
  FCCL_WARN(FCCL_SUBSYS_INIT, "communicator %s: %s; failing the communicator", w->comm->name, text);
  fcclCommFail(w->comm, fcclRemoteError, text, 1);
}

/* The link of the peer of watch w at index i has news (with monitorLock held): a goodbye lets the peer go, an end
 * fails the communicator. */
static void peerLinkEvent(struct watch* w, int i) {
  struct watchedPeer* p = &w->peers[i];
  int err = 0;
  const fcclLinkState_t state = fcclBootstrapPeerLinkRead(p->link, &err);
  if (state == FCCL_LINK_QUIET) return;
  fcclBootstrapPeerLinkClose(&p->link);
  if (state == FCCL_LINK_GOODBYE_SEEN) {
    FCCL_INFO(FCCL_SUBSYS_INIT, "communicator %s: rank %d destroyed its communicator", w->comm->name, p->peer.rank);
    return;
  }
  char text[256];
  if (err == 0)
    snprintf(text, sizeof(text), "rank %d (pid %d, host %s) is gone: its peer link ended without a goodbye (its "
             "process ended or aborted)", p->peer.rank, p->peer.pid, p->peer.host);
  else if (err == ETIMEDOUT)
    snprintf(text, sizeof(text), "rank %d (pid %d, host %s) stopped answering: its peer link's keepalive failed",
             p->peer.rank, p->peer.pid, p->peer.host);
  else
    snprintf(text, sizeof(text), "rank %d (pid %d, host %s) is gone: its peer link failed: %s", p->peer.rank,
             p->peer.pid, p->peer.host, strerror(err));
  FCCL_WARN(FCCL_SUBSYS_INIT, "communicator %s: %s; failing the communicator", w->comm->name, text);
  fcclCommFail(w->comm, fcclRemoteError, text, 1);
}

static void* monitorMain(void* arg) {
  (void)arg;
  struct pollfd* fds = NULL;
  struct watch** owners = NULL;
  int* indices = NULL;
  size_t capacity = 0;
  pthread_mutex_lock(&monitorLock);
  while (!stopping) {
    const unsigned version = setVersion;
    size_t count = 1;
    for (struct watch* w = watches; w; w = w->next)
      for (int i = 0; i < w->n; i++) count += w->peers[i].pidfd >= 0 || w->peers[i].link >= 0;
    if (count > capacity) {
      struct pollfd* f = realloc(fds, count * sizeof(*fds));
      if (f) fds = f;
      struct watch** o = realloc(owners, count * sizeof(*owners));
      if (o) owners = o;
      int* x = realloc(indices, count * sizeof(*indices));
      if (x) indices = x;
      if (!f || !o || !x) {
        /* Out of host memory: keep watching what fits (the list is rebuilt at the next wake). */
        count = capacity;
      } else {
        capacity = count;
      }
    }
    size_t used = 0;
    if (capacity > 0) fds[used++] = (struct pollfd){.fd = wakeFd, .events = POLLIN};
    for (struct watch* w = watches; w && used < capacity; w = w->next)
      for (int i = 0; i < w->n && used < capacity; i++) {
        const int fd = w->peers[i].pidfd >= 0 ? w->peers[i].pidfd : w->peers[i].link;
        if (fd < 0) continue;
        fds[used] = (struct pollfd){.fd = fd, .events = POLLIN};
        owners[used] = w;
        indices[used] = i;
        used++;
      }
    pthread_mutex_unlock(&monitorLock);
    /* Bounded: the set is looked at again at least every second even if no wake arrives. */
    int ready = poll(fds, (nfds_t)used, 1000);
    pthread_mutex_lock(&monitorLock);
    if (ready <= 0) continue;
    if (fds[0].revents & POLLIN) {
      uint64_t value;
      ssize_t got = read(wakeFd, &value, sizeof(value));
      (void)got;
    }
    /* A watch removed while poll ran may be freed, even if its wake came too late for this poll: owners[] is
     * stale. A pidfd stays readable, and a link keeps its news, so what is seen now is seen again by the next poll. */
    if (setVersion != version || (fds[0].revents & POLLIN)) continue;
    for (size_t k = 1; k < used; k++) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (owners[k]->peers[indices[k]].pidfd >= 0)
        peerExited(owners[k], indices[k]);
      else
        peerLinkEvent(owners[k], indices[k]);
    }
  }
  pthread_mutex_unlock(&monitorLock);
  free(fds);
  free(owners);
  free(indices);
  return NULL;
}

fcclResult_t fcclMonitorWatch(struct fcclComm* comm, const struct fcclMonitorPeer* peers, int n) {
  pthread_once(&forkOnce, registerForkHandlers);
  struct watch* w = calloc(1, sizeof(*w));
  struct watchedPeer* watched = calloc(n > 0 ? (size_t)n : 1, sizeof(*watched));
  if (!w || !watched) {
    free(w);
    free(watched);
    return FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "out of host memory");
  }
  w->comm = comm;
  w->peers = watched;
  int gone = -1; /* a peer already gone: failed once the watch is in place */
  for (int i = 0; i < n; i++) {
    watched[w->n].peer = peers[i];
    watched[w->n].link = peers[i].link;
    watched[w->n].pidfd = -1;
    if (peers[i].link >= 0) {
      w->n++;
      continue;
    }
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)peers[i].pid, 0);
    if (fd < 0) {
      if (errno == ESRCH && gone < 0) {
        gone = w->n;
        watched[w->n++].pidfd = -1;
      } else {
        FCCL_INFO(FCCL_SUBSYS_INIT, "communicator %s: rank %d (pid %d) not watched: pidfd_open: %s", comm->name,
                  peers[i].rank, peers[i].pid, strerror(errno));
      }
      continue;
    }
    watched[w->n++].pidfd = fd;
  }
  fcclResult_t res = fcclSuccess;
  pthread_mutex_lock(&monitorLock);
  if (wakeFd < 0) {
    wakeFd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wakeFd < 0) res = FCCL_ERROR(fcclSystemError, FCCL_SUBSYS_INIT, "eventfd failed: %s", strerror(errno));
  }
  if (res == fcclSuccess && !running) {
    stopping = 0;
    PTHREADCHECKGOTO(pthread_create(&monitorThread, NULL, monitorMain, NULL), "starting the peer monitor", res,
                     unlock);
    running = 1;
  }
  w->next = watches;
  watches = w;
  nWatches++;
  setVersion++;
  if (gone >= 0) {
    char text[256];
    snprintf(text, sizeof(text), "rank %d (pid %d, host %s) exited before the communicator was ready",
             watched[gone].peer.rank, watched[gone].peer.pid, watched[gone].peer.host);
    fcclCommFail(comm, fcclRemoteError, text, 1);
  }
  wake();
unlock:
  pthread_mutex_unlock(&monitorLock);
  if (res != fcclSuccess) {
    for (int i = 0; i < w->n; i++) {
      if (watched[i].pidfd >= 0) close(watched[i].pidfd);
      if (watched[i].link >= 0) fcclBootstrapPeerLinkClose(&watched[i].link);
    }
    free(watched);
    free(w);
  }
  return res;
}

void fcclMonitorForget(struct fcclComm* comm, int goodbye) {
  pthread_mutex_lock(&monitorLock);
  struct watch** link = &watches;
  while (*link && (*link)->comm != comm) link = &(*link)->next;
  struct watch* w = *link;
  if (w) {
    *link = w->next;
    nWatches--;
    setVersion++;
  }
  int stop = w && nWatches == 0 && running;
  if (stop) stopping = 1;
  if (w && running) wake();
  pthread_mutex_unlock(&monitorLock);
  if (!w) return;
  for (int i = 0; i < w->n; i++) {
    if (w->peers[i].pidfd >= 0) close(w->peers[i].pidfd);
    if (w->peers[i].link >= 0) {
      if (goodbye) fcclBootstrapPeerLinkGoodbye(w->peers[i].link);
      fcclBootstrapPeerLinkClose(&w->peers[i].link);
    }
  }
  free(w->peers);
  free(w);
  if (!stop) return;
  /* Bounded: the thread sees the wake (or its one-second poll) and leaves. */
  pthread_join(monitorThread, NULL);
  pthread_mutex_lock(&monitorLock);
  running = 0;
  stopping = 0;
  /* A communicator watched meanwhile starts a thread of its own once running is 0 again. */
  if (nWatches > 0) {
    if (pthread_create(&monitorThread, NULL, monitorMain, NULL) == 0)
      running = 1;
    else
      FCCL_WARN(FCCL_SUBSYS_INIT, "cannot restart the peer monitor: peers' deaths are seen by timeouts only");
  } else if (wakeFd >= 0) {
    close(wakeFd);
    wakeFd = -1;
  }
  pthread_mutex_unlock(&monitorLock);
}

int fcclMonitorCanWatchProcesses(void) {
  const int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
  if (fd < 0) return errno != ENOSYS && errno != EPERM;
  close(fd);
  return 1;
}

void fcclMonitorStats(int* comms, int* threads) {
  pthread_mutex_lock(&monitorLock);
  *comms = nWatches;
  *threads = running;
  pthread_mutex_unlock(&monitorLock);
}
