/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The process's watch over its peers' processes (src/core/monitor.c). One thread, shared by every communicator of
 * the process, polls a pidfd per peer process on this host; a pidfd becomes readable when its process exits (a
 * SIGKILL, a crash, the OOM killer). Every communicator that includes that process is then failed at once: its
 * async error becomes fcclRemoteError naming the rank, its failure text says so, and its abort flag is set, so
 * that kernels stop at the abort word and host waits give up. docs/errors.md has the failure model.
 */
#ifndef FCCL_CORE_MONITOR_H_
#define FCCL_CORE_MONITOR_H_

#include "fccl.h"

struct fcclComm;

/* One peer to watch: its rank in the communicator, its process id (in this pid namespace), its host's name. */
struct fcclMonitorPeer {
  int rank;
  int pid;
  char host[64];
};

/*
 * Watches peers[0..n) for comm until fcclMonitorForget(comm). A peer whose pidfd cannot be had (another pid
 * namespace, pidfd_open missing or refused) is skipped (logged at INFO): its death is then seen by the bootstrap's
 * sockets and the kernels' timeout. A peer already gone fails comm at once. fcclSystemError when the thread cannot
 * start; comm is then not watched.
 */
fcclResult_t fcclMonitorWatch(struct fcclComm* comm, const struct fcclMonitorPeer* peers, int n);

/* Stops watching comm (a no-op when it is not watched): once this returns the monitor never touches comm again.
 * The last communicator to go stops the thread (joined here) and closes every pidfd. */
void fcclMonitorForget(struct fcclComm* comm);

/* Communicators watched and threads running (0 or 1): for tests that count what is left. */
void fcclMonitorStats(int* comms, int* threads);

#endif /* FCCL_CORE_MONITOR_H_ */
