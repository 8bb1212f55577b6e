/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An agent's life: a thread that drives -g GPUs, one rank each. It sets up its GPUs' streams and events, creates
 * every measured engine's communicators (timing them and measuring their memory), has rank 0's agent print the
 * header, makes the buffers, runs the program's measurement and tears it all down in reverse, collectively when
 * every rank got through in order, locally (aborting) after a failure.
 */
#include "runtime_internal.h"

#include "collective.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STAGING_BYTES ((size_t)64 << 20)

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

/* -M: device memory in use on every local GPU. */
static int usedPerGpu(benchAgent_t* agent, double used[BENCH_MAX_LOCAL]) {
  for (int gpu = 0; gpu < agent->nLocal; gpu++)
    if (benchUseDevice(agent, gpu) != 0 || usedBytes(agent, &used[gpu]) != 0) return -1;
  if (agent->nLocal > 1) BENCH_CHECK_CUDA(agent, cudaSetDevice(agent->devices[0]));
  return 0;
}

/* The largest growth between two usedPerGpu readings. */
static double largestGrowth(const benchAgent_t* agent, const double* before, const double* after) {
  double largest = 0;
  for (int gpu = 0; gpu < agent->nLocal; gpu++) largest = fmax(largest, after[gpu] - before[gpu]);
  return largest;
}

static int createOne(benchAgent_t* agent, int gpu, void* arg) {
  createCtx_t* ctx = (createCtx_t*)arg;
  const benchEngineOps_t* ops = agent->engines[ctx->engine].ops;
  double before = 0, after = 0;
  if (usedBytes(agent, &before) != 0) return -1;
  double begin = benchNowSec();
  if (ops->create(agent, ctx->engine, gpu, ctx->id) != 0) return -1;
  ctx->ms[gpu] = (benchNowSec() - begin) * 1000.0;
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
  /* A budget's communicators (--max-ctas) come after the first ones: the exchange hands out their ids. */
  const int fromLauncher = agent->launchKind == BENCH_LAUNCH_ENV && engine == 0 && agent->maxCtas == 0;
  if (!fromLauncher) {
    if (agent->agent == 0 && ops->uniqueId(agent, engine, id) != 0) return -1;
    if (benchBcast(agent, id, ops->uniqueIdBytes) != 0) return -1;
    ctx.id = id;
  }
  if (agent->maxCtas != 0) {
    /* The first communicators step aside only now: until the id is out, the exchange may run on them. */
    memcpy(agent->firstComms[engine], agent->engines[engine].comms, sizeof(agent->firstComms[engine]));
    memset(agent->engines[engine].comms, 0, sizeof(agent->engines[engine].comms));
  }
  int status = benchForEachGpu(agent, createOne, &ctx);
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
  agent->engines[engine].init = (benchInitStats_t){worst[0], worst[1], worst[2]};
  if (fromLauncher) return 0; /* this rank's values, reduced once the communicator carries the exchange */
  if (benchReduce(agent, worst, 3, BENCH_REDUCE_MAX) != 0) return -1;
  agent->engines[engine].init = (benchInitStats_t){worst[0], worst[1], worst[2]};
  return 0;
}

static int destroyOne(benchAgent_t* agent, int gpu, void* arg) {
  int engine = *(int*)arg;
  return agent->engines[engine].ops->destroy(agent, engine, gpu);
}

/* ---- --max-ctas: the communicators of an SM budget ------------------------------------------------------------- */

/* -R 1/2: the budget's communicators register the buffers the first ones registered (register) or let them go. */
static int budgetRegistration(benchAgent_t* agent, int gpu, int engine, int reg) {
  const benchEngineOps_t* ops = agent->engines[engine].ops;
  benchBuffers_t* b = &agent->buffers[gpu][engine];
  void** handles = agent->budgetReg[gpu][engine];
  char* const ptrs[2] = {b->send, b->recv};
  const size_t bytes[2] = {b->sendBytes, b->recvBytes};
  int status = 0;
  for (int i = 0; i < 2; i++) {
    if (reg && b->kind == BENCH_ALLOC_ENGINE && ptrs[i]) {
      if (ops->registerBuffer(agent, engine, gpu, agent->args.localRegister, ptrs[i], bytes[i], &handles[i]) != 0)
        return -1;
    } else if (!reg && handles[i]) {
      if (ops->deregisterBuffer(agent, engine, gpu, agent->args.localRegister, handles[i]) != 0) status = -1;
      handles[i] = NULL;
    }
  }
  return status;
}

static int registerOne(benchAgent_t* agent, int gpu, void* arg) {
  return budgetRegistration(agent, gpu, *(int*)arg, 1);
}

static int deregisterOne(benchAgent_t* agent, int gpu, void* arg) {
  return budgetRegistration(agent, gpu, *(int*)arg, 0);
}

