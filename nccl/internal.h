/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libfccl-nccl: NCCL's C API over the real NCCL, with the all-reduce, all-gather, reduce-scatter, broadcast, reduce,
 * gather and scatter of communicators fccl's kernels can carry run by fccl (docs/nccl-api.md). Everything here sits above fccl's public
 * API: the collectives reach fccl through the engine (engine.h), never through fccl's internals.
 *
 * The pieces: the real NCCL and its function table (real.c), the communicators' table (table.c), per-thread groups
 * (group.c), the collectives and their routes (coll.c), the communicators' life (comm.c), attaching fccl to ready
 * communicators (attach.c), registration (reg.c), pre-multiplied sums and their fccl twins (redop.c), settings and
 * logging (settings.c), the calls passed through unchanged (forward.c).
 */
#ifndef FNCCL_INTERNAL_H_
#define FNCCL_INTERNAL_H_

#include <nccl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

#define FNCCL_API __attribute__((visibility("default")))

/* ncclX's profiling twin pncclX is the same function, as in NCCL (a tool that defines ncclX calls pncclX). */
#define FNCCL_TWIN(name) extern __typeof__(name) p##name __attribute__((alias(#name), visibility("default")))

/* ---- the real NCCL (real.c) ---------------------------------------------------------------------------------- */

/* Every function of nccl.h: X(return type, name without "nccl", parameters, arguments). */
#define FNCCL_REAL_FUNCTIONS(X)                                                                                  \
  X(ncclResult_t, MemAlloc, (void** ptr, size_t size), (ptr, size))                                              \
  X(ncclResult_t, MemFree, (void* ptr), (ptr))                                                                   \
  X(ncclResult_t, GetVersion, (int* version), (version))                                                         \
  X(ncclResult_t, GetUniqueId, (ncclUniqueId * uniqueId), (uniqueId))                                            \
  X(ncclResult_t, CommInitRankConfig,                                                                            \
    (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config),                        \
    (comm, nranks, commId, rank, config))                                                                        \
  X(ncclResult_t, CommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank),                  \
    (comm, nranks, commId, rank))                                                                                \
  X(ncclResult_t, CommInitAll, (ncclComm_t * comm, int ndev, const int* devlist), (comm, ndev, devlist))         \
  X(ncclResult_t, CommFinalize, (ncclComm_t comm), (comm))                                                       \
  X(ncclResult_t, CommDestroy, (ncclComm_t comm), (comm))                                                        \
  X(ncclResult_t, CommAbort, (ncclComm_t comm), (comm))                                                          \
  X(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags), (comm, revokeFlags))                           \
  X(ncclResult_t, CommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),   \
    (comm, color, key, newcomm, config))                                                                         \
  X(ncclResult_t, CommShrink,                                                                                    \
    (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,   \
     int shrinkFlags),                                                                                           \
    (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags))                                   \
  X(ncclResult_t, CommInitRankScalable,                                                                          \
    (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config),        \
    (newcomm, nranks, myrank, nId, commIds, config))                                                             \
  X(const char*, GetErrorString, (ncclResult_t result), (result))                                                \
  X(const char*, GetLastError, (ncclComm_t comm), (comm))                                                        \
  X(void, ResetDebugInit, (void), ())                                                                            \
  X(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t * asyncError), (comm, asyncError))           \
  X(ncclResult_t, CommCount, (const ncclComm_t comm, int* count), (comm, count))                                 \
  X(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int* device), (comm, device))                            \
  X(ncclResult_t, CommUserRank, (const ncclComm_t comm, int* rank), (comm, rank))                                \
  X(ncclResult_t, CommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle),                 \
    (comm, buff, size, handle))                                                                                  \
  X(ncclResult_t, CommDeregister, (const ncclComm_t comm, void* handle), (comm, handle))                         \
  X(ncclResult_t, CommWindowRegister, (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags), \
    (comm, buff, size, win, winFlags))                                                                           \
  X(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), (comm, win))                        \
  X(ncclResult_t, RedOpCreatePreMulSum,                                                                          \
    (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm),  \
    (op, scalar, datatype, residence, comm))                                                                     \
  X(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), (op, comm))                                   \
  X(ncclResult_t, Reduce,                                                                                        \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,      \
     ncclComm_t comm, cudaStream_t stream),                                                                      \
    (sendbuff, recvbuff, count, datatype, op, root, comm, stream))                                               \
  X(ncclResult_t, Bcast,                                                                                         \
    (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream),         \
    (buff, count, datatype, root, comm, stream))                                                                 \
  X(ncclResult_t, Broadcast,                                                                                     \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,     \
     cudaStream_t stream),                                                                                       \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                                   \
  X(ncclResult_t, AllReduce,                                                                                     \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,                \
     ncclComm_t comm, cudaStream_t stream),                                                                      \
    (sendbuff, recvbuff, count, datatype, op, comm, stream))                                                     \
  X(ncclResult_t, ReduceScatter,                                                                                 \
    (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,            \
     ncclComm_t comm, cudaStream_t stream),                                                                      \
    (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))                                                 \
  X(ncclResult_t, AllGather,                                                                                     \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,           \
     cudaStream_t stream),                                                                                       \
    (sendbuff, recvbuff, sendcount, datatype, comm, stream))                                                     \
  X(ncclResult_t, AlltoAll,                                                                                      \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,               \
     cudaStream_t stream),                                                                                       \
    (sendbuff, recvbuff, count, datatype, comm, stream))                                                         \
  X(ncclResult_t, Gather,                                                                                        \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,     \
     cudaStream_t stream),                                                                                       \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                                   \
  X(ncclResult_t, Scatter,                                                                                       \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,     \
     cudaStream_t stream),                                                                                       \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                                   \
  X(ncclResult_t, Send,                                                                                          \
    (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,                     \
     cudaStream_t stream),                                                                                       \
    (sendbuff, count, datatype, peer, comm, stream))                                                             \
  X(ncclResult_t, Recv,                                                                                          \
    (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),     \
    (recvbuff, count, datatype, peer, comm, stream))                                                             \
  X(ncclResult_t, GroupStart, (void), ())                                                                        \
  X(ncclResult_t, GroupEnd, (void), ())                                                                          \
  X(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t * simInfo), (simInfo))

