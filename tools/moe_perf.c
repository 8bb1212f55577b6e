/* SPDX-License-Identifier: Apache-2.0 */
/*
 * moe_perf: fcclMoeDispatch and fcclMoeCombine timed in the nccl-tests shape (docs/benchmark.md#moe_perf,
 * docs/moe.md#what-is-measured-and-what-waits), one line per token count: each rank routes its tokens to top-k
 * distinct experts drawn uniformly (a seeded generator, so every rank knows every rank's routing). First, with -c 1
 * (the default), one dispatch and one combine run eagerly and every rank compares what it received and what it got
 * back with a host reference (moe_perf_check.c); the wrong elements of all ranks are the #wrong column, and any makes
 * the run fail, as in nccl-tests. Then -n calls are captured into one CUDA graph launched -G times per round (-G 1,
 * the default) or enqueued eagerly (-G 0), -w rounds warm up and -i rounds are timed with CUDA events; the time per
 * call is printed with the bandwidth as DeepEP counts it: the bytes of the token rows this rank receives in the
 * dispatch (each token once per receiving rank, its own tokens included; FP8 rows with their scales), and sends back
 * in the combine (bf16), over the call's time. Beside them, as a server would carry the same exchange otherwise:
 * with --compare nccl, NCCL's all-to-all-v of exactly those rows as a group of ncclSend/ncclRecv (dispatch-shaped and
 * combine-shaped; not checked), and always fccl's all-gather of every rank's tokens + reduce-scatter of the outputs
 * (vLLM's default expert-parallel path on one node). Rank 0's numbers are printed; -J and --csv write them as the
 * other benchmarks do. One forked process per rank, GPU rank % GPUs; with more ranks than GPUs the ranks share them
 * and the times say nothing of the links.
 *
 *   moe_perf                                every GPU, hidden 7168, top-8, 32 experts per rank, bf16
 *   moe_perf -g 8 -t 128,4096 -f 1 -b 24    FP8 dispatch, an SM budget of 24 blocks
 */
#include "moe_perf.h"

#include "bench/bench.h"
#include "cuda_status.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

#define PROGRAM "moe_perf"

/* Shared with the forked ranks: the unique ids and every rank's device line, each with the flag that it is there. */
struct shared {
  volatile int idReady, ncclIdReady;
  fcclUniqueId id;
  unsigned char ncclId[128];
  volatile int deviceReady[MOE_PERF_MAX_RANKS];
  char deviceLines[MOE_PERF_MAX_RANKS][BENCH_DEVICE_LINE];
};

