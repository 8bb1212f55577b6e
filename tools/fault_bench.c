/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fccl-faultbench: how fast, and how cleanly, the ranks of a communicator learn that a peer died or stopped.
 * Each trial forks RANKS processes (sharing the GPUs when there are fewer: config.allowSharedDevice), which make a
 * communicator and check an all-reduce; then the survivors take the scenario's step while the victim (the last
 * rank) does nothing, and this process kills it (SIGKILL) or stops it (SIGSTOP). Every survivor must then see the
 * documented error: fcclRemoteError naming the victim after a kill, fcclTimeout naming it after a stop, from
 * fcclCommGetAsyncError, fcclGetLastError(comm) and its next call; destroy its communicator without waiting for the
 * victim; make a new communicator of the survivors (a fresh unique id) and get a correct all-reduce from it; and end
 * with no more fds, threads or peer mappings than it had before its first communicator.
 *   fccl-faultbench [-s scenario] [-n trials] [-r ranks] [-t FCCL_TIMEOUT ms for stop] [-S] [-J file] [-h]
 * -S: before destroying the failed communicator the survivors also make one of their own from it with
 * fcclCommShrink (the victim excluded) and check an all-reduce on it.
 * Scenarios: kernel (the survivors wait in an all-reduce kernel), graph (in a replay of a CUDA graph that captured
 * it), idle (between calls), destroy (inside fcclCommDestroy), init (the victim dies while the communicator is made),
 * stop (SIGSTOP during an all-reduce: the kernel's FCCL_TIMEOUT). Prints, per scenario, the time from the kill to
 * each survivor's error (min/median/max over trials and survivors) and the median time from the kill until the system
 * had ended the victim (waitpid: the floor of any detection, as the driver releases the victim's GPU context first);
 * -J writes the same as JSON. Exits 0 when every
 * check of every trial held, 1 when one failed, 2 for bad arguments or without a GPU (the tools' one message and
 * status for that: tools/common/cuda_status.h).
 */
#include "fccl.h"

#include "cuda_status.h"
#include "options.h"

#include <cuda_runtime.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 8
#define MAX_TRIALS 1000
#define COUNT 4099            /* floats per all-reduce: an odd count, small enough for the LL kernel */
#define WAIT_MS 30000         /* bound of every wait of a rank for the board */
#define DETECT_LIMIT_MS 10000 /* a survivor that has not seen the error by then records a failure */
#define SETTLE_US 20000       /* the survivors' kernels spin this long before the kill */

enum scenario { SCENARIO_KERNEL, SCENARIO_GRAPH, SCENARIO_IDLE, SCENARIO_DESTROY, SCENARIO_INIT, SCENARIO_STOP };
static const char* const kScenarioNames[] = {"kernel", "graph", "idle", "destroy", "init", "stop"};
#define SCENARIOS ((int)(sizeof(kScenarioNames) / sizeof(kScenarioNames[0])))

/* Shared by this process and the ranks of one trial (MAP_SHARED before the fork). Flags: atomic. */
struct board {
  fcclUniqueId id;
  fcclUniqueId recoveryId;
  int idReady;
  int recoveryIdReady;
  int gpus;
  int ready[MAX_RANKS];    /* the rank is in position for the kill */
  int finished[MAX_RANKS]; /* the rank wrote its record */
  int64_t killNs;          /* CLOCK_MONOTONIC, shared by the processes of one machine */
  struct {
    int64_t detectNs; /* when the survivor saw the error */
    int failed;
    char stage[48]; /* what the rank is doing: said for a rank that fails or does not get into position */
    char problem[256];
  } record[MAX_RANKS];
};

static int64_t nowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleepUs(long us) {
  struct timespec pause = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000L};
  nanosleep(&pause, NULL);
}

static void post(int* flag) { __atomic_store_n(flag, 1, __ATOMIC_RELEASE); }

/* Waits until *flag is set, at most ms; whether it was. */
static int waitFlag(const int* flag, int ms) {
  for (int64_t end = nowNs() + (int64_t)ms * 1000000; nowNs() < end; sleepUs(100))
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE)) return 1;
  return 0;
}

