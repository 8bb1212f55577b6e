/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every part of an agent's run uses on its GPUs: a failure reported once (benchFail), work on each GPU
 * (benchUseDevice, benchForEachGpu), the bounded wait for their streams that watches the engine's asynchronous
 * errors (benchSync, with the clock and the -T bound), and an engine's communicators aborted (benchAbortEngine).
 * Below agent.c, timing.c, exchange.c and the rest, which all call it; it calls only the exchange's abort (oob.c).
 */
#include "runtime_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#define DEFAULT_TIMEOUT_SEC 300

static pthread_mutex_t errorLock = PTHREAD_MUTEX_INITIALIZER;

void benchFail(benchAgent_t* agent, const char* fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&errorLock);
  if (agent->error[0] == '\0') snprintf(agent->error, sizeof(agent->error), "%s", text);
  fprintf(stderr, "%s: rank %d: %s\n", agent->test ? agent->test->program : "bench", agent->firstRank, text);
  fflush(stderr);
  pthread_mutex_unlock(&errorLock);
}

int benchUseDevice(benchAgent_t* agent, int gpu) {
  if (agent->nLocal > 1) BENCH_CHECK_CUDA(agent, cudaSetDevice(agent->devices[gpu]));
  return 0;
}

/* ---- per-GPU work in parallel (collective, blocking calls when a thread drives several GPUs) -------------------- */

typedef struct {
  benchAgent_t* agent;
  int gpu;
  benchPerGpuFn_t fn;
  void* ctx;
  int status;
} perGpuJob_t;

static void* perGpuThread(void* arg) {
  perGpuJob_t* job = (perGpuJob_t*)arg;
  if (cudaSetDevice(job->agent->devices[job->gpu]) != cudaSuccess) {
    (void)cudaGetLastError();
    benchFail(job->agent, "cudaSetDevice(%d) failed", job->agent->devices[job->gpu]);
    job->status = -1;
    return NULL;
  }
  job->status = job->fn(job->agent, job->gpu, job->ctx);
  return NULL;
}

int benchForEachGpu(benchAgent_t* agent, benchPerGpuFn_t fn, void* ctx) {
  if (agent->nLocal == 1) return fn(agent, 0, ctx);
  perGpuJob_t jobs[BENCH_MAX_LOCAL];
  pthread_t threads[BENCH_MAX_LOCAL];
  int started = 0, status = 0;
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    jobs[gpu] = (perGpuJob_t){agent, gpu, fn, ctx, 0};
    if (pthread_create(&threads[gpu], NULL, perGpuThread, &jobs[gpu]) != 0) {
      benchFail(agent, "pthread_create failed");
      status = -1;
      break;
    }
    started++;
  }
  for (int gpu = 0; gpu < started; gpu++) {
    pthread_join(threads[gpu], NULL);
    if (jobs[gpu].status != 0) status = -1;
  }
  if (cudaSetDevice(agent->devices[0]) != cudaSuccess) status = -1;
  return status;
}

/* ---- the bounded wait ------------------------------------------------------------------------------------------- */

double benchNowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int benchTimeoutSec(const benchAgent_t* agent) {
  return agent->args.timeoutSec > 0 ? agent->args.timeoutSec : DEFAULT_TIMEOUT_SEC;
}

int benchSync(benchAgent_t* agent, int engine) {
  double deadline = benchNowSec() + benchTimeoutSec(agent);
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    for (unsigned long polls = 0;; polls++) {
      cudaError_t status = cudaStreamQuery(agent->streams[gpu]);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady) {
        (void)cudaGetLastError();
        benchFail(agent, "waiting for rank %d's stream: %s (%s)", agent->firstRank + gpu, cudaGetErrorName(status),
                  cudaGetErrorString(status));
        return -1;
      }
      if ((polls & 255) == 255) {
        char text[600];
        if (agent->engines[engine].ops->asyncError(agent, engine, gpu, text, sizeof(text))) {
          benchFail(agent, "%s reported an error on rank %d: %s", agent->engineNames[engine], agent->firstRank + gpu,
                    text);
          benchAbortEngine(agent, engine);
          return -1;
        }
        if (benchNowSec() > deadline) {
          benchFail(agent, "%s did not complete on rank %d within %d s (-T changes the bound); aborting",
                    agent->engineNames[engine], agent->firstRank + gpu, benchTimeoutSec(agent));
          benchAbortEngine(agent, engine);
          return -1;
        }
      }
      sched_yield();
    }
  }
  return 0;
}

/* ---- communicators ---------------------------------------------------------------------------------------------- */

/* Aborts this agent's communicators of engine after a failure or a timeout; they are gone afterwards. */
void benchAbortEngine(benchAgent_t* agent, int engine) {
  for (int gpu = 0; gpu < agent->nLocal; gpu++) agent->engines[engine].ops->abort(agent, engine, gpu);
  benchOobAbort(agent->oob);
}
