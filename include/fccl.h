/* SPDX-License-Identifier: Apache-2.0 */
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
#define FCCL_SUFFIX "" /**< NCCL_SUFFIX's counterpart: "" for a release. */
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
/** No communicator: what fcclCommSplit gives a rank of FCCL_SPLIT_NOCOLOR (NCCL_COMM_NULL's counterpart). */
#define FCCL_COMM_NULL NULL

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

/* ---------------------------------------------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------------------------------------------- */

#define FCCL_UNIQUE_ID_BYTES 128
/** Opaque rendezvous token from fcclGetUniqueId: root address, a random 64-bit secret, protocol version. */
typedef struct {
  char internal[FCCL_UNIQUE_ID_BYTES];
} fcclUniqueId;

#define FCCL_CONFIG_MAGIC 0xfcc1c0f1u
/** Communicator options. Always start from FCCL_CONFIG_INITIALIZER; size/magic/version let the struct grow. */
typedef struct {
  size_t size;          /**< sizeof(fcclConfig_t) as compiled by the caller. */
  unsigned int magic;   /**< FCCL_CONFIG_MAGIC. */
  unsigned int version; /**< FCCL_VERSION_CODE as compiled by the caller. */
  int blocking;         /**< 1 (default): init returns when done. 0: init may return fcclInProgress; poll
                             fcclCommGetAsyncError until it is no longer fcclInProgress. */
  int timeoutMs;        /**< Bound on every wait for peers during init and teardown; -1 (default) uses
                             FCCL_BOOTSTRAP_TIMEOUT. */
  const char* commName; /**< Shown in log lines; may be NULL. Copied. */
  int allowSharedDevice; /**< 1 lets two ranks use one GPU (tests); 0 (default) makes that an error. */
  /* ---- appended (a caller compiled with an older fccl.h passes a smaller size: these read as undefined) ---- */
  int splitShare; /**< NCCL's field for fcclCommSplit's children: 1 lets a child's NCCL communicator share its
                       parent's NCCL resources (the NCCL and hierarchical paths: NCCL's splitShare), 0 not;
                       FCCL_CONFIG_UNDEF_INT (default) leaves it to NCCL (NCCL_COMM_SPLIT_SHARE_RESOURCES). A child
                       on fccl's kernels maps the parent's peer memory again through the process's mappings whatever
                       the value (each mapping counted, nothing freed under the other). */
  int minCTAs;    /**< SM budget, NCCL's field of the same name: every kernel of the communicator runs on at least
                       this many blocks (CTAs), where the GPU has the SMs; -1 (default): FCCL_MIN_CTAS, else no
                       minimum. */
  int maxCTAs;    /**< SM budget: every kernel of the communicator runs on at most this many blocks, one per SM, so
                       that the rest of the GPU stays free for work that overlaps it; -1 (default): FCCL_MAX_CTAS,
                       else no bound but one block per SM. Must be the same on every rank (checked at init); the
                       environment variables override both, as NCCL's do. A child of fcclCommSplit or
                       fcclCommShrink made without a config keeps its parent's. docs/collectives.md#sm-budget. */
} fcclConfig_t;

#define FCCL_CONFIG_UNDEF_INT (-1)
#define FCCL_CONFIG_UNDEF_PTR NULL
#define FCCL_CONFIG_INITIALIZER                                                                    \
  {                                                                                                \
    sizeof(fcclConfig_t), FCCL_CONFIG_MAGIC, FCCL_VERSION_CODE, 1, FCCL_CONFIG_UNDEF_INT, NULL, 0, \
        FCCL_CONFIG_UNDEF_INT, FCCL_CONFIG_UNDEF_INT, FCCL_CONFIG_UNDEF_INT                        \
  }

/** Callbacks through which an application that already owns a process group bootstraps fccl. */
typedef struct {
  void* userContext;
  /** Gathers bytesPerRank bytes from every rank into recvbuf (rank order); sendbuf never overlaps recvbuf.
   *  Must return fcclSuccess or an error code; fccl cannot bound its wait, so it must return on its own. */
  fcclResult_t (*allgather)(void* userContext, const void* sendbuf, void* recvbuf, size_t bytesPerRank);
  /** Waits until every rank has reached it. May be NULL: a one-byte allgather is used instead. */
  fcclResult_t (*barrier)(void* userContext);
} fcclBootstrapCallbacks_t;

/**
 * Creates a rendezvous id. Call on one process (the root) and pass the bytes to every rank out of band.
 * A root thread starts listening (127.0.0.1 by default; FCCL_SOCKET_IFNAME or FCCL_COMM_ID choose the address)
 * and keeps listening until every rank of the communicator that uses the id has arrived, or until the timeout
 * (FCCL_BOOTSTRAP_TIMEOUT for the first rank, then the arrived ranks' own timeouts) expires.
 * @param[out] uniqueId  receives the id (random secret included: only holders of the id can join).
 * @return fcclSuccess, fcclInvalidArgument (NULL id, unparsable FCCL_COMM_ID or FCCL_SOCKET_IFNAME),
 *         fcclSystemError (no socket or thread could be made), fcclInvalidUsage (1024 ids already waiting).
 * Thread safety: any thread. Blocks: no. Collective: no. Graph capture: no.
 */
FCCL_API fcclResult_t fcclGetUniqueId(fcclUniqueId* uniqueId);

/**
 * Creates a communicator of nranks ranks on the current CUDA device; every rank calls it with the same id.
 * @param[out] comm  receives the handle on success.
 * @param nranks     number of ranks, 1..4096.
 * @param commId     the id from fcclGetUniqueId.
 * @param rank       this caller's rank, 0..nranks-1, distinct on every caller.
 * @return fcclSuccess; fcclInvalidArgument (NULL comm, bad rank/nranks, corrupt id);
 *         fcclTimeout (a rank never arrived or stopped answering: the message names it);
 *         fcclRemoteError (a peer disconnected, or disagreed on nranks, rank or fccl version: the message names
 *         the ranks); fcclInvalidUsage (two ranks on one GPU); fcclUnhandledCudaError; fcclSystemError.
 * Thread safety: any thread, distinct output handles. Blocks: yes, bounded by the timeout.
 * Collective: yes. Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommInitRank(fcclComm_t* comm, int nranks, fcclUniqueId commId, int rank);

/**
 * fcclCommInitRank with options; config may be NULL for the defaults. With config->blocking = 0 the init runs on
 * a thread of its own: the call returns fcclInProgress with *comm already valid; poll fcclCommGetAsyncError until
 * it is no longer fcclInProgress, or end the init at once with fcclCommAbort.
 * @return as fcclCommInitRank, plus fcclInProgress (non-blocking), and fcclInvalidArgument for a config not made
 *         from FCCL_CONFIG_INITIALIZER or with a field out of range.
 * Thread safety: any thread, distinct output handles. Blocks: when blocking (bounded). Collective: yes.
 */
FCCL_API fcclResult_t fcclCommInitRankConfig(fcclComm_t* comm, int nranks, fcclUniqueId commId, int rank,
                                             const fcclConfig_t* config);

