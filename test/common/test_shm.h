/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared memory between the ranks of a test: forked processes (the region is created before the fork) or threads
 * of one process. It holds a barrier, an all-gather of small records, flags that one rank posts and others wait for,
 * an abort flag, and an area whose layout the caller defines (ids, hashes, time stamps).
 *
 * Every wait is bounded, and ends early when the outcome can no longer change: a barrier returns TEST_SHM_ABORTED
 * once a rank has called testShmAbort, has died (killed, or exited non-zero), or has exited before reaching it, and
 * a flag's wait once the region is aborted. The region learns of a rank's end from testShmForkRanks, which forks the
 * ranks and watches them. The waits print what
 * they waited for and who was missing on stderr; callers assert on the result (EXPECT_EQ_INT(..., TEST_SHM_OK)).
 *
 * Memory ordering: arriving at a barrier and posting a flag are release stores, and leaving a barrier or a wait is an
 * acquire load, so that plain writes made before the one are visible after the other.
 */
#ifndef FCCL_TEST_SHM_H_
#define FCCL_TEST_SHM_H_

#include <stddef.h>

#define TEST_SHM_MAX_RANKS 64

enum {
  TEST_SHM_OK = 0,
  TEST_SHM_TIMEOUT = 1, /* the bound passed first */
  TEST_SHM_ABORTED = 2, /* testShmAbort, or a rank died or left before the barrier */
  TEST_SHM_INVALID = 3, /* bad arguments: a rank out of range, a record larger than the region's */
};

struct testShm;

/*
 * A region for nranks ranks (1..TEST_SHM_MAX_RANKS): all-gather records of up to recordBytes per rank, userBytes of
 * the caller's (zeroed), and timeoutMs as the bound of every barrier. Call it before forking. NULL on failure
 * (said on stderr).
 */
struct testShm* testShmCreate(int nranks, size_t recordBytes, size_t userBytes, int timeoutMs);
void testShmDestroy(struct testShm* shm);

/* The caller's area: userBytes, 64-byte aligned, at the same address in every forked rank. */
void* testShmUser(struct testShm* shm);
int testShmRanks(const struct testShm* shm);

/*
 * Waits until every rank has called it as many times as this rank (the ranks meet at their n-th call). A barrier
 * that does not complete (timeout, abort, a rank gone) also aborts the region: the ranks are out of step, and a
 * later barrier would pair the wrong calls.
 */
int testShmBarrier(struct testShm* shm, int rank);

/*
 * In-place all-gather: records + rank * bytes holds this rank's record on entry, and records holds every rank's in
 * rank order on return (bytes at most the region's recordBytes). Two barriers: nobody overwrites the region's copy
 * before everyone has read it.
 */
int testShmAllGather(struct testShm* shm, int rank, void* records, size_t bytes);

/* Stores value into *flag (a location in the region) with release semantics. */
void testShmPost(int* flag, int value);

/* Waits until *flag >= value, at most timeoutMs (the region's bound when 0), or until the region is aborted. what
 * names the flag in the message a failed wait prints. */
int testShmWait(struct testShm* shm, const int* flag, int value, int timeoutMs, const char* what);

/* Ends every present and future wait of every rank with TEST_SHM_ABORTED (but for barriers already complete). */
void testShmAbort(struct testShm* shm, int rank);
int testShmAborted(const struct testShm* shm);

/* "ok", "timeout", "aborted" or "invalid". */
const char* testShmResultName(int result);

/*
 * testForkRanks over the region's ranks, telling the region as soon as one ends: a rank that dies or exits non-zero
 * aborts it, so that its peers stop waiting for it at once.
 */
int testShmForkRanks(struct testShm* shm, int (*fn)(int rank, int nranks, void* arg), void* arg, int timeoutSeconds,
                     int* exitCodes);

#endif /* FCCL_TEST_SHM_H_ */
