/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Launching and timing: every local rank's operation per iteration (grouped where the engine needs it), CUDA
 * graphs for -G and the timed loop with CUDA events; each waits with agent_gpus.c's bounded benchSync.
 */
#include "runtime_internal.h"

#include <stdlib.h>

int benchLaunchAll(benchAgent_t* agent, int engine, benchLaunchFn_t launch, void* ctx, int firstIter, int count) {
  const benchEngineOps_t* ops = agent->engines[engine].ops;
  for (int iter = firstIter; iter < firstIter + count; iter++) {
    if (ops->groupStart && ops->groupStart(agent, engine) != 0) return -1;
    int status = 0;
    for (int gpu = 0; gpu < agent->nLocal && status == 0; gpu++) {
      status = benchUseDevice(agent, gpu);
      if (status == 0) status = launch(agent, engine, gpu, iter, ctx);
    }
    if ((ops->groupEnd && ops->groupEnd(agent, engine) != 0) || status != 0) return -1;
  }
  if (agent->nLocal > 1) BENCH_CHECK_CUDA(agent, cudaSetDevice(agent->devices[0]));
  return 0;
}

static void destroyGraphs(benchAgent_t* agent, cudaGraphExec_t* exec) {
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    if (exec[gpu]) cudaGraphExecDestroy(exec[gpu]);
    exec[gpu] = NULL;
  }
}

/* Captures count iterations per local rank into one graph each (thread-local capture: other threads of this
 * process keep launching freely). */
static int captureGraphs(benchAgent_t* agent, int engine, benchLaunchFn_t launch, void* ctx, int count,
                         cudaGraphExec_t* exec) {
  for (int gpu = 0; gpu < agent->nLocal; gpu++) exec[gpu] = NULL;
  int capturing = 0, status = 0;
  for (int gpu = 0; gpu < agent->nLocal && status == 0; gpu++) {
    status = benchUseDevice(agent, gpu);
    if (status == 0 && cudaStreamBeginCapture(agent->streams[gpu], cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      (void)cudaGetLastError();
      benchFail(agent, "cudaStreamBeginCapture failed on rank %d", agent->firstRank + gpu);
      status = -1;
    }
    if (status == 0) capturing++;
  }
  if (status == 0) status = benchLaunchAll(agent, engine, launch, ctx, 0, count);
  /* End every capture that began, even after a failure, so the streams stay usable; instantiate only when none
   * is left open (instantiating is not allowed while this thread still captures another stream). */
  cudaGraph_t graphs[BENCH_MAX_LOCAL] = {0};
  for (int gpu = 0; gpu < capturing; gpu++) {
    if (agent->nLocal > 1) cudaSetDevice(agent->devices[gpu]);
    cudaError_t ended = cudaStreamEndCapture(agent->streams[gpu], &graphs[gpu]);
    if (ended != cudaSuccess && status == 0) {
      benchFail(agent, "capturing %s into a CUDA graph failed on rank %d: %s", agent->engineNames[engine],
                agent->firstRank + gpu, cudaGetErrorString(ended));
      status = -1;
    }
  }
  for (int gpu = 0; gpu < capturing; gpu++) {
    if (status == 0) {
      if (agent->nLocal > 1) cudaSetDevice(agent->devices[gpu]);
      cudaError_t made = cudaGraphInstantiate(&exec[gpu], graphs[gpu], 0);
      if (made == cudaSuccess) made = cudaGraphUpload(exec[gpu], agent->streams[gpu]);
      if (made != cudaSuccess) {
        benchFail(agent, "instantiating the CUDA graph failed on rank %d: %s", agent->firstRank + gpu,
                  cudaGetErrorString(made));
        status = -1;
      }
    }
    if (graphs[gpu]) cudaGraphDestroy(graphs[gpu]);
  }
  (void)cudaGetLastError();
  if (agent->nLocal > 1) cudaSetDevice(agent->devices[0]);
  if (status != 0) destroyGraphs(agent, exec);
  return status;
}

static int launchGraphs(benchAgent_t* agent, cudaGraphExec_t* exec) {
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    if (benchUseDevice(agent, gpu) != 0) return -1;
    BENCH_CHECK_CUDA(agent, cudaGraphLaunch(exec[gpu], agent->streams[gpu]));
  }
  return 0;
}

