/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Output: the table (column for column nccl-tests' layout, so `diff` against all_reduce_perf from nccl-tests
 * lines up), its footer, CSV, JSON and the progress line.
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void benchFormatFloat(double value, int width, char* out, size_t outLen) {
  static const char* const formats[] = {"%*.2f", "%*.1f", "%*.0f"};
  for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
    int written = snprintf(out, outLen, formats[i], width, value);
    if (written >= 0 && written <= width) return;
  }
  snprintf(out, outLen, width >= 7 ? "%*.1e" : "%*.0e", width, value);
}

/* text centered in a field of width characters (padded with spaces on both sides). */
static void printCentered(FILE* out, const char* text, int width) {
  int len = (int)strlen(text);
  int left = len < width ? (width - len) / 2 : 0;
  int right = len < width ? width - len - left : 0;
  fprintf(out, "%*s%s%*s", left, "", text, right, "");
}

/* Width of one NCCL block: "  time  busbw  #wrong  speedup". */
#define COMPARE_BLOCK_WIDTH 34

void benchPrintTableHeader(FILE* out, const benchTable_t* table) {
  const char* timeLabel = table->cputime ? "cputime" : "time";
  fprintf(out, "#\n");
  fprintf(out, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          ", "", "",
          "", "", "");
  for (int engine = 1; engine < table->nEngines; engine++) {
    char label[64];
    snprintf(label, sizeof(label), "%s out-of-place", table->engineNames[engine]);
    printCentered(out, label, COMPARE_BLOCK_WIDTH);
    snprintf(label, sizeof(label), "%s in-place", table->engineNames[engine]);
    printCentered(out, label, COMPARE_BLOCK_WIDTH);
  }
  fprintf(out, "\n");
  /* nccl-tests ends these two lines with " %*s": the timestamp column, 19 wide, or nothing. */
  const int stampWidth = table->timestamps ? 19 : 0;
  fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s", "size", "count", "type", "redop",
          "root", timeLabel, "algbw", "busbw", "#wrong", timeLabel, "algbw", "busbw", "#wrong");
  for (int engine = 1; engine < table->nEngines; engine++)
    for (int place = 0; place < 2; place++)
      fprintf(out, "  %7s  %6s  %6s  %7s", timeLabel, "busbw", "#wrong", "speedup");
  if (table->nEngines == 1 || table->timestamps) fprintf(out, " %*s", stampWidth, table->timestamps ? "timestamp" : "");
  fprintf(out, "\n");
  fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s", "(B)", "(elements)", "", "", "",
          "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  for (int engine = 1; engine < table->nEngines; engine++)
    for (int place = 0; place < 2; place++) fprintf(out, "  %7s  %6s  %6s  %7s", "(us)", "(GB/s)", "", "(x)");
  if (table->nEngines == 1 || table->timestamps)
    fprintf(out, " %*s", stampWidth, table->timestamps ? BENCH_TIME_FORMAT : "");
  fprintf(out, "\n");
}

static void printWrong(FILE* out, int64_t wrong) {
  if (wrong < 0)
    fprintf(out, "    N/A");
  else
    fprintf(out, "  %6g", (double)wrong);
}

void benchPrintRow(FILE* out, const benchTable_t* table, const benchRow_t* row) {
  char root[32];
  snprintf(root, sizeof(root), "%6i", row->root);
  fprintf(out, "%12zu  %12zu  %8s  %6s  %6s", row->bytes, row->count, benchTypeName(row->type), benchOpName(row->op),
          root);
  for (int place = 0; place < 2; place++) {
    const benchMeasure_t* m = &row->m[0][place];
    char time[32], alg[32], bus[32];
    benchFormatFloat(m->timeUs, 7, time, sizeof(time));
    benchFormatFloat(m->algBw, 6, alg, sizeof(alg));
    benchFormatFloat(m->busBw, 6, bus, sizeof(bus));
    fprintf(out, "  %7s  %6s  %6s", time, alg, bus);
    printWrong(out, m->wrong);
  }
  for (int engine = 1; engine < table->nEngines; engine++) {
    for (int place = 0; place < 2; place++) {
      const benchMeasure_t* base = &row->m[0][place];
      const benchMeasure_t* m = &row->m[engine][place];
      char time[32], bus[32], ratio[32];
      benchFormatFloat(m->timeUs, 7, time, sizeof(time));
      benchFormatFloat(m->busBw, 6, bus, sizeof(bus));
      fprintf(out, "  %7s  %6s", time, bus);
      printWrong(out, m->wrong);
      if (base->valid && m->valid && base->timeUs > 0) {
        benchFormatFloat(m->timeUs / base->timeUs, 7, ratio, sizeof(ratio));
        fprintf(out, "  %7s", ratio);
      } else {
        fprintf(out, "  %7s", "N/A");
      }
    }
  }
  if (table->timestamps) {
    char when[32];
    benchFormatTime(row->timestamp, when, sizeof(when));
    fprintf(out, "%21s", when);
  }
  fprintf(out, "\n");
}

