/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Command-line flags: nccl-tests' (same letters, same long names, same defaults) and fccl's own. A hand-written
 * parser rather than getopt: it accepts nccl-tests' "-np N" spelling, keeps no global state (the unit tests
 * parse many command lines in one process) and reports errors as text for the caller to print.
 */
#include "bench.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static const char* const typeNames[BENCH_NUM_TYPES] = {"int8",   "uint8", "int32", "uint32", "int64",
                                                       "uint64", "half",  "float", "double", "bfloat16"};
static const size_t typeSizes[BENCH_NUM_TYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static const char* const opNames[BENCH_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};

const char* benchTypeName(int type) { return type >= 0 && type < BENCH_NUM_TYPES ? typeNames[type] : "?"; }
size_t benchTypeSize(int type) { return type >= 0 && type < BENCH_NUM_TYPES ? typeSizes[type] : 0; }
const char* benchBlockingText(int blocking) {
  switch (blocking) {
    case BENCH_BLOCKING_BARRIER: return "Blocking Enabled: wait and barrier after each inner iteration (-m) ";
    case BENCH_BLOCKING_WAIT: return "Blocking Enabled: wait after each inner iteration (-m), no barrier ";
    case BENCH_BLOCKING_EXCLUDE_BARRIER:
      return "Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier ";
    default: return "";
  }
}

const char* benchOpName(int op) {
  if (op == BENCH_NO_OP) return "none";
  return op >= 0 && op < BENCH_NUM_OPS ? opNames[op] : "?";
}

int benchTypeFromName(const char* name) {
  static const struct {
    const char* alias;
    int type;
  } aliases[] = {{"char", benchInt8},      {"int", benchInt32},       {"fp16", benchFloat16},
                 {"float16", benchFloat16}, {"fp32", benchFloat32},    {"float32", benchFloat32},
                 {"fp64", benchFloat64},   {"float64", benchFloat64}, {"bf16", benchBfloat16}};
  if (!name) return -1;
  for (int type = 0; type < BENCH_NUM_TYPES; type++)
    if (strcasecmp(name, typeNames[type]) == 0) return type;
  for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
    if (strcasecmp(name, aliases[i].alias) == 0) return aliases[i].type;
  return -1;
}

int benchOpFromName(const char* name) {
  if (!name) return -1;
  for (int op = 0; op < BENCH_NUM_OPS; op++)
    if (strcasecmp(name, opNames[op]) == 0) return op;
  return -1;
}

void benchArgsDefaults(benchArgs_t* args) {
  memset(args, 0, sizeof(*args));
  args->nThreads = 1;
  args->nGpus = 1;
  args->nProcs = 0;
  args->minBytes = 32u << 20;
  args->maxBytes = 32u << 20;
  args->stepBytes = 1u << 20;
  args->stepFactor = 1;
  args->iters = 20;
  args->warmupIters = 1; /* nccl-tests' default since 2.16.8 */
  args->runCycles = 1;
  args->check = 1;
  args->average = 1;
  args->root = 0;
  args->type = benchFloat32;
  args->op = benchSum;
  args->progress = -1;
  args->takes = BENCH_TAKES_ALL;
}

int benchParseSize(const char* text, size_t* bytes) {
  if (!text || !*text) return -1;
  errno = 0;
  char* end = NULL;
  double value = strtod(text, &end);
  if (errno != 0 || end == text || !(value >= 0)) return -1; /* also NaN */
  double unit = 1;
  switch (*end) {
    case '\0': break;
    case 'k': case 'K': unit = 1024.0; end++; break;
    case 'm': case 'M': unit = 1024.0 * 1024.0; end++; break;
    case 'g': case 'G': unit = 1024.0 * 1024.0 * 1024.0; end++; break;
    case 't': case 'T': unit = 1024.0 * 1024.0 * 1024.0 * 1024.0; end++; break;
    default: return -1;
  }
  if (*end == 'B' || *end == 'b') end++; /* "64MB", "1KiB" are common spellings */
  else if (*end == 'i' && (end[1] == 'B' || end[1] == 'b')) end += 2;
  if (*end != '\0') return -1;
  double total = value * unit;
  if (total > 9.0e18) return -1;
  *bytes = (size_t)total;
  return 0;
}

enum {
  FLAG_NTHREADS,
  FLAG_NGPUS,
  FLAG_MINBYTES,
  FLAG_MAXBYTES,
  FLAG_STEPBYTES,
  FLAG_STEPFACTOR,
  FLAG_ITERS,
  FLAG_AGGITERS,
  FLAG_WARMUP,
  FLAG_CYCLES,
  FLAG_PARALLELINIT,
  FLAG_CHECK,
  FLAG_OP,
  FLAG_DATATYPE,
  FLAG_ROOT,
  FLAG_BLOCKING,
  FLAG_TIMEOUT,
  FLAG_GRAPH,
  FLAG_CPUTIME,
  FLAG_TIMESTAMPS,
  FLAG_MEMORY,
  FLAG_AVERAGE,
  FLAG_UNALIGN,
  FLAG_REGISTER,
  FLAG_JSON,
  FLAG_PERITER,
  FLAG_PERITERSKIP,
  FLAG_STREAMNULL,
  FLAG_CTAPOLICY,
  FLAG_DEVICEIMPL,
  FLAG_DEVICECTAS,
  FLAG_NPROCS,
  FLAG_COMPARE,
  FLAG_PATH,
  FLAG_CSV,
  FLAG_SHARE,
  FLAG_HOSTS,
  FLAG_MAXCTAS,
  FLAG_CORRUPT,
  FLAG_PROGRESS,
  FLAG_HELP
};
enum { ARG_NONE, ARG_INT, ARG_SIZE, ARG_TEXT };

/* The groups of BENCH_TAKES_* a flag belongs to; 0: every program honours it. */
enum {
  DATA = BENCH_TAKES_DATA,
  OP = BENCH_TAKES_OP,
  ROOT = BENCH_TAKES_ROOT,
  PER_ITER = BENCH_TAKES_PER_ITER,
  NCCL_TESTS = BENCH_TAKES_NCCL_TESTS
};

static const struct {
  char shortName;
  const char* longName;
  int id;
  int arg;
  unsigned group;
} flags[] = {
    {'t', "nthreads", FLAG_NTHREADS, ARG_INT, 0},
    {'g', "ngpus", FLAG_NGPUS, ARG_INT, 0},
    {'b', "minbytes", FLAG_MINBYTES, ARG_SIZE, DATA},
    {'e', "maxbytes", FLAG_MAXBYTES, ARG_SIZE, DATA},
    {'i', "stepbytes", FLAG_STEPBYTES, ARG_SIZE, DATA},
    {'f', "stepfactor", FLAG_STEPFACTOR, ARG_INT, DATA},
    {'n', "iters", FLAG_ITERS, ARG_INT, 0},
    {'m', "agg_iters", FLAG_AGGITERS, ARG_INT, NCCL_TESTS},
    {'w', "warmup_iters", FLAG_WARMUP, ARG_INT, 0},
    {'N', "run_cycles", FLAG_CYCLES, ARG_INT, 0},
    {'p', "parallel_init", FLAG_PARALLELINIT, ARG_INT, NCCL_TESTS},
    {'c', "check", FLAG_CHECK, ARG_INT, DATA},
    {'o', "op", FLAG_OP, ARG_TEXT, OP},
    {'d', "datatype", FLAG_DATATYPE, ARG_TEXT, DATA},
    {'r', "root", FLAG_ROOT, ARG_INT, ROOT},
    {'z', "blocking", FLAG_BLOCKING, ARG_INT, 0},
    {'T', "timeout", FLAG_TIMEOUT, ARG_INT, 0},
    {'G', "cudagraph", FLAG_GRAPH, ARG_INT, 0},
    {'C', "report_cputime", FLAG_CPUTIME, ARG_INT, 0},
    {'S', "report_timestamps", FLAG_TIMESTAMPS, ARG_INT, 0},
    {'M', "memory_report", FLAG_MEMORY, ARG_INT, 0},
    {0, "memory", FLAG_MEMORY, ARG_INT, 0}, /* nccl-tests' getopt table spells it so; its usage says memory_report */
    {'a', "average", FLAG_AVERAGE, ARG_INT, 0},
    {'u', "unalign", FLAG_UNALIGN, ARG_INT, DATA},
    {'R', "local_register", FLAG_REGISTER, ARG_INT, DATA},
    {'J', "output_file", FLAG_JSON, ARG_TEXT, 0},
    {0, "json", FLAG_JSON, ARG_TEXT, 0},
    {'I', "per_iter_timing", FLAG_PERITER, ARG_INT, PER_ITER},
    {'K', "per_iter_skip", FLAG_PERITERSKIP, ARG_INT, PER_ITER},
    /* nccl-tests' flags for NCCL alone: their default value is accepted, any other refused with the reason
     * (applyFlag). */
    {'y', "stream_null", FLAG_STREAMNULL, ARG_INT, NCCL_TESTS},
    {'x', "cta_policy", FLAG_CTAPOLICY, ARG_INT, NCCL_TESTS},
    {'D', "device_implementation", FLAG_DEVICEIMPL, ARG_INT, NCCL_TESTS},
    {'V', "device_cta_count", FLAG_DEVICECTAS, ARG_INT, NCCL_TESTS},
    {0, "np", FLAG_NPROCS, ARG_INT, 0},
    {0, "nprocs", FLAG_NPROCS, ARG_INT, 0},
    {0, "compare", FLAG_COMPARE, ARG_TEXT, 0},
    {0, "path", FLAG_PATH, ARG_TEXT, 0},
    {0, "csv", FLAG_CSV, ARG_TEXT, 0},
    {0, "share-gpu", FLAG_SHARE, ARG_NONE, 0},
    {0, "hosts", FLAG_HOSTS, ARG_INT, 0},
    {0, "max-ctas", FLAG_MAXCTAS, ARG_TEXT, DATA},
    {0, "inject-corruption", FLAG_CORRUPT, ARG_NONE, DATA},
    {0, "progress", FLAG_PROGRESS, ARG_INT, 0},
    {'h', "help", FLAG_HELP, ARG_NONE, 0},
};
#define FLAG_COUNT ((int)(sizeof(flags) / sizeof(flags[0])))

int benchError(char* err, size_t errLen, const char* fmt, ...) {
  if (err && errLen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errLen, fmt, ap);
    va_end(ap);
  }
  return -1;
}
/* benchError's -1 is the parse error. */
_Static_assert(BENCH_PARSE_ERROR == -1, "benchError returns BENCH_PARSE_ERROR");

