/*
 * fccl: fast collective communication inside one NVLink domain.
 *
 * The one public header. Everything carries the fccl prefix; handles are opaque; output parameters are written
 * only on success. Every function returns an fcclResult_t (or a string for the two error-text calls), and the
 * cause of the last failure on the calling thread is available in words from fcclGetLastError().
 *
 * Conventions used in the per-function notes:
 *   Thread safety  - whether two threads may call it at once (on distinct or the same communicator).
 *   Blocks         - whether it may wait (always bounded: by a timeout and by fcclCommAbort).
 *   Collective     - whether every rank of the communicator must make the same call.
 *   Graph capture  - whether it may be called while the stream is being captured into a CUDA graph.
 */
#ifndef FCCL_H_
#define FCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FCCL_API __attribute__((visibility("default")))
#else
#define FCCL_API
#endif

#define FCCL_MAJOR 0
#define FCCL_MINOR 1
#define FCCL_PATCH 0
/** Version as one integer, comparable: major * 10000 + minor * 100 + patch. */
#define FCCL_VERSION(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define FCCL_VERSION_CODE FCCL_VERSION(FCCL_MAJOR, FCCL_MINOR, FCCL_PATCH)

/** Result codes. The values are stable across releases; 0-7 match NCCL's meaning and value. */
typedef enum {
  fcclSuccess = 0,            /**< The call did what it was asked. */
  fcclUnhandledCudaError = 1, /**< A CUDA runtime or driver call failed. */
  fcclSystemError = 2,        /**< A system call failed (socket, memory, file). */
  fcclInternalError = 3,      /**< fccl reached a state it should not: a bug, please report it. */
  fcclInvalidArgument = 4,    /**< An argument was out of range, NULL where data is needed, or inconsistent. */
  fcclInvalidUsage = 5,       /**< The call is not valid in this state or build (wrong order, feature not built). */
  fcclRemoteError = 6,        /**< A peer failed, disconnected or sent something invalid. */
  fcclInProgress = 7,         /**< A non-blocking operation has not finished yet. */
  fcclTimeout = 8,            /**< A bounded wait expired (peer never arrived, kernel spin bound reached). */
  fcclNumResults = 9
} fcclResult_t;

/**
 * Library version as FCCL_VERSION_CODE of the library actually loaded (which may differ from the header's).
 * @param[out] version  receives the version code.
 * @return fcclSuccess, fcclInvalidArgument when version is NULL.
 * Thread safety: any thread. Blocks: no. Collective: no. Graph capture: yes.
 */
FCCL_API fcclResult_t fcclGetVersion(int* version);

/**
 * A short, static, human-readable name for a result code ("invalid argument"). Never NULL.
 * Thread safety: any thread. Blocks: no. Collective: no.
 */
FCCL_API const char* fcclGetErrorString(fcclResult_t result);

struct fcclComm;
/** Opaque communicator handle. */
typedef struct fcclComm* fcclComm_t;

/**
 * The cause of the most recent failure, in words, with the source file and line where it was detected.
 * With comm == NULL: the last failure of any fccl call on the calling thread. With a communicator: the last failure
 * recorded on that communicator by any thread (including asynchronous kernel errors once they are reported).
 * Returns "" when nothing has failed. The string stays valid until the next fccl call on the same thread.
 * Thread safety: any thread. Blocks: no. Collective: no.
 */
FCCL_API const char* fcclGetLastError(fcclComm_t comm);

/** Log levels, in increasing verbosity; FCCL_DEBUG selects one by name. */
typedef enum {
  fcclLogNone = 0,
  fcclLogVersion = 1,
  fcclLogWarn = 2,
  fcclLogInfo = 3,
  fcclLogTrace = 4
} fcclLogLevel_t;

/**
 * Receives every log line that passes FCCL_DEBUG and FCCL_DEBUG_SUBSYS, already formatted (no trailing newline).
 * Called from any fccl thread, possibly concurrently; it must not call back into fccl.
 */
typedef void (*fcclLogCallback_t)(void* userData, fcclLogLevel_t level, const char* subsystem, const char* line);

/**
 * Route log lines to a callback instead of stderr / FCCL_DEBUG_FILE. Pass NULL to restore the default.
 * @return fcclSuccess.
 * Thread safety: any thread; lines being written while it changes go to either the old or the new sink.
 * Blocks: no. Collective: no.
 */
FCCL_API fcclResult_t fcclSetLogCallback(fcclLogCallback_t callback, void* userData);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FCCL_H_ */
