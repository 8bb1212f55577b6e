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

/* Width of one NCCL block: "  time  busbw  #wrong  speedup", and with -I the four i_* columns of 9 each. */
#define COMPARE_BLOCK_WIDTH 34
#define PER_ITER_WIDTH 36

/* -I: the four per-iteration column labels after a placement's #wrong ("  %7s" each, as nccl-tests). */
static void printIterLabels(FILE* out, int units) {
  if (units)
    fprintf(out, "  %7s  %7s  %7s  %7s", "(us)", "(us)", "(us)", "(%)");
  else
    fprintf(out, "  %7s  %7s  %7s  %7s", "i_min", "i_max", "i_p99", "i_cv%");
}

void benchPrintTableHeader(FILE* out, const benchTable_t* table) {
  const char* timeLabel = table->cputime ? "cputime" : "time";
  const int perIter = table->perIter;
  fprintf(out, "#\n");
  int titleWidth = 0;
  if (perIter)
    titleWidth = fprintf(out,
                         "# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)                      "
                         "          in-place (+ per-iteration)",
                         "", "", "", "", "");
  else
    fprintf(out, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          ", "", "",
            "", "", "");
  if (perIter && table->nEngines > 1) {
    /* nccl-tests' per-iteration title ends before its table does: the NCCL titles start where fccl's columns end
     * (size to root, then two placements of time, algbw, busbw, #wrong and the four i_* columns). */
    const int fcclColumns = 52 + 2 * (33 + PER_ITER_WIDTH);
    fprintf(out, "%*s", fcclColumns > titleWidth ? fcclColumns - titleWidth : 0, "");
  }
  for (int engine = 1; engine < table->nEngines; engine++) {
    char label[64];
    const int width = COMPARE_BLOCK_WIDTH + (perIter ? PER_ITER_WIDTH : 0);
    snprintf(label, sizeof(label), "%s out-of-place", table->engineNames[engine]);
    printCentered(out, label, width);
    snprintf(label, sizeof(label), "%s in-place", table->engineNames[engine]);
    printCentered(out, label, width);
  }
  fprintf(out, "\n");
  /* nccl-tests ends these two lines with " %*s": the timestamp column, 19 wide, or nothing. */
  const int stampWidth = table->timestamps ? 19 : 0;
  for (int units = 0; units < 2; units++) {
    if (units)
      fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
              "(GB/s)", "");
    else
      fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s", "size", "count", "type", "redop", "root",
              timeLabel, "algbw", "busbw", "#wrong");
    if (perIter) printIterLabels(out, units);
    if (units)
      fprintf(out, "  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
    else
      fprintf(out, "  %7s  %6s  %6s  %6s", timeLabel, "algbw", "busbw", "#wrong");
    if (perIter) printIterLabels(out, units);
    for (int engine = 1; engine < table->nEngines; engine++) {
      for (int place = 0; place < 2; place++) {
        if (units)
          fprintf(out, "  %7s  %6s  %6s", "(us)", "(GB/s)", "");
        else
          fprintf(out, "  %7s  %6s  %6s", timeLabel, "busbw", "#wrong");
        if (perIter) printIterLabels(out, units);
        fprintf(out, "  %7s", units ? "(x)" : "speedup");
      }
    }
    if (table->nEngines == 1 || table->timestamps) {
      const char* stamp = units ? BENCH_TIME_FORMAT : "timestamp";
      fprintf(out, " %*s", stampWidth, table->timestamps ? stamp : "");
    }
    fprintf(out, "\n");
  }
}

static void printWrong(FILE* out, int64_t wrong) {
  if (wrong < 0)
    fprintf(out, "    N/A");
  else
    fprintf(out, "  %6g", (double)wrong);
}

