/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The process's watch over its peers' processes (src/core/comm/monitor.c). One thread, shared by every communicator of
 * the process, polls a pidfd per peer process on this host (readable when its process exits: a SIGKILL, a crash,
 * the OOM killer) and a peer link per peer elsewhere (its end or a failed keepalive). Every communicator that includes
 * that process is then failed at once: its async error becomes fcclRemoteError naming the rank, its failure text says
 * so, and its abort flag is set, so that kernels stop at the abort word and host waits give up. docs/errors.md has the
 * failure model.
 */
#ifndef FCCL_CORE_MONITOR_H_
#define FCCL_CORE_MONITOR_H_

#include "fccl.h"

struct fcclComm;

/* One peer to watch: its rank in the communicator, its process id (in its pid namespace), its host's name, and its
 * peer link (fcclBootstrapPeerLinks), or -1 to watch its process through a pidfd (same host and pid namespace). */
struct fcclMonitorPeer {
  int rank;
  int pid;
  char host[64];
  int link;
};

/*
 * Watches peers[0..n) for comm until fcclMonitorForget(comm); the monitor owns their links from here on (closed on
 * failure too). A peer with a link fails comm when the link ends without a goodbye (its process ended or aborted)
 * or its keepalive fails (its host stopped answering), and is let go quietly after a goodbye (it destroyed its
 * communicator). A peer without a link whose pidfd cannot be had (pidfd_open refused) is skipped (logged at INFO):
 * its death is then seen by the kernels' timeout. A peer already gone fails comm at once. fcclSystemError when the
 * thread cannot start; comm is then not watched.
 */
fcclResult_t fcclMonitorWatch(struct fcclComm* comm, const struct fcclMonitorPeer* peers, int n);

/* Stops watching comm (a no-op when it is not watched): once this returns the monitor never touches comm again.
 * With goodbye (a destroy, not an abort or a failure) each peer link first carries the goodbye, so the peers let
 * this rank go without failing. The last communicator to go stops the thread (joined here) and closes every pidfd. */
void fcclMonitorForget(struct fcclComm* comm, int goodbye);

/* Whether this kernel gives pidfds (pidfd_open, Linux 5.3): else every peer is watched through a peer link. */
int fcclMonitorCanWatchProcesses(void);

/* Communicators watched and threads running (0 or 1): for tests that count what is left. */
void fcclMonitorStats(int* comms, int* threads);

#endif /* FCCL_CORE_MONITOR_H_ */
