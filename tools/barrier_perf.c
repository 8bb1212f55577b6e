/* SPDX-License-Identifier: Apache-2.0 */
/*
 * barrier_perf: the latency of fcclBarrier, launched eagerly and (with -G) replayed from a CUDA graph, beside NCCL's
 * usual stand-in for a barrier (an all-reduce of one float) with --compare nccl. Same flags and launch as
 * all_reduce_perf (-n, -w, -N, -z, -G, -C, -S, -M, -T, -np, -J, --csv, ...); sizes do not apply.
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
    double cpuUs = 0;
    status = benchRunOnce(agent, engine, launchBarrier, ctx, 1);
    if (status == 0) status = benchTimeLoop(agent, engine, launchBarrier, ctx, &result->timeUs[engine], &cpuUs);
    if (status == 0 && agent->args.cputime) result->timeUs[engine] = cpuUs;
  }
  agent->args.graphLaunches = saved;
  result->mode = launches > 0 ? "graph" : "eager";
  result->launches = launches;
  result->timestamp = (long long)time(NULL);
  return status;
}

static void printResults(benchAgent_t* agent, const barrierResult_t* results, int nResults) {
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
  for (int r = 0; r < nResults; r++) {
    char time[32];
    benchFormatFloat(results[r].timeUs[0], 9, time, sizeof(time));
    printf("  %7s  %8d  %8d  %9s", results[r].mode, agent->args.iters,
           results[r].launches > 0 ? results[r].launches : 1, time);
    if (agent->nEngines > 1) {
      char other[32], ratio[32];
      benchFormatFloat(results[r].timeUs[1], 9, other, sizeof(other));
      benchFormatFloat(results[r].timeUs[0] > 0 ? results[r].timeUs[1] / results[r].timeUs[0] : 0, 7, ratio,
                       sizeof(ratio));
      printf("  %9s  %7s", other, ratio);
    }
    if (stamps) {
      char when[32];
      benchFormatTime(results[r].timestamp, when, sizeof(when));
      printf("%21s", when);
    }
    printf("\n");
  }
  if (agent->nEngines > 1)
    printf("# %s's barrier stand-in: an all-reduce of one float; speedup = %s time / %s time\n",
           agent->engineNames[1], agent->engineNames[1], agent->engineNames[0]);
  printf("#\n# Collective test concluded: barrier_perf\n");
}

static int writeCsv(benchAgent_t* agent, const barrierResult_t* results, int nResults) {
  FILE* file = benchOpenOutput(agent, agent->args.csvPath);
  if (!file) return -1;
  benchCsvHeader(file);
  for (int r = 0; r < nResults; r++)
    for (int engine = 0; engine < agent->nEngines; engine++)
      fprintf(file, "barrier_perf,%s,none,%d,%d,0,0,none,none,none,%.3f,0,0,-1\n", agent->engineNames[engine],
              results[r].launches, agent->nranks, results[r].timeUs[engine]);
  return benchCloseOutput(agent, file, agent->args.csvPath);
}

static int writeJson(benchAgent_t* agent, const barrierResult_t* results, int nResults) {
  toolJson_t json;
  FILE* file = benchJsonStart(agent, &json);
  if (!file) return -1;
  for (int r = 0; r < nResults; r++) {
    toolJsonBeginObject(&json, NULL);
    toolJsonString(&json, "mode", results[r].mode);
    toolJsonInt(&json, "iterations", agent->args.iters);
    toolJsonInt(&json, "graph_launches", results[r].launches);
    toolJsonInt(&json, "cycle", results[r].cycle);
    for (int engine = 0; engine < agent->nEngines; engine++) {
      toolJsonBeginObject(&json, agent->engineNames[engine]);
      toolJsonDouble(&json, "time", results[r].timeUs[engine]);
      toolJsonEnd(&json);
    }
    if (agent->nEngines > 1)
      toolJsonDouble(&json, "speedup", results[r].timeUs[0] > 0 ? results[r].timeUs[1] / results[r].timeUs[0] : 0);
    toolJsonEnd(&json);
  }
  char endTime[32];
  benchNowText(endTime, sizeof(endTime));
  benchJsonEnd(&json, NULL, NULL, endTime);
  return benchCloseOutput(agent, file, agent->args.jsonPath);
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
  /* Eager, then graph with -G; -N times. */
  const int perCycle = agent->args.graphLaunches > 0 ? 2 : 1;
  barrierResult_t* results = (barrierResult_t*)calloc((size_t)perCycle * (size_t)agent->args.runCycles,
                                                      sizeof(barrierResult_t));
  if (!results && status == 0) {
    benchFail(agent, "out of memory");
    status = -1;
  }
  int nResults = 0;
  for (int cycle = 0; cycle < agent->args.runCycles && status == 0; cycle++) {
    results[nResults].cycle = cycle;
    status = measureMode(agent, &ctx, 0, &results[nResults++]);
    if (status == 0 && perCycle > 1) {
      results[nResults].cycle = cycle;
      status = measureMode(agent, &ctx, agent->args.graphLaunches, &results[nResults++]);
    }
  }
  if (status == 0 && agent->output) {
    printResults(agent, results, nResults);
    if (agent->args.csvPath) status = writeCsv(agent, results, nResults);
    if (status == 0 && agent->args.jsonPath) status = writeJson(agent, results, nResults);
  }
  free(results);
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    if (!ctx.scratch[gpu]) continue;
    cudaSetDevice(agent->devices[gpu]);
    cudaFree(ctx.scratch[gpu]);
  }
  cudaSetDevice(agent->devices[0]);
  return status;
}

int main(int argc, char** argv) {
  static const benchTest_t test = {"barrier_perf", runBarrier, NULL};
  return benchMain(argc, argv, &test);
}
