/* SPDX-License-Identifier: Apache-2.0 */
/*
 * barrier_perf: the latency of fcclBarrier, launched eagerly and (with -G) replayed from a CUDA graph, beside NCCL's
 * usual stand-in for a barrier (an all-reduce of one float) with --compare nccl. The launch and the flags of
 * all_reduce_perf that apply to it (-t, -g, -n, -w, -N, -z, -G, -a, -T, -C, -S, -M, -J, -np, --csv, ...); the others
 * (sizes, types, ops, root, checks, buffers, -I) are refused.
 *
 *   barrier_perf -n 1000 -w 100 -G 10 --compare nccl
 */
#include "bench/runtime.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  float* scratch[BENCH_MAX_LOCAL]; /* one float per rank for NCCL's one-element all-reduce */
} barrierCtx_t;

static int launchBarrier(benchAgent_t* agent, int engine, int gpu, int iter, void* arg) {
  (void)iter;
  barrierCtx_t* ctx = (barrierCtx_t*)arg;
  return agent->engines[engine].ops->barrier(agent, engine, gpu, ctx->scratch[gpu]);
}

typedef struct {
  const char* mode;
  int launches;
  int cycle;           /* -N */
  long long timestamp; /* -S */
  double timeUs[BENCH_MAX_ENGINES];
} barrierResult_t;

static int measureMode(benchAgent_t* agent, barrierCtx_t* ctx, int launches, barrierResult_t* result) {
  int saved = agent->args.graphLaunches;
  agent->args.graphLaunches = launches;
  int status = 0;
  for (int engine = 0; engine < agent->nEngines && status == 0; engine++) {
    benchTiming_t timing;
    memset(&timing, 0, sizeof(timing));
    status = benchRunOnce(agent, engine, launchBarrier, ctx, 1);
    if (status == 0) status = benchTimeLoop(agent, engine, launchBarrier, ctx, &timing);
    result->timeUs[engine] = agent->args.cputime ? timing.cpuUs : timing.timeUs;
  }
  agent->args.graphLaunches = saved;
  result->mode = launches > 0 ? "graph" : "eager";
  result->launches = launches;
  result->timestamp = (long long)time(NULL);
  return status;
}

static void printHeader(benchAgent_t* agent) {
  char names[BENCH_MAX_ENGINES][16];
  for (int engine = 0; engine < agent->nEngines; engine++)
    snprintf(names[engine], sizeof(names[engine]), "%s", agent->engineNames[engine]);
  const int stamps = agent->args.timestamps;
  printf("#\n# %7s  %8s  %8s  %9s", "mode", "iters", "launches", names[0]);
  if (agent->nEngines > 1) printf("  %9s  %7s", names[1], "speedup");
  if (stamps) printf(" %19s", "timestamp");
  printf("\n# %7s  %8s  %8s  %9s", "", "", "", "(us)");
  if (agent->nEngines > 1) printf("  %9s  %7s", "(us)", "(x)");
  if (stamps) printf(" %19s", BENCH_TIME_FORMAT);
  printf("\n");
}

static void printResult(benchAgent_t* agent, const barrierResult_t* result) {
  char time[32];
  benchFormatFloat(result->timeUs[0], 9, time, sizeof(time));
  printf("  %7s  %8d  %8d  %9s", result->mode, agent->args.iters, result->launches > 0 ? result->launches : 1, time);
  if (agent->nEngines > 1) {
    char other[32], ratio[32];
    benchFormatFloat(result->timeUs[1], 9, other, sizeof(other));
    benchFormatFloat(result->timeUs[0] > 0 ? result->timeUs[1] / result->timeUs[0] : 0, 7, ratio, sizeof(ratio));
    printf("  %9s  %7s", other, ratio);
  }
  if (agent->args.timestamps) {
    char when[32];
    benchFormatTime(result->timestamp, when, sizeof(when));
    printf("%21s", when);
  }
  printf("\n");
}

static void printFooter(benchAgent_t* agent) {
  if (agent->nEngines > 1)
    printf("# %s's barrier stand-in: an all-reduce of one float; speedup = %s time / %s time\n",
           agent->engineNames[1], agent->engineNames[1], agent->engineNames[0]);
  printf("#\n# Collective test concluded: barrier_perf\n");
}

