/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The driver every collective's program shares: for each type (-d) and op (-o), a warm-up at the largest and
 * smallest size, then for each size of the sweep and each engine, the timed loop out of place and in place, the
 * -c checks on fresh data, a table row; the footer, -J and --csv at the end. What differs between collectives comes
 * from their benchCollective_t.
 */
#include "collective.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One call of the collective as the sweep makes it. */
typedef struct {
  const benchCollective_t* collective;
  size_t count;        /* the call's count argument */
  size_t bytes;        /* the larger buffer's bytes: the table's size */
  benchCounts_t elems; /* elements of the send and receive buffers */
  int type;
  int op;
  int root;
  int inPlace;
} collCall_t;

const char* benchCallName(benchCall_t call) {
  static const char* const names[BENCH_NUM_CALLS] = {"all_reduce", "all_gather",   "reduce_scatter",  "broadcast",
                                                     "send_recv",  "all_to_all",   "reduce",          "gather",
                                                     "scatter",    "all_gather_v", "reduce_scatter_v"};
  return call >= 0 && call < BENCH_NUM_CALLS ? names[call] : "?";
}

unsigned benchCollectiveTakes(const benchCollective_t* collective) {
  return BENCH_TAKES_DATA | BENCH_TAKES_PER_ITER | BENCH_TAKES_NCCL_TESTS | (collective->hasOp ? BENCH_TAKES_OP : 0) |
         (collective->hasRoot ? BENCH_TAKES_ROOT : 0);
}

static collCall_t makeCall(const benchAgent_t* agent, size_t bytes, int type, int op, int root, int inPlace) {
  collCall_t call;
  memset(&call, 0, sizeof(call));
  call.collective = agent->test->collective;
  call.count = benchCallCount(bytes, type, agent->nranks, call.collective->perRank, call.collective->alignBytes);
  call.elems = call.collective->counts(call.count, agent->nranks);
  call.bytes = (call.elems.send > call.elems.recv ? call.elems.send : call.elems.recv) * benchTypeSize(type);
  call.type = type;
  call.op = op;
  call.root = root;
  call.inPlace = inPlace;
  return call;
}

/* Where the call's send and receive data lie on local rank gpu, in slice `slice` of the buffers, after the -u
 * offset. In place is NCCL's: the smaller buffer is this rank's part of the larger (all-gather: send at rank x
 * send count in recv; reduce-scatter: recv at rank x recv count in send), and equal ones are one buffer. */
static void placeCall(const benchAgent_t* agent, int engine, int gpu, const collCall_t* call, size_t slice,
                      char** send, char** recv) {
  const benchBuffers_t* b = &agent->buffers[gpu][engine];
  const size_t size = benchTypeSize(call->type);
  const size_t pad = (size_t)agent->args.unalign * size;
  *send = b->send + pad + call->elems.send * size * slice;
  *recv = b->recv + pad + call->elems.recv * size * slice;
  if (!call->inPlace) return;
  const size_t rank = (size_t)(agent->firstRank + gpu);
  if (call->elems.send < call->elems.recv)
    *send = *recv + rank * call->elems.send * size;
  else if (call->elems.recv < call->elems.send)
    *recv = *send + rank * call->elems.recv * size;
  else
    *send = *recv;
}

/* nccl-tests moves each iteration to a different slice of the buffers, so that small sizes are not served from the
 * L2 cache of the previous iteration. */
static size_t slicesOf(const benchAgent_t* agent, const collCall_t* call) {
  return call->bytes ? agent->args.maxBytes / call->bytes : 1;
}

/* Whether every slice of the call lies in the buffers (the same size on every rank and engine): counts that grow
 * faster than collective.h allows would take the call past them. 0, or -1 after benchFail. */
static int checkFits(benchAgent_t* agent, const collCall_t* call) {
  const size_t size = benchTypeSize(call->type);
  const size_t pad = (size_t)agent->args.unalign * size;
  const size_t slices = slicesOf(agent, call) > 1 ? slicesOf(agent, call) : 1;
  const size_t send = pad + call->elems.send * size * slices, recv = pad + call->elems.recv * size * slices;
  const benchBuffers_t* b = &agent->buffers[0][0];
  if (send <= b->sendBytes && recv <= b->recvBytes) return 0;
  benchFail(agent,
            "a call of count %zu takes %zu bytes of the send buffer and %zu of the receive buffer (%zu slices), which "
            "hold %zu and %zu: the collective's counts grow faster than count times their value at count 1",
            call->count, send, recv, slices, b->sendBytes, b->recvBytes);
  return -1;
}

