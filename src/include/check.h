/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Error propagation. A failure is described once, where it is first known (fcclSetError: logged at WARN with
 * file:line and kept as the thread's last error); callers above only pass the code on.
 */
#ifndef FCCL_CHECK_H_
#define FCCL_CHECK_H_

#include "debug.h"
#include "fccl.h"

#include <errno.h>
#include <string.h>

/* Bytes of a last-error text (the thread's and a communicator's copy). */
#define FCCL_LAST_ERROR_MAX 1024

/* Records the cause of a failure for fcclGetLastError and logs it at WARN; returns result for convenience. */
fcclResult_t fcclSetError(fcclResult_t result, fcclSubsys_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Clears the thread's last error; public entry points call it first so a stale message never outlives a success. */
void fcclClearError(void);

/* The thread's last error text ("" when none). */
const char* fcclThreadLastError(void);

/* Puts back a last-error text saved earlier: cleanup after a failure must not replace the failure's cause. */
void fcclRestoreThreadError(const char* text);

#define FCCL_ERROR(result, subsys, ...) fcclSetError((result), (subsys), __FILE__, __LINE__, __VA_ARGS__)

/*
 * The check macros below log a failure under the subsystem of the file they are used in: each such file defines
 * FCCL_LOG_SUBSYS (e.g. #define FCCL_LOG_SUBSYS FCCL_SUBSYS_IPC) after its includes. A file that uses one without
 * defining it does not compile.
 */

#define FCCLCHECK(call)                                 \
  do {                                                  \
    fcclResult_t fcclCheckRes_ = (call);                \
    if (fcclCheckRes_ != fcclSuccess) return fcclCheckRes_; \
  } while (0)

#define FCCLCHECKGOTO(call, res, label) \
  do {                                  \
    (res) = (call);                     \
    if ((res) != fcclSuccess) goto label; \
  } while (0)

/* Argument validation at public entry points. */
#define FCCL_REQUIRE(cond, ...)                                                         \
  do {                                                                                  \
    if (!(cond)) return FCCL_ERROR(fcclInvalidArgument, FCCL_LOG_SUBSYS, __VA_ARGS__);  \
  } while (0)

/*
 * CUDA runtime calls. cudaGetLastError() clears the error so it is not reported again by an unrelated later call
 * (sticky errors, which poison the context, stay: the runtime keeps returning them).
 */
#define FCCL_CUDA_FAILED_(err, call)                                                                     \
  FCCL_ERROR(fcclUnhandledCudaError, FCCL_LOG_SUBSYS, "%s failed: %s (%s)", call, cudaGetErrorName(err), \
             cudaGetErrorString(err))

#define CUDACHECK(call)                                  \
  do {                                                   \
    cudaError_t fcclCudaErr_ = (call);                   \
    if (fcclCudaErr_ != cudaSuccess) {                   \
      (void)cudaGetLastError();                          \
      return FCCL_CUDA_FAILED_(fcclCudaErr_, #call);     \
    }                                                    \
  } while (0)

#define CUDACHECKGOTO(call, res, label)                  \
  do {                                                   \
    cudaError_t fcclCudaErr_ = (call);                   \
    if (fcclCudaErr_ != cudaSuccess) {                   \
      (void)cudaGetLastError();                          \
      (res) = FCCL_CUDA_FAILED_(fcclCudaErr_, #call);    \
      goto label;                                        \
    }                                                    \
  } while (0)

/* A CUDA call on a cleanup path, which goes on whatever happens: the first failure is described into res (when
 * res holds no error yet), later ones are logged at INFO. */
#define CUDACHECKKEEP(call, res)                                                                           \
  do {                                                                                                     \
    cudaError_t fcclCudaErr_ = (call);                                                                     \
    if (fcclCudaErr_ != cudaSuccess) {                                                                     \
      (void)cudaGetLastError();                                                                            \
      if ((res) == fcclSuccess)                                                                            \
        (res) = FCCL_CUDA_FAILED_(fcclCudaErr_, #call);                                                    \
      else                                                                                                 \
        FCCL_INFO(FCCL_LOG_SUBSYS, "%s failed: %s (after an earlier failure)", #call,                      \
                  cudaGetErrorName(fcclCudaErr_));                                                         \
    }                                                                                                      \
  } while (0)

/* A CUDA call whose failure changes nothing for the caller (a best-effort release, a wait before freeing): logged
 * at INFO and cleared. */
#define CUDACHECKIGNORE(call)                                                                              \
  do {                                                                                                     \
    cudaError_t fcclCudaErr_ = (call);                                                                     \
    if (fcclCudaErr_ != cudaSuccess) {                                                                     \
      (void)cudaGetLastError();                                                                            \
      FCCL_INFO(FCCL_LOG_SUBSYS, "%s failed: %s (%s); going on", #call, cudaGetErrorName(fcclCudaErr_),   \
                cudaGetErrorString(fcclCudaErr_));                                                         \
    }                                                                                                      \
  } while (0)

/*
 * System calls returning -1 and setting errno. EINTR is retried (a signal the application handles must not turn
 * into a failed init); the result is stored in retval for calls whose value matters (read, write, accept).
 */
#define SYSCHECKVAL(call, name, retval)                                                                   \
  do {                                                                                                    \
    do {                                                                                                  \
      (retval) = (call);                                                                                  \
    } while ((retval) == -1 && errno == EINTR);                                                           \
    if ((retval) == -1)                                                                                   \
      return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "%s failed: %s", (name), strerror(errno));      \
  } while (0)

#define SYSCHECK(call, name)                 \
  do {                                       \
    long fcclSysRet_;                        \
    SYSCHECKVAL((call), (name), fcclSysRet_); \
    (void)fcclSysRet_;                       \
  } while (0)

/* pthread calls, which return an error number instead of setting errno. */
#define PTHREADCHECK(call, name)                                                                           \
  do {                                                                                                     \
    int fcclPthreadErr_ = (call);                                                                          \
    if (fcclPthreadErr_ != 0)                                                                              \
      return FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "%s failed: %s", (name), strerror(fcclPthreadErr_)); \
  } while (0)

#define PTHREADCHECKGOTO(call, name, res, label)                                                           \
  do {                                                                                                     \
    int fcclPthreadErr_ = (call);                                                                          \
    if (fcclPthreadErr_ != 0) {                                                                            \
      (res) = FCCL_ERROR(fcclSystemError, FCCL_LOG_SUBSYS, "%s failed: %s", (name), strerror(fcclPthreadErr_)); \
      goto label;                                                                                          \
    }                                                                                                      \
  } while (0)

#endif /* FCCL_CHECK_H_ */