/**
 * Creates ndev communicators in this process, one per device (devlist, or devices 0..ndev-1 when NULL), as
 * ranks 0..ndev-1 in that order. The caller's current device is not changed.
 * Destroy each with fcclCommDestroy, in any order and from one thread or several: the teardown, which is
 * collective, runs when the last of them is destroyed. fcclCommAbort on one of them aborts all of them (each
 * still needs its own fcclCommDestroy or fcclCommAbort).
 * @param[out] comms  receives ndev handles on success.
 * @param ndev        number of communicators, 1..64.
 * @param devlist     ndev distinct CUDA device ordinals, or NULL for 0..ndev-1.
 * @return as fcclCommInitRank (the error of the rank that failed first); fcclInvalidArgument for NULL comms,
 *         ndev out of range, or a device listed twice or not visible. On failure no communicator is left.
 * Thread safety: any thread. Blocks: yes (bounded). Collective: no (it is the whole group). Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommInitAll(fcclComm_t* comms, int ndev, const int* devlist);

/**
 * Creates a communicator from launcher variables: RANK/WORLD_SIZE/LOCAL_RANK (torchrun), else
 * OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK (Open MPI), else PMI_RANK/PMI_SIZE/MPI_LOCALRANKID (PMI). Rank 0 listens at
 * FCCL_COMM_ID (host:port), or for torchrun without it at MASTER_ADDR and port MASTER_PORT + 1 (MASTER_PORT itself
 * is torch's store): exactly that address, which must be one of rank 0's host; the others connect there.
 * With more than one rank the launcher must also export FCCL_COMM_SECRET, the same random string of at least 16
 * characters to every rank (e.g. FCCL_COMM_SECRET=$(openssl rand -hex 16) before torchrun, the same value on every
 * node): the ranks present it to each other, so a process that cannot read the launch environment cannot join.
 * The device: the current one when the calling thread already has a CUDA context (after cudaSetDevice), else
 * LOCAL_RANK modulo the visible device count, which is then made current. config may be NULL.
 * @return as fcclCommInitRankConfig, plus fcclInvalidUsage when the variables are missing or inconsistent
 *         (FCCL_COMM_SECRET missing or shorter than 16 characters with more than one rank), and fcclSystemError
 *         when rank 0 cannot listen at the address (not an address of its host, or in use).
 * Thread safety: any thread. Blocks: yes (bounded). Collective: yes. Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommInitFromEnv(fcclComm_t* comm, const fcclConfig_t* config);

/**
 * Creates a communicator using the application's own all-gather and barrier (an inference server's process
 * group), on the current device. The callbacks are copied; they (and userContext) are used inside this call
 * (on the init thread when config->blocking is 0) and may be used inside fcclCommDestroy, so userContext must
 * stay valid until then; when fcclCommAbort ends a non-blocking init while a callback runs, until that callback has
 * returned (after fcclCommAbort itself did). fccl cannot bound a callback's wait.
 * @return as fcclCommInitRankConfig; fcclInvalidArgument for NULL callbacks or allgather;
 *         fcclInvalidUsage when allgather does not gather in rank order; a callback's own error code.
 * Thread safety: any thread. Blocks: as long as the callbacks do. Collective: yes. Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommInitExternal(fcclComm_t* comm, int nranks, int rank,
                                           const fcclBootstrapCallbacks_t* callbacks, const fcclConfig_t* config);

/**
 * Creates a communicator over the same ranks as an existing NCCL communicator (ncclComm is an ncclComm_t), with
 * the same rank numbers, using ncclAllGather for the exchange. The NCCL communicator's device must be current.
 * NCCL is found at run time (the libnccl.so.2 already loaded); libfccl does not link it.
 * @return as fcclCommInitRankConfig; fcclInvalidArgument (NULL, or another device is current);
 *         fcclInvalidUsage when this build has no NCCL support or libnccl.so.2 cannot be loaded.
 * Thread safety: any thread, not concurrently with other NCCL calls on ncclComm. Blocks: yes (bounded).
 * Collective: yes (over the NCCL communicator). Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommInitFromNccl(fcclComm_t* comm, void* ncclComm, const fcclConfig_t* config);

/**
 * Releases every resource of the communicator (peer mappings, synchronising with the other ranks, bounded by the
 * timeout) and frees it. Waits for a non-blocking init that is still running. After a failed init or an abort it
 * frees everything local without talking to peers. The handle is invalid afterwards. A communicator of
 * fcclCommInitAll is torn down when the last one of its group is destroyed (see there); until then this returns
 * fcclSuccess at once.
 * @return fcclSuccess, fcclInvalidArgument (invalid handle), or the error of a teardown step with peers (the
 *         communicator is freed all the same).
 * Thread safety: not concurrently with other calls on the same comm. Blocks: yes (bounded). Collective: yes.
 * Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommDestroy(fcclComm_t comm);

/**
 * Marks the communicator aborted: every wait of a non-blocking init still running returns promptly with an error
 * (and running kernels stop), then frees everything local without talking to peers. The handle is invalid
 * afterwards; no other call may be using it, except the non-blocking init's own thread. The other communicators
 * of an fcclCommInitAll group are aborted with it (their handles stay valid until destroyed or aborted). A
 * non-blocking init inside an application's callback (fcclCommInitExternal) is not waited for: its thread frees
 * the communicator once the callback returns.
 * @return fcclSuccess, fcclInvalidArgument (invalid handle), fcclInvalidUsage (a communicator made by a parent of
 *         this process, before a fork()).
 * Thread safety: may be called from another thread than the init's. Blocks: briefly. Collective: no.
 * Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommAbort(fcclComm_t comm);

#define FCCL_SHRINK_DEFAULT 0 /**< fcclCommShrink leaves the parent communicator as it is. */
#define FCCL_SHRINK_ABORT 1   /**< fcclCommShrink first fails the parent, so its running kernels stop at once. */

/**
 * The ranks of comm that are not in excludeRanks make a new communicator of their own (ncclCommShrink's shape), in
 * the order of their ranks in comm and without a new unique id from the application: after a peer died, the
 * survivors call it on the failed communicator with the dead ranks excluded. The lowest surviving rank makes the
 * new communicator's unique id and hands it to the others over a Unix socket of this host, each side checking the
 * other's process; then every survivor makes the new communicator. comm stays to be destroyed or aborted.
 * @param excludeRanks  excludeCount ranks of comm (may be NULL when excludeCount is 0); not this rank.
 * @param newcomm       receives the new communicator (rank: this rank's index among the survivors).
 * @param config        the new communicator's options; NULL: comm's timeout, name, allowSharedDevice and
 *                      splitShare (fcclCommShrink blocks whatever comm's blocking says).
 * @param flags         FCCL_SHRINK_DEFAULT or FCCL_SHRINK_ABORT.
 * @return fcclSuccess; fcclInvalidArgument (invalid comm, NULL newcomm, an excluded rank out of range, twice or
 *         this rank, excludeCount out of 0..nranks-1, unknown flags); fcclInvalidUsage (comm's init has not
 *         finished, comm is not on the fccl path, a survivor is not a process of this host and pid namespace, a
 *         communicator made before a fork()); fcclTimeout (a survivor did not call it within comm's timeout,
 *         named); what fcclCommInitRankConfig returns for the new communicator.
 * Thread safety: as fcclCommInitRank (ranks of one process call it from threads of their own). Blocks: until every
 * survivor has called it, at most comm's timeout per step. Collective: yes, every survivor with the same
 * excludeRanks (in any order). Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommShrink(fcclComm_t comm, const int* excludeRanks, int excludeCount, fcclComm_t* newcomm,
                                     const fcclConfig_t* config, int flags);

/** The color of a rank that joins no communicator in fcclCommSplit (NCCL_SPLIT_NOCOLOR's value). */
#define FCCL_SPLIT_NOCOLOR (-1)

/**
 * Splits comm into disjoint communicators (ncclCommSplit's semantics): the ranks that pass the same color form one
 * new communicator, ordered by key and, for equal keys, by their rank in comm; a rank that passes
 * FCCL_SPLIT_NOCOLOR takes part in the exchange and gets FCCL_COMM_NULL. Every rank of comm calls it. Each new
 * communicator runs on the path its own ranks allow (fcclCommGetPath: fccl's kernels, NCCL or hierarchical, decided
 * as at init), on comm's device, without a unique id from the application: the ranks agree on colors, keys and a
 * rendezvous over comm's own exchange, the new communicator's ranks reuse what comm knows of them (their processes
 * and GPUs) and comm's peer mappings (each gains a reference; nothing is mapped twice), and where comm has an NCCL
 * communicator the new one's is ncclCommSplit of it. comm stays usable and is destroyed on its own, before or
 * after its children. While the exchange over comm runs, comm's fcclCommGetAsyncError says fcclInProgress and its
 * other calls return fcclInvalidUsage.
 * @param comm     a communicator whose init has finished, not finalized.
 * @param color    a value >= 0, or FCCL_SPLIT_NOCOLOR.
 * @param key      orders the ranks of one color (any int).
 * @param newcomm  receives the new communicator, or FCCL_COMM_NULL for FCCL_SPLIT_NOCOLOR.
 * @param config   the new communicator's options; NULL: comm's (blocking, timeout, name, allowSharedDevice,
 *                 splitShare). With blocking = 0 the call returns fcclInProgress at once: *newcomm is valid (its
 *                 fcclCommCount and fcclCommUserRank give 0 and -1 until the exchange has placed it); poll
 *                 fcclCommGetAsyncError(*newcomm), or for FCCL_SPLIT_NOCOLOR fcclCommGetAsyncError(comm), until it
 *                 is no longer fcclInProgress; fcclCommAbort(*newcomm) ends it at once.
 * @return fcclSuccess; fcclInProgress (non-blocking); fcclInvalidArgument (invalid comm, NULL newcomm, a color below
 *         0 other than FCCL_SPLIT_NOCOLOR, a bad config); fcclInvalidUsage (comm's init not finished, comm
 *         finalized or failed, a split of comm still running, a communicator made before a fork()); fcclTimeout or
 *         fcclRemoteError (a rank of comm did not call it within the timeout, or died: named; comm's exchange is
 *         then broken, and comm reports the failure; the same when ncclCommSplit of comm's NCCL communicator fails
 *         or does not end within the timeout, which leaves that one unusable); what fcclCommInitRankConfig returns
 *         for the new communicator (a rank of the same color that failed makes every rank of its color fail).
 * Thread safety: as fcclCommInitRank; not concurrently with other calls on comm. Blocks: when blocking, until the
 * new communicator is ready, bounded by comm's timeout for the exchange and the new one's for the rest.
 * Collective: yes, every rank of comm. Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommSplit(fcclComm_t comm, int color, int key, fcclComm_t* newcomm,
                                    const fcclConfig_t* config);

/**
 * Finishes the communicator's work with its peers (ncclCommFinalize's semantics): waits for its kernels and NCCL's
 * work to complete, then releases, with the other ranks, everything shared with them (peer mappings, the slot of its
 * arena, NCCL's communicator, the host communicator of the hierarchical path). After it, fcclCommDestroy is local
 * and quick, and the communicator takes no collective call (fcclInvalidUsage). With a non-blocking config
 * (blocking = 0, or inherited through fcclCommSplit) it returns fcclInProgress and runs on a thread of its own:
 * poll fcclCommGetAsyncError until it is no longer fcclInProgress. A communicator of fcclCommInitAll is finished
 * together with its group at the last destroy (fcclCommDestroy), so that one thread may finalize and destroy them
 * in turn: here its own work is waited for.
 * @return fcclSuccess; fcclInProgress (non-blocking); fcclInvalidArgument (invalid handle); fcclInvalidUsage (init
 *         not finished, already finalized, a split of it running, a communicator made before a fork()); the
 *         communicator's recorded error when its init or a kernel failed (abort or destroy it); fcclTimeout or
 *         fcclRemoteError when a peer does not take part (the communicator then holds nothing shared with peers).
 * Thread safety: not concurrently with other calls on the same comm. Blocks: when blocking, bounded by the timeout.
 * Collective: yes. Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommFinalize(fcclComm_t comm);

/**
 * fcclSuccess, fcclInProgress (non-blocking init not finished), or the error the init thread or a kernel recorded
 * (fcclGetLastError(comm) has the words).
 * @return fcclSuccess, fcclInvalidArgument (invalid handle or NULL asyncError).
 * Thread safety: any thread. Blocks: no. Collective: no. Graph capture: yes.
 */