static int launchCall(benchAgent_t* agent, int engine, int gpu, int iter, void* arg) {
  const collCall_t* call = (const collCall_t*)arg;
  size_t slices = slicesOf(agent, call);
  char* send = NULL;
  char* recv = NULL;
  placeCall(agent, engine, gpu, call, slices > 1 ? (size_t)iter % slices : 0, &send, &recv);
  return agent->engines[engine].ops->calls[call->collective->call](agent, engine, gpu, send, recv, call->count,
                                                                   call->type, call->op, call->root);
}

static int warmUp(benchAgent_t* agent, int type, int op, int root) {
  size_t sizes[2] = {agent->args.maxBytes, agent->args.minBytes};
  for (int engine = 0; engine < agent->nEngines; engine++) {
    for (int s = 0; s < 2 && agent->args.warmupIters > 0; s++) {
      collCall_t call = makeCall(agent, sizes[s], type, op, root, 0);
      if (checkFits(agent, &call) != 0) return -1;
      if (benchLaunchAll(agent, engine, launchCall, &call, 0, agent->args.warmupIters) != 0) return -1;
      if (benchSync(agent, engine) != 0) return -1;
    }
  }
  return 0;
}

/* One checked run on fresh inputs; *wrong: wrong elements summed over every rank. */
static int checkRun(benchAgent_t* agent, int engine, collCall_t* call, int64_t* wrong) {
  const size_t size = benchTypeSize(call->type);
  const uint64_t seed = ++agent->seedCounter;
  char* send = NULL;
  char* recv = NULL;
  for (int gpu = 0; gpu < agent->nLocal; gpu++) {
    placeCall(agent, engine, gpu, call, 0, &send, &recv);
    /* Poisoned where the inputs do not land, so that an element the call leaves unwritten counts as wrong. */
    if ((!call->inPlace || call->elems.send < call->elems.recv) &&
        benchPoison(agent, gpu, recv, call->elems.recv * size) != 0)
      return -1;
    if (benchUpload(agent, gpu, send, call->elems.send, call->type, call->op, seed) != 0) return -1;
  }
  if (benchRunOnce(agent, engine, launchCall, call, 1) != 0) return -1;
  if (agent->args.injectCorruption && engine == BENCH_FCCL && agent->agent == 0 && call->elems.recv > 0) {
    placeCall(agent, engine, 0, call, 0, &send, &recv);
    if (benchCorrupt(agent, 0, recv, call->elems.recv / 2, call->type) != 0) return -1;
  }
  benchChecker_t checker;
  if (benchCheckerInit(&checker, call->type, call->op, agent->nranks, seed) != 0) {
    benchFail(agent, "out of host memory for the check");
    return -1;
  }
  double sum = 0;
  int status = 0;
  for (int gpu = 0; gpu < agent->nLocal && status == 0; gpu++) {
    int64_t local = 0;
    placeCall(agent, engine, gpu, call, 0, &send, &recv);
    benchCheckerSetResult(&checker, call->collective->result, call->count, agent->firstRank + gpu, call->root);
    status = benchCheck(agent, gpu, &checker, recv, call->elems.recv, &local);
    sum += (double)local;
  }
  benchCheckerFree(&checker);
  if (status != 0 || benchReduce(agent, &sum, 1, BENCH_REDUCE_SUM) != 0) return -1;
  *wrong = (int64_t)sum;
  return 0;
}

/* -I: one measurement's iteration times (timing.c fills them; the row that shows them is written before the next
 * measurement reuses them). */
typedef struct {
  double* iterUs;      /* -n: each iteration's slowest rank */
  double* agentIterUs; /* nAgents x -n */
  double* processUs;   /* processes x -n: each process's slowest agent (the JSON's per-process series) */
} iterBuffers_t;