/* -d and -o: "all", or a name fromName knows. BENCH_ALL, the value, or -1. */
static int nameOrAll(const char* value, int (*fromName)(const char* name)) {
  return strcasecmp(value, "all") == 0 ? BENCH_ALL : fromName(value);
}

/* The 0/1 flags (-C, -S, -M, -p, --progress): anything else is a mistake worth saying (nccl-tests reads 2 as 1). */
static int parseSwitch(int n, const char* name, int* out, char* err, size_t errLen) {
  if (n != 0 && n != 1) return benchError(err, errLen, "%s: 0 or 1, not %d", name, n);
  *out = n;
  return BENCH_PARSE_OK;
}

/* 0, -1 (not an integer), or -2 (an integer outside [minValue, maxValue]). Base prefixes as strtol's (0x10). */
static int parseInt(const char* text, long long minValue, long long maxValue, long long* value) {
  if (!text || !*text) return -1;
  errno = 0;
  char* end = NULL;
  long long parsed = strtoll(text, &end, 0);
  if (end == text || *end != '\0') return -1;
  if (errno == ERANGE || parsed < minValue || parsed > maxValue) return -2;
  *value = parsed;
  return 0;
}

/* --max-ctas: a comma-separated list of block counts, each 1 to 65535 (a grid's x dimension is far larger; no GPU
 * has that many SMs). */
