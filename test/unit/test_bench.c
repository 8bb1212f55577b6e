/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The benchmark's host-only core (tools/bench): flags as nccl-tests spells them, the size sweep, bandwidth
 * arithmetic, the table compared character for character with text produced by nccl-tests' own printf formats,
 * JSON and CSV, the input pattern and checker (against an independent host reduction), the 16-bit float
 * conversions, the shared-memory exchange between forked processes, launcher variables and the fork launcher.
 */
#include "bench.h"
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* parse(&args, err, len, "-b", "8", ..., NULL): the flags after the program name. */
static int parse(benchArgs_t* args, char* err, size_t errLen, ...) __attribute__((sentinel));
static int parse(benchArgs_t* args, char* err, size_t errLen, ...) {
  char* argv[64];
  int argc = 1;
  va_list ap;
  va_start(ap, errLen);
  argv[0] = "all_reduce_perf";
  for (char* arg = va_arg(ap, char*); arg && argc < 64; arg = va_arg(ap, char*)) argv[argc++] = arg;
  va_end(ap);
  benchArgsDefaults(args);
  return benchParseArgs(argc, argv, args, err, errLen);
}

/* Every field of got against want, naming the field that differs. */
static void expectArgs(const char* what, const benchArgs_t* got, const benchArgs_t* want) {
#define EXPECT_FIELD(field)                                                                                   \
  EXPECT_MSG(got->field == want->field, "%s: " #field " is %lld, want %lld", what, (long long)got->field, \
             (long long)want->field)
  EXPECT_FIELD(nThreads);
  EXPECT_FIELD(nGpus);
  EXPECT_FIELD(nProcs);
  EXPECT_FIELD(minBytes);
  EXPECT_FIELD(maxBytes);
  EXPECT_FIELD(stepBytes);
  EXPECT_FIELD(stepFactor);
  EXPECT_FIELD(iters);
  EXPECT_FIELD(warmupIters);
  EXPECT_FIELD(runCycles);
  EXPECT_FIELD(check);
  EXPECT_FIELD(blocking);
  EXPECT_FIELD(graphLaunches);
  EXPECT_FIELD(average);
  EXPECT_FIELD(timeoutSec);
  EXPECT_FIELD(unalign);
  EXPECT_FIELD(parallelInit);
  EXPECT_FIELD(root);
  EXPECT_FIELD(cputime);
  EXPECT_FIELD(timestamps);
  EXPECT_FIELD(memoryReport);
  EXPECT_FIELD(localRegister);
  EXPECT_FIELD(type);
  EXPECT_FIELD(op);
  EXPECT_FIELD(compareNccl);
  EXPECT_FIELD(shareGpu);
  EXPECT_FIELD(injectCorruption);
  EXPECT_FIELD(progress);
#undef EXPECT_FIELD
  const char* paths[2][2] = {{got->jsonPath, want->jsonPath}, {got->csvPath, want->csvPath}};
  for (int i = 0; i < 2; i++)
    EXPECT_MSG((!paths[i][0] && !paths[i][1]) || (paths[i][0] && paths[i][1] && strcmp(paths[i][0], paths[i][1]) == 0),
               "%s: %s is '%s', want '%s'", what, i ? "csvPath" : "jsonPath", paths[i][0] ? paths[i][0] : "(none)",
               paths[i][1] ? paths[i][1] : "(none)");
}

static void testDefaultsAndFlags(void) {
  benchArgs_t args, want;
  char err[256];
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), NULL), BENCH_PARSE_OK);
  /* nccl-tests' defaults, written out rather than taken from benchArgsDefaults. */
  memset(&want, 0, sizeof(want));
  want.nThreads = 1;
  want.nGpus = 1;
  want.minBytes = want.maxBytes = 32 << 20;
  want.stepBytes = 1 << 20;
  want.stepFactor = 1;
  want.iters = 20;
  want.warmupIters = 1; /* nccl-tests 2.16.8 and newer */
  want.runCycles = 1;
  want.check = 1;
  want.type = benchFloat32;
  want.op = benchSum;
  want.average = 1;
  want.progress = -1;
  expectArgs("defaults", &args, &want);
  const benchArgs_t defaults = want;

  /* A typical nccl-tests command line, every flag it shares with fccl (-z goes with eager launches: below). */
  int status = parse(&args, err, sizeof(err), "-b", "8", "-e", "128M", "-f", "2", "-g", "2", "-t", "3", "-n",
                     "50", "-w", "10", "-N", "3", "-c", "0", "-d", "bfloat16", "-o", "all", "-G", "20", "-a", "3",
                     "-T", "30", "-u", "3", "-R", "2", "-J", "out.json", "-p", "1", "-C", "1", "-S", "1", "-M", "1",
                     "-r", "0", "-I", "0", "-K", "0", "-y", "0", "-D", "0", NULL);
  EXPECT_EQ_INT(status, BENCH_PARSE_OK);
  want.minBytes = 8;
  want.maxBytes = 128 << 20;
  want.stepFactor = 2;
  want.nGpus = 2;
  want.nThreads = 3;
  want.iters = 50;
  want.warmupIters = 10;
  want.check = 0;
  want.type = benchBfloat16;
  want.op = BENCH_ALL;
  want.runCycles = 3;
  want.graphLaunches = 20;
  want.average = 3;
  want.timeoutSec = 30;
  want.unalign = 3;
  want.localRegister = 2;
  want.jsonPath = "out.json";
  want.parallelInit = 1;
  want.cputime = 1;
  want.timestamps = 1;
  want.memoryReport = 1;
  expectArgs("nccl-tests flags", &args, &want);

  /* -z: nccl-tests' four blocking modes; the long names of the flags added in later nccl-tests. */
  for (int mode = 0; mode <= 3; mode++) {
    char value[4];
    snprintf(value, sizeof(value), "%d", mode);
    EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-z", value, NULL), BENCH_PARSE_OK);
    EXPECT_EQ_INT(args.blocking, mode);
  }
  EXPECT_EQ_INT(BENCH_BLOCKING_EXCLUDE_BARRIER, 3);
  EXPECT_STR_CONTAINS(benchBlockingText(BENCH_BLOCKING_BARRIER), "wait and barrier after each inner iteration");
  EXPECT_STR_CONTAINS(benchBlockingText(BENCH_BLOCKING_WAIT), "no barrier");
  EXPECT_STR_CONTAINS(benchBlockingText(BENCH_BLOCKING_EXCLUDE_BARRIER), "time excludes barrier");
  EXPECT(strcmp(benchBlockingText(BENCH_BLOCKING_OFF), "") == 0);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--blocking=2", "--run_cycles", "100000", "--report_timestamps=1",
                      "--memory_report", "1", "--per_iter_timing", "0", "--per_iter_skip=0", "--stream_null", "0",
                      "--device_implementation", "0", NULL),
                BENCH_PARSE_OK);
  want = defaults;
  want.blocking = BENCH_BLOCKING_WAIT;
  want.runCycles = BENCH_MAX_RUN_CYCLES;
  want.timestamps = 1;
  want.memoryReport = 1;
  expectArgs("newer nccl-tests flags", &args, &want);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--memory", "1", NULL), BENCH_PARSE_OK); /* nccl-tests' getopt name */
  EXPECT_EQ_INT(args.memoryReport, 1);

  /* Long names, "=", attached short values, fccl's own flags. */
  status = parse(&args, err, sizeof(err), "--minbytes=1K", "--maxbytes", "1G", "-i4096", "--datatype=half",
                 "--op", "max", "-np", "4", "--compare", "nccl", "--share-gpu", "--csv=r.csv", NULL);
  EXPECT_EQ_INT(status, BENCH_PARSE_OK);
  want = defaults;
  want.minBytes = 1024;
  want.maxBytes = 1 << 30;
  want.stepBytes = 4096;
  want.type = benchFloat16;
  want.op = benchMax;
  want.nProcs = 4;
  want.compareNccl = 1;
  want.shareGpu = 1;
  want.csvPath = "r.csv";
  expectArgs("long names", &args, &want);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--inject-corruption", "--progress", "0", "--np", "2", "-T", "86400",
                      NULL),
                BENCH_PARSE_OK);
  want = defaults;
  want.injectCorruption = 1;
  want.progress = 0;
  want.nProcs = 2;
  want.timeoutSec = BENCH_MAX_TIMEOUT_SEC;
  expectArgs("fccl's flags", &args, &want);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-d", "fp32", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.type, benchFloat32);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-d", "all", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.type, BENCH_ALL);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-h", NULL), BENCH_PARSE_HELP);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--help", NULL), BENCH_PARSE_HELP);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-m", "1", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--compare", "nccl", "--compare", "none", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.compareNccl, 0);
  /* --path: the engine behind fccl's communicator (FCCL_PATH); none given leaves the environment's. */
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), NULL), BENCH_PARSE_OK);
  EXPECT(args.path == NULL);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--path", "NCCL", NULL), BENCH_PARSE_OK);
  EXPECT(args.path != NULL && strcmp(args.path, "nccl") == 0);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--path=fccl", NULL), BENCH_PARSE_OK);
  EXPECT(args.path != NULL && strcmp(args.path, "fccl") == 0);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--path", "auto", NULL), BENCH_PARSE_OK);
  EXPECT(args.path != NULL && strcmp(args.path, "auto") == 0);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--path", "hier", NULL), BENCH_PARSE_OK);
  EXPECT(args.path != NULL && strcmp(args.path, "hier") == 0);
}