static int allocIterBuffers(benchAgent_t* agent, iterBuffers_t buffers[BENCH_MAX_ENGINES][2]) {
  const size_t iters = (size_t)agent->args.iters;
  for (int engine = 0; engine < BENCH_MAX_ENGINES; engine++) {
    for (int place = 0; place < 2; place++) {
      iterBuffers_t* b = &buffers[engine][place];
      b->iterUs = (double*)calloc(iters, sizeof(double));
      b->agentIterUs = (double*)calloc(iters * (size_t)agent->nAgents, sizeof(double));
      b->processUs = (double*)calloc(iters * (size_t)agent->nAgents, sizeof(double));
      if (!b->iterUs || !b->agentIterUs || !b->processUs) {
        benchFail(agent, "out of memory for %zu iteration times", iters);
        return -1;
      }
    }
  }
  return 0;
}

static void freeIterBuffers(iterBuffers_t buffers[BENCH_MAX_ENGINES][2]) {
  for (int engine = 0; engine < BENCH_MAX_ENGINES; engine++) {
    for (int place = 0; place < 2; place++) {
      free(buffers[engine][place].iterUs);
      free(buffers[engine][place].agentIterUs);
      free(buffers[engine][place].processUs);
    }
  }
}

/* -I: the statistics of one measurement, and the per-process series nccl-tests writes (a process's slowest thread;
 * agents of one process are consecutive, -t of them). */
static int iterStatistics(benchAgent_t* agent, const iterBuffers_t* b, benchIterStats_t* stats) {
  const int iters = agent->args.iters;
  const int perProcess = agent->args.nThreads > 0 ? agent->args.nThreads : 1;
  const int processes = agent->nAgents / perProcess;
  for (int p = 0; p < processes; p++) {
    for (int iter = 0; iter < iters; iter++) {
      double slowest = 0;
      for (int t = 0; t < perProcess; t++)
        slowest = fmax(slowest, b->agentIterUs[(size_t)(p * perProcess + t) * iters + iter]);
      b->processUs[(size_t)p * iters + iter] = slowest;
    }
  }
  if (benchIterStatsCompute(b->iterUs, iters, agent->args.perIterSkip, stats) != 0) {
    benchFail(agent, "the per-iteration statistics of %d iterations (-K %d) failed", iters, agent->args.perIterSkip);
    return -1;
  }
  stats->processUs = b->processUs;
  stats->nProcesses = processes;
  return 0;
}

/* Times one engine at one size and placement, then checks -c runs on fresh data. Algorithm bandwidth counts the
 * larger buffer, as nccl-tests does for every collective. */
static int measure(benchAgent_t* agent, int engine, collCall_t* call, const iterBuffers_t* iter, benchMeasure_t* m) {
  if (checkFits(agent, call) != 0) return -1;
  if (benchRunOnce(agent, engine, launchCall, call, 1) != 0) return -1;
  benchTiming_t timing;
  memset(&timing, 0, sizeof(timing));
  if (iter) {
    timing.iterUs = iter->iterUs;
    timing.agentIterUs = iter->agentIterUs;
  }
  if (benchTimeLoop(agent, engine, launchCall, call, &timing) != 0) return -1;
  const size_t moved = (call->elems.send > call->elems.recv ? call->elems.send : call->elems.recv) *
                       benchTypeSize(call->type);
  m->timeUs = agent->args.cputime ? timing.cpuUs : timing.timeUs;
  m->algBw = benchAlgBw(moved, m->timeUs * 1.0e-6);
  m->busBw = m->algBw * call->collective->busFactor(agent->nranks);
  const int checked = !(call->inPlace && call->collective->inPlace == BENCH_IN_PLACE_UNCHECKED);
  m->wrong = agent->args.check > 0 && checked ? 0 : -1;
  m->valid = 1;
  if (iter && iterStatistics(agent, iter, &m->iter) != 0) return -1;
  for (int c = 0; c < agent->args.check && checked; c++) {
    if (checkRun(agent, engine, call, &m->wrong) != 0) return -1;
    if (m->wrong > 0) break;
  }
  return 0;
}

/* The engines a collective needs: each measured engine must have its call. */
static int checkCalls(benchAgent_t* agent, const benchCollective_t* collective) {
  for (int engine = 0; engine < agent->nEngines; engine++) {
    if (agent->engines[engine].ops->calls[collective->call]) continue;
    benchFail(agent, "%s has no %s call in this build: %s cannot run on it", agent->engineNames[engine],
              benchCallName(collective->call), collective->program);
    return -1;
  }
  return 0;
}