#define CHECK_CUDA(call)                                                                                    \
  do {                                                                                                      \
    cudaError_t e_ = (call);                                                                                \
    if (e_ != cudaSuccess) {                                                                                \
      fprintf(stderr, "rank %d: %s:%d: %s: %s\n", rank, __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      return 1;                                                                                             \
    }                                                                                                       \
  } while (0)
#define CHECK_FCCL(call)                                                                                       \
  do {                                                                                                         \
    fcclResult_t r_ = (call);                                                                                  \
    if (r_ != fcclSuccess) {                                                                                   \
      fprintf(stderr, "rank %d: %s:%d: %s: %s: %s\n", rank, __FILE__, __LINE__, #call, fcclGetErrorString(r_), \
              fcclGetLastError(NULL));                                                                         \
      return 1;                                                                                                \
    }                                                                                                          \
  } while (0)

enum op { OP_DISPATCH, OP_COMBINE, OP_NCCL_DISPATCH, OP_NCCL_COMBINE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_KINDS };
/* The -J keys and the --csv placement column. */
static const char* const kOpNames[OP_KINDS] = {"dispatch",     "combine",    "nccl_dispatch",
                                               "nccl_combine", "all_gather", "reduce_scatter"};

/* Enqueues one call of op on the rank's stream; 0 on success. */
static int enqueue(struct moePerfRank* c, enum op op) {
  const struct moePerfOptions* o = c->o;
  const int fp8 = o->fp8;
  const size_t count = c->tokens * o->hidden;
  switch (op) {
    case OP_DISPATCH: {
      const fcclMoeRecv_t recv = {c->recvX, fp8 ? c->recvScales : NULL, NULL, NULL, c->recvCounts, NULL};
      return fcclMoeDispatch(c->x, fp8 ? c->xScales : NULL, c->topk, fcclInt32, c->weights, c->tokens,
                             fp8 ? fcclFloat8e4m3 : fcclBfloat16, &recv, o->blocks, c->layout,
                             c->stream) != fcclSuccess;
    }
    case OP_COMBINE:
      return fcclMoeCombine(c->y, c->out, c->weights, c->tokens, fcclBfloat16, o->blocks, c->layout, c->stream) !=
             fcclSuccess;
    case OP_ALL_GATHER: return fcclAllGather(c->y, c->gathered, count, fcclBfloat16, c->comm, c->stream) != fcclSuccess;
    case OP_REDUCE_SCATTER:
      return fcclReduceScatter(c->gathered, c->partial, count, fcclBfloat16, fcclSum, c->comm, c->stream) !=
             fcclSuccess;
    case OP_NCCL_DISPATCH:
    case OP_NCCL_COMBINE: {
#if FCCL_HAVE_NCCL
      /* An all-to-all-v as a group of sends and receives; the combine sends back what the dispatch received, as
       * bf16 rows. */
      const int back = op == OP_NCCL_COMBINE;
      size_t sendOffset = 0, recvOffset = 0;
      if (ncclGroupStart() != ncclSuccess) return 1;
      for (int peer = 0; peer < o->nranks; peer++) {
        size_t sendBytes = back ? c->recvBytes[peer] : c->sendBytes[peer];
        size_t recvBytes = back ? c->sendBytes[peer] : c->recvBytes[peer];
        if (back) { /* rows of hidden bf16 (the dispatch's may be FP8 rows with their scales) */
          sendBytes = sendBytes / c->rowBytes * o->hidden * 2;
          recvBytes = recvBytes / c->rowBytes * o->hidden * 2;
        }
        if (ncclSend((char*)c->ncclSend + sendOffset, sendBytes, ncclUint8, peer, c->nccl, c->stream) != ncclSuccess ||
            ncclRecv((char*)c->ncclRecv + recvOffset, recvBytes, ncclUint8, peer, c->nccl, c->stream) != ncclSuccess) {
          (void)ncclGroupEnd();
          return 1;
        }
        sendOffset += sendBytes;
        recvOffset += recvBytes;
      }
      return ncclGroupEnd() != ncclSuccess;
#else
      return 1;
#endif
    }
    default: return 1;
  }
}

/* Microseconds per call of op: -n calls per round (in one graph launched -G times, or eagerly), -w warm-up rounds,
 * -i timed ones; < 0 on failure. */
static double timeOp(struct moePerfRank* c, enum op op) {
  const struct moePerfOptions* o = c->o;
  const int rank = c->rank;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  if (o->graph) {
    int failed = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess;
    for (int k = 0; k < o->calls && !failed; k++) failed = enqueue(c, op);
    const cudaError_t end = cudaStreamEndCapture(c->stream, &graph);
    if (failed || end != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
      fprintf(stderr, "rank %d: %s: capture failed: %s\n", rank, kOpNames[op], fcclGetLastError(NULL));
      if (graph) cudaGraphDestroy(graph);
      return -1.0;
    }
  }
  cudaEvent_t start = NULL, stop = NULL;
  double us = -1.0;
  int ok = cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess;
  for (int round = 0; round < o->warmup + o->iters && ok; round++) {
    if (round == o->warmup)
      ok = fcclBarrier(c->comm, c->stream) == fcclSuccess && cudaEventRecord(start, c->stream) == cudaSuccess;
    for (int g = 0; g < o->graph && ok; g++) ok = cudaGraphLaunch(exec, c->stream) == cudaSuccess;
    for (int k = 0; k < o->calls && ok && !o->graph; k++) ok = enqueue(c, op) == 0;
  }
  ok = ok && cudaEventRecord(stop, c->stream) == cudaSuccess && cudaStreamSynchronize(c->stream) == cudaSuccess;
  float ms = 0;
  const double calls = (double)o->iters * o->calls * (o->graph ? o->graph : 1);
  if (ok && cudaEventElapsedTime(&ms, start, stop) == cudaSuccess)
    us = (double)ms * 1000.0 / calls;
  else
    fprintf(stderr, "rank %d: %s failed: %s\n", rank, kOpNames[op], fcclGetLastError(c->comm));
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  return us;
}

static int deviceAlloc(void** p, size_t bytes) { return cudaMalloc(p, bytes ? bytes : 16) != cudaSuccess; }

/* ---- what rank 0 prints and writes ------------------------------------------------------------------------------ */

struct report {
  FILE *json, *csv;
  toolJson_t writer;
  benchTable_t table;
  benchSummaryAcc_t acc;
  double logNcclSpeedup[2]; /* dispatch, combine: sums of log(nccl time / fccl time) */
  int rows;
};

/* One case's results: us per op (0: not measured), the bytes each op counts, the case's wrong elements (-1: not
 * checked). */
struct caseResult {
  size_t tokens, received;
  double us[OP_KINDS], bytes[OP_KINDS];
  int64_t wrong;
};

static void printHeader(const struct moePerfOptions* o, const struct shared* sh, int gpus, int nccl) {
  int version = 0;
  (void)fcclGetVersion(&version);
  printf("# fccl %d.%d.%d %s (nccl-tests layout) build=%s", version / 10000, version / 100 % 100, version % 100,
         PROGRAM, FCCL_BUILD_TYPE);
#if FCCL_HAVE_NCCL
  int ncclVersion = 0;
  (void)ncclGetVersion(&ncclVersion);
  printf(" nccl-headers=%d nccl-library=%d", NCCL_VERSION_CODE, ncclVersion);
#endif
  printf("\n# Collective test starting: %s\n", PROGRAM);
  printf(
      "# nRanks %d hidden %zu top-%d of %d experts (%d per rank) dispatch %s combine bfloat16 blocks %d warmup "
      "iters: %d iters: %d calls: %d validation: %d graph: %d\n",
      o->nranks, o->hidden, o->topk, o->perRank * o->nranks, o->perRank, o->fp8 ? "float8e4m3" : "bfloat16", o->blocks,
      o->warmup, o->iters, o->calls, o->check, o->graph);
  if (strcmp(FCCL_BUILD_TYPE, "debug") == 0)
    printf("# Warning: a debug build (-O0): these are not the times of an optimised fccl\n");
  printf("# Launch: %d processes forked here, %d ranks on %d GPU%s%s | compare: %s\n", o->nranks, o->nranks, gpus,
         gpus == 1 ? "" : "s", o->nranks > gpus ? " (shared: the times say nothing of the links)" : "",
         nccl ? "nccl (all-to-all-v as grouped ncclSend/ncclRecv)" : "none");
  printf("#\n# Using devices\n");
  for (int r = 0; r < o->nranks; r++) printf("%s\n", sh->deviceLines[r]);
  printf(
      "#\n# bandwidth: the bytes of the token rows rank 0 receives (dispatch) or sends back (combine), each token "
      "once per rank, over the time (DeepEP's count); #wrong: every rank's wrong elements after one checked "
      "dispatch + combine\n");
  printf("#%7s %10s %11s %9s %11s %9s %8s %11s %11s %11s %11s\n", "tokens", "recv_tok", "dispatch", "disp_bw",
         "combine", "comb_bw", "#wrong", "nccl_disp", "nccl_comb", "all_gather", "red_scat");
  printf("#%7s %10s %11s %9s %11s %9s %8s %11s %11s %11s %11s\n", "", "", "(us)", "(GB/s)", "(us)", "(GB/s)", "",
         "(us)", "(us)", "(us)", "(us)");
}

/* Opens -J and --csv (rank 0, after the ranks have their devices): 0, or 1 after saying why. */
static int openReport(struct report* r, const struct moePerfOptions* o, const struct shared* sh, int argc, char** argv,
                      int gpus, int nccl) {
  memset(r, 0, sizeof(*r));
  r->table.program = PROGRAM;
  r->table.nEngines = 1;
  r->table.engineNames[0] = "fccl";
  if (o->csvPath) {
    if (!(r->csv = fopen(o->csvPath, "w"))) {
      fprintf(stderr, "%s: --csv: %s: %s\n", PROGRAM, o->csvPath, strerror(errno));
      return 1;
    }
    benchCsvHeader(r->csv);
  }
  if (o->jsonPath) {
    if (!(r->json = fopen(o->jsonPath, "w"))) {
      fprintf(stderr, "%s: -J: %s: %s\n", PROGRAM, o->jsonPath, strerror(errno));
      return 1;
    }
    benchArgs_t args; /* what the nccl-tests "config" object says of this run */
    benchArgsDefaults(&args);
    args.iters = o->iters;
    args.warmupIters = o->warmup;
    args.graphLaunches = o->graph;
    args.check = o->check;
    args.minBytes = args.maxBytes = 0; /* token counts, not sizes: each result says its own */
    int version = 0, ncclVersion = 0;
    (void)fcclGetVersion(&version);
#if FCCL_HAVE_NCCL
    (void)ncclGetVersion(&ncclVersion);
#endif
    char versionText[32], now[32], launch[96];
    snprintf(versionText, sizeof(versionText), "%d.%d.%d", version / 10000, version / 100 % 100, version % 100);
    benchFormatTime((long long)time(NULL), now, sizeof(now));
    snprintf(launch, sizeof(launch), "%d processes forked here", o->nranks);
    benchJsonInfo_t info = {
        .program = PROGRAM,
        .fcclVersion = versionText,
        .buildType = FCCL_BUILD_TYPE,
        .ncclVersion = ncclVersion,
        .startTime = now,
        .argc = argc,
        .argv = argv,
        .envp = environ,
        .args = &args,
        .nranks = o->nranks,
        .launch = launch,
        .sharedGpus = o->nranks > gpus,
        .deviceLines = (const char(*)[BENCH_DEVICE_LINE])sh->deviceLines,
        .nDevices = o->nranks,
        .nEngines = nccl ? 2 : 1,
    };
    info.engineNames[0] = "fccl";
    info.engineNames[1] = "nccl";
    info.buffers[0] = info.buffers[1] = "plain";
    info.initSelfBytes[0] = info.initSelfBytes[1] = -1;
    benchJsonBegin(&r->writer, r->json, &info);
  }
  return 0;
}

static void reportCase(struct report* r, const struct moePerfOptions* o, const struct caseResult* res, int nccl) {
  double bw[OP_KINDS];
  for (int op = 0; op < OP_KINDS; op++) bw[op] = res->us[op] > 0 ? res->bytes[op] / res->us[op] / 1e3 : 0.0;
  char wrong[32];
  if (res->wrong < 0)
    snprintf(wrong, sizeof(wrong), "N/A");
  else
    snprintf(wrong, sizeof(wrong), "%lld", (long long)res->wrong);
  printf(" %7zu %10zu %11.2f %9.2f %11.2f %9.2f %8s ", res->tokens, res->received, res->us[OP_DISPATCH],
         bw[OP_DISPATCH], res->us[OP_COMBINE], bw[OP_COMBINE], wrong);
  if (nccl)
    printf("%11.2f %11.2f ", res->us[OP_NCCL_DISPATCH], res->us[OP_NCCL_COMBINE]);
  else
    printf("%11s %11s ", "-", "-");
  printf("%11.2f %11.2f\n", res->us[OP_ALL_GATHER], res->us[OP_REDUCE_SCATTER]);
  fflush(stdout);
  /* The footer's numbers: a case with wrong elements is an error, the mean of both bandwidths the bus bandwidth. */
  benchRow_t row;
  memset(&row, 0, sizeof(row));
  row.m[0][0].valid = row.m[0][1].valid = 1;
  row.m[0][0].busBw = bw[OP_DISPATCH];
  row.m[0][1].busBw = bw[OP_COMBINE];
  row.m[0][0].wrong = res->wrong > 0 ? res->wrong : 0;
  row.m[0][1].wrong = 0;
  benchSummaryAdd(&r->table, &r->acc, &row);
  if (nccl && res->us[OP_DISPATCH] > 0 && res->us[OP_COMBINE] > 0) {
    r->logNcclSpeedup[0] += log(res->us[OP_NCCL_DISPATCH] / res->us[OP_DISPATCH]);
    r->logNcclSpeedup[1] += log(res->us[OP_NCCL_COMBINE] / res->us[OP_COMBINE]);
  }
  r->rows++;
  for (int op = 0; op < OP_KINDS && r->csv; op++) {
    if (res->us[op] <= 0) continue;
    const int fccl = op != OP_NCCL_DISPATCH && op != OP_NCCL_COMBINE;
    const int checked = op == OP_DISPATCH || op == OP_COMBINE;
    fprintf(r->csv, "%s,%s,plain,%d,%d,%.0f,%zu,%s,%s,%s,%.3f,%.4f,%.4f,%lld,,,,\n", PROGRAM, fccl ? "fccl" : "nccl",
            o->graph, o->nranks, res->bytes[op], res->tokens,
            (op == OP_DISPATCH || op == OP_NCCL_DISPATCH) && o->fp8 ? "float8e4m3" : "bfloat16",
            op == OP_REDUCE_SCATTER ? "sum" : "none", kOpNames[op], res->us[op], bw[op], bw[op],
            checked ? (long long)res->wrong : -1LL);
  }
  if (r->csv) fflush(r->csv);
  if (r->json) {
    toolJson_t* json = &r->writer;
    toolJsonBeginObject(json, NULL);
    toolJsonInt(json, "tokens", (long long)res->tokens);
    toolJsonInt(json, "received_tokens", (long long)res->received);
    toolJsonInt(json, "hidden", (long long)o->hidden);
    toolJsonInt(json, "topk", o->topk);
    toolJsonInt(json, "experts", o->perRank * o->nranks);
    toolJsonString(json, "type", o->fp8 ? "float8e4m3" : "bfloat16");
    toolJsonInt(json, "blocks", o->blocks);
    if (res->wrong < 0)
      toolJsonNull(json, "nwrong");
    else
      toolJsonInt(json, "nwrong", res->wrong);
    for (int op = 0; op < OP_KINDS; op++) {
      if (res->us[op] <= 0) continue;
      toolJsonBeginObject(json, kOpNames[op]);
      toolJsonString(json, "engine", op == OP_NCCL_DISPATCH || op == OP_NCCL_COMBINE ? "nccl" : "fccl");
      toolJsonInt(json, "size", (long long)res->bytes[op]);
      toolJsonDouble(json, "time", res->us[op]);
      toolJsonDouble(json, "alg_bw", bw[op]);
      toolJsonEnd(json);
    }
    toolJsonEnd(json);
    fflush(r->json);
  }
}

/* The footer, and -J's end; 0, or 1 when a file could not be written. */
static int closeReport(struct report* r, int nccl, const char* failure) {
  benchSummary_t summary;
  benchSummaryFinish(&r->table, &r->acc, &summary);
  if (!failure) {
    if (nccl && r->rows)
      printf(
          "# nccl (grouped send/recv) vs fccl: %.2fx dispatch, %.2fx combine (geometric mean of nccl time / fccl "
          "time)\n",
          exp(r->logNcclSpeedup[0] / r->rows), exp(r->logNcclSpeedup[1] / r->rows));
    benchPrintFooter(stdout, &r->table, &summary);
  }
  int failed = 0;
  if (r->json) {
    char now[32];
    benchFormatTime((long long)time(NULL), now, sizeof(now));
    benchJsonEnd(&r->writer, &r->table, &summary, failure, now);
    failed |= ferror(r->json) != 0;
    failed |= fclose(r->json) != 0;
  }
  if (r->csv) {
    failed |= ferror(r->csv) != 0;
    failed |= fclose(r->csv) != 0;
  }
  if (failed) fprintf(stderr, "%s: writing -J or --csv failed\n", PROGRAM);
  return failed;
}

/* ---- one rank ---------------------------------------------------------------------------------------------------- */

/* Waits (bounded) for flag, set by another rank; 0, or 1 after saying what did not come. */
static int awaitFlag(volatile int* flag, int rank, const char* what) {
  for (const time_t until = time(NULL) + 60; !__atomic_load_n(flag, __ATOMIC_ACQUIRE); usleep(1000))
    if (time(NULL) > until) {
      fprintf(stderr, "rank %d: no %s in 60 s\n", rank, what);
      return 1;
    }
  return 0;
}

static int allocate(struct moePerfRank* c) {
  const struct moePerfOptions* o = c->o;
  const size_t hidden = o->hidden, rowBf16 = hidden * 2, maxTokens = c->maxTokens;
  const size_t nrows = (size_t)o->nranks * maxTokens;
  return deviceAlloc(&c->x, maxTokens * rowBf16) || deviceAlloc(&c->xScales, maxTokens * hidden / 128 * 4) ||
         deviceAlloc(&c->topk, maxTokens * (size_t)o->topk * 4) ||
         deviceAlloc(&c->weights, maxTokens * (size_t)o->topk * 4) || deviceAlloc(&c->recvX, c->recvRows * rowBf16) ||
         deviceAlloc(&c->recvScales, c->recvRows * hidden / 128 * 4) || deviceAlloc(&c->recvWeights, c->recvRows * 4) ||
         deviceAlloc(&c->recvSources, c->recvRows * 4) || deviceAlloc(&c->recvCounts, (size_t)o->perRank * 4) ||
         deviceAlloc(&c->recvOffsets, (size_t)(o->perRank + 1) * 4) || deviceAlloc(&c->y, c->recvRows * rowBf16) ||
         deviceAlloc(&c->out, maxTokens * rowBf16) || deviceAlloc(&c->gathered, nrows * rowBf16) ||
         deviceAlloc(&c->partial, maxTokens * rowBf16) || deviceAlloc(&c->wrong, sizeof(int64_t)) ||
         (o->nccl && (deviceAlloc(&c->ncclSend, nrows * rowBf16) || deviceAlloc(&c->ncclRecv, nrows * rowBf16)));
}

/* Checks and times one token count; rank 0 reports it. 0, or 1 after saying why. */
static int runCase(struct moePerfRank* c, size_t tokens, struct report* report, int nccl) {
  const struct moePerfOptions* o = c->o;
  struct caseResult res;
  memset(&res, 0, sizeof(res));
  res.tokens = c->tokens = tokens;
  res.wrong = -1;
  if (moePerfUpload(c)) return 1;
  if (o->check) {
    /* Every rank checks, then the wrong elements of all ranks are summed (fccl's all-reduce, bounded by its
     * timeout: a rank whose check failed still takes part, with a count that fails the case). */
    int64_t wrong = 0;
    const int failed = moePerfCheck(c, &wrong);
    if (failed) wrong = INT64_MAX / MOE_PERF_MAX_RANKS;
    if (cudaMemcpyAsync(c->wrong, &wrong, sizeof(wrong), cudaMemcpyHostToDevice, c->stream) != cudaSuccess ||
        fcclAllReduce(c->wrong, c->wrong, 1, fcclInt64, fcclSum, c->comm, c->stream) != fcclSuccess ||
        cudaMemcpyAsync(&res.wrong, c->wrong, sizeof(wrong), cudaMemcpyDeviceToHost, c->stream) != cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess) {
      fprintf(stderr, "rank %d: summing the wrong elements failed: %s\n", c->rank, fcclGetLastError(c->comm));
      return 1;
    }
    /* A rank whose check could not run stops every rank here, rather than leaving them to time out in the next call. */
    if (failed || res.wrong >= INT64_MAX / MOE_PERF_MAX_RANKS) return 1;
  }
  for (int op = 0; op < OP_KINDS; op++) {
    if ((op == OP_NCCL_DISPATCH || op == OP_NCCL_COMBINE) && !nccl) continue;
    /* The combines return the rows of a dispatch: one, eagerly, before they are timed. */
    if (op == OP_COMBINE && (enqueue(c, OP_DISPATCH) || cudaStreamSynchronize(c->stream) != cudaSuccess)) {
      fprintf(stderr, "rank %d: the dispatch before the combines failed: %s\n", c->rank, fcclGetLastError(c->comm));
      return 1;
    }
    res.us[op] = timeOp(c, (enum op)op);
    if (res.us[op] < 0) return 1;
  }
  if (c->rank != 0) return 0;
  for (int peer = 0; peer < o->nranks; peer++) res.received += c->recvBytes[peer] / c->rowBytes;
  const double combineBytes = (double)res.received * (double)o->hidden * 2;
  res.bytes[OP_DISPATCH] = res.bytes[OP_NCCL_DISPATCH] = (double)res.received * (double)c->rowBytes;
  res.bytes[OP_COMBINE] = res.bytes[OP_NCCL_COMBINE] = combineBytes;
  res.bytes[OP_ALL_GATHER] = res.bytes[OP_REDUCE_SCATTER] = (double)o->nranks * (double)tokens * (double)o->hidden * 2;
  reportCase(report, o, &res, nccl);
  return 0;
}

static int rankMain(int rank, int gpus, const struct moePerfOptions* o, struct shared* sh, int argc, char** argv) {
  if (o->nranks > gpus) { /* NCCL takes ranks that share a GPU as hosts of their own */
    char host[32];
    snprintf(host, sizeof(host), "moe-perf-rank-%d", rank);
    setenv("NCCL_HOSTID", host, 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  }
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  CHECK_CUDA(cudaSetDevice(rank % gpus));
  struct cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, rank % gpus));
  char host[64] = "?";
  gethostname(host, sizeof(host));
  host[sizeof(host) - 1] = '\0';
  snprintf(sh->deviceLines[rank], BENCH_DEVICE_LINE,
           "#  Rank %2d Group %2d Pid %6d on %10.64s device %2d [%04x:%02x:%02x] %.96s", rank, 0, (int)getpid(), host,
           rank % gpus, prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, prop.name);
  __atomic_store_n(&sh->deviceReady[rank], 1, __ATOMIC_RELEASE);
  if (rank == 0) {
    CHECK_FCCL(fcclGetUniqueId((fcclUniqueId*)&sh->id));
    __atomic_store_n(&sh->idReady, 1, __ATOMIC_RELEASE);
  } else if (awaitFlag(&sh->idReady, rank, "unique id from rank 0")) {
    return 1;
  }
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = o->nranks > gpus;
  struct moePerfRank c;
  memset(&c, 0, sizeof(c));
  c.rank = rank;
  c.o = o;
  CHECK_FCCL(fcclCommInitRankConfig(&c.comm, o->nranks, *(fcclUniqueId*)&sh->id, rank, &config));
  CHECK_CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  for (int i = 0; i < o->ntokens; i++) c.maxTokens = o->tokens[i] > c.maxTokens ? o->tokens[i] : c.maxTokens;
  fcclMoeConfig_t moe = FCCL_MOE_CONFIG_INITIALIZER;
  moe.numExperts = o->perRank * o->nranks;
  moe.topk = o->topk;
  moe.hidden = o->hidden;
  moe.maxTokensPerRank = c.maxTokens;
  moe.blocks = o->blocks;
  CHECK_FCCL(fcclMoeLayoutCreate(c.comm, &moe, &c.layout));
  CHECK_FCCL(fcclMoeLayoutRecvRows(c.layout, &c.recvRows));
  c.rowBytes = o->fp8 ? o->hidden + o->hidden / 128 * 4 : o->hidden * 2;
  int failed = allocate(&c);
  if (failed)
    fprintf(stderr, "rank %d: out of device memory for %zu tokens x hidden %zu\n", rank, c.maxTokens, o->hidden);
  int nccl = 0;
#if FCCL_HAVE_NCCL
  if (o->nccl && !failed) {
    if (rank == 0) {
      if (ncclGetUniqueId((ncclUniqueId*)sh->ncclId) != ncclSuccess) return 1;
      __atomic_store_n(&sh->ncclIdReady, 1, __ATOMIC_RELEASE);
    }
    if (awaitFlag(&sh->ncclIdReady, rank, "NCCL unique id from rank 0")) return 1;
    ncclUniqueId id;
    memcpy(&id, sh->ncclId, sizeof(id));
    if (ncclCommInitRank(&c.nccl, o->nranks, id, rank) != ncclSuccess) {
      fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
      return 1;
    }
    nccl = 1;
  }
#endif
  struct report report;
  memset(&report, 0, sizeof(report));
  if (rank == 0 && !failed) {
    for (int r = 0; r < o->nranks && !failed; r++) failed = awaitFlag(&sh->deviceReady[r], rank, "device line");
    if (!failed) printHeader(o, sh, gpus, nccl);
    failed = failed || openReport(&report, o, sh, argc, argv, gpus, nccl);
  }
  int64_t wrongCases = 0;
  for (int i = 0; i < o->ntokens && !failed; i++) failed = runCase(&c, o->tokens[i], &report, nccl);
  fcclResult_t async = fcclSuccess;
  if (fcclCommGetAsyncError(c.comm, &async) != fcclSuccess || async != fcclSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, fcclGetLastError(c.comm));
    failed = 1;
  }
  if (rank == 0) {
    wrongCases = report.acc.errors[0];
    failed |= closeReport(&report, nccl, failed ? "a rank failed (its message is on standard error)" : NULL);
  }
  void* buffers[] = {c.x,           c.xScales,     c.topk,       c.weights,     c.recvX,   c.recvScales,
                     c.recvWeights, c.recvSources, c.recvCounts, c.recvOffsets, c.y,       c.out,
                     c.gathered,    c.partial,     c.wrong,      c.ncclSend,    c.ncclRecv};
  for (size_t b = 0; b < sizeof(buffers) / sizeof(buffers[0]); b++)
    if (buffers[b]) cudaFree(buffers[b]);
  if (fcclMoeLayoutDestroy(c.layout) != fcclSuccess) failed = 1;
