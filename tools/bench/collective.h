/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A collective's benchmark, as nccl-tests has one: a small program per collective (tools/all_reduce_perf.c)
 * describes the collective once in a benchCollective_t, and the shared driver (collective.c) does the rest: the
 * size sweep over -d and -o, warm-up, timing out of place and in place on every engine, the -c checks on fresh
 * data, the table, -J and --csv. A new collective is its program, its call in the engines' tables (engine.h) and its
 * result function (check.c); docs/benchmark.md#adding-a-program walks through it.
 */
#ifndef FCCL_BENCH_COLLECTIVE_H_
#define FCCL_BENCH_COLLECTIVE_H_

#include "runtime.h"

/* Elements of each rank's send and receive buffer in a call with count. Linear in count, or at most count times
 * their value at count 1: the buffers are made from that value for maxBytes' count (agent.c), and the driver stops
 * with an error when a call would not fit them. */
typedef struct {
  size_t send;
  size_t recv;
} benchCounts_t;

/* What the in-place run of a collective is. */
enum {
  BENCH_IN_PLACE_CHECKED = 0,   /* timed and checked, as the out-of-place run */
  BENCH_IN_PLACE_UNCHECKED = 1, /* timed, #wrong N/A: nccl-tests' send/recv on one buffer, whose result no rule fixes */
  BENCH_IN_PLACE_NONE = 2,      /* not run (every column N/A): fcclAllToAll refuses overlapping buffers */
};

struct benchCollective {
  const char* program;                               /* "all_reduce_perf": the table's name, -J's "tool", messages */
  benchCall_t call;                                  /* the engines' entry it times */
  double (*busFactor)(int nranks);                   /* nccl-tests' bus bandwidth is algbw times this */
  benchCounts_t (*counts)(size_t count, int nranks); /* all-reduce count/count, all-gather count/count x nranks,
                                                      * reduce-scatter count x nranks/count, broadcast count/count */
  int perRank;                                       /* the call's count is the size's elements / nranks, and -b,
                                                      * -e and the size column are the larger buffer's (all-gather,
                                                      * reduce-scatter, all-to-all); else the size's elements */
  int alignBytes;                                    /* nccl-tests' rounding of that per-rank count down to whole
                                                      * alignBytes (all-to-all: 16); 0: none */
  int countIsCall;                                   /* the count column is the call's count (nccl-tests'
                                                      * all-to-all); else the size's elements */
  int hasRoot;                                       /* -r picks the root; without one the root column reads -1 */
  int hasOp;                                         /* -o picks the ops; without, one pass with BENCH_NO_OP */
  int inPlace;                                       /* BENCH_IN_PLACE_* */
  benchResultFn_t result;                            /* where each element of a rank's result comes from */
};

/* The flags a collective's program honours (its --help, its parser): nccl-tests' all, its op and root if it has
 * them. */
unsigned benchCollectiveTakes(const benchCollective_t* collective);

/* A collective program's main(): the runtime's flags and launch, collective's benchmark on every rank. Returns the
 * exit status (benchMain's). */
int benchCollectiveMain(int argc, char** argv, const benchCollective_t* collective);

#endif /* FCCL_BENCH_COLLECTIVE_H_ */
