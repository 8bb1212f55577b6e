/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How ranks come to be: from a launcher's variables (torchrun, mpirun), or forked here, one process per rank group,
 * with no MPI needed. The parent never initialises CUDA (a CUDA context does not survive fork), so the GPU count
 * is read in a short-lived child.
 */
#include "bench.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* 1: present and a non-negative integer; 0: absent; -1: present but not a number. */
static int readCount(benchGetenv_t getenvFn, const char* name, int* value) {
  const char* text = getenvFn(name);
  if (!text || !*text) return 0;
  char* end = NULL;
  errno = 0;
  long parsed = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || parsed < 0 || parsed > 1 << 24) return -1;
  *value = (int)parsed;
  return 1;
}

int benchDetectLaunch(benchGetenv_t getenvFn, benchLaunchEnv_t* env, char* err, size_t errLen) {
  static const struct {
    const char* source;
    const char* size;
    const char* rank;
    const char* localRank[2];
    const char* localSize[2];
    int fromMpi;
  } launchers[] = {
      /* The order fcclCommInitFromEnv reads them in. */
      {"torchrun", "WORLD_SIZE", "RANK", {"LOCAL_RANK", NULL}, {"LOCAL_WORLD_SIZE", NULL}, 0},
      {"Open MPI", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_LOCAL_RANK", NULL},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", NULL}, 1},
      {"PMI", "PMI_SIZE", "PMI_RANK", {"MPI_LOCALRANKID", "SLURM_LOCALID"}, {"MPI_LOCALNRANKS", NULL}, 1},
  };
  memset(env, 0, sizeof(*env));
  env->kind = BENCH_LAUNCH_LOCAL;
  for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
    int size = 0, rank = 0;
    int hasSize = readCount(getenvFn, launchers[i].size, &size);
    if (hasSize == 0) continue;
    if (hasSize < 0 || size < 1) return benchError(err, errLen, "%s is not a positive number", launchers[i].size);
    int hasRank = readCount(getenvFn, launchers[i].rank, &rank);
    if (hasRank <= 0)
      return benchError(err, errLen, "%s is set but %s is %s", launchers[i].size, launchers[i].rank,
                         hasRank == 0 ? "missing" : "not a number");
    if (rank >= size)
      return benchError(err, errLen, "%s=%d is not below %s=%d", launchers[i].rank, rank, launchers[i].size, size);
    env->kind = BENCH_LAUNCH_ENV;
    env->source = launchers[i].source;
    env->rank = rank;
    env->size = size;
    env->localRank = rank;
    env->localSize = size;
    env->fromMpiLauncher = launchers[i].fromMpi;
    for (int k = 0; k < 2 && launchers[i].localRank[k]; k++) {
      int status = readCount(getenvFn, launchers[i].localRank[k], &env->localRank);
      if (status < 0) return benchError(err, errLen, "%s is not a number", launchers[i].localRank[k]);
      if (status > 0) break;
    }
    for (int k = 0; k < 2 && launchers[i].localSize[k]; k++) {
      int status = readCount(getenvFn, launchers[i].localSize[k], &env->localSize);
      if (status < 0) return benchError(err, errLen, "%s is not a number", launchers[i].localSize[k]);
      if (status > 0) break;
    }
    if (env->localSize < 1 || env->localRank >= env->localSize)
      return benchError(err, errLen, "local rank %d is not below the local size %d (%s)", env->localRank,
                         env->localSize, env->source);
    return 0;
  }
  return 0;
}

int benchPlanLocal(const benchArgs_t* args, int nDevices, benchLayout_t* layout, char* err, size_t errLen) {
  memset(layout, 0, sizeof(*layout));
  if (nDevices < 1) return benchError(err, errLen, "no GPU is visible");
  int perProc = args->nThreads * args->nGpus;
  int nProcs = args->nProcs > 0 ? args->nProcs : (nDevices / perProc > 0 ? nDevices / perProc : 1);
  layout->nProcs = nProcs;
  layout->nThreads = args->nThreads;
  layout->nGpus = args->nGpus;
  layout->nRanks = nProcs * perProc;
  layout->nDevices = nDevices;
  layout->shared = layout->nRanks > nDevices;
  layout->hosts = args->hosts;
  if (args->hosts > 0 && nProcs % args->hosts != 0)
    return benchError(err, errLen, "--hosts %d: %d process%s do not split into %d hosts of as many processes each",
                      args->hosts, nProcs, nProcs == 1 ? "" : "es", args->hosts);
  if (layout->shared && !args->shareGpu)
    return benchError(err, errLen,
                       "%d ranks (-np %d, -t %d, -g %d) need %d GPUs but %d %s visible; --share-gpu lets ranks "
                       "share a GPU",
                       layout->nRanks, nProcs, args->nThreads, args->nGpus, layout->nRanks, nDevices,
                       nDevices == 1 ? "is" : "are");
  return 0;
}

int benchDeviceOf(const benchLayout_t* layout, int firstLocal, int index) {
  return layout->nDevices > 0 ? (firstLocal + index) % layout->nDevices : 0;
}

int benchHostOf(const benchLayout_t* layout, int proc) {
  return layout->hosts > 0 ? proc / (layout->nProcs / layout->hosts) : 0;
}