FCCL_API fcclResult_t fcclCommGetAsyncError(fcclComm_t comm, fcclResult_t* asyncError);

/**
 * Number of ranks in the communicator (also while a non-blocking init runs).
 * @param[out] count  receives the number.
 * @return fcclSuccess, fcclInvalidArgument (invalid handle or NULL count).
 * Thread safety: any thread. Blocks: no. Collective: no. Graph capture: yes.
 */
FCCL_API fcclResult_t fcclCommCount(const fcclComm_t comm, int* count);

/**
 * CUDA device the communicator uses (the one current when it was created).
 * @param[out] device  receives the device ordinal.
 * @return fcclSuccess, fcclInvalidArgument (invalid handle or NULL device).
 * Thread safety: any thread. Blocks: no. Collective: no. Graph capture: yes.
 */
FCCL_API fcclResult_t fcclCommCuDevice(const fcclComm_t comm, int* device);

/**
 * This process's rank in the communicator, 0..count-1.
 * @param[out] rank  receives the rank.
 * @return fcclSuccess, fcclInvalidArgument (invalid handle or NULL rank).
 * Thread safety: any thread. Blocks: no. Collective: no. Graph capture: yes.
 */
FCCL_API fcclResult_t fcclCommUserRank(const fcclComm_t comm, int* rank);

/* ---------------------------------------------------------------------------------------------------------------
 * Collectives
 * ------------------------------------------------------------------------------------------------------------- */

/** Data types; values match NCCL's, and so do NCCL's other names for five of them (fcclChar, fcclInt, fcclHalf,
 *  fcclFloat, fcclDouble). fcclFloat8e4m3 (OCP FP8 E4M3: 1 sign, 4 exponent, 3 mantissa bits, no infinities,
 *  largest finite 448) is an output type of fcclAllReduceAddRMSNorm and a type of fcclMoeDispatch only: the
 *  collectives refuse it. */
typedef enum {
  fcclInt8 = 0,
  fcclChar = 0,
  fcclUint8 = 1,
  fcclInt32 = 2,
  fcclInt = 2,
  fcclUint32 = 3,
  fcclInt64 = 4,
  fcclUint64 = 5,
  fcclFloat16 = 6,
  fcclHalf = 6,
  fcclFloat32 = 7,
  fcclFloat = 7,
  fcclFloat64 = 8,
  fcclDouble = 8,
  fcclBfloat16 = 9,
  fcclFloat8e4m3 = 10,
  fcclNumTypes = 11
} fcclDataType_t;

/** Reduction operations; values match NCCL's. fcclAvg is the sum divided by the number of ranks (integers:
 *  the wrapped sum, truncated toward zero). Values from fcclNumOps up are the ops a communicator makes
 *  (fcclRedOpCreatePreMulSum), valid on that communicator only; fcclMaxRedOp only gives the type their range. */
typedef enum {
  fcclSum = 0,
  fcclProd = 1,
  fcclMax = 2,
  fcclMin = 3,
  fcclAvg = 4,
  fcclNumOps = 5,
  fcclMaxRedOp = 0x7fffffff
} fcclRedOp_t;

/**
 * Reduces count elements across all ranks (sum, product, max, min or average) into recvbuf on every rank;
 * sendbuf == recvbuf is in place. The result is bitwise identical on every rank: every rank reduces in rank order
 * 0..n-1, 16-bit floats accumulate in fp32, integers wrap around, float max/min propagate NaN, avg is the sum
 * divided once by the number of ranks. Any count and any element-aligned pointers.
 * Buffers inside a range registered with fcclCommRegister (on every rank, at the same offset, and in place on every
 * rank or on none) are read and written in place; others go through the communicator's staging buffers
 * (FCCL_STAGING_BYTES) in rounds, so any count works. The algorithm follows the size (FCCL_ALGO overrides); all
 * the work (kernels, and for some sizes a copy-engine copy) is enqueued on stream. docs/collectives.md has the
 * algorithms and the table.
 * @param sendbuf   input, count elements of device memory of the communicator's device (NULL only with count 0).
 * @param recvbuf   output, likewise; may equal sendbuf.
 * @param count     elements (0 does nothing).
 * @param datatype  element type.
 * @param op        reduction.
 * @param comm      communicator.
 * @param stream    cudaStream_t of the communicator's device (NULL: the default stream).
 * @return fcclSuccess; fcclInvalidArgument (invalid comm, NULL buffer with count > 0, unknown type or op, a
 *         pointer not aligned to its elements, a buffer or stream of another device or a host buffer, a count too
 *         large for the staging rounds); fcclInvalidUsage (the communicator's init did not finish; on the
 *         hierarchical path, a call inside fcclGroupStart/fcclGroupEnd); fcclUnhandledCudaError (the launch
 *         failed); an error an earlier kernel recorded (fcclTimeout), in which case nothing is launched.
 * Thread safety: not concurrently with other calls on the same communicator; the calls of one communicator must
 * be ordered (one stream, or streams the application orders). Blocks: no (enqueued on stream); the kernel waits
 * for the peers' kernels, at most FCCL_TIMEOUT, and stops at once on fcclCommAbort. Collective: yes, the same
 * count, type and op on every rank, in the same order. Graph capture: yes; replays are correct any number of times.
 * Captured with buffers that are not registered, at a size where registered buffers run another algorithm
 * (docs/collectives.md#graph-registration) and with every rank in a process of its own, the call registers them
 * with every rank for the graph's lifetime (FCCL_GRAPH_REGISTER=0: it stages instead), so that replays read them
 * in place: the call then also exchanges with the peers on the host (blocks, bounded by the communicator's
 * timeout; every rank must capture it), and the registrations are released when the graph is destroyed, at the
 * communicator's next collective call. The buffers must outlive the graph, as PyTorch's graph memory pools do.
 * Eager calls on the same buffers still stage.
 */
FCCL_API fcclResult_t fcclAllReduce(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                                    fcclRedOp_t op, fcclComm_t comm, void* stream);

/**
 * Device-side barrier across all ranks, ordered on stream: work enqueued after it on any rank's stream starts
 * only after every rank's stream reached it.
 * @param comm    communicator.
 * @param stream  cudaStream_t of the communicator's device (NULL: the default stream).
 * @return fcclSuccess; fcclInvalidArgument (invalid comm, stream of another device); fcclInvalidUsage (init not
 *         finished); fcclUnhandledCudaError; an error an earlier kernel recorded.
 * Thread safety: as fcclAllReduce. Blocks: no. Collective: yes. Graph capture: yes.
 */
FCCL_API fcclResult_t fcclBarrier(fcclComm_t comm, void* stream);

/**
 * Gathers sendcount elements from every rank into recvbuf on every rank: rank r's elements land at
 * recvbuf + r * sendcount (in elements). In place when sendbuf == recvbuf + rank * sendcount (the rank's own
 * elements are then not copied). A recvbuf inside a registered range (fcclCommRegister; on every rank or on none,
 * at the same offset on every rank) is written in place by the peers; otherwise the blocks go through staging in
 * rounds, so any count works; captured in a CUDA graph, a plain recvbuf is registered for the graph as
 * fcclAllReduce's buffers are.
 * FCCL_ALLGATHER_ALGO overrides the algorithm (docs/collectives.md).
 * @param sendbuf    sendcount elements of device memory of the communicator's device (NULL only with count 0).
 * @param recvbuf    nranks * sendcount elements of device memory of that device.
 * @param sendcount  elements each rank contributes (0 does nothing).
 * @return as fcclAllReduce, without the op.
 * Thread safety, blocking, graph capture: as fcclAllReduce. Collective: yes, the same sendcount and type on every
 * rank, in the same order as the communicator's other collectives.
 */
FCCL_API fcclResult_t fcclAllGather(const void* sendbuf, void* recvbuf, size_t sendcount, fcclDataType_t datatype,
                                    fcclComm_t comm, void* stream);