void benchFormatTime(long long when, char* out, size_t len) {
  time_t t = (time_t)when;
  struct tm tm;
  if (len == 0) return;
  out[0] = '\0';
  if (localtime_r(&t, &tm)) strftime(out, len, BENCH_TIME_FORMAT, &tm);
}

void benchSummarize(const benchTable_t* table, const benchRow_t* rows, int nRows, benchSummary_t* summary) {
  memset(summary, 0, sizeof(*summary));
  for (int engine = 0; engine < table->nEngines; engine++) {
    double sum = 0;
    int count = 0;
    for (int r = 0; r < nRows; r++) {
      for (int place = 0; place < 2; place++) {
        const benchMeasure_t* m = &rows[r].m[engine][place];
        if (!m->valid) continue;
        sum += m->busBw;
        count++;
        if (m->wrong > 0) summary->errors[engine]++;
      }
    }
    summary->avgBusBw[engine] = count ? sum / count : 0.0;
  }
  if (table->nEngines < 2) return;
  for (int place = 0; place < 2; place++) {
    double logSum = 0;
    int count = 0;
    for (int r = 0; r < nRows; r++) {
      const benchMeasure_t* base = &rows[r].m[0][place];
      const benchMeasure_t* other = &rows[r].m[1][place];
      if (!base->valid || !other->valid || base->timeUs <= 0 || other->timeUs <= 0) continue;
      logSum += log(other->timeUs / base->timeUs);
      count++;
    }
    summary->speedupGeomean[place] = count ? exp(logSum / count) : 0.0;
  }
}

void benchPrintFooter(FILE* out, const benchTable_t* table, const benchSummary_t* summary) {
  fprintf(out, "# %-20s : %d %s\n", "Out of bounds values", summary->errors[0], summary->errors[0] ? "FAILED" : "OK");
  fprintf(out, "# %-20s : %g %s\n", "Avg bus bandwidth", summary->avgBusBw[0], "");
  for (int engine = 1; engine < table->nEngines; engine++) {
    char label[64];
    snprintf(label, sizeof(label), "%s out of bounds", table->engineNames[engine]);
    fprintf(out, "# %-20s : %d %s\n", label, summary->errors[engine], summary->errors[engine] ? "FAILED" : "OK");
    snprintf(label, sizeof(label), "%s avg bus bw", table->engineNames[engine]);
    fprintf(out, "# %-20s : %g\n", label, summary->avgBusBw[engine]);
    snprintf(label, sizeof(label), "%s speedup vs %s", table->engineNames[0], table->engineNames[engine]);
    fprintf(out, "# %-20s : %.2fx out-of-place, %.2fx in-place (geometric mean of %s time / %s time)\n", label,
            summary->speedupGeomean[0], summary->speedupGeomean[1], table->engineNames[engine],
            table->engineNames[0]);
  }
  fprintf(out, "#\n");
  fprintf(out, "# Collective test concluded: %s\n", table->program);
}

void benchFormatMemory(double bytes, char* out, size_t len) {
  static const char* const units[] = {"B", "KB", "MB", "GB"};
  int unit = 0;
  for (double scaled = fabs(bytes); unit < 3 && scaled >= 1024.0; unit++) scaled /= 1024.0;
  double amount = bytes / pow(1024.0, unit);
  const int decimals = fabs(amount) < 10.0 ? 2 : fabs(amount) < 100.0 ? 1 : 0;
  snprintf(out, len, "%.*f %s", decimals, amount, units[unit]);
}