static int parseBudgets(benchArgs_t* args, const char* name, const char* value, char* err, size_t errLen) {
  args->nMaxCtas = 0;
  for (const char* item = value;;) {
    const size_t len = strcspn(item, ",");
    char text[32];
    long long n = 0;
    if (len == 0 || len >= sizeof(text))
      return benchError(err, errLen, "%s: '%s' is not a list of block counts (8,16,32)", name, value);
    memcpy(text, item, len);
    text[len] = '\0';
    if (parseInt(text, 1, 65535, &n) != 0)
      return benchError(err, errLen, "%s: '%s': a block count is 1 to 65535", name, text);
    if (args->nMaxCtas == BENCH_MAX_BUDGETS)
      return benchError(err, errLen, "%s: at most %d budgets in one run", name, BENCH_MAX_BUDGETS);
    args->maxCtas[args->nMaxCtas++] = (int)n;
    if (item[len] == '\0') break;
    item += len + 1;
  }
  return BENCH_PARSE_OK;
}

int benchBudgetPath(const char* path, int maxCtas, char* out, size_t len) {
  const char* slash = strrchr(path, '/');
  const char* name = slash ? slash + 1 : path;
  const char* dot = strrchr(name, '.');
  if (dot == name) dot = NULL; /* ".hidden" has no extension */
  const int stem = dot ? (int)(dot - path) : (int)strlen(path);
  const int written = snprintf(out, len, "%.*s.max-ctas-%d%s", stem, path, maxCtas, dot ? dot : "");
  return written >= 0 && (size_t)written < len ? 0 : -1;
}