int benchRunOnce(benchAgent_t* agent, int engine, benchLaunchFn_t launch, void* ctx, int count) {
  if (agent->args.graphLaunches > 0) {
    cudaGraphExec_t exec[BENCH_MAX_LOCAL];
    if (captureGraphs(agent, engine, launch, ctx, count, exec) != 0) return -1;
    int status = launchGraphs(agent, exec);
    if (status == 0) status = benchSync(agent, engine);
    destroyGraphs(agent, exec);
    return status;
  }
  if (benchLaunchAll(agent, engine, launch, ctx, 0, count) != 0) return -1;
  return benchSync(agent, engine);
}

static int recordEvents(benchAgent_t* agent, cudaEvent_t* events) {
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    if (benchUseDevice(agent, gpu) != 0) return -1;
    if (cudaEventRecord(events[gpu], agent->streams[gpu]) != cudaSuccess) {
      (void)cudaGetLastError();
      benchFail(agent, "cudaEventRecord failed");
      return -1;
    }
  }
  return 0;
}

/* -I: the event before iteration iter (iters: after the last) on every local stream. */
static int recordIterEvents(benchAgent_t* agent, int iter) {
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    if (benchUseDevice(agent, gpu) != 0) return -1;
    if (cudaEventRecord(agent->iterEvents[gpu][iter], agent->streams[gpu]) != cudaSuccess) {
      (void)cudaGetLastError();
      benchFail(agent, "cudaEventRecord failed (iteration %d)", iter);
      return -1;
    }
  }
  return 0;
}

/* The slowest local GPU's time between the start and stop events, once both are complete. */
static int slowestElapsed(benchAgent_t* agent, float* slowestMs) {
  *slowestMs = 0;
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, agent->start[gpu], agent->stop[gpu]) != cudaSuccess) {
      (void)cudaGetLastError();
      benchFail(agent, "cudaEventElapsedTime failed");
      return -1;
    }
    if (ms > *slowestMs) *slowestMs = ms;
  }
  return 0;
}

/* -I: the slowest local GPU's time of iteration iter, between its event and the next one. */
static int slowestIteration(benchAgent_t* agent, int iter, double* slowestUs) {
  *slowestUs = 0;
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, agent->iterEvents[gpu][iter], agent->iterEvents[gpu][iter + 1]) != cudaSuccess) {
      (void)cudaGetLastError();
      benchFail(agent, "cudaEventElapsedTime failed (iteration %d)", iter);
      return -1;
    }
    if (ms * 1000.0 > *slowestUs) *slowestUs = ms * 1000.0;
  }
  return 0;
}

/* -I: every agent's series to everyone (timing->agentIterUs), and each iteration's slowest agent (timing->iterUs). */
static int combineIterations(benchAgent_t* agent, const double* mine, benchTiming_t* timing) {
  const int iters = agent->args.iters;
  double* all = timing->agentIterUs;
  if (benchGatherDoubles(agent, mine, iters, all) != 0) return -1;
  for (int iter = 0; iter < iters; iter++) {
    double slowest = 0;
    for (int a = 0; a < agent->nAgents; a++)
      if (all[(size_t)a * iters + iter] > slowest) slowest = all[(size_t)a * iters + iter];
    timing->iterUs[iter] = slowest;
  }
  return 0;
}

/* -z 3: every iteration timed on its own (events around it, then the wait), the barrier between iterations left out;
 * *gpuMs and *cpuSec are the sums over the iterations, mineUs (-I, or NULL) gets each iteration's slowest GPU. */
