/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The benchmark's host-only core (test_bench.c): the shared-memory exchange between forked processes
 * (tools/bench/oob.c), and the launcher (tools/bench/launch.c): launcher variables, the plan of processes and GPUs,
 * the fork launcher and its probes.
 */
#include "test_bench.h"

#include "bench.h"
#include "test.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the exchange ----------------------------------------------------------------------------------------------- */

static void* shmRegion;

static int exchangeRank(int rank, int nranks, void* arg) {
  (void)arg;
  benchOob_t oob;
  benchOobShmInit(&oob, shmRegion, rank, 20);
  int failures = 0;
  for (int round = 0; round < 200; round++) {
    double values[3] = {rank + round, -rank, rank * 2.0};
    if (benchOobReduce(&oob, values, 3, BENCH_REDUCE_SUM) != 0) return 10;
    double sum = nranks * (nranks - 1) / 2.0;
    if (values[0] != sum + nranks * round || values[1] != -sum || values[2] != 2 * sum) failures++;
    double mm[2] = {rank, rank};
    if (benchOobReduce(&oob, mm, 1, BENCH_REDUCE_MIN) != 0 || mm[0] != 0) failures++;
    mm[0] = rank;
    if (benchOobReduce(&oob, mm, 1, BENCH_REDUCE_MAX) != 0 || mm[0] != nranks - 1) failures++;
    mm[0] = rank + 10;
    if (benchOobReduce(&oob, mm, 1, BENCH_REDUCE_FIRST) != 0 || mm[0] != 10) failures++;
    mm[0] = rank;
    if (benchOobReduce(&oob, mm, 1, BENCH_REDUCE_AVG) != 0 || mm[0] != (nranks - 1) / 2.0) failures++;
    char id[3000];
    memset(id, rank == 0 ? 'a' + round % 26 : 0, sizeof(id));
    if (benchOobBcast(&oob, id, sizeof(id)) != 0) return 11;
    for (size_t i = 0; i < sizeof(id); i++)
      if (id[i] != 'a' + round % 26) {
        failures++;
        break;
      }
    if (benchOobBarrier(&oob) != 0) return 12;
  }
  return failures ? 13 : 0;
}

typedef struct {
  void* region;
  int agent;
  int status;
  double seconds;
  char error[256];
} waiter_t;

static void* waitAlone(void* arg) {
  waiter_t* w = (waiter_t*)arg;
  benchOob_t oob;
  benchOobShmInit(&oob, w->region, w->agent, 1);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  w->status = benchOobBarrier(&oob);
  clock_gettime(CLOCK_MONOTONIC, &b);
  w->seconds = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
  snprintf(w->error, sizeof(w->error), "%s", oob.error);
  return NULL;
}

void testExchange(void) {
  const int nranks = 4;
  shmRegion = benchShmCreate(nranks);
  EXPECT(shmRegion != NULL);
  int codes[4];
  EXPECT_EQ_INT(testForkRanks(nranks, exchangeRank, NULL, 60, codes), 0);
  for (int r = 0; r < nranks; r++) EXPECT_MSG(codes[r] == 0, "exchange rank %d exited %d", r, codes[r]);
  benchShmDestroy(shmRegion);

  /* A missing peer: the wait ends at the timeout, with a message, and marks the exchange aborted. */
  void* region = benchShmCreate(2);
  waiter_t alone = {region, 0, 0, 0, ""};
  waitAlone(&alone);
  EXPECT_EQ_INT(alone.status, -1);
  EXPECT(alone.seconds >= 0.9 && alone.seconds < 10);
  EXPECT_STR_CONTAINS(alone.error, "timed out after 1 s");
  /* Once aborted, the next exchange fails at once. */
  waiter_t late = {region, 1, 0, 0, ""};
  waitAlone(&late);
  EXPECT_EQ_INT(late.status, -1);
  EXPECT(late.seconds < 0.5);
  EXPECT_STR_CONTAINS(late.error, "another rank gave up");
  benchShmDestroy(region);

  /* benchOobAbort from one agent releases another that is waiting. */
  region = benchShmCreate(3);
  waiter_t waiting = {region, 0, 0, 0, ""};
  pthread_t thread;
  pthread_create(&thread, NULL, waitAlone, &waiting);
  struct timespec pause = {0, 100 * 1000 * 1000};
  nanosleep(&pause, NULL);
  benchOob_t aborter;
  benchOobShmInit(&aborter, region, 2, 1);
  benchOobAbort(&aborter);
  pthread_join(thread, NULL);
  EXPECT_EQ_INT(waiting.status, -1);
  EXPECT(waiting.seconds < 0.9);
  benchShmDestroy(region);
  EXPECT(benchShmCreate(0) == NULL);
}

