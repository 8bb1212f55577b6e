/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the all-gather, reduce-scatter and broadcast GPU tests share (test_collectives.c), over the all-reduce tests'
 * machinery (test_allreduce_common.h: forked ranks, shared ids, guarded buffers, hashes across ranks) and their host
 * reference (test_allreduce_ref.h: reproducible inputs, the reduction rules and tolerances):
 *
 *   - a call of one of the three collectives ("a move": it moves blocks between ranks, reducing them or not),
 *     placed in a context's buffers in place or out of place, run through the internal entry points
 *     (fcclAllGatherAlgo, ...) with a form forced or the automatic choice;
 *   - the expected output of every rank: all-gather and broadcast bit for bit (the inputs are moved, never
 *     computed), reduce-scatter element by element against the float64 reference with the all-reduce's tolerance;
 *   - which forms can run a call, stated from the contract (LL: a block within the LL area; direct: registered
 *     buffers; staged: rounds of one staging chunk that a signal can count), independently of algo.c.
 *
 * Inputs are refInputBits(type, seed, call, rank, index): every rank computes every other rank's input locally. A
 * reduce-scatter input is rank's nranks x count elements, block r at index r x count; an all-gather or broadcast
 * input is count elements.
 */
#ifndef FCCL_TEST_COLLECTIVES_COMMON_H_
#define FCCL_TEST_COLLECTIVES_COMMON_H_

#include "algo.h"
#include "test_allreduce_common.h"

#include <stddef.h>
#include <stdint.h>

enum { MOVE_ALLGATHER = 0, MOVE_REDUCESCATTER = 1, MOVE_BROADCAST = 2, MOVE_KINDS = 3 };
/* A case's form: the automatic choice, or one forced (FCCL_MOVE_LL, FCCL_MOVE_DIRECT, FCCL_MOVE_STAGED, and
 * FCCL_MOVE_COPY for all-gather and broadcast, of algo.h). */
#define MOVE_AUTO (-1)

/* "all-gather", "reduce-scatter", "broadcast"; "auto", "ll", "direct", "staged", "copy". */
const char* moveName(int kind);
const char* moveFormName(int form);
/* The collective's forms (fcclAllGatherAlgos, ...), and the algorithm that forces form (-1 for MOVE_AUTO; for a
 * form the collective does not have, an id its internal entry point refuses): the internal entry points' algo. */
const fcclAlgoSet* moveSet(int kind);
int moveAlgo(int kind, int form);

/* Elements of each rank's send and receive buffer for a call of count elements on nranks ranks. */
size_t moveSendElems(int kind, size_t count, int nranks);
size_t moveRecvElems(int kind, size_t count, int nranks);

/* Whether form can run a block of blockBytes (count x element size) of collective kind on nranks ranks, with the
 * environment's FCCL_STAGING_BYTES; MOVE_AUTO always can, and blockBytes 0 can with any form the collective has
 * (copy: the all-gather's and the broadcast's, on registered buffers). */
int moveFormApplicable(int kind, int form, int nranks, size_t blockBytes, int registered);
/* The form the automatic choice runs (fcclMoveSelect under the environment's FCCL_COPY_MOVE_MIN; MOVE_AUTO for a
 * count of 0 or a copy on one rank). */
int moveAutoForm(int kind, int nranks, size_t blockBytes, int registered);

/* One call, as a test makes it. */
struct moveCase {
  int kind;           /* MOVE_* */
  fcclDataType_t type;
  fcclRedOp_t op;     /* reduce-scatter; ignored by the others */
  int form;           /* MOVE_AUTO or FCCL_MOVE_* */
  int inPlace;
  size_t count;       /* the call's count: all-gather sendcount, reduce-scatter recvcount, broadcast count */
  int root;           /* broadcast */
  size_t sendOffset;  /* bytes into the context's send buffer (a multiple of the element size); in place, where the
                       * one buffer starts (the whole gathered output / the whole reduce-scatter input) */
  size_t recvOffset;  /* bytes into the context's receive buffer (out of place) */
  int nullSend;       /* broadcast out of place: ranks other than root pass a NULL sendbuf */
};

/* "call 12: reduce-scatter bfloat16 max x 33, staged, in place, offsets 2/6, root -": for messages. */
void moveDescribe(const struct moveCase* c, uint64_t call, char* out, size_t size);

/* Bytes each side of a context must hold for the case on nranks ranks (offsets included). */
size_t moveSendBytes(const struct moveCase* c, int nranks);
size_t moveRecvBytes(const struct moveCase* c, int nranks);

/* Where the case's buffers lie in ctx for this rank: sendbuf (NULL for a broadcast non-root with nullSend) and
 * recvbuf, and the region that holds the output with its guards around it (*whole, *wholeBytes: the buffer that
 * the call writes, which in place is the whole gathered output or the whole reduce-scatter input). */
void movePlace(const struct collContext* ctx, const struct moveCase* c, char** sendbuf, char** recvbuf, char** whole,
               size_t* wholeBytes);
/* The same in regions of one's own (the offsets count from sendRegion and recvRegion). */
void movePlaceIn(char* sendRegion, char* recvRegion, const struct moveCase* c, int rank, int nranks, char** sendbuf,
                 char** recvbuf, char** whole, size_t* wholeBytes);

/* The collective's internal entry point with c's arguments: fcclAllGatherAlgo, fcclReduceScatterAlgo or
 * fcclBroadcastAlgo, forced to c->form's kernel (or -1). */
fcclResult_t moveCall(const struct moveCase* c, const void* sendbuf, void* recvbuf, fcclComm_t comm,
                      cudaStream_t stream);

/*
 * Checks a rank's output of a call whose inputs were those of call `call` from element `first` of every rank's
 * input on (first: where the call's sendbuf starts in that sequence; 0 when the input was uploaded for the call):
 * all-gather and broadcast bit for bit, reduce-scatter with refCheckElement. Returns the number of wrong elements,
 * the first few described in message.
 */
size_t moveCheckOutput(const struct moveCase* c, uint64_t seed, uint64_t call, uint64_t first, int rank, int nranks,
                       const void* out, char* message, size_t messageSize);

/*
 * One checked call in ctx: poisons both buffers, uploads this rank's input of call `call` (a broadcast non-root
 * uploads its own into the buffer it receives in, in place, or into its ignored send region), runs it, waits, and
 * checks the output (moveCheckOutput), the guards around the buffer it writes, an out-of-place input (and, in place,
 * the reduce-scatter's other blocks) unchanged. Records the output's hash as shared->hashes[call][rank] for
 * all-gather and broadcast, whose outputs are the same on every rank (a reduce-scatter's differ). Returns the
 * number of problems.
 */
int moveRunCase(struct collContext* ctx, const struct moveCase* c, uint64_t call);
/* Off: moveRunCase still makes and waits for its call (every rank must make the same calls) but checks nothing, so
 * that a rank with many problems stays in step with its peers without flooding the log. */
void moveSetChecking(int on);

/* A barrier, a device sync, then every epoch counter set to epoch on this rank (every rank passes the same). */
void moveSetEpoch(struct collContext* ctx, uint64_t epoch);

#endif /* FCCL_TEST_COLLECTIVES_COMMON_H_ */