/* Finds the flag that argument `arg` names; *inlineValue gets the text after '=' or after a short letter. */
static int lookupFlag(const char* arg, const char** inlineValue) {
  *inlineValue = NULL;
  if (arg[0] != '-' || arg[1] == '\0') return -1;
  if (strcmp(arg, "-np") == 0) arg = "--np";
  if (arg[1] == '-') {
    const char* name = arg + 2;
    const char* equals = strchr(name, '=');
    size_t nameLen = equals ? (size_t)(equals - name) : strlen(name);
    for (int i = 0; i < FLAG_COUNT; i++) {
      if (strlen(flags[i].longName) == nameLen && strncmp(flags[i].longName, name, nameLen) == 0) {
        if (equals) *inlineValue = equals + 1;
        return i;
      }
    }
    return -1;
  }
  for (int i = 0; i < FLAG_COUNT; i++) {
    if (flags[i].shortName && flags[i].shortName == arg[1]) {
      if (arg[2] != '\0') *inlineValue = arg + 2;
      return i;
    }
  }
  return -1;
}

static int applyFlag(benchArgs_t* args, int id, const char* name, const char* value, char* err, size_t errLen) {
  long long number = 0;
  size_t bytes = 0;
  int arg = ARG_NONE;
  for (int i = 0; i < FLAG_COUNT; i++)
    if (flags[i].id == id) arg = flags[i].arg;
  int parsedInt = arg == ARG_INT ? parseInt(value, INT_MIN, INT_MAX, &number) : 0;
  if (parsedInt == -1) return benchError(err, errLen, "%s: '%s' is not an integer", name, value);
  if (parsedInt == -2) return benchError(err, errLen, "%s: %s is out of range", name, value);
  if (arg == ARG_SIZE && benchParseSize(value, &bytes) != 0)
    return benchError(err, errLen, "%s: '%s' is not a size (bytes, or a number followed by K, M or G)", name, value);
  int n = (int)number;
  switch (id) {
    case FLAG_NTHREADS:
      if (n < 1 || n > 64) return benchError(err, errLen, "%s: threads per process must be 1 to 64", name);
      args->nThreads = n;
      break;
    case FLAG_NGPUS:
      if (n < 1 || n > BENCH_MAX_LOCAL)
        return benchError(err, errLen, "%s: GPUs per thread must be 1 to %d", name, BENCH_MAX_LOCAL);
      args->nGpus = n;
      break;
    case FLAG_MINBYTES: args->minBytes = bytes; break;
    case FLAG_MAXBYTES: args->maxBytes = bytes; break;
    case FLAG_STEPBYTES: args->stepBytes = bytes; break;
    case FLAG_STEPFACTOR:
      if (n < 1) return benchError(err, errLen, "%s: the step factor must be at least 1", name);
      args->stepFactor = (size_t)n;
      break;
    case FLAG_ITERS:
      if (n < 1) return benchError(err, errLen, "%s: at least one iteration is needed", name);
      args->iters = n;
      break;
    case FLAG_AGGITERS:
      if (n != 1) return benchError(err, errLen, "%s: fccl has no group calls; only -m 1 is supported", name);
      break;
    case FLAG_WARMUP:
      if (n < 0) return benchError(err, errLen, "%s: warmup iterations cannot be negative", name);
      args->warmupIters = n;
      break;
    case FLAG_CYCLES:
      /* nccl-tests reads 0 as "forever": the run ends on SIGINT or SIGTERM, after the row in flight (bench.h). */
      if (n < 0 || n > BENCH_MAX_RUN_CYCLES)
        return benchError(err, errLen, "%s: the cycle count must be 0 (until SIGINT or SIGTERM) to %d", name,
                          BENCH_MAX_RUN_CYCLES);
      args->runCycles = n;
      break;
    case FLAG_PARALLELINIT: return parseSwitch(n, name, &args->parallelInit, err, errLen);
    case FLAG_CHECK:
      if (n < 0) return benchError(err, errLen, "%s: the check count cannot be negative", name);
      args->check = n;
      break;
    case FLAG_OP:
      if ((args->op = nameOrAll(value, benchOpFromName)) == -1)
        return benchError(err, errLen, "%s: unknown reduction '%s' (sum, prod, max, min, avg or all)", name, value);
      break;
    case FLAG_DATATYPE:
      if ((args->type = nameOrAll(value, benchTypeFromName)) == -1)
        return benchError(err, errLen,
                    "%s: unknown datatype '%s' (int8, uint8, int32, uint32, int64, uint64, half, float, double, "
                    "bfloat16 or all)", name, value);
      break;
    case FLAG_ROOT:
      if (n < 0) return benchError(err, errLen, "%s: the root cannot be negative", name);
      args->root = n;
      break;
    case FLAG_BLOCKING:
      if (n < BENCH_BLOCKING_OFF || n > BENCH_BLOCKING_EXCLUDE_BARRIER)
        return benchError(err, errLen,
                          "%s: 0 (off), 1 (wait and barrier), 2 (wait, no barrier) or 3 (wait and barrier, the barrier "
                          "not timed), not %d", name, n);
      args->blocking = n;
      break;
    case FLAG_TIMEOUT:
      /* The bound becomes fcclConfig_t.timeoutMs (an int of milliseconds): a day is far beyond any useful wait. */
      if (n < 0 || n > BENCH_MAX_TIMEOUT_SEC)
        return benchError(err, errLen, "%s: the timeout must be 0 (default) to %d seconds", name,
                          BENCH_MAX_TIMEOUT_SEC);
      args->timeoutSec = n;
      break;
    case FLAG_GRAPH:
      if (n < 0) return benchError(err, errLen, "%s: graph launches cannot be negative", name);
      args->graphLaunches = n;
      break;
    case FLAG_CPUTIME: return parseSwitch(n, name, &args->cputime, err, errLen);
    case FLAG_TIMESTAMPS: return parseSwitch(n, name, &args->timestamps, err, errLen);
    case FLAG_MEMORY: return parseSwitch(n, name, &args->memoryReport, err, errLen);
    case FLAG_PERITER: return parseSwitch(n, name, &args->perIterTiming, err, errLen);
    case FLAG_PERITERSKIP: args->perIterSkip = n; break; /* checked against -I and -n after the last flag */
    case FLAG_STREAMNULL:
      if (n != 0)
        return benchError(err, errLen,
                          "%s %d: the NULL stream is not supported: the benchmark runs on non-blocking streams of its "
                          "own; only %s 0", name, n, name);
      break;
    case FLAG_CTAPOLICY:
      /* NCCL_CTA_POLICY_DEFAULT (0) is what a communicator has without the flag; the others change NCCL alone. */
      if (n != 0)
        return benchError(err, errLen,
                          "%s %d: NCCL's CTA policies (1 efficiency, 2 zero) are not supported: fccl's communicators "
                          "have none; only %s 0 (NCCL's default policy)",
                          name, n, name);
      break;
    case FLAG_DEVICEIMPL:
      if (n != 0)
        return benchError(err, errLen,
                          "%s %d: NCCL's device-API implementations are not supported by fccl's benchmark; only %s 0",
                          name, n, name);
      break;
    case FLAG_DEVICECTAS:
      /* Read by nccl-tests only for -D above 0, which is refused: its default is accepted, as a no-op. */
      if (n != 16)
        return benchError(err, errLen,
                          "%s %d: the CTA count of NCCL's device-API implementations (-D above 0) is not supported; "
                          "only %s 16 (nccl-tests' default)",
                          name, n, name);
      break;
    case FLAG_AVERAGE:
      if (n < 0 || n > 3)
        return benchError(err, errLen, "%s: 0 (rank 0), 1 (average), 2 (minimum) or 3 (maximum)", name);
      args->average = n;
      break;
    case FLAG_UNALIGN:
      if (n < 0 || n > 4096) return benchError(err, errLen, "%s: the offset must be 0 to 4096 elements", name);
      args->unalign = n;
      break;
    case FLAG_REGISTER:
      if (n < 0 || n > 2) return benchError(err, errLen, "%s: 0 (plain), 1 (registered) or 2 (symmetric)", name);
      args->localRegister = n;
      break;
    case FLAG_JSON:
      if (!*value) return benchError(err, errLen, "%s: the file name is empty", name);
      args->jsonPath = value;
      break;
    case FLAG_NPROCS:
      if (n < 0 || n > 1024) return benchError(err, errLen, "%s: the process count must be 0 (auto) to 1024", name);
      args->nProcs = n;
      break;
    case FLAG_COMPARE:
      if (strcasecmp(value, "nccl") == 0) {
        args->compareNccl = 1;
      } else if (strcasecmp(value, "none") == 0) {
        args->compareNccl = 0;
      } else {
        return benchError(err, errLen, "%s: can compare with 'nccl' (or 'none'), not '%s'", name, value);
      }
      break;
    case FLAG_PATH:
      /* FCCL_PATH for every rank (docs/paths.md): the init refuses a path the layout does not allow. */
      if (strcasecmp(value, "nccl") != 0 && strcasecmp(value, "fccl") != 0 && strcasecmp(value, "hier") != 0 &&
          strcasecmp(value, "auto") != 0)
        return benchError(err, errLen, "%s: 'fccl', 'nccl', 'hier' or 'auto', not '%s'", name, value);
      args->path = strcasecmp(value, "nccl") == 0   ? "nccl"
                   : strcasecmp(value, "fccl") == 0 ? "fccl"
                   : strcasecmp(value, "hier") == 0 ? "hier"
                                                    : "auto";
      break;
    case FLAG_CSV:
      if (!*value) return benchError(err, errLen, "%s: the file name is empty", name);
      args->csvPath = value;
      break;
    case FLAG_SHARE: args->shareGpu = 1; break;
    case FLAG_HOSTS:
      if (n < 1 || n > 1024) return benchError(err, errLen, "%s: the host count must be 1 to 1024", name);
      args->hosts = n;
      break;
    case FLAG_MAXCTAS: return parseBudgets(args, name, value, err, errLen);
    case FLAG_CORRUPT: args->injectCorruption = 1; break;
    case FLAG_PROGRESS: return parseSwitch(n, name, &args->progress, err, errLen);
    default: break;
  }
  return BENCH_PARSE_OK;
}