/* One row as it comes: the table, -J and --csv. */
static void emitRow(benchAgent_t* agent, const benchTable_t* table, benchOutputs_t* outputs, const benchRow_t* row) {
  if (!agent->output) return;
  benchProgress(agent, NULL);
  benchPrintRow(stdout, table, row);
  if (outputs->json) benchJsonRow(&outputs->writer, table, row, agent->args.iters);
  if (outputs->csv)
    benchCsvRows(outputs->csv, table, row, agent->buffersText, agent->args.graphLaunches, agent->nranks);
  benchOutputsFlush(outputs);
}

/* One table: the sweep over types, ops and sizes on the engines' current communicators, its footer, -J and --csv. */
static int runTable(benchAgent_t* agent) {
  const benchCollective_t* collective = agent->test->collective;
  const benchArgs_t* args = &agent->args;
  benchTable_t table = {collective->program, agent->nEngines,  {agent->engineNames[0], agent->engineNames[1]},
                        args->cputime,       args->timestamps, args->perIterTiming};
  if (checkCalls(agent, collective) != 0) return -1;
  if (collective->hasRoot && args->root >= agent->nranks) {
    benchFail(agent, "-r %d: the root must be one of the %d ranks", args->root, agent->nranks);
    return -1;
  }
  const int root = collective->hasRoot ? args->root : -1;
  int firstType = args->type == BENCH_ALL ? 0 : args->type;
  int lastType = args->type == BENCH_ALL ? BENCH_NUM_TYPES - 1 : args->type;
  int firstOp = !collective->hasOp ? BENCH_NO_OP : args->op == BENCH_ALL ? 0 : args->op;
  int lastOp = !collective->hasOp ? BENCH_NO_OP : args->op == BENCH_ALL ? BENCH_NUM_OPS - 1 : args->op;
  const int sweep = benchSweepLength(args);
  const int forever = args->runCycles == 0;
  /* nccl-tests' order: per type and op, the warm-up, then -N cycles of the whole sweep (-N 0: until a signal, so the
   * first type and op only, as in nccl-tests). */
  long long total = (long long)(lastType - firstType + 1) * (lastOp - firstOp + 1) * sweep *
                    (forever ? 1 : args->runCycles);
  iterBuffers_t iterBuffers[BENCH_MAX_ENGINES][2];
  memset(iterBuffers, 0, sizeof(iterBuffers));
  const int perIter = args->perIterTiming && args->graphLaunches == 0;
  benchOutputs_t outputs;
  benchSummaryAcc_t acc;
  memset(&acc, 0, sizeof(acc));
  int status = perIter ? allocIterBuffers(agent, iterBuffers) : 0;
  if (status == 0) status = benchOutputsOpen(agent, &outputs);
  if (status != 0) {
    freeIterBuffers(iterBuffers);
    return -1;
  }
  if (agent->output) benchPrintTableHeader(stdout, &table);
  static const char* const placeNames[2] = {"out-of-place", "in-place"};
  int stopped = 0, done = 0, stoppedCycle = 0;
  for (int type = firstType; type <= lastType && status == 0 && !stopped; type++) {
    for (int redop = firstOp; redop <= lastOp && status == 0 && !stopped; redop++) {
      status = warmUp(agent, type, redop, root);
      for (int cycle = 0; (forever || cycle < args->runCycles) && status == 0 && !stopped; cycle++) {
        for (size_t bytes = args->minBytes; status == 0;) {
          benchRow_t row;
          memset(&row, 0, sizeof(row));
          /* nccl-tests' columns: the size's elements (or the call's count), and the larger buffer's bytes
           * (all-gather, reduce-scatter: nranks x the call's count, which may be fewer than the size's elements). */
          collCall_t sized = makeCall(agent, bytes, type, redop, root, 0);
          row.count = collective->countIsCall ? sized.count : benchCountOf(bytes, type);
          row.bytes = sized.bytes;
          row.type = type;
          row.op = redop;
          row.root = root;
          row.cycle = cycle;
          for (int engine = 0; engine < agent->nEngines && status == 0; engine++) {
            for (int place = 0; place < 2 && status == 0; place++) {
              if (place == BENCH_IN_PLACE && collective->inPlace == BENCH_IN_PLACE_NONE) continue;
              char what[64], text[160];
              snprintf(what, sizeof(what), "%s %s", agent->engineNames[engine], placeNames[place]);
              benchFormatProgress(text, sizeof(text), (int)(done % (total < INT_MAX ? total : INT_MAX)) + 1,
                                  (int)(total < INT_MAX ? total : INT_MAX), &row, what);
              benchProgress(agent, text);
              collCall_t call = makeCall(agent, bytes, type, redop, root, place == BENCH_IN_PLACE);
              status = measure(agent, engine, &call, perIter ? &iterBuffers[engine][place] : NULL,
                               &row.m[engine][place]);
            }
          }
          if (status != 0) break;
          row.timestamp = (long long)time(NULL);
          done++;
          benchSummaryAdd(&table, &acc, &row);
          emitRow(agent, &table, &outputs, &row);
          if (forever) {
            const int agreed = benchStopAgreed(agent);
            if (agreed < 0) status = -1;
            stopped = agreed > 0;
            stoppedCycle = cycle;
            if (stopped) break;
          }
          size_t next = benchSweepNext(args, bytes);
          if (next == 0) break;
          bytes = next;
        }
      }
    }
  }
  benchProgress(agent, NULL);
  freeIterBuffers(iterBuffers);
  benchSummary_t summary;
  benchSummaryFinish(&table, &acc, &summary);
  if (status != 0) {
    benchOutputsClose(agent, &outputs, &table, &summary, agent->error);
    return -1;
  }
  if (stopped && agent->output) printf("# Stopped on a signal (-N 0) after %d rows, in cycle %d\n", done, stoppedCycle);
  int wrong = 0;
  for (int engine = 0; engine < table.nEngines; engine++) {
    if (!summary.errors[engine]) continue;
    wrong = 1;
    /* The table says FAILED on stdout; a script that keeps only stderr learns it here. */
    if (agent->output)
      fprintf(stderr, "%s: %s gave wrong results in %d of %d tests (size x placement; see #wrong)\n",
              collective->program, table.engineNames[engine], summary.errors[engine], 2 * done);
  }
  if (agent->output) benchPrintFooter(stdout, &table, &summary);
  if (benchOutputsClose(agent, &outputs, &table, &summary, NULL) != 0) status = -1;
  return status != 0 ? -1 : wrong;
}

