/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The benchmark's entry (benchMain): flags, the launch mode and the processes, the agents.
 *
 * Ranks are grouped into agents: a thread that drives -g GPUs (one rank each). Agents of all processes talk through
 * an out-of-band channel (bench.h): shared memory for threads and forked processes, MPI under mpirun in an MPI
 * build, and the first engine's communicator itself when torchrun-style variables started the processes. Rank 0's
 * agent prints; every agent takes part in every exchange, so all ranks agree on sizes, times and error counts.
 */
#include "runtime_internal.h"

#include "cuda_status.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if FCCL_HAVE_MPI
#include <mpi.h>
#endif

#define PROBE_TIMEOUT_SEC 60 /* counting the GPUs in a child process (CUDA initialisation included) */
#define RANK_GRACE_SEC 10    /* after a rank process fails, the others have this long before they are killed */

typedef struct {
  const benchTest_t* test;
  benchArgs_t args;
  int argc;
  char** argv;
  benchLaunchEnv_t env;
  benchLayout_t layout;
  int mode;              /* BENCH_LAUNCH_LOCAL / ENV / MPI */
  void* shm;             /* LOCAL: the exchange region */
  char launchText[160];
  int compareSkipped;    /* --compare nccl asked but impossible here (reason printed) */
} benchProcess_t;

static benchProcess_t process;

/* The engines this build has, in the table's column order; NULL for one it lacks. */
static const benchEngineOps_t* buildEngine(int engine) {
  return engine == BENCH_FCCL ? &benchFcclEngine : engine == BENCH_NCCL ? benchNcclEngine : NULL;
}

/* ---- the agents of one process ---------------------------------------------------------------------------------- */

typedef struct {
  int agentIndex;
  int firstRank;
  int nLocal;
  int devices[BENCH_MAX_LOCAL];
  benchOob_t* oob;
  int status;
} agentPlan_t;

static void* agentThread(void* arg) {
  agentPlan_t* plan = (agentPlan_t*)arg;
  benchAgent_t* agent = (benchAgent_t*)calloc(1, sizeof(benchAgent_t));
  if (!agent) {
    fprintf(stderr, "%s: rank %d: out of memory\n", process.test->program, plan->firstRank);
    benchOobAbort(plan->oob);
    plan->status = -1;
    return NULL;
  }
  agent->args = process.args;
  agent->test = process.test;
  agent->oob = plan->oob;
  agent->agent = plan->agentIndex;
  agent->nAgents = process.layout.nProcs * process.layout.nThreads;
  agent->nranks = process.layout.nRanks;
  agent->nLocal = plan->nLocal;
  agent->firstRank = plan->firstRank;
  agent->launchKind = process.mode;
  agent->launchText = process.launchText;
  agent->sharedGpus = process.layout.shared;
  agent->nDevices = process.layout.nDevices;
  agent->compareSkipped = process.compareSkipped;
  agent->argc = process.argc;
  agent->argv = process.argv;
  agent->stopRegion = process.shm;
  agent->output = plan->agentIndex == 0;
  agent->showProgress = agent->output && (process.args.progress == 1 ||
                                          (process.args.progress == -1 && isatty(STDERR_FILENO)));
  memcpy(agent->devices, plan->devices, sizeof(agent->devices));
  agent->nEngines = process.args.compareNccl && !process.compareSkipped ? 2 : 1;
  static const char* const buffersText[3] = {"plain", "registered", "symmetric"};
  for (int engine = 0; engine < BENCH_MAX_ENGINES; engine++) {
    benchEngine_t* e = &agent->engines[engine];
    e->ops = buildEngine(engine);
    int kind = process.args.localRegister;
    /* An engine without symmetric windows registers -R 2's buffers plainly. */
    if (kind == BENCH_BUFFERS_SYMMETRIC && !(e->ops && e->ops->symmetricWindows)) kind = BENCH_BUFFERS_REGISTERED;
    agent->buffersText[engine] = buffersText[kind];
    agent->engineNames[engine] = e->ops ? e->ops->name : NULL;
    e->version = e->ops ? e->ops->libraryVersion() : 0;
  }
  int status = benchRunAgent(agent);
  plan->status = status < 0 ? -1 : status;
  free(agent);
  return NULL;
}