/**
 * Reduces nranks blocks of recvcount elements across ranks and leaves block r's result in rank r's recvbuf: the
 * reduction rules are fcclAllReduce's (rank order, fp32 accumulation for 16-bit floats, NaN rules, avg divided
 * once), so a reduce-scatter followed by an all-gather gives bit for bit what fcclAllReduce gives. In place when
 * recvbuf == sendbuf + rank * recvcount. A sendbuf inside a registered range (on every rank or on none, at the same
 * offset) is read in place by the peers; otherwise as for fcclAllGather. FCCL_REDUCESCATTER_ALGO overrides the
 * algorithm.
 * @param sendbuf    nranks * recvcount elements of device memory of the communicator's device.
 * @param recvbuf    recvcount elements of device memory of that device.
 * @param recvcount  elements of each rank's result (0 does nothing).
 * @return as fcclAllReduce.
 * Thread safety, blocking, graph capture: as fcclAllReduce. Collective: yes, the same recvcount, type and op on
 * every rank.
 */
FCCL_API fcclResult_t fcclReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                        fcclDataType_t datatype, fcclRedOp_t op, fcclComm_t comm, void* stream);

/**
 * Copies count elements of root's sendbuf into every rank's recvbuf (root's included). sendbuf is read on root
 * only (other ranks may pass NULL); in place when root's sendbuf == recvbuf. Registration as for fcclAllGather
 * (recvbuf's); FCCL_BROADCAST_ALGO overrides the algorithm. An argument only root checks (its sendbuf) fails on
 * root alone: the other ranks' calls then wait for it until FCCL_TIMEOUT, as with NCCL.
 * @param root  the rank whose data is sent, 0..nranks-1, the same on every rank.
 * @return as fcclAllReduce, without the op, plus fcclInvalidArgument for a root out of range.
 * Thread safety, blocking, graph capture: as fcclAllReduce. Collective: yes, the same count, type and root on
 * every rank.
 */
FCCL_API fcclResult_t fcclBroadcast(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                                    int root, fcclComm_t comm, void* stream);

/* ---- variable all-gather and reduce-scatter: a count per rank ---------------------------------------------------- */

/**
 * fcclAllGather with a count per rank: rank r contributes counts[r] elements (any of them 0), which land in every
 * rank's recvbuf after the blocks of ranks 0..r-1, at element counts[0] + ... + counts[r-1]. recvbuf holds
 * counts[0] + ... + counts[nranks-1] elements. In place when sendbuf == recvbuf + (counts[0] + ... +
 * counts[rank-1]). Registration, staging, graph registration and FCCL_ALLGATHER_ALGO (its ll, direct and staged
 * forms) as for fcclAllGather; the form follows the largest block. On the NCCL and hierarchical paths NCCL carries
 * it as a group of one ncclBroadcast per rank with a block. docs/collectives.md#variable-all-gather-and-reduce-scatter.
 * @param sendbuf   counts[rank] elements of device memory of the communicator's device (NULL when that is 0).
 * @param recvbuf   the sum of the counts, likewise (NULL when it is 0).
 * @param counts    host memory: nranks counts, read during the call (a CUDA graph keeps the counts it was captured
 *                  with). All 0: the call does nothing.
 * @return as fcclAllGather, plus fcclInvalidArgument for counts NULL or counts whose sum overflows a size.
 * Thread safety, blocking, graph capture: as fcclAllGather. Collective: yes, the same counts (all nranks of them)
 * and type on every rank; ranks with other counts stop with fcclInvalidUsage on fccl's kernels (ranks out of step).
 */
FCCL_API fcclResult_t fcclAllGatherV(const void* sendbuf, void* recvbuf, const size_t* counts, fcclDataType_t datatype,
                                     fcclComm_t comm, void* stream);

/**
 * fcclReduceScatter with a count per rank: block r, counts[r] elements at element counts[0] + ... + counts[r-1] of
 * every rank's sendbuf, is reduced across ranks into rank r's recvbuf, with fcclAllReduce's rules (rank order, fp32
 * accumulation for 16-bit floats, NaN rules, avg divided once); with equal counts the bits are fcclReduceScatter's.
 * In place when recvbuf == sendbuf + (counts[0] + ... + counts[rank-1]). Registration (of sendbuf), staging, graph
 * registration and FCCL_REDUCESCATTER_ALGO as for fcclReduceScatter. On the NCCL and hierarchical paths NCCL carries
 * it as a group of one ncclReduce per rank with a block, whose sums NCCL orders as it chooses.
 * @param sendbuf   the sum of the counts, elements of device memory of the communicator's device (NULL when 0).
 * @param recvbuf   counts[rank] elements, likewise (NULL when that is 0).
 * @param counts    host memory: nranks counts, as for fcclAllGatherV.
 * @return as fcclReduceScatter, plus fcclInvalidArgument for counts NULL or counts whose sum overflows a size.
 * Thread safety, blocking, graph capture: as fcclAllGather. Collective: yes, the same counts, type and op on every
 * rank.
 */
FCCL_API fcclResult_t fcclReduceScatterV(const void* sendbuf, void* recvbuf, const size_t* counts,
                                         fcclDataType_t datatype, fcclRedOp_t op, fcclComm_t comm, void* stream);

/**
 * fcclAllGatherV with the counts in device memory, read when the call runs: every launch and every replay of a CUDA
 * graph that captured it reads them again, so a graph captured once serves counts that change from step to step
 * (written on the stream before the call, as any input). The buffers are sized for the worst case: every rank's
 * sendbuf holds sendcapacity elements and its recvbuf recvcapacity; each count must be within sendcapacity and
 * their sum within recvcapacity. The form follows sendcapacity, as fcclAllGatherV's follows the largest count.
 * The buffers must not overlap: in place is for host counts only, since device counts move each rank's block.
 * Counts that do not fit, or are negative, are seen by the kernel: the call then moves nothing and the communicator
 * fails with fcclInvalidArgument, naming the count and the call (fcclCommGetAsyncError, and the next call returns
 * it): destroy or abort it. On the NCCL and hierarchical paths NCCL needs the counts on the host: the call copies
 * them back and waits for the stream to reach it (blocks), checks them (fcclInvalidArgument, before anything is
 * launched), and runs fcclAllGatherV's group; there it cannot be captured nor called inside a group.
 * @param sendbuf       sendcapacity elements of device memory of the communicator's device (NULL when 0).
 * @param recvbuf       recvcapacity elements, likewise (NULL when 0).
 * @param counts        device memory of that device: nranks int64_t counts, 8-byte aligned.
 * @param sendcapacity  elements each rank's sendbuf holds: the largest count allowed. The same on every rank.
 * @param recvcapacity  elements each rank's recvbuf holds: the largest sum allowed. The same on every rank.
 * @return as fcclAllGatherV, plus fcclInvalidArgument for counts NULL, misaligned or not device memory of the
 *         communicator's device, capacities that overflow a size, or buffers that overlap; on the NCCL and hierarchical
 * paths also for counts that do not fit, and fcclInvalidUsage for a call being captured or inside a group. Thread
 * safety: as fcclAllGather. Blocks: no on fccl's kernels; on the NCCL and hierarchical paths until the stream reaches
 * the call. Collective: yes, the same counts (when the call runs), capacities and type on every rank; on fccl's kernels
 * ranks that read other counts stop with fcclInvalidUsage (ranks out of step). Graph capture: yes on fccl's kernels
 * (captured plain buffers registered as for fcclAllGather); no on the other paths.
 */
FCCL_API fcclResult_t fcclAllGatherVDevice(const void* sendbuf, void* recvbuf, const int64_t* counts,
                                           size_t sendcapacity, size_t recvcapacity, fcclDataType_t datatype,
                                           fcclComm_t comm, void* stream);

/**
 * fcclReduceScatterV with the counts in device memory, read when the call runs, as fcclAllGatherVDevice's: every
 * rank's sendbuf holds sendcapacity elements, the largest sum of the counts allowed, and its recvbuf recvcapacity,
 * the largest count allowed; the form follows recvcapacity. Counts that do not fit: as for fcclAllGatherVDevice.
 * @param sendbuf       sendcapacity elements of device memory of the communicator's device (NULL when 0).
 * @param recvbuf       recvcapacity elements, likewise (NULL when 0).
 * @param counts        device memory of that device: nranks int64_t counts, 8-byte aligned.
 * @param sendcapacity  elements each rank's sendbuf holds, the same on every rank.
 * @param recvcapacity  elements each rank's recvbuf holds, the same on every rank.
 * @return as fcclAllGatherVDevice, plus fcclInvalidArgument for an unknown op.
 * Thread safety, blocking, collective, graph capture: as fcclAllGatherVDevice, with the same op on every rank.
 */
FCCL_API fcclResult_t fcclReduceScatterVDevice(const void* sendbuf, void* recvbuf, const int64_t* counts,
                                               size_t sendcapacity, size_t recvcapacity, fcclDataType_t datatype,
                                               fcclRedOp_t op, fcclComm_t comm, void* stream);