/* --max-ctas: the table of each SM budget after the default one, on communicators made with it, each table's -J and
 * --csv in a file of its own (benchBudgetPath). Wrong results anywhere make the run's result wrong. */
static int runCollective(benchAgent_t* agent) {
  const benchArgs_t first = agent->args;
  const char* const engines = agent->nEngines > 1 ? "fcclConfig_t and ncclConfig_t" : "fcclConfig_t";
  if (first.nMaxCtas > 0 && agent->output) printf("#\n# SM budget: the default (no maxCTAs)\n");
  int result = runTable(agent);
  for (int b = 0; b < first.nMaxCtas && result >= 0; b++) {
    const int maxCtas = first.maxCtas[b];
    char json[4096], csv[4096];
    if ((first.jsonPath && benchBudgetPath(first.jsonPath, maxCtas, json, sizeof(json)) != 0) ||
        (first.csvPath && benchBudgetPath(first.csvPath, maxCtas, csv, sizeof(csv)) != 0)) {
      benchFail(agent, "--max-ctas %d: the output file's name is too long", maxCtas);
      return -1;
    }
    if (benchUseBudget(agent, maxCtas) != 0) return -1;
    if (agent->output) printf("#\n# SM budget: maxCTAs %d (%s)\n", maxCtas, engines);
    agent->args.jsonPath = first.jsonPath ? json : NULL;
    agent->args.csvPath = first.csvPath ? csv : NULL;
    const int table = runTable(agent);
    agent->args.jsonPath = first.jsonPath;
    agent->args.csvPath = first.csvPath;
    /* The first communicators current again, for the next budget or the teardown; after a failure the budget's
     * are aborted, as the teardown aborts the first ones. */
    if (table < 0) {
      benchDropBudget(agent);
      return -1;
    }
    if (benchUseBudget(agent, 0) != 0) return -1;
    if (table > result) result = table;
  }
  return result;
}

int benchCollectiveMain(int argc, char** argv, const benchCollective_t* collective) {
  const benchTest_t test = {collective->program, runCollective, collective, benchCollectiveTakes(collective)};
  return benchMain(argc, argv, &test);
}
