/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The benchmark's host-only core: flags, size sweep, bandwidth arithmetic, the nccl-tests table, JSON and CSV
 * output, result checking on host buffers, the out-of-band exchange between ranks and the process launcher.
 * Nothing here calls CUDA, fccl or NCCL, so the unit tests link it on a machine without a GPU; runtime.c (GPU,
 * communicators) and the all_reduce_perf / barrier_perf programs sit on top of it.
 */
#ifndef FCCL_BENCH_H_
#define FCCL_BENCH_H_

#include "json.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- data types and reduction operations: the values are fccl's and NCCL's ---------------------------------- */

enum { BENCH_NUM_TYPES = 10, BENCH_NUM_OPS = 5 };
enum { benchInt8, benchUint8, benchInt32, benchUint32, benchInt64, benchUint64, benchFloat16, benchFloat32,
       benchFloat64, benchBfloat16 };
enum { benchSum, benchProd, benchMax, benchMin, benchAvg };
#define BENCH_ALL (-2)   /* -d all / -o all */
#define BENCH_NO_OP (-3) /* the op of a collective without one (all-gather, broadcast): "none" in the table */

/* nccl-tests' names ("bfloat16", "float", "half", ...); "?" for an unknown value. */
const char* benchTypeName(int type);
size_t benchTypeSize(int type);
/* Accepts nccl-tests' names and the usual aliases (bf16, fp16, fp32, fp64, int, char, ...); -1 if unknown. */
int benchTypeFromName(const char* name);
/* "sum", "prod", "max", "min", "avg"; "none" for BENCH_NO_OP; "?" for an unknown value. */
const char* benchOpName(int op);
int benchOpFromName(const char* name);

/* ---- flags ----------------------------------------------------------------------------------------------------- */

#define BENCH_MAX_BUDGETS 8 /* --max-ctas: SM budgets in one run */

typedef struct {
  int nThreads;            /* -t: threads per process */
  int nGpus;               /* -g: GPUs (ranks) per thread */
  int nProcs;              /* -np: processes the launcher forks; 0 = one rank per local GPU */
  size_t minBytes;         /* -b */
  size_t maxBytes;         /* -e */
  size_t stepBytes;        /* -i */
  size_t stepFactor;       /* -f (1: add stepBytes instead) */
  int iters;               /* -n */
  int warmupIters;         /* -w */
  int runCycles;           /* -N: the whole sweep this many times, each cycle's rows printed; 0: until a signal */
  int check;               /* -c: checked runs per size (0: no check) */
  int blocking;            /* -z: BENCH_BLOCKING_* */
  int graphLaunches;       /* -G: capture the iterations in a CUDA graph and launch it this many times */
  int average;             /* -a: time across ranks: 0 rank 0, 1 average, 2 minimum, 3 maximum */
  int timeoutSec;          /* -T: bound on every wait (0: the built-in default) */
  int unalign;             /* -u: buffers offset by this many elements */
  int parallelInit;        /* -p: accepted for compatibility (ranks of a process always initialise in parallel) */
  int root;                /* -r: accepted for compatibility (all-reduce has no root) */
  int cputime;             /* -C: report the host time of the launch loop instead of the GPU time */
  int timestamps;          /* -S: a timestamp at the end of every row */
  int memoryReport;        /* -M: a line of device memory use after the footer */
  int localRegister;       /* -R: 0 plain cudaMalloc buffers, 1 registered, 2 registered symmetric (NCCL windows) */
  int perIterTiming;       /* -I: every iteration timed on its own (CUDA events), i_min/i_max/i_p99/i_cv% columns */
  int perIterSkip;         /* -K: the first this many iterations left out of -I's statistics */
  int type;                /* -d: a type, or BENCH_ALL */
  int op;                  /* -o: an op, or BENCH_ALL */
  int compareNccl;         /* --compare nccl */
  int shareGpu;            /* --share-gpu: ranks may share a GPU */
  int hosts;               /* --hosts: the forked processes pose as this many hosts (0: one, the machine) */
  int injectCorruption;    /* --inject-corruption (hidden): flip one result element before the check */
  int progress;            /* --progress 0|1; -1: on when stderr is a terminal */
  const char* jsonPath;    /* -J */
  const char* csvPath;     /* --csv */
  const char* path;        /* --path: FCCL_PATH for every rank ("fccl", "nccl", "auto"), or NULL (the environment's) */
  int maxCtas[BENCH_MAX_BUDGETS]; /* --max-ctas: after the default table, one per SM budget (config.maxCTAs) */
  int nMaxCtas;                   /* how many; 0: the default table alone */
  unsigned takes;                 /* BENCH_TAKES_*: the flags the program honours (benchArgsDefaults: all of them) */
  char notice[512]; /* what the parser changed, as nccl-tests warns and goes on ("... Disabling."): lines for
                     * standard error; "" when nothing */
} benchArgs_t;