/* Adds a line to args->notice. */
static void notice(benchArgs_t* args, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void notice(benchArgs_t* args, const char* fmt, ...) {
  const size_t used = strlen(args->notice);
  if (used + 1 >= sizeof(args->notice)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args->notice + used, sizeof(args->notice) - used, fmt, ap);
  va_end(ap);
  const size_t now = strlen(args->notice);
  if (now + 1 < sizeof(args->notice)) snprintf(args->notice + now, sizeof(args->notice) - now, "\n");
}

/* The combinations nccl-tests (2.19) accepts with a warning and a change, in its order and words: -I and -z 3 are
 * turned off under -G (a graph has no host between its operations to record events or wait), -K outside 0..-n - 1
 * or without -I becomes 0. */
static void resolveLikeNcclTests(benchArgs_t* args) {
  if (args->perIterTiming && args->graphLaunches >= 1) {
    notice(args, "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.");
    args->perIterTiming = 0;
  }
  if (args->blocking == BENCH_BLOCKING_EXCLUDE_BARRIER && args->graphLaunches >= 1) {
    notice(args, "blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.");
    args->blocking = BENCH_BLOCKING_OFF;
  }
  if (args->perIterSkip < 0 || args->perIterSkip >= args->iters) {
    notice(args, "per-iteration skip (-K) must be between 0 and %d. Disabling.", args->iters - 1);
    args->perIterSkip = 0;
  }
  if (args->perIterSkip && !args->perIterTiming) {
    notice(args, "per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.");
    args->perIterSkip = 0;
  }
}

int benchParseArgs(int argc, char* const* argv, benchArgs_t* args, char* err, size_t errLen) {
  args->notice[0] = '\0';
  if (err && errLen) err[0] = '\0';
  for (int i = 1; i < argc; i++) {
    const char* arg = argv[i];
    const char* value = NULL;
    int index = lookupFlag(arg, &value);
    if (index < 0) {
      if (arg[0] == '-') return benchError(err, errLen, "unknown flag '%s' (see --help)", arg);
      return benchError(err, errLen, "unexpected argument '%s' (see --help)", arg);
    }
    if (flags[index].id == FLAG_HELP) return BENCH_PARSE_HELP;
    /* A flag of a group the program does not honour: one of nccl-tests' programs takes it (and its value, checked
     * as usual) without effect, as nccl-tests' do; any other program refuses it. */
    const unsigned group = flags[index].group;
    const int honoured = group == 0 || (args->takes & group) != 0;
    if (!honoured && !(args->takes & BENCH_TAKES_NCCL_TESTS))
      return benchError(err, errLen, "%s does not apply to this program (see --help)", arg);
    if (flags[index].arg == ARG_NONE) {
      if (value) return benchError(err, errLen, "%s takes no value", arg);
    } else if (!value) {
      if (i + 1 >= argc) return benchError(err, errLen, "%s needs a value", arg);
      value = argv[++i];
    }
    int status = applyFlag(args, flags[index].id, arg, value, err, errLen);
    if (status != BENCH_PARSE_OK) return status;
  }
  resolveLikeNcclTests(args);
  if (args->blocking != BENCH_BLOCKING_OFF && args->graphLaunches > 0)
    return benchError(err, errLen,
                      "-z %d with -G %d: a CUDA graph launches its operations with no host in between to wait; use one "
                      "or the other", args->blocking, args->graphLaunches);
  if (args->nMaxCtas > 0 && args->runCycles == 0)
    return benchError(err, errLen,
                      "--max-ctas with -N 0: one table per SM budget follows the default one, which -N 0 never ends");
  if (args->minBytes > args->maxBytes)
    return benchError(err, errLen, "invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu", args->minBytes,
                args->maxBytes);
  if (args->minBytes < args->maxBytes) {
    if (args->stepFactor > 1 && args->minBytes == 0)
      return benchError(err, errLen, "a size sweep by factor (-f) must start above 0 bytes (-b)");
    if (args->stepFactor <= 1 && args->stepBytes == 0)
      return benchError(err, errLen, "the sweep needs a step: -i above 0 or -f above 1");
  }
  return BENCH_PARSE_OK;
}

int benchCheckWritable(const char* path, char* err, size_t errLen) {
  if (!path || !*path) return benchError(err, errLen, "an empty file name");
  if (access(path, F_OK) == 0) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return benchError(err, errLen, "%s is a directory", path);
    if (access(path, W_OK) != 0) return benchError(err, errLen, "cannot write %s: %s", path, strerror(errno));
    return 0;
  }
  if (errno != ENOENT) return benchError(err, errLen, "cannot write %s: %s", path, strerror(errno));
  char dir[4096];
  const char* slash = strrchr(path, '/');
  if (!slash) {
    snprintf(dir, sizeof(dir), ".");
  } else if (slash == path) {
    snprintf(dir, sizeof(dir), "/");
  } else if ((size_t)(slash - path) < sizeof(dir)) {
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
  } else {
    return benchError(err, errLen, "cannot write %s: the name is too long", path);
  }
  if (access(dir, W_OK | X_OK) != 0)
    return benchError(err, errLen, "cannot write %s: directory %s: %s", path, dir, strerror(errno));
  return 0;
}