static void setStage(struct board* b, int rank, const char* stage) {
  snprintf(b->record[rank].stage, sizeof(b->record[rank].stage), "%s", stage);
}

static int countEntries(const char* path) {
  DIR* dir = opendir(path);
  if (!dir) return -1;
  int n = 0;
  for (struct dirent* e = readdir(dir); e; e = readdir(dir))
    if (e->d_name[0] != '.') n++;
  closedir(dir);
  return n;
}

/* ---- one rank ---- */

struct rank {
  struct board* board;
  enum scenario scenario;
  int rank, nranks, victim;
  int shrink; /* recover with fcclCommShrink of the failed communicator instead of a fresh unique id */
  float* send;
  float* recv;
  float host[COUNT];
  cudaStream_t stream;
};

/* The first problem of this rank, kept in its record; returns 1 so that callers can `return fail(...)`. */
static int fail(struct rank* r, const char* format, ...) {
  if (r->board->record[r->rank].failed) return 1;
  r->board->record[r->rank].failed = 1;
  va_list args;
  va_start(args, format);
  vsnprintf(r->board->record[r->rank].problem, sizeof(r->board->record[r->rank].problem), format, args);
  va_end(args);
  return 1;
}

static fcclConfig_t rankConfig(const struct rank* r, const char* name) {
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.commName = name;
  config.timeoutMs = 10000;
  config.allowSharedDevice = r->board->gpus < r->nranks;
  return config;
}

/* Rank `rank` of `nranks`' input: values in [0.5, 1.5) and a sign from a per-trial, per-rank generator. */
static float inputValue(int rank, int i, unsigned salt) {
  uint32_t x = (uint32_t)(rank + 1) * 2654435761u ^ (uint32_t)i * 40503u ^ salt * 97u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  const float magnitude = 0.5f + (float)(x & 0xffff) / 65536.0f;
  return (x & 0x10000) ? -magnitude : magnitude;
}

/* An all-reduce over ranks 0..nranks-1 of this process's communicator, checked against a float64 reference. */
static int checkedAllReduce(struct rank* r, fcclComm_t comm, int myRank, int nranks, unsigned salt) {
  for (int i = 0; i < COUNT; i++) r->host[i] = inputValue(myRank, i, salt);
  /* On the call's stream, which is non-blocking: cudaMemcpy from pageable memory may return before its DMA ends,
   * and nothing would order that DMA before the all-reduce. */
  if (cudaMemcpyAsync(r->send, r->host, sizeof(r->host), cudaMemcpyHostToDevice, r->stream) != cudaSuccess ||
      cudaStreamSynchronize(r->stream) != cudaSuccess)
    return fail(r, "the input's upload failed");
  fcclResult_t res = fcclAllReduce(r->send, r->recv, COUNT, fcclFloat32, fcclSum, comm, r->stream);
  if (res != fcclSuccess) return fail(r, "fcclAllReduce: %s: %s", fcclGetErrorString(res), fcclGetLastError(comm));
  float out[COUNT];
  if (cudaMemcpyAsync(out, r->recv, sizeof(out), cudaMemcpyDeviceToHost, r->stream) != cudaSuccess ||
      cudaStreamSynchronize(r->stream) != cudaSuccess)
    return fail(r, "the all-reduce or the result's download failed");
  for (int i = 0; i < COUNT; i++) {
    double sum = 0, bound = 0;
    for (int k = 0; k < nranks; k++) {
      sum += inputValue(k, i, salt);
      bound += fabs(inputValue(k, i, salt));
    }
    if (!(fabs(out[i] - sum) <= bound * 1e-6))
      return fail(r, "all-reduce of %d ranks: element %d is %.9g, the float64 reference %.9g", nranks, i, out[i],
                  sum);
  }
  return 0;
}

