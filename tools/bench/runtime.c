/*
 * The benchmark runtime: launch, communicators, buffers, timing and checking for fccl and NCCL side by side.
 *
 * Ranks are grouped into agents: a thread that drives -g GPUs (one rank each). Agents of all processes talk through
 * an out-of-band channel (bench.h): shared memory for threads and forked processes, MPI under mpirun in an MPI
 * build, and the fccl communicator itself when torchrun-style variables started the processes. Rank 0's agent
 * prints; every agent takes part in every exchange, so all ranks agree on sizes, times and error counts.
 */
#include "runtime_internal.h"

#include "fccl_build_config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if FCCL_HAVE_MPI
#include <mpi.h>
#endif

#define DEFAULT_TIMEOUT_SEC 300
#define PROBE_TIMEOUT_SEC 60 /* counting the GPUs in a child process (CUDA initialisation included) */
#define RANK_GRACE_SEC 10    /* after a rank process fails, the others have this long before they are killed */
#define STAGING_BYTES ((size_t)64 << 20)
#define DEVICE_LINE 256

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
  char (*deviceLines)[DEVICE_LINE]; /* gathered on the output agent */
  int nDeviceLines;
} benchProcess_t;

static benchProcess_t process;
static pthread_mutex_t errorLock = PTHREAD_MUTEX_INITIALIZER;

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

static int timeoutSec(const benchAgent_t* agent) {
  return agent->args.timeoutSec > 0 ? agent->args.timeoutSec : DEFAULT_TIMEOUT_SEC;
}

/* Makes local rank gpu's device current when this thread drives several. */
static int useDevice(benchAgent_t* agent, int gpu) {
  if (agent->nLocal > 1) BENCH_CHECK_CUDA(agent, cudaSetDevice(agent->devices[gpu]));
  return 0;
}

/* ---- the exchange --------------------------------------------------------------------------------------------- */

int benchReduce(benchAgent_t* agent, double* values, int n, int how) {
  if (benchOobReduce(agent->oob, values, n, how) != 0) {
    benchFail(agent, "exchange with the other ranks failed: %s", agent->oob->error);
    return -1;
  }
  return 0;
}

int benchBarrier(benchAgent_t* agent) {
  if (benchOobBarrier(agent->oob) != 0) {
    benchFail(agent, "exchange with the other ranks failed: %s", agent->oob->error);
    return -1;
  }
  return 0;
}

static int exchangeBcast(benchAgent_t* agent, void* data, size_t bytes) {
  if (benchOobBcast(agent->oob, data, bytes) != 0) {
    benchFail(agent, "exchange with the other ranks failed: %s", agent->oob->error);
    return -1;
  }
  return 0;
}

#if FCCL_HAVE_MPI
static int mpiAllgather(benchOob_t* oob, const void* mine, size_t bytes, void* all) {
  char dummy = 0;
  int status = MPI_Allgather(bytes ? mine : &dummy, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  if (status != MPI_SUCCESS) {
    snprintf(oob->error, sizeof(oob->error), "MPI_Allgather failed (%d)", status);
    return -1;
  }
  return 0;
}

static void mpiAbort(benchOob_t* oob) {
  (void)oob;
  MPI_Abort(MPI_COMM_WORLD, 1);
}
#endif

/* torchrun-style launch has no channel of its own before the communicator exists; after that, an all-gather is an
 * all-reduce (uint8 sum) on the first engine's communicator of a zeroed buffer in which each rank filled its own
 * slot. */
typedef struct {
  benchAgent_t* agent;
  unsigned char* device;
  unsigned char* host;
} commOob_t;

static int commAllgather(benchOob_t* oob, const void* mine, size_t bytes, void* all) {
  commOob_t* state = (commOob_t*)oob->state;
  benchAgent_t* agent = state->agent;
  const benchEngineOps_t* ops = agent->engines[0].ops;
  size_t total = (size_t)oob->nAgents * BENCH_OOB_SLOT;
  memset(state->host, 0, total);
  if (bytes) memcpy(state->host + (size_t)oob->agent * BENCH_OOB_SLOT, mine, bytes);
  cudaStream_t stream = agent->streams[0];
  cudaError_t copied = cudaMemcpyAsync(state->device, state->host, total, cudaMemcpyHostToDevice, stream);
  if (copied == cudaSuccess &&
      ops->allReduce(agent, 0, 0, state->device, state->device, total, benchUint8, benchSum, 0) != 0) {
    snprintf(oob->error, sizeof(oob->error), "exchange through the communicator failed");
    return -1;
  }
  if (copied == cudaSuccess)
    copied = cudaMemcpyAsync(state->host, state->device, total, cudaMemcpyDeviceToHost, stream);
  if (copied != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(oob->error, sizeof(oob->error), "exchange through the communicator failed: %s",
             cudaGetErrorString(copied));
    return -1;
  }
  if (benchSync(agent, 0) != 0) {
    snprintf(oob->error, sizeof(oob->error), "exchange through the communicator did not complete");
    return -1;
  }
  for (int a = 0; a < oob->nAgents; a++)
    if (bytes) memcpy((unsigned char*)all + (size_t)a * bytes, state->host + (size_t)a * BENCH_OOB_SLOT, bytes);
  return 0;
}

/* ---- per-GPU work in parallel (collective, blocking calls when a thread drives several GPUs) ------------------ */

typedef int (*perGpuFn_t)(benchAgent_t* agent, int gpu, void* ctx);
typedef struct {
  benchAgent_t* agent;
  int gpu;
  perGpuFn_t fn;
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

static int forEachGpu(benchAgent_t* agent, perGpuFn_t fn, void* ctx) {
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

/* ---- engines ---------------------------------------------------------------------------------------------------- */

/* Aborts this agent's communicators of engine after a failure or a timeout; they are gone afterwards. */
static void abortEngine(benchAgent_t* agent, int engine) {
  for (int gpu = 0; gpu < agent->nLocal; gpu++) agent->engines[engine].ops->abort(agent, engine, gpu);
  benchOobAbort(agent->oob);
}

int benchSync(benchAgent_t* agent, int engine) {
  double deadline = nowSec() + timeoutSec(agent);
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
          benchFail(agent, "%s reported an error on rank %d: %s", agent->engineNames[engine],
                    agent->firstRank + gpu, text);
          abortEngine(agent, engine);
          return -1;
        }
        if (nowSec() > deadline) {
          benchFail(agent, "%s did not complete on rank %d within %d s (-T changes the bound); aborting",
                    agent->engineNames[engine], agent->firstRank + gpu, timeoutSec(agent));
          abortEngine(agent, engine);
          return -1;
        }
      }
      sched_yield();
    }
  }
  return 0;
}