void benchPrintUsage(FILE* out, const char* program, unsigned takes) {
  const int nt = (takes & BENCH_TAKES_NCCL_TESTS) != 0;
  fprintf(out, "USAGE: %s [flags]\n%s\n", program, nt ? "nccl-tests' flags:" : "nccl-tests' flags it shares:");
  fprintf(out,
          "  -t,--nthreads <n>         threads per process (1)\n"
          "  -g,--ngpus <n>            GPUs per thread (1)\n");
  if (takes & BENCH_TAKES_DATA)
    fprintf(out,
            "  -b,--minbytes <size>      smallest size (32M); sizes take K, M, G\n"
            "  -e,--maxbytes <size>      largest size (32M)\n"
            "  -i,--stepbytes <size>     add this between sizes (1M)\n"
            "  -f,--stepfactor <n>       multiply by this between sizes (off)\n");
  fprintf(out,
          "  -n,--iters <n>            timed iterations (20)\n"
          "  -w,--warmup_iters <n>     warmup iterations (1)\n"
          "  -N,--run_cycles <n>       run the whole %s n times, printing every cycle (1; at most %d);\n"
          "                            0: until SIGINT (Ctrl-C) or SIGTERM, which end it after the %s in flight\n",
          takes & BENCH_TAKES_DATA ? "sweep" : "measurement", BENCH_MAX_RUN_CYCLES,
          takes & BENCH_TAKES_DATA ? "row" : "line");
  if (takes & BENCH_TAKES_DATA)
    fprintf(out,
            "  -c,--check <n>            checked runs per size, #wrong column (1; 0: no check)\n"
            "  -d,--datatype <type|all>  int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 (float)\n");
  if (takes & BENCH_TAKES_OP) fprintf(out, "  -o,--op <op|all>          sum prod max min avg (sum)\n");
  if (takes & BENCH_TAKES_ROOT) fprintf(out, "  -r,--root <rank>          the root (0)\n");
  fprintf(out,
          "  -z,--blocking <0-3>       after every operation: 1 wait and barrier, 2 wait, 3 wait and barrier\n"
          "                            with the barrier not timed (0)\n"
          "  -G,--cudagraph <n>        capture the iterations in a CUDA graph, launch it n times (0: eager)\n");
  if (takes & BENCH_TAKES_PER_ITER)
    fprintf(out,
            "  -I,--per_iter_timing <0/1>  every iteration timed on its own: i_min, i_max, i_p99, i_cv%% columns\n"
            "                            (the slowest rank's time per iteration; not with -G) (0)\n"
            "  -K,--per_iter_skip <n>    leave the first n iterations out of -I's statistics (0)\n");
  fprintf(out,
          "  -a,--average <0/1/2/3>    time across ranks: rank 0, average, minimum, maximum (1)\n"
          "  -T,--timeout <seconds>    bound on every wait (0: 300 s; at most 86400)\n");
  if (takes & BENCH_TAKES_DATA)
    fprintf(out,
            "  -u,--unalign <n>          offset the buffers by n elements (0)\n"
            "  -R,--local_register <n>   0 plain buffers, 1 registered, 2 registered symmetric (0)\n");
  fprintf(out,
          "  -C,--report_cputime <0/1> report host launch time instead of GPU time (0)\n"
          "  -S,--report_timestamps <0/1>  a timestamp at the end of every %s (0)\n"
          "  -M,--memory_report <0/1>  device memory used: communicators, %sthe run (0)\n"
          "  -J,--output_file <file>   write the results as JSON (nccl-tests' layout)\n",
          takes & BENCH_TAKES_DATA ? "row" : "line", takes & BENCH_TAKES_DATA ? "buffers, " : "");
  if (nt) {
    /* Accepted so that one command line serves every nccl-tests program; nothing here changes with them. */
    fprintf(out,
            "accepted as nccl-tests accepts them, without effect here:\n"
            "  -p,--parallel_init <0/1> (ranks of a process always initialise in parallel), -m,--agg_iters 1,\n"
            "  -y,--stream_null 0, -x,--cta_policy 0, -D,--device_implementation 0, -V,--device_cta_count 16");
    if (!(takes & BENCH_TAKES_OP)) fprintf(out, ",\n  -o,--op (%s has no reduction)", program);
    if (!(takes & BENCH_TAKES_ROOT)) fprintf(out, ",\n  -r,--root (%s has no root)", program);
    fprintf(out, "\n");
  }
  fprintf(out,
          "fccl's own:\n"
          "  -np,--nprocs <n>          processes to fork, one rank each unless -t/-g (0: one per local GPU)\n"
          "  --compare nccl            %s\n"
          "  --path fccl|nccl|hier|auto  which engine carries fccl's communicator (sets FCCL_PATH; auto)\n"
          "  --csv <file>              write the results as CSV\n"
          "  --share-gpu               let ranks share a GPU (more ranks than GPUs)\n"
          "  --hosts <n>               the forked processes pose as n hosts, consecutive processes together (an\n"
          "                            FCCL_HOSTID and NCCL_HOSTID each): the NCCL and hierarchical paths on one\n"
          "                            machine\n"
          "%s"
          "  --progress <0/1>          progress line on stderr (default: when stderr is a terminal)\n"
          "  -h,--help                 this text\n"
          "Launched by torchrun --no-python (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or mpirun,\n"
          "each process is one rank of the launcher's job instead.\n",
          takes & BENCH_TAKES_DATA ? "run NCCL on the same buffers and print it beside fccl"
                                   : "time NCCL's usual stand-in (an all-reduce of one float) beside fccl",
          takes & BENCH_TAKES_DATA
              ? "  --max-ctas <n,n,...>      after the default table, one per SM budget: communicators made with\n"
                "                            maxCTAs n (fccl's and, with --compare nccl, NCCL's); -J and --csv write\n"
                "                            each to FILE.max-ctas-n (at most 8)\n"
              : "");
}