/* A rejected command line (up to six arguments) and a piece of the message that must say why. */
typedef struct {
  const char* args[7];
  const char* needle;
} badFlags_t;

static const badFlags_t badFlags[] = {
    {{"-q"}, "unknown flag '-q'"},
    {{"--bogus"}, "unknown flag"},
    {{"-b"}, "-b needs a value"},
    {{"extra"}, "unexpected argument 'extra'"},
    {{"--share-gpu=1"}, "takes no value"},
    {{"--path", "mpi"}, "'fccl', 'nccl', 'hier' or 'auto', not 'mpi'"},
    {{"--hosts", "0"}, "the host count must be 1 to 1024"},
    {{"--hosts", "1025"}, "the host count must be 1 to 1024"},
    {{"--hosts", "two"}, "--hosts"},
    /* garbage numbers and sizes */
    {{"-b", "12Q"}, "not a size"},
    {{"-b", "nan"}, "not a size"},
    {{"-e", "inf"}, "not a size"},
    {{"-e", "9e99"}, "not a size"},
    {{"-e", "-1M"}, "not a size"},
    {{"--maxbytes="}, "not a size"},
    {{"-i", "1.5.3"}, "not a size"},
    {{"-n", "ten"}, "not an integer"},
    {{"-n", "5x"}, "not an integer"},
    {{"-n", ""}, "not an integer"},
    {{"-w", "99999999999"}, "-w: 99999999999 is out of range"},
    {{"-n", "-99999999999999999999"}, "out of range"},
    {{"-g", "1.5"}, "not an integer"},
    /* out of range */
    {{"-n", "0"}, "at least one"},
    {{"-w", "-1"}, "cannot be negative"},
    {{"-c", "-1"}, "cannot be negative"},
    {{"-G", "-1"}, "cannot be negative"},
    {{"-f", "0"}, "at least 1"},
    {{"-t", "0"}, "1 to 64"},
    {{"-t", "65"}, "1 to 64"},
    {{"-g", "0"}, "1 to 16"},
    {{"-g", "99"}, "1 to 16"},
    {{"-np", "-1"}, "0 (auto) to 1024"},
    {{"--nprocs", "1025"}, "0 (auto) to 1024"},
    {{"-u", "-1"}, "0 to 4096"},
    {{"-u", "4097"}, "0 to 4096"},
    {{"-a", "4"}, "-a"},
    {{"-R", "3"}, "symmetric"},
    {{"-T", "-1"}, "0 (default) to 86400 seconds"},
    {{"-T", "86401"}, "0 (default) to 86400 seconds"},
    {{"-r", "-1"}, "root cannot be negative"},
    {{"-m", "4"}, "no group calls"},
    {{"-z", "4"}, "-z: 0 (off), 1 (wait and barrier), 2 (wait, no barrier) or 3"},
    {{"-z", "-1"}, "not -1"},
    {{"-z", "1", "-G", "5"}, "-z 1 with -G 5: a CUDA graph launches its operations with no host in between"},
    {{"-G", "5", "--blocking", "3"}, "use one or the other"},
    {{"-N", "0"}, "-N 0 (run forever) is not supported: give a number of cycles, 1 to 100000"},
    {{"-N", "-1"}, "1 to 100000"},
    {{"--run_cycles", "100001"}, "1 to 100000"},
    {{"-S", "2"}, "0 or 1"},
    {{"-M", "2"}, "0 or 1"},
    {{"--memory=3"}, "0 or 1"},
    /* nccl-tests' flags fccl's benchmark does not have: a clear refusal, not "unknown flag" */
    {{"-I", "1"}, "-I 1: per-iteration timing (nccl-tests' i_min, i_max, i_p99, i_cv% columns) is not supported"},
    {{"-K", "10"}, "-K 10: skipping iterations of the per-iteration statistics is not supported"},
    {{"-y", "1"}, "-y 1: the NULL stream is not supported"},
    {{"-x", "0"}, "-x: NCCL's CTA policy is not supported"},
    {{"-D", "1"}, "-D 1: NCCL's device-API implementations are not supported"},
    {{"-V", "16"}, "-V: the CTA count of NCCL's device-API implementations (-D) is not supported"},
    {{"-C", "-1"}, "0 or 1"},
    {{"-p", "7"}, "0 or 1"},
    {{"--progress", "2"}, "0 or 1"},
    {{"-J", ""}, "file name is empty"},
    {{"--csv="}, "file name is empty"},
    /* names */
    {{"-d", "float8"}, "unknown datatype 'float8'"},
    {{"-o", "mulsum"}, "unknown reduction"},
    {{"--compare", "mpi"}, "'nccl'"},
    /* the sweep */
    {{"-b", "2M", "-e", "1M"}, "invalid sizes for 'minbytes' and 'maxbytes': 2097152 > 1048576"},
    {{"-b", "0", "-e", "1M", "-f", "2"}, "above 0 bytes"},
    {{"-b", "1", "-e", "1M", "-i", "0"}, "needs a step"},
};

static void testFlagErrors(void) {
  for (size_t c = 0; c < sizeof(badFlags) / sizeof(badFlags[0]); c++) {
    char* argv[8] = {"all_reduce_perf"};
    int argc = 1;
    char line[256] = "";
    for (const char* const* a = badFlags[c].args; *a; a++) {
      argv[argc++] = (char*)*a;
      snprintf(line + strlen(line), sizeof(line) - strlen(line), " '%s'", *a);
    }
    benchArgs_t args;
    char err[256] = "";
    benchArgsDefaults(&args);
    int status = benchParseArgs(argc, argv, &args, err, sizeof(err));
    EXPECT_MSG(status == BENCH_PARSE_ERROR, "%s: expected a parse error, got %d", line, status);
    EXPECT_MSG(strstr(err, badFlags[c].needle) != NULL, "%s: the message '%s' does not say '%s'", line, err,
               badFlags[c].needle);
  }

  char* text = NULL;
  size_t len = 0;
  FILE* out = open_memstream(&text, &len);
  benchPrintUsage(out, "all_reduce_perf");
  fclose(out);
  EXPECT_STR_CONTAINS(text, "USAGE: all_reduce_perf");
  EXPECT_STR_CONTAINS(text, "--compare nccl");
  EXPECT_STR_CONTAINS(text, "-G,--cudagraph");
  free(text);
}

