/* SPDX-License-Identifier: Apache-2.0 */
/*
 * all_reduce_perf's -c check works: a clean run reports #wrong 0 everywhere and exits 0; with the hidden
 * --inject-corruption (one element of rank 0's fccl result flipped before the check) every fccl row shows #wrong > 0,
 * "Out of bounds values" says FAILED and the exit status is non-zero, eagerly and in graph mode; NCCL's columns,
 * when compared, stay clean. Skips without a GPU; with one GPU it runs one rank.
 * registered: any of the benchmarks with -R 1 (registered buffers), eagerly and in graph mode, checked clean, and
 * the COLL trace of every rank (FCCL_DEBUG_FILE) shows the kernel named KERNEL: the algorithm variable the test's
 * environment sets reached the calls on the registered buffers.
 * p2p: sendrecv_perf or alltoall_perf (the calls fccl carries through NCCL) on two ranks, eagerly and in graph mode,
 * checked clean, beside NCCL when the build has it; the in-place columns as nccl-tests has them (sendrecv_perf's
 * timed, #wrong N/A; alltoall_perf's not run, N/A); a flipped element caught out of place. With one GPU the two
 * ranks share it as two NCCL hosts (--share-gpu --hosts 2, NCCL's sockets on loopback).
 *
 * rooted: reduce_perf, gather_perf or scatter_perf on two ranks (sharing the GPU when there is one) with root 1,
 * every type (and every op of the reduce), eagerly and in graph mode, registered and plain, checked clean, beside
 * NCCL when there are two GPUs; a flipped element of root 0's result caught.
 * budget: reduce_perf with --max-ctas 1,4: three tables (the default, then each budget's, each under its "# SM
 * budget" line) checked clean, and with -J each table in its own file (out.json, out.max-ctas-1.json, ...).
 * variable: all_gather_v_perf or reduce_scatter_v_perf on two ranks (sharing one GPU when there is one), on fccl's
 * kernels eagerly and in graph mode, and beside NCCL (with one GPU as two NCCL hosts, which puts fccl on its NCCL
 * path too), checked clean with the in-place columns not run; for the all-gather a flipped element caught.
 *
 *   test_bench_check <all_reduce_perf> [basic|types]
 *   test_bench_check <benchmark> registered KERNEL
 *   test_bench_check <sendrecv_perf|alltoall_perf> p2p
 *   test_bench_check <reduce_perf|gather_perf|scatter_perf> rooted
 *   test_bench_check <reduce_perf> budget
 *   test_bench_check <all_gather_v_perf|reduce_scatter_v_perf> variable
 */
#include "fccl_build_config.h"
#include "test.h"

#include <cuda_runtime.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_OUTPUT (1 << 20)
#define MAX_FIELDS 24

typedef struct {
  int rows;
  int rowsInPlaceNA;     /* rows whose fccl in-place #wrong reads N/A */
  int rowsInPlaceNotRun; /* rows whose fccl in-place time reads N/A */
  int rowsFcclWrong[2];  /* rows with #wrong > 0, out of place / in place */
  int rowsNcclWrong[2];
  int rowsNcclColumns;   /* rows that carry NCCL columns */
  int malformed;
  int outOfBoundsOk;     /* "# Out of bounds values : 0 OK" seen */
  int outOfBoundsFailed; /* "... FAILED" seen */
  int avgBusBw;          /* "# Avg bus bandwidth" seen */
  int status;            /* exit status */
  char* text;
} runResult_t;

