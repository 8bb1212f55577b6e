/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tools' JSON writer (json.h). Strings are written as given (UTF-8 passes through) with the characters JSON
 * requires escaped: the quote, the backslash and every control character.
 */
#include "json.h"

#include <math.h>
#include <string.h>

void toolJsonInit(toolJson_t* json, FILE* out, int wrapDepth) {
  memset(json, 0, sizeof(*json));
  json->out = out;
  json->wrapDepth = wrapDepth;
}

static void writeQuoted(FILE* out, const char* text) {
  fputc('"', out);
  for (const unsigned char* c = (const unsigned char*)text; *c; c++) {
    switch (*c) {
      case '"': fputs("\\\"", out); break;
      case '\\': fputs("\\\\", out); break;
      case '\n': fputs("\\n", out); break;
      case '\t': fputs("\\t", out); break;
      case '\r': fputs("\\r", out); break;
      default:
        if (*c < 0x20)
          fprintf(out, "\\u%04x", *c);
        else
          fputc(*c, out);
    }
  }
  fputc('"', out);
}

/* The separator and indentation before a value, then its key. */
static void startValue(toolJson_t* json, const char* key) {
  const int depth = json->depth;
  if (depth > 0) {
    const int first = json->count[depth]++ == 0;
    if (json->oneLine[depth]) {
      if (!first) fputs(", ", json->out);
    } else {
      fputs(first ? "\n" : ",\n", json->out);
      fprintf(json->out, "%*s", 2 * depth, "");
    }
  }
  if (key && depth > 0 && json->closer[depth] == '}') {
    writeQuoted(json->out, key);
    fputs(": ", json->out);
  }
}

static void begin(toolJson_t* json, const char* key, char opener, int oneLine) {
  startValue(json, key);
  fputc(opener, json->out);
  /* Nesting beyond TOOL_JSON_MAX_DEPTH - 1 levels is a caller's bug (the tools nest eight at most): the container is
   * not tracked, so that the writer never indexes past its arrays. */
  if (json->depth + 1 >= TOOL_JSON_MAX_DEPTH) return;
  const int parent = json->depth++;
  json->count[json->depth] = 0;
  json->closer[json->depth] = opener == '{' ? '}' : ']';
  json->oneLine[json->depth] =
      (unsigned char)(oneLine || json->depth > json->wrapDepth || (parent > 0 && json->oneLine[parent]));
}

void toolJsonBeginObject(toolJson_t* json, const char* key) { begin(json, key, '{', 0); }
void toolJsonBeginArray(toolJson_t* json, const char* key) { begin(json, key, '[', 0); }
void toolJsonBeginInlineArray(toolJson_t* json, const char* key) { begin(json, key, '[', 1); }

void toolJsonEnd(toolJson_t* json) {
  if (json->depth == 0) return;
  const int depth = json->depth--;
  if (json->count[depth] > 0 && !json->oneLine[depth]) fprintf(json->out, "\n%*s", 2 * json->depth, "");
  fputc(json->closer[depth], json->out);
  if (json->depth == 0) fputc('\n', json->out);
}

void toolJsonString(toolJson_t* json, const char* key, const char* value) {
  startValue(json, key);
  if (value)
    writeQuoted(json->out, value);
  else
    fputs("null", json->out);
}

void toolJsonInt(toolJson_t* json, const char* key, long long value) {
  startValue(json, key);
  fprintf(json->out, "%lld", value);
}

void toolJsonDouble(toolJson_t* json, const char* key, double value) {
  startValue(json, key);
  if (isfinite(value))
    fprintf(json->out, "%.9g", value);
  else
    fputs("null", json->out);
}

void toolJsonFixed(toolJson_t* json, const char* key, double value, int decimals) {
  startValue(json, key);
  if (isfinite(value))
    fprintf(json->out, "%.*f", decimals, value);
  else
    fputs("null", json->out);
}

void toolJsonBool(toolJson_t* json, const char* key, int value) {
  startValue(json, key);
  fputs(value ? "true" : "false", json->out);
}

void toolJsonNull(toolJson_t* json, const char* key) {
  startValue(json, key);
  fputs("null", json->out);
}
