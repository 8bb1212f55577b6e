/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The benchmark's host-only core (tools/bench): flags as nccl-tests spells them, the size sweep, bandwidth
 * arithmetic, the table compared character for character with text produced by nccl-tests' own printf formats,
 * JSON and CSV, the input pattern and checker (against an independent host reduction), the 16-bit float
 * conversions, the shared-memory exchange between forked processes, launcher variables and the fork launcher.
 *
 * One program over four files, by the part of tools/bench they test: test_bench.c (flags and the size sweep,
 * args.c; and main), test_bench_report.c (the table, JSON and CSV, report.c), test_bench_checker.c (the input
 * pattern, the checker and the 16-bit floats, check.c), test_bench_launch.c (the exchange, oob.c; launcher
 * variables, the plan and the fork launcher, launch.c).
 */
#include "test_bench.h"

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
int parse(benchArgs_t* args, char* err, size_t errLen, ...) {
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
  EXPECT_FIELD(perIterTiming);
  EXPECT_FIELD(perIterSkip);
#undef EXPECT_FIELD
  const char* paths[2][2] = {{got->jsonPath, want->jsonPath}, {got->csvPath, want->csvPath}};
  for (int i = 0; i < 2; i++)
    EXPECT_MSG((!paths[i][0] && !paths[i][1]) || (paths[i][0] && paths[i][1] && strcmp(paths[i][0], paths[i][1]) == 0),
               "%s: %s is '%s', want '%s'", what, i ? "csvPath" : "jsonPath", paths[i][0] ? paths[i][0] : "(none)",
               paths[i][1] ? paths[i][1] : "(none)");
}

void testDefaultsAndFlags(void) {
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
  want.takes = BENCH_TAKES_ALL;
  expectArgs("defaults", &args, &want);
  const benchArgs_t defaults = want;

  /* A typical nccl-tests command line, every flag it shares with fccl (-z goes with eager launches: below). */
  int status = parse(&args, err, sizeof(err), "-b", "8", "-e", "128M", "-f", "2", "-g", "2", "-t", "3", "-n", "50",
                     "-w", "10", "-N", "3", "-c", "0", "-d", "bfloat16", "-o", "all", "-G", "20", "-a", "3", "-T", "30",
                     "-u", "3", "-R", "2", "-J", "out.json", "-p", "1", "-C", "1", "-S", "1", "-M", "1", "-r", "0",
                     "-I", "0", "-K", "0", "-y", "0", "-D", "0", "-x", "0", "-V", "16", NULL);
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

  /* --max-ctas: the budgets in the order given, after the default table */
  EXPECT_EQ_INT(args.nMaxCtas, 0);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--max-ctas", "8,16,32", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.nMaxCtas, 3);
  EXPECT_EQ_INT(args.maxCtas[0], 8);
  EXPECT_EQ_INT(args.maxCtas[1], 16);
  EXPECT_EQ_INT(args.maxCtas[2], 32);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--max-ctas=1", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.nMaxCtas, 1);
  EXPECT_EQ_INT(args.maxCtas[0], 1);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--max-ctas", "1,2,3,4,5,6,7,0x100", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.nMaxCtas, BENCH_MAX_BUDGETS);
  EXPECT_EQ_INT(args.maxCtas[7], 256);

  /* each budget's -J and --csv file: ".max-ctas-N" before the extension of the file's own name */
  static const struct {
    const char *path, *want;
  } budgetPaths[] = {{"out.json", "out.max-ctas-8.json"},   {"out", "out.max-ctas-8"},
                     {"dir.d/out", "dir.d/out.max-ctas-8"}, {"/tmp/r.tar.csv", "/tmp/r.tar.max-ctas-8.csv"},
                     {".hidden", ".hidden.max-ctas-8"},     {"dir/.hidden", "dir/.hidden.max-ctas-8"}};
  for (size_t i = 0; i < sizeof(budgetPaths) / sizeof(budgetPaths[0]); i++) {
    char out[64];
    EXPECT_EQ_INT(benchBudgetPath(budgetPaths[i].path, 8, out, sizeof(out)), 0);
    EXPECT_MSG(strcmp(out, budgetPaths[i].want) == 0, "%s: %s, want %s", budgetPaths[i].path, out, budgetPaths[i].want);
  }
  char small[8];
  EXPECT_EQ_INT(benchBudgetPath("out.json", 8, small, sizeof(small)), -1);
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
    {{"-G", "5", "--blocking", "2"}, "use one or the other"},
    {{"-N", "-1"}, "0 (until SIGINT or SIGTERM) to 100000"},
    {{"--run_cycles", "100001"}, "0 (until SIGINT or SIGTERM) to 100000"},
    {{"-S", "2"}, "0 or 1"},
    {{"-M", "2"}, "0 or 1"},
    {{"--memory=3"}, "0 or 1"},
    /* nccl-tests' flags for NCCL alone: their default accepted, other values refused with the reason */
    {{"-I", "2"}, "-I: 0 or 1, not 2"},
    {{"-K", "x"}, "not an integer"},
    {{"-y", "1"}, "-y 1: the NULL stream is not supported"},
    {{"-x", "1"},
     "-x 1: NCCL's CTA policies (1 efficiency, 2 zero) are not supported: fccl's communicators have none; "
     "only -x 0"},
    {{"--cta_policy", "2"}, "only --cta_policy 0 (NCCL's default policy)"},
    {{"-D", "1"}, "-D 1: NCCL's device-API implementations are not supported"},
    {{"-V", "32"},
     "-V 32: the CTA count of NCCL's device-API implementations (-D above 0) is not supported; only "
     "-V 16 (nccl-tests' default)"},
    {{"-C", "-1"}, "0 or 1"},
    {{"-p", "7"}, "0 or 1"},
    {{"--progress", "2"}, "0 or 1"},
    {{"-J", ""}, "file name is empty"},
    {{"--csv="}, "file name is empty"},
    /* names */
    {{"-d", "float8"}, "unknown datatype 'float8'"},
    {{"-o", "mulsum"}, "unknown reduction"},
    {{"--compare", "mpi"}, "'nccl'"},
    /* --max-ctas */
    {{"--max-ctas", "0"}, "--max-ctas: '0': a block count is 1 to 65535"},
    {{"--max-ctas", "8,-1"}, "'-1': a block count is 1 to 65535"},
    {{"--max-ctas", "65536"}, "1 to 65535"},
    {{"--max-ctas", "8,,16"}, "'8,,16' is not a list of block counts"},
    {{"--max-ctas", "8,"}, "not a list of block counts"},
    {{"--max-ctas", ""}, "not a list of block counts"},
    {{"--max-ctas", "eight"}, "'eight': a block count"},
    {{"--max-ctas", "1,2,3,4,5,6,7,8,9"}, "at most 8 budgets in one run"},
    {{"--max-ctas", "8", "-N", "0"}, "--max-ctas with -N 0"},
    /* the sweep */
    {{"-b", "2M", "-e", "1M"}, "invalid sizes for 'minbytes' and 'maxbytes': 2097152 > 1048576"},
    {{"-b", "0", "-e", "1M", "-f", "2"}, "above 0 bytes"},
    {{"-b", "1", "-e", "1M", "-i", "0"}, "needs a step"},
};