static void run(const char* binary, const char* flags, runResult_t* result) {
  memset(result, 0, sizeof(*result));
  char command[1024];
  snprintf(command, sizeof(command), "%s %s", binary, flags);
  printf("running: %s\n", command);
  fflush(stdout);
  FILE* pipe = popen(command, "r");
  if (!pipe) {
    testFail(__FILE__, __LINE__, "popen failed for %s", command);
    return;
  }
  result->text = (char*)calloc(MAX_OUTPUT, 1);
  size_t used = 0;
  char line[4096];
  while (fgets(line, sizeof(line), pipe)) {
    size_t len = strlen(line);
    if (used + len < MAX_OUTPUT) {
      memcpy(result->text + used, line, len);
      used += len;
    }
    if (strncmp(line, "# Out of bounds values : 0 OK", 29) == 0) result->outOfBoundsOk = 1;
    if (strncmp(line, "# Out of bounds values", 22) == 0 && strstr(line, "FAILED")) result->outOfBoundsFailed = 1;
    if (strncmp(line, "# Avg bus bandwidth", 19) == 0) result->avgBusBw = 1;
    if (line[0] == '#' || line[0] == '\n') continue;
    /* size count type redop root | time algbw busbw #wrong (out of place) | same in place | NCCL: (time busbw
     * #wrong speedup) out of place, in place */
    char* fields[MAX_FIELDS];
    int n = 0;
    for (char* tok = strtok(line, " \t\n"); tok && n < MAX_FIELDS; tok = strtok(NULL, " \t\n")) fields[n++] = tok;
    if (n != 13 && n != 21) {
      result->malformed++;
      continue;
    }
    result->rows++;
    if (strcmp(fields[12], "N/A") == 0) result->rowsInPlaceNA++;
    if (strcmp(fields[9], "N/A") == 0) result->rowsInPlaceNotRun++;
    for (int place = 0; place < 2; place++) {
      if (strcmp(fields[8 + 4 * place], "N/A") != 0 && atof(fields[8 + 4 * place]) > 0) result->rowsFcclWrong[place]++;
      if (n == 21 && atof(fields[15 + 4 * place]) > 0) result->rowsNcclWrong[place]++;
    }
    if (n == 21) result->rowsNcclColumns++;
  }
  int status = pclose(pipe);
  result->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void expectClean(const char* what, const runResult_t* r, int rows) {
  EXPECT_MSG(r->status == 0, "%s: exit status %d, want 0\n%s", what, r->status, r->text ? r->text : "");
  EXPECT_MSG(r->rows == rows, "%s: %d table rows, want %d", what, r->rows, rows);
  EXPECT_MSG(r->malformed == 0, "%s: %d malformed rows", what, r->malformed);
  EXPECT_MSG(r->rowsFcclWrong[0] == 0 && r->rowsFcclWrong[1] == 0, "%s: wrong results (%d, %d rows)\n%s", what,
             r->rowsFcclWrong[0], r->rowsFcclWrong[1], r->text ? r->text : "");
  EXPECT_MSG(r->outOfBoundsOk && !r->outOfBoundsFailed, "%s: no \"Out of bounds values : 0 OK\" line", what);
  EXPECT_MSG(r->avgBusBw, "%s: no \"Avg bus bandwidth\" line", what);
}

static void expectCaught(const char* what, const runResult_t* r, int rows) {
  EXPECT_MSG(r->status != 0, "%s: exit status 0 despite the corruption\n%s", what, r->text ? r->text : "");
  EXPECT_MSG(r->rows == rows, "%s: %d table rows, want %d\n%s", what, r->rows, rows, r->text ? r->text : "");
  EXPECT_MSG(r->rowsFcclWrong[0] == rows && r->rowsFcclWrong[1] == rows,
             "%s: #wrong > 0 in %d/%d rows out of place and %d/%d in place", what, r->rowsFcclWrong[0], rows,
             r->rowsFcclWrong[1], rows);
  EXPECT_MSG(r->outOfBoundsFailed, "%s: \"Out of bounds values\" does not say FAILED", what);
}

/* Whether a file in dir holds ": KERNEL, " (the trace's "...: allgather_copy, 1 x 32, ..."); removes the files and
 * dir. */
static int traceShows(const char* dir, const char* kernel) {
  char needle[128];
  snprintf(needle, sizeof(needle), ": %s, ", kernel);
  int found = 0;
  DIR* d = opendir(dir);
  if (!d) return 0;
  char* text = (char*)calloc(MAX_OUTPUT + 1, 1);
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE* f = fopen(path, "r");
    if (f && text) {
      const size_t n = fread(text, 1, MAX_OUTPUT, f);
      text[n] = '\0';
      found |= strstr(text, needle) != NULL;
    }
    if (f) fclose(f);
    unlink(path);
  }
  closedir(d);
  free(text);
  rmdir(dir);
  return found;
}