/* Polls the communicator's asynchronous error until it is set, at most DETECT_LIMIT_MS; the error. */
static fcclResult_t awaitAsyncError(fcclComm_t comm) {
  fcclResult_t state = fcclSuccess;
  for (int64_t end = nowNs() + (int64_t)DETECT_LIMIT_MS * 1000000; nowNs() < end; sleepUs(20)) {
    if (fcclCommGetAsyncError(comm, &state) != fcclSuccess) return fcclInvalidArgument;
    if (state != fcclSuccess && state != fcclInProgress) return state;
  }
  return fcclSuccess;
}

/* What a survivor must see of a failed communicator: the code and the victim's rank in the words, on every path. */
static int checkFailure(struct rank* r, fcclComm_t comm, fcclResult_t seen, fcclResult_t expected) {
  char victim[32];
  snprintf(victim, sizeof(victim), "rank %d", r->victim);
  if (seen != expected)
    return fail(r, "the error is %s, want %s: %s", fcclGetErrorString(seen), fcclGetErrorString(expected),
                fcclGetLastError(comm));
  if (!strstr(fcclGetLastError(comm), victim))
    return fail(r, "the error does not name %s: %s", victim, fcclGetLastError(comm));
  fcclResult_t async = fcclSuccess;
  if (fcclCommGetAsyncError(comm, &async) != fcclSuccess || async != expected)
    return fail(r, "fcclCommGetAsyncError gives %s, want %s", fcclGetErrorString(async), fcclGetErrorString(expected));
  fcclResult_t next = fcclAllReduce(r->send, r->recv, COUNT, fcclFloat32, fcclSum, comm, r->stream);
  if (next != expected)
    return fail(r, "the next call returns %s, want %s", fcclGetErrorString(next), fcclGetErrorString(expected));
  return 0;
}

/* The survivors (ranks 0..nranks-2) make a communicator of their own and check an all-reduce on it: from a fresh
 * unique id, or (-S) by fcclCommShrink of the failed communicator, parent, when it exists. */
static int recover(struct rank* r, fcclComm_t parent) {
  const int survivors = r->nranks - 1;
  if (r->shrink && parent) {
    fcclComm_t comm = NULL;
    fcclResult_t res = fcclCommShrink(parent, &r->victim, 1, &comm, NULL, FCCL_SHRINK_DEFAULT);
    if (res != fcclSuccess) return fail(r, "fcclCommShrink: %s", fcclGetLastError(parent));
    int rank = -1, count = -1;
    int bad = fcclCommUserRank(comm, &rank) != fcclSuccess || fcclCommCount(comm, &count) != fcclSuccess ||
              rank != r->rank || count != survivors;
    if (bad) bad = fail(r, "the shrunk communicator is rank %d of %d, want %d of %d", rank, count, r->rank, survivors);
    if (!bad) bad = checkedAllReduce(r, comm, r->rank, survivors, 9u);
    res = fcclCommDestroy(comm);
    if (res != fcclSuccess && !bad)
      return fail(r, "the shrunk communicator's fcclCommDestroy: %s", fcclGetLastError(NULL));
    return bad;
  }
  if (r->rank == 0) {
    fcclResult_t res = fcclGetUniqueId(&r->board->recoveryId);
    if (res != fcclSuccess) return fail(r, "fcclGetUniqueId for the survivors: %s", fcclGetLastError(NULL));
    post(&r->board->recoveryIdReady);
  } else if (!waitFlag(&r->board->recoveryIdReady, WAIT_MS)) {
    return fail(r, "the survivors' unique id did not come");
  }
  fcclConfig_t config = rankConfig(r, "faultbench-survivors");
  fcclComm_t comm = NULL;
  fcclResult_t res = fcclCommInitRankConfig(&comm, survivors, r->board->recoveryId, r->rank, &config);
  if (res != fcclSuccess) return fail(r, "the survivors' fcclCommInitRankConfig: %s", fcclGetLastError(NULL));
  int failed = checkedAllReduce(r, comm, r->rank, survivors, 7u);
  res = fcclCommDestroy(comm);
  if (res != fcclSuccess && !failed) return fail(r, "the survivors' fcclCommDestroy: %s", fcclGetLastError(NULL));
  return failed;
}