#if FCCL_HAVE_NCCL
  if (nccl) ncclCommDestroy(c.nccl);
#endif
  if (fcclCommDestroy(c.comm) != fcclSuccess) failed = 1;
  cudaStreamDestroy(c.stream);
  return failed || wrongCases ? 1 : 0;
}

/* ---- flags and the launcher -------------------------------------------------------------------------------------- */

static void usage(FILE* f) {
  fprintf(f,
          "usage: moe_perf [flags]\n"
          "  -g <ranks>            ranks, one forked process each (0: every GPU, at most %d; default 0)\n"
          "  -t <tokens,...>       token counts per rank, one line each (128,512,1024,4096; at most %d)\n"
          "  -H <hidden>           elements per token row, a multiple of 128 up to 65536 (7168)\n"
          "  -k <topk>             experts per token, 1..8 (8)\n"
          "  -e <experts>          experts per rank (32)\n"
          "  -f <0|1>              1: FP8 e4m3 dispatch with fp32 scales per 128 elements (0: bf16)\n"
          "  -b <blocks>           the calls' SM budget in thread blocks (0: the layout's default)\n"
          "  -n <calls>            calls per round (10)\n"
          "  -w <rounds>           warm-up rounds (5)\n"
          "  -i <rounds>           timed rounds (20)\n"
          "  -G,--cudagraph <n>    capture a round's calls in a CUDA graph, launch it n times per round (0: eager;\n"
          "                        default 1)\n"
          "  -c,--check <0|1>      one dispatch + combine checked against a host reference per token count, the\n"
          "                        #wrong column (1)\n"
          "  -J,--output_file <f>  write the results as JSON (nccl-tests' layout, these results' own members)\n"
          "  --csv <file>          write the results as CSV (the other benchmarks' columns)\n"
          "  --compare nccl|none   NCCL's all-to-all-v of the same rows (grouped ncclSend/ncclRecv) beside fccl\n"
          "  -h,--help             this text\n",
          MOE_PERF_MAX_RANKS, MOE_PERF_MAX_TOKEN_COUNTS);
}