/* One process: its agents, one thread each (the first on the calling thread). */
static int processMain(int proc, void* arg) {
  (void)arg;
  const benchLayout_t* layout = &process.layout;
  int nThreads = layout->nThreads;
  agentPlan_t plans[64];
  benchOob_t oobs[64];
  pthread_t threads[64];
  if (proc == 0 || process.mode != BENCH_LAUNCH_LOCAL) setlinebuf(stdout);
  if (layout->hosts > 0) {
    /* Before this process's first fccl or NCCL call: both read their host identity once. */
    char host[32];
    snprintf(host, sizeof(host), "bench-host-%d", benchHostOf(layout, proc));
    setenv("FCCL_HOSTID", host, 1);
    setenv("NCCL_HOSTID", host, 1);
  }
  for (int t = 0; t < nThreads; t++) {
    agentPlan_t* plan = &plans[t];
    memset(plan, 0, sizeof(*plan));
    plan->agentIndex = proc * nThreads + t;
    plan->nLocal = layout->nGpus;
    plan->firstRank = plan->agentIndex * layout->nGpus;
    plan->oob = &oobs[t];
    int firstLocal = process.mode == BENCH_LAUNCH_LOCAL ? plan->firstRank : process.env.localRank * layout->nGpus;
    for (int gpu = 0; gpu < plan->nLocal; gpu++) plan->devices[gpu] = benchDeviceOf(layout, firstLocal, gpu);
    memset(&oobs[t], 0, sizeof(oobs[t]));
    if (process.mode == BENCH_LAUNCH_LOCAL) benchOobShmInit(&oobs[t], process.shm, plan->agentIndex,
                                                            process.args.timeoutSec);
#if FCCL_HAVE_MPI
    if (process.mode == BENCH_LAUNCH_MPI) benchOobMpiInit(&oobs[t], layout->nProcs, proc);
#endif
  }
  int started = 1;
  for (int t = 1; t < nThreads; t++) {
    if (pthread_create(&threads[t], NULL, agentThread, &plans[t]) != 0) {
      fprintf(stderr, "%s: cannot start thread %d\n", process.test->program, t);
      benchOobAbort(&oobs[0]);
      plans[t].status = -1;
      break;
    }
    started++;
  }
  agentThread(&plans[0]);
  for (int t = 1; t < started; t++) pthread_join(threads[t], NULL);
  int code = 0;
  for (int t = 0; t < nThreads; t++) {
    if (plans[t].status < 0) code = 1;
    if (plans[t].status > 0 && code == 0) code = 1;
  }
  fflush(stdout);
  return code;
}

/* ---- main ------------------------------------------------------------------------------------------------------- */

static int probeGpus(char* msg, size_t len) {
  /* fccl-info's and fccl-topo's words for why there is no GPU ("no NVIDIA driver found: ..." rather than CUDA's
   * "driver version is insufficient" on a machine without a driver). */
  toolCudaStatus_t cuda;
  toolCudaQuery(&cuda);
  if (cuda.deviceCount == 0) snprintf(msg, len, "%s", cuda.noGpu);
  return cuda.deviceCount;
}

static const char* realGetenv(const char* name) { return getenv(name); }

/* What this build makes of --compare and -R 2, said once (by the launcher, or rank 0) when the run starts. */
static void printBuildNotes(const benchArgs_t* args) {
  if (!args->compareNccl) return;
  if (!benchNcclEngine)
    printf("# --compare nccl: this build has no NCCL; measuring fccl alone\n");
  else if (args->localRegister == BENCH_BUFFERS_SYMMETRIC && !benchNcclEngine->symmetricWindows)
    printf("# -R 2: this NCCL has no symmetric windows (2.27+); NCCL's buffers are registered plainly\n");
}