/** How fcclAllReduceAddRMSNorm scales an FP8 output (docs/fused.md#fp8). */
typedef enum {
  fcclScaleNone = 0,     /**< output in the input's type: no scale (scale must be NULL) */
  fcclScaleStatic = 1,   /**< FP8 output: out = sat(y / scale[0]), scale a device float the call reads */
  fcclScaleDynamic = 2,  /**< FP8 output: per token, scale[t] = max|y_t| / 448 is written, out = sat(y / scale[t]) */
  fcclNumScaleModes = 3
} fcclScaleMode_t;

/**
 * The all-reduce + residual add + RMSNorm of a transformer layer's end, in one call: for every token t (a row of
 * hidden elements) and element i,
 *   s       = the sum over ranks of input, exactly as fcclAllReduce(..., fcclSum, ...) rounds it to datatype
 *   r'      = round(float(residual) + float(s)) to datatype (s when residual is NULL); written back into residual
 *   y       = float(r') * rsqrt(sum_i float(r'_i)^2 / hidden + eps) * float(weight_i), in fp32
 *   output  = round(y) to datatype, or for fcclFloat8e4m3 the saturating conversion of y / scale (scaleMode).
 * The result is bitwise identical on every rank, and a token's bits do not depend on tokens (batch invariant) or
 * on how the call moves the data. NaN and infinity in any input propagate into that token's r' and output
 * elements as IEEE arithmetic gives them (docs/fused.md has the rules and the formulas).
 * An input inside a range registered with fcclCommRegister (on every rank, at the same offset) is read in place by
 * the peers; otherwise it goes through the communicator's staging buffers in rounds of whole tokens.
 * @param input      tokens x hidden elements of datatype, device memory of the communicator's device. No buffer
 *                   the call writes (residual, output, dynamic scales) may overlap another argument's buffer.
 * @param residual   tokens x hidden elements of datatype, read and overwritten with r'; NULL: no residual.
 * @param weight     hidden elements of datatype; NULL: a weight of 1.
 * @param output     tokens x hidden elements of outtype.
 * @param tokens     rows (0 does nothing).
 * @param hidden     elements of a row, >= 1; a row of datatype must fit 65536 bytes and one staging chunk.
 * @param eps        added to the mean square, finite and >= 0.
 * @param datatype   fcclFloat16, fcclBfloat16 or fcclFloat32.
 * @param outtype    datatype, or fcclFloat8e4m3.
 * @param scaleMode  fcclScaleNone when outtype is datatype; fcclScaleStatic or fcclScaleDynamic for FP8.
 * @param scale      fcclScaleStatic: one float of device memory, read by the kernel; fcclScaleDynamic: tokens
 *                   floats of device memory, written; fcclScaleNone: NULL. 4-byte aligned.
 * @param comm       communicator.
 * @param stream     cudaStream_t of the communicator's device (NULL: the default stream).
 * @return fcclSuccess; fcclInvalidArgument (invalid comm; NULL input or output with tokens > 0; hidden 0 or a row
 *         too large; datatype, outtype or scaleMode outside the above or inconsistent; scale NULL where needed or
 *         given where not; eps negative, infinite or NaN; a pointer not aligned to its elements; a buffer the call
 *         writes overlapping another; tokens x hidden overflowing a size or more rounds than a call can count; a
 *         row that does not fit a staging chunk; a buffer or stream of another device or a host buffer);
 *         fcclInvalidUsage (the communicator's init did not finish, or it is on the NCCL or hierarchical path:
 *         fcclCommGetPath; there the all-reduce and the norm are separate calls); fcclUnhandledCudaError (the
 *         launch failed); an error an earlier kernel recorded (fcclTimeout), in which case nothing is launched. On
 *         an argument error nothing is launched and fcclGetLastError says which argument.
 * Thread safety, blocking: as fcclAllReduce (the kernel waits for the peers, at most FCCL_TIMEOUT, and stops on
 * fcclCommAbort). Collective: yes, the same tokens, hidden, eps, types and scale mode on every rank, in the same
 * order as the communicator's other collectives. Graph capture: yes; replays are correct any number of times
 * (captured plain buffers are staged, not registered for the graph).
 */
FCCL_API fcclResult_t fcclAllReduceAddRMSNorm(const void* input, void* residual, const void* weight, void* output,
                                              size_t tokens, size_t hidden, float eps, fcclDataType_t datatype,
                                              fcclDataType_t outtype, fcclScaleMode_t scaleMode, float* scale,
                                              fcclComm_t comm, void* stream);

/* ---- NCCL's rooted collectives and pre-multiplied sums: fcclReduce, fcclBcast, fcclGather, fcclScatter,
 * fcclRedOpCreatePreMulSum, fcclRedOpDestroy ---- */

/**
 * Reduces count elements across all ranks into the root's recvbuf (NCCL's ncclReduce), by fcclAllReduce's rules: the
 * root gets bit for bit what fcclAllReduce gives on the same inputs. recvbuf is written on the root only (the other
 * ranks may pass NULL); in place when the root's sendbuf == recvbuf. sendbufs inside registered ranges (on every
 * rank or on none, at the same offset) are read in place by the root; otherwise they come through staging.
 * @param sendbuf   count elements of device memory of the communicator's device (NULL only with count 0).
 * @param recvbuf   the root's output, count elements (NULL on the other ranks is fine).
 * @param op        a built-in op or one of this communicator's fcclRedOpCreatePreMulSum ops (of datatype).
 * @param root      the rank that receives the result, 0..nranks-1, the same on every rank.
 * @return as fcclAllReduce, plus fcclInvalidArgument for a root out of range or a pre-multiplied op of another
 *         datatype or communicator. An argument only the root checks (its recvbuf) fails on the root alone: the
 *         other ranks' calls then wait for it until FCCL_TIMEOUT, as with NCCL.
 * Thread safety, blocking, graph capture: as fcclAllReduce. Collective: yes, the same count, type, op and root on
 * every rank.
 */
FCCL_API fcclResult_t fcclReduce(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                                 fcclRedOp_t op, int root, fcclComm_t comm, void* stream);

/**
 * Broadcast in place (NCCL's ncclBcast): count elements of the root's buff land in every rank's buff. The same as
 * fcclBroadcast(buff, buff, count, datatype, root, comm, stream), under its own name in messages.
 * @param buff  count elements of device memory of the communicator's device on every rank (NULL only with count 0).
 * @return, thread safety, blocking, collective, graph capture: as fcclBroadcast.
 */
FCCL_API fcclResult_t fcclBcast(void* buff, size_t count, fcclDataType_t datatype, int root, fcclComm_t comm,
                                void* stream);

/**
 * Gathers count elements from every rank into the root's recvbuf (NCCL's ncclGather): rank r's elements land at
 * recvbuf + r * count (in elements) on the root; recvbuf is written on the root only (the other ranks may pass
 * NULL). In place when the root's sendbuf == recvbuf + root * count. Registration as for fcclReduce (the sendbufs').
 * @param sendbuf  count elements of device memory of the communicator's device (NULL only with count 0).
 * @param recvbuf  the root's output, nranks * count elements (NULL on the other ranks is fine).
 * @param root     0..nranks-1, the same on every rank.
 * @return as fcclAllGather, plus fcclInvalidArgument for a root out of range; a root's own argument errors as
 *         fcclReduce's.
 * Thread safety, blocking, graph capture: as fcclAllReduce. Collective: yes, the same count, type and root on every
 * rank.
 */
FCCL_API fcclResult_t fcclGather(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, int root,
                                 fcclComm_t comm, void* stream);

/**
 * Scatters the root's sendbuf (NCCL's ncclScatter): block r (count elements at sendbuf + r * count) lands in rank r's
 * recvbuf. sendbuf is read on the root only (the other ranks may pass NULL); in place when the root's recvbuf ==
 * sendbuf + root * count. recvbufs inside registered ranges (on every rank or on none, at the same offset) are
 * written in place by the root; otherwise the blocks come through staging.
 * @param sendbuf  the root's input, nranks * count elements (NULL on the other ranks is fine).
 * @param recvbuf  count elements of device memory of the communicator's device (NULL only with count 0).
 * @param root     0..nranks-1, the same on every rank.
 * @return as fcclBroadcast (an argument only the root checks, its sendbuf, fails on the root alone).
 * Thread safety, blocking, graph capture: as fcclAllReduce. Collective: yes, the same count, type and root on every
 * rank.
 */
FCCL_API fcclResult_t fcclScatter(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype, int root,
                                  fcclComm_t comm, void* stream);

/** Where the scalar of a pre-multiplied sum lives; values match NCCL's ncclScalarResidence_t. */
typedef enum {
  fcclScalarDevice = 0,       /**< device memory of the communicator's device, read by every call's kernel when it
                                   runs (a graph replay reads the value of that moment) */
  fcclScalarHostImmediate = 1 /**< host memory, read once by fcclRedOpCreatePreMulSum */
} fcclScalarResidence_t;