size_t benchSweepNext(const benchArgs_t* args, size_t bytes) {
  size_t next;
  if (args->stepFactor > 1) {
    if (bytes == 0 || bytes > SIZE_MAX / args->stepFactor) return 0;
    next = bytes * args->stepFactor;
  } else {
    if (args->stepBytes == 0 || bytes > SIZE_MAX - args->stepBytes) return 0;
    next = bytes + args->stepBytes;
  }
  return next <= args->maxBytes ? next : 0;
}

int benchSweepLength(const benchArgs_t* args) {
  int length = 0;
  size_t bytes = args->minBytes;
  while (1) {
    length++;
    size_t next = benchSweepNext(args, bytes);
    if (next == 0 || next <= bytes) break;
    bytes = next;
  }
  return length;
}

size_t benchCountOf(size_t bytes, int type) {
  size_t size = benchTypeSize(type);
  return size ? bytes / size : 0;
}

size_t benchCallCount(size_t bytes, int type, int nranks, int perRank, int alignBytes) {
  size_t count = benchCountOf(bytes, type);
  if (perRank && nranks > 0) count /= (size_t)nranks;
  const size_t size = benchTypeSize(type);
  const size_t unit = alignBytes > 0 && size > 0 ? (size_t)alignBytes / size : 1;
  if (unit > 1) count -= count % unit;
  return count;
}

double benchAlgBw(size_t bytes, double seconds) { return seconds > 0 ? (double)bytes / 1.0e9 / seconds : 0.0; }

double benchAllReduceBusFactor(int nranks) { return nranks > 0 ? 2.0 * (nranks - 1) / nranks : 0.0; }
