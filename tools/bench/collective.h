/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A collective's benchmark, as nccl-tests has one: a small program per collective (tools/all_reduce_perf.c)
 * describes the collective once in a benchCollective_t, and the shared driver (collective.c) does the rest: the
 * size sweep over -d and -o, warm-up, timing out of place and in place on every engine, the -c checks on fresh
 * data, the table, -J and --csv. A new collective is its program, its engines' entries (engine.h) and its result
 * function (check.c).
 */
#ifndef FCCL_BENCH_COLLECTIVE_H_
#define FCCL_BENCH_COLLECTIVE_H_

#include "runtime.h"

/* Elements of each rank's send and receive buffer in a call with count. Linear in count: the buffers are made for
 * maxBytes' count. */
typedef struct {
  size_t send;
  size_t recv;
} benchCounts_t;

struct benchCollective {
  const char* program;                               /* "all_reduce_perf": the table's name, -J's "tool", messages */
  double (*busFactor)(int nranks);                   /* nccl-tests' bus bandwidth is algbw times this */
  benchCounts_t (*counts)(size_t count, int nranks); /* all-reduce count/count, all-gather count/count x nranks,
                                                      * reduce-scatter count x nranks/count, broadcast count/count */
  int sizeIsLargest;                                 /* nccl-tests' all-gather and reduce-scatter: -b, -e and the
                                                      * size column are the larger buffer's, the call's count is
                                                      * 1/nranks of the size's elements */
  int hasRoot;                                       /* -r picks the root; without one the root column reads -1 */
  int hasOp;                                         /* -o picks the ops; without, one pass with BENCH_NO_OP */
  benchCollectiveFn_t launch;                        /* one call on an engine, through its ops table */
  benchResultFn_t result;                            /* where each element of a rank's result comes from */
};

/* A collective program's main(): the runtime's flags and launch, collective's benchmark on every rank. Returns the
 * exit status (benchMain's). */
int benchCollectiveMain(int argc, char** argv, const benchCollective_t* collective);

#endif /* FCCL_BENCH_COLLECTIVE_H_ */