/* -J and --csv are checked before the run; nothing is created by the check. */
static void testWritable(void) {
  char err[256], dir[64], path[128];
  snprintf(dir, sizeof(dir), "/tmp/fccl-bench-test-XXXXXX");
  EXPECT(mkdtemp(dir) != NULL);
  snprintf(path, sizeof(path), "%s/out.json", dir);
  EXPECT_EQ_INT(benchCheckWritable(path, err, sizeof(err)), 0);
  EXPECT_MSG(access(path, F_OK) != 0, "the check created %s", path);
  EXPECT_EQ_INT(benchCheckWritable("relative-name.csv", err, sizeof(err)), 0);
  EXPECT_EQ_INT(benchCheckWritable(dir, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "is a directory");
  snprintf(path, sizeof(path), "%s/missing/out.json", dir);
  EXPECT_EQ_INT(benchCheckWritable(path, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "missing");
  EXPECT_EQ_INT(benchCheckWritable("", err, sizeof(err)), -1);
  /* An existing file that cannot be written (root writes anything: then only the positive case is checked). */
  snprintf(path, sizeof(path), "%s/readonly.csv", dir);
  FILE* file = fopen(path, "w");
  EXPECT(file != NULL);
  if (file) fclose(file);
  EXPECT_EQ_INT(benchCheckWritable(path, err, sizeof(err)), 0);
  chmod(path, 0444);
  if (geteuid() != 0) {
    EXPECT_EQ_INT(benchCheckWritable(path, err, sizeof(err)), -1);
    EXPECT_STR_CONTAINS(err, "cannot write");
  }
  unlink(path);
  rmdir(dir);
}

static void testSizes(void) {
  size_t bytes = 0;
  EXPECT(benchParseSize("8", &bytes) == 0 && bytes == 8);
  EXPECT(benchParseSize("1K", &bytes) == 0 && bytes == 1024);
  EXPECT(benchParseSize("64M", &bytes) == 0 && bytes == 64u << 20);
  EXPECT(benchParseSize("1G", &bytes) == 0 && bytes == 1u << 30);
  EXPECT(benchParseSize("1.5m", &bytes) == 0 && bytes == 1572864);
  EXPECT(benchParseSize("2KB", &bytes) == 0 && bytes == 2048);
  EXPECT(benchParseSize("1GiB", &bytes) == 0 && bytes == 1u << 30);
  EXPECT(benchParseSize("", &bytes) == -1);
  EXPECT(benchParseSize("x", &bytes) == -1);
  EXPECT(benchParseSize("1Q", &bytes) == -1);
  EXPECT(benchParseSize("-1", &bytes) == -1);
  EXPECT(benchParseSize("4Kx", &bytes) == -1);

  benchArgs_t args;
  char err[128];
  parse(&args, err, sizeof(err), "-b", "8", "-e", "128M", "-f", "2", NULL);
  EXPECT_EQ_INT(benchSweepLength(&args), 25);
  EXPECT_EQ_INT(benchSweepNext(&args, 8), 16);
  EXPECT_EQ_INT(benchSweepNext(&args, 64 << 20), 128 << 20);
  EXPECT_EQ_INT(benchSweepNext(&args, 128 << 20), 0);
  parse(&args, err, sizeof(err), "-b", "1M", "-e", "4M", "-i", "1M", NULL);
  EXPECT_EQ_INT(benchSweepLength(&args), 4);
  EXPECT_EQ_INT(benchSweepNext(&args, 3 << 20), 4 << 20);
  parse(&args, err, sizeof(err), "-b", "1000", "-e", "5000", "-f", "3", NULL); /* 1000, 3000: 9000 is past the end */
  EXPECT_EQ_INT(benchSweepLength(&args), 2);
  parse(&args, err, sizeof(err), NULL);
  EXPECT_EQ_INT(benchSweepLength(&args), 1);

  EXPECT_EQ_INT(benchCountOf(8, benchFloat32), 2);
  EXPECT_EQ_INT(benchCountOf(8, benchFloat64), 1);
  EXPECT_EQ_INT(benchCountOf(7, benchFloat32), 1);
  EXPECT_EQ_INT(benchCountOf(1, benchBfloat16), 0);
  EXPECT(fabs(benchAlgBw(1000000000, 1.0) - 1.0) < 1e-12);
  EXPECT(fabs(benchAlgBw(256 << 20, 856.6e-6) - 313.37) < 0.01);
  EXPECT(benchAllReduceBusFactor(1) == 0.0);
  EXPECT(benchAllReduceBusFactor(2) == 1.0);
  EXPECT(benchAllReduceBusFactor(8) == 1.75);

  EXPECT(strcmp(benchTypeName(benchBfloat16), "bfloat16") == 0);
  EXPECT(strcmp(benchTypeName(benchFloat16), "half") == 0);
  EXPECT(strcmp(benchTypeName(42), "?") == 0);
  EXPECT_EQ_INT(benchTypeSize(benchUint64), 8);
  EXPECT_EQ_INT(benchTypeFromName("BF16"), benchBfloat16);
  EXPECT_EQ_INT(benchTypeFromName("char"), benchInt8);
  EXPECT_EQ_INT(benchTypeFromName("nope"), -1);
  EXPECT_EQ_INT(benchOpFromName("avg"), benchAvg);
  EXPECT(strcmp(benchOpName(benchProd), "prod") == 0);
}

static void expectFloat(double value, int width, const char* want) {
  char out[32];
  benchFormatFloat(value, width, out, sizeof(out));
  EXPECT_MSG(strcmp(out, want) == 0, "benchFormatFloat(%g, %d) gave \"%s\", want \"%s\"", value, width, out, want);
}

static void testFloatColumns(void) {
  expectFloat(6.21, 7, "   6.21");
  expectFloat(853.4, 7, " 853.40");
  expectFloat(12345.67, 7, "12345.7");
  expectFloat(123456.7, 7, " 123457");
  expectFloat(12345678.0, 7, "1.2e+07");
  expectFloat(0.0, 6, "  0.00");
  expectFloat(391.35, 6, "391.35");
  expectFloat(1391.3, 6, "1391.3");
  expectFloat(999.999, 6, "1000.0");
  expectFloat(123456.0, 6, "123456");
  expectFloat(1234567.0, 6, " 1e+06");
}

static char* capture(void (*fn)(FILE* out, void* ctx), void* ctx) {
  char* text = NULL;
  size_t len = 0;
  FILE* out = open_memstream(&text, &len);
  fn(out, ctx);
  fclose(out);
  return text;
}

static void fillMeasure(benchMeasure_t* m, size_t bytes, double timeUs, int nranks, int64_t wrong) {
  m->timeUs = timeUs;
  m->algBw = benchAlgBw(bytes, timeUs * 1e-6);
  m->busBw = m->algBw * benchAllReduceBusFactor(nranks);
  m->wrong = wrong;
  m->valid = 1;
}

typedef struct {
  benchTable_t table;
  benchRow_t rows[2];
} tableCase_t;

static void makeRows(tableCase_t* c, int nEngines) {
  memset(c, 0, sizeof(*c));
  c->table = (benchTable_t){"all_reduce_perf", nEngines, {"fccl", "nccl"}, 0, 0};
  c->rows[0] = (benchRow_t){.bytes = 8, .count = 2, .type = benchFloat32, .op = benchSum, .root = -1};
  fillMeasure(&c->rows[0].m[0][0], 8, 6.21, 2, 0);
  fillMeasure(&c->rows[0].m[0][1], 8, 6.23, 2, 0);
  fillMeasure(&c->rows[0].m[1][0], 8, 12.42, 2, 0);
  fillMeasure(&c->rows[0].m[1][1], 8, 9.345, 2, 3);
  c->rows[1] = (benchRow_t){.bytes = 134217728, .count = 33554432, .type = benchFloat32, .op = benchSum, .root = -1};
  fillMeasure(&c->rows[1].m[0][0], 134217728, 853.4, 2, 0);
  fillMeasure(&c->rows[1].m[0][1], 134217728, 12345.67, 2, -1);
  fillMeasure(&c->rows[1].m[1][0], 134217728, 1706.8, 2, 0);
  fillMeasure(&c->rows[1].m[1][1], 134217728, 12345.67, 2, 0);
}

static void printWholeTable(FILE* out, void* ctx) {
  tableCase_t* c = (tableCase_t*)ctx;
  benchSummary_t summary;
  benchPrintTableHeader(out, &c->table);
  for (int r = 0; r < 2; r++) benchPrintRow(out, &c->table, &c->rows[r]);
  benchSummarize(&c->table, c->rows, 2, &summary);
  benchPrintFooter(out, &c->table, &summary);
}

static void printCompareHeaderAndRow(FILE* out, void* ctx) {
  tableCase_t* c = (tableCase_t*)ctx;
  benchPrintTableHeader(out, &c->table);
  benchPrintRow(out, &c->table, &c->rows[0]);
}

static void testTable(void) {
  /* Produced by nccl-tests' own printf formats for these numbers (2 ranks): the table must diff clean against it. */
  static const char* const nccltests =
      "#\n"
      "#                                                              out-of-place                       in-place    "
      "      \n"
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw "
      " #wrong \n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s) "
      "        \n"
      "           8             2     float     sum      -1     6.21    0.00    0.00       0     6.23    0.00    0.00 "
      "      0\n"
      "   134217728      33554432     float     sum      -1   853.40  157.27  157.27       0  12345.7   10.87   10.87 "
      "   N/A\n"
      "# Out of bounds values : 0 OK\n"
      "# Avg bus bandwidth    : 42.0371 \n"
      "#\n"
      "# Collective test concluded: all_reduce_perf\n";
  tableCase_t c;
  makeRows(&c, 1);
  char* text = capture(printWholeTable, &c);
  EXPECT_MSG(strcmp(text, nccltests) == 0, "table differs from nccl-tests':\n%s\n--- want ---\n%s", text, nccltests);
  free(text);

  /* With NCCL beside: the first 13 columns unchanged, then time, busbw, #wrong and speedup per placement. */
  static const char* const compared =
      "#\n"
      "#                                                              out-of-place                       in-place    "
      "              nccl out-of-place                   nccl in-place           \n"
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw "
      " #wrong     time   busbw  #wrong  speedup     time   busbw  #wrong  speedup\n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s) "
      "            (us)  (GB/s)              (x)     (us)  (GB/s)              (x)\n"
      "           8             2     float     sum      -1     6.21    0.00    0.00       0     6.23    0.00    0.00 "
      "      0    12.42    0.00       0     2.00     9.35    0.00       3     1.50\n";
  makeRows(&c, 2);
  text = capture(printCompareHeaderAndRow, &c);
  EXPECT_MSG(strcmp(text, compared) == 0, "compare table:\n%s\n--- want ---\n%s", text, compared);
  free(text);

  benchSummary_t summary;
  benchSummarize(&c.table, c.rows, 2, &summary);
  EXPECT_EQ_INT(summary.errors[0], 0);
  EXPECT_EQ_INT(summary.errors[1], 1);
  EXPECT(fabs(summary.speedupGeomean[0] - 2.0) < 1e-9);       /* 12.42/6.21 and 1706.8/853.4 */
  EXPECT(fabs(summary.speedupGeomean[1] - sqrt(1.5)) < 1e-3); /* 1.5 and 1.0 */
  text = capture(printWholeTable, &c);
  EXPECT_STR_CONTAINS(text, "# nccl out of bounds   : 1 FAILED\n");
  EXPECT_STR_CONTAINS(text, "# fccl speedup vs nccl : 2.00x out-of-place, 1.22x in-place");
  free(text);
}

static void printStampedTable(FILE* out, void* ctx) {
  tableCase_t* c = (tableCase_t*)ctx;
  benchPrintTableHeader(out, &c->table);
  benchPrintRow(out, &c->table, &c->rows[0]);
}

/* -S and -M: the timestamp column and the memory line, against text made with nccl-tests' own formats. */
static void testTimestampsAndMemory(void) {
  setenv("TZ", "UTC", 1);
  tzset();
  tableCase_t c;
  makeRows(&c, 1);
  c.table.timestamps = 1;
  c.rows[0].timestamp = 1704164645; /* 2024-01-02 03:04:05 UTC */
  char want[2048];
  int used = snprintf(want, sizeof(want),
                      "#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place"
                      "          \n",
                      "", "", "", "", "");
  used += snprintf(want + used, sizeof(want) - used,
                   "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size", "count", "type",
                   "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", 19,
                   "timestamp");
  used += snprintf(want + used, sizeof(want) - used,
                   "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)", "(elements)", "",
                   "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", 19, "%Y-%m-%d %H:%M:%S");
  snprintf(want + used, sizeof(want) - used,
           "%12li  %12li  %8s  %6s  %6s  %7s  %6s  %6s  %6g  %7s  %6s  %6s  %6g%21s\n", 8L, 2L, "float", "sum",
           "    -1", "   6.21", "  0.00", "  0.00", 0.0, "   6.23", "  0.00", "  0.00", 0.0, "2024-01-02 03:04:05");
  char* text = capture(printStampedTable, &c);
  EXPECT_MSG(strcmp(text, want) == 0, "-S table:\n%s\n--- want ---\n%s", text, want);
  free(text);

  char amount[32];
  static const struct {
    double bytes;
    const char* text;
  } amounts[] = {{0, "0.00 B"},           {1536, "1.50 KB"},          {50.0 * (1 << 20), "50.0 MB"},
                 {512.0 * (1 << 20), "512 MB"}, {1.25 * (1 << 30), "1.25 GB"}, {3000.0 * (1 << 30), "3000 GB"}};
  for (size_t i = 0; i < sizeof(amounts) / sizeof(amounts[0]); i++) {
    benchFormatMemory(amounts[i].bytes, amount, sizeof(amount));
    EXPECT_MSG(strcmp(amount, amounts[i].text) == 0, "benchFormatMemory(%g) = '%s', want '%s'", amounts[i].bytes,
               amount, amounts[i].text);
  }
  char* line = NULL;
  size_t len = 0;
  FILE* out = open_memstream(&line, &len);
  const double parts[BENCH_MEM_PARTS] = {1.25 * (1 << 30), 512.0 * (1 << 20), 0};
  benchPrintMemoryReport(out, parts);
  fclose(out);
  EXPECT_MSG(strcmp(line, "# GPU memory usage     : Initialization 1.25 GB | User-Allocated 512 MB | Collective 0.00 B "
                          "| Total  1.75 GB\n") == 0, "memory line: %s", line);
  free(line);

  benchDeviceInfo_t device;
  EXPECT_EQ_INT(benchParseDeviceLine("#  Rank  1 Group  0 Pid  41211 on    h200-x2 device  1 [0000:3b:00] NVIDIA H200",
                                     &device), 0);
  EXPECT(device.rank == 1 && device.group == 0 && device.pid == 41211 && device.device == 1);
  EXPECT_MSG(strcmp(device.hostname, "h200-x2") == 0 && strcmp(device.deviceHex, "0000:3b:00") == 0 &&
             strcmp(device.deviceInfo, "NVIDIA H200") == 0, "parsed '%s' '%s' '%s'", device.hostname,
             device.deviceHex, device.deviceInfo);
  EXPECT_EQ_INT(benchParseDeviceLine("# Using devices", &device), -1);
  benchFormatTime(1704164645, amount, sizeof(amount));
  EXPECT_MSG(strcmp(amount, "2024-01-02 03:04:05") == 0, "benchFormatTime: %s", amount);
}

static void writeCsvCase(FILE* out, void* ctx) {
  tableCase_t* c = (tableCase_t*)ctx;
  benchCsvHeader(out);
  static const char* const buffers[2] = {"registered", "symmetric"};
  benchCsvRows(out, &c->table, &c->rows[0], buffers, 20, 2);
}

static void writeJsonCase(FILE* out, void* ctx) {
  tableCase_t* c = (tableCase_t*)ctx;
  toolJson_t json;
  toolJsonInit(&json, out, BENCH_JSON_WRAP_DEPTH);
  toolJsonBeginObject(&json, NULL);
  toolJsonString(&json, "name", "a \"q\"\\\n\x01");
  toolJsonBeginArray(&json, "list");
  toolJsonInt(&json, NULL, -3);
  toolJsonDouble(&json, NULL, 0.5);
  toolJsonDouble(&json, NULL, NAN);
  toolJsonBool(&json, NULL, 1);
  toolJsonNull(&json, NULL);
  toolJsonString(&json, NULL, NULL);
  toolJsonEnd(&json);
  toolJsonBeginObject(&json, "empty");
  toolJsonEnd(&json);
  toolJsonBeginObject(&json, "fields");
  toolJsonInt(&json, "int", -7);
  toolJsonDouble(&json, "double", 0.25);
  toolJsonDouble(&json, "infinite", INFINITY);
  toolJsonFixed(&json, "fixed", 2.0 / 3.0, 3);
  toolJsonBool(&json, "bool", 0);
  toolJsonString(&json, "null", NULL);
  toolJsonBeginInlineArray(&json, "inline");
  toolJsonInt(&json, NULL, 0);
  toolJsonInt(&json, NULL, 1);
  toolJsonEnd(&json);
  toolJsonEnd(&json);
  toolJsonBeginArray(&json, "results");
  benchJsonRow(&json, &c->table, &c->rows[0], 20);
  toolJsonEnd(&json);
  toolJsonEnd(&json);
}

static void testCsvAndJson(void) {
  tableCase_t c;
  makeRows(&c, 2);
  char* text = capture(writeCsvCase, &c);
  static const char* const csv =
      "collective,engine,buffers,graph,nranks,size,count,type,redop,placement,time_us,algbw_gbs,busbw_gbs,wrong\n"
      "all_reduce_perf,fccl,registered,20,2,8,2,float,sum,out-of-place,6.210,0.0013,0.0013,0\n"
      "all_reduce_perf,fccl,registered,20,2,8,2,float,sum,in-place,6.230,0.0013,0.0013,0\n"
      "all_reduce_perf,nccl,symmetric,20,2,8,2,float,sum,out-of-place,12.420,0.0006,0.0006,0\n"
      "all_reduce_perf,nccl,symmetric,20,2,8,2,float,sum,in-place,9.345,0.0009,0.0009,3\n";
  EXPECT_MSG(strcmp(text, csv) == 0, "csv:\n%s\n--- want ---\n%s", text, csv);
  free(text);

  c.rows[0].m[1][1].wrong = -1;
  text = capture(writeJsonCase, &c);
  static const char* const json =
      "{\n"
      "  \"name\": \"a \\\"q\\\"\\\\\\n\\u0001\",\n"
      "  \"list\": [\n"
      "    -3,\n"
      "    0.5,\n"
      "    null,\n"
      "    true,\n"
      "    null,\n"
      "    null\n"
      "  ],\n"
      "  \"empty\": {},\n"
      "  \"fields\": {\n"
      "    \"int\": -7,\n"
      "    \"double\": 0.25,\n"
      "    \"infinite\": null,\n"
      "    \"fixed\": 0.667,\n"
      "    \"bool\": false,\n"
      "    \"null\": null,\n"
      "    \"inline\": [0, 1]\n"
      "  },\n"
      "  \"results\": [\n"
      "    {\"size\": 8, \"count\": 2, \"type\": \"float\", \"redop\": \"sum\", \"root\": \"    -1\", "
      "\"out_of_place\": {\"time\": 6.21, \"alg_bw\": 0.00128824477, \"bus_bw\": 0.00128824477, \"nwrong\": 0}, "
      "\"in_place\": {\"time\": 6.23, \"alg_bw\": 0.00128410915, \"bus_bw\": 0.00128410915, \"nwrong\": 0}, "
      "\"actual_iterations\": 20, \"experiment_name\": \"\", \"cycle\": 0, "
      "\"nccl\": {\"out_of_place\": {\"time\": 12.42, \"alg_bw\": 0.000644122383, \"bus_bw\": 0.000644122383, "
      "\"nwrong\": 0}, "
      "\"in_place\": {\"time\": 9.345, \"alg_bw\": 0.000856072766, \"bus_bw\": 0.000856072766, \"nwrong\": null}, "
      "\"speedup\": {\"out_of_place\": 2, \"in_place\": 1.5}}}\n"
      "  ]\n"
      "}\n";
  EXPECT_MSG(strcmp(text, json) == 0, "json:\n%s\n--- want ---\n%s", text, json);
  free(text);

  char line[160], size[32];
  benchFormatBytes(512, size, sizeof(size));
  EXPECT(strcmp(size, "512 B") == 0);
  benchFormatBytes(64 << 10, size, sizeof(size));
  EXPECT(strcmp(size, "64 KiB") == 0);
  benchFormatBytes(1.5 * (1 << 20), size, sizeof(size));
  EXPECT(strcmp(size, "1.5 MiB") == 0);
  benchRow_t row = {.bytes = 64u << 20, .count = 32u << 20, .type = benchBfloat16, .op = benchSum, .root = -1};
  benchFormatProgress(line, sizeof(line), 3, 28, &row, "nccl in-place");
  EXPECT_MSG(strcmp(line, "[ 3/28] bfloat16 sum 64 MiB nccl in-place") == 0, "progress: %s", line);
}

/* ---- data and checking ---------------------------------------------------------------------------------------- */

static void testHalfAndBf16(void) {
  EXPECT_EQ_INT(benchFloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ_INT(benchFloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ_INT(benchFloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ_INT(benchFloatToHalf(65520.0f), 0x7c00);    /* rounds up to infinity */
  EXPECT_EQ_INT(benchFloatToHalf(0x1p-24f), 0x0001);    /* smallest subnormal */
  EXPECT_EQ_INT(benchFloatToHalf(0x1p-26f), 0x0000);    /* below half of it: zero */
  EXPECT_EQ_INT(benchFloatToHalf(0.1f), 0x2e66);
  EXPECT_EQ_INT(benchFloatToHalf(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
  EXPECT_EQ_INT(benchFloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ_INT(benchFloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ_INT(benchFloatToBf16(1.0f + 0x1p-8f), 0x3f80);  /* tie to even */
  EXPECT_EQ_INT(benchFloatToBf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);
  EXPECT_EQ_INT(benchFloatToBf16(-3.0f), 0xc040);
  int halfMismatch = 0, bfMismatch = 0;
  for (uint32_t bits = 0; bits < 0x10000; bits++) {
    int halfNan = (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff);
    int bfNan = (bits & 0x7f80) == 0x7f80 && (bits & 0x7f);
    if (!halfNan && benchFloatToHalf(benchHalfToFloat((uint16_t)bits)) != bits) halfMismatch++;
    if (!bfNan && benchFloatToBf16(benchBf16ToFloat((uint16_t)bits)) != bits) bfMismatch++;
    if (halfNan && !isnan(benchHalfToFloat((uint16_t)bits))) halfMismatch++;
  }
  EXPECT_EQ_INT(halfMismatch, 0);
  EXPECT_EQ_INT(bfMismatch, 0);
  EXPECT(benchHalfToFloat(0x0001) == 0x1p-24f);
  EXPECT(benchHalfToFloat(0x7c00) == INFINITY);
}

/* Stores a double in type's encoding: integers wrap to the width like the device does. */
static void storeAs(int type, double value, void* dst) {
  switch (type) {
    case benchInt8:
    case benchUint8: { uint8_t v = (uint8_t)(int64_t)value; memcpy(dst, &v, 1); break; }
    case benchInt32:
    case benchUint32: { uint32_t v = (uint32_t)(int64_t)value; memcpy(dst, &v, 4); break; }
    case benchInt64:
    case benchUint64: { uint64_t v = (uint64_t)(int64_t)value; memcpy(dst, &v, 8); break; }
    case benchFloat16: { uint16_t v = benchFloatToHalf((float)value); memcpy(dst, &v, 2); break; }
    case benchFloat32: { float v = (float)value; memcpy(dst, &v, 4); break; }
    case benchFloat64: memcpy(dst, &value, 8); break;
    case benchBfloat16: { uint16_t v = benchFloatToBf16((float)value); memcpy(dst, &v, 2); break; }
  }
}

static int isFloatType(int type) {
  return type == benchFloat16 || type == benchFloat32 || type == benchFloat64 || type == benchBfloat16;
}

/* The all-reduce done independently of the checker: decode every rank's input, reduce in double, encode. */
static void hostAllReduce(int type, int op, int nranks, uint64_t seed, size_t count, unsigned char* out) {
  size_t size = benchTypeSize(type);
  unsigned char* input = (unsigned char*)malloc(count * size * (size_t)nranks);
  for (int rank = 0; rank < nranks; rank++)
    benchFillInput(input + (size_t)rank * count * size, count, 0, type, op, rank, nranks, seed);
  for (size_t i = 0; i < count; i++) {
    double acc = benchLoadAsDouble(input, i, type);
    for (int rank = 1; rank < nranks; rank++) {
      double v = benchLoadAsDouble(input + (size_t)rank * count * size, i, type);
      switch (op) {
        case benchSum:
        case benchAvg: acc += v; break;
        case benchProd: acc *= v; break;
        case benchMax: acc = v > acc ? v : acc; break;
        case benchMin: acc = v < acc ? v : acc; break;
      }
    }
    if (op == benchAvg) acc = isFloatType(type) ? acc / nranks : trunc(acc / nranks);
    storeAs(type, acc, out + i * size);
  }
  free(input);
}

static void testChecker(void) {
  const size_t count = 3 * BENCH_PATTERN_PERIOD + 17;
  static const int rankCounts[] = {1, 2, 3, 8};
  unsigned char* result = (unsigned char*)malloc(count * 8);
  for (int type = 0; type < BENCH_NUM_TYPES; type++) {
    size_t size = benchTypeSize(type);
    for (int op = 0; op < BENCH_NUM_OPS; op++) {
      for (size_t k = 0; k < sizeof(rankCounts) / sizeof(rankCounts[0]); k++) {
        int nranks = rankCounts[k];
        uint64_t seed = 7 + (uint64_t)k;
        benchChecker_t checker;
        EXPECT_EQ_INT(benchCheckerInit(&checker, type, op, nranks, seed), 0);
        hostAllReduce(type, op, nranks, seed, count, result);
        int64_t wrong = benchCheckerCount(&checker, result, count, 0);
        EXPECT_MSG(wrong == 0, "%s %s %d ranks: %lld wrong on a right result", benchTypeName(type), benchOpName(op),
                   nranks, (long long)wrong);
        /* The same result checked in two pieces that split a pattern period. */
        size_t split = BENCH_PATTERN_PERIOD + 5;
        wrong = benchCheckerCount(&checker, result, split, 0) +
                benchCheckerCount(&checker, result + split * size, count - split, split);
        EXPECT_EQ_INT(wrong, 0);
        /* What --inject-corruption does (bit 6 of the top byte), and an unwritten, poisoned tail. */
        result[(count / 2) * size + size - 1] ^= 0x40;
        EXPECT_EQ_INT(benchCheckerCount(&checker, result, count, 0), 1);
        result[(count / 2) * size + size - 1] ^= 0x40;
        memset(result + (count - 10) * size, BENCH_POISON_BYTE, 10 * size);
        wrong = benchCheckerCount(&checker, result, count, 0);
        EXPECT_MSG(wrong == 10, "%s %s %d ranks: a poisoned tail gave %lld wrong, not 10", benchTypeName(type),
                   benchOpName(op), nranks, (long long)wrong);
        benchCheckerFree(&checker);
      }
    }
  }
  /* avg with floats tolerates rounding but not a different value. */
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, benchFloat32, benchAvg, 3, 1), 0);
  hostAllReduce(benchFloat32, benchAvg, 3, 1, count, result);
  float value;
  memcpy(&value, result, 4);
  value = nextafterf(value, INFINITY);
  memcpy(result, &value, 4);
  EXPECT_EQ_INT(benchCheckerCount(&checker, result, count, 0), 0);
  value += 0.25f;
  memcpy(result, &value, 4);
  EXPECT_EQ_INT(benchCheckerCount(&checker, result, count, 0), 1);
  benchCheckerFree(&checker);
  EXPECT_EQ_INT(benchCheckerInit(&checker, 99, benchSum, 2, 1), -1);
  free(result);

  /* Inputs: pieces fill like the whole; ranks and seeds differ; values stay small. */
  const size_t n = 5000;
  unsigned char* whole = (unsigned char*)malloc(n * 4);
  unsigned char* parts = (unsigned char*)malloc(n * 4);
  unsigned char* other = (unsigned char*)malloc(n * 4);
  benchFillInput(whole, n, 0, benchInt32, benchSum, 1, 4, 9);
  benchFillInput(parts, 1234, 0, benchInt32, benchSum, 1, 4, 9);
  benchFillInput(parts + 1234 * 4, n - 1234, 1234, benchInt32, benchSum, 1, 4, 9);
  EXPECT(memcmp(whole, parts, n * 4) == 0);
  benchFillInput(other, n, 0, benchInt32, benchSum, 2, 4, 9);
  EXPECT(memcmp(whole, other, n * 4) != 0);
  benchFillInput(other, n, 0, benchInt32, benchSum, 1, 4, 10);
  EXPECT(memcmp(whole, other, n * 4) != 0);
  int small = 1, nonzero = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t v;
    memcpy(&v, whole + i * 4, 4);
    if (v < -4 || v > 4) small = 0;
    if (v != 0) nonzero++;
  }
  EXPECT(small);
  EXPECT(nonzero > (int)n / 2);
  free(whole);
  free(parts);
  free(other);
}

/* Other collectives' result functions, as their programs would declare them: all-gather (every rank's input in
 * turn) and reduce-scatter (the rank's slice of the reduction). */
static benchSpan_t allGatherResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)rank;
  (void)nranks;
  (void)root;
  return (benchSpan_t){(int)(index / count), index % count, count - index % count};
}

static benchSpan_t reduceScatterResult(size_t index, size_t count, int rank, int nranks, int root) {
  (void)nranks;
  (void)root;
  return (benchSpan_t){BENCH_SOURCE_REDUCED, (size_t)rank * count + index, SIZE_MAX};
}

static void testCheckerResults(void) {
  const int nranks = 3, type = benchInt32;
  const size_t count = BENCH_PATTERN_PERIOD + 5, total = count * (size_t)nranks, size = 4;
  const uint64_t seed = 11;
  EXPECT(strcmp(benchOpName(BENCH_NO_OP), "none") == 0);
  /* All-gather: every rank's input, in rank order, checked whole and in pieces that cross the ranks' parts. */
  unsigned char* gathered = (unsigned char*)malloc(total * size);
  for (int rank = 0; rank < nranks; rank++)
    benchFillInput(gathered + (size_t)rank * count * size, count, 0, type, BENCH_NO_OP, rank, nranks, seed);
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, BENCH_NO_OP, nranks, seed), 0);
  benchCheckerSetResult(&checker, allGatherResult, count, 1, -1);
  EXPECT_EQ_INT(benchCheckerCount(&checker, gathered, total, 0), 0);
  const size_t split = count + 7;
  EXPECT_EQ_INT(benchCheckerCount(&checker, gathered, split, 0) +
                    benchCheckerCount(&checker, gathered + split * size, total - split, split),
                0);
  gathered[(2 * count + 3) * size] ^= 1;
  EXPECT_EQ_INT(benchCheckerCount(&checker, gathered, total, 0), 1);
  gathered[(2 * count + 3) * size] ^= 1;
  /* Rank 0's part where rank 1's belongs. */
  memcpy(gathered + count * size, gathered, count * size);
  int64_t wrong = benchCheckerCount(&checker, gathered, total, 0);
  EXPECT_MSG(wrong > (int64_t)count / 2, "another rank's input in rank 1's part: %lld wrong", (long long)wrong);
  benchCheckerFree(&checker);
  free(gathered);

  /* Reduce-scatter: rank 1 holds elements [count, 2 count) of the reduction of inputs of nranks x count. */
  unsigned char* reduced = (unsigned char*)malloc(total * size);
  hostAllReduce(type, benchSum, nranks, seed, total, reduced);
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, benchSum, nranks, seed), 0);
  benchCheckerSetResult(&checker, reduceScatterResult, count, 1, -1);
  EXPECT_EQ_INT(benchCheckerCount(&checker, reduced + count * size, count, 0), 0);
  wrong = benchCheckerCount(&checker, reduced, count, 0);
  EXPECT_MSG(wrong > (int64_t)count / 2, "rank 0's slice taken for rank 1's: %lld wrong", (long long)wrong);
  benchCheckerFree(&checker);
  free(reduced);
}

