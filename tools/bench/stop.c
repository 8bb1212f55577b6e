/* SPDX-License-Identifier: Apache-2.0 */
/*
 * -N 0: a soak run ends on SIGINT or SIGTERM (bench.h). The handlers only record the request, here and in the shared
 * exchange that every forked rank reads; the runtime stops every rank after the same row (benchStopAgreed).
 */
#include "bench.h"

#include <signal.h>
#include <stdatomic.h>
#include <string.h>

static volatile sig_atomic_t stopSignal;
/* The exchange the forked ranks share, mapped before fork at the same address in every process. */
static void* _Atomic stopRegion;

static void onStopSignal(int signo) {
  stopSignal = signo;
  benchShmRequestStop(atomic_load(&stopRegion));
}

void benchStopOnSignals(void* region) {
  atomic_store(&stopRegion, region);
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  /* SA_RESETHAND: the second signal takes the default action and ends the process at once. SA_RESTART: the waits
   * and reads of the run go on; it stops between rows. */
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGINT, &action, NULL);
  sigaction(SIGTERM, &action, NULL);
}

int benchStopSignal(void) { return (int)stopSignal; }

int benchStopRequested(void* region) { return stopSignal != 0 || benchShmStopRequested(region); }
