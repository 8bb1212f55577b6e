/*
 * all_reduce_perf: nccl-tests' all-reduce benchmark for fccl, with the same flags, the same table and the same
 * bus-bandwidth factor (2 (n - 1) / n), so its output diffs line by line against nccl-tests'. With --compare nccl the
 * same sizes run through ncclAllReduce on the same buffers in the same processes, printed beside fccl with the
 * speedup (NCCL time / fccl time). -R 1/2 registers the buffers with both libraries (fcclMemAlloc +
 * fcclCommRegister; ncclMemAlloc + ncclCommRegister, or a symmetric NCCL window).
 *
 *   all_reduce_perf -b 8 -e 1G -f 2 -d bfloat16 --compare nccl      every local GPU, one forked process each
 *   all_reduce_perf -b 8 -e 128M -f 2 -g 2 -G 20                     one process driving two GPUs, CUDA graphs
 *   torchrun --nproc-per-node 2 --no-python all_reduce_perf -b 1M -e 1G -f 4   ranks from torchrun's variables
 */
#include "bench/runtime.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  size_t count;
  size_t bytes;
  int type;
  int op;
  int inPlace;
} allReduceOp_t;

/* nccl-tests moves each iteration to a different slice of the buffers (bytes * (iter % slices)), so that small
 * sizes are not served from the L2 cache of the previous iteration; the -u offset shifts everything. */
static int launchAllReduce(benchAgent_t* agent, int engine, int gpu, int iter, void* arg) {
  const allReduceOp_t* op = (const allReduceOp_t*)arg;
  const benchBuffers_t* b = &agent->buffers[gpu][engine];
  size_t slices = op->bytes ? agent->args.maxBytes / op->bytes : 1;
  size_t offset = (size_t)agent->args.unalign * benchTypeSize(op->type) +
                  (slices > 1 ? op->bytes * ((size_t)iter % slices) : 0);
  char* recv = b->recv + offset;
  const char* send = op->inPlace ? recv : b->send + offset;
  return agent->engines[engine].ops->allReduce(agent, engine, gpu, send, recv, op->count, op->type, op->op, -1);
}

static int warmUp(benchAgent_t* agent, int type, int redop) {
  size_t sizes[2] = {agent->args.maxBytes, agent->args.minBytes};
  for (int engine = 0; engine < agent->nEngines; engine++) {
    for (int s = 0; s < 2 && agent->args.warmupIters > 0; s++) {
      allReduceOp_t op = {benchCountOf(sizes[s], type), 0, type, redop, 0};
      op.bytes = op.count * benchTypeSize(type);
      if (benchLaunchAll(agent, engine, launchAllReduce, &op, 0, agent->args.warmupIters) != 0) return -1;
      if (benchSync(agent, engine) != 0) return -1;
    }
  }
  return 0;
}

/* Times one engine at one size and placement, then checks -c runs on fresh data. */
static int measure(benchAgent_t* agent, int engine, allReduceOp_t* op, benchMeasure_t* m) {
  const size_t pad = (size_t)agent->args.unalign * benchTypeSize(op->type);
  if (benchRunOnce(agent, engine, launchAllReduce, op, 1) != 0) return -1;
  double timeUs = 0, cpuUs = 0;
  if (benchTimeLoop(agent, engine, launchAllReduce, op, &timeUs, &cpuUs) != 0) return -1;
  m->timeUs = agent->args.cputime ? cpuUs : timeUs;
  m->algBw = benchAlgBw(op->bytes, m->timeUs * 1.0e-6);
  m->busBw = m->algBw * benchAllReduceBusFactor(agent->nranks);
  m->wrong = agent->args.check > 0 ? 0 : -1;
  m->valid = 1;
  for (int c = 0; c < agent->args.check; c++) {
    uint64_t seed = ++agent->seedCounter;
    for (int gpu = 0; gpu < agent->nLocal; gpu++) {
      const benchBuffers_t* b = &agent->buffers[gpu][engine];
      if (benchUpload(agent, gpu, (op->inPlace ? b->recv : b->send) + pad, op->count, op->type, op->op, seed) != 0)
        return -1;
      if (!op->inPlace && benchPoison(agent, gpu, b->recv + pad, op->bytes) != 0) return -1;
    }
    if (benchRunOnce(agent, engine, launchAllReduce, op, 1) != 0) return -1;
    if (agent->args.injectCorruption && engine == BENCH_FCCL && agent->agent == 0 && op->count > 0 &&
        benchCorrupt(agent, 0, agent->buffers[0][engine].recv + pad, op->count / 2, op->type) != 0)
      return -1;
    double wrong = 0;
    for (int gpu = 0; gpu < agent->nLocal; gpu++) {
      int64_t local = 0;
      if (benchCheck(agent, gpu, agent->buffers[gpu][engine].recv + pad, op->count, op->type, op->op, seed,
                     &local) != 0)
        return -1;
      wrong += (double)local;
    }
    if (benchReduce(agent, &wrong, 1, BENCH_REDUCE_SUM) != 0) return -1;
    m->wrong = (int64_t)wrong;
    if (m->wrong > 0) break;
  }
  return 0;
}

