/* SPDX-License-Identifier: Apache-2.0 */
/* Result codes in words, and the calling thread's last error (fcclSetError writes it, fcclGetLastError(NULL)
 * reads it; the communicator's copy lives in core/comm/comm.c). */
#include "check.h"
#include "debug.h"
#include "fccl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char threadLastError[FCCL_LAST_ERROR_MAX];

FCCL_API const char* fcclGetErrorString(fcclResult_t result) {
  switch (result) {
    case fcclSuccess: return "no error";
    case fcclUnhandledCudaError: return "unhandled cuda error (run with FCCL_DEBUG=INFO for details)";
    case fcclSystemError: return "unhandled system error (run with FCCL_DEBUG=INFO for details)";
    case fcclInternalError: return "internal error - please report this issue to the fccl developers";
    case fcclInvalidArgument: return "invalid argument (run with FCCL_DEBUG=WARN for details)";
    case fcclInvalidUsage: return "invalid usage (run with FCCL_DEBUG=WARN for details)";
    case fcclRemoteError: return "remote process exited or there was a network error";
    case fcclInProgress: return "operation in progress";
    case fcclTimeout: return "operation timed out";
    case fcclNumResults: break;
  }
  return "unknown result code";
}

fcclResult_t fcclSetError(fcclResult_t result, fcclSubsys_t subsys, const char* file, int line, const char* fmt, ...) {
  char message[FCCL_LAST_ERROR_MAX - 64];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  snprintf(threadLastError, sizeof(threadLastError), "%s (%s:%d)", message, base, line);
  fcclLog(fcclLogWarn, subsys, file, line, "%s", message);
  return result;
}

void fcclClearError(void) { threadLastError[0] = '\0'; }

const char* fcclThreadLastError(void) { return threadLastError; }

void fcclRestoreThreadError(const char* text) {
  if (text != threadLastError) snprintf(threadLastError, sizeof(threadLastError), "%s", text);
}

/* Public here rather than beside the logger: the logger stands below the last-error text and never calls it. */
FCCL_API fcclResult_t fcclSetLogCallback(fcclLogCallback_t callback, void* userData) {
  fcclClearError();
  fcclLogSetCallback(callback, userData);
  return fcclSuccess;
}