/* ---- the exchange ----------------------------------------------------------------------------------------------- */

static void* shmRegion;

static int exchangeRank(int rank, int nranks, void* arg) {
  (void)arg;
  benchOob_t oob;
  benchOobShmInit(&oob, shmRegion, rank, 20);
  int failures = 0;
  for (int round = 0; round < 200; round++) {
    double values[3] = {rank + round, -rank, rank * 2.0};
    if (benchOobReduce(&oob, values, 3, BENCH_REDUCE_SUM) != 0) return 10;
    double sum = nranks * (nranks - 1) / 2.0;
    if (values[0] != sum + nranks * round || values[1] != -sum || values[2] != 2 * sum) failures++;
    double mm[2] = {rank, rank};
    if (benchOobReduce(&oob, mm, 1, BENCH_REDUCE_MIN) != 0 || mm[0] != 0) failures++;
    mm[0] = rank;
    if (benchOobReduce(&oob, mm, 1, BENCH_REDUCE_MAX) != 0 || mm[0] != nranks - 1) failures++;
    mm[0] = rank + 10;
    if (benchOobReduce(&oob, mm, 1, BENCH_REDUCE_FIRST) != 0 || mm[0] != 10) failures++;
    mm[0] = rank;
    if (benchOobReduce(&oob, mm, 1, BENCH_REDUCE_AVG) != 0 || mm[0] != (nranks - 1) / 2.0) failures++;
    char id[3000];
    memset(id, rank == 0 ? 'a' + round % 26 : 0, sizeof(id));
    if (benchOobBcast(&oob, id, sizeof(id)) != 0) return 11;
    for (size_t i = 0; i < sizeof(id); i++)
      if (id[i] != 'a' + round % 26) {
        failures++;
        break;
      }
    if (benchOobBarrier(&oob) != 0) return 12;
  }
  return failures ? 13 : 0;
}