/* ---- launching, timing ------------------------------------------------------------------------------------------ */

int benchLaunchAll(benchAgent_t* agent, int engine, benchLaunchFn_t launch, void* ctx, int firstIter, int count) {
  const benchEngineOps_t* ops = agent->engines[engine].ops;
  for (int iter = firstIter; iter < firstIter + count; iter++) {
    if (ops->groupStart && ops->groupStart(agent, engine) != 0) return -1;
    int status = 0;
    for (int gpu = 0; gpu < agent->nLocal && status == 0; gpu++) {
      status = useDevice(agent, gpu);
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
    status = useDevice(agent, gpu);
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
    if (useDevice(agent, gpu) != 0) return -1;
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

int benchTimeLoop(benchAgent_t* agent, int engine, benchLaunchFn_t launch, void* ctx, double* timeUs,
                  double* cpuUs) {
  const int iters = agent->args.iters;
  const int launches = agent->args.graphLaunches;
  cudaGraphExec_t exec[BENCH_MAX_LOCAL] = {0};
  if (launches > 0 && captureGraphs(agent, engine, launch, ctx, iters, exec) != 0) return -1;
  int status = benchBarrier(agent);
  for (int gpu = 0; gpu < agent->nLocal && status == 0; gpu++) {
    status = useDevice(agent, gpu);
    if (status == 0 && cudaEventRecord(agent->start[gpu], agent->streams[gpu]) != cudaSuccess) {
      benchFail(agent, "cudaEventRecord failed");
      status = -1;
    }
  }
  double begin = nowSec();
  if (status == 0) {
    if (launches > 0) {
      for (int l = 0; l < launches && status == 0; l++) status = launchGraphs(agent, exec);
    } else if (agent->args.blocking) {
      for (int iter = 0; iter < iters && status == 0; iter++) {
        status = benchLaunchAll(agent, engine, launch, ctx, iter, 1);
        if (status == 0) status = benchSync(agent, engine);
        if (status == 0) status = benchBarrier(agent);
      }
    } else {
      status = benchLaunchAll(agent, engine, launch, ctx, 0, iters);
    }
  }
  double cpu = nowSec() - begin;
  for (int gpu = 0; gpu < agent->nLocal && status == 0; gpu++) {
    status = useDevice(agent, gpu);
    if (status == 0 && cudaEventRecord(agent->stop[gpu], agent->streams[gpu]) != cudaSuccess) {
      benchFail(agent, "cudaEventRecord failed");
      status = -1;
    }
  }
  if (status == 0) status = benchSync(agent, engine);
  float slowestMs = 0;
  for (int gpu = 0; gpu < agent->nLocal && status == 0; gpu++) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, agent->start[gpu], agent->stop[gpu]) != cudaSuccess) {
      (void)cudaGetLastError();
      benchFail(agent, "cudaEventElapsedTime failed");
      status = -1;
    }
    if (ms > slowestMs) slowestMs = ms;
  }
  if (agent->nLocal > 1) cudaSetDevice(agent->devices[0]);
  destroyGraphs(agent, exec);
  if (status != 0) return -1;
  double ops = (double)iters * (launches > 0 ? launches : 1);
  double values[2] = {(double)slowestMs * 1000.0 / ops, cpu * 1.0e6 / ops};
  static const int how[4] = {BENCH_REDUCE_FIRST, BENCH_REDUCE_AVG, BENCH_REDUCE_MIN, BENCH_REDUCE_MAX};
  if (benchReduce(agent, values, 2, how[agent->args.average]) != 0) return -1;
  *timeUs = values[0];
  *cpuUs = values[1];
  return 0;
}