/* The registered mode: the benchmark on registered buffers under the environment's algorithm variable. */
static int modeRegistered(const char* binary, const char* ranks, const char* kernel) {
  /* 8 B .. 16 MiB by 8: 8 sizes, out of place and in place. */
  const char* sweep = "-b 8 -e 16M -f 8 -n 5 -w 2 -c 1 -d float -R 1 --progress 0";
  static const char* const modes[][2] = {{"registered", ""}, {"registered, graph mode", "-G 2"}};
  for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
    char dir[] = "/tmp/fccl_bench_check_XXXXXX";
    if (!mkdtemp(dir)) {
      testFail(__FILE__, __LINE__, "mkdtemp failed");
      break;
    }
    char pattern[256];
    snprintf(pattern, sizeof(pattern), "%s/log.%%p", dir);
    setenv("FCCL_DEBUG", "TRACE", 1);
    setenv("FCCL_DEBUG_SUBSYS", "COLL", 1);
    setenv("FCCL_DEBUG_FILE", pattern, 1);
    char flags[512];
    snprintf(flags, sizeof(flags), "%s %s %s", ranks, sweep, modes[m][1]);
    runResult_t r;
    run(binary, flags, &r);
    expectClean(modes[m][0], &r, 8);
    free(r.text);
    EXPECT_MSG(traceShows(dir, kernel), "%s: no call ran %s (the trace of every rank searched)", modes[m][0], kernel);
  }
  return testSummary("bench_check registered");
}

/* The p2p mode: sendrecv_perf or alltoall_perf on two ranks. */
static int modeP2p(const char* binary, int gpus) {
  const int allToAll = strstr(binary, "alltoall_perf") != NULL;
  const char* ranks = gpus >= 2 ? "-np 2" : "-np 2 --share-gpu --hosts 2";
  if (gpus < 2) setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  /* 8 B .. 16 MiB by 8: 8 sizes. */
  const char* sweep = "-b 8 -e 16M -f 8 -n 5 -w 2 -c 1 -d float --progress 0";
  char flags[512];
  runResult_t r;
  static const char* const modes[][2] = {{"p2p", ""}, {"p2p, graph mode", "-G 2"}};
  for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
    snprintf(flags, sizeof(flags), "%s %s %s%s", ranks, sweep, modes[m][1], FCCL_HAVE_NCCL ? " --compare nccl" : "");
    run(binary, flags, &r);
    expectClean(modes[m][0], &r, 8);
    EXPECT_MSG(r.rowsInPlaceNA == 8, "%s: in-place #wrong N/A in %d of 8 rows", modes[m][0], r.rowsInPlaceNA);
    EXPECT_MSG(r.rowsInPlaceNotRun == (allToAll ? 8 : 0), "%s: in-place not run in %d of 8 rows", modes[m][0],
               r.rowsInPlaceNotRun);
    if (FCCL_HAVE_NCCL)
      EXPECT_MSG(r.rowsNcclColumns == 8, "%s: NCCL columns in %d of 8 rows", modes[m][0], r.rowsNcclColumns);
    free(r.text);
  }
  /* A flipped element of rank 0's result is caught out of place (in place is not checked here, as in nccl-tests). */
  snprintf(flags, sizeof(flags), "%s %s --inject-corruption", ranks, sweep);
  run(binary, flags, &r);
  EXPECT_MSG(r.status != 0 && r.rows == 8, "corrupted: status %d, %d rows\n%s", r.status, r.rows, r.text ? r.text : "");
  /* The 8-byte all-to-all has empty blocks (nccl-tests rounds a rank's block down to 16 bytes): nothing to flip. */
  const int rowsWithData = allToAll ? 7 : 8;
  EXPECT_MSG(r.rowsFcclWrong[0] >= rowsWithData, "corrupted: #wrong > 0 in %d rows out of place, want %d or more",
             r.rowsFcclWrong[0], rowsWithData);
  EXPECT_MSG(r.outOfBoundsFailed, "corrupted: \"Out of bounds values\" does not say FAILED");
  free(r.text);
  return testSummary(allToAll ? "bench_check alltoall" : "bench_check sendrecv");
}

