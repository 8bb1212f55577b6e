/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The benchmark runtime shared by the collectives' programs (all_reduce_perf) and barrier_perf: launch (forked
 * ranks, torchrun/mpirun variables, MPI), communicators for fccl and NCCL with their creation time and memory,
 * buffers, CUDA-event timing in eager and graph mode, bounded waits, data upload and result checking. A program
 * supplies only its measurement (benchTest_t.run; a collective's is collective.c's driver); everything it prints
 * goes through the agent that owns rank 0.
 *
 * One file per job: main.c (flags, launch modes, processes and their agents), agent.c (an agent's life and its
 * communicators), agent_gpus.c (what every part of the run uses on the agent's GPUs: failures, per-GPU work, the
 * bounded wait, aborting an engine), engine.h with engine_fccl.c and engine_nccl.c (the libraries, one ops table
 * each), exchange.c (the channels between agents), buffers.c, timing.c, data.c (inputs, poisoning, checks),
 * output.c (the header, the progress line, the -J and --csv files) and collective.h/.c (a collective's description
 * and its driver).
 */
#ifndef FCCL_BENCH_RUNTIME_H_
#define FCCL_BENCH_RUNTIME_H_

#include "bench.h"
#include "engine.h"

#include <cuda_runtime.h>

typedef struct benchCollective benchCollective_t; /* collective.h */

typedef struct {
  const char* program;                 /* "all_reduce_perf" */
  int (*run)(benchAgent_t* agent);     /* 0: done, results right; 1: wrong results; -1: failed (agent->error says) */
  const benchCollective_t* collective; /* a collective's benchmark: send and receive buffers per rank and engine,
                                        * as large as the collective's counts make them at maxBytes; NULL: none */
  unsigned takes;                      /* the flags it honours (BENCH_TAKES_*): its --help and its parser */
} benchTest_t;

/* Parses the flags, launches the ranks and runs test on each; returns the process exit status
 * (0 success, 1 wrong results or a failure, 2 usage error or nothing to run on). */
int benchMain(int argc, char** argv, const benchTest_t* test);

/* One rank's pair of buffers for one engine (plain: shared by both engines). */
typedef struct {
  char* send;
  char* recv;
  size_t sendBytes;  /* usable bytes from send and from recv (the collective's at maxBytes, + the -u offset) */
  size_t recvBytes;
  int kind;          /* how they were allocated: BENCH_ALLOC_* */
  void* reg[2];      /* the engine's registration handles of send and recv (NULL: none) */
} benchBuffers_t;
/* CUDA: cudaMalloc; ENGINE: the engine's memAlloc; ALIAS: another engine's (plain buffers are shared). */
enum { BENCH_ALLOC_NONE, BENCH_ALLOC_CUDA, BENCH_ALLOC_ENGINE, BENCH_ALLOC_ALIAS };