/* ---- data ----------------------------------------------------------------------------------------------------- */

int benchUpload(benchAgent_t* agent, int gpu, void* dst, size_t count, int type, int op, uint64_t seed) {
  size_t size = benchTypeSize(type);
  size_t chunk = agent->stagingBytes / size;
  if (useDevice(agent, gpu) != 0) return -1;
  for (size_t first = 0; first < count; first += chunk) {
    size_t n = count - first < chunk ? count - first : chunk;
    benchFillInput(agent->staging, n, first, type, op, agent->firstRank + gpu, agent->nranks, seed);
    BENCH_CHECK_CUDA(agent, cudaMemcpyAsync((char*)dst + first * size, agent->staging, n * size,
                                            cudaMemcpyHostToDevice, agent->streams[gpu]));
    BENCH_CHECK_CUDA(agent, cudaStreamSynchronize(agent->streams[gpu]));
  }
  return 0;
}

int benchCheck(benchAgent_t* agent, int gpu, const void* src, size_t count, int type, int op, uint64_t seed,
               int64_t* wrong) {
  benchChecker_t checker;
  if (benchCheckerInit(&checker, type, op, agent->nranks, seed) != 0) {
    benchFail(agent, "out of host memory for the check");
    return -1;
  }
  size_t size = benchTypeSize(type);
  size_t chunk = agent->stagingBytes / size;
  int64_t total = 0;
  int status = useDevice(agent, gpu);
  for (size_t first = 0; first < count && status == 0; first += chunk) {
    size_t n = count - first < chunk ? count - first : chunk;
    cudaError_t copied = cudaMemcpyAsync(agent->staging, (const char*)src + first * size, n * size,
                                         cudaMemcpyDeviceToHost, agent->streams[gpu]);
    if (copied == cudaSuccess) copied = cudaStreamSynchronize(agent->streams[gpu]);
    if (copied != cudaSuccess) {
      (void)cudaGetLastError();
      benchFail(agent, "reading back rank %d's result failed: %s", agent->firstRank + gpu,
                cudaGetErrorString(copied));
      status = -1;
      break;
    }
    total += benchCheckerCount(&checker, agent->staging, n, first);
  }
  benchCheckerFree(&checker);
  *wrong = total;
  return status;
}

int benchPoison(benchAgent_t* agent, int gpu, void* dst, size_t bytes) {
  if (useDevice(agent, gpu) != 0) return -1;
  BENCH_CHECK_CUDA(agent, cudaMemsetAsync(dst, BENCH_POISON_BYTE, bytes, agent->streams[gpu]));
  return 0;
}

int benchCorrupt(benchAgent_t* agent, int gpu, void* ptr, size_t index, int type) {
  unsigned char byte = 0;
  char* where = (char*)ptr + (index + 1) * benchTypeSize(type) - 1; /* the top byte (little-endian) */
  if (useDevice(agent, gpu) != 0) return -1;
  BENCH_CHECK_CUDA(agent, cudaMemcpy(&byte, where, 1, cudaMemcpyDeviceToHost));
  byte ^= 0x40;
  BENCH_CHECK_CUDA(agent, cudaMemcpy(where, &byte, 1, cudaMemcpyHostToDevice));
  return 0;
}

void benchProgress(benchAgent_t* agent, const char* text) {
  if (!agent->showProgress) return;
  if (text)
    fprintf(stderr, "\r%s\033[K", text);
  else
    fprintf(stderr, "\r\033[K");
  fflush(stderr);
}

/* ---- communicators ---------------------------------------------------------------------------------------------- */

typedef struct {
  int engine;
  const void* id; /* NULL: created from the launcher's variables */
  double ms[BENCH_MAX_LOCAL];
  double bytes[BENCH_MAX_LOCAL];
  double self[BENCH_MAX_LOCAL];
} createCtx_t;

/* Device memory in use on the current device, for the before/after difference around communicator creation. */
static int usedBytes(benchAgent_t* agent, double* used) {
  size_t freeBytes = 0, totalBytes = 0;
  BENCH_CHECK_CUDA(agent, cudaDeviceSynchronize());
  BENCH_CHECK_CUDA(agent, cudaMemGetInfo(&freeBytes, &totalBytes));
  *used = (double)(totalBytes - freeBytes);
  return 0;
}

static int createOne(benchAgent_t* agent, int gpu, void* arg) {
  createCtx_t* ctx = (createCtx_t*)arg;
  const benchEngineOps_t* ops = agent->engines[ctx->engine].ops;
  double before = 0, after = 0;
  if (usedBytes(agent, &before) != 0) return -1;
  double begin = nowSec();
  if (ops->create(agent, ctx->engine, gpu, ctx->id) != 0) return -1;
  ctx->ms[gpu] = (nowSec() - begin) * 1000.0;
  if (usedBytes(agent, &after) != 0) return -1;
  ctx->bytes[gpu] = after > before ? after - before : 0;
  ctx->self[gpu] = ops->selfReportedBytes(agent, ctx->engine, gpu);
  return 0;
}