/* ---- launch ----------------------------------------------------------------------------------------------------- */

static const char* const* fakeEnv;
static const char* fakeGetenv(const char* name) {
  for (const char* const* e = fakeEnv; e && *e; e += 2)
    if (strcmp(e[0], name) == 0) return e[1];
  return NULL;
}

static int detect(const char* const* env, benchLaunchEnv_t* out, char* err, size_t len) {
  fakeEnv = env;
  return benchDetectLaunch(fakeGetenv, out, err, len);
}

void testLaunchVariables(void) {
  benchLaunchEnv_t env;
  char err[256];
  static const char* const none[] = {"HOME", "/root", NULL};
  EXPECT_EQ_INT(detect(none, &env, err, sizeof(err)), 0);
  EXPECT_EQ_INT(env.kind, BENCH_LAUNCH_LOCAL);
  static const char* const torchrun[] = {"WORLD_SIZE",       "4", "RANK", "3", "LOCAL_RANK", "1",
                                         "LOCAL_WORLD_SIZE", "2", NULL};
  EXPECT_EQ_INT(detect(torchrun, &env, err, sizeof(err)), 0);
  EXPECT_EQ_INT(env.kind, BENCH_LAUNCH_ENV);
  EXPECT(strcmp(env.source, "torchrun") == 0);
  EXPECT(env.rank == 3 && env.size == 4 && env.localRank == 1 && env.localSize == 2 && !env.fromMpiLauncher);
  static const char* const openmpi[] =
      {"OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_LOCAL_RANK", "1", NULL};
  EXPECT_EQ_INT(detect(openmpi, &env, err, sizeof(err)), 0);
  EXPECT(env.kind == BENCH_LAUNCH_ENV && env.fromMpiLauncher && env.rank == 1 && env.localRank == 1);
  EXPECT(strcmp(env.source, "Open MPI") == 0);
  static const char* const slurm[] = {"PMI_SIZE", "8", "PMI_RANK", "5", "SLURM_LOCALID", "1", NULL};
  EXPECT_EQ_INT(detect(slurm, &env, err, sizeof(err)), 0);
  EXPECT(env.rank == 5 && env.size == 8 && env.localRank == 1);
  static const char* const both[] =
      {"OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_RANK", "0", "WORLD_SIZE", "2", "RANK", "1", NULL};
  EXPECT_EQ_INT(detect(both, &env, err, sizeof(err)), 0); /* torchrun's first, as fcclCommInitFromEnv reads them */
  EXPECT(env.rank == 1 && strcmp(env.source, "torchrun") == 0);
  static const char* const noRank[] = {"WORLD_SIZE", "2", NULL};
  EXPECT_EQ_INT(detect(noRank, &env, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "RANK is missing");
  static const char* const big[] = {"WORLD_SIZE", "2", "RANK", "2", NULL};
  EXPECT_EQ_INT(detect(big, &env, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "RANK=2 is not below WORLD_SIZE=2");
  static const char* const junk[] = {"WORLD_SIZE", "two", NULL};
  EXPECT_EQ_INT(detect(junk, &env, err, sizeof(err)), -1);
  static const char* const badLocal[] = {"WORLD_SIZE",       "2", "RANK", "0", "LOCAL_RANK", "2",
                                         "LOCAL_WORLD_SIZE", "2", NULL};
  EXPECT_EQ_INT(detect(badLocal, &env, err, sizeof(err)), -1);
}

void testPlan(void) {
  benchArgs_t args;
  benchLayout_t layout;
  char err[256];
  benchArgsDefaults(&args);
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT(layout.nProcs == 2 && layout.nRanks == 2 && !layout.shared);
  EXPECT_EQ_INT(benchDeviceOf(&layout, 1, 0), 1);
  args.nGpus = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT(layout.nProcs == 1 && layout.nRanks == 2);
  args.nGpus = 1;
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), 0);
  EXPECT(layout.nProcs == 1 && layout.nRanks == 1 && !layout.shared);
  args.nProcs = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "--share-gpu");
  args.shareGpu = 1;
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), 0);
  EXPECT(layout.shared && layout.nRanks == 2);
  EXPECT_EQ_INT(benchDeviceOf(&layout, 1, 0), 0);
  args.shareGpu = 0;
  args.nProcs = 3;
  args.nThreads = 2;
  args.nGpus = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 8, &layout, err, sizeof(err)), -1); /* 12 ranks on 8 GPUs */
  EXPECT_EQ_INT(benchPlanLocal(&args, 0, &layout, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "no GPU");
}

