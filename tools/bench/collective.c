/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The driver every collective's program shares: for each type (-d) and op (-o), a warm-up at the largest and
 * smallest size, then for each size of the sweep and each engine, the timed loop out of place and in place, the
 * -c checks on fresh data, a table row; the footer, -J and --csv at the end. What differs between collectives comes
 * from their benchCollective_t.
 */
#include "collective.h"

#include <limits.h>
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

static collCall_t makeCall(const benchAgent_t* agent, size_t bytes, int type, int op, int root, int inPlace) {
  collCall_t call;
  memset(&call, 0, sizeof(call));
  call.collective = agent->test->collective;
  call.count = benchCountOf(bytes, type);
  if (call.collective->sizeIsLargest) call.count /= (size_t)agent->nranks;
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
static int launchCall(benchAgent_t* agent, int engine, int gpu, int iter, void* arg) {
  const collCall_t* call = (const collCall_t*)arg;
  size_t slices = call->bytes ? agent->args.maxBytes / call->bytes : 1;
  char* send = NULL;
  char* recv = NULL;
  placeCall(agent, engine, gpu, call, slices > 1 ? (size_t)iter % slices : 0, &send, &recv);
  return call->collective->launch(agent, engine, gpu, send, recv, call->count, call->type, call->op, call->root);
}

static int warmUp(benchAgent_t* agent, int type, int op, int root) {
  size_t sizes[2] = {agent->args.maxBytes, agent->args.minBytes};
  for (int engine = 0; engine < agent->nEngines; engine++) {
    for (int s = 0; s < 2 && agent->args.warmupIters > 0; s++) {
      collCall_t call = makeCall(agent, sizes[s], type, op, root, 0);
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

/* Times one engine at one size and placement, then checks -c runs on fresh data. Algorithm bandwidth counts the
 * larger buffer, as nccl-tests does for every collective. */
static int measure(benchAgent_t* agent, int engine, collCall_t* call, benchMeasure_t* m) {
  if (benchRunOnce(agent, engine, launchCall, call, 1) != 0) return -1;
  double timeUs = 0, cpuUs = 0;
  if (benchTimeLoop(agent, engine, launchCall, call, &timeUs, &cpuUs) != 0) return -1;
  const size_t moved = (call->elems.send > call->elems.recv ? call->elems.send : call->elems.recv) *
                       benchTypeSize(call->type);
  m->timeUs = agent->args.cputime ? cpuUs : timeUs;
  m->algBw = benchAlgBw(moved, m->timeUs * 1.0e-6);
  m->busBw = m->algBw * call->collective->busFactor(agent->nranks);
  m->wrong = agent->args.check > 0 ? 0 : -1;
  m->valid = 1;
  for (int c = 0; c < agent->args.check; c++) {
    if (checkRun(agent, engine, call, &m->wrong) != 0) return -1;
    if (m->wrong > 0) break;
  }
  return 0;
}

static int writeJson(benchAgent_t* agent, const benchTable_t* table, const benchRow_t* rows, int nRows,
                     const benchSummary_t* summary) {
  toolJson_t json;
  FILE* file = benchJsonStart(agent, &json);
  if (!file) return -1;
  for (int r = 0; r < nRows; r++) benchJsonRow(&json, table, &rows[r], agent->args.iters);
  char endTime[32];
  benchNowText(endTime, sizeof(endTime));
  benchJsonEnd(&json, table, summary, endTime);
  return benchCloseOutput(agent, file, agent->args.jsonPath);
}

static int writeCsv(benchAgent_t* agent, const benchTable_t* table, const benchRow_t* rows, int nRows) {
  FILE* file = benchOpenOutput(agent, agent->args.csvPath);
  if (!file) return -1;
  benchCsvHeader(file);
  for (int r = 0; r < nRows; r++)
    benchCsvRows(file, table, &rows[r], agent->buffersText, agent->args.graphLaunches, agent->nranks);
  return benchCloseOutput(agent, file, agent->args.csvPath);
}

/* The row after the last, growing rows as -N's cycles need it; NULL after benchFail when memory runs out. */
static benchRow_t* nextRow(benchAgent_t* agent, benchRow_t** rows, int* capacity, int nRows) {
  if (nRows == *capacity) {
    int grown = *capacity ? 2 * *capacity : 64;
    benchRow_t* more = (benchRow_t*)realloc(*rows, (size_t)grown * sizeof(benchRow_t));
    if (!more) {
      benchFail(agent, "out of memory for %d result rows", grown);
      return NULL;
    }
    *rows = more;
    *capacity = grown;
  }
  benchRow_t* row = &(*rows)[nRows];
  memset(row, 0, sizeof(*row));
  return row;
}

static int runCollective(benchAgent_t* agent) {
  const benchCollective_t* collective = agent->test->collective;
  const benchArgs_t* args = &agent->args;
  benchTable_t table = {collective->program, agent->nEngines, {agent->engineNames[0], agent->engineNames[1]},
                        args->cputime, args->timestamps};
  if (collective->hasRoot && args->root >= agent->nranks) {
    benchFail(agent, "-r %d: the root must be one of the %d ranks", args->root, agent->nranks);
    return -1;
  }
  const int root = collective->hasRoot ? args->root : -1;
  int firstType = args->type == BENCH_ALL ? 0 : args->type;
  int lastType = args->type == BENCH_ALL ? BENCH_NUM_TYPES - 1 : args->type;
  int firstOp = !collective->hasOp ? BENCH_NO_OP : args->op == BENCH_ALL ? 0 : args->op;
  int lastOp = !collective->hasOp ? BENCH_NO_OP : args->op == BENCH_ALL ? BENCH_NUM_OPS - 1 : args->op;
  int sweep = benchSweepLength(args);
  /* nccl-tests' order: per type and op, the warm-up, then -N cycles of the whole sweep. */
  long long total = (long long)(lastType - firstType + 1) * (lastOp - firstOp + 1) * sweep * args->runCycles;
  benchRow_t* rows = NULL;
  int capacity = 0, nRows = 0, status = 0;
  if (agent->output) benchPrintTableHeader(stdout, &table);
  static const char* const placeNames[2] = {"out-of-place", "in-place"};
  for (int type = firstType; type <= lastType && status == 0; type++) {
    for (int redop = firstOp; redop <= lastOp && status == 0; redop++) {
      status = warmUp(agent, type, redop, root);
      for (int cycle = 0; cycle < args->runCycles && status == 0; cycle++) {
        for (size_t bytes = args->minBytes; status == 0;) {
          benchRow_t* row = nextRow(agent, &rows, &capacity, nRows);
          if (!row) {
            status = -1;
            break;
          }
          /* nccl-tests' columns: the size's elements, and the larger buffer's bytes (all-gather, reduce-scatter:
           * nranks x the call's count, which may be fewer than the size's elements). */
          row->count = benchCountOf(bytes, type);
          row->bytes = makeCall(agent, bytes, type, redop, root, 0).bytes;
          row->type = type;
          row->op = redop;
          row->root = root;
          row->cycle = cycle;
          for (int engine = 0; engine < agent->nEngines && status == 0; engine++) {
            for (int place = 0; place < 2 && status == 0; place++) {
              char what[64], text[160];
              snprintf(what, sizeof(what), "%s %s", agent->engineNames[engine], placeNames[place]);
              benchFormatProgress(text, sizeof(text), nRows + 1, (int)(total < INT_MAX ? total : INT_MAX), row,
                                  what);
              benchProgress(agent, text);
              collCall_t call = makeCall(agent, bytes, type, redop, root, place == BENCH_IN_PLACE);
              status = measure(agent, engine, &call, &row->m[engine][place]);
            }
          }
          if (status != 0) break;
          row->timestamp = (long long)time(NULL);
          nRows++;
          if (agent->output) {
            benchProgress(agent, NULL);
            benchPrintRow(stdout, &table, row);
          }
          size_t next = benchSweepNext(args, bytes);
          if (next == 0) break;
          bytes = next;
        }
      }
    }
  }
  benchProgress(agent, NULL);
  if (status != 0) {
    free(rows);
    return -1;
  }
  benchSummary_t summary;
  benchSummarize(&table, rows, nRows, &summary);
  int wrong = 0;
  for (int engine = 0; engine < table.nEngines; engine++) {
    if (!summary.errors[engine]) continue;
    wrong = 1;
    /* The table says FAILED on stdout; a script that keeps only stderr learns it here. */
    if (agent->output)
      fprintf(stderr, "%s: %s gave wrong results in %d of %d tests (size x placement; see #wrong)\n",
              collective->program, table.engineNames[engine], summary.errors[engine], 2 * nRows);
  }
  if (agent->output) {
    benchPrintFooter(stdout, &table, &summary);
    if (args->jsonPath && writeJson(agent, &table, rows, nRows, &summary) != 0) status = -1;
    if (args->csvPath && writeCsv(agent, &table, rows, nRows) != 0) status = -1;
  }
  free(rows);
  return status != 0 ? -1 : wrong;
}

int benchCollectiveMain(int argc, char** argv, const benchCollective_t* collective) {
  const benchTest_t test = {collective->program, runCollective, collective};
  return benchMain(argc, argv, &test);
}