void testFlagErrors(void) {
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
  benchPrintUsage(out, "all_reduce_perf", BENCH_TAKES_ALL);
  fclose(out);
  EXPECT_STR_CONTAINS(text, "USAGE: all_reduce_perf");
  EXPECT_STR_CONTAINS(text, "--compare nccl");
  EXPECT_STR_CONTAINS(text, "-G,--cudagraph");
  EXPECT_STR_CONTAINS(text, "-I,--per_iter_timing");
  free(text);
}

/* -I, -K, -N 0, and what nccl-tests (2.19) resolves with a warning instead of an error: the same changes, its words. */
void testPerIterAndForever(void) {
  benchArgs_t args;
  char err[256] = "";
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-I", "1", "-K", "5", "-n", "50", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.perIterTiming, 1);
  EXPECT_EQ_INT(args.perIterSkip, 5);
  EXPECT_MSG(args.notice[0] == '\0', "a notice for a valid -I -K: %s", args.notice);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--per_iter_timing=1", "--per_iter_skip", "0", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.perIterTiming, 1);
  /* -I under -G: off, as nccl-tests turns it off. */
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-I", "1", "-G", "10", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.perIterTiming, 0);
  EXPECT_STR_CONTAINS(args.notice, "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.\n");
  /* -z 3 under -G: off, where -z 1 and 2 stay refused. */
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-z", "3", "-G", "5", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.blocking, BENCH_BLOCKING_OFF);
  EXPECT_EQ_INT(args.graphLaunches, 5);
  EXPECT_STR_CONTAINS(args.notice, "blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.");
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-z", "2", "-G", "5", NULL), BENCH_PARSE_ERROR);
  EXPECT_STR_CONTAINS(err, "use one or the other");
  /* -K out of range, or without -I: 0. */
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-I", "1", "-K", "20", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.perIterSkip, 0);
  EXPECT_STR_CONTAINS(args.notice, "per-iteration skip (-K) must be between 0 and 19. Disabling.");
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-I", "1", "-K", "-1", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.perIterSkip, 0);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-K", "3", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.perIterSkip, 0);
  EXPECT_STR_CONTAINS(args.notice, "per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.");
  /* Both -I and -K resolved under -G: two lines, in nccl-tests' order. */
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-I", "1", "-K", "2", "-G", "1", NULL), BENCH_PARSE_OK);
  EXPECT_MSG(strcmp(args.notice,
                    "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.\n"
                    "per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.\n") == 0,
             "notice: %s", args.notice);
  /* -N 0: until a signal. */
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "-N", "0", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.runCycles, 0);
  EXPECT_EQ_INT(parse(&args, err, sizeof(err), "--run_cycles=0", NULL), BENCH_PARSE_OK);
  EXPECT_EQ_INT(args.runCycles, 0);
}