/* The first communicators current again, in every engine that stepped aside (those whose firstComms are set). */
static void restoreFirstComms(benchAgent_t* agent) {
  for (int engine = 0; engine < agent->nEngines; engine++) {
    if (!agent->firstComms[engine][0]) continue;
    memcpy(agent->engines[engine].comms, agent->firstComms[engine], sizeof(agent->firstComms[engine]));
    memset(agent->firstComms[engine], 0, sizeof(agent->firstComms[engine]));
  }
  memset(agent->budgetReg, 0, sizeof(agent->budgetReg));
  agent->maxCtas = 0;
}

int benchUseBudget(benchAgent_t* agent, int maxCtas) {
  int status = 0;
  if (agent->maxCtas != 0) {
    for (int engine = agent->nEngines - 1; engine >= 0; engine--) {
      if (benchForEachGpu(agent, deregisterOne, &engine) != 0) status = -1;
      if (benchForEachGpu(agent, destroyOne, &engine) != 0) status = -1; /* gone also when it fails */
    }
    restoreFirstComms(agent);
  }
  if (status != 0 || maxCtas == 0) return status;
  /* The first communicators' creation statistics are the header's and -M's: a budget's are not reported. */
  benchInitStats_t init[BENCH_MAX_ENGINES];
  for (int engine = 0; engine < BENCH_MAX_ENGINES; engine++) init[engine] = agent->engines[engine].init;
  agent->maxCtas = maxCtas;
  for (int engine = 0; engine < agent->nEngines && status == 0; engine++) {
    status = createComms(agent, engine);
    if (status == 0 && agent->args.localRegister != BENCH_BUFFERS_PLAIN)
      status = benchForEachGpu(agent, registerOne, &engine);
  }
  for (int engine = 0; engine < BENCH_MAX_ENGINES; engine++) agent->engines[engine].init = init[engine];
  if (status == 0) return 0;
  benchDropBudget(agent);
  return -1;
}

void benchDropBudget(benchAgent_t* agent) {
  if (agent->maxCtas == 0) return;
  /* The budget's communicators aborted (with their registrations), the first ones current for the teardown. */
  for (int engine = 0; engine < agent->nEngines; engine++)
    if (agent->firstComms[engine][0]) benchAbortEngine(agent, engine);
  restoreFirstComms(agent);
}

/* ---- the life --------------------------------------------------------------------------------------------------- */

static int setUpAgent(benchAgent_t* agent) {
  /* -I between shared events (not -z 3, which times each iteration between its own start and stop). */
  const int iterEvents = agent->args.perIterTiming && agent->args.graphLaunches == 0 &&
                                 agent->args.blocking != BENCH_BLOCKING_EXCLUDE_BARRIER
                             ? agent->args.iters + 1
                             : 0;
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    BENCH_CHECK_CUDA(agent, cudaSetDevice(agent->devices[gpu]));
    BENCH_CHECK_CUDA(agent, cudaFree(NULL)); /* create the context now, so it is not counted as a communicator's */
    BENCH_CHECK_CUDA(agent, cudaStreamCreateWithFlags(&agent->streams[gpu], cudaStreamNonBlocking));
    BENCH_CHECK_CUDA(agent, cudaEventCreate(&agent->start[gpu]));
    BENCH_CHECK_CUDA(agent, cudaEventCreate(&agent->stop[gpu]));
    if (iterEvents == 0) continue;
    agent->iterEvents[gpu] = (cudaEvent_t*)calloc((size_t)iterEvents, sizeof(cudaEvent_t));
    if (!agent->iterEvents[gpu]) {
      benchFail(agent, "out of memory for %d events", iterEvents);
      return -1;
    }
    for (int e = 0; e < iterEvents; e++) BENCH_CHECK_CUDA(agent, cudaEventCreate(&agent->iterEvents[gpu][e]));
  }
  BENCH_CHECK_CUDA(agent, cudaSetDevice(agent->devices[0]));
  return 0;
}

static void tearDownAgent(benchAgent_t* agent) {
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    if (cudaSetDevice(agent->devices[gpu]) != cudaSuccess) continue;
    if (agent->start[gpu]) cudaEventDestroy(agent->start[gpu]);
    if (agent->stop[gpu]) cudaEventDestroy(agent->stop[gpu]);
    for (int e = 0; agent->iterEvents[gpu] && e <= agent->args.iters; e++)
      if (agent->iterEvents[gpu][e]) cudaEventDestroy(agent->iterEvents[gpu][e]);
    if (agent->streams[gpu]) cudaStreamDestroy(agent->streams[gpu]);
  }
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    free(agent->iterEvents[gpu]);
    agent->iterEvents[gpu] = NULL;
  }
  if (agent->staging) cudaFreeHost(agent->staging);
  agent->staging = NULL;
  (void)cudaGetLastError();
}