/* "a,b,c" into out; the count, 0 when malformed. */
static int parseList(const char* text, size_t* out, int max) {
  int n = 0;
  for (const char* p = text; *p;) {
    char* end = NULL;
    errno = 0;
    const unsigned long long v = strtoull(p, &end, 10);
    if (errno || end == p || v == 0 || *p == '-' || n == max) return 0;
    out[n++] = (size_t)v;
    if (*end == ',' && end[1])
      end++;
    else if (*end)
      return 0;
    p = end;
  }
  return n;
}

/* A whole decimal number in [low, high]; 0, or -1. */
static int parseNumber(const char* text, long long low, long long high, long long* value) {
  char* end = NULL;
  errno = 0;
  const long long v = strtoll(text, &end, 10);
  if (errno || end == text || *end || v < low || v > high) return -1;
  *value = v;
  return 0;
}

/* The flags into o: 0, 1 (--help: printed), or 2 (a bad flag: said, with the usage). */
static int parseFlags(int argc, char** argv, struct moePerfOptions* o) {
  static const struct option longFlags[] = {{"cudagraph", required_argument, NULL, 'G'},
                                            {"check", required_argument, NULL, 'c'},
                                            {"output_file", required_argument, NULL, 'J'},
                                            {"csv", required_argument, NULL, 'V'},
                                            {"compare", required_argument, NULL, 'C'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
  const struct {
    int flag;
    long long low, high;
    int* target;
  } numbers[] = {{'g', 0, MOE_PERF_MAX_RANKS, &o->nranks},
                 {'k', 1, 8, &o->topk},
                 {'e', 1, 1024, &o->perRank},
                 {'f', 0, 1, &o->fp8},
                 {'b', 0, 65535, &o->blocks},
                 {'n', 1, 100000, &o->calls},
                 {'w', 0, 100000, &o->warmup},
                 {'i', 1, 100000, &o->iters},
                 {'G', 0, 100000, &o->graph},
                 {'c', 0, 1, &o->check}};
  int opt;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":g:t:H:k:e:f:b:n:w:i:G:c:J:h", longFlags, NULL)) != -1) {
    long long value = 0;
    int known = 0;
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
      if (numbers[i].flag != opt) continue;
      known = 1;
      if (parseNumber(optarg, numbers[i].low, numbers[i].high, &value)) {
        fprintf(stderr, "%s: -%c: '%s' is not a number in %lld..%lld\n", PROGRAM, opt, optarg, numbers[i].low,
                numbers[i].high);
        usage(stderr);
        return 2;
      }
      *numbers[i].target = (int)value;
    }
    if (known) continue;
    switch (opt) {
      case 't':
        if ((o->ntokens = parseList(optarg, o->tokens, MOE_PERF_MAX_TOKEN_COUNTS)) == 0) {
          fprintf(stderr, "%s: -t: '%s' is not a list of token counts above 0 (at most %d)\n", PROGRAM, optarg,
                  MOE_PERF_MAX_TOKEN_COUNTS);
          usage(stderr);
          return 2;
        }
        break;
      case 'H':
        if (parseNumber(optarg, 128, 65536, &value) || value % 128) {
          fprintf(stderr, "%s: -H: '%s' is not a multiple of 128 in 128..65536\n", PROGRAM, optarg);
          usage(stderr);
          return 2;
        }
        o->hidden = (size_t)value;
        break;
      case 'J': o->jsonPath = optarg; break;
      case 'V': o->csvPath = optarg; break;
      case 'C':
        if (strcmp(optarg, "nccl") != 0 && strcmp(optarg, "none") != 0) {
          fprintf(stderr, "%s: --compare: 'nccl' or 'none', not '%s'\n", PROGRAM, optarg);
          usage(stderr);
          return 2;
        }
        o->nccl = strcmp(optarg, "nccl") == 0;
        break;
      case 'h': usage(stdout); return 1;
      case ':':
        fprintf(stderr, "%s: %s needs a value\n", PROGRAM, argv[optind - 1]);
        usage(stderr);
        return 2;
      default:
        if (optopt)
          fprintf(stderr, "%s: unknown flag '-%c'\n", PROGRAM, optopt);
        else
          fprintf(stderr, "%s: unknown flag '%s'\n", PROGRAM, argv[optind - 1]);
        usage(stderr);
        return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", PROGRAM, argv[optind]);
    usage(stderr);
    return 2;
  }
  char err[512];
  const char* const outputs[2] = {o->jsonPath, o->csvPath};
  for (int i = 0; i < 2; i++) /* before the run, so that a typo does not cost it */
    if (outputs[i] && benchCheckWritable(outputs[i], err, sizeof(err)) != 0) {
      fprintf(stderr, "%s: %s %s\n", PROGRAM, i == 0 ? "-J:" : "--csv:", err);
      return 2;
    }
  return 0;
}