typedef struct {
  void* region;
  int agent;
  int status;
  double seconds;
  char error[256];
} waiter_t;

static void* waitAlone(void* arg) {
  waiter_t* w = (waiter_t*)arg;
  benchOob_t oob;
  benchOobShmInit(&oob, w->region, w->agent, 1);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  w->status = benchOobBarrier(&oob);
  clock_gettime(CLOCK_MONOTONIC, &b);
  w->seconds = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
  snprintf(w->error, sizeof(w->error), "%s", oob.error);
  return NULL;
}

static void testExchange(void) {
  const int nranks = 4;
  shmRegion = benchShmCreate(nranks);
  EXPECT(shmRegion != NULL);
  int codes[4];
  EXPECT_EQ_INT(testForkRanks(nranks, exchangeRank, NULL, 60, codes), 0);
  for (int r = 0; r < nranks; r++) EXPECT_MSG(codes[r] == 0, "exchange rank %d exited %d", r, codes[r]);
  benchShmDestroy(shmRegion);

  /* A missing peer: the wait ends at the timeout, with a message, and marks the exchange aborted. */
  void* region = benchShmCreate(2);
  waiter_t alone = {region, 0, 0, 0, ""};
  waitAlone(&alone);
  EXPECT_EQ_INT(alone.status, -1);
  EXPECT(alone.seconds >= 0.9 && alone.seconds < 10);
  EXPECT_STR_CONTAINS(alone.error, "timed out after 1 s");
  /* Once aborted, the next exchange fails at once. */
  waiter_t late = {region, 1, 0, 0, ""};
  waitAlone(&late);
  EXPECT_EQ_INT(late.status, -1);
  EXPECT(late.seconds < 0.5);
  EXPECT_STR_CONTAINS(late.error, "another rank gave up");
  benchShmDestroy(region);

  /* benchOobAbort from one agent releases another that is waiting. */
  region = benchShmCreate(3);
  waiter_t waiting = {region, 0, 0, 0, ""};
  pthread_t thread;
  pthread_create(&thread, NULL, waitAlone, &waiting);
  struct timespec pause = {0, 100 * 1000 * 1000};
  nanosleep(&pause, NULL);
  benchOob_t aborter;
  benchOobShmInit(&aborter, region, 2, 1);
  benchOobAbort(&aborter);
  pthread_join(thread, NULL);
  EXPECT_EQ_INT(waiting.status, -1);
  EXPECT(waiting.seconds < 0.9);
  benchShmDestroy(region);
  EXPECT(benchShmCreate(0) == NULL);
}