/* The survivor's step of the scenario, up to seeing the error; *comm is NULL on return when it was destroyed. */
static int survive(struct rank* r, fcclComm_t* comm, cudaGraphExec_t graph) {
  const fcclResult_t expected = r->scenario == SCENARIO_STOP ? fcclTimeout : fcclRemoteError;
  fcclResult_t seen = fcclSuccess;
  switch (r->scenario) {
  case SCENARIO_KERNEL:
  case SCENARIO_STOP: {
    fcclResult_t res = fcclAllReduce(r->send, r->recv, COUNT, fcclFloat32, fcclSum, *comm, r->stream);
    if (res != fcclSuccess) return fail(r, "the all-reduce the victim misses: %s", fcclGetLastError(*comm));
    post(&r->board->ready[r->rank]);
    (void)cudaStreamSynchronize(r->stream); /* the kernel ends at the abort word or its FCCL_TIMEOUT */
    seen = awaitAsyncError(*comm);
    break;
  }
  case SCENARIO_GRAPH:
    if (cudaGraphLaunch(graph, r->stream) != cudaSuccess) return fail(r, "cudaGraphLaunch failed");
    post(&r->board->ready[r->rank]);
    (void)cudaStreamSynchronize(r->stream);
    seen = awaitAsyncError(*comm);
    break;
  case SCENARIO_IDLE:
  case SCENARIO_INIT:
    post(&r->board->ready[r->rank]);
    seen = awaitAsyncError(*comm);
    break;
  case SCENARIO_DESTROY: {
    post(&r->board->ready[r->rank]);
    fcclResult_t res = fcclCommDestroy(*comm); /* collective: it waits for the victim, which never comes */
    *comm = NULL;
    r->board->record[r->rank].detectNs = nowNs();
    (void)res; /* success or the peer's failure: either is right once it returns without the victim */
    return 0;
  }
  }
  r->board->record[r->rank].detectNs = nowNs();
  if (seen == fcclSuccess) return fail(r, "no error within %d ms", DETECT_LIMIT_MS);
  return checkFailure(r, *comm, seen, expected);
}