int main(int argc, char** argv) {
  struct moePerfOptions o = {.topk = 8,
                             .perRank = 32,
                             .calls = 10,
                             .warmup = 5,
                             .iters = 20,
                             .check = 1,
                             .graph = 1,
                             .hidden = 7168,
                             .tokens = {128, 512, 1024, 4096},
                             .ntokens = 4};
  const int parsed = parseFlags(argc, argv, &o);
  if (parsed) return parsed == 1 ? 0 : 2;
  /* Asked in a child: this process forks the ranks and must not initialise CUDA itself. */
  toolCudaStatus_t cuda;
  toolCudaQueryInChild(&cuda, 60);
  const int gpus = cuda.deviceCount;
  if (gpus < 1) return toolReportNoGpu(PROGRAM, cuda.noGpu);
#if !FCCL_HAVE_NCCL
  /* Said when the run starts, as the other benchmarks do: without a GPU the one line on stderr is all there is. */
  if (o.nccl) printf("# --compare nccl: this build has no NCCL; measuring fccl alone\n");
  o.nccl = 0;
#endif
  if (o.nranks == 0) o.nranks = gpus < MOE_PERF_MAX_RANKS ? gpus : MOE_PERF_MAX_RANKS;
  if (o.topk > o.perRank * o.nranks || o.perRank * o.nranks > 1024) {
    fprintf(stderr, "%s: top-%d of %d experts (at most 1024, at least top-k)\n", PROGRAM, o.topk, o.perRank * o.nranks);
    return 2;
  }
  struct shared* sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    fprintf(stderr, "%s: mmap: %s\n", PROGRAM, strerror(errno));
    return 1;
  }
  memset(sh, 0, sizeof(*sh));
  fflush(stdout);
  pid_t pids[MOE_PERF_MAX_RANKS];
  int started = 0, failed = 0;
  for (int r = 0; r < o.nranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(rankMain(r, gpus, &o, sh, argc, argv));
    if (pids[r] < 0) {
      fprintf(stderr, "%s: fork: %s\n", PROGRAM, strerror(errno));
      failed++;
      break;
    }
    started++;
  }
  for (int r = 0; r < started; r++) {
    int status = 0;
    if (waitpid(pids[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
  }
  munmap(sh, sizeof(*sh));
  if (failed) fprintf(stderr, "%s: %d ranks failed or found wrong results\n", PROGRAM, failed);
  return failed ? 1 : 0;
}