void benchPrintMemoryReport(FILE* out, const double bytes[BENCH_MEM_PARTS]) {
  static const char* const names[BENCH_MEM_PARTS] = {"Initialization", "User-Allocated", "Collective"};
  char amount[32];
  double total = 0;
  fprintf(out, "# %-20s : ", "GPU memory usage");
  for (int part = 0; part < BENCH_MEM_PARTS; part++) {
    benchFormatMemory(bytes[part], amount, sizeof(amount));
    fprintf(out, "%s %s %s", names[part], amount, part < BENCH_MEM_PARTS - 1 ? "| " : "");
    total += bytes[part];
  }
  benchFormatMemory(total, amount, sizeof(amount));
  fprintf(out, "| Total  %s\n", amount);
}

void benchCsvHeader(FILE* out) {
  fprintf(out, "collective,engine,buffers,graph,nranks,size,count,type,redop,placement,time_us,algbw_gbs,busbw_gbs,"
               "wrong\n");
}

void benchCsvRows(FILE* out, const benchTable_t* table, const benchRow_t* row, const char* const* buffers, int graph,
                  int nranks) {
  static const char* const placeNames[2] = {"out-of-place", "in-place"};
  for (int engine = 0; engine < table->nEngines; engine++) {
    for (int place = 0; place < 2; place++) {
      const benchMeasure_t* m = &row->m[engine][place];
      if (!m->valid) continue;
      fprintf(out, "%s,%s,%s,%d,%d,%zu,%zu,%s,%s,%s,%.3f,%.4f,%.4f,%lld\n", table->program,
              table->engineNames[engine], buffers[engine], graph, nranks, row->bytes, row->count,
              benchTypeName(row->type),
              benchOpName(row->op), placeNames[place], m->timeUs, m->algBw, m->busBw, (long long)m->wrong);
    }
  }
}

void benchFormatBytes(double bytes, char* out, size_t len) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    unit++;
  }
  if (bytes == floor(bytes))
    snprintf(out, len, "%.0f %s", bytes, units[unit]);
  else
    snprintf(out, len, "%.1f %s", bytes, units[unit]);
}

void benchFormatProgress(char* out, size_t len, int done, int total, const benchRow_t* row, const char* what) {
  char size[32];
  benchFormatBytes((double)row->bytes, size, sizeof(size));
  int digits = total >= 1000 ? 4 : total >= 100 ? 3 : total >= 10 ? 2 : 1;
  snprintf(out, len, "[%*d/%d] %s %s %s%s%s", digits, done, total, benchTypeName(row->type), benchOpName(row->op),
           size, what && *what ? " " : "", what ? what : "");
}

/* ---- JSON (the shared writer of tools/common/json.h) -------------------------------------------------------- */

int benchParseDeviceLine(const char* line, benchDeviceInfo_t* info) {
  memset(info, 0, sizeof(*info));
  int end = 0;
  if (sscanf(line, "#  Rank %d Group %d Pid %d on %63s device %d [%31[^]]] %n", &info->rank, &info->group, &info->pid,
             info->hostname, &info->device, info->deviceHex, &end) != 6 || end == 0)
    return -1;
  snprintf(info->deviceInfo, sizeof(info->deviceInfo), "%s", line + end);
  return 0;
}

/* nccl-tests writes its booleans as the strings "true" and "false"; its keys keep its types here. */
static void ncclTestsBool(toolJson_t* json, const char* key, int value) {
  toolJsonString(json, key, value ? "true" : "false");
}

static int keptVariable(const char* entry) {
  static const char* const prefixes[] = {"FCCL_", "NCCL_", "CUDA_"};
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
    if (strncmp(entry, prefixes[i], strlen(prefixes[i])) == 0) return 1;
  return 0;
}