/**
 * Makes a reduction op of comm that multiplies every rank's input by *scalar, then sums (NCCL's
 * ncclRedOpCreatePreMulSum; PyTorch's ReduceOp.PREMUL_SUM). For calls of comm with datatype only: fcclAllReduce,
 * fcclReduceScatter and fcclReduce take it (fcclAllReduceAddRMSNorm takes no op: it always sums). On fccl's kernels
 * each rank's element x, its own included, becomes x * scalar in the accumulator's type before the sum: exactly in
 * fp32 for float16 and bfloat16 (the product of two such values is exact there), rounded to nearest for float32 and
 * float64, wrapping for integers; the product is never fused with the addition, and the sum is fcclSum's (rank
 * order, identical bits on every rank). NCCL, which carries the call on the NCCL and hierarchical paths, rounds the
 * product to datatype first. docs/collectives.md#pre-multiplied-sums.
 * @param[out] op     receives the op: a value from fcclNumOps up, valid on comm only until fcclRedOpDestroy.
 * @param scalar      one element of datatype: host memory read now (fcclScalarHostImmediate), or device memory of
 *                    the communicator's device, aligned to its element, read by every call that uses the op
 *                    (fcclScalarDevice); it must then stay valid as long as calls with the op may run.
 * @param datatype    any type the collectives take (not fcclFloat8e4m3).
 * @param residence   fcclScalarHostImmediate or fcclScalarDevice.
 * @param comm        communicator.
 * @return fcclSuccess; fcclInvalidArgument (invalid comm, NULL op or scalar, unknown or unsupported datatype or
 *         residence, a device scalar that is not device memory of the communicator's device or not aligned);
 *         fcclInvalidUsage (init not finished); fcclSystemError (out of host memory); NCCL's error as fccl's code
 *         when the communicator's NCCL communicator could not make the op.
 * Thread safety: not concurrently with calls of comm that use the op being made. Blocks: no. Collective: no (each
 * rank makes its own; the values may differ between ranks). Graph capture: yes (no work on any stream).
 */
FCCL_API fcclResult_t fcclRedOpCreatePreMulSum(fcclRedOp_t* op, void* scalar, fcclDataType_t datatype,
                                               fcclScalarResidence_t residence, fcclComm_t comm);

/**
 * Destroys an op of fcclRedOpCreatePreMulSum (NCCL's ncclRedOpDestroy). It may be destroyed as soon as the last call
 * that takes it returned: work already enqueued (and captured graphs) keep what they need. A communicator's ops go
 * with it when it is destroyed.
 * @return fcclSuccess; fcclInvalidArgument (invalid comm; op a built-in op or not a live op of comm); NCCL's error as
 *         fccl's code when its NCCL op could not be destroyed (the op is gone from fccl all the same).
 * Thread safety: not concurrently with calls of comm that use op. Blocks: no. Collective: no. Graph capture: yes.
 */
FCCL_API fcclResult_t fcclRedOpDestroy(fcclRedOp_t op, fcclComm_t comm);

/* end of collectives */

/* ---------------------------------------------------------------------------------------------------------------
 * Mixture of experts: dispatch and combine of expert parallelism on one node (docs/moe.md)
 * ------------------------------------------------------------------------------------------------------------- */

/** A layout: the peer memory and device state of one MoE configuration on a communicator, sized by its worst
 *  case at creation, and the routing of its last dispatch, which the next combine sends back. */
typedef struct fcclMoeLayout* fcclMoeLayout_t;

/** How a dispatch lays out each rank's received rows: expert-major either way, local expert e's rows one after
 *  another (the first expertCounts[e] rows of its block hold data, the rows after them are not written). */
typedef enum {
  fcclMoePacked = 0, /**< local expert e's block starts where expert e - 1's ends, rounded up to a multiple of
                          expertAlignment rows (expertOffsets gives each start): the contiguous layout of grouped
                          GEMMs. */
  fcclMoePadded = 1  /**< local expert e's block starts at row e x nranks x maxTokensPerRank: a tensor
                          [localExperts][nranks x maxTokensPerRank][hidden] with a row count per expert (DeepEP's
                          low-latency and pplx-kernels' shape, for masked GEMMs). */
} fcclMoeRecvLayout_t;

#define FCCL_MOE_CONFIG_MAGIC 0xfcc1e0e1u
/** A layout's configuration; the same on every rank. Start from FCCL_MOE_CONFIG_INITIALIZER. */
typedef struct {
  size_t size;                    /**< sizeof(fcclMoeConfig_t) as compiled by the caller. */
  unsigned int magic;             /**< FCCL_MOE_CONFIG_MAGIC. */
  unsigned int version;           /**< FCCL_VERSION_CODE as compiled by the caller. */
  int numExperts;                 /**< experts, a multiple of the rank count, at most 1024: rank r holds experts
                                       [r x L, (r + 1) x L), L = numExperts / nranks. */
  int topk;                       /**< experts per token, 1..8 (and at most numExperts). */
  size_t hidden;                  /**< elements of a token's row, a multiple of 8 (of 128 for FP8 dispatch), at most
                                       65536. */
  size_t maxTokensPerRank;        /**< the most tokens any rank passes to one dispatch, 1..1048576: the worst case
                                       every buffer is sized for. */
  fcclMoeRecvLayout_t recvLayout; /**< fcclMoePacked (default) or fcclMoePadded. */
  int expertAlignment;            /**< fcclMoePacked: each expert's first row is a multiple of this, 1..1024 (default
                                       1); ignored for fcclMoePadded. */
  int blocks;                     /**< the SM budget of calls that pass blocks 0: thread blocks each kernel may use
                                       (1 per SM at most); 0 (default): min(32, the GPU's SMs). Every call's grid
                                       stays within the communicator's minCTAs and maxCTAs. */
} fcclMoeConfig_t;

#define FCCL_MOE_CONFIG_INITIALIZER \
  { sizeof(fcclMoeConfig_t), FCCL_MOE_CONFIG_MAGIC, FCCL_VERSION_CODE, 0, 0, 0, 0, fcclMoePacked, 1, 0 }

/** Where a dispatch writes what a rank receives: device memory of the communicator's device. */
typedef struct {
  void* x;                /**< recvRows x hidden elements of the dispatch's datatype, 16-byte aligned. */
  float* scales;          /**< FP8 dispatch: recvRows x hidden / 128 scales (row-major); otherwise NULL. */
  float* weights;         /**< recvRows: the router weight of each row's (token, expert) pair (topkWeights' entry);
                               NULL: not written. */
  int32_t* sourceTokens;  /**< recvRows: the row's token as source rank x maxTokensPerRank + its index there; NULL:
                               not written. */
  int32_t* expertCounts;  /**< localExperts: the rows each local expert received (required). */
  int32_t* expertOffsets; /**< localExperts + 1: each local expert's first row, then the row after the last block;
                               NULL: not written. */
} fcclMoeRecv_t;

/**
 * Creates a layout for config on comm: allocates its peer memory (a workspace of about nranks x maxTokensPerRank x
 * (2 x hidden + 112) bytes, or maxTokensPerRank x topk x 2 x hidden if more, fcclMemAlloc'd and registered with
 * every rank as fcclCommRegister does; docs/moe.md#memory) and its device state (about 1 MiB, plus 4 x (2 x topk +
 * 8) bytes per token of maxTokensPerRank and 4 per received row). Every rank must pass the same configuration.
 * @param comm         communicator on fccl's kernels (fcclPathFccl).
 * @param config       the configuration (FCCL_MOE_CONFIG_INITIALIZER, then numExperts, topk, hidden,
 *                     maxTokensPerRank and any other field).
 * @param[out] layout  receives the layout.
 * @return fcclSuccess; fcclInvalidArgument (invalid comm, NULL config or layout, a config field out of range, or
 *         ranks that passed different configurations: every rank returns it); fcclInvalidUsage (the communicator's
 *         init did not finish, or it is on the NCCL or hierarchical path); fcclRemoteError (another rank failed);
 *         fcclUnhandledCudaError (out of device memory); fcclTimeout; the communicator's recorded error.
 * Thread safety: not concurrently with other calls on the same comm. Blocks: yes (bounded by the communicator's
 * timeout). Collective: yes. Graph capture: no.
 */
FCCL_API fcclResult_t fcclMoeLayoutCreate(fcclComm_t comm, const fcclMoeConfig_t* config, fcclMoeLayout_t* layout);

/**
 * Destroys a layout: waits for the device (its calls must have been enqueued by now and graphs that captured them
 * destroyed), releases its peer memory with every rank and frees it. Destroy every layout before its communicator:
 * a communicator destroyed or aborted first frees its layouts' memory with its own, after which fcclMoeDispatch and
 * fcclMoeCombine on them return fcclInvalidUsage and fcclMoeLayoutDestroy only frees the handle (on this rank alone).
 * @return fcclSuccess; fcclInvalidArgument (not a live layout); fcclTimeout or fcclRemoteError (a peer did not
 *         take part; the memory is freed all the same); fcclUnhandledCudaError.
 * Thread safety: not concurrently with other calls on the same comm. Blocks: yes (bounded). Collective: yes.
 * Graph capture: no.
 */
FCCL_API fcclResult_t fcclMoeLayoutDestroy(fcclMoeLayout_t layout);

/**
 * The rows a dispatch on layout may write on this rank: the first dimension of fcclMoeRecv_t's x, scales, weights
 * and sourceTokens, and of the combine's y. fcclMoePacked: nranks x maxTokensPerRank x min(topk, localExperts) +
 * localExperts x (expertAlignment - 1); fcclMoePadded: localExperts x nranks x maxTokensPerRank.
 * @return fcclSuccess; fcclInvalidArgument (not a live layout, NULL rows).
 * Thread safety: any thread. Blocks: no. Collective: no. Graph capture: yes.
 */
