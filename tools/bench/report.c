/*
 * Output: the table (column for column nccl-tests' layout, so `diff` against all_reduce_perf from nccl-tests
 * lines up), its footer, CSV, JSON and the progress line.
 */
#include "bench.h"

#include <math.h>
#include <string.h>

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
  fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s", "size", "count", "type", "redop",
          "root", timeLabel, "algbw", "busbw", "#wrong", timeLabel, "algbw", "busbw", "#wrong");
  if (table->nEngines == 1) fprintf(out, " ");
  for (int engine = 1; engine < table->nEngines; engine++)
    for (int place = 0; place < 2; place++)
      fprintf(out, "  %7s  %6s  %6s  %7s", timeLabel, "busbw", "#wrong", "speedup");
  fprintf(out, "\n");
  fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s", "(B)", "(elements)", "", "", "",
          "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  if (table->nEngines == 1) fprintf(out, " ");
  for (int engine = 1; engine < table->nEngines; engine++)
    for (int place = 0; place < 2; place++) fprintf(out, "  %7s  %6s  %6s  %7s", "(us)", "(GB/s)", "", "(x)");
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
  fprintf(out, "\n");
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

void benchJsonRow(toolJson_t* json, const benchTable_t* table, const benchRow_t* row) {
  static const char* const placeKeys[2] = {"out_of_place", "in_place"};
  toolJsonBeginObject(json, NULL);
  toolJsonInt(json, "size", (long long)row->bytes);
  toolJsonInt(json, "count", (long long)row->count);
  toolJsonString(json, "type", benchTypeName(row->type));
  toolJsonString(json, "redop", benchOpName(row->op));
  toolJsonInt(json, "root", row->root);
  /* The first engine (fccl) in nccl-tests' shape, so readers of nccl-tests' JSON find its numbers. */
  for (int place = 0; place < 2; place++) jsonMeasure(json, placeKeys[place], table, &row->m[0][place]);
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