/* The rooted mode: reduce_perf, gather_perf or scatter_perf. */
static int modeRooted(const char* binary, int gpus) {
  const int reduce = strstr(binary, "reduce_perf") != NULL;
  const char* ranks = gpus >= 2 ? "-np 2" : "-np 2 --share-gpu";
  const char* compare = FCCL_HAVE_NCCL && gpus >= 2 ? " --compare nccl" : "";
  char flags[512];
  runResult_t r;
  /* Every type (and op), two sizes each (odd element counts), root 1. */
  snprintf(flags, sizeof(flags), "%s -b 1001 -e 64064 -f 64 -n 3 -w 1 -c 1 -d all %s -r 1 --progress 0%s", ranks,
           reduce ? "-o all" : "", compare);
  run(binary, flags, &r);
  expectClean("all types", &r, 10 * (reduce ? 5 : 1) * 2);
  free(r.text);
  /* 8 B .. 16 MiB by 8: 8 sizes, eagerly and in graph mode, plain and registered buffers. */
  const char* sweep = "-b 8 -e 16M -f 8 -n 5 -w 2 -c 1 -d bfloat16 -r 1 --progress 0";
  static const char* const modes[][2] = {{"plain", ""},
                                         {"plain, graph mode", "-G 2"},
                                         {"registered", "-R 1"},
                                         {"registered, graph mode", "-R 1 -G 2"}};
  for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
    snprintf(flags, sizeof(flags), "%s %s %s%s", ranks, sweep, modes[m][1], compare);
    run(binary, flags, &r);
    expectClean(modes[m][0], &r, 8);
    if (compare[0])
      EXPECT_MSG(r.rowsNcclColumns == 8 && r.rowsNcclWrong[0] == 0 && r.rowsNcclWrong[1] == 0,
                 "%s: NCCL columns in %d of 8 rows, wrong in %d/%d", modes[m][0], r.rowsNcclColumns, r.rowsNcclWrong[0],
                 r.rowsNcclWrong[1]);
    free(r.text);
  }
  /* Rank 0 is the root, so the flipped element is one that is checked; the 8-byte gather and scatter have empty
   * blocks (nccl-tests rounds a rank's block down to 16 bytes): nothing to flip. */
  snprintf(flags, sizeof(flags), "%s -b 8 -e 16M -f 8 -n 5 -w 2 -c 1 -d float -r 0 --progress 0 --inject-corruption",
           ranks);
  run(binary, flags, &r);
  const int rowsWithData = reduce ? 8 : 7;
  EXPECT_MSG(r.status != 0 && r.rows == 8, "corrupted: status %d, %d rows\n%s", r.status, r.rows, r.text ? r.text : "");
  EXPECT_MSG(r.rowsFcclWrong[0] >= rowsWithData && r.rowsFcclWrong[1] >= rowsWithData,
             "corrupted: #wrong > 0 in %d and %d rows, want %d or more", r.rowsFcclWrong[0], r.rowsFcclWrong[1],
             rowsWithData);
  EXPECT_MSG(r.outOfBoundsFailed, "corrupted: \"Out of bounds values\" does not say FAILED");
  free(r.text);
  return testSummary(reduce                     ? "bench_check reduce"
                     : strstr(binary, "gather") ? "bench_check gather"
                                                : "bench_check scatter");
}

/* Whether path exists as a regular file; removes it. */
static int takeFile(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  char head[2] = "";
  const size_t n = fread(head, 1, 1, f);
  fclose(f);
  unlink(path);
  return n == 1 && head[0] == '{';
}