/* An all-reduce captured in a graph, instantiated and replayed once (every rank of comm must do the same). */
static int captureAllReduce(struct rank* r, fcclComm_t comm, cudaGraph_t* graph, cudaGraphExec_t* exec) {
  if (cudaStreamBeginCapture(r->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
    return fail(r, "cudaStreamBeginCapture failed");
  fcclResult_t res = fcclAllReduce(r->send, r->recv, COUNT, fcclFloat32, fcclSum, comm, r->stream);
  if (cudaStreamEndCapture(r->stream, graph) != cudaSuccess || res != fcclSuccess ||
      cudaGraphInstantiate(exec, *graph, 0) != cudaSuccess)
    return fail(r, "capturing the all-reduce failed: %s", fcclGetLastError(comm));
  if (cudaGraphLaunch(*exec, r->stream) != cudaSuccess || cudaStreamSynchronize(r->stream) != cudaSuccess)
    return fail(r, "the first replay failed");
  return 0;
}

static int rankMain(struct rank* r) {
  struct board* b = r->board;
  if (r->scenario == SCENARIO_STOP) {
    char timeout[32];
    snprintf(timeout, sizeof(timeout), "%s", getenv("FAULTBENCH_STOP_TIMEOUT_MS"));
    setenv("FCCL_TIMEOUT", timeout, 1);
  }
  setStage(b, r->rank, "CUDA context");
  cudaError_t cudaRes = cudaSetDevice(r->rank % b->gpus);
  if (cudaRes == cudaSuccess) cudaRes = cudaFree(0);
  if (cudaRes != cudaSuccess) return fail(r, "cannot use GPU %d: %s", r->rank % b->gpus, cudaGetErrorString(cudaRes));
  if (cudaMalloc((void**)&r->send, COUNT * sizeof(float)) != cudaSuccess ||
      cudaMalloc((void**)&r->recv, COUNT * sizeof(float)) != cudaSuccess ||
      cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking) != cudaSuccess)
    return fail(r, "cannot allocate on GPU %d", r->rank % b->gpus);
  /* What the process holds before its first communicator, but for what the library keeps for the process's life
   * (the device's arena): a one-rank communicator made and destroyed first brings that into being. */
  fcclComm_t comm = NULL;
  int device = r->rank % b->gpus;
  setStage(b, r->rank, "one-rank communicator");
  if (fcclCommInitAll(&comm, 1, &device) != fcclSuccess) return fail(r, "fcclCommInitAll: %s", fcclGetLastError(NULL));
  if (checkedAllReduce(r, comm, 0, 1, 0u)) return 1;
  if (r->scenario == SCENARIO_GRAPH) { /* CUDA starts a thread of its own for graphs: the runtime's, not a leak */
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (captureAllReduce(r, comm, &graph, &exec)) return 1;
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
  }
  (void)fcclCommDestroy(comm);
  const int fds = countEntries("/proc/self/fd"), threads = countEntries("/proc/self/task");

  setStage(b, r->rank, "unique id");
  if (r->rank == 0) {
    if (fcclGetUniqueId(&b->id) != fcclSuccess) return fail(r, "fcclGetUniqueId: %s", fcclGetLastError(NULL));
    post(&b->idReady);
  } else if (!waitFlag(&b->idReady, WAIT_MS)) {
    return fail(r, "the unique id did not come");
  }
  const int isVictim = r->rank == r->victim;
  if (isVictim && r->scenario == SCENARIO_INIT) post(&b->ready[r->rank]); /* killed while it makes the communicator */
  fcclConfig_t config = rankConfig(r, "faultbench");
  setStage(b, r->rank, "init");
  fcclResult_t res = fcclCommInitRankConfig(&comm, r->nranks, b->id, r->rank, &config);
  if (res != fcclSuccess) {
    if (r->scenario != SCENARIO_INIT) return fail(r, "fcclCommInitRankConfig: %s", fcclGetLastError(NULL));
    b->record[r->rank].detectNs = nowNs(); /* the init itself saw the death: the documented outcome too */
    /* The victim gone before the root heard from it (a timeout), or seen gone (by the bootstrap or the monitor,
     * whose abort the init's waits see): either way named, never an abort of the application's. */
    char victim[32];
    snprintf(victim, sizeof(victim), "rank %d", r->victim);
    if ((res != fcclRemoteError && res != fcclTimeout) || !strstr(fcclGetLastError(NULL), victim))
      return fail(r, "the init's error is %s, want fcclRemoteError or fcclTimeout naming %s: %s",
                  fcclGetErrorString(res), victim, fcclGetLastError(NULL));
    comm = NULL;
  }
  cudaGraph_t graph = NULL;
  cudaGraphExec_t graphExec = NULL;
  if (comm && r->scenario != SCENARIO_INIT) {
    if (checkedAllReduce(r, comm, r->rank, r->nranks, 1u)) return 1;
    /* Every rank captures the all-reduce and replays it once together. */
    if (r->scenario == SCENARIO_GRAPH && captureAllReduce(r, comm, &graph, &graphExec)) return 1;
  }
  setStage(b, r->rank, isVictim ? "waiting to be killed" : kScenarioNames[r->scenario]);
  if (isVictim) {
    if (r->scenario != SCENARIO_INIT) post(&b->ready[r->rank]);
    for (int i = 0; i < WAIT_MS / 10; i++) sleepUs(10000); /* until killed; bounded all the same */
    return fail(r, "the victim was not killed");
  }
  int failed = 0;
  if (comm) failed = survive(r, &comm, graphExec);
  else post(&b->ready[r->rank]);
  if (r->shrink && comm && !failed) { /* from the failed communicator, before it is destroyed */
    setStage(b, r->rank, "recovery by shrink");
    failed = recover(r, comm);
  }
  if (comm) {
    const int64_t start = nowNs();
    (void)fcclCommDestroy(comm); /* after a failure: local, not waiting for the victim */
    const double ms = (double)(nowNs() - start) / 1e6;
    if (ms > 2000 && !failed) failed = fail(r, "fcclCommDestroy of the failed communicator took %.0f ms", ms);
  }
  if (graphExec) (void)cudaGraphExecDestroy(graphExec); /* after the communicator: its destroy must not wait for it */
  if (graph) (void)cudaGraphDestroy(graph);
  setStage(b, r->rank, "recovery");
  if (!failed) failed = recover(r, NULL);
  setStage(b, r->rank, "leak check");
  fcclMemStats_t stats = {.size = sizeof(stats)};
  if (!failed && (fcclCommGetMemStats(NULL, &stats) != fcclSuccess || stats.openMappings != 0))
    failed = fail(r, "%llu peer mappings still open", (unsigned long long)stats.openMappings);
  /* The monitor thread and the bootstrap sockets end with the last communicator; give the thread a moment. */
  int fdsAfter = -1, threadsAfter = -1;
  for (int i = 0; i < 200; i++, sleepUs(5000)) {
    fdsAfter = countEntries("/proc/self/fd");
    threadsAfter = countEntries("/proc/self/task");
    if (fdsAfter <= fds && threadsAfter <= threads) break;
  }
  if (!failed && (fdsAfter > fds || threadsAfter > threads))
    failed = fail(r, "leaked: %d fds (%d before), %d threads (%d before)", fdsAfter, fds, threadsAfter, threads);
  return failed;
}

/* ---- this process ---- */

static int shrinkRecovery; /* -S */

static pid_t forkRank(struct board* b, enum scenario scenario, int rank, int nranks) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  static struct rank r; /* large: not on the stack */
  r = (struct rank){.board = b, .scenario = scenario, .rank = rank, .nranks = nranks, .victim = nranks - 1,
                    .shrink = shrinkRecovery};
  int failed = rankMain(&r);
  post(&b->finished[rank]);
  _exit(failed ? 1 : 0);
}