/* Creates one engine's communicators on every local GPU and records creation time and memory (worst rank). Under
 * a launcher there is no exchange before the first engine's communicator exists: it is created from the
 * launcher's variables, and carries the exchange from then on. */
static int createComms(benchAgent_t* agent, int engine) {
  const benchEngineOps_t* ops = agent->engines[engine].ops;
  unsigned char id[BENCH_UNIQUE_ID_BYTES];
  createCtx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  memset(id, 0, sizeof(id));
  ctx.engine = engine;
  const int fromLauncher = agent->launchKind == BENCH_LAUNCH_ENV && engine == 0;
  if (!fromLauncher) {
    if (agent->agent == 0 && ops->uniqueId(agent, engine, id) != 0) return -1;
    if (exchangeBcast(agent, id, ops->uniqueIdBytes) != 0) return -1;
    ctx.id = id;
  }
  int status = forEachGpu(agent, createOne, &ctx);
  if (status != 0) {
    benchOobAbort(agent->oob);
    return -1;
  }
  double worst[3] = {0, 0, -1};
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    worst[0] = fmax(worst[0], ctx.ms[gpu]);
    worst[1] = fmax(worst[1], ctx.bytes[gpu]);
    worst[2] = fmax(worst[2], ctx.self[gpu]);
  }
  if (fromLauncher) return 0; /* reduced once the communicator carries the exchange */
  if (benchReduce(agent, worst, 3, BENCH_REDUCE_MAX) != 0) return -1;
  agent->engines[engine].init = (benchInitStats_t){worst[0], worst[1], worst[2]};
  return 0;
}

static int destroyOne(benchAgent_t* agent, int gpu, void* arg) {
  int engine = *(int*)arg;
  return agent->engines[engine].ops->destroy(agent, engine, gpu);
}

/* ---- buffers ---------------------------------------------------------------------------------------------------- */

static int allocOne(benchAgent_t* agent, int gpu, void* arg) {
  size_t bytes = *(size_t*)arg;
  const int kind = agent->args.localRegister;
  for (int engine = 0; engine < agent->nEngines; engine++) {
    const benchEngineOps_t* ops = agent->engines[engine].ops;
    benchBuffers_t* b = &agent->buffers[gpu][engine];
    b->bytes = bytes;
    if (kind == BENCH_BUFFERS_PLAIN && engine > 0) {
      *b = agent->buffers[gpu][0];
      b->kind = BENCH_ALLOC_ALIAS;
      continue;
    }
    char** ptrs[2] = {&b->send, &b->recv};
    for (int i = 0; i < 2; i++) {
      void* ptr = NULL;
      if (kind == BENCH_BUFFERS_PLAIN) {
        BENCH_CHECK_CUDA(agent, cudaMalloc(&ptr, bytes));
        b->kind = BENCH_ALLOC_CUDA;
      } else {
        if (ops->memAlloc(agent, engine, gpu, bytes, &ptr) != 0) return -1;
        b->kind = BENCH_ALLOC_ENGINE;
      }
      *ptrs[i] = (char*)ptr;
      BENCH_CHECK_CUDA(agent, cudaMemset(ptr, 0, bytes));
      if (kind != BENCH_BUFFERS_PLAIN && ops->registerBuffer(agent, engine, gpu, kind, ptr, bytes, &b->reg[i]) != 0)
        return -1;
    }
  }
  return 0;
}

static int freeOne(benchAgent_t* agent, int gpu, void* arg) {
  (void)arg;
  int status = 0;
  for (int engine = agent->nEngines - 1; engine >= 0; engine--) {
    const benchEngineOps_t* ops = agent->engines[engine].ops;
    benchBuffers_t* b = &agent->buffers[gpu][engine];
    if (b->kind == BENCH_ALLOC_ALIAS || b->kind == BENCH_ALLOC_NONE) {
      memset(b, 0, sizeof(*b));
      continue;
    }
    char* ptrs[2] = {b->send, b->recv};
    for (int i = 0; i < 2; i++) {
      if (b->reg[i] && ops->deregisterBuffer(agent, engine, gpu, agent->args.localRegister, b->reg[i]) != 0)
        status = -1;
      if (!ptrs[i]) continue;
      if (b->kind == BENCH_ALLOC_CUDA && cudaFree(ptrs[i]) != cudaSuccess) status = -1;
      if (b->kind == BENCH_ALLOC_ENGINE && ops->memFree(agent, engine, gpu, ptrs[i]) != 0) status = -1;
    }
    memset(b, 0, sizeof(*b));
  }
  return status;
}