int benchNcclTakesSharing(const benchLayout_t* layout) {
  const int perProc = layout->nThreads * layout->nGpus;
  if (layout->nDevices < 1 || perProc < 1) return 0;
  /* A forked rank r's GPU is r modulo the GPUs (benchDeviceOf with firstLocal = r's agent's first rank). */
  for (int r = 0; r < layout->nRanks; r++) {
    for (int s = r + layout->nDevices; s < layout->nRanks; s += layout->nDevices) {
      const int procR = r / perProc, procS = s / perProc;
      if (procR == procS || benchHostOf(layout, procR) == benchHostOf(layout, procS)) return 0;
    }
  }
  return 1;
}

static void sleepMs(int ms) {
  struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&pause, NULL);
}

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* After SIGKILL, how long the launcher waits for the processes to go (one stuck in a driver may never). */
#define REAP_AFTER_KILL_SEC 30

int benchForkRun(int nProcs, int (*body)(int proc, void* arg), void* arg, void (*onFailure)(void* arg),
                 int graceSec) {
  if (nProcs < 1) {
    fprintf(stderr, "launcher: %d processes to start\n", nProcs);
    return 1;
  }
  pid_t* pids = (pid_t*)calloc((size_t)nProcs, sizeof(pid_t));
  int* done = (int*)calloc((size_t)nProcs, sizeof(int));
  if (!pids || !done) {
    fprintf(stderr, "launcher: out of memory for %d processes\n", nProcs);
    free(pids);
    free(done);
    return 1;
  }
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  int result = 0;
  int started = 0;
  for (; started < nProcs; started++) {
    pid_t pid = fork();
    if (pid == 0) {
      /* A rank must not outlive the launcher: it would hold its GPU and wait for peers forever. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      int code = body(started, arg);
      fflush(stdout);
      fflush(stderr);
      _exit(code & 0xff);
    }
    if (pid < 0) {
      fprintf(stderr, "launcher: fork failed after %d of %d processes: %s\n", started, nProcs, strerror(errno));
      result = 1;
      break;
    }
    pids[started] = pid;
  }
  int remaining = started;
  double failedAt = result ? nowSec() : 0, killedAt = 0;
  if (result && onFailure) onFailure(arg);
  while (remaining > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int p = 0; p < started; p++) {
        if (pids[p] != pid || done[p]) continue;
        done[p] = 1;
        remaining--;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
          fprintf(stderr, "launcher: process %d (pid %d) died of signal %d (%s)\n", p, (int)pid, WTERMSIG(status),
                  strsignal(WTERMSIG(status)));
        else if (WIFSIGNALED(status) && result == 0)
          fprintf(stderr, "launcher: process %d (pid %d) was killed\n", p, (int)pid);
        if (code != 0 && result == 0) {
          result = code;
          failedAt = nowSec();
          if (onFailure) onFailure(arg);
        }
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) {
      fprintf(stderr, "launcher: waitpid failed: %s\n", strerror(errno));
      if (result == 0) result = 1;
      break;
    }
    if (result != 0 && !killedAt && nowSec() - failedAt > graceSec) {
      fprintf(stderr, "launcher: a process failed %d s ago; stopping the %d still running\n", graceSec, remaining);
      for (int p = 0; p < started; p++)
        if (!done[p]) kill(pids[p], SIGKILL);
      killedAt = nowSec();
    }
    if (killedAt && nowSec() - killedAt > REAP_AFTER_KILL_SEC) {
      fprintf(stderr, "launcher: %d process%s still there %d s after SIGKILL (stuck in a driver?); giving up on them\n",
              remaining, remaining == 1 ? " is" : "es are", REAP_AFTER_KILL_SEC);
      break;
    }
    sleepMs(10);
  }
  free(pids);
  free(done);
  return result;
}

typedef struct {
  int value;
  char msg[512];
} probeReply_t;

int benchProbeInChild(int (*probe)(char* msg, size_t len), int* result, char* msg, size_t len, int timeoutSec) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(fds[0]);
    probeReply_t reply;
    memset(&reply, 0, sizeof(reply));
    reply.value = probe(reply.msg, sizeof(reply.msg));
    ssize_t written = write(fds[1], &reply, sizeof(reply));
    _exit(written == (ssize_t)sizeof(reply) ? 0 : 1);
  }
  close(fds[1]);
  probeReply_t reply;
  size_t got = 0;
  int timedOut = 0;
  double deadline = nowSec() + timeoutSec;
  while (got < sizeof(reply)) {
    /* A probe that hangs (a wedged driver) must not hang the launcher. */
    double left = deadline - nowSec();
    struct pollfd pfd = {fds[0], POLLIN, 0};
    int ready = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      timedOut = 1;
      kill(pid, SIGKILL);
      break;
    }
    if (ready < 0) break;
    ssize_t n = read(fds[0], (char*)&reply + got, sizeof(reply) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fds[0]);
  int status = 0;
  if (timedOut) {
    /* Killed: reap it if it goes within a few seconds (one stuck in a driver may not; it is left then). */
    double reapBy = nowSec() + 5;
    while (waitpid(pid, &status, WNOHANG) == 0 && nowSec() < reapBy) sleepMs(10);
    errno = ETIMEDOUT;
    return -1;
  }
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got != sizeof(reply) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  reply.msg[sizeof(reply.msg) - 1] = '\0';
  *result = reply.value;
  if (msg && len) snprintf(msg, len, "%s", reply.msg);
  return 0;
}