/* --hosts: consecutive processes pose as one host; NCCL takes ranks sharing a GPU only from different hosts. */
void testPlanHosts(void) {
  benchArgs_t args;
  benchLayout_t layout;
  char err[256];
  benchArgsDefaults(&args);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-np", "4", "--hosts", "2", "--share-gpu", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.hosts, 2);
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT_EQ_INT(layout.hosts, 2);
  const int wantHost[4] = {0, 0, 1, 1};
  for (int p = 0; p < 4; p++) EXPECT_EQ_INT(benchHostOf(&layout, p), wantHost[p]);
  /* ranks 0 and 2 share GPU 0, 1 and 3 GPU 1: each pair of two hosts */
  EXPECT(layout.shared && benchNcclTakesSharing(&layout));
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), 0);
  EXPECT(!benchNcclTakesSharing(&layout)); /* all four on GPU 0: ranks 0 and 1 are one host */
  args.hosts = 4;
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), 0);
  EXPECT(benchNcclTakesSharing(&layout));
  EXPECT_EQ_INT(benchHostOf(&layout, 3), 3);
  args.hosts = 0;
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT(!benchNcclTakesSharing(&layout) && benchHostOf(&layout, 3) == 0);
  args.nProcs = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT(!layout.shared && benchNcclTakesSharing(&layout)); /* nothing shared */
  args.nProcs = 3;
  args.hosts = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 3, &layout, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "--hosts 2: 3 processes do not split into 2 hosts");
  /* two threads per process: both of a process's ranks are its host's */
  args.nProcs = 2;
  args.nThreads = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT(benchNcclTakesSharing(&layout)); /* GPU 0: ranks 0 (process 0, host 0) and 2 (process 1, host 1) */
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), 0);
  EXPECT(!benchNcclTakesSharing(&layout)); /* GPU 0: ranks 0 and 1 of one process */
}

static int bodyExit(int proc, void* arg) {
  int failing = *(int*)arg;
  if (proc == failing) return 3;
  if (failing >= 0) sleep(30); /* left hanging: the launcher must kill it */
  return 0;
}

/* Rank 1 dies (SIGKILL, as the OOM killer would) before it reaches the exchange the others wait in. */
static int bodyDiesBeforeExchange(int proc, void* arg) {
  if (proc == 1) kill(getpid(), SIGKILL);
  benchOob_t oob;
  benchOobShmInit(&oob, arg, proc, 60);
  if (benchOobBarrier(&oob) == 0) return 10;                  /* passed a barrier a dead rank never reached */
  return strstr(oob.error, "another rank gave up") ? 12 : 11; /* 12: released by the launcher's abort */
}

static int probeFive(char* msg, size_t len) {
  snprintf(msg, len, "hello");
  return 5;
}