/* Shrinks maxBytes, like nccl-tests, when send + receive buffers of every engine would not fit (1 GiB kept free). */
static int fitMaxBytes(benchAgent_t* agent) {
  size_t freeBytes = 0, totalBytes = 0;
  double fit = INFINITY;
  int sets = (agent->args.localRegister > 0 ? agent->nEngines : 1) * 2;
  int sharing = agent->sharedGpus ? (agent->nranks + process.layout.nDevices - 1) / process.layout.nDevices : 1;
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    if (useDevice(agent, gpu) != 0) return -1;
    BENCH_CHECK_CUDA(agent, cudaMemGetInfo(&freeBytes, &totalBytes));
    double usable = ((double)freeBytes - (double)(1u << 30)) / sharing;
    fit = fmin(fit, usable / sets - (double)agent->args.unalign * 8 - 4096);
  }
  if (agent->nLocal > 1) BENCH_CHECK_CUDA(agent, cudaSetDevice(agent->devices[0]));
  double limit = fit > 0 ? fit : 0;
  if (benchReduce(agent, &limit, 1, BENCH_REDUCE_MIN) != 0) return -1;
  if ((double)agent->args.maxBytes > limit) {
    agent->args.maxBytes = (size_t)limit;
    if (agent->args.minBytes > agent->args.maxBytes) agent->args.minBytes = agent->args.maxBytes;
    if (agent->output) printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", agent->args.maxBytes);
  }
  return 0;
}

/* ---- header ----------------------------------------------------------------------------------------------------- */

static int gatherDevices(benchAgent_t* agent) {
  char host[64] = "?";
  gethostname(host, sizeof(host));
  host[sizeof(host) - 1] = '\0';
  if (agent->output) {
    process.deviceLines = calloc((size_t)agent->nranks, DEVICE_LINE);
    if (!process.deviceLines) {
      benchFail(agent, "out of memory");
      return -1;
    }
  }
  char(*lines)[DEVICE_LINE] = malloc((size_t)agent->nAgents * DEVICE_LINE);
  if (!lines) {
    benchFail(agent, "out of memory");
    return -1;
  }
  int status = 0;
  for (int gpu = 0; gpu < agent->nLocal && status == 0; gpu++) {
    struct cudaDeviceProp prop;
    char line[DEVICE_LINE];
    memset(line, 0, sizeof(line));
    if (cudaGetDeviceProperties(&prop, agent->devices[gpu]) != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(prop.name, sizeof(prop.name), "?");
      prop.pciDomainID = prop.pciBusID = prop.pciDeviceID = 0;
    }
    snprintf(line, sizeof(line), "#  Rank %2d Group %2d Pid %6d on %10.64s device %2d [%04x:%02x:%02x] %.96s",
             agent->firstRank + gpu, 0, (int)getpid(), host, agent->devices[gpu], prop.pciDomainID, prop.pciBusID,
             prop.pciDeviceID, prop.name);
    if (agent->oob->allgather(agent->oob, line, DEVICE_LINE, lines) != 0) {
      benchFail(agent, "exchange with the other ranks failed: %s", agent->oob->error);
      status = -1;
      break;
    }
    if (agent->output) {
      /* Agent a's gpu-th rank is rank a * nLocal + gpu in every launch mode. */
      for (int a = 0; a < agent->nAgents; a++)
        memcpy(process.deviceLines[a * agent->nLocal + gpu], lines[a], DEVICE_LINE);
      process.nDeviceLines = agent->nranks;
    }
  }
  free(lines);
  return status;
}

static void printBytesLine(const char* label, const benchInitStats_t* stats) {
  char used[32], self[32];
  benchFormatBytes(stats->deviceBytes, used, sizeof(used));
  printf("# %-20s : %.2f ms, %s device memory per rank", label, stats->timeMs, used);
  if (stats->selfBytes >= 0) {
    benchFormatBytes(stats->selfBytes, self, sizeof(self));
    printf(" (%s allocated by the library itself)", self);
  }
  printf("\n");
}

static void printHeader(benchAgent_t* agent) {
  const benchArgs_t* args = &process.args;
  int version = agent->engines[BENCH_FCCL].version;
  printf("# fccl %d.%d.%d %s (nccl-tests layout)", version / 10000, (version / 100) % 100, version % 100,
         agent->test->program);
  /* The other libraries this build has, whether or not this run compares with them. */
  for (int engine = 1; engine < BENCH_MAX_ENGINES; engine++) {
    const benchEngine_t* e = &agent->engines[engine];
    if (e->ops) printf(" %s-headers=%d %s-library=%d", e->ops->name, e->ops->headersVersion, e->ops->name, e->version);
  }
  printf("\n# Collective test starting: %s\n", agent->test->program);
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
         "validation: %d graph: %d unalign: %d\n",
         args->nThreads, args->nGpus, args->minBytes, args->maxBytes,
         args->stepFactor > 1 ? args->stepFactor : args->stepBytes, args->stepFactor > 1 ? "factor" : "bytes",
         args->warmupIters, args->iters, args->check, args->graphLaunches, args->unalign);
  if (args->blocking) printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
  printf("# Launch: %s, %d rank%s | buffers: %s%s%s | compare: %s\n", process.launchText, agent->nranks,
         agent->nranks == 1 ? "" : "s", agent->buffersText[0], agent->nEngines > 1 ? ", nccl " : "",
         agent->nEngines > 1 ? agent->buffersText[1] : "",
         agent->nEngines > 1 ? "nccl" : (process.compareSkipped ? "nccl skipped (see above)" : "none"));
  printf("#\n# Using devices\n");
  for (int i = 0; i < process.nDeviceLines; i++) printf("%s\n", process.deviceLines[i]);
  printf("#\n");
  char label[64];
  for (int engine = 0; engine < agent->nEngines; engine++) {
    snprintf(label, sizeof(label), "%s comm init", agent->engineNames[engine]);
    printBytesLine(label, &agent->engines[engine].init);
  }
}

