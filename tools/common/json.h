/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tools' one JSON writer: fccl-topo's --json and the benchmark's -J write through it. It streams to a FILE,
 * keeps no global state and needs no allocation; the caller opens and ends containers in order, and the writer puts
 * the commas, the indentation and the escapes.
 *
 * Layout: members and elements of containers up to wrapDepth levels deep start a new line indented by two spaces a
 * level; deeper ones, and the elements of an array begun with toolJsonBeginInlineArray, follow on one line
 * separated by ", ". A key is followed by ": ". Empty containers are "{}" and "[]". Ending the outermost container
 * ends the line.
 */
#ifndef FCCL_TOOL_JSON_H_
#define FCCL_TOOL_JSON_H_

#include <stdio.h>

#define TOOL_JSON_MAX_DEPTH 32
#define TOOL_JSON_WRAP_ALL TOOL_JSON_MAX_DEPTH /* wrapDepth: every member on its own line */

typedef struct {
  FILE* out;
  int wrapDepth;
  int depth;                                /* containers open */
  int count[TOOL_JSON_MAX_DEPTH];           /* values written in the container at each depth, for the commas */
  unsigned char oneLine[TOOL_JSON_MAX_DEPTH]; /* the container at each depth is written on one line */
  char closer[TOOL_JSON_MAX_DEPTH];         /* '}' or ']' */
} toolJson_t;

void toolJsonInit(toolJson_t* json, FILE* out, int wrapDepth);

/* Every value takes its key: the member's name inside an object, NULL inside an array and for the outermost value. */
void toolJsonBeginObject(toolJson_t* json, const char* key);
void toolJsonBeginArray(toolJson_t* json, const char* key);
/* An array of scalars written on one line: [0, 1, 3]. */
void toolJsonBeginInlineArray(toolJson_t* json, const char* key);
/* Ends the innermost open object or array. */
void toolJsonEnd(toolJson_t* json);

void toolJsonString(toolJson_t* json, const char* key, const char* value); /* NULL writes null */
void toolJsonInt(toolJson_t* json, const char* key, long long value);
void toolJsonDouble(toolJson_t* json, const char* key, double value);      /* %.9g; NaN and infinities: null */
void toolJsonFixed(toolJson_t* json, const char* key, double value, int decimals); /* %.*f; NaN, infinities: null */
void toolJsonBool(toolJson_t* json, const char* key, int value);
void toolJsonNull(toolJson_t* json, const char* key);

#endif /* FCCL_TOOL_JSON_H_ */