/* ---- launch ----------------------------------------------------------------------------------------------------- */

static const char* const* fakeEnv;
static const char* fakeGetenv(const char* name) {
  for (const char* const* e = fakeEnv; e && *e; e += 2)
    if (strcmp(e[0], name) == 0) return e[1];
  return NULL;
}

static int detect(const char* const* env, benchLaunchEnv_t* out, char* err, size_t len) {
  fakeEnv = env;
  return benchDetectLaunch(fakeGetenv, out, err, len);
}

static void testLaunchVariables(void) {
  benchLaunchEnv_t env;
  char err[256];
  static const char* const none[] = {"HOME", "/root", NULL};
  EXPECT_EQ_INT(detect(none, &env, err, sizeof(err)), 0);
  EXPECT_EQ_INT(env.kind, BENCH_LAUNCH_LOCAL);
  static const char* const torchrun[] = {"WORLD_SIZE", "4", "RANK", "3", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2",
                                         NULL};
  EXPECT_EQ_INT(detect(torchrun, &env, err, sizeof(err)), 0);
  EXPECT_EQ_INT(env.kind, BENCH_LAUNCH_ENV);
  EXPECT(strcmp(env.source, "torchrun") == 0);
  EXPECT(env.rank == 3 && env.size == 4 && env.localRank == 1 && env.localSize == 2 && !env.fromMpiLauncher);
  static const char* const openmpi[] = {"OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_RANK", "1",
                                        "OMPI_COMM_WORLD_LOCAL_RANK", "1", NULL};
  EXPECT_EQ_INT(detect(openmpi, &env, err, sizeof(err)), 0);
  EXPECT(env.kind == BENCH_LAUNCH_ENV && env.fromMpiLauncher && env.rank == 1 && env.localRank == 1);
  EXPECT(strcmp(env.source, "Open MPI") == 0);
  static const char* const slurm[] = {"PMI_SIZE", "8", "PMI_RANK", "5", "SLURM_LOCALID", "1", NULL};
  EXPECT_EQ_INT(detect(slurm, &env, err, sizeof(err)), 0);
  EXPECT(env.rank == 5 && env.size == 8 && env.localRank == 1);
  static const char* const both[] = {"OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_RANK", "0", "WORLD_SIZE", "2",
                                     "RANK", "1", NULL};
  EXPECT_EQ_INT(detect(both, &env, err, sizeof(err)), 0); /* torchrun's first, as fcclCommInitFromEnv reads them */
  EXPECT(env.rank == 1 && strcmp(env.source, "torchrun") == 0);
  static const char* const noRank[] = {"WORLD_SIZE", "2", NULL};
  EXPECT_EQ_INT(detect(noRank, &env, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "RANK is missing");
  static const char* const big[] = {"WORLD_SIZE", "2", "RANK", "2", NULL};
  EXPECT_EQ_INT(detect(big, &env, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "RANK=2 is not below WORLD_SIZE=2");
  static const char* const junk[] = {"WORLD_SIZE", "two", NULL};
  EXPECT_EQ_INT(detect(junk, &env, err, sizeof(err)), -1);
  static const char* const badLocal[] = {"WORLD_SIZE", "2", "RANK", "0", "LOCAL_RANK", "2", "LOCAL_WORLD_SIZE", "2",
                                         NULL};
  EXPECT_EQ_INT(detect(badLocal, &env, err, sizeof(err)), -1);
}

static void testPlan(void) {
  benchArgs_t args;
  benchLayout_t layout;
  char err[256];
  benchArgsDefaults(&args);
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT(layout.nProcs == 2 && layout.nRanks == 2 && !layout.shared);
  EXPECT_EQ_INT(benchDeviceOf(&layout, 1, 0), 1);
  args.nGpus = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT(layout.nProcs == 1 && layout.nRanks == 2);
  args.nGpus = 1;
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), 0);
  EXPECT(layout.nProcs == 1 && layout.nRanks == 1 && !layout.shared);
  args.nProcs = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "--share-gpu");
  args.shareGpu = 1;
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), 0);
  EXPECT(layout.shared && layout.nRanks == 2);
  EXPECT_EQ_INT(benchDeviceOf(&layout, 1, 0), 0);
  args.shareGpu = 0;
  args.nProcs = 3;
  args.nThreads = 2;
  args.nGpus = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 8, &layout, err, sizeof(err)), -1); /* 12 ranks on 8 GPUs */
  EXPECT_EQ_INT(benchPlanLocal(&args, 0, &layout, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "no GPU");
}