static void jsonConfig(toolJson_t* json, const benchJsonInfo_t* info) {
  const benchArgs_t* args = info->args;
  toolJsonBeginObject(json, "config");
  toolJsonInt(json, "nthreads", args->nThreads);
  toolJsonInt(json, "ngpus", args->nGpus);
  toolJsonInt(json, "minimum_bytes", (long long)args->minBytes);
  toolJsonInt(json, "maximum_bytes", (long long)args->maxBytes);
  if (args->stepFactor > 1)
    toolJsonInt(json, "step_factor", (long long)args->stepFactor);
  else
    toolJsonInt(json, "step_bytes", (long long)args->stepBytes);
  toolJsonInt(json, "warmup_iters", args->warmupIters);
  toolJsonInt(json, "iterations", args->iters);
  toolJsonInt(json, "aggregated_iterations", 1);
  toolJsonInt(json, "validation", args->check);
  toolJsonInt(json, "graph", args->graphLaunches);
  ncclTestsBool(json, "blocking_collectives", args->blocking != BENCH_BLOCKING_OFF);
  ncclTestsBool(json, "per_iter_timing", 0);
  toolJsonInt(json, "per_iter_skip", 0);
  ncclTestsBool(json, "parallel_init", args->parallelInit);
  toolJsonBeginArray(json, "devices");
  for (int i = 0; i < info->nDevices; i++) {
    benchDeviceInfo_t device;
    if (benchParseDeviceLine(info->deviceLines[i], &device) != 0) continue;
    toolJsonBeginObject(json, NULL);
    toolJsonInt(json, "rank", device.rank);
    toolJsonInt(json, "group", device.group);
    toolJsonInt(json, "pid", device.pid);
    toolJsonString(json, "hostname", device.hostname);
    toolJsonInt(json, "device", device.device);
    toolJsonString(json, "device_hex", device.deviceHex);
    toolJsonString(json, "device_info", device.deviceInfo);
    toolJsonEnd(json);
  }
  toolJsonEnd(json);
  /* fccl's own */
  toolJsonInt(json, "blocking", args->blocking);
  toolJsonInt(json, "run_cycles", args->runCycles);
  toolJsonBool(json, "report_cputime", args->cputime);
  toolJsonInt(json, "unalign", args->unalign);
  toolJsonInt(json, "nranks", info->nranks);
  toolJsonString(json, "launch", info->launch);
  toolJsonBeginObject(json, "buffers");
  for (int engine = 0; engine < info->nEngines; engine++)
    toolJsonString(json, info->engineNames[engine], info->buffers[engine]);
  toolJsonEnd(json);
  toolJsonBool(json, "shared_gpus", info->sharedGpus);
  toolJsonString(json, "compare", info->nEngines > 1 ? info->engineNames[1] : NULL);
  toolJsonEnd(json);
}

void benchJsonBegin(toolJson_t* json, FILE* out, const benchJsonInfo_t* info) {
  toolJsonInit(json, out, BENCH_JSON_WRAP_DEPTH);
  toolJsonBeginObject(json, NULL);
  toolJsonInt(json, "version", BENCH_JSON_VERSION);
  toolJsonString(json, "start_time", info->startTime);
  toolJsonBeginArray(json, "args");
  for (int i = 0; i < info->argc; i++) toolJsonString(json, NULL, info->argv[i]);
  toolJsonEnd(json);
  toolJsonBeginArray(json, "env");
  for (char* const* entry = info->envp; entry && *entry; entry++)
    if (keptVariable(*entry)) toolJsonString(json, NULL, *entry);
  toolJsonEnd(json);
  toolJsonInt(json, "nccl_version", info->ncclVersion);
  toolJsonString(json, "tool", info->program);
  toolJsonString(json, "fccl_version", info->fcclVersion);
  toolJsonString(json, "build_type", info->buildType);
  jsonConfig(json, info);
  toolJsonBeginObject(json, "comm_init");
  for (int engine = 0; engine < info->nEngines; engine++) {
    toolJsonBeginObject(json, info->engineNames[engine]);
    toolJsonDouble(json, "time_ms", info->initMs[engine]);
    toolJsonInt(json, "device_bytes", (long long)info->initBytes[engine]);
    if (info->initSelfBytes[engine] >= 0)
      toolJsonInt(json, "self_reported_bytes", (long long)info->initSelfBytes[engine]);
    else
      toolJsonNull(json, "self_reported_bytes");
    toolJsonEnd(json);
  }
  toolJsonEnd(json);
  toolJsonBeginArray(json, "results");
}