static int writeJson(benchAgent_t* agent, const benchTable_t* table, const benchRow_t* rows, int nRows,
                     const benchSummary_t* summary) {
  benchJson_t json;
  FILE* file = benchJsonStart(agent, &json);
  if (!file) return -1;
  for (int r = 0; r < nRows; r++) benchJsonRow(&json, table, &rows[r]);
  benchJsonEndArray(&json);
  benchJsonKey(&json, "out_of_bounds");
  benchJsonBeginObject(&json);
  benchJsonKeyInt(&json, "count", summary->errors[0]);
  benchJsonKeyBool(&json, "okay", summary->errors[0] == 0);
  benchJsonEndObject(&json);
  benchJsonKey(&json, "average_bus_bandwidth");
  benchJsonBeginObject(&json);
  for (int engine = 0; engine < table->nEngines; engine++)
    benchJsonKeyDouble(&json, table->engineNames[engine], summary->avgBusBw[engine]);
  benchJsonEndObject(&json);
  benchJsonEndObject(&json);
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

static int runAllReduce(benchAgent_t* agent) {
  const benchArgs_t* args = &agent->args;
  benchTable_t table = {"all_reduce_perf", agent->nEngines, {agent->engineNames[0], agent->engineNames[1]},
                        args->cputime};
  int firstType = args->type == BENCH_ALL ? 0 : args->type;
  int lastType = args->type == BENCH_ALL ? BENCH_NUM_TYPES - 1 : args->type;
  int firstOp = args->op == BENCH_ALL ? 0 : args->op;
  int lastOp = args->op == BENCH_ALL ? BENCH_NUM_OPS - 1 : args->op;
  int sweep = benchSweepLength(args);
  int total = (lastType - firstType + 1) * (lastOp - firstOp + 1) * sweep;
  benchRow_t* rows = (benchRow_t*)calloc((size_t)total, sizeof(benchRow_t));
  if (!rows) {
    benchFail(agent, "out of memory");
    return -1;
  }
  if (agent->output) benchPrintTableHeader(stdout, &table);
  int nRows = 0, status = 0;
  static const char* const placeNames[2] = {"out-of-place", "in-place"};
  for (int type = firstType; type <= lastType && status == 0; type++) {
    for (int redop = firstOp; redop <= lastOp && status == 0; redop++) {
      status = warmUp(agent, type, redop);
      for (size_t bytes = args->minBytes; status == 0 && nRows < total;) {
        benchRow_t* row = &rows[nRows];
        row->count = benchCountOf(bytes, type);
        row->bytes = row->count * benchTypeSize(type);
        row->type = type;
        row->op = redop;
        row->root = -1;
        for (int engine = 0; engine < agent->nEngines && status == 0; engine++) {
          for (int place = 0; place < 2 && status == 0; place++) {
            char what[64], text[160];
            snprintf(what, sizeof(what), "%s %s", agent->engineNames[engine], placeNames[place]);
            benchFormatProgress(text, sizeof(text), nRows + 1, total, row, what);
            benchProgress(agent, text);
            allReduceOp_t op = {row->count, row->bytes, type, redop, place == BENCH_IN_PLACE};
            status = measure(agent, engine, &op, &row->m[engine][place]);
          }
        }
        if (status != 0) break;
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
      fprintf(stderr, "all_reduce_perf: %s gave wrong results in %d of %d tests (size x placement; see #wrong)\n",
              table.engineNames[engine], summary.errors[engine], 2 * nRows);
  }
  if (agent->output) {
    benchPrintFooter(stdout, &table, &summary);
    if (args->jsonPath && writeJson(agent, &table, rows, nRows, &summary) != 0) status = -1;
    if (args->csvPath && writeCsv(agent, &table, rows, nRows) != 0) status = -1;
  }
  free(rows);
  return status != 0 ? -1 : wrong;
}

int main(int argc, char** argv) {
  static const benchTest_t test = {"all_reduce_perf", runAllReduce, 1};
  return benchMain(argc, argv, &test);
}