/* The real NCCL's functions (its pncclX, else ncclX): NULL where the loaded NCCL lacks one. */
struct fncclRealTable {
#define FNCCL_REAL_FIELD(ret, name, params, args) ret(*name) params;
  FNCCL_REAL_FUNCTIONS(FNCCL_REAL_FIELD)
#undef FNCCL_REAL_FIELD
};
extern struct fncclRealTable fncclReal;

/*
 * Loads the real NCCL once (FCCL_NCCL_LIBRARY, else the libnccl.so.2 already in the process, else the loader's
 * search). ncclSuccess when it is usable; otherwise an error whose words fncclRealError gives (and the calling
 * thread's last error holds).
 */
ncclResult_t fncclRealLoad(void);
const char* fncclRealError(void);
/* The real NCCL's version code (0 before a successful load) and the path it was loaded from. */
int fncclRealVersion(void);
const char* fncclRealPath(void);
/* 1 when fccl's own NCCL loader finds the library fncclReal points into (fccl may then run beside it); else 0 and
 * *why says what it would find instead. Valid after a successful load. */
int fncclRealSharedWithFccl(const char** why);

/* Whether code at address lies in the real NCCL: NCCL calls some of its own exported names through its PLT, and
 * under LD_PRELOAD those calls land here; they are passed through untouched. */
int fncclAddressInReal(const void* address);

/* Per-thread state: the group (group.c), the last error's words, calls made into the real NCCL in progress. */
struct fncclGroupOp;
struct fncclDeferred;
struct fncclThread {
  int inReal;                  /* > 0 while this thread is inside a call into the real NCCL */
  int groupDepth;              /* ncclGroupStart nesting */
  int groupToNccl;             /* the group holds a call NCCL carries: every call of it goes to NCCL */
  ncclResult_t groupError;     /* the first error of a call inside the group */
  struct fncclGroupOp* ops;    /* collectives recorded for fccl, launched at the outermost ncclGroupEnd */
  int opCount, opCapacity;
  struct fncclDeferred* deferred; /* work on ready communicators after the group ends (attach, registrations) */
  int deferredCount, deferredCapacity;
  int lastErrorOurs;           /* ncclGetLastError reports lastError, not the real NCCL's */
  char lastError[1024];
};
struct fncclThread* fncclSelf(void);