static int probeDies(char* msg, size_t len) {
  (void)msg;
  (void)len;
  _exit(4);
}

static int probeHangs(char* msg, size_t len) {
  (void)msg;
  (void)len;
  sleep(60);
  return 1;
}

static double secondsSince(const struct timespec* start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - start->tv_sec) + 1e-9 * (double)(now.tv_nsec - start->tv_nsec);
}

void testForkLauncher(void) {
  int failing = -1;
  EXPECT_EQ_INT(benchForkRun(3, bodyExit, &failing, NULL, 1), 0);
  failing = 1;
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  EXPECT_EQ_INT(benchForkRun(3, bodyExit, &failing, NULL, 1), 3);
  EXPECT_MSG(secondsSince(&start) < 10, "the hanging ranks were not killed after the grace period");
  EXPECT_EQ_INT(benchForkRun(0, bodyExit, &failing, NULL, 1), 1);

  /* A dead rank must not hang the others: the launcher aborts the exchange at once, long before the 30 s grace
   * period or the 60 s exchange timeout, and the survivors end on their own with the exchange's error. */
  void* region = benchShmCreate(3);
  EXPECT(region != NULL);
  clock_gettime(CLOCK_MONOTONIC, &start);
  int code = benchForkRun(3, bodyDiesBeforeExchange, region, benchShmAbort, 30);
  double seconds = secondsSince(&start);
  EXPECT_MSG(code == 128 + SIGKILL, "a rank killed by SIGKILL gave exit code %d", code);
  EXPECT_MSG(seconds < 10, "the survivors of a dead rank took %.1f s to stop", seconds);
  benchShmDestroy(region);

  int value = 0;
  char msg[64] = "";
  EXPECT_EQ_INT(benchProbeInChild(probeFive, &value, msg, sizeof(msg), 30), 0);
  EXPECT_EQ_INT(value, 5);
  EXPECT(strcmp(msg, "hello") == 0);
  EXPECT_EQ_INT(benchProbeInChild(probeDies, &value, msg, sizeof(msg), 30), -1);
  /* A probe that hangs (a wedged driver) is killed at the bound. */
  clock_gettime(CLOCK_MONOTONIC, &start);
  EXPECT_EQ_INT(benchProbeInChild(probeHangs, &value, msg, sizeof(msg), 1), -1);
  EXPECT_EQ_INT(errno, ETIMEDOUT);
  seconds = secondsSince(&start);
  EXPECT_MSG(seconds >= 0.9 && seconds < 10, "the hanging probe was given up after %.1f s, not 1", seconds);
}

/* ---- the exchange of many values, and -N 0's stop on a signal ---------------------------------------------------- */

static void* gatherRegion;

/* 600 doubles per agent: three pieces of the exchange's slot; every agent must get every agent's, in order. */
static int gatherRank(int rank, int nranks, void* arg) {
  (void)arg;
  benchOob_t oob;
  benchOobShmInit(&oob, gatherRegion, rank, 20);
  enum { N = 600 };
  double mine[N], all[3 * N];
  for (int i = 0; i < N; i++) mine[i] = rank * 1000.0 + i;
  if (benchOobGatherDoubles(&oob, mine, N, all) != 0) return 10;
  for (int a = 0; a < nranks; a++)
    for (int i = 0; i < N; i++)
      if (all[(size_t)a * N + i] != a * 1000.0 + i) return 11;
  /* n = 0 is one exchange too: the barrier after it pairs with everyone's. */
  if (benchOobGatherDoubles(&oob, mine, 0, all) != 0 || benchOobBarrier(&oob) != 0) return 12;
  return 0;
}

enum { STOP_RANKS = 3, STOP_MAX_ROUNDS = 200000 };

typedef struct {
  void* region;     /* the exchange */
  int raiseAtRound; /* the round at which rank 1 signals itself; -1: never (the launcher gets the signal) */
} stopRun_t;

/* A rank of a -N 0 run: a round of 1 ms of work, then the agreement of every rank (benchStopAgreed's reduction of
 * the flag); afterwards every rank must have stopped at the same round, and at (or one after) the one the signal came
 * in when it was this rank's own. */