int benchMain(int argc, char** argv, const benchTest_t* test) {
  const char* program = test->program;
  memset(&process, 0, sizeof(process));
  process.test = test;
  process.argc = argc;
  process.argv = argv;
  benchArgsDefaults(&process.args);
  process.args.takes = test->takes;
  char err[512];
  int parsed = benchParseArgs(argc, argv, &process.args, err, sizeof(err));
  if (parsed == BENCH_PARSE_HELP) {
    benchPrintUsage(stdout, program, test->takes);
    return 0;
  }
  if (parsed != BENCH_PARSE_OK) {
    fprintf(stderr, "%s: %s\n", program, err);
    return 2;
  }
  benchArgs_t* args = &process.args;
  /* What the parser turned off as nccl-tests does, in nccl-tests' words, each line naming the program. */
  for (const char* line = args->notice; *line;) {
    const size_t len = strcspn(line, "\n");
    fprintf(stderr, "%s: %.*s\n", program, (int)len, line);
    line += len + (line[len] == '\n');
  }
  for (int engine = 0; engine < BENCH_MAX_ENGINES; engine++)
    if (buildEngine(engine) && buildEngine(engine)->prepareProcess) buildEngine(engine)->prepareProcess();
  if (args->compareNccl && !benchNcclEngine) process.compareSkipped = 1;
  /* Before any fccl call and before the ranks are forked: fccl reads its parameters once. */
  if (args->path) setenv("FCCL_PATH", args->path, 1);
  if (benchDetectLaunch(realGetenv, &process.env, err, sizeof(err)) != 0) {
    fprintf(stderr, "%s: launcher variables: %s\n", program, err);
    return 2;
  }
  /* The output files are written at the end: a name that cannot be written fails now, not after the run (with
   * --max-ctas, every budget's too). */
  const char* const outputs[2] = {args->jsonPath, args->csvPath};
  for (int i = 0; i < 2; i++) {
    for (int b = -1; outputs[i] && b < args->nMaxCtas; b++) {
      char budgetPath[4096];
      const char* path = outputs[i];
      if (b >= 0 && benchBudgetPath(outputs[i], args->maxCtas[b], budgetPath, sizeof(budgetPath)) == 0)
        path = budgetPath;
      if (benchCheckWritable(path, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s %s\n", program, i == 0 ? "-J:" : "--csv:", err);
        return 2;
      }
    }
  }
  /* --max-ctas sets each budget in the communicators' config, which the libraries' own variables override: with
   * one set to a budget, every table would run under it. */
  const char* const budgetVariables[2] = {"FCCL_MAX_CTAS", "NCCL_MAX_CTAS"};
  for (int i = 0; i < 2 && args->nMaxCtas > 0; i++) {
    const char* value = getenv(budgetVariables[i]);
    /* Both libraries ignore a value of 0 or below. */
    if (!value || strtol(value, NULL, 0) <= 0 || (i == 1 && !args->compareNccl)) continue;
    fprintf(stderr, "%s: --max-ctas: %s=%s overrides every communicator's maxCTAs; unset it to compare budgets\n",
            program, budgetVariables[i], value);
    return 2;
  }
  int code = 0;
  if (process.env.kind == BENCH_LAUNCH_LOCAL) {
    int nDevices = 0;
    char msg[512] = "";
    if (benchProbeInChild(probeGpus, &nDevices, msg, sizeof(msg), PROBE_TIMEOUT_SEC) != 0) {
      if (errno == ETIMEDOUT)
        fprintf(stderr, "%s: counting the GPUs took more than %d s (the probe process hangs in CUDA); giving up\n",
                program, PROBE_TIMEOUT_SEC);
      else
        fprintf(stderr, "%s: could not count the GPUs (the probe process failed)\n", program);
      return 2;
    }
    if (nDevices == 0) return toolReportNoGpu(program, msg);
    if (benchPlanLocal(args, nDevices, &process.layout, err, sizeof(err)) != 0) {
      fprintf(stderr, "%s: %s\n", program, err);
      return 2;
    }
    process.mode = BENCH_LAUNCH_LOCAL;
    printBuildNotes(args);
    if (nDevices == 1 && process.layout.nRanks == 1)
      printf("# One GPU visible: running one rank, where an all-reduce is a copy; -np 2 --share-gpu runs two "
             "ranks on it\n");
    if (process.layout.shared) {
      printf("# %d ranks share %d GPU%s (--share-gpu): the numbers measure contention, not the links\n",
             process.layout.nRanks, nDevices, nDevices == 1 ? "" : "s");
      if (args->compareNccl && !process.compareSkipped && !benchNcclTakesSharing(&process.layout)) {
        printf("# --compare nccl: NCCL does not run two ranks of one host on one GPU (--hosts can make them two "
               "hosts); measuring fccl alone\n");
        process.compareSkipped = 1;
      }
    }
    char hostsText[64] = "";
    if (args->hosts > 0)
      snprintf(hostsText, sizeof(hostsText), ", posing as %d host%s (--hosts)", args->hosts,
               args->hosts == 1 ? "" : "s");
    snprintf(process.launchText, sizeof(process.launchText),
             "%d process%s forked here (%d thread%s x %d GPU%s each)%s", process.layout.nProcs,
             process.layout.nProcs == 1 ? "" : "es", process.layout.nThreads, process.layout.nThreads == 1 ? "" : "s",
             process.layout.nGpus, process.layout.nGpus == 1 ? "" : "s", hostsText);
    process.shm = benchShmCreate(process.layout.nProcs * process.layout.nThreads);
    if (!process.shm) {
      fprintf(stderr, "%s: cannot map the shared exchange: %s\n", program, strerror(errno));
      return 1;
    }
    /* -N 0: SIGINT and SIGTERM ask every rank to stop after its row (the shared exchange carries a signal the
     * launcher alone gets); the forked processes inherit the handlers. */
    if (args->runCycles == 0) benchStopOnSignals(process.shm);
    if (process.layout.nProcs == 1)
      code = processMain(0, NULL);
    else
      code = benchForkRun(process.layout.nProcs, processMain, process.shm, benchShmAbort, RANK_GRACE_SEC);
    benchShmDestroy(process.shm);
    return code;
  }
  /* Started by a launcher: this process is one of its ranks. */
  int useMpi = 0;
#if FCCL_HAVE_MPI
  useMpi = process.env.fromMpiLauncher;
#endif
  if (args->hosts > 0) {
    fprintf(stderr, "%s: --hosts poses forked processes as hosts; under %s give each process its own FCCL_HOSTID "
            "and NCCL_HOSTID instead\n", program, process.env.source);
    return 2;
  }
  if (args->nThreads != 1 || (!useMpi && args->nGpus != 1)) {
    fprintf(stderr, "%s: under %s each process is one rank: -t 1 -g 1%s\n", program, process.env.source,
            useMpi ? " (-g works with MPI)" : "");
    return 2;
  }
  toolCudaStatus_t cuda;
  toolCudaQuery(&cuda);
  const int nVisible = cuda.deviceCount;
  if (nVisible == 0) {
    char reason[320];
    snprintf(reason, sizeof(reason), "rank %d: %s", process.env.rank, cuda.noGpu);
    return toolReportNoGpu(program, reason);
  }
  process.layout.nProcs = process.env.size;
  process.layout.nThreads = 1;
  process.layout.nGpus = useMpi ? args->nGpus : 1;
  process.layout.nRanks = process.env.size * process.layout.nGpus;
  process.layout.nDevices = nVisible;
  process.layout.shared = process.env.localSize * process.layout.nGpus > nVisible;
  if (process.layout.shared && !args->shareGpu) {
    fprintf(stderr, "%s: %d local ranks but %d GPUs; --share-gpu lets ranks share\n", program,
            process.env.localSize * process.layout.nGpus, nVisible);
    return 2;
  }
  if (process.env.rank == 0) printBuildNotes(args);
  if (process.layout.shared && args->compareNccl && !process.compareSkipped) {
    if (process.env.rank == 0)
      printf("# --compare nccl: NCCL does not run two ranks on one GPU; measuring fccl alone\n");
    process.compareSkipped = 1;
  }
  snprintf(process.launchText, sizeof(process.launchText), "%s, %d processes%s", process.env.source,
           process.env.size, useMpi ? " (MPI)" : "");
#if FCCL_HAVE_MPI
  if (useMpi) {
    process.mode = BENCH_LAUNCH_MPI;
    if (args->runCycles == 0) benchStopOnSignals(NULL);
    MPI_Init(&argc, &argv);
    code = processMain(process.env.rank, NULL);
    MPI_Finalize();
    return code;
  }
#endif
  process.mode = BENCH_LAUNCH_ENV;
  if (args->runCycles == 0) benchStopOnSignals(NULL); /* the launcher signals every process itself */
  if (cudaSetDevice(process.env.localRank % nVisible) != cudaSuccess) {
    fprintf(stderr, "%s: rank %d: cudaSetDevice failed\n", program, process.env.rank);
    return 1;
  }
  return processMain(process.env.rank, NULL);
}