/* A call made from inside the real NCCL (its PLT) or from a call this library made into it: pass it through. */
#define FNCCL_PASSTHROUGH() (fncclSelf()->inReal > 0 || fncclAddressInReal(__builtin_return_address(0)))

/* Calls the real NCCL's function name with args, marking the thread as inside it. */
#define FNCCL_REAL(result, name, args)                  \
  do {                                                  \
    struct fncclThread* self_ = fncclSelf();            \
    self_->inReal++;                                    \
    (result) = fncclReal.name args;                     \
    self_->inReal--;                                    \
    if ((result) != ncclSuccess && (result) != ncclInProgress) self_->lastErrorOurs = 0; \
  } while (0)

/* The result of a call NCCL cannot serve: ncclInvalidUsage with fncclRealError's words when NCCL is missing, or
 * when the loaded NCCL lacks name. */
ncclResult_t fncclRealMissing(const char* name);

/* Ensures the real NCCL and its function name; returns from the caller with the error when either is missing. */
#define FNCCL_NEED_REAL(name)                                             \
  do {                                                                    \
    if (fncclRealLoad() != ncclSuccess) return fncclRealMissing(NULL);     \
    if (fncclReal.name == NULL) return fncclRealMissing("nccl" #name);     \
  } while (0)

/* Records the words of an error this library returns (ncclGetLastError shows them); returns result. */
ncclResult_t fncclSetError(ncclResult_t result, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- settings and logging (settings.c) ----------------------------------------------------------------------- */

/* Collectives fccl may carry, as bits of 1 << enum fncclColl. */
#define FNCCL_ALL_COLLS ((1u << FNCCL_NUM_COLLS) - 1u)

struct fncclSettings {
  uint32_t disabled;     /* FCCL_NCCL_API_DISABLE: the collectives left to NCCL (FNCCL_ALL_COLLS: fccl off) */
  char disabledWhy[160]; /* the variable's text, or what was wrong with it */
  int timeoutMs;         /* FCCL_BOOTSTRAP_TIMEOUT, as fccl reads it: the bound of the attach exchange */
};
const struct fncclSettings* fncclSettingsGet(void);
const char* fncclCollName(enum fncclColl coll);

/* What this library reads of a caller's ncclConfig_t, always through config->size. */
struct fncclConfigView {
  int blocking;    /* 1, 0, or -1 (not set: NCCL_COMM_BLOCKING, else blocking) */
  int maxCTAs;     /* NCCL_CONFIG_UNDEF_INT when not set */
  int minCTAs;
  int ctaPolicy;
  char name[64];   /* commName, "" when not set */
};
/* Reads config (may be NULL); fields past config->size read as not set. */
void fncclConfigRead(const ncclConfig_t* config, struct fncclConfigView* view);
/* Whether a communicator of this configuration blocks in its calls (NCCL's rule: config, NCCL_COMM_BLOCKING, 1). */
int fncclConfigBlocking(const struct fncclConfigView* view);
/* Why the caller's configuration keeps fccl's kernels away from this communicator ("" when nothing does). */
void fncclConfigWhyNot(const struct fncclConfigView* view, char* why, size_t size);
/* The SM budget NCCL keeps for a communicator of this configuration, which fccl's communicator keeps too: the
 * config's minCTAs and maxCTAs, each overridden by a positive NCCL_MIN_CTAS / NCCL_MAX_CTAS, as NCCL does;
 * NCCL_CONFIG_UNDEF_INT where there is no bound. */
void fncclConfigBudget(const struct fncclConfigView* view, int* minCTAs, int* maxCTAs);

typedef enum { FNCCL_LOG_WARN = 2, FNCCL_LOG_INFO = 3, FNCCL_LOG_TRACE = 4 } fncclLogLevel_t;
int fncclLogOn(fncclLogLevel_t level);
void fncclLog(fncclLogLevel_t level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
#define FNCCL_WARN(...) fncclLog(FNCCL_LOG_WARN, __VA_ARGS__)
#define FNCCL_INFO(...)                                 \
  do {                                                  \
    if (fncclLogOn(FNCCL_LOG_INFO)) fncclLog(FNCCL_LOG_INFO, __VA_ARGS__); \
  } while (0)

/* ---- communicators (table.c) ---------------------------------------------------------------------------------- */

typedef enum {
  FNCCL_COMM_WAITING = 0, /* a non-blocking communicator NCCL has not finished: fccl attaches once it has */
  FNCCL_COMM_ATTACHING,   /* the attach runs on a thread of its own */
  FNCCL_COMM_READY        /* attached (engine set) or left to NCCL (engine NULL, why says why) */
} fncclCommState_t;

struct fncclLocalGroup;
struct fncclWindow;
struct fncclPreMulSum;

/* What this library knows of one real NCCL communicator. */
struct fncclComm {
  ncclComm_t nccl;        /* the key: the real communicator, which every caller holds */
  struct fncclComm* next; /* the table's chain */
  int rank, nranks, cudaDev;
  int blocking;
  uint64_t clique;        /* equal on this process's ranks of one communicator (local groups) */
  uint64_t splits;        /* ncclCommSplit / ncclCommShrink made of it so far: children's cliques */
  struct fncclConfigView config;
  pthread_mutex_t lock;   /* state, the attach thread, engine release */
  int state;              /* fncclCommState_t, atomic */
  pthread_t attachThread;
  int attachThreadLive;
  int attachDone;         /* atomic: the attach thread finished */
  volatile int abortFlag; /* set by an abort while the attach thread runs */
  struct fncclEngineComm* engine; /* non-NULL: fccl carries the collectives of carried */
  uint32_t carried;       /* bits of enum fncclColl */
  char why[384];          /* which engine carries what, and why: the INFO line */
  struct fncclLocalGroup* localGroup; /* members attached together on one thread (fccl's teardown is collective) */
  struct fncclWindow* windows;        /* ncclCommWindowRegister's windows and fccl's registrations of them */
  uint64_t localRegistrations;        /* ncclCommRegister's live handles (recorded; fccl stages those buffers) */
  struct fncclPreMulSum* preMulSums;  /* ncclRedOpCreatePreMulSum's ops that have an engine twin (under lock) */
  int minCTAs, maxCTAs;               /* the SM budget given to the engine (NCCL_CONFIG_UNDEF_INT: none) */
  uint64_t fcclCalls[FNCCL_NUM_COLLS]; /* atomic */
  uint64_t ncclCalls[FNCCL_NUM_COLLS]; /* atomic: calls of these collectives NCCL carried */
};

/* The table is read-locked around every use of an entry by a call that others may make concurrently
 * (ncclCommGetAsyncError from a watchdog thread); removal takes it for writing. */
struct fncclComm* fncclTableFind(ncclComm_t nccl); /* read lock taken when found: fncclTableRelease */
void fncclTableRelease(void);
/* Adds an entry for a new real communicator (replacing a stale one of the same address). NULL: out of memory. */
struct fncclComm* fncclTableAdd(ncclComm_t nccl, const struct fncclConfigView* config, uint64_t clique);
/* Removes the entry of nccl and returns it (the caller frees it with fncclCommFree), or NULL. */
struct fncclComm* fncclTableRemove(ncclComm_t nccl);
void fncclCommFree(struct fncclComm* comm);
int fncclTableCount(void);

/* ---- attaching fccl (attach.c) --------------------------------------------------------------------------------- */

/* Attaches fccl to ready communicators created together on this thread, one thread each when there are several
 * (the attach is collective: one thread driving several ranks would otherwise wait for itself). Afterwards every
 * comm is FNCCL_COMM_READY. Comms of one clique form a local group. */
void fncclAttachNow(struct fncclComm** comms, int count);
/* Runs fn(comm, context) for each comm with its device current: here when there is one, else on a thread each,
 * side by side, and returns when all have (what fn does may be collective across comms this thread drives). */
void fncclEachComm(struct fncclComm** comms, int count, void (*fn)(struct fncclComm* comm, void* context),
                   void* context);
/* A non-blocking communicator that NCCL reports ready: starts its attach on a thread. Called with comm->lock. */
void fncclAttachStart(struct fncclComm* comm);
/* Releases fccl's state of comm: with abort (or after a member of its local group was aborted), at once and locally;
 * otherwise the collective teardown, together with the other members of its local group. comm->engine is NULL
 * after. */
void fncclDetach(struct fncclComm* comm, int abort);
/* An abort of comm's fccl state (and its local group's) on a thread of its own, started before NCCL's abort,
 * revoke or aborting shrink and finished after it (attach.c says why); NULL when there is nothing to abort. */
struct fncclRelease;
struct fncclRelease* fncclDetachBegin(struct fncclComm* comm);
void fncclDetachFinish(struct fncclRelease* release);
/* Drops comm from its local group (when its entry is freed); the last member frees the group. */
void fncclLocalGroupLeave(struct fncclComm* comm);
/* Waits for a running attach thread (after setting abortFlag when abort is set). */
void fncclAttachJoin(struct fncclComm* comm, int abort);

/* ---- groups (group.c) -------------------------------------------------------------------------------------------- */

struct fncclGroupOp {
  struct fncclOp op;
  struct fncclComm* comm;
};

/* Work for after the outermost ncclGroupEnd, on communicators NCCL made or changed inside the group. */
typedef enum {
  FNCCL_DEFER_CREATED,
  FNCCL_DEFER_WINDOW_REGISTER,
  FNCCL_DEFER_WINDOW_DEREGISTER,
  FNCCL_DEFER_REDOP_DESTROY /* ncclRedOpDestroy of an op the group's recorded calls still use */
} fncclDeferKind_t;
struct fncclDeferred {
  fncclDeferKind_t kind;
  ncclComm_t* where;      /* FNCCL_DEFER_CREATED: where NCCL writes the new communicator */
  ncclComm_t comm;        /* the window's communicator */
  struct fncclConfigView config;
  uint64_t clique;
  void* buff;
  size_t size;
  ncclWindow_t* window;   /* register: where NCCL writes the window */
  ncclWindow_t windowValue; /* deregister */
  ncclRedOp_t op;           /* redop destroy (comm: its communicator) */
};

/* Whether this thread is inside ncclGroupStart/ncclGroupEnd. */
int fncclInGroup(void);
/* A call NCCL carries is about to be made inside the group: the calls recorded for fccl go to NCCL first, in
 * order, and the rest of the group follows them there. */
ncclResult_t fncclGroupToNccl(void);
/* Records a collective for fccl, launched at the outermost ncclGroupEnd. */
ncclResult_t fncclGroupRecord(struct fncclComm* comm, const struct fncclOp* op);
ncclResult_t fncclGroupDefer(const struct fncclDeferred* work);
/* Notes an error of a call inside the group: ncclGroupEnd returns the first. */
void fncclGroupNoteError(ncclResult_t result);
/* Whether this thread's group holds a recorded call of comm with op (launched at the outermost ncclGroupEnd). */
int fncclGroupUsesOp(const struct fncclComm* comm, ncclRedOp_t op);

/* ---- collectives (coll.c) --------------------------------------------------------------------------------------- */

/* Issues op through the real NCCL (counted as NCCL's). */
ncclResult_t fncclCollToNccl(struct fncclComm* comm, const struct fncclOp* op);
/* Launches op on fccl (counted as fccl's). */
ncclResult_t fncclCollToFccl(struct fncclComm* comm, const struct fncclOp* op);

/* ---- registration (reg.c) ---------------------------------------------------------------------------------------- */

/* fccl's collective registration of a window NCCL registered (blocking communicators of attached comms). */
void fncclWindowAttach(struct fncclComm* comm, void* buff, size_t size, ncclWindow_t window);
/* fccl's deregistration of window, if it has one. */
void fncclWindowDetach(struct fncclComm* comm, ncclWindow_t window);
/* Forgets every window record of comm (fccl's registrations were released with its state). */
void fncclWindowsForget(struct fncclComm* comm);

/* ---- pre-multiplied sums (redop.c) ---------------------------------------------------------------------------- */

/* 1 with *engineOp when op (of ncclRedOpCreatePreMulSum on comm) has an engine twin made for datatype; else 0. */
int fncclPreMulSumTwin(struct fncclComm* comm, ncclRedOp_t op, ncclDataType_t datatype, int* engineOp);
/* ncclRedOpDestroy of op now: its engine twin, then NCCL's op. */
ncclResult_t fncclRedOpDestroyNow(struct fncclComm* comm, ncclRedOp_t op);
/* Forgets comm's twins: the engine's communicator has gone, and its ops with it. */
void fncclPreMulSumsForget(struct fncclComm* comm);

/* ---- statistics (comm.c) ---------------------------------------------------------------------------------------- */
void fncclStatsNoteComm(int attached, int budgeted);
void fncclStatsNoteCall(const struct fncclOp* op, int byFccl);
void fncclStatsNotePreMulSum(void);

#endif /* FNCCL_INTERNAL_H_ */