/* The preamble common to both programs (config, devices, communicator creation). */
static void jsonPreamble(benchAgent_t* agent, benchJson_t* json) {
  const benchArgs_t* args = &agent->args;
  int version = agent->engines[BENCH_FCCL].version;
  char text[64];
  benchJsonKeyString(json, "tool", agent->test->program);
  benchJsonKeyInt(json, "json_version", 1);
  snprintf(text, sizeof(text), "%d.%d.%d", version / 10000, (version / 100) % 100, version % 100);
  benchJsonKeyString(json, "fccl_version", text);
  benchJsonKey(json, "nccl_version");
  if (agent->engines[BENCH_NCCL].version)
    benchJsonInt(json, agent->engines[BENCH_NCCL].version);
  else
    benchJsonNull(json);
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  benchJsonKeyString(json, "time", text);
  benchJsonKey(json, "args");
  benchJsonBeginArray(json);
  for (int i = 0; i < process.argc; i++) benchJsonString(json, process.argv[i]);
  benchJsonEndArray(json);
  benchJsonKey(json, "config");
  benchJsonBeginObject(json);
  benchJsonKeyInt(json, "nranks", agent->nranks);
  benchJsonKeyString(json, "launch", process.launchText);
  benchJsonKeyInt(json, "nthreads", args->nThreads);
  benchJsonKeyInt(json, "ngpus", args->nGpus);
  benchJsonKeyInt(json, "minimum_bytes", (long long)args->minBytes);
  benchJsonKeyInt(json, "maximum_bytes", (long long)args->maxBytes);
  benchJsonKeyInt(json, args->stepFactor > 1 ? "step_factor" : "step_bytes",
                  (long long)(args->stepFactor > 1 ? args->stepFactor : args->stepBytes));
  benchJsonKeyInt(json, "warmup_iters", args->warmupIters);
  benchJsonKeyInt(json, "iterations", args->iters);
  benchJsonKeyInt(json, "validation", args->check);
  benchJsonKeyInt(json, "graph", args->graphLaunches);
  benchJsonKeyBool(json, "blocking_collectives", args->blocking);
  benchJsonKeyInt(json, "unalign", args->unalign);
  benchJsonKey(json, "buffers");
  benchJsonBeginObject(json);
  for (int engine = 0; engine < agent->nEngines; engine++)
    benchJsonKeyString(json, agent->engineNames[engine], agent->buffersText[engine]);
  benchJsonEndObject(json);
  benchJsonKeyBool(json, "shared_gpus", agent->sharedGpus);
  benchJsonKeyString(json, "compare", agent->nEngines > 1 ? agent->engineNames[1] : NULL);
  benchJsonEndObject(json);
  benchJsonKey(json, "devices");
  benchJsonBeginArray(json);
  for (int i = 0; i < process.nDeviceLines; i++) benchJsonString(json, process.deviceLines[i] + 3);
  benchJsonEndArray(json);
  benchJsonKey(json, "comm_init");
  benchJsonBeginObject(json);
  for (int engine = 0; engine < agent->nEngines; engine++) {
    benchJsonKey(json, agent->engineNames[engine]);
    benchJsonBeginObject(json);
    const benchInitStats_t* init = &agent->engines[engine].init;
    benchJsonKeyDouble(json, "time_ms", init->timeMs);
    benchJsonKeyDouble(json, "device_bytes", init->deviceBytes);
    benchJsonKey(json, "self_reported_bytes");
    if (init->selfBytes >= 0)
      benchJsonDouble(json, init->selfBytes);
    else
      benchJsonNull(json);
    benchJsonEndObject(json);
  }
  benchJsonEndObject(json);
}

FILE* benchOpenOutput(benchAgent_t* agent, const char* path) {
  FILE* file = fopen(path, "w");
  if (!file) benchFail(agent, "cannot write %s: %s", path, strerror(errno));
  return file;
}

FILE* benchJsonStart(benchAgent_t* agent, benchJson_t* json) {
  FILE* file = benchOpenOutput(agent, agent->args.jsonPath);
  if (!file) return NULL;
  benchJsonInit(json, file);
  benchJsonBeginObject(json);
  jsonPreamble(agent, json);
  benchJsonKey(json, "results");
  benchJsonBeginArray(json);
  return file;
}

int benchCloseOutput(benchAgent_t* agent, FILE* file, const char* path) {
  int failed = ferror(file);
  errno = 0;
  if (fclose(file) != 0 || failed) {
    benchFail(agent, "writing %s failed%s%s", path, errno ? ": " : "", errno ? strerror(errno) : "");
    return -1;
  }
  return 0;
}

/* ---- an agent's life -------------------------------------------------------------------------------------------- */

