/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Communicators made together in one process (fcclCommInitAll). Their teardown is collective (barrier, release
 * mappings, barrier), and the usual NCCL pattern destroys them one after another from one thread; run directly,
 * the first destroy would wait for peers whose destroy has not been called yet. So a member's destroy is deferred
 * until every member's destroy has been called; the last call then tears all of them down at once, one thread per
 * member, exactly as if each had been destroyed by a thread of its own.
 */
#ifndef FCCL_LOCAL_GROUP_H_
#define FCCL_LOCAL_GROUP_H_

#include "fccl.h"

struct fcclLocalGroup;

/* Most members a group may have (fcclCommInitAll's ndev). */
#define FCCL_LOCAL_GROUP_MAX 64

/* Tears one member down; called on a thread of its own, concurrently with the other members'. */
typedef fcclResult_t (*fcclMemberTeardown_t)(void* member);
/* Makes a member's waits give up (abort): called for every member when one of them is aborted. */
typedef void (*fcclMemberAbort_t)(void* member);

/* A group of count (1..FCCL_LOCAL_GROUP_MAX) members (pointers owned by the caller); NULL when out of memory. */
struct fcclLocalGroup* fcclLocalGroupNew(void* const* members, int count, fcclMemberTeardown_t teardown,
                                         fcclMemberAbort_t abortMember);

/*
 * The member's destroy was called. Returns fcclSuccess at once while other members are still in use (the
 * member's resources stay until then); the last call tears every member down, frees the group and returns the
 * first error of any member's teardown. *lastOut (may be NULL) says whether this call did the teardown.
 */
fcclResult_t fcclLocalGroupRelease(struct fcclLocalGroup* group, void* member, int* lastOut);

/*
 * The member is aborted: every member's waits are made to give up (they share a process: the peers of an aborted
 * member could only time out), the member leaves the group (its caller frees it), and members whose destroy was
 * already deferred are torn down now when no member is left in use. Frees the group when nothing is left.
 */
void fcclLocalGroupAbort(struct fcclLocalGroup* group, void* member);

#endif /* FCCL_LOCAL_GROUP_H_ */