/* The budget mode: reduce_perf --max-ctas 1,4. */
static int modeBudget(const char* binary, int gpus) {
  const char* ranks = gpus >= 2 ? "-np 2" : "-np 2 --share-gpu";
  char dir[] = "/tmp/fccl_bench_budget_XXXXXX";
  if (!mkdtemp(dir)) {
    testFail(__FILE__, __LINE__, "mkdtemp failed");
    return testSummary("bench_check budget");
  }
  char flags[512];
  runResult_t r;
  /* 8 B .. 16 MiB by 8: 8 sizes a table, three tables; graph mode and registered buffers too. */
  static const char* const modes[][2] = {{"plain", ""}, {"registered, graph mode", "-R 1 -G 2"}};
  for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
    snprintf(flags, sizeof(flags),
             "%s -b 8 -e 16M -f 8 -n 5 -w 2 -c 1 -d float --progress 0 --max-ctas 1,4 %s -J %s/out.json%s", ranks,
             modes[m][1], dir, FCCL_HAVE_NCCL && gpus >= 2 ? " --compare nccl" : "");
    run(binary, flags, &r);
    expectClean(modes[m][0], &r, 3 * 8);
    EXPECT_MSG(r.text && strstr(r.text, "# SM budget: the default (no maxCTAs)") &&
                   strstr(r.text, "# SM budget: maxCTAs 1 (") && strstr(r.text, "# SM budget: maxCTAs 4 ("),
               "%s: the tables are not labelled with their budgets\n%s", modes[m][0], r.text ? r.text : "");
    free(r.text);
    static const char* const files[] = {"out.json", "out.max-ctas-1.json", "out.max-ctas-4.json"};
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
      char path[256];
      snprintf(path, sizeof(path), "%s/%s", dir, files[f]);
      EXPECT_MSG(takeFile(path), "%s: no JSON document %s", modes[m][0], path);
    }
  }
  rmdir(dir);
  return testSummary("bench_check budget");
}

/* The variable mode: the skewed blocks of all_gather_v_perf or reduce_scatter_v_perf (bench.h's benchVariableCount). */
static int modeVariable(const char* binary, int gpus) {
  const int allGather = strstr(binary, "all_gather_v_perf") != NULL;
  const char* ranks = gpus >= 2 ? "-np 2" : "-np 2 --share-gpu";
  if (gpus < 2) setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  /* 8 B .. 16 MiB by 8: 8 sizes. */
  const char* sweep = "-b 8 -e 16M -f 8 -n 5 -w 2 -c 1 -d float -o sum --progress 0";
  const int compare = FCCL_HAVE_NCCL;
  char besideNccl[96];
  snprintf(besideNccl, sizeof(besideNccl), "%s --compare nccl", gpus >= 2 ? "-np 2" : "-np 2 --share-gpu --hosts 2");
  const char* const modes[][3] = {{"fccl", ranks, ""},
                                  {"fccl, graph mode", ranks, "-G 2"},
                                  {"beside NCCL", besideNccl, ""}};
  char flags[512];
  runResult_t r;
  for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
    if (m == 2 && !compare) continue;
    snprintf(flags, sizeof(flags), "%s %s %s", modes[m][1], sweep, modes[m][2]);
    run(binary, flags, &r);
    expectClean(modes[m][0], &r, 8);
    EXPECT_MSG(r.rowsInPlaceNotRun == 8, "%s: in-place not run in %d of 8 rows", modes[m][0], r.rowsInPlaceNotRun);
    if (m == 2) EXPECT_MSG(r.rowsNcclColumns == 8, "%s: NCCL columns in %d of 8 rows", modes[m][0], r.rowsNcclColumns);
    free(r.text);
  }
  if (allGather) {
    /* The flip lands at element n x count / 2 of rank 0's output, inside the blocks from 64 bytes on (at 8 bytes the
     * blocks hold one element before it). */
    snprintf(flags, sizeof(flags), "%s %s --inject-corruption", ranks, sweep);
    run(binary, flags, &r);
    EXPECT_MSG(r.status != 0 && r.rows == 8, "corrupted: status %d, %d rows\n%s", r.status, r.rows,
               r.text ? r.text : "");
    EXPECT_MSG(r.rowsFcclWrong[0] >= 7, "corrupted: #wrong > 0 in %d rows out of place, want 7 or more",
               r.rowsFcclWrong[0]);
    free(r.text);
  }
  return testSummary(allGather ? "bench_check all_gather_v" : "bench_check reduce_scatter_v");
}