/* --hosts: consecutive processes pose as one host; NCCL takes ranks sharing a GPU only from different hosts. */
static void testPlanHosts(void) {
  benchArgs_t args;
  benchLayout_t layout;
  char err[256];
  benchArgsDefaults(&args);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-np", "4", "--hosts", "2", "--share-gpu", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.hosts, 2);
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT_EQ_INT(layout.hosts, 2);
  const int wantHost[4] = {0, 0, 1, 1};
  for (int p = 0; p < 4; p++) EXPECT_EQ_INT(benchHostOf(&layout, p), wantHost[p]);
  /* ranks 0 and 2 share GPU 0, 1 and 3 GPU 1: each pair of two hosts */
  EXPECT(layout.shared && benchNcclTakesSharing(&layout));
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), 0);
  EXPECT(!benchNcclTakesSharing(&layout)); /* all four on GPU 0: ranks 0 and 1 are one host */
  args.hosts = 4;
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), 0);
  EXPECT(benchNcclTakesSharing(&layout));
  EXPECT_EQ_INT(benchHostOf(&layout, 3), 3);
  args.hosts = 0;
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT(!benchNcclTakesSharing(&layout) && benchHostOf(&layout, 3) == 0);
  args.nProcs = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT(!layout.shared && benchNcclTakesSharing(&layout)); /* nothing shared */
  args.nProcs = 3;
  args.hosts = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 3, &layout, err, sizeof(err)), -1);
  EXPECT_STR_CONTAINS(err, "--hosts 2: 3 processes do not split into 2 hosts");
  /* two threads per process: both of a process's ranks are its host's */
  args.nProcs = 2;
  args.nThreads = 2;
  EXPECT_EQ_INT(benchPlanLocal(&args, 2, &layout, err, sizeof(err)), 0);
  EXPECT(benchNcclTakesSharing(&layout)); /* GPU 0: ranks 0 (process 0, host 0) and 2 (process 1, host 1) */
  EXPECT_EQ_INT(benchPlanLocal(&args, 1, &layout, err, sizeof(err)), 0);
  EXPECT(!benchNcclTakesSharing(&layout)); /* GPU 0: ranks 0 and 1 of one process */
}