/* What a program honours beyond the flags every program takes (-t -g -n -w -N -z -G -a -T -C -S -M -J and fccl's
 * own). A flag of these groups that the program does not honour is refused, unless the program is one of
 * nccl-tests' (BENCH_TAKES_NCCL_TESTS): it then accepts every flag nccl-tests accepts, as nccl-tests' programs do,
 * so that one command line serves them all, and its --help lists those under "no effect". */
enum {
  BENCH_TAKES_DATA = 1u << 0,       /* -b -e -i -f -c -d -u -R: sizes, types, checks and buffers */
  BENCH_TAKES_OP = 1u << 1,         /* -o */
  BENCH_TAKES_ROOT = 1u << 2,       /* -r */
  BENCH_TAKES_PER_ITER = 1u << 3,   /* -I -K */
  BENCH_TAKES_NCCL_TESTS = 1u << 4, /* one of nccl-tests' programs: also -p, -m 1, -y 0, -x 0, -D 0, -V 16 */
  BENCH_TAKES_ALL = 0x1fu
};

/* -z, as nccl-tests defines it (with -m 1 an inner iteration is an outer one): after every operation, wait for it and
 * barrier (BARRIER), only wait (WAIT), or wait and barrier with the barrier left out of the time (EXCLUDE_BARRIER). */
enum { BENCH_BLOCKING_OFF, BENCH_BLOCKING_BARRIER, BENCH_BLOCKING_WAIT, BENCH_BLOCKING_EXCLUDE_BARRIER };
/* "" for OFF, else the header line nccl-tests prints for the mode (without "# " and the newline). */
const char* benchBlockingText(int blocking);

void benchArgsDefaults(benchArgs_t* args);

enum { BENCH_PARSE_OK = 0, BENCH_PARSE_HELP = 1, BENCH_PARSE_ERROR = -1 };
#define BENCH_MAX_TIMEOUT_SEC 86400 /* -T: a day */
#define BENCH_MAX_RUN_CYCLES 100000 /* -N: above, a soak run is -N 0 (until SIGINT or SIGTERM) */
/* Parses nccl-tests' flags plus fccl's own (see benchPrintUsage), as far as args->takes says the program honours
 * them. Returns BENCH_PARSE_*; on error err says why. Combinations nccl-tests resolves with a warning (-I or -z 3
 * with -G, -K out of range or without -I) are resolved alike, the warning in args->notice. */
int benchParseArgs(int argc, char* const* argv, benchArgs_t* args, char* err, size_t errLen);
/* --max-ctas with -J or --csv: budget maxCtas's table goes to path with ".max-ctas-N" before its extension
 * ("out.json": "out.max-ctas-8.json"; "out": "out.max-ctas-8"). 0, or -1 when it does not fit out. */
int benchBudgetPath(const char* path, int maxCtas, char* out, size_t len);
/* "8", "1K", "64M", "1G", "1.5m": bytes. Returns 0, or -1 for anything else (negative, NaN, beyond 8 EiB). */
int benchParseSize(const char* text, size_t* bytes);
/* The flags program honours (takes: BENCH_TAKES_*), and the ones accepted without effect. */
void benchPrintUsage(FILE* out, const char* program, unsigned takes);
/* Whether an output file (-J, --csv) can be written, checked before the run so that a typo does not cost the whole
 * benchmark: an existing file must be writable, a new one needs a writable directory. Nothing is created. 0, or -1
 * with err. */