/* -I: i_min, i_max, i_p99 (us) and i_cv% of a measurement, formatted as nccl-tests does (7 wide). */
static void printIterStats(FILE* out, const benchIterStats_t* stats) {
  if (!stats->valid) {
    fprintf(out, "  %7s  %7s  %7s  %7s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  const double values[4] = {stats->minUs, stats->maxUs, stats->p99Us, stats->cvPct};
  for (int i = 0; i < 4; i++) {
    char text[32];
    benchFormatFloat(values[i], 7, text, sizeof(text));
    fprintf(out, "  %7s", text);
  }
}

void benchPrintRow(FILE* out, const benchTable_t* table, const benchRow_t* row) {
  char root[32];
  snprintf(root, sizeof(root), "%6i", row->root);
  fprintf(out, "%12zu  %12zu  %8s  %6s  %6s", row->bytes, row->count, benchTypeName(row->type), benchOpName(row->op),
          root);
  for (int place = 0; place < 2; place++) {
    const benchMeasure_t* m = &row->m[0][place];
    char time[32] = "N/A", alg[32] = "N/A", bus[32] = "N/A";
    /* A placement the collective does not run (an all-to-all in place) reads N/A throughout. */
    if (m->valid) {
      benchFormatFloat(m->timeUs, 7, time, sizeof(time));
      benchFormatFloat(m->algBw, 6, alg, sizeof(alg));
      benchFormatFloat(m->busBw, 6, bus, sizeof(bus));
    }
    fprintf(out, "  %7s  %6s  %6s", time, alg, bus);
    printWrong(out, m->valid ? m->wrong : -1);
    if (table->perIter) printIterStats(out, &m->iter);
  }
  for (int engine = 1; engine < table->nEngines; engine++) {
    for (int place = 0; place < 2; place++) {
      const benchMeasure_t* base = &row->m[0][place];
      const benchMeasure_t* m = &row->m[engine][place];
      char time[32] = "N/A", bus[32] = "N/A", ratio[32];
      if (m->valid) {
        benchFormatFloat(m->timeUs, 7, time, sizeof(time));
        benchFormatFloat(m->busBw, 6, bus, sizeof(bus));
      }
      fprintf(out, "  %7s  %6s", time, bus);
      printWrong(out, m->valid ? m->wrong : -1);
      if (table->perIter) printIterStats(out, &m->iter);
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

void benchSummaryAdd(const benchTable_t* table, benchSummaryAcc_t* acc, const benchRow_t* row) {
  acc->rows++;
  for (int engine = 0; engine < table->nEngines; engine++) {
    for (int place = 0; place < 2; place++) {
      const benchMeasure_t* m = &row->m[engine][place];
      if (!m->valid) continue;
      acc->busBwSum[engine] += m->busBw;
      acc->busBwCount[engine]++;
      if (m->wrong > 0) acc->errors[engine]++;
    }
  }
  if (table->nEngines < 2) return;
  for (int place = 0; place < 2; place++) {
    const benchMeasure_t* base = &row->m[0][place];
    const benchMeasure_t* other = &row->m[1][place];
    if (!base->valid || !other->valid || base->timeUs <= 0 || other->timeUs <= 0) continue;
    acc->logSpeedupSum[place] += log(other->timeUs / base->timeUs);
    acc->speedupCount[place]++;
  }
}

void benchSummaryFinish(const benchTable_t* table, const benchSummaryAcc_t* acc, benchSummary_t* summary) {
  memset(summary, 0, sizeof(*summary));
  for (int engine = 0; engine < table->nEngines; engine++) {
    summary->errors[engine] = acc->errors[engine];
    summary->avgBusBw[engine] = acc->busBwCount[engine] ? acc->busBwSum[engine] / acc->busBwCount[engine] : 0.0;
  }
  if (table->nEngines < 2) return;
  for (int place = 0; place < 2; place++)
    summary->speedupGeomean[place] = acc->speedupCount[place]
                                         ? exp(acc->logSpeedupSum[place] / acc->speedupCount[place])
                                         : 0.0;
}

void benchSummarize(const benchTable_t* table, const benchRow_t* rows, int nRows, benchSummary_t* summary) {
  benchSummaryAcc_t acc;
  memset(&acc, 0, sizeof(acc));
  for (int r = 0; r < nRows; r++) benchSummaryAdd(table, &acc, &rows[r]);
  benchSummaryFinish(table, &acc, summary);
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
  fprintf(out,
          "collective,engine,buffers,graph,nranks,size,count,type,redop,placement,time_us,algbw_gbs,busbw_gbs,"
          "wrong,i_min_us,i_max_us,i_p99_us,i_cv_pct\n");
}

void benchCsvRows(FILE* out, const benchTable_t* table, const benchRow_t* row, const char* const* buffers, int graph,
                  int nranks) {
  static const char* const placeNames[2] = {"out-of-place", "in-place"};
  for (int engine = 0; engine < table->nEngines; engine++) {
    for (int place = 0; place < 2; place++) {
      const benchMeasure_t* m = &row->m[engine][place];
      if (!m->valid) continue;
      fprintf(out, "%s,%s,%s,%d,%d,%zu,%zu,%s,%s,%s,%.3f,%.4f,%.4f,%lld", table->program, table->engineNames[engine],
              buffers[engine], graph, nranks, row->bytes, row->count, benchTypeName(row->type), benchOpName(row->op),
              placeNames[place], m->timeUs, m->algBw, m->busBw, (long long)m->wrong);
      if (m->iter.valid)
        fprintf(out, ",%.3f,%.3f,%.3f,%.3f\n", m->iter.minUs, m->iter.maxUs, m->iter.p99Us, m->iter.cvPct);
      else
        fprintf(out, ",,,,\n");
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
  ncclTestsBool(json, "per_iter_timing", args->perIterTiming);
  toolJsonInt(json, "per_iter_skip", args->perIterSkip);
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

/* -I: nccl-tests' "<placement>_per_iter" object, after the placement's own. */
static void jsonIterStats(toolJson_t* json, const char* key, const benchIterStats_t* stats) {
  toolJsonBeginObject(json, key);
  toolJsonInt(json, "skipped_iterations", stats->skipped);
  toolJsonDouble(json, "min_us", stats->minUs);
  toolJsonDouble(json, "max_us", stats->maxUs);
  toolJsonDouble(json, "avg_us", stats->avgUs);
  toolJsonDouble(json, "p50_us", stats->p50Us);
  toolJsonDouble(json, "p95_us", stats->p95Us);
  toolJsonDouble(json, "p99_us", stats->p99Us);
  toolJsonDouble(json, "stdev_us", stats->stdevUs);
  toolJsonDouble(json, "cv_pct", stats->cvPct);
  toolJsonBeginInlineArray(json, "times_us");
  for (int i = 0; stats->timesUs && i < stats->nTimes; i++) toolJsonDouble(json, NULL, stats->timesUs[i]);
  toolJsonEnd(json);
  if (stats->processUs && stats->nProcesses > 1) {
    toolJsonBeginArray(json, "per_process_max_times_us");
    for (int p = 0; p < stats->nProcesses; p++) {
      toolJsonBeginInlineArray(json, NULL);
      for (int i = 0; i < stats->nTimes; i++)
        toolJsonDouble(json, NULL, stats->processUs[(size_t)p * stats->nTimes + i]);
      toolJsonEnd(json);
    }
    toolJsonEnd(json);
  }
  toolJsonEnd(json);
}

static void jsonMeasure(toolJson_t* json, const char* key, const benchTable_t* table, const benchMeasure_t* m) {
  if (!m->valid) {
    toolJsonNull(json, key); /* nccl-tests' writeBenchMarkLineNullBody: a placement not run */
    return;
  }
  toolJsonBeginObject(json, key);
  toolJsonDouble(json, table->cputime ? "cpu_time" : "time", m->timeUs);
  toolJsonDouble(json, "alg_bw", m->algBw);
  toolJsonDouble(json, "bus_bw", m->busBw);
  if (m->wrong < 0)
    toolJsonNull(json, "nwrong");
  else
    toolJsonInt(json, "nwrong", m->wrong);
  toolJsonEnd(json);
  if (m->iter.valid) {
    char iterKey[64];
    snprintf(iterKey, sizeof(iterKey), "%s_per_iter", key);
    jsonIterStats(json, iterKey, &m->iter);
  }
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

void benchJsonEnd(toolJson_t* json, const benchTable_t* table, const benchSummary_t* summary, const char* error,
                  const char* endTime) {
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
  if (error && *error) toolJsonString(json, NULL, error);
  toolJsonEnd(json);
  toolJsonString(json, "end_time", endTime);
  toolJsonEnd(json);
}

/* ---- -I: per-iteration statistics ------------------------------------------------------------------------------ */

static int compareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* nccl-tests' nearest-rank index of percentile p among n sorted samples. */
static int percentileIndex(int n, int percentile) {
  const int index = (n * percentile + 99) / 100 - 1;
  return index < n - 1 ? (index > 0 ? index : 0) : n - 1;
}

int benchIterStatsCompute(const double* times, int n, int skip, benchIterStats_t* stats) {
  memset(stats, 0, sizeof(*stats));
  const int m = n - skip;
  if (!times || skip < 0 || m < 1) return -1;
  double* sorted = (double*)malloc((size_t)m * sizeof(double));
  if (!sorted) return -1;
  memcpy(sorted, times + skip, (size_t)m * sizeof(double));
  qsort(sorted, (size_t)m, sizeof(double), compareDoubles);
  double sum = 0;
  for (int i = 0; i < m; i++) sum += sorted[i];
  const double avg = sum / m;
  double squares = 0;
  for (int i = 0; i < m; i++) squares += (sorted[i] - avg) * (sorted[i] - avg);
  stats->valid = 1;
  stats->skipped = skip;
  stats->minUs = sorted[0];
  stats->maxUs = sorted[m - 1];
  stats->avgUs = avg;
  stats->p50Us = sorted[m / 2];
  stats->p95Us = sorted[percentileIndex(m, 95)];
  stats->p99Us = sorted[percentileIndex(m, 99)];
  stats->stdevUs = sqrt(squares / m);
  stats->cvPct = avg > 0 ? stats->stdevUs / avg * 100.0 : 0.0;
  stats->timesUs = times;
  stats->nTimes = n;
  free(sorted);
  return 0;
}
