/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The libraries the benchmark measures, each behind one ops table: fccl always (engine_fccl.c), NCCL beside it
 * with --compare nccl when the build has it (engine_nccl.c). The runtime and the programs reach a library only
 * through its table, so that a collective's benchmark is written once for every engine, and a build without NCCL
 * differs only in having no NCCL table.
 *
 * Every entry takes the agent and the engine's index in it (BENCH_FCCL, BENCH_NCCL: also its place in the table's
 * columns) and acts on local rank gpu's communicator, stream and buffers; it returns 0, or -1 after benchFail has
 * said why. The calls are one table indexed by benchCall_t, so that a new program's call is one value there and one
 * function in each engine file, beside the program itself (collective.h; docs/benchmark.md#adding-a-program).
 */
#ifndef FCCL_BENCH_ENGINE_H_
#define FCCL_BENCH_ENGINE_H_

#include "bench.h"

typedef struct benchAgent benchAgent_t;

enum { BENCH_FCCL = 0, BENCH_NCCL = 1 };

/* -R: how a data program's buffers are made. Plain ones are cudaMalloc'ed by the runtime and shared by the engines;
 * the others come from each engine's allocator and are registered with its communicator. */
enum { BENCH_BUFFERS_PLAIN = 0, BENCH_BUFFERS_REGISTERED = 1, BENCH_BUFFERS_SYMMETRIC = 2 };

/* Room for any engine's unique id in the exchange (fcclUniqueId and ncclUniqueId are 128 bytes). */
#define BENCH_UNIQUE_ID_BYTES 256

/* One collective call on local rank gpu's stream, in NCCL's argument order: count is the call's count argument (the
 * collective says how many elements send and recv hold for it), op and root are ignored by a collective without
 * them. Enqueues only; the runtime waits. */
typedef int (*benchCollectiveFn_t)(benchAgent_t* agent, int engine, int gpu, const void* send, void* recv,
                                   size_t count, int type, int op, int root);

/* The calls the programs time, as NCCL names them; count is each one's own argument. */
typedef enum {
  BENCH_CALL_ALL_REDUCE,       /* count */
  BENCH_CALL_ALL_GATHER,       /* sendcount; op ignored */
  BENCH_CALL_REDUCE_SCATTER,   /* recvcount */
  BENCH_CALL_BROADCAST,        /* count; op ignored, send read on root only */
  BENCH_CALL_SEND_RECV,        /* count: a group of a send to rank + 1 and a receive from rank - 1 (nccl-tests' ring) */
  BENCH_CALL_ALL_TO_ALL,       /* count per peer */
  BENCH_CALL_REDUCE,           /* count; the result on root only */
  BENCH_CALL_GATHER,           /* sendcount; op ignored, recv written on root only */
  BENCH_CALL_SCATTER,          /* recvcount; op ignored, send read on root only */
  BENCH_CALL_ALL_GATHER_V,     /* count: rank q sends benchVariableCount(count, q, n) (bench.h); op ignored */
  BENCH_CALL_REDUCE_SCATTER_V, /* count: rank q receives benchVariableCount(count, q, n) */
  BENCH_NUM_CALLS
} benchCall_t;
/* "all_reduce", "send_recv", ...: messages. */
const char* benchCallName(benchCall_t call);

typedef struct {
  const char* name;       /* "fccl", "nccl": the table's columns, JSON keys, messages */
  size_t uniqueIdBytes;   /* what rank 0 hands every rank before creation (<= BENCH_UNIQUE_ID_BYTES) */
  int headersVersion;     /* the version this build compiled against */
  int symmetricWindows;   /* -R 2 makes symmetric windows; 0: its buffers are registered plainly instead */

  /* Once per process, before any rank starts; may be NULL. */
  void (*prepareProcess)(void);
  /* The version of the library actually loaded. */
  int (*libraryVersion)(void);

  /* ---- communicators ---- */
  /* Rank 0 makes the id every rank receives for create. */
  int (*uniqueId)(benchAgent_t* agent, int engine, void* id);
  /* Creates local rank gpu's communicator (collective over every rank: the runtime calls it for all local GPUs at
   * once, each on a thread with that device current). id NULL: from the launcher's variables (BENCH_LAUNCH_ENV,
   * asked only of the first engine, whose communicator then carries the exchange that hands out the others' ids).
   * agent->maxCtas above 0 (--max-ctas): made with that SM budget (the config's maxCTAs). */
  int (*create)(benchAgent_t* agent, int engine, int gpu, const void* id);
  /* A line about how the communicator works (fccl: its path and why), into text; 0 when written. May be NULL. */
  int (*describe)(benchAgent_t* agent, int engine, int gpu, char* text, size_t len);
  /* Device memory the library says the communicator holds; -1 when it cannot say. */
  double (*selfReportedBytes)(benchAgent_t* agent, int engine, int gpu);
  /* Collective; the communicator is gone afterwards, also on failure. */
  int (*destroy)(benchAgent_t* agent, int engine, int gpu);
  /* Local, never blocks on peers: after a failure or a timeout. The communicator is gone afterwards. */
  void (*abort)(benchAgent_t* agent, int engine, int gpu);
  /* 1 with the library's words in text when the communicator reports an asynchronous error, else 0. */
  int (*asyncError)(benchAgent_t* agent, int engine, int gpu, char* text, size_t len);

  /* ---- buffers of kind BENCH_BUFFERS_REGISTERED and SYMMETRIC ---- */
  int (*memAlloc)(benchAgent_t* agent, int engine, int gpu, size_t bytes, void** ptr);
  /* Quiet: -1 without a message (the runtime is cleaning up). */
  int (*memFree)(benchAgent_t* agent, int engine, int gpu, void* ptr);
  /* *handle stays NULL when the library registers nothing (then there is nothing to deregister). */
  int (*registerBuffer)(benchAgent_t* agent, int engine, int gpu, int kind, void* ptr, size_t bytes, void** handle);
  /* A no-op once the communicator is gone (the registration went with it). */
  int (*deregisterBuffer)(benchAgent_t* agent, int engine, int gpu, int kind, void* handle);

  /* ---- launches ---- */
  /* Bracket one launch on every local GPU when a thread drives several; NULL: the engine needs no bracket. */
  int (*groupStart)(benchAgent_t* agent, int engine);
  int (*groupEnd)(benchAgent_t* agent, int engine);
  /* barrier_perf's operation: the library's barrier, or its usual stand-in (scratch: one float on the GPU). */
  int (*barrier)(benchAgent_t* agent, int engine, int gpu, void* scratch);
  /* The calls, one entry each (NULL: this library, or this build of it, has none); a program names its own in
   * benchCollective_t.call. */
  benchCollectiveFn_t calls[BENCH_NUM_CALLS];
} benchEngineOps_t;

typedef struct {
  double timeMs;      /* communicator creation, the slowest rank */
  double deviceBytes; /* cudaMemGetInfo before/after, the largest rank */
  double selfBytes;   /* what the library itself reports (selfReportedBytes), the largest rank; -1 unknown */
} benchInitStats_t;

/* One engine in an agent. */
typedef struct {
  const benchEngineOps_t* ops;  /* NULL: the build does not have it */
  int version;                  /* ops->libraryVersion() */
  void* comms[BENCH_MAX_LOCAL]; /* fcclComm_t, ncclComm_t per local rank; NULL once destroyed or aborted */
  benchInitStats_t init;
} benchEngine_t;

extern const benchEngineOps_t benchFcclEngine;
/* NULL when this build has no NCCL. */
extern const benchEngineOps_t* const benchNcclEngine;

#endif /* FCCL_BENCH_ENGINE_H_ */