/* Parses argv[1..] for a program that honours takes. */
static int parseFor(unsigned takes, benchArgs_t* args, char* err, size_t errLen, const char* flag, const char* value) {
  char* argv[3] = {"program", (char*)flag, (char*)value};
  benchArgsDefaults(args);
  args->takes = takes;
  return benchParseArgs(value ? 3 : 2, argv, args, err, errLen);
}

static char* usageOf(const char* program, unsigned takes) {
  char* text = NULL;
  size_t len = 0;
  FILE* out = open_memstream(&text, &len);
  benchPrintUsage(out, program, takes);
  fclose(out);
  return text;
}

/* Each program honours what it lists: barrier_perf (not one of nccl-tests') refuses the flags it has no use for;
 * nccl-tests' programs accept every nccl-tests flag, as nccl-tests' do, and list the ones without effect apart. */
void testProgramFlags(void) {
  static const struct {
    const char* flag;
    const char* value;
  } notBarrier[] = {{"-b", "8"},        {"-e", "64M"}, {"-i", "1"},  {"-f", "2"},         {"-c", "1"},
                    {"-d", "float"},    {"-o", "sum"}, {"-r", "0"},  {"-u", "1"},         {"-R", "1"},
                    {"-I", "1"},        {"-K", "0"},   {"-p", "1"},  {"-m", "1"},         {"-y", "0"},
                    {"-x", "0"},        {"-D", "0"},   {"-V", "16"}, {"--minbytes", "8"}, {"--inject-corruption", NULL},
                    {"--max-ctas", "8"}};
  benchArgs_t args;
  char err[256];
  for (size_t i = 0; i < sizeof(notBarrier) / sizeof(notBarrier[0]); i++) {
    EXPECT_MSG(parseFor(0, &args, err, sizeof(err), notBarrier[i].flag, notBarrier[i].value) == BENCH_PARSE_ERROR,
               "barrier_perf took %s", notBarrier[i].flag);
    EXPECT_STR_CONTAINS(err, "does not apply to this program (see --help)");
    EXPECT_EQ_INT(parseFor(BENCH_TAKES_ALL, &args, err, sizeof(err), notBarrier[i].flag, notBarrier[i].value),
                  BENCH_PARSE_OK);
  }
  static const struct {
    const char* flag;
    const char* value;
  } everyone[] = {{"-n", "5"},           {"-w", "2"},      {"-N", "0"},           {"-z", "1"},
                  {"-G", "2"},           {"-a", "2"},      {"-T", "9"},           {"-C", "1"},
                  {"-S", "1"},           {"-M", "1"},      {"-t", "2"},           {"-g", "2"},
                  {"-J", "x.json"},      {"-np", "2"},     {"--compare", "nccl"}, {"--csv", "x.csv"},
                  {"--share-gpu", NULL}, {"--hosts", "2"}, {"--path", "nccl"},    {"--progress", "0"}};
  for (size_t i = 0; i < sizeof(everyone) / sizeof(everyone[0]); i++)
    EXPECT_MSG(parseFor(0, &args, err, sizeof(err), everyone[i].flag, everyone[i].value) == BENCH_PARSE_OK,
               "barrier_perf refused %s: %s", everyone[i].flag, err);
  /* An nccl-tests program without op or root (all_gather_perf) accepts -o and -r as nccl-tests' does; a value is
   * still checked. */
  const unsigned allGather = BENCH_TAKES_DATA | BENCH_TAKES_PER_ITER | BENCH_TAKES_NCCL_TESTS;
  EXPECT_EQ_INT(parseFor(allGather, &args, err, sizeof(err), "-o", "prod"), BENCH_PARSE_OK);
  EXPECT_EQ_INT(parseFor(allGather, &args, err, sizeof(err), "-r", "1"), BENCH_PARSE_OK);
  EXPECT_EQ_INT(parseFor(allGather, &args, err, sizeof(err), "-o", "mean"), BENCH_PARSE_ERROR);
  EXPECT_EQ_INT(parseFor(allGather, &args, err, sizeof(err), "-x", "2"), BENCH_PARSE_ERROR);

  /* --help lists what the program honours, and under "without effect" what it only accepts. */
  char* text = usageOf("barrier_perf", 0);
  EXPECT_STR_CONTAINS(text, "USAGE: barrier_perf");
  static const char* const absent[] = {"--minbytes",       "--datatype",     "--op",
                                       "--root",           "--check",        "--unalign",
                                       "--local_register", "--per_iter",     "--parallel_init",
                                       "--agg_iters",      "--stream_null",  "--cta_policy",
                                       "--device_",        "without effect", "--max-ctas"};
  for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++)
    EXPECT_MSG(strstr(text, absent[i]) == NULL, "barrier_perf --help lists %s:\n%s", absent[i], text);
  static const char* const present[] = {"-n,--iters",
                                        "-w,--warmup_iters",
                                        "-N,--run_cycles",
                                        "-z,--blocking",
                                        "-G,--cudagraph",
                                        "-a,--average",
                                        "-T,--timeout",
                                        "-C,--report_cputime",
                                        "-S,--report_timestamps",
                                        "-M,--memory_report",
                                        "-J,--output_file",
                                        "--compare nccl",
                                        "--csv",
                                        "--share-gpu",
                                        "--hosts",
                                        "-np,--nprocs"};
  for (size_t i = 0; i < sizeof(present) / sizeof(present[0]); i++) EXPECT_STR_CONTAINS(text, present[i]);
  free(text);
  text = usageOf("all_gather_perf", allGather);
  EXPECT_STR_CONTAINS(text, "-b,--minbytes");
  EXPECT_STR_CONTAINS(text, "-I,--per_iter_timing");
  EXPECT_MSG(strstr(text, "  -o,--op <op|all>") == NULL && strstr(text, "  -r,--root <rank>") == NULL,
             "all_gather_perf --help lists -o or -r as honoured:\n%s", text);
  EXPECT_STR_CONTAINS(text, "-o,--op (all_gather_perf has no reduction)");
  EXPECT_STR_CONTAINS(text, "-r,--root (all_gather_perf has no root)");
  free(text);
  text = usageOf("broadcast_perf", allGather | BENCH_TAKES_ROOT);
  EXPECT_STR_CONTAINS(text, "  -r,--root <rank>");
  free(text);
}

