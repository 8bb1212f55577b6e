/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the all-gather, reduce-scatter and broadcast test share (test_collectives.c, _stream.c,
 * _graph.c, _choice.c): the forms a sweep runs, and the modes main dispatches with what it hands every forked rank
 * (struct collTestArgs). Each mode returns 0, or non-zero after a failed check.
 */
#ifndef FCCL_TEST_COLLECTIVES_H_
#define FCCL_TEST_COLLECTIVES_H_

#include "test_collectives_common.h"

#include <stddef.h>
#include <stdint.h>

/* The automatic choice and every form a case may force (test_collectives.c). */
#define FORMS 5
extern const int kForms[FORMS];

size_t alignUp(size_t value, size_t align);
/* The largest of counts[0..n). */
size_t largestCount(const size_t* counts, int n);

/* test_collectives_stream.c */
int modeCompose(int rank, int nranks, const struct collTestArgs* args);
int modeMixed(int rank, int nranks, const struct collTestArgs* args);
/* test_collectives_graph.c */
int modeGraph(int rank, int nranks, const struct collTestArgs* args);
/* test_collectives_choice.c; modeUnshared's kind is MOVE_BROADCAST (rootplain) or MOVE_ALLGATHER (inplacemix). */
int modeEnvForce(int rank, int nranks, const struct collTestArgs* args);
int modeEnvCopy(int rank, int nranks, const struct collTestArgs* args);
int modeEnvInvalid(int rank, int nranks, const struct collTestArgs* args);
int modeEnvMismatch(int rank, int nranks, const struct collTestArgs* args);
int modeUnshared(int rank, int nranks, const struct collTestArgs* args, int kind);

#endif /* FCCL_TEST_COLLECTIVES_H_ */
