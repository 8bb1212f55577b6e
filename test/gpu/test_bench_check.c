/* SPDX-License-Identifier: Apache-2.0 */
/*
 * all_reduce_perf's -c check works: a clean run reports #wrong 0 everywhere and exits 0; with the hidden
 * --inject-corruption (one element of rank 0's fccl result flipped before the check) every fccl row shows #wrong > 0,
 * "Out of bounds values" says FAILED and the exit status is non-zero, eagerly and in graph mode; NCCL's columns,
 * when compared, stay clean. Skips without a GPU; with one GPU it runs one rank.
 *
 *   test_bench_check <all_reduce_perf> [basic|types]
 */
#include "fccl_build_config.h"
#include "test.h"

#include <cuda_runtime.h>
#include <sys/wait.h>

#define MAX_OUTPUT (1 << 20)
#define MAX_FIELDS 24

typedef struct {
  int rows;
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

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <all_reduce_perf> [basic|types]\n", argv[0]);
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