/* Waits for pid until deadlineNs, then kills it; its exit status (-1 when killed here or on a wait failure). */
static int reap(pid_t pid, int64_t deadlineNs) {
  int status = 0;
  while (nowNs() < deadlineNs) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (done < 0 && errno != EINTR) return -1;
    sleepUs(1000);
  }
  kill(pid, SIGKILL);
  (void)waitpid(pid, &status, 0);
  return -1;
}

/* Waits until rank r is in position, at most 30 s, or until a rank ended (it failed: nobody waits for it). */
static int waitReady(struct board* b, int r, int nranks) {
  for (int64_t end = nowNs() + 30LL * 1000000000LL; nowNs() < end; sleepUs(100)) {
    if (__atomic_load_n(&b->ready[r], __ATOMIC_ACQUIRE)) return 1;
    for (int k = 0; k < nranks; k++)
      if (__atomic_load_n(&b->finished[k], __ATOMIC_ACQUIRE)) return 0;
  }
  return 0;
}

struct results {
  double ms[MAX_TRIALS * MAX_RANKS];
  int count;
  double exitMs[MAX_TRIALS]; /* from the kill to the victim's end as waitpid sees it */
  int exits;
  int failedTrials;
};

static int runTrial(struct board* b, enum scenario scenario, int nranks, int gpus, struct results* out, int trial) {
  memset(b, 0, sizeof(*b));
  b->gpus = gpus;
  pid_t pids[MAX_RANKS];
  for (int r = 0; r < nranks; r++) pids[r] = forkRank(b, scenario, r, nranks);
  const int victim = nranks - 1;
  int ok = 1;
  /* The victim's kill waits for every rank to be in position: the survivors inside their step, the victim idle
   * (or, for init, about to make the communicator). */
  int inPosition = 1;
  for (int r = 0; r < nranks && inPosition; r++) {
    const int want = scenario == SCENARIO_INIT && r != victim ? 0 : 1;
    if (want && !waitReady(b, r, nranks)) inPosition = 0;
  }
  if (!inPosition) {
    fprintf(stderr, "faultbench: trial %d (%s): a rank did not get into position:", trial, kScenarioNames[scenario]);
    for (int r = 0; r < nranks; r++)
      fprintf(stderr, " rank %d at %s%s%s;", r, b->record[r].stage, b->record[r].failed ? ": " : "",
              b->record[r].problem);
    fprintf(stderr, "\n");
    ok = 0;
  }
  sleepUs(scenario == SCENARIO_INIT ? (trial % 5) * 2000 : SETTLE_US);
  b->killNs = nowNs();
  kill(pids[victim], scenario == SCENARIO_STOP ? SIGSTOP : SIGKILL);
  if (scenario != SCENARIO_STOP) { /* when the system had ended the victim: the floor of any detection */
    int status = 0;
    for (int64_t end = b->killNs + 10LL * 1000000000LL; nowNs() < end; sleepUs(50)) {
      if (waitpid(pids[victim], &status, WNOHANG) == pids[victim]) {
        out->exitMs[out->exits++] = (double)(nowNs() - b->killNs) / 1e6;
        pids[victim] = -1;
        break;
      }
    }
  }
  const int64_t deadline = nowNs() + 40LL * 1000000000LL; /* past every bound of the ranks (10 s, DETECT_LIMIT_MS) */
  for (int r = 0; r < victim; r++) {
    const int code = reap(pids[r], deadline);
    if (code != 0 || b->record[r].failed) {
      fprintf(stderr, "faultbench: trial %d (%s): rank %d at %s: %s (exit %d)\n", trial, kScenarioNames[scenario], r,
              b->record[r].stage, b->record[r].failed ? b->record[r].problem : "ended without a record", code);
      ok = 0;
    } else if (b->record[r].detectNs > 0) {
      out->ms[out->count++] = (double)(b->record[r].detectNs - b->killNs) / 1e6;
    }
  }
  if (pids[victim] > 0) {
    if (scenario == SCENARIO_STOP) kill(pids[victim], SIGKILL); /* SIGKILL ends a stopped process too */
    (void)reap(pids[victim], nowNs() + 10LL * 1000000000LL);
  }
  if (!ok) out->failedTrials++;
  return ok;
}