static int bodyExit(int proc, void* arg) {
  int failing = *(int*)arg;
  if (proc == failing) return 3;
  if (failing >= 0) sleep(30); /* left hanging: the launcher must kill it */
  return 0;
}

/* Rank 1 dies (SIGKILL, as the OOM killer would) before it reaches the exchange the others wait in. */
static int bodyDiesBeforeExchange(int proc, void* arg) {
  if (proc == 1) kill(getpid(), SIGKILL);
  benchOob_t oob;
  benchOobShmInit(&oob, arg, proc, 60);
  if (benchOobBarrier(&oob) == 0) return 10;                  /* passed a barrier a dead rank never reached */
  return strstr(oob.error, "another rank gave up") ? 12 : 11; /* 12: released by the launcher's abort */
}

static int probeFive(char* msg, size_t len) {
  snprintf(msg, len, "hello");
  return 5;
}

static int probeDies(char* msg, size_t len) {
  (void)msg;
  (void)len;
  _exit(4);
}

static int probeHangs(char* msg, size_t len) {
  (void)msg;
  (void)len;
  sleep(60);
  return 1;
}

static double secondsSince(const struct timespec* start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - start->tv_sec) + 1e-9 * (double)(now.tv_nsec - start->tv_nsec);
}

static void testForkLauncher(void) {
  int failing = -1;
  EXPECT_EQ_INT(benchForkRun(3, bodyExit, &failing, NULL, 1), 0);
  failing = 1;
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  EXPECT_EQ_INT(benchForkRun(3, bodyExit, &failing, NULL, 1), 3);
  EXPECT_MSG(secondsSince(&start) < 10, "the hanging ranks were not killed after the grace period");
  EXPECT_EQ_INT(benchForkRun(0, bodyExit, &failing, NULL, 1), 1);

  /* A dead rank must not hang the others: the launcher aborts the exchange at once, long before the 30 s grace
   * period or the 60 s exchange timeout, and the survivors end on their own with the exchange's error. */
  void* region = benchShmCreate(3);
  EXPECT(region != NULL);
  clock_gettime(CLOCK_MONOTONIC, &start);
  int code = benchForkRun(3, bodyDiesBeforeExchange, region, benchShmAbort, 30);
  double seconds = secondsSince(&start);
  EXPECT_MSG(code == 128 + SIGKILL, "a rank killed by SIGKILL gave exit code %d", code);
  EXPECT_MSG(seconds < 10, "the survivors of a dead rank took %.1f s to stop", seconds);
  benchShmDestroy(region);

  int value = 0;
  char msg[64] = "";
  EXPECT_EQ_INT(benchProbeInChild(probeFive, &value, msg, sizeof(msg), 30), 0);
  EXPECT_EQ_INT(value, 5);
  EXPECT(strcmp(msg, "hello") == 0);
  EXPECT_EQ_INT(benchProbeInChild(probeDies, &value, msg, sizeof(msg), 30), -1);
  /* A probe that hangs (a wedged driver) is killed at the bound. */
  clock_gettime(CLOCK_MONOTONIC, &start);
  EXPECT_EQ_INT(benchProbeInChild(probeHangs, &value, msg, sizeof(msg), 1), -1);
  EXPECT_EQ_INT(errno, ETIMEDOUT);
  seconds = secondsSince(&start);
  EXPECT_MSG(seconds >= 0.9 && seconds < 10, "the hanging probe was given up after %.1f s, not 1", seconds);
}

int main(void) {
  testDefaultsAndFlags();
  testFlagErrors();
  testWritable();
  testSizes();
  testFloatColumns();
  testTable();
  testTimestampsAndMemory();
  testCsvAndJson();
  testHalfAndBf16();
  testChecker();
  testCheckerResults();
  testExchange();
  testLaunchVariables();
  testPlan();
  testPlanHosts();
  testForkLauncher();
  return testSummary("bench");
}