int benchRunAgent(benchAgent_t* agent) {
  benchCommExchange_t commExchange;
  memset(&commExchange, 0, sizeof(commExchange));
  benchNowText(agent->startTime, sizeof(agent->startTime));
  const int memoryReport = agent->args.memoryReport;
  double used[3][BENCH_MAX_LOCAL]; /* -M: before the buffers, after them, after the run */
  memset(used, 0, sizeof(used));
  int status = setUpAgent(agent);
  if (status == 0) status = createComms(agent, BENCH_FCCL);
  if (status == 0 && agent->launchKind == BENCH_LAUNCH_ENV) {
    /* From here on the communicator carries the exchange. */
    status = benchCommExchangeStart(agent, &commExchange);
    benchInitStats_t* init = &agent->engines[0].init;
    double worst[3] = {init->timeMs, init->deviceBytes, init->selfBytes};
    if (status == 0) status = benchReduce(agent, worst, 3, BENCH_REDUCE_MAX);
    *init = (benchInitStats_t){worst[0], worst[1], worst[2]};
  }
  if (status == 0 && agent->nEngines > 1) status = createComms(agent, BENCH_NCCL);
  if (status == 0) status = benchGatherDevices(agent);
  if (status == 0 && agent->output) benchPrintHeader(agent);
  if (status == 0) {
    agent->stagingBytes = STAGING_BYTES;
    if (cudaMallocHost((void**)&agent->staging, agent->stagingBytes) != cudaSuccess) {
      (void)cudaGetLastError();
      benchFail(agent, "cannot allocate %zu bytes of pinned host memory", agent->stagingBytes);
      status = -1;
    }
  }
  int buffersMade = 0;
  if (status == 0 && memoryReport) status = usedPerGpu(agent, used[0]);
  if (status == 0 && agent->test->collective) {
    /* The counts are at most linear (collective.h): a call with count 1 says how many times maxBytes each buffer
     * holds (where the call's count is a rank's share, how many times maxBytes / nranks: nccl-tests' rounding only
     * makes it smaller). */
    const benchCollective_t* collective = agent->test->collective;
    benchCounts_t per = collective->counts(1, agent->nranks);
    const size_t scale = collective->perRank ? (size_t)agent->nranks : 1;
    status = benchFitMaxBytes(agent, (int)((per.send + per.recv + scale - 1) / scale));
    size_t bytes[2] = {agent->args.maxBytes / scale * per.send, agent->args.maxBytes / scale * per.recv};
    for (int i = 0; i < 2; i++) {
      bytes[i] += (size_t)agent->args.unalign * 8;
      if (bytes[i] < 4096) bytes[i] = 4096;
    }
    if (status == 0) status = benchAllocBuffers(agent, bytes[0], bytes[1]);
    buffersMade = 1;
  }
  if (status == 0 && memoryReport) status = usedPerGpu(agent, used[1]);
  if (status == 0) {
    fflush(stdout);
    status = agent->test->run(agent);
  }
  if (status >= 0 && memoryReport) {
    /* nccl-tests' three parts: the communicators, the benchmark's own buffers, what the run itself added. */
    int reported = usedPerGpu(agent, used[2]);
    double* memory = agent->memory;
    memory[BENCH_MEM_INIT] = 0;
    for (int engine = 0; engine < agent->nEngines; engine++)
      memory[BENCH_MEM_INIT] += agent->engines[engine].init.deviceBytes;
    memory[BENCH_MEM_BUFFERS] = largestGrowth(agent, used[0], used[1]);
    memory[BENCH_MEM_RUN] = largestGrowth(agent, used[1], used[2]);
    if (reported == 0) reported = benchReduce(agent, memory + BENCH_MEM_BUFFERS, 2, BENCH_REDUCE_MAX);
    if (reported != 0)
      status = -1;
    else if (agent->output)
      benchPrintMemoryReport(stdout, memory);
  }
  if (status < 0) benchOobAbort(agent->oob);
  /* Collective teardown only when everyone got here in order; after a failure, free what is local. */
  int clean = status >= 0;
  if (buffersMade && benchFreeBuffers(agent) != 0 && status >= 0) status = -1;
  benchCommExchangeStop(&commExchange);
  for (int engine = agent->nEngines - 1; engine >= 0; engine--) {
    if (clean) {
      if (benchForEachGpu(agent, destroyOne, &engine) != 0 && status >= 0) status = -1;
    } else {
      benchAbortEngine(agent, engine);
    }
  }
  tearDownAgent(agent);
  free(agent->deviceLines);
  agent->deviceLines = NULL;
  return status;
}