FCCL_API fcclResult_t fcclMoeLayoutRecvRows(fcclMoeLayout_t layout, size_t* rows);

/**
 * Sends every token to the ranks that hold its experts and groups what each rank receives by local expert. Token t
 * of this rank (row t of x) goes once to each rank holding one of its experts topkIdx[t][0..topk), however many of
 * them that rank holds, and lands there once per such expert, in that expert's block of recv->x
 * (fcclMoeRecvLayout_t): within an expert, rows from rank 0 first, then rank 1, ..., each rank's in token order, so
 * the layout depends on the routing only, never on timing. Each row also gets its weight (recv->weights) and
 * source (recv->sourceTokens); recv->expertCounts and expertOffsets say where the rows are, in device memory: no
 * host synchronisation. The layout remembers the routing for the next fcclMoeCombine.
 * Every rank calls it, also with tokens 0. An entry -1 means no expert; an entry outside [-1, numExperts) or an
 * expert repeated in a token's row is invalid routing: the call still completes on every rank without that entry,
 * and the communicator then fails with fcclInvalidArgument on every rank, naming the rank, token and entry
 * (fcclCommGetAsyncError; as a kernel timeout does).
 * @param x            tokens x hidden elements of datatype, 16-byte aligned (NULL only with tokens 0).
 * @param xScales      FP8: tokens x hidden / 128 fp32 scales (row-major), carried with each row; otherwise NULL.
 * @param topkIdx      tokens x topk expert indices of idxType (NULL only with tokens 0).
 * @param idxType      fcclInt32 or fcclInt64.
 * @param topkWeights  tokens x topk fp32 router weights, carried to recv->weights; NULL when recv->weights is.
 * @param tokens       this rank's tokens, 0..maxTokensPerRank.
 * @param datatype     fcclBfloat16, fcclFloat16 or fcclFloat8e4m3 (hidden a multiple of 128).
 * @param recv         the outputs (fcclMoeRecv_t); no output may overlap another buffer of the call.
 * @param blocks       thread blocks the kernel may use (the SM budget, at most the GPU's SMs); 0: the layout's.
 * @param layout       the layout.
 * @param stream       cudaStream_t of the communicator's device (NULL: the default stream).
 * @return fcclSuccess; fcclInvalidArgument (not a live layout; tokens above maxTokensPerRank; a datatype or idxType
 *         outside the above; FP8 with hidden not a multiple of 128, or without scales; scales without FP8; NULL
 *         buffers where needed; misaligned or overlapping buffers; blocks out of range; a buffer or stream of
 *         another device or a host buffer); fcclInvalidUsage (the communicator's init did not finish, or it was
 *         destroyed or aborted);
 *         fcclUnhandledCudaError (the launch failed); an error an earlier kernel recorded, in which case nothing
 *         is launched.
 * Thread safety, blocking: as fcclAllReduce (the kernel waits for the peers, at most FCCL_TIMEOUT, and stops on
 * fcclCommAbort). Collective: yes, every rank with the same layout and datatype, in the same order as the
 * communicator's other calls; tokens and routing are each rank's own. Graph capture: yes, and a replay reads the
 * routing and data the buffers then hold.
 */
FCCL_API fcclResult_t fcclMoeDispatch(const void* x, const float* xScales, const void* topkIdx, fcclDataType_t idxType,
                                      const float* topkWeights, size_t tokens, fcclDataType_t datatype,
                                      const fcclMoeRecv_t* recv, int blocks, fcclMoeLayout_t layout, void* stream);

/**
 * Returns the experts' outputs to their tokens and sums them: y holds, in the rows of the layout's last dispatch,
 * each local expert's output for each row it received; every row goes back to its token's rank, which computes for
 * each of its tokens t
 *   out[t] = round(acc), acc = fma(w_e, y_e[t], acc) in fp32 from +0 over t's experts e in ascending index,
 *   w_e = topkWeights[t][entry of e] (1 when topkWeights is NULL),
 * rounded once to datatype: bitwise the same on every run and on any number of ranks, whichever rank or block
 * finished first. A token with no expert gets zeros.
 * @param y            recvRows x hidden elements of datatype (fcclMoeLayoutRecvRows), 16-byte aligned; only the
 *                     rows the dispatch wrote are read.
 * @param out          tokens x hidden elements of datatype, 16-byte aligned (NULL only with tokens 0).
 * @param topkWeights  tokens x topk fp32 weights (entries of invalid or -1 routing are not read); NULL: 1.
 * @param tokens       this rank's tokens of the last dispatch on layout.
 * @param datatype     fcclBfloat16 or fcclFloat16.
 * @param blocks       as fcclMoeDispatch.
 * @return fcclSuccess; fcclInvalidArgument (not a live layout, a datatype outside the above, NULL, misaligned or
 *         overlapping buffers, blocks out of range, a buffer or stream of another device); fcclInvalidUsage (no
 *         dispatch on layout yet, tokens other than the last dispatch's, the communicator's init did not finish,
 *         or it was destroyed or aborted);
 *         fcclUnhandledCudaError; an error an earlier kernel recorded.
 * Thread safety, blocking, graph capture: as fcclMoeDispatch. Collective: yes, every rank with the same layout
 * and datatype.
 */
FCCL_API fcclResult_t fcclMoeCombine(const void* y, void* out, const float* topkWeights, size_t tokens,
                                     fcclDataType_t datatype, int blocks, fcclMoeLayout_t layout, void* stream);

/* end of mixture of experts */

/* ---------------------------------------------------------------------------------------------------------------
 * Peer memory: user buffer registration and statistics
 * ------------------------------------------------------------------------------------------------------------- */

/** Opaque registration handle. */
typedef struct fcclRegistration* fcclRegHandle_t;

/**
 * Registers [buf, buf + size) of device memory on the communicator's device so that collectives on buffers inside
 * it read the peers' copies in place. Works for cudaMalloc memory (shared with legacy CUDA IPC: the handle of the
 * allocation's base plus an offset) and for cuMem memory created with POSIX file-descriptor export (fcclMemAlloc,
 * PyTorch expandable segments; a buffer may span several such allocations mapped back to back). Registering the
 * same or an overlapping range of the same allocation again takes another reference on the same peer mappings
 * instead of mapping it again; each handle must be deregistered once.
 * In-place use needs every rank to pass the same offset from its own registered buffer (as NCCL's symmetric
 * registration does). cuMem memory registered by a rank of this process on another GPU is given that GPU's access
 * (cuMemSetAccess), which stays after deregistration.
 * @param comm    the communicator.
 * @param buf     device memory of comm's device.
 * @param size    bytes, > 0.
 * @param[out] handle  receives the registration.
 * @return fcclSuccess; fcclInvalidArgument (invalid comm, NULL handle/buf, size 0, a range past the end of the
 *         address space, not device memory of comm's device, memory that cannot be shared); fcclRemoteError
 *         (another rank's registration failed, for any reason including a bad argument: every rank returns an
 *         error, nothing stays registered, and unless a peer died no peer maps the buffer once the call returns);
 *         fcclInvalidUsage (a non-blocking init still running); the communicator's recorded error when its init
 *         or a kernel failed; fcclTimeout; fcclSystemError; fcclUnhandledCudaError.
 * Thread safety: not concurrently with other calls on the same comm. Blocks: yes (bounded by the comm's timeout).
 * Collective: yes, every rank registers its own buffer, in the same order. Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommRegister(fcclComm_t comm, void* buf, size_t size, fcclRegHandle_t* handle);

/**
 * Releases a registration: once it returns, no peer maps this rank's buffer any more and it may be freed.
 * The communicator's collectives using the buffer must have completed. Registrations still alive at
 * fcclCommDestroy are released there.
 * @return fcclSuccess; fcclInvalidArgument for an unknown or already released handle (the other ranks then return
 *         fcclRemoteError and no registration is released); fcclInvalidUsage (a non-blocking init still running);
 *         the communicator's recorded error when its init or a kernel failed; fcclTimeout or fcclRemoteError (a
 *         peer died); fcclUnhandledCudaError.
 * Thread safety: not concurrently with other calls on the same comm. Blocks: yes (bounded). Collective: yes, in
 * the order of registration or any order agreed by all ranks. Graph capture: no.
 */
FCCL_API fcclResult_t fcclCommDeregister(fcclComm_t comm, fcclRegHandle_t handle);

/**
 * Allocates size bytes of device memory on the current device, rounded up to the allocation granularity, that can
 * be registered and shared across processes: cuMem with POSIX file-descriptor export,
 * accessible from every GPU of this process that can reach it (cudaMalloc where the GPU cannot export cuMem
 * memory, or with FCCL_CUMEM_ENABLE=0). Not zeroed. Free it with fcclMemFree.
 * @return fcclSuccess; fcclInvalidArgument (NULL ptr, size 0, a size that cannot be rounded up);
 *         fcclUnhandledCudaError (out of memory, no device); fcclSystemError (out of host memory).
 * Thread safety: any thread. Blocks: no. Collective: no. Graph capture: no.
 */