int benchCheckWritable(const char* path, char* err, size_t errLen);
/* Formats the message into err (when err is not NULL) and returns -1: the error convention of this library. */
int benchError(char* err, size_t errLen, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- size sweep and bandwidth ----------------------------------------------------------------------------------- */

/* The size after `bytes` in the sweep, or 0 when the sweep ends (nccl-tests' loop: times -f, or plus -i). */
size_t benchSweepNext(const benchArgs_t* args, size_t bytes);
int benchSweepLength(const benchArgs_t* args);
/* Elements of `type` in `bytes`, as nccl-tests counts them (rounded down). */
size_t benchCountOf(size_t bytes, int type);
/* A call's count for a sweep size, as nccl-tests (2.19) computes it: the size's elements, or (perRank) a rank's share
 * of them rounded down to whole alignBytes (16 for the all-gather, reduce-scatter, all-to-all, gather and scatter;
 * 0: not rounded). */
size_t benchCallCount(size_t bytes, int type, int nranks, int perRank, int alignBytes);

/* Algorithm bandwidth in GB/s (1e9 bytes per second) for bytes moved in seconds. */
double benchAlgBw(size_t bytes, double seconds);
/* nccl-tests' all-reduce bus-bandwidth factor, 2 (n - 1) / n. */
double benchAllReduceBusFactor(int nranks);

/* ---- results and the table -------------------------------------------------------------------------------------- */

enum { BENCH_OUT_OF_PLACE = 0, BENCH_IN_PLACE = 1 };
#define BENCH_MAX_ENGINES 2 /* fccl, and NCCL beside it */
#define BENCH_MAX_LOCAL 16  /* GPUs one thread drives (-g) */

/* -I: the statistics nccl-tests prints and writes for the iterations of one measurement, each iteration's time being
 * the slowest rank's (nccl-tests: "i_* uses max over process rows"). */
typedef struct {
  int valid;   /* measured with -I */
  int skipped; /* -K: leading iterations left out of the statistics (still in timesUs) */
  double minUs, maxUs, avgUs, p50Us, p95Us, p99Us, stdevUs;
  double cvPct;          /* stdev / avg, in percent (0 when avg is 0) */
  const double* timesUs; /* every iteration, nTimes of them (the JSON's times_us); NULL: not kept */
  int nTimes;
  const double* processUs; /* nProcesses x nTimes: each process's slowest GPU per iteration; NULL: one process */
  int nProcesses;
} benchIterStats_t;

/* nccl-tests' statistics of times[skip..n): min, max, mean, p50 (the middle element), p95 and p99 (nearest rank:
 * element ceil(m p / 100) - 1 of the m sorted samples, so p99 is the maximum below 100 samples), population standard
 * deviation, coefficient of variation. timesUs and nTimes are set to times and n. 0, or -1 (nothing left after
 * skip, out of memory). */
int benchIterStatsCompute(const double* times, int n, int skip, benchIterStats_t* stats);

typedef struct {
  double timeUs;
  double algBw;
  double busBw;
  int64_t wrong; /* wrong elements summed over ranks; -1: not checked */
  int valid;     /* measured */
  benchIterStats_t iter; /* -I */
} benchMeasure_t;

typedef struct {
  size_t bytes;
  size_t count;
  int type;
  int op;
  int root;
  int cycle;                              /* -N: the sweep it belongs to, from 0 */
  long long timestamp;                    /* -S: when it was measured (time_t) */
  benchMeasure_t m[BENCH_MAX_ENGINES][2]; /* [engine][BENCH_OUT_OF_PLACE / BENCH_IN_PLACE] */
} benchRow_t;

typedef struct {
  const char* program;                       /* "all_reduce_perf" */
  int nEngines;                              /* 1: fccl alone; 2: fccl and NCCL beside it */
  const char* engineNames[BENCH_MAX_ENGINES];
  int cputime;                               /* label the time column "cputime" */
  int timestamps;                            /* -S: a "timestamp" column at the end */
  int perIter;                               /* -I: i_min, i_max, i_p99, i_cv% after each placement's #wrong */
} benchTable_t;

/* Formats value in exactly `width` characters where it fits (2, then 1, then 0 decimals, then exponent), like
 * nccl-tests. out must hold width + 1 bytes (more when the value does not fit at all). */
void benchFormatFloat(double value, int width, char* out, size_t outLen);
/* nccl-tests' column headers (three lines; with -I its per-iteration ones), plus the NCCL columns when
 * nEngines == 2. */
void benchPrintTableHeader(FILE* out, const benchTable_t* table);
/* One row: size, count, type, redop, root, then time/algbw/busbw/#wrong out of place and in place (nccl-tests'
 * layout; with -I each followed by i_min/i_max/i_p99/i_cv%), then for NCCL time/busbw/#wrong (with -I the four
 * i_* columns)/speedup per placement (speedup: NCCL time / fccl time), then with -S the row's local time as
 * nccl-tests writes it ("%Y-%m-%d %H:%M:%S"). */
void benchPrintRow(FILE* out, const benchTable_t* table, const benchRow_t* row);
/* nccl-tests' time format ("%Y-%m-%d %H:%M:%S", local time) of a time_t; -S's column and the JSON's times. */
#define BENCH_TIME_FORMAT "%Y-%m-%d %H:%M:%S"
void benchFormatTime(long long when, char* out, size_t len);

typedef struct {
  int errors[BENCH_MAX_ENGINES];     /* tests (size x placement) with wrong elements, per engine */
  double avgBusBw[BENCH_MAX_ENGINES];
  double speedupGeomean[2];          /* per placement; 0 when not compared */
} benchSummary_t;
/* The footer's numbers, accumulated row by row as the rows are printed (a -N 0 run keeps no rows). */
typedef struct {
  int errors[BENCH_MAX_ENGINES];
  double busBwSum[BENCH_MAX_ENGINES];
  int busBwCount[BENCH_MAX_ENGINES];
  double logSpeedupSum[2];
  int speedupCount[2];
  int rows;
} benchSummaryAcc_t;
void benchSummaryAdd(const benchTable_t* table, benchSummaryAcc_t* acc, const benchRow_t* row);
void benchSummaryFinish(const benchTable_t* table, const benchSummaryAcc_t* acc, benchSummary_t* summary);
/* The footer numbers over the rows (averages over every measured size and placement): the two above. */
void benchSummarize(const benchTable_t* table, const benchRow_t* rows, int nRows, benchSummary_t* summary);
/* "# Out of bounds values", "# Avg bus bandwidth", the NCCL lines, "#", "# Collective test concluded". */
void benchPrintFooter(FILE* out, const benchTable_t* table, const benchSummary_t* summary);

/* -M: nccl-tests' memory line, "# GPU memory usage     : Initialization 1.25 GB | User-Allocated 512 MB |
 * Collective 0.00 B | Total  1.75 GB", from the device bytes communicator creation, the benchmark's buffers and the
 * run itself took (the largest rank each). */
enum { BENCH_MEM_INIT, BENCH_MEM_BUFFERS, BENCH_MEM_RUN, BENCH_MEM_PARTS };
void benchPrintMemoryReport(FILE* out, const double bytes[BENCH_MEM_PARTS]);
/* nccl-tests' amount ("0.00 B", "512 MB", "1.25 GB": powers of 1024, two decimals below 10, one below 100). */
void benchFormatMemory(double bytes, char* out, size_t len);

/* CSV: one line per size, engine and placement; buffers[engine] names the engine's buffer kind; with -I the
 * i_min_us, i_max_us, i_p99_us and i_cv_pct columns at the end are filled (empty otherwise). */
void benchCsvHeader(FILE* out);
void benchCsvRows(FILE* out, const benchTable_t* table, const benchRow_t* row, const char* const* buffers, int graph,
                  int nranks);

/* "[ 3/28] bfloat16 sum 64 MiB nccl in-place" for the terminal progress line. */
void benchFormatProgress(char* out, size_t len, int done, int total, const benchRow_t* row, const char* what);
/* "512 B", "64 KiB", "1 GiB", "1.5 MiB". */
void benchFormatBytes(double bytes, char* out, size_t len);

/* ---- JSON: the tools' writer (tools/common/json.h) --------------------------------------------------------- */

/* The -J files' layout (toolJsonInit's wrapDepth): the top level and the members of its objects and arrays on lines of
 * their own, so that each result row is one line. */
#define BENCH_JSON_WRAP_DEPTH 2
/* The -J document follows nccl-tests' JSON (version 3 of its layout: src/util.cu), key for key and type for type
 * (test/data/bench holds an example written from its source), with fccl's own members beside: "tool",
 * "fccl_version", "build_type", "comm_init", in "config" the launch and -z/-N/-C, in each result its cycle and the
 * engine compared with, and "comparison". */
#define BENCH_JSON_VERSION 3
#define BENCH_DEVICE_LINE 256

/* A "#  Rank  0 Group  0 Pid   1234 on host device  0 [0000:19:00] NVIDIA H200" line as nccl-tests' JSON has it. */
typedef struct {
  int rank, group, pid, device;
  char hostname[64];
  char deviceHex[32];
  char deviceInfo[160];
} benchDeviceInfo_t;
/* 0, or -1 when the line is not in that form. */
int benchParseDeviceLine(const char* line, benchDeviceInfo_t* info);

/* What the document says besides the results. */
typedef struct {
  const char* program;           /* "all_reduce_perf" */
  const char* fcclVersion;       /* "0.1.0" */
  const char* buildType;         /* Meson's buildtype: "release", "debugoptimized", ... */
  int ncclVersion;               /* the NCCL library's version code; 0: none in this build */
  const char* startTime;         /* BENCH_TIME_FORMAT */
  int argc;
  char* const* argv;
  char* const* envp;             /* NULL-terminated; only the FCCL_*, NCCL_* and CUDA_* variables are written */
  const benchArgs_t* args;
  int nranks;
  const char* launch;            /* "2 processes forked here (...)" */
  int sharedGpus;
  const char (*deviceLines)[BENCH_DEVICE_LINE];
  int nDevices;
  int nEngines;
  const char* engineNames[BENCH_MAX_ENGINES];
  const char* buffers[BENCH_MAX_ENGINES]; /* "plain", "registered", "symmetric" */
  double initMs[BENCH_MAX_ENGINES];       /* communicator creation, slowest rank */
  double initBytes[BENCH_MAX_ENGINES];    /* its device memory, largest rank */
  double initSelfBytes[BENCH_MAX_ENGINES]; /* what the library reports; -1 unknown */
} benchJsonInfo_t;

/* Starts the document on out: the preamble, then an open "results" array. */
void benchJsonBegin(toolJson_t* json, FILE* out, const benchJsonInfo_t* info);
/* One result row as nccl-tests' JSON does it (with -I its "out_of_place_per_iter" and "in_place_per_iter"), with an
 * object per engine compared and the speedups. */
void benchJsonRow(toolJson_t* json, const benchTable_t* table, const benchRow_t* row, int iterations);
/* Ends the results and the document: "out_of_bounds", "average_bus_bandwidth" (summary NULL: none, for programs
 * without a bandwidth), fccl's "comparison" (with NCCL compared), "errors" (error: why the run failed, or NULL),
 * "end_time". */
void benchJsonEnd(toolJson_t* json, const benchTable_t* table, const benchSummary_t* summary, const char* error,
                  const char* endTime);

/* ---- input data and result checking ----------------------------------------------------------------------------
 * Inputs are small integers (exactly representable in every type, sums and products of up to 64 ranks included), so
 * every op but avg has one exact answer, compared bit for bit; avg is compared within a few units in the last
 * place. The pattern repeats every BENCH_PATTERN_PERIOD elements (a prime, so it never lines up with a chunk),
 * which keeps filling and checking gigabytes at memcpy/memcmp speed.
 *
 * One checker serves every collective: a collective says where each element of a rank's result comes from, as a
 * benchResultFn_t (one function per collective, below), and the checker compares runs of elements against one
 * period of that source. Without an op (BENCH_NO_OP) the inputs follow sum's pattern. */

#define BENCH_PATTERN_PERIOD 1021
/* Fill byte for results before a checked run: with up to 11 ranks, 0x5a5a... is no result of the pattern in any
 * type and op (a large integer; a non-integral or huge float), so an element left unwritten counts as wrong. */
#define BENCH_POISON_BYTE 0x5a

/* Result element `index` of a rank is element `input` of `source`, and so are the next run - 1 elements, one input
 * element each (run >= 1; SIZE_MAX: every element from here on). */
enum {
  BENCH_SOURCE_REDUCED = -1,  /* the source that is the reduction, with the op, of every rank's input */
  BENCH_SOURCE_UNCHECKED = -2 /* no rule fixes these elements (a reduce's or a gather's result on a non-root rank) */
};
typedef struct {
  int source; /* a rank (its input), or BENCH_SOURCE_REDUCED */
  size_t input;
  size_t run;
} benchSpan_t;
/* Where element index of rank's result comes from, for a call with count (the collective's count argument) and
 * root. */
typedef benchSpan_t (*benchResultFn_t)(size_t index, size_t count, int rank, int nranks, int root);
/* All-reduce: every rank holds the reduction, element for element. The other collectives are one such function
 * each: all-gather {index / count, index % count, count - index % count}, reduce-scatter {BENCH_SOURCE_REDUCED,
 * rank * count + index, SIZE_MAX}, broadcast {root, index, SIZE_MAX}. */
benchSpan_t benchAllReduceResult(size_t index, size_t count, int rank, int nranks, int root);
benchSpan_t benchAllGatherResult(size_t index, size_t count, int rank, int nranks, int root);
benchSpan_t benchReduceScatterResult(size_t index, size_t count, int rank, int nranks, int root);
benchSpan_t benchBroadcastResult(size_t index, size_t count, int rank, int nranks, int root);
/* send/recv (nccl-tests' ring): rank r holds rank r - 1's input. All-to-all: block p (count elements at p x count)
 * is rank p's input block r. */
benchSpan_t benchSendRecvResult(size_t index, size_t count, int rank, int nranks, int root);
benchSpan_t benchAllToAllResult(size_t index, size_t count, int rank, int nranks, int root);
/* For the programs of fccl's reduce, gather and scatter (docs/benchmark.md#adding-a-program): reduce, the reduction on
 * root (elsewhere unchecked); gather, rank q's input at q x count on root (elsewhere unchecked); scatter, root's input
 * block r on rank r. */
benchSpan_t benchReduceResult(size_t index, size_t count, int rank, int nranks, int root);
benchSpan_t benchGatherResult(size_t index, size_t count, int rank, int nranks, int root);
benchSpan_t benchScatterResult(size_t index, size_t count, int rank, int nranks, int root);
/* The variable all-gather and reduce-scatter (all_gather_v_perf, reduce_scatter_v_perf): rank q's block is
 * benchVariableCount(count, q, nranks) = count x (2q + 1) / nranks elements (rounded down), a skew from about
 * count / n on rank 0 to about 2 x count on the last, whose sum is at most n x count (the fixed all-gather's); the
 * blocks lie back to back in rank order. benchVariableOffset: the sum of the blocks of ranks before q. All-gather-v:
 * rank q's input at its offset, nothing checked past the sum; reduce-scatter-v: rank r holds the reduction of block r,
 * nothing checked past it. */
size_t benchVariableCount(size_t count, int rank, int nranks);
size_t benchVariableOffset(size_t count, int rank, int nranks);
/* Room for any rank's block, in elements: count x (2n - 1) / n rounded up, at least the largest block (the last
 * rank's, rounded down). Unlike the blocks it never grows faster than count: at most count x
 * benchVariableRoom(1, n), which the driver's buffers, made from a count of 1, need (collective.h). */
size_t benchVariableRoom(size_t count, int nranks);
benchSpan_t benchAllGatherVResult(size_t index, size_t count, int rank, int nranks, int root);
benchSpan_t benchReduceScatterVResult(size_t index, size_t count, int rank, int nranks, int root);

typedef struct {
  int type;
  int op;
  int nranks;
  uint64_t seed;
  size_t elemSize;
  benchResultFn_t result;  /* the collective (benchCheckerInit: all-reduce) */
  size_t count;            /* its call's count and root, and whose result the counts are of */
  int root;
  int rank;
  unsigned char* expected; /* one period of each source, in the type's encoding: the reduction, then every rank's
                            * input in rank order */
  double* expectedValue;   /* the reduction's period as doubles (avg's tolerance check) */
} benchChecker_t;

/* Writes count elements of rank's input, elements [first, first + count) of the sequence. */
void benchFillInput(void* dst, size_t count, size_t first, int type, int op, int rank, int nranks, uint64_t seed);
/* A checker of all-reduce results; 0, or -1 (an unknown type or op, no ranks, out of memory). */
int benchCheckerInit(benchChecker_t* checker, int type, int op, int nranks, uint64_t seed);
/* Makes the checker count rank's result of another collective (result), called with count and root. */
void benchCheckerSetResult(benchChecker_t* checker, benchResultFn_t result, size_t count, int rank, int root);
/* Wrong elements among got[0..count), which holds result elements [first, first + count). */
int64_t benchCheckerCount(const benchChecker_t* checker, const void* got, size_t count, size_t first);
void benchCheckerFree(benchChecker_t* checker);

/* Host conversions for the two 16-bit float types (round to nearest even). */
uint16_t benchFloatToHalf(float value);
float benchHalfToFloat(uint16_t bits);
uint16_t benchFloatToBf16(float value);
float benchBf16ToFloat(uint16_t bits);
/* Element index of data (of type) as a double. */
double benchLoadAsDouble(const void* data, size_t index, int type);

/* ---- out-of-band exchange between ranks --------------------------------------------------------------------------
 * The benchmark's own control channel (rank 0 hands out the ids, times and error counts are combined, device
 * lines gathered); everything is an all-gather of one fixed-size slot per agent (a thread driving -g GPUs).
 * Implementations: shared memory (threads and forked processes), MPI, and a communicator (env launch). */

#define BENCH_OOB_SLOT 2048

typedef struct benchOob benchOob_t;
struct benchOob {
  int nAgents;
  int agent;
  /* Gathers `bytes` (<= BENCH_OOB_SLOT) from every agent into all (nAgents * bytes, agent order). 0 or -1. */
  int (*allgather)(benchOob_t* oob, const void* mine, size_t bytes, void* all);
  /* Tells the other agents to give up (they fail their next exchange promptly). May be NULL. */
  void (*abort)(benchOob_t* oob);
  void* state;
  int timeoutSec;
  unsigned phase;
  char error[256];
};

/* Shared memory for nAgents agents, mapped so that it survives fork(). NULL on failure (errno set). */
void* benchShmCreate(int nAgents);
void benchShmDestroy(void* region);
/* Marks the exchange aborted: every agent's current or next exchange fails at once ("another rank gave up"). The
 * launcher calls it when a rank process dies, so that the others stop instead of waiting for the dead one. */
void benchShmAbort(void* region);
void benchOobShmInit(benchOob_t* oob, void* region, int agent, int timeoutSec);

int benchOobBarrier(benchOob_t* oob);
/* Every agent's n doubles, in agent order, into all (nAgents x n): several exchanges when they exceed a slot. */
int benchOobGatherDoubles(benchOob_t* oob, const double* mine, int n, double* all);
/* Copies agent 0's bytes to everyone. */
int benchOobBcast(benchOob_t* oob, void* data, size_t bytes);
enum { BENCH_REDUCE_SUM, BENCH_REDUCE_MIN, BENCH_REDUCE_MAX, BENCH_REDUCE_AVG, BENCH_REDUCE_FIRST };
/* Combines n doubles element-wise over agents (FIRST: agent 0's values). */
int benchOobReduce(benchOob_t* oob, double* values, int n, int how);
void benchOobAbort(benchOob_t* oob);

/* ---- launch ----------------------------------------------------------------------------------------------------- */

enum { BENCH_LAUNCH_LOCAL, BENCH_LAUNCH_ENV, BENCH_LAUNCH_MPI };
typedef struct {
  int kind;            /* BENCH_LAUNCH_LOCAL: nothing set; ENV: torchrun/mpirun variables present */
  const char* source;  /* "torchrun", "Open MPI", "PMI" */
  int rank, size, localRank, localSize;
  int fromMpiLauncher; /* the variables came from mpirun (an MPI build can then use MPI itself) */
} benchLaunchEnv_t;

typedef const char* (*benchGetenv_t)(const char* name);
/* Reads RANK/WORLD_SIZE/LOCAL_RANK (torchrun), else OMPI_COMM_WORLD_* (Open MPI), else PMI_RANK/PMI_SIZE
 * (+MPI_LOCALRANKID, SLURM_LOCALID): fcclCommInitFromEnv's order. Returns 0, or -1 when they are present but
 * inconsistent (err says which). */
int benchDetectLaunch(benchGetenv_t getenvFn, benchLaunchEnv_t* env, char* err, size_t errLen);

typedef struct {
  int nProcs;   /* processes (forked locally, or started by the launcher) */
  int nThreads; /* agents per process */
  int nGpus;    /* ranks per agent */
  int nRanks;   /* nProcs * nThreads * nGpus */
  int nDevices; /* visible GPUs */
  int shared;   /* more ranks than GPUs on this host: ranks share GPUs */
  int hosts;    /* --hosts: consecutive processes in as many groups, each its own FCCL_HOSTID and NCCL_HOSTID */
} benchLayout_t;

/* The local launcher's plan for nDevices visible GPUs. Returns 0, or -1 with err (too many ranks without
 * --share-gpu, nonsense counts). */
int benchPlanLocal(const benchArgs_t* args, int nDevices, benchLayout_t* layout, char* err, size_t errLen);
/* The device of local rank index (proc-local ranks counted from firstLocal): (firstLocal + index) % nDevices. */
int benchDeviceOf(const benchLayout_t* layout, int firstLocal, int index);

/* --hosts: the host that forked process proc poses as (0 without --hosts). */
int benchHostOf(const benchLayout_t* layout, int proc);

/* Whether NCCL takes the ranks that share a GPU: each of another process and another host (--hosts) than the others
 * on that GPU, since NCCL refuses two ranks of one host on one GPU. 1 when no GPU is shared. */
int benchNcclTakesSharing(const benchLayout_t* layout);

/* Runs body(proc, arg) in nProcs forked children and waits. When one fails (non-zero exit or a signal),
 * onFailure(arg) runs at once (may be NULL; the benchmark aborts the shared exchange with it, so the others stop
 * waiting for the dead rank), and the rest get graceSec seconds before they are killed; children that do not go
 * even then (stuck in a driver) are left after a further 30 s. Children die with the parent (PR_SET_PDEATHSIG).
 * Returns 0 when all exited 0, otherwise the first failure's exit code (or 128 + signal). */
int benchForkRun(int nProcs, int (*body)(int proc, void* arg), void* arg, void (*onFailure)(void* arg),
                 int graceSec);
/* ---- -N 0: until a signal ----------------------------------------------------------------------------------------
 * A soak run ends on SIGINT (Ctrl-C) or SIGTERM (timeout(1), a job scheduler): the handlers only ask for a stop, and
 * every rank stops after the same row (benchStopAgreed in the runtime), so the footer, -J and --csv come out whole.
 * A second signal ends the process at once (the handler is reset by the first). */

/* Installs the handlers in this process (forked ranks inherit them); region: the shared exchange, whose flag every
 * forked rank sees, so that a signal to the launcher alone (kill PID) stops them too; NULL without one. */
void benchStopOnSignals(void* region);
/* Whether this process, or (region not NULL) any process of the exchange, was asked to stop. */
int benchStopRequested(void* region);
/* The signal that asked this process to stop (SIGINT, SIGTERM), or 0. */
int benchStopSignal(void);
/* Marks the shared exchange stopped (async-signal-safe). */
void benchShmRequestStop(void* region);
int benchShmStopRequested(void* region);

/* Runs probe in a child process (so that the parent never initialises CUDA before forking its ranks) and returns
 * its int result; the child's message (up to len bytes) lands in msg. Returns 0, or -1 if the child failed or gave
 * no answer within timeoutSec (it is killed then; errno is ETIMEDOUT). */
int benchProbeInChild(int (*probe)(char* msg, size_t len), int* result, char* msg, size_t len, int timeoutSec);

#endif /* FCCL_BENCH_H_ */
