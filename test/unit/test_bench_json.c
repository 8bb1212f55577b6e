/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writes a whole -J document through the benchmark's host-only core (benchJsonBegin, benchJsonRow, benchJsonEnd)
 * from made-up results, two ranks with NCCL compared, to standard output. test_bench_json.py compares it with the
 * nccl-tests document recorded in test/data/bench. With the argument "per-iter", the run is -n 4 -I 1 -K 1 over two
 * processes, and every measurement carries its per-iteration statistics.
 */
#include "bench.h"

#include <stdio.h>
#include <string.h>

static void fill(benchMeasure_t* m, size_t bytes, double timeUs, int64_t wrong) {
  m->timeUs = timeUs;
  m->algBw = benchAlgBw(bytes, timeUs * 1e-6);
  m->busBw = m->algBw * benchAllReduceBusFactor(2);
  m->wrong = wrong;
  m->valid = 1;
}

int main(int argc, char** argv) {
  benchArgs_t args;
  char err[256];
  const int perIter = argc > 1 && strcmp(argv[1], "per-iter") == 0;
  char* flags[] = {"all_reduce_perf", "-b", "8", "-e", "16", "-f", "2", "-N", "1", "--compare", "nccl", "-J",
                   "a.json",          "-n", "4", "-I", "1",  "-K", "1"};
  const int nFlags = (int)(sizeof(flags) / sizeof(flags[0])) - (perIter ? 0 : 6);
  benchArgsDefaults(&args);
  if (benchParseArgs(nFlags, flags, &args, err, sizeof(err)) != BENCH_PARSE_OK) {
    fprintf(stderr, "test_bench_json: %s\n", err);
    return 1;
  }
  static const char devices[2][BENCH_DEVICE_LINE] = {
      "#  Rank  0 Group  0 Pid  41210 on    h200-x2 device  0 [0000:19:00] NVIDIA H200",
      "#  Rank  1 Group  0 Pid  41211 on    h200-x2 device  1 [0000:3b:00] NVIDIA H200"};
  char* envp[] = {"PATH=/usr/bin:/bin", "NCCL_DEBUG=WARN", "FCCL_DEBUG=INFO", "HOME=/root", NULL};
  const benchJsonInfo_t info = {
      .program = "all_reduce_perf",
      .fcclVersion = "0.1.0",
      .buildType = "release",
      .ncclVersion = 22703,
      .startTime = "2025-06-02 10:20:30",
      .argc = nFlags,
      .argv = flags,
      .envp = envp,
      .args = &args,
      .nranks = 2,
      .launch = "2 processes forked here (1 thread x 1 GPU each)",
      .deviceLines = devices,
      .nDevices = 2,
      .nEngines = 2,
      .engineNames = {"fccl", "nccl"},
      .buffers = {"plain", "plain"},
      .initMs = {120.5, 310.25},
      .initBytes = {536870912, 1073741824},
      .initSelfBytes = {268435456, -1},
  };
  benchTable_t table = {"all_reduce_perf", 2, {"fccl", "nccl"}, 0, 0, perIter};
  benchRow_t rows[2];
  memset(rows, 0, sizeof(rows));
  /* -I: four iterations, two processes (the slowest of the two per iteration, and each one's series). */
  static const double times[4] = {8.5, 6.25, 6.5, 7.0};
  static const double processes[8] = {8.5, 6.25, 6.5, 7.0, 8.0, 6.0, 6.5, 6.75};
  for (int r = 0; r < 2; r++) {
    rows[r] = (benchRow_t){.bytes = 8u << r, .count = 2u << r, .type = benchFloat32, .op = benchSum, .root = -1};
    for (int place = 0; place < 2; place++) {
      fill(&rows[r].m[0][place], rows[r].bytes, 6.2 + r, 0);
      fill(&rows[r].m[1][place], rows[r].bytes, 10.2 + r, 0);
      for (int engine = 0; engine < 2 && perIter; engine++) {
        benchIterStats_t* stats = &rows[r].m[engine][place].iter;
        if (benchIterStatsCompute(times, 4, args.perIterSkip, stats) != 0) return 1;
        stats->processUs = processes;
        stats->nProcesses = 2;
      }
    }
  }
  benchSummary_t summary;
  benchSummarize(&table, rows, 2, &summary);
  toolJson_t json;
  benchJsonBegin(&json, stdout, &info);
  for (int r = 0; r < 2; r++) benchJsonRow(&json, &table, &rows[r], args.iters);
  benchJsonEnd(&json, &table, &summary, NULL, "2025-06-02 10:20:31");
  return ferror(stdout) ? 1 : 0;
}