FCCL_API fcclResult_t fcclMemAlloc(void** ptr, size_t size);

/**
 * Frees memory from fcclMemAlloc; NULL is accepted and does nothing. Deregister it first.
 * @return fcclSuccess; fcclInvalidArgument for a pointer fcclMemAlloc did not return (or freed already);
 *         fcclUnhandledCudaError when the driver fails to free it (it is forgotten all the same).
 * Thread safety: any thread. Blocks: no. Collective: no. Graph capture: no.
 */
FCCL_API fcclResult_t fcclMemFree(void* ptr);

/** What the process's peer-mapping registry holds (all communicators together) and what one comm holds. */
typedef struct {
  size_t size;                 /**< sizeof(fcclMemStats_t) as compiled by the caller. */
  uint64_t openMappings;       /**< peer allocations mapped in this process right now */
  uint64_t mappingReferences;  /**< sum of their reference counts */
  uint64_t bytesMapped;        /**< bytes of peer memory mapped */
  uint64_t totalOpens;         /**< mappings opened since the process started */
  uint64_t totalCloses;        /**< mappings closed since the process started */
  uint64_t commRegistrations;  /**< live user registrations of this communicator (0 when comm is NULL) */
  uint64_t commDeviceBytes;    /**< device memory of this communicator's own shared-buffer slot, its share of the
                                    device's arena (0 when comm is NULL) */
  uint64_t commGraphRegistrations; /**< buffers this communicator registered for captured CUDA graphs
                                        (FCCL_GRAPH_REGISTER), held until each graph is destroyed and the
                                        communicator's next collective call (0 when comm is NULL) */
  uint64_t arenaBytes;    /**< device memory of fccl's own shared buffers in this process, every device: one chunk
                               per communicator slot alive at once, kept until the device's last communicator goes */
  uint64_t arenaChunks;   /**< the chunks of arenaBytes */
  uint64_t commPeerBytes; /**< bytes of other processes' shared buffers this communicator's slot lives in, mapped
                               here (its share of bytesMapped; 0 when comm is NULL) */
} fcclMemStats_t;

/**
 * Fills stats with the numbers above; comm may be NULL for the process-wide numbers only. Set stats->size first
 * (fields beyond it are not written, so an older caller's smaller struct stays valid).
 * @return fcclSuccess; fcclInvalidArgument (NULL stats, stats->size too small, invalid comm).
 * Thread safety: any thread (the numbers are a consistent snapshot). Blocks: no. Collective: no.
 * Graph capture: yes.
 */
FCCL_API fcclResult_t fcclCommGetMemStats(fcclComm_t comm, fcclMemStats_t* stats);

/* ---------------------------------------------------------------------------------------------------------------
 * Paths: fccl's kernels or NCCL behind the same communicator; point-to-point, all-to-all and groups (NCCL)
 * ------------------------------------------------------------------------------------------------------------- */

/**
 * Which engine carries a communicator's collectives; chosen at init (docs/paths.md), the same on every rank.
 * On the NCCL path every call above keeps its arguments, checks and result codes, and NCCL does the work: results
 * are NCCL's (every rank the same bits; within the type's tolerance of the fccl path's), fcclCommRegister is
 * ncclCommRegister (local to the rank: no exchange, so a bad buffer fails on its own rank only), and a call that a
 * peer never joins waits until fcclCommAbort (NCCL's kernels do not read FCCL_TIMEOUT). On the hierarchical path
 * the all-reduce runs on fccl's kernels inside each host and on NCCL across hosts (results within the type's
 * tolerance of the fccl path's; refused inside a group), every other call as on the NCCL path, and fcclCommRegister
 * registers with the host's fccl communicator (every rank of the host calls it).
 */
typedef enum {
  fcclPathFccl = 0, /**< fccl's kernels: one host, 1 to 8 ranks, peer access verified, a GPU the build has code for. */
  fcclPathNccl = 1, /**< NCCL, through a communicator fccl creates and owns: every other layout, or FCCL_PATH=nccl. */
  fcclPathHier = 2, /**< hierarchical: several hosts with the same number (2 to 8) of peer-accessible GPUs each; the
                     * all-reduce is fccl's reduce-scatter inside each host, NCCL's all-reduce across hosts and
                     * fccl's all-gather inside each host; every other call is NCCL's. */
  fcclNumPaths = 3
} fcclPath_t;

/**
 * The communicator's path and why it was chosen.
 * @param[out] path    receives the path.
 * @param[out] reason  may be NULL; receives a sentence saying why ("the 4 ranks are on 2 hosts"), valid until the
 *                     communicator is destroyed.
 * @return fcclSuccess; fcclInvalidArgument (invalid handle, NULL path); fcclInvalidUsage (init not finished) or
 *         the init's error.
 * Thread safety: any thread. Blocks: no. Collective: no. Graph capture: yes.
 */
FCCL_API fcclResult_t fcclCommGetPath(const fcclComm_t comm, fcclPath_t* path, const char** reason);

/** "fccl", "nccl", "hier", or "unknown" for a value outside fcclPath_t. Never NULL. Any thread. */
FCCL_API const char* fcclGetPathName(fcclPath_t path);

/**
 * Sends count elements of sendbuf to rank peer, which must post the matching fcclRecv (NCCL's ncclSend, on the
 * communicator's NCCL communicator on every path). Several sends and receives that must progress together (an
 * exchange, a pipeline stage's neighbours) go between fcclGroupStart and fcclGroupEnd.
 * The NCCL communicator exists on the NCCL path always; on the fccl path when FCCL_NCCL_COMM asks for it
 * (docs/paths.md), else these calls return fcclInvalidUsage saying why.
 * @param sendbuf  count elements of device memory of the communicator's device (NULL only with count 0).
 * @param count    elements (0 does nothing).
 * @param peer     0..nranks-1 (this rank itself is allowed, as in NCCL).
 * @param stream   cudaStream_t of the communicator's device (NULL: the default stream).
 * @return fcclSuccess; fcclInvalidArgument (invalid comm, NULL buffer with count > 0, unknown type, peer out of
 *         range, buffer or stream of another device); fcclInvalidUsage (init not finished, no NCCL communicator);
 *         NCCL's error as fccl's code (the values are NCCL's).
 * Thread safety: as fcclAllReduce. Blocks: no, except at the first call between two ranks, while NCCL connects
 * them (the peer must make its matching call). Collective: no, the peer's matching call. Graph capture: yes.
 */
FCCL_API fcclResult_t fcclSend(const void* sendbuf, size_t count, fcclDataType_t datatype, int peer,
                               fcclComm_t comm, void* stream);

/** Receives count elements from rank peer into recvbuf (NCCL's ncclRecv). Arguments, codes and notes as fcclSend. */
FCCL_API fcclResult_t fcclRecv(void* recvbuf, size_t count, fcclDataType_t datatype, int peer, fcclComm_t comm,
                               void* stream);

/**
 * All-to-all: rank r's block p (count elements at sendbuf + p * count) lands in rank p's recvbuf at block r
 * (NCCL's shape: a group of one send and one receive of count elements per peer). sendbuf and recvbuf each hold
 * nranks * count elements and must not overlap.
 * @return as fcclSend, plus fcclInvalidArgument for overlapping buffers or a count that overflows.
 * Thread safety, blocking, graph capture: as fcclSend. Collective: yes, the same count and type on every rank.
 */
FCCL_API fcclResult_t fcclAllToAll(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                                   fcclComm_t comm, void* stream);

/** fcclAllToAll spelled as NCCL spells it (ncclAlltoAll): the same call, arguments and codes. */
FCCL_API fcclResult_t fcclAlltoAll(const void* sendbuf, void* recvbuf, size_t count, fcclDataType_t datatype,
                                   fcclComm_t comm, void* stream);

/**
 * Starts a group on the calling thread: NCCL calls of fccl (fcclSend, fcclRecv, fcclAllToAll, and every call of a
 * communicator on the NCCL path) are issued together at the matching fcclGroupEnd (ncclGroupStart/ncclGroupEnd).
 * Calls that run fccl's own kernels are not deferred: they are enqueued at once. On the hierarchical path
 * fcclAllReduce returns fcclInvalidUsage inside a group (its NCCL step would be deferred past its last fccl step);
 * its other calls are grouped as on the NCCL path. Groups nest.
 * @return fcclSuccess; fcclInvalidUsage when NCCL cannot be loaded (the message says what to install).
 * Thread safety: per thread (a group belongs to the thread that started it). Blocks: no. Collective: no.
 * Graph capture: yes.
 */
FCCL_API fcclResult_t fcclGroupStart(void);

/**
 * Ends a group; the outermost end issues the grouped calls (ncclGroupEnd, which connects ranks meeting for the
 * first time, as fcclSend).
 * @return fcclSuccess; fcclInvalidUsage (no group started, or NCCL cannot be loaded); NCCL's error as fccl's code.
 * Thread safety: per thread. Blocks: as described. Collective: no. Graph capture: yes.
 */
FCCL_API fcclResult_t fcclGroupEnd(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FCCL_H_ */