static int stopRank(int proc, void* arg) {
  const stopRun_t* run = (const stopRun_t*)arg;
  benchOob_t oob;
  benchOobShmInit(&oob, run->region, proc, 20);
  int round = 0;
  for (; round < STOP_MAX_ROUNDS; round++) {
    struct timespec work = {0, 1000 * 1000};
    nanosleep(&work, NULL);
    if (proc == 1 && round == run->raiseAtRound) kill(getpid(), SIGINT);
    double stop = benchStopRequested(run->region) ? 1 : 0;
    if (benchOobReduce(&oob, &stop, 1, BENCH_REDUCE_MAX) != 0) return 20;
    if (stop > 0) break;
  }
  double rounds[STOP_RANKS];
  double mine = round;
  if (round == STOP_MAX_ROUNDS || benchOobGatherDoubles(&oob, &mine, 1, rounds) != 0) return 21;
  for (int r = 0; r < STOP_RANKS; r++)
    if (rounds[r] != round) return 22;
  if (run->raiseAtRound >= 0 && round != run->raiseAtRound) return 23;
  return 0;
}

/* The launcher of a -N 0 run, in a child of the test (the handlers are per process): it installs the handlers, with
 * the exchange or without (as under torchrun), and runs the ranks. Exits with benchForkRun's status. */
static void stopLauncher(int withRegion, int raiseAtRound) {
  stopRun_t run = {benchShmCreate(STOP_RANKS), raiseAtRound};
  if (!run.region) _exit(30);
  benchStopOnSignals(withRegion ? run.region : NULL);
  _exit(benchForkRun(STOP_RANKS, stopRank, &run, benchShmAbort, 5));
}

/* Waits for pid at most seconds; its wait status, or -1 (killed after the bound). */
static int waitBounded(pid_t pid, int seconds) {
  int status = 0;
  for (int waited = 0; waited < seconds * 100; waited++) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

void testStopOnSignal(void) {
  gatherRegion = benchShmCreate(3);
  int codes[3];
  EXPECT_EQ_INT(testForkRanks(3, gatherRank, NULL, 60, codes), 0);
  for (int r = 0; r < 3; r++) EXPECT_MSG(codes[r] == 0, "gather rank %d exited %d", r, codes[r]);
  benchShmDestroy(gatherRegion);

  /* SIGTERM to the launcher alone (kill PID, a job scheduler): the exchange's flag stops every rank at one round,
   * and the launcher returns 0 instead of dying of the signal. */
  fflush(stdout);
  pid_t launcher = fork();
  if (launcher == 0) stopLauncher(1, -1);
  struct timespec running = {0, 300 * 1000 * 1000};
  nanosleep(&running, NULL);
  kill(launcher, SIGTERM);
  int status = waitBounded(launcher, 30);
  EXPECT_MSG(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
             "SIGTERM to the launcher: wait status %#x (exit %d)", status,
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);

  /* SIGINT to one rank process alone, without the exchange's flag (the torchrun case): the agreement stops all of
   * them at that rank's round. */
  launcher = fork();
  if (launcher == 0) stopLauncher(0, 40);
  status = waitBounded(launcher, 30);
  EXPECT_MSG(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
             "SIGINT to rank 1: wait status %#x (exit %d)", status, WIFEXITED(status) ? WEXITSTATUS(status) : -1);

  /* The first signal only asks; the second ends the process at once (the handler resets itself). */
  pid_t twice = fork();
  if (twice == 0) {
    benchStopOnSignals(NULL);
    if (benchStopRequested(NULL) || benchStopSignal() != 0) _exit(40);
    raise(SIGINT);
    if (!benchStopRequested(NULL) || benchStopSignal() != SIGINT) _exit(41);
    raise(SIGINT);
    _exit(42); /* not reached */
  }
  status = waitBounded(twice, 30);
  EXPECT_MSG(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGINT,
             "two SIGINTs: wait status %#x (exit %d)", status, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}