struct benchAgent {
  benchArgs_t args;          /* this agent's copy (maxBytes may shrink to fit memory) */
  const benchTest_t* test;
  benchOob_t* oob;
  int agent;                 /* index among all agents (threads of all processes) */
  int nAgents;
  int nranks;                /* ranks in the communicators */
  int nLocal;                /* ranks (GPUs) this agent drives */
  int firstRank;             /* rank of local index 0 */
  int launchKind;            /* BENCH_LAUNCH_* */
  const char* launchText;    /* "2 processes forked", "torchrun", ... */
  int sharedGpus;
  int nDevices;              /* GPUs visible to this process */
  int compareSkipped;        /* --compare nccl asked but impossible here (the launcher said why) */
  int argc;                  /* the command line, for the JSON */
  char** argv;
  int output;                /* prints the table (owns rank 0) */
  int showProgress;
  int devices[BENCH_MAX_LOCAL];
  cudaStream_t streams[BENCH_MAX_LOCAL];
  cudaEvent_t start[BENCH_MAX_LOCAL];
  cudaEvent_t stop[BENCH_MAX_LOCAL];
  cudaEvent_t* iterEvents[BENCH_MAX_LOCAL]; /* -I (not -z 3): -n + 1 events per GPU, one before each iteration */
  void* stopRegion;          /* -N 0: the shared exchange whose stop flag the launcher sets (NULL: none) */
  int nEngines;              /* engines measured: fccl, and NCCL beside it with --compare nccl */
  benchEngine_t engines[BENCH_MAX_ENGINES]; /* every engine the build has (ops NULL for one it lacks) */
  const char* engineNames[BENCH_MAX_ENGINES];
  benchBuffers_t buffers[BENCH_MAX_LOCAL][BENCH_MAX_ENGINES];
  const char* buffersText[BENCH_MAX_ENGINES]; /* per engine: "plain", "registered", "symmetric" (NCCL -R 2) */
  unsigned char* staging;    /* pinned host chunk for uploads and checks */
  size_t stagingBytes;
  uint64_t seedCounter;
  char (*deviceLines)[BENCH_DEVICE_LINE]; /* the output agent's: every rank's "#  Rank ..." line, in rank order */
  int nDeviceLines;
  char startTime[32];        /* when the agent started (BENCH_TIME_FORMAT), the -J file's start_time */
  double memory[BENCH_MEM_PARTS]; /* -M: device bytes of the communicators, the buffers, the run (largest rank) */
  int maxCtas;                    /* --max-ctas: the SM budget the engines' current communicators were made with; 0: the
                                   * first ones, made without */
  void* firstComms[BENCH_MAX_ENGINES][BENCH_MAX_LOCAL];   /* the first communicators while a budget's are current */
  void* budgetReg[BENCH_MAX_LOCAL][BENCH_MAX_ENGINES][2]; /* -R 1/2: the buffers' registrations with a budget's */
  char error[1024];
};