/* One result in -J and --csv, as it comes. */
static void writeResult(benchAgent_t* agent, benchOutputs_t* outputs, const barrierResult_t* result) {
  for (int engine = 0; outputs->csv && engine < agent->nEngines; engine++)
    fprintf(outputs->csv, "barrier_perf,%s,none,%d,%d,0,0,none,none,none,%.3f,0,0,-1,,,,\n", agent->engineNames[engine],
            result->launches, agent->nranks, result->timeUs[engine]);
  if (outputs->json) {
    toolJson_t* json = &outputs->writer;
    toolJsonBeginObject(json, NULL);
    toolJsonString(json, "mode", result->mode);
    toolJsonInt(json, "iterations", agent->args.iters);
    toolJsonInt(json, "graph_launches", result->launches);
    toolJsonInt(json, "cycle", result->cycle);
    for (int engine = 0; engine < agent->nEngines; engine++) {
      toolJsonBeginObject(json, agent->engineNames[engine]);
      toolJsonDouble(json, "time", result->timeUs[engine]);
      toolJsonEnd(json);
    }
    if (agent->nEngines > 1)
      toolJsonDouble(json, "speedup", result->timeUs[0] > 0 ? result->timeUs[1] / result->timeUs[0] : 0);
    toolJsonEnd(json);
  }
  benchOutputsFlush(outputs);
}

/* Eager, then graph with -G; -N times (-N 0: until a signal, every rank stopping after the same line). */
static int measureCycles(benchAgent_t* agent, barrierCtx_t* ctx, benchOutputs_t* outputs) {
  const int forever = agent->args.runCycles == 0;
  int status = 0, lines = 0, cycle = 0;
  for (; (forever || cycle < agent->args.runCycles) && status == 0; cycle++) {
    for (int graph = 0; graph < (agent->args.graphLaunches > 0 ? 2 : 1) && status == 0; graph++) {
      barrierResult_t result;
      memset(&result, 0, sizeof(result));
      result.cycle = cycle;
      status = measureMode(agent, ctx, graph ? agent->args.graphLaunches : 0, &result);
      if (status != 0) break;
      lines++;
      if (agent->output) {
        printResult(agent, &result);
        writeResult(agent, outputs, &result);
      }
    }
    if (status == 0 && forever) {
      const int agreed = benchStopAgreed(agent);
      if (agreed < 0) status = -1;
      if (agreed > 0) {
        if (agent->output) printf("# Stopped on a signal (-N 0) after %d lines, in cycle %d\n", lines, cycle);
        break;
      }
    }
  }
  return status;
}

static int runBarrier(benchAgent_t* agent) {
  barrierCtx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  int status = 0;
  for (int gpu = 0; gpu < agent->nLocal && status == 0; gpu++) {
    if (cudaSetDevice(agent->devices[gpu]) != cudaSuccess ||
        cudaMalloc((void**)&ctx.scratch[gpu], sizeof(float)) != cudaSuccess ||
        cudaMemset(ctx.scratch[gpu], 0, sizeof(float)) != cudaSuccess) {
      (void)cudaGetLastError();
      benchFail(agent, "cannot allocate the scratch float");
      status = -1;
    }
  }
  cudaSetDevice(agent->devices[0]);
  for (int engine = 0; engine < agent->nEngines && status == 0 && agent->args.warmupIters > 0; engine++) {
    status = benchLaunchAll(agent, engine, launchBarrier, &ctx, 0, agent->args.warmupIters);
    if (status == 0) status = benchSync(agent, engine);
  }
  benchOutputs_t outputs;
  memset(&outputs, 0, sizeof(outputs));
  if (status == 0) status = benchOutputsOpen(agent, &outputs);
  if (status == 0) {
    if (agent->output) printHeader(agent);
    status = measureCycles(agent, &ctx, &outputs);
    if (status == 0 && agent->output) printFooter(agent);
    if (benchOutputsClose(agent, &outputs, NULL, NULL, status == 0 ? NULL : agent->error) != 0) status = -1;
  }
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    if (!ctx.scratch[gpu]) continue;
    cudaSetDevice(agent->devices[gpu]);
    cudaFree(ctx.scratch[gpu]);
  }
  cudaSetDevice(agent->devices[0]);
  return status;
}

int main(int argc, char** argv) {
  /* Not one of nccl-tests' programs: it takes no sizes, types, ops, root or per-iteration statistics, and refuses
   * them (its --help lists what it takes). */
  static const benchTest_t test = {"barrier_perf", runBarrier, NULL, 0};
  return benchMain(argc, argv, &test);
}
