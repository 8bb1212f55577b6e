/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging: FCCL_DEBUG selects the level, FCCL_DEBUG_SUBSYS the subsystems, FCCL_DEBUG_FILE the sink
 * (default stderr, never stdout). Each line carries host:pid:tid and, once a communicator set it on this thread,
 * the rank and CUDA device, so logs of several ranks can be merged and read.
 */
#ifndef FCCL_DEBUG_H_
#define FCCL_DEBUG_H_

#include "fccl.h"

#include <stdint.h>

/* Subsystems, one bit each; FCCL_DEBUG_SUBSYS names them (comma list, ^ inverts the list). */
typedef enum {
  FCCL_SUBSYS_INIT = 1u << 0,
  FCCL_SUBSYS_BOOT = 1u << 1,
  FCCL_SUBSYS_IPC = 1u << 2,
  FCCL_SUBSYS_COLL = 1u << 3,
  FCCL_SUBSYS_ENV = 1u << 4,
  FCCL_SUBSYS_TOPO = 1u << 5,
  FCCL_SUBSYS_ALL = ~0u
} fcclSubsys_t;

void fcclLog(fcclLogLevel_t level, fcclSubsys_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Whether a line of this level and subsystem would be written; lets callers skip costly formatting. */
int fcclLogEnabled(fcclLogLevel_t level, fcclSubsys_t subsys);

/* Parses FCCL_DEBUG_SUBSYS syntax into a mask; exposed for tests. Unknown names are ignored with a warning. */
uint32_t fcclParseSubsysList(const char* list);

/* The name a subsystem bit is written as in log lines ("INIT", "IPC", ...). */
const char* fcclSubsysName(fcclSubsys_t subsys);

/* Where lines go: the application's callback (fcclSetLogCallback, in errors.c), or NULL for the default sink. */
void fcclLogSetCallback(fcclLogCallback_t callback, void* userData);

/* Rank and device shown on this thread's log lines (-1: unknown). */
void fcclLogSetContext(int rank, int cudaDev);

/* Forgets the parsed logging configuration so the next line re-reads it; for tests only. */
void fcclLogResetForTest(void);

#define FCCL_WARN(subsys, ...) fcclLog(fcclLogWarn, (subsys), __FILE__, __LINE__, __VA_ARGS__)
#define FCCL_INFO(subsys, ...)                                                                                  \
  do {                                                                                                           \
    if (fcclLogEnabled(fcclLogInfo, (subsys))) fcclLog(fcclLogInfo, (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define FCCL_TRACE(subsys, ...)                                                                                   \
  do {                                                                                                            \
    if (fcclLogEnabled(fcclLogTrace, (subsys))) fcclLog(fcclLogTrace, (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#endif /* FCCL_DEBUG_H_ */