/* -J and --csv are checked before the run; nothing is created by the check. */
void testWritable(void) {
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

void testSizes(void) {
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
  /* A call's count against nccl-tests' own rule (2.19, all_gather.cu and alltoall.cu): (count / nranks) &
   * ~(16 / eltSize - 1); without perRank the size's elements (all_reduce.cu, broadcast.cu). */
  for (int type = 0; type < BENCH_NUM_TYPES; type++) {
    for (int nranks = 1; nranks <= 9; nranks++) {
      for (size_t bytes = 0; bytes < 5000; bytes += 7) {
        const size_t elt = benchTypeSize(type), count = bytes / elt;
        EXPECT_EQ_INT(benchCallCount(bytes, type, nranks, 1, 16), (count / (size_t)nranks) & ~(16 / elt - 1));
        EXPECT_EQ_INT(benchCallCount(bytes, type, nranks, 0, 0), count);
      }
    }
  }
  EXPECT_EQ_INT(benchCallCount(8, benchFloat32, 2, 1, 16), 0); /* 8 B on 2 ranks: nccl-tests' size-0 row */
  EXPECT_EQ_INT(benchCallCount(1 << 20, benchFloat32, 8, 1, 16), 32768);
  EXPECT_EQ_INT(benchCallCount(100, benchInt8, 3, 1, 0), 33);
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

int main(void) {
  testDefaultsAndFlags();
  testFlagErrors();
  testPerIterAndForever();
  testProgramFlags();
  testWritable();
  testSizes();
  testFloatColumns();
  testTable();
  testTimestampsAndMemory();
  testCsvAndJson();
  testPerIter();
  testHalfAndBf16();
  testChecker();
  testCheckerResults();
  testExchange();
  testLaunchVariables();
  testPlan();
  testPlanHosts();
  testForkLauncher();
  testStopOnSignal();
  return testSummary("bench");
}
