/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one registry of environment parameters. Every FCCL_* knob is listed once in param_list.h (name, type,
 * default, one-line doc); values are read from the environment once, on first use, and never again, so a
 * setenv() after initialisation has no effect (documented in docs/env.md).
 */
#ifndef FCCL_PARAM_H_
#define FCCL_PARAM_H_

#include <stdint.h>

typedef enum { FCCL_PARAM_INT, FCCL_PARAM_STRING } fcclParamType_t;

typedef enum {
#define FCCL_PARAM(id, type, defaultValue, doc) FCCL_PARAM_##id,
#include "param_list.h"
#undef FCCL_PARAM
  FCCL_PARAM_COUNT
} fcclParamId_t;

typedef struct {
  const char* name;         /* full environment name, "FCCL_DEBUG" */
  fcclParamType_t type;
  const char* defaultValue; /* as text, the way it would be written in the environment */
  const char* doc;
} fcclParamInfo_t;

const fcclParamInfo_t* fcclParamInfo(fcclParamId_t id);

/* Integer value (the default when unset or unparsable; an unparsable value is warned about once). */
int64_t fcclParamInt(fcclParamId_t id);

/* String value; never NULL (the default, possibly ""). */
const char* fcclParamString(fcclParamId_t id);

/* Whether a parameter's value is a secret (FCCL_COMM_SECRET): tools print whether it is set, never the value. */
int fcclParamIsSecret(fcclParamId_t id);

/* Whether the environment set this parameter (as opposed to the default being used). */
int fcclParamIsSet(fcclParamId_t id);

/* Warns once about each FCCL_* variable in the environment that the registry does not know. */
void fcclParamWarnUnknown(void);

/* The known name closest to name by edit distance, or NULL when none is close; exposed for tests. */
const char* fcclParamClosestName(const char* name);

/* Re-reads the environment; for tests only. */
void fcclParamResetForTest(void);

#endif /* FCCL_PARAM_H_ */