int main(int argc, char** argv) {
  if (argc < 2 || (argc > 2 && strcmp(argv[2], "registered") == 0 && argc < 4)) {
    fprintf(stderr,
            "usage: %s <all_reduce_perf> [basic|types] | <benchmark> registered KERNEL | <sendrecv_perf|"
            "alltoall_perf> p2p | <reduce_perf|gather_perf|scatter_perf> rooted | <reduce_perf> budget | "
            "<all_gather_v_perf|reduce_scatter_v_perf> variable\n",
            argv[0]);
    return 1;
  }
  testRequireGpus(1);
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  const char* binary = argv[1];
  const char* mode = argc > 2 ? argv[2] : "basic";
  const char* ranks = gpus >= 2 ? "-np 2" : "-np 1";
  char flags[512];
  runResult_t r;
  if (strcmp(mode, "registered") == 0) return modeRegistered(binary, ranks, argv[3]);
  if (strcmp(mode, "p2p") == 0) return modeP2p(binary, gpus);
  if (strcmp(mode, "rooted") == 0) return modeRooted(binary, gpus);
  if (strcmp(mode, "budget") == 0) return modeBudget(binary, gpus);
  if (strcmp(mode, "variable") == 0) return modeVariable(binary, gpus);
  if (strcmp(mode, "types") == 0) {
    /* Every type (10) and op (5), two sizes each (odd element counts for some types), checked. */
    snprintf(flags, sizeof(flags), "%s -b 1001 -e 64064 -f 64 -n 3 -w 1 -c 1 -d all -o all --progress 0", ranks);
    run(binary, flags, &r);
    expectClean("all types and ops", &r, 10 * 5 * 2);
    free(r.text);
    return testSummary("bench_check types");
  }
  /* 8 B .. 256 KiB by 8: 6 sizes. */
  const char* sweep = "-b 8 -e 256K -f 8 -n 5 -w 2 -c 1 -d float --progress 0";
  snprintf(flags, sizeof(flags), "%s %s", ranks, sweep);
  run(binary, flags, &r);
  expectClean("clean", &r, 6);
  free(r.text);

  /* The corruption is caught eagerly and when the iterations are replayed from a CUDA graph. */
  static const char* const corrupted[][2] = {{"corrupted", ""}, {"corrupted, graph mode", "-G 2"}};
  for (size_t c = 0; c < sizeof(corrupted) / sizeof(corrupted[0]); c++) {
    snprintf(flags, sizeof(flags), "%s %s %s --inject-corruption", ranks, sweep, corrupted[c][1]);
    run(binary, flags, &r);
    expectCaught(corrupted[c][0], &r, 6);
    free(r.text);
  }

  /* -c 0: nothing checked, #wrong reads N/A, and the corruption goes unnoticed (there is no check to notice it). */
  snprintf(flags, sizeof(flags), "%s %s -c 0 --inject-corruption", ranks, sweep);
  run(binary, flags, &r);
  EXPECT_MSG(r.status == 0 && r.rows == 6 && r.rowsFcclWrong[0] == 0, "-c 0: status %d, %d rows", r.status, r.rows);
  EXPECT(r.text && strstr(r.text, "    N/A"));
  free(r.text);

#if FCCL_HAVE_NCCL
  if (gpus >= 2) {
    snprintf(flags, sizeof(flags), "%s %s --compare nccl --inject-corruption", ranks, sweep);
    run(binary, flags, &r);
    expectCaught("corrupted, beside NCCL", &r, 6);
    EXPECT_MSG(r.rowsNcclColumns == 6, "NCCL columns in %d of 6 rows", r.rowsNcclColumns);
    EXPECT_MSG(r.rowsNcclWrong[0] == 0 && r.rowsNcclWrong[1] == 0, "NCCL's untouched results counted wrong");
    free(r.text);
  }
#endif
  return testSummary("bench_check");
}