static void jsonMeasure(toolJson_t* json, const char* key, const benchTable_t* table, const benchMeasure_t* m) {
  toolJsonBeginObject(json, key);
  toolJsonDouble(json, table->cputime ? "cpu_time" : "time", m->timeUs);
  toolJsonDouble(json, "alg_bw", m->algBw);
  toolJsonDouble(json, "bus_bw", m->busBw);
  if (m->wrong < 0)
    toolJsonNull(json, "nwrong");
  else
    toolJsonInt(json, "nwrong", m->wrong);
  toolJsonEnd(json);
}

void benchJsonRow(toolJson_t* json, const benchTable_t* table, const benchRow_t* row, int iterations) {
  static const char* const placeKeys[2] = {"out_of_place", "in_place"};
  char root[32];
  toolJsonBeginObject(json, NULL);
  toolJsonInt(json, "size", (long long)row->bytes);
  toolJsonInt(json, "count", (long long)row->count);
  toolJsonString(json, "type", benchTypeName(row->type));
  toolJsonString(json, "redop", benchOpName(row->op));
  snprintf(root, sizeof(root), "%6i", row->root); /* nccl-tests writes the table's text: "    -1" */
  toolJsonString(json, "root", root);
  /* The first engine (fccl) in nccl-tests' shape, so readers of nccl-tests' JSON find its numbers. */
  for (int place = 0; place < 2; place++) jsonMeasure(json, placeKeys[place], table, &row->m[0][place]);
  toolJsonInt(json, "actual_iterations", iterations);
  toolJsonString(json, "experiment_name", "");
  toolJsonInt(json, "cycle", row->cycle);
  for (int engine = 1; engine < table->nEngines; engine++) {
    toolJsonBeginObject(json, table->engineNames[engine]);
    for (int place = 0; place < 2; place++) jsonMeasure(json, placeKeys[place], table, &row->m[engine][place]);
    toolJsonBeginObject(json, "speedup");
    for (int place = 0; place < 2; place++) {
      const benchMeasure_t* base = &row->m[0][place];
      const benchMeasure_t* m = &row->m[engine][place];
      if (base->valid && m->valid && base->timeUs > 0)
        toolJsonDouble(json, placeKeys[place], m->timeUs / base->timeUs);
      else
        toolJsonNull(json, placeKeys[place]);
    }
    toolJsonEnd(json);
    toolJsonEnd(json);
  }
  toolJsonEnd(json);
}

void benchJsonEnd(toolJson_t* json, const benchTable_t* table, const benchSummary_t* summary, const char* endTime) {
  toolJsonEnd(json); /* results */
  if (summary) {
    toolJsonBeginObject(json, "out_of_bounds");
    toolJsonInt(json, "count", summary->errors[0]);
    ncclTestsBool(json, "okay", summary->errors[0] == 0);
    toolJsonEnd(json);
    toolJsonBeginObject(json, "average_bus_bandwidth");
    toolJsonDouble(json, "bandwidth", summary->avgBusBw[0]);
    toolJsonString(json, "okay", "unchecked"); /* nccl-tests: unless NCCL_TESTS_MIN_BW sets a floor */
    toolJsonEnd(json);
    for (int engine = 1; engine < table->nEngines; engine++) {
      toolJsonBeginObject(json, "comparison");
      toolJsonString(json, "engine", table->engineNames[engine]);
      toolJsonBeginObject(json, "out_of_bounds");
      toolJsonInt(json, "count", summary->errors[engine]);
      toolJsonBool(json, "okay", summary->errors[engine] == 0);
      toolJsonEnd(json);
      toolJsonDouble(json, "average_bus_bandwidth", summary->avgBusBw[engine]);
      toolJsonBeginObject(json, "speedup_geomean");
      toolJsonDouble(json, "out_of_place", summary->speedupGeomean[0]);
      toolJsonDouble(json, "in_place", summary->speedupGeomean[1]);
      toolJsonEnd(json);
      toolJsonEnd(json);
    }
  }
  toolJsonBeginArray(json, "errors");
  toolJsonEnd(json);
  toolJsonString(json, "end_time", endTime);
  toolJsonEnd(json);
}