static int timeBetweenBarriers(benchAgent_t* agent, int engine, benchLaunchFn_t launch, void* ctx, double* gpuMs,
                               double* cpuSec, double* mineUs) {
  *gpuMs = 0;
  *cpuSec = 0;
  for (int iter = 0; iter < agent->args.iters; iter++) {
    if (benchBarrier(agent) != 0) return -1;
    double begin = benchNowSec();
    if (recordEvents(agent, agent->start) != 0) return -1;
    if (benchLaunchAll(agent, engine, launch, ctx, iter, 1) != 0) return -1;
    if (recordEvents(agent, agent->stop) != 0) return -1;
    if (benchSync(agent, engine) != 0) return -1;
    *cpuSec += benchNowSec() - begin;
    float ms = 0;
    if (slowestElapsed(agent, &ms) != 0) return -1;
    *gpuMs += ms;
    if (mineUs) mineUs[iter] = ms * 1000.0;
  }
  if (agent->nLocal > 1) BENCH_CHECK_CUDA(agent, cudaSetDevice(agent->devices[0]));
  return benchBarrier(agent);
}

int benchTimeLoop(benchAgent_t* agent, int engine, benchLaunchFn_t launch, void* ctx, benchTiming_t* timing) {
  const int iters = agent->args.iters;
  const int launches = agent->args.graphLaunches;
  const int blocking = agent->args.blocking;
  /* -I is eager only (the parser turns it off under -G, as nccl-tests does). */
  const int perIter = agent->args.perIterTiming && launches == 0 && timing->iterUs && timing->agentIterUs;
  double* mineUs = NULL;
  if (perIter && !(mineUs = (double*)calloc((size_t)iters, sizeof(double)))) {
    benchFail(agent, "out of memory for %d iteration times", iters);
    return -1;
  }
  double gpuMs = 0, cpu = 0;
  int status = 0;
  if (blocking == BENCH_BLOCKING_EXCLUDE_BARRIER) {
    status = timeBetweenBarriers(agent, engine, launch, ctx, &gpuMs, &cpu, mineUs);
  } else {
    cudaGraphExec_t exec[BENCH_MAX_LOCAL] = {0};
    if (launches > 0 && captureGraphs(agent, engine, launch, ctx, iters, exec) != 0) {
      free(mineUs);
      return -1;
    }
    status = benchBarrier(agent);
    if (status == 0) status = recordEvents(agent, agent->start);
    double begin = benchNowSec();
    if (status == 0) {
      if (launches > 0) {
        for (int l = 0; l < launches && status == 0; l++) status = launchGraphs(agent, exec);
      } else if (blocking != BENCH_BLOCKING_OFF || perIter) {
        /* -z 1 and 2: wait after every operation (and barrier with -z 1), inside the timed span; -I: an event before
         * every iteration, and one after the last. */
        for (int iter = 0; iter < iters && status == 0; iter++) {
          if (perIter) status = recordIterEvents(agent, iter);
          if (status == 0) status = benchLaunchAll(agent, engine, launch, ctx, iter, 1);
          if (status == 0 && blocking != BENCH_BLOCKING_OFF) status = benchSync(agent, engine);
          if (status == 0 && blocking == BENCH_BLOCKING_BARRIER) status = benchBarrier(agent);
        }
        if (status == 0 && perIter) status = recordIterEvents(agent, iters);
      } else {
        status = benchLaunchAll(agent, engine, launch, ctx, 0, iters);
      }
    }
    cpu = benchNowSec() - begin;
    if (status == 0) status = recordEvents(agent, agent->stop);
    if (status == 0) status = benchSync(agent, engine);
    float slowestMs = 0;
    if (status == 0) status = slowestElapsed(agent, &slowestMs);
    gpuMs = slowestMs;
    for (int iter = 0; iter < iters && status == 0 && perIter; iter++)
      status = slowestIteration(agent, iter, &mineUs[iter]);
    if (agent->nLocal > 1) cudaSetDevice(agent->devices[0]);
    destroyGraphs(agent, exec);
  }
  if (status == 0 && perIter) status = combineIterations(agent, mineUs, timing);
  free(mineUs);
  if (status != 0) return -1;
  double ops = (double)iters * (launches > 0 ? launches : 1);
  double values[2] = {gpuMs * 1000.0 / ops, cpu * 1.0e6 / ops};
  static const int how[4] = {BENCH_REDUCE_FIRST, BENCH_REDUCE_AVG, BENCH_REDUCE_MIN, BENCH_REDUCE_MAX};
  if (benchReduce(agent, values, 2, how[agent->args.average]) != 0) return -1;
  timing->timeUs = values[0];
  timing->cpuUs = values[1];
  return 0;
}