/* Prints the failure to stderr with the agent's first rank, and keeps the first one in agent->error. */
void benchFail(benchAgent_t* agent, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* Launches one operation for local rank gpu of iteration iter. */
typedef int (*benchLaunchFn_t)(benchAgent_t* agent, int engine, int gpu, int iter, void* ctx);
/* Runs `count` iterations of launch on every local rank (eager, grouped per iteration). */
int benchLaunchAll(benchAgent_t* agent, int engine, benchLaunchFn_t launch, void* ctx, int firstIter, int count);
/* One untimed pass (count iterations, then wait), in a CUDA graph when -G is set: the check run. */
int benchRunOnce(benchAgent_t* agent, int engine, benchLaunchFn_t launch, void* ctx, int count);
/* What the timed loop measured. Every rank gets the same numbers. */
typedef struct {
  double timeUs; /* per operation, combined over ranks as -a says */
  double cpuUs;  /* host time of the launch loop per operation */
  /* -I: the caller's arrays, or NULL. iterUs: -n values, each iteration's time on the slowest rank; agentIterUs:
   * nAgents x -n values, each agent's slowest GPU per iteration (agent order). */
  double* iterUs;
  double* agentIterUs;
} benchTiming_t;
/* The timed loop: barrier, events, -n iterations (captured once and launched -G times in graph mode; with -z 1 a
 * wait and a barrier after each, with -z 2 a wait), wait. With -z 3 each iteration is timed on its own between
 * barriers that are not timed. With -I (eager only) an event before every iteration times each one, as nccl-tests
 * does: from one iteration's start to the next's (with -z 3, each iteration's own events). */
int benchTimeLoop(benchAgent_t* agent, int engine, benchLaunchFn_t launch, void* ctx, benchTiming_t* timing);
/* Waits (bounded by -T) for every local stream, watching the engine's asynchronous errors. */
int benchSync(benchAgent_t* agent, int engine);

/* Writes rank's input (elements [0, count) of the pattern) to dst on local rank gpu, and waits. */
int benchUpload(benchAgent_t* agent, int gpu, void* dst, size_t count, int type, int op, uint64_t seed);
/* Reads back count elements from src on local rank gpu and counts the wrong ones (*wrong) with checker, which
 * benchCheckerSetResult has pointed at this rank's result. */
int benchCheck(benchAgent_t* agent, int gpu, const benchChecker_t* checker, const void* src, size_t count,
               int64_t* wrong);
/* Fills bytes at dst with BENCH_POISON_BYTE so that elements an operation failed to write show. */
int benchPoison(benchAgent_t* agent, int gpu, void* dst, size_t bytes);
/* Flips bit 6 of the top byte of element index of type at ptr (the hidden --inject-corruption): a change every
 * check sees, avg's tolerance included. */
int benchCorrupt(benchAgent_t* agent, int gpu, void* ptr, size_t index, int type);

/* --max-ctas: makes the engines' current communicators new ones made with the SM budget maxCtas (fcclConfig_t and
 * ncclConfig_t maxCTAs; -R 1/2's buffers registered with them), the first ones kept aside; 0: destroys a budget's and
 * makes the first ones current again. Collective over every rank. 0, or -1 after benchFail (a budget's communicators
 * aborted, the first ones current). */
int benchUseBudget(benchAgent_t* agent, int maxCtas);
/* After a failure: aborts a budget's communicators, locally, and makes the first ones current again. */
void benchDropBudget(benchAgent_t* agent);

/* Combined over agents (every agent calls). */
int benchReduce(benchAgent_t* agent, double* values, int n, int how);
int benchBarrier(benchAgent_t* agent);
/* Every agent's n doubles, in agent order, into all (nAgents x n; any n: the exchange's slot is used in pieces). */
int benchGatherDoubles(benchAgent_t* agent, const double* mine, int n, double* all);
/* -N 0: whether every agent stops now, because a signal asked any of them to (every agent calls, between rows);
 * 1 stop, 0 go on, -1 the exchange failed. */
int benchStopAgreed(benchAgent_t* agent);

/* The progress line on stderr (output agent, terminal only); NULL text clears it. */
void benchProgress(benchAgent_t* agent, const char* text);

/* The output agent's -J and --csv files: benchOpenOutput returns NULL after benchFail says why; benchCloseOutput
 * returns -1 after benchFail when anything written was lost. */
FILE* benchOpenOutput(benchAgent_t* agent, const char* path);
int benchCloseOutput(benchAgent_t* agent, FILE* file, const char* path);

/* Opens the -J file and writes what both programs share, up to an open results array (benchJsonBegin). The caller
 * writes its results, ends the document with benchJsonEnd and calls benchCloseOutput. NULL after benchFail when the
 * file cannot be opened. */
FILE* benchJsonStart(benchAgent_t* agent, toolJson_t* json);

/* The output agent's -J and --csv files, opened before the first result and written as each result comes, so that a
 * run that never ends (-N 0) keeps nothing but the footer's sums, and a failed run leaves a whole document (its
 * "errors" say why). */
typedef struct {
  FILE* json;
  toolJson_t writer;
  FILE* csv;
} benchOutputs_t;
/* Opens what -J and --csv ask for (nothing on the other agents) and writes their beginning (the CSV header). 0, or -1
 * after benchFail. */
int benchOutputsOpen(benchAgent_t* agent, benchOutputs_t* outputs);
/* Flushes both after a result, so that what a run killed at once leaves is readable up to its last line. */
void benchOutputsFlush(benchOutputs_t* outputs);
/* Ends the JSON document (benchJsonEnd with table and summary, which may be NULL; failure: the agent's error, or
 * NULL) and closes both. 0, or -1 after benchFail when anything written was lost. */
int benchOutputsClose(benchAgent_t* agent, benchOutputs_t* outputs, const benchTable_t* table,
                      const benchSummary_t* summary, const char* failure);
/* The local time now, as BENCH_TIME_FORMAT. */
void benchNowText(char* out, size_t len);

#endif /* FCCL_BENCH_RUNTIME_H_ */