typedef struct {
  int agentIndex;
  int firstRank;
  int nLocal;
  int devices[BENCH_MAX_LOCAL];
  benchOob_t* oob;
  int status;
} agentPlan_t;

static int setUpAgent(benchAgent_t* agent) {
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    BENCH_CHECK_CUDA(agent, cudaSetDevice(agent->devices[gpu]));
    BENCH_CHECK_CUDA(agent, cudaFree(NULL)); /* create the context now, so it is not counted as a communicator's */
    BENCH_CHECK_CUDA(agent, cudaStreamCreateWithFlags(&agent->streams[gpu], cudaStreamNonBlocking));
    BENCH_CHECK_CUDA(agent, cudaEventCreate(&agent->start[gpu]));
    BENCH_CHECK_CUDA(agent, cudaEventCreate(&agent->stop[gpu]));
  }
  BENCH_CHECK_CUDA(agent, cudaSetDevice(agent->devices[0]));
  return 0;
}

static void tearDownAgent(benchAgent_t* agent) {
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    if (cudaSetDevice(agent->devices[gpu]) != cudaSuccess) continue;
    if (agent->start[gpu]) cudaEventDestroy(agent->start[gpu]);
    if (agent->stop[gpu]) cudaEventDestroy(agent->stop[gpu]);
    if (agent->streams[gpu]) cudaStreamDestroy(agent->streams[gpu]);
  }
  if (agent->staging) cudaFreeHost(agent->staging);
  agent->staging = NULL;
  (void)cudaGetLastError();
}