static int compareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void usage(FILE* out) {
  fprintf(out,
          "usage: fccl-faultbench [-s scenario] [-n trials] [-r ranks] [-t ms] [-S] [-J file] [-h]\n"
          "  -s, --scenario S   kernel (default), graph, idle, destroy, init, stop, or all\n"
          "  -n, --trials N     trials per scenario (default 50, at most %d)\n"
          "  -r, --ranks R      ranks per trial, the last one the victim (default 2, 2..%d)\n"
          "  -t, --timeout MS   FCCL_TIMEOUT of the stop scenario (default 2000)\n"
          "  -S, --shrink       the survivors also recover by fcclCommShrink of the failed communicator\n"
          "  -J, --json FILE    the figures as JSON\n"
          "  -h, --help         this text\n",
          MAX_TRIALS, MAX_RANKS);
}

int main(int argc, char** argv) {
  static const struct option longOptions[] = {
      {"scenario", required_argument, NULL, 's'}, {"trials", required_argument, NULL, 'n'},
      {"ranks", required_argument, NULL, 'r'},    {"timeout", required_argument, NULL, 't'},
      {"json", required_argument, NULL, 'J'},     {"help", no_argument, NULL, 'h'},
      {"shrink", no_argument, NULL, 'S'},
      {NULL, 0, NULL, 0}};
  int first = SCENARIO_KERNEL, last = SCENARIO_KERNEL, trials = 50, nranks = 2, stopTimeoutMs = 2000;
  const char* jsonPath = NULL;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":s:n:r:t:J:Sh", longOptions, NULL)) != -1;) {
    char* end = NULL;
    switch (c) {
    case 's':
      first = -1;
      if (strcmp(optarg, "all") == 0) {
        first = 0;
        last = SCENARIOS - 1;
      }
      for (int s = 0; s < SCENARIOS && first < 0; s++)
        if (strcmp(optarg, kScenarioNames[s]) == 0) first = last = s;
      if (first < 0) {
        fprintf(stderr, "fccl-faultbench: unknown scenario %s\n", optarg);
        return 2;
      }
      break;
    case 'n':
    case 'r':
    case 't': {
      long value = strtol(optarg, &end, 10);
      const long low = c == 'r' ? 2 : 1, high = c == 'n' ? MAX_TRIALS : c == 'r' ? MAX_RANKS : 600000;
      if (!*optarg || *end || value < low || value > high) {
        fprintf(stderr, "fccl-faultbench: -%c takes a number from %ld to %ld, not %s\n", c, low, high, optarg);
        return 2;
      }
      if (c == 'n') trials = (int)value;
      else if (c == 'r') nranks = (int)value;
      else stopTimeoutMs = (int)value;
      break;
    }
    case 'S':
      shrinkRecovery = 1;
      break;
    case 'J':
      jsonPath = optarg;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default: {
      char problem[128];
      toolOptionProblem(c, argv, problem, sizeof(problem));
      fprintf(stderr, "fccl-faultbench: %s\n", problem);
      usage(stderr);
      return 2;
    }
    }
  }
  if (optind < argc) {
    fprintf(stderr, "fccl-faultbench: unexpected argument %s\n", argv[optind]);
    return 2;
  }
  char timeout[32];
  snprintf(timeout, sizeof(timeout), "%d", stopTimeoutMs);
  setenv("FAULTBENCH_STOP_TIMEOUT_MS", timeout, 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  struct board* b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED) {
    perror("fccl-faultbench: mmap");
    return 1;
  }
  /* Asked in a child: this process forks the ranks and never initialises CUDA itself. */
  toolCudaStatus_t cuda;
  toolCudaQueryInChild(&cuda, 60);
  const int gpus = cuda.deviceCount;
  if (gpus < 1) {
    munmap(b, sizeof(*b));
    return toolReportNoGpu("fccl-faultbench", cuda.noGpu);
  }
  FILE* json = jsonPath ? fopen(jsonPath, "w") : NULL;
  if (jsonPath && !json) {
    fprintf(stderr, "fccl-faultbench: cannot write %s: %s\n", jsonPath, strerror(errno));
    return 2;
  }
  printf("# fccl-faultbench: %d ranks on %d GPU(s), the victim rank %d; %d trials per scenario\n", nranks, gpus,
         nranks - 1, trials);
  printf("# %-8s %8s %10s %10s %10s %7s %12s   (ms from the kill or stop to each survivor's error; exit: to the "
         "victim's end, median)\n", "scenario", "samples", "min", "median", "max", "failed", "exit");
  if (json) fprintf(json, "{\"ranks\": %d, \"gpus\": %d, \"trials\": %d, \"scenarios\": {", nranks, gpus, trials);
  static struct results results;
  int status = 0;
  for (int s = first; s <= last; s++) {
    memset(&results, 0, sizeof(results));
    for (int t = 0; t < trials; t++) runTrial(b, (enum scenario)s, nranks, gpus, &results, t);
    qsort(results.ms, (size_t)results.count, sizeof(double), compareDoubles);
    qsort(results.exitMs, (size_t)results.exits, sizeof(double), compareDoubles);
    const double exitMedian = results.exits ? results.exitMs[results.exits / 2] : NAN;
    const double lo = results.count ? results.ms[0] : NAN, hi = results.count ? results.ms[results.count - 1] : NAN;
    const double median = results.count ? results.ms[results.count / 2] : NAN;
    printf("  %-8s %8d %10.3f %10.3f %10.3f %7d %12.3f\n", kScenarioNames[s], results.count, lo, median, hi,
           results.failedTrials, exitMedian);
    if (json)
      fprintf(json, "%s\"%s\": {\"samples\": %d, \"min_ms\": %.4f, \"median_ms\": %.4f, \"max_ms\": %.4f, "
                    "\"failed_trials\": %d, \"victim_exit_median_ms\": %.4f}",
              s == first ? "" : ", ", kScenarioNames[s], results.count, results.count ? lo : 0.0,
              results.count ? median : 0.0, results.count ? hi : 0.0, results.failedTrials,
              results.exits ? exitMedian : 0.0);
    if (results.failedTrials) status = 1;
  }
  if (json) {
    fprintf(json, "}}\n");
    fclose(json);
  }
  munmap(b, sizeof(*b));
  return status;
}
