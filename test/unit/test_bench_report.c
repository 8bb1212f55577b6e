/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The benchmark's host-only core (test_bench.c): the report (tools/bench/report.c). Float columns, the table compared
 * character for character with text produced by nccl-tests' own printf formats, timestamps and the memory report,
 * JSON and CSV, the progress line.
 */
#include "test_bench.h"

#include "bench.h"
#include "test.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void expectFloat(double value, int width, const char* want) {
  char out[32];
  benchFormatFloat(value, width, out, sizeof(out));
  EXPECT_MSG(strcmp(out, want) == 0, "benchFormatFloat(%g, %d) gave \"%s\", want \"%s\"", value, width, out, want);
}

void testFloatColumns(void) {
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
  c->table = (benchTable_t){"all_reduce_perf", nEngines, {"fccl", "nccl"}, 0, 0, 0};
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

void testTable(void) {
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
void testTimestampsAndMemory(void) {
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
  } amounts[] = {{0, "0.00 B"},
                 {1536, "1.50 KB"},
                 {50.0 * (1 << 20), "50.0 MB"},
                 {512.0 * (1 << 20), "512 MB"},
                 {1.25 * (1 << 30), "1.25 GB"},
                 {3000.0 * (1 << 30), "3000 GB"}};
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
  EXPECT_MSG(strcmp(line,
                    "# GPU memory usage     : Initialization 1.25 GB | User-Allocated 512 MB | Collective 0.00 B "
                    "| Total  1.75 GB\n") == 0,
             "memory line: %s", line);
  free(line);

  benchDeviceInfo_t device;
  EXPECT_EQ_INT(benchParseDeviceLine("#  Rank  1 Group  0 Pid  41211 on    h200-x2 device  1 [0000:3b:00] NVIDIA H200",
                                     &device),
                0);
  EXPECT(device.rank == 1 && device.group == 0 && device.pid == 41211 && device.device == 1);
  EXPECT_MSG(strcmp(device.hostname, "h200-x2") == 0 && strcmp(device.deviceHex, "0000:3b:00") == 0 &&
                 strcmp(device.deviceInfo, "NVIDIA H200") == 0,
             "parsed '%s' '%s' '%s'", device.hostname, device.deviceHex, device.deviceInfo);
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

void testCsvAndJson(void) {
  tableCase_t c;
  makeRows(&c, 2);
  char* text = capture(writeCsvCase, &c);
  static const char* const csv =
      "collective,engine,buffers,graph,nranks,size,count,type,redop,placement,time_us,algbw_gbs,busbw_gbs,wrong,"
      "i_min_us,i_max_us,i_p99_us,i_cv_pct\n"
      "all_reduce_perf,fccl,registered,20,2,8,2,float,sum,out-of-place,6.210,0.0013,0.0013,0,,,,\n"
      "all_reduce_perf,fccl,registered,20,2,8,2,float,sum,in-place,6.230,0.0013,0.0013,0,,,,\n"
      "all_reduce_perf,nccl,symmetric,20,2,8,2,float,sum,out-of-place,12.420,0.0006,0.0006,0,,,,\n"
      "all_reduce_perf,nccl,symmetric,20,2,8,2,float,sum,in-place,9.345,0.0009,0.0009,3,,,,\n";
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

/* ---- -I ------------------------------------------------------------------------------------------------------- */

static void printPerIterTable(FILE* out, void* ctx) {
  tableCase_t* c = (tableCase_t*)ctx;
  benchPrintTableHeader(out, &c->table);
  benchPrintRow(out, &c->table, &c->rows[0]);
}

static void writePerIterJson(FILE* out, void* ctx) {
  tableCase_t* c = (tableCase_t*)ctx;
  toolJson_t json;
  toolJsonInit(&json, out, BENCH_JSON_WRAP_DEPTH);
  toolJsonBeginArray(&json, NULL);
  benchJsonRow(&json, &c->table, &c->rows[0], 4);
  toolJsonEnd(&json);
}

/* nccl-tests' per-iteration statistics and columns (src/util.cu: computeIterStats, writePerIterReport and the -I
 * header of writeResultHeader), against the same numbers worked out here and text made with its printf formats. */
void testPerIter(void) {
  /* Ten samples: sorted 1..10 (us), the mean 5.5, the population standard deviation sqrt(8.25). */
  const double times[10] = {7, 3, 10, 1, 9, 2, 8, 4, 6, 5};
  benchIterStats_t st;
  EXPECT_EQ_INT(benchIterStatsCompute(times, 10, 0, &st), 0);
  EXPECT(st.valid && st.skipped == 0 && st.nTimes == 10 && st.timesUs == times);
  EXPECT(st.minUs == 1 && st.maxUs == 10 && st.avgUs == 5.5);
  EXPECT_MSG(st.p50Us == 6, "p50 %g: nccl-tests takes sorted[n / 2]", st.p50Us);
  EXPECT_MSG(st.p95Us == 10 && st.p99Us == 10, "p95 %g p99 %g: nearest rank, ceil(10 p / 100) - 1 = 9", st.p95Us,
             st.p99Us);
  EXPECT(fabs(st.stdevUs - sqrt(8.25)) < 1e-12);
  EXPECT(fabs(st.cvPct - sqrt(8.25) / 5.5 * 100.0) < 1e-9);
  /* -K 4: the statistics of the last six (sorted 2, 4, 5, 6, 8, 9), the series whole. */
  EXPECT_EQ_INT(benchIterStatsCompute(times, 10, 4, &st), 0);
  EXPECT(st.skipped == 4 && st.nTimes == 10 && st.minUs == 2 && st.maxUs == 9 && st.p50Us == 6);
  EXPECT(fabs(st.avgUs - 34.0 / 6.0) < 1e-12);
  /* 200 samples 1..200: p95 is the 190th, p99 the 198th; p50 the 101st. */
  double many[200];
  for (int i = 0; i < 200; i++) many[i] = 200 - i;
  EXPECT_EQ_INT(benchIterStatsCompute(many, 200, 0, &st), 0);
  EXPECT_MSG(st.p95Us == 190 && st.p99Us == 198 && st.p50Us == 101, "p50 %g p95 %g p99 %g", st.p50Us, st.p95Us,
             st.p99Us);
  EXPECT_EQ_INT(benchIterStatsCompute(times, 10, 10, &st), -1); /* nothing left */
  const double zeros[2] = {0, 0};
  EXPECT_EQ_INT(benchIterStatsCompute(zeros, 2, 0, &st), 0);
  EXPECT(st.cvPct == 0);

  /* The table: nccl-tests' -I header, then each placement's four i_* columns. */
  tableCase_t c;
  makeRows(&c, 1);
  c.table.perIter = 1;
  const double iters[4] = {6.0, 6.5, 7.25, 12.0};
  EXPECT_EQ_INT(benchIterStatsCompute(iters, 4, 0, &c.rows[0].m[0][0].iter), 0);
  EXPECT_EQ_INT(benchIterStatsCompute(iters, 4, 1, &c.rows[0].m[0][1].iter), 0);
  const benchIterStats_t* o = &c.rows[0].m[0][0].iter;
  const benchIterStats_t* i = &c.rows[0].m[0][1].iter;
  char want[4096], cells[8][16];
  const double values[8] = {o->minUs, o->maxUs, o->p99Us, o->cvPct, i->minUs, i->maxUs, i->p99Us, i->cvPct};
  for (int k = 0; k < 8; k++) benchFormatFloat(values[k], 7, cells[k], sizeof(cells[k]));
  int used = snprintf(want, sizeof(want), "#\n");
  used += snprintf(want + used, sizeof(want) - used,
                   "# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)                         "
                   "       in-place (+ per-iteration)\n",
                   "", "", "", "", "");
  used += snprintf(want + used, sizeof(want) - used,
                   "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  "
                   "%7s  %7s %*s\n",
                   "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "i_min", "i_max",
                   "i_p99", "i_cv%", "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", 0, "");
  used += snprintf(want + used, sizeof(want) - used,
                   "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  "
                   "%7s  %7s %*s\n",
                   "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)",
                   "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", 0, "");
  snprintf(want + used, sizeof(want) - used,
           "%12li  %12li  %8s  %6s  %6s  %7s  %6s  %6s  %6g  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6g  %7s  %7s  %7s  "
           "%7s\n",
           8L, 2L, "float", "sum", "    -1", "   6.21", "  0.00", "  0.00", 0.0, cells[0], cells[1], cells[2], cells[3],
           "   6.23", "  0.00", "  0.00", 0.0, cells[4], cells[5], cells[6], cells[7]);
  char* text = capture(printPerIterTable, &c);
  EXPECT_MSG(strcmp(text, want) == 0, "-I table:\n%s\n--- want ---\n%s", text, want);
  free(text);

  /* The JSON: nccl-tests' "<placement>_per_iter" after each placement, per-process series with several processes. */
  const double processes[8] = {6.0, 6.5, 7.0, 12.0, 5.0, 6.25, 7.25, 11.0};
  c.rows[0].m[0][0].iter.processUs = processes;
  c.rows[0].m[0][0].iter.nProcesses = 2;
  text = capture(writePerIterJson, &c);
  EXPECT_STR_CONTAINS(text,
                      "\"nwrong\": 0},\n    \"out_of_place_per_iter\": {\"skipped_iterations\": 0, "
                      "\"min_us\": 6, \"max_us\": 12, \"avg_us\": 7.9375, \"p50_us\": 7.25, \"p95_us\": 12, "
                      "\"p99_us\": 12, ");
  EXPECT_STR_CONTAINS(text,
                      "\"times_us\": [6, 6.5, 7.25, 12], \"per_process_max_times_us\": [[6, 6.5, 7, 12], "
                      "[5, 6.25, 7.25, 11]]},\n    \"in_place\": {");
  EXPECT_STR_CONTAINS(text, "\"in_place_per_iter\": {\"skipped_iterations\": 1, \"min_us\": 6.5, ");
  free(text);

  /* The CSV fills the i_* columns. */
  text = capture(writeCsvCase, &c);
  EXPECT_STR_CONTAINS(text, ",out-of-place,6.210,0.0013,0.0013,0,6.000,12.000,12.000,");
  free(text);

  /* A placement not run (an all-to-all in place): N/A throughout, null in the JSON, left out of the CSV and of the
   * footer's averages. */
  makeRows(&c, 1);
  memset(&c.rows[0].m[0][1], 0, sizeof(c.rows[0].m[0][1]));
  text = capture(printPerIterTable, &c);
  EXPECT_STR_CONTAINS(text, "       0      N/A     N/A     N/A    N/A\n");
  free(text);
  text = capture(writePerIterJson, &c);
  EXPECT_STR_CONTAINS(text, "\"in_place\": null");
  free(text);
  text = capture(writeCsvCase, &c);
  EXPECT_MSG(strstr(text, "in-place") == NULL, "csv has the placement not run:\n%s", text);
  free(text);
  benchSummary_t summary;
  benchSummarize(&c.table, c.rows, 1, &summary);
  EXPECT(fabs(summary.avgBusBw[0] - c.rows[0].m[0][0].busBw) < 1e-12);

  /* The footer's sums row by row equal the ones over all rows. */
  makeRows(&c, 2);
  benchSummaryAcc_t acc;
  memset(&acc, 0, sizeof(acc));
  for (int r = 0; r < 2; r++) benchSummaryAdd(&c.table, &acc, &c.rows[r]);
  benchSummary_t added, whole;
  benchSummaryFinish(&c.table, &acc, &added);
  benchSummarize(&c.table, c.rows, 2, &whole);
  EXPECT(memcmp(&added, &whole, sizeof(added)) == 0);
  EXPECT_EQ_INT(acc.rows, 2);
}