static int runAgent(benchAgent_t* agent) {
  commOob_t commState = {agent, NULL, NULL};
  benchOob_t commOob;
  int status = setUpAgent(agent);
  if (status == 0) status = createComms(agent, BENCH_FCCL);
  if (status == 0 && agent->launchKind == BENCH_LAUNCH_ENV) {
    /* From here on the communicator carries the exchange. */
    memset(&commOob, 0, sizeof(commOob));
    commOob.nAgents = agent->nAgents;
    commOob.agent = agent->agent;
    commOob.allgather = commAllgather;
    commOob.state = &commState;
    commOob.timeoutSec = agent->args.timeoutSec;
    size_t total = (size_t)agent->nAgents * BENCH_OOB_SLOT;
    commState.host = (unsigned char*)malloc(total);
    if (!commState.host || cudaMalloc((void**)&commState.device, total) != cudaSuccess) {
      benchFail(agent, "cannot allocate the exchange buffer");
      status = -1;
    }
    agent->oob = &commOob;
    benchInitStats_t* init = &agent->engines[0].init;
    double worst[3] = {init->timeMs, init->deviceBytes, init->selfBytes};
    if (status == 0) status = benchReduce(agent, worst, 3, BENCH_REDUCE_MAX);
    *init = (benchInitStats_t){worst[0], worst[1], worst[2]};
  }
  if (status == 0 && agent->nEngines > 1) status = createComms(agent, BENCH_NCCL);
  if (status == 0) status = gatherDevices(agent);
  if (status == 0 && agent->output) printHeader(agent);
  if (status == 0) {
    agent->stagingBytes = STAGING_BYTES;
    if (cudaMallocHost((void**)&agent->staging, agent->stagingBytes) != cudaSuccess) {
      (void)cudaGetLastError();
      benchFail(agent, "cannot allocate %zu bytes of pinned host memory", agent->stagingBytes);
      status = -1;
    }
  }
  int buffersMade = 0;
  if (status == 0 && agent->test->dataBuffers) {
    status = fitMaxBytes(agent);
    size_t bytes = agent->args.maxBytes + (size_t)agent->args.unalign * 8;
    if (bytes < 4096) bytes = 4096;
    if (status == 0) status = forEachGpu(agent, allocOne, &bytes);
    buffersMade = 1;
  }
  if (status == 0) {
    fflush(stdout);
    status = agent->test->run(agent);
  }
  if (status < 0) benchOobAbort(agent->oob);
  /* Collective teardown only when everyone got here in order; after a failure, free what is local. */
  int clean = status >= 0;
  if (buffersMade && forEachGpu(agent, freeOne, NULL) != 0 && status >= 0) status = -1;
  if (commState.device) cudaFree(commState.device);
  free(commState.host);
  for (int engine = agent->nEngines - 1; engine >= 0; engine--) {
    if (clean) {
      if (forEachGpu(agent, destroyOne, &engine) != 0 && status >= 0) status = -1;
    } else {
      abortEngine(agent, engine);
    }
  }
  tearDownAgent(agent);
  return status;
}

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
  agent->output = plan->agentIndex == 0;
  agent->showProgress = agent->output && (process.args.progress == 1 ||
                                          (process.args.progress == -1 && isatty(STDERR_FILENO)));
  memcpy(agent->devices, plan->devices, sizeof(agent->devices));
  agent->engines[BENCH_FCCL].ops = &benchFcclEngine;
  agent->engines[BENCH_NCCL].ops = benchNcclEngine;
  agent->nEngines = process.args.compareNccl && !process.compareSkipped ? 2 : 1;
  static const char* const buffersText[3] = {"plain", "registered", "symmetric"};
  for (int engine = 0; engine < BENCH_MAX_ENGINES; engine++) {
    benchEngine_t* e = &agent->engines[engine];
    int kind = process.args.localRegister;
    /* An engine without symmetric windows registers -R 2's buffers plainly. */
    if (kind == BENCH_BUFFERS_SYMMETRIC && !(e->ops && e->ops->symmetricWindows)) kind = BENCH_BUFFERS_REGISTERED;
    agent->buffersText[engine] = buffersText[kind];
    agent->engineNames[engine] = e->ops ? e->ops->name : NULL;
    e->version = e->ops ? e->ops->libraryVersion() : 0;
  }
  int status = runAgent(agent);
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
    if (process.mode == BENCH_LAUNCH_MPI) {
      oobs[t].nAgents = layout->nProcs;
      oobs[t].agent = proc;
      oobs[t].allgather = mpiAllgather;
      oobs[t].abort = mpiAbort;
    }
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
  free(process.deviceLines);
  process.deviceLines = NULL;
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
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    /* Without the NVIDIA driver the runtime says "insufficient driver"; say what that means here. */
    const char* meaning = status == cudaErrorInsufficientDriver ? "no usable NVIDIA driver"
                          : status == cudaErrorNoDevice         ? "no CUDA device is visible"
                                                                : "CUDA cannot count the GPUs";
    snprintf(msg, len, "%s (cudaGetDeviceCount: %s, %s)", meaning, cudaGetErrorName(status),
             cudaGetErrorString(status));
    return 0;
  }
  if (count == 0) snprintf(msg, len, "no CUDA device is visible");
  return count;
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
  char err[512];
  int parsed = benchParseArgs(argc, argv, &process.args, err, sizeof(err));
  if (parsed == BENCH_PARSE_HELP) {
    benchPrintUsage(stdout, program);
    return 0;
  }
  if (parsed != BENCH_PARSE_OK) {
    fprintf(stderr, "%s: %s\n", program, err);
    return 2;
  }
  benchArgs_t* args = &process.args;
  const benchEngineOps_t* const buildEngines[BENCH_MAX_ENGINES] = {&benchFcclEngine, benchNcclEngine};
  for (int engine = 0; engine < BENCH_MAX_ENGINES; engine++)
    if (buildEngines[engine] && buildEngines[engine]->prepareProcess) buildEngines[engine]->prepareProcess();
  if (args->compareNccl && !benchNcclEngine) process.compareSkipped = 1;
  if (benchDetectLaunch(realGetenv, &process.env, err, sizeof(err)) != 0) {
    fprintf(stderr, "%s: launcher variables: %s\n", program, err);
    return 2;
  }
  /* The output files are written at the end: a name that cannot be written fails now, not after the run. */
  const char* const outputs[2] = {args->jsonPath, args->csvPath};
  for (int i = 0; i < 2; i++) {
    if (outputs[i] && benchCheckWritable(outputs[i], err, sizeof(err)) != 0) {
      fprintf(stderr, "%s: %s %s\n", program, i == 0 ? "-J:" : "--csv:", err);
      return 2;
    }
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
    if (nDevices == 0) {
      fprintf(stderr, "%s: no GPU to run on: %s. The benchmark needs at least one CUDA GPU.\n", program, msg);
      return 2;
    }
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
      if (args->compareNccl && !process.compareSkipped) {
        printf("# --compare nccl: NCCL does not run two ranks on one GPU; measuring fccl alone\n");
        process.compareSkipped = 1;
      }
    }
    snprintf(process.launchText, sizeof(process.launchText), "%d process%s forked here (%d thread%s x %d GPU%s each)",
             process.layout.nProcs, process.layout.nProcs == 1 ? "" : "es", process.layout.nThreads,
             process.layout.nThreads == 1 ? "" : "s", process.layout.nGpus, process.layout.nGpus == 1 ? "" : "s");
    process.shm = benchShmCreate(process.layout.nProcs * process.layout.nThreads);
    if (!process.shm) {
      fprintf(stderr, "%s: cannot map the shared exchange: %s\n", program, strerror(errno));
      return 1;
    }
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
  if (args->nThreads != 1 || (!useMpi && args->nGpus != 1)) {
    fprintf(stderr, "%s: under %s each process is one rank: -t 1 -g 1%s\n", program, process.env.source,
            useMpi ? " (-g works with MPI)" : "");
    return 2;
  }
  int nVisible = 0;
  if (cudaGetDeviceCount(&nVisible) != cudaSuccess || nVisible == 0) {
    (void)cudaGetLastError();
    fprintf(stderr, "%s: rank %d: no GPU to run on\n", program, process.env.rank);
    return 2;
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
    MPI_Init(&argc, &argv);
    code = processMain(process.env.rank, NULL);
    MPI_Finalize();
    return code;
  }
#endif
  process.mode = BENCH_LAUNCH_ENV;
  if (cudaSetDevice(process.env.localRank % nVisible) != cudaSuccess) {
    fprintf(stderr, "%s: rank %d: cudaSetDevice failed\n", program, process.env.rank);
    return 1;
  }
  return processMain(process.env.rank, NULL);
}
