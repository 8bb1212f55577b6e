/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the benchmark core's test share (test_bench.c, test_bench_report.c, test_bench_checker.c,
 * test_bench_launch.c): the flag parser's wrapper and the test functions main runs.
 */
#ifndef FCCL_TEST_BENCH_H_
#define FCCL_TEST_BENCH_H_

#include "bench.h"

#include <stddef.h>

/* parse(&args, err, len, "-b", "8", ..., NULL): the flags after the program name (test_bench.c). */
int parse(benchArgs_t* args, char* err, size_t errLen, ...) __attribute__((sentinel));

/* test_bench.c: flags and the size sweep (args.c) */
void testDefaultsAndFlags(void);
void testFlagErrors(void);
void testPerIterAndForever(void);
void testProgramFlags(void);
void testWritable(void);
void testSizes(void);
/* test_bench_report.c */
void testFloatColumns(void);
void testTable(void);
void testTimestampsAndMemory(void);
void testCsvAndJson(void);
void testPerIter(void);
/* test_bench_checker.c */
void testHalfAndBf16(void);
void testChecker(void);
void testCheckerResults(void);
/* test_bench_launch.c */
void testExchange(void);
void testLaunchVariables(void);
void testPlan(void);
void testPlanHosts(void);
void testForkLauncher(void);
void testStopOnSignal(void);

#endif /* FCCL_TEST_BENCH_H_ */
