/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One checked call of fcclReduce, fcclGather, fcclScatter, fcclBcast, or of a pre-multiplied sum through
 * fcclAllReduce or fcclReduceScatter (test_rooted.c), over the collective tests' machinery (test_allreduce_common.h:
 * forked ranks, guarded buffers, the host reference of test_allreduce_ref.h):
 *
 *   - the call placed in a context's buffers, in place (NCCL's layouts: the reduce's one buffer, the gather's
 *     sendbuf as the root's block of its recvbuf, the scatter's recvbuf as the root's block of its sendbuf) or out of
 *     place, the buffers only the root uses NULL on the other ranks when the case says so;
 *   - run through the internal entry points (fcclReduceAlgo, ...) with a form forced, or the public calls;
 *   - every rank's output checked: the reduce's on the root against the float64 reference (every op, the
 *     pre-multiplied sum with refCheckPreMulSum), the gather's and the scatter's and the broadcast's bit for bit,
 *     the bytes around each output and the buffers the call must not write (a non-root's recvbuf of a reduce or a
 *     gather, an input out of place) unchanged.
 */
#ifndef FCCL_TEST_ROOTED_COMMON_H_
#define FCCL_TEST_ROOTED_COMMON_H_

#include "algo.h"
#include "test_allreduce_common.h"

#include <stddef.h>
#include <stdint.h>

enum { ROOTED_REDUCE, ROOTED_GATHER, ROOTED_SCATTER, ROOTED_BCAST, ROOTED_ALLREDUCE, ROOTED_REDUCESCATTER };
#define ROOTED_KINDS 4 /* the rooted collectives; the two after them take part for their pre-multiplied sums */
/* The op of a case that is a pre-multiplied sum (made for the call with fcclRedOpCreatePreMulSum). */
#define ROOTED_PREMUL (-2)
/* The automatic choice of form. */
#define ROOTED_AUTO (-1)

struct rootedCase {
  int kind;
  fcclDataType_t type;
  int op;       /* a built-in fcclRedOp_t or ROOTED_PREMUL (reduce, all-reduce, reduce-scatter) */
  int form;     /* ROOTED_AUTO, FCCL_MOVE_LL / _DIRECT / _STAGED, or for the all-reduce an fcclDevKernel_t */
  int inPlace;  /* the bcast is in place whatever this says */
  size_t count; /* the call's count */
  int root;
  size_t sendOffset; /* bytes into the send region (a multiple of the element size); in place: the one buffer's */
  size_t recvOffset;
  int nullUnused;     /* the ranks but the root pass NULL for the buffer only the root uses (reduce, gather: recvbuf;
                       * scatter: sendbuf) */
  int scalarOnDevice; /* a pre-multiplied sum's scalar in device memory (uploaded after the op is made: the kernel
                       * reads it when it runs), else from the host */
};

/* "reduce", "gather", "scatter", "bcast", "all-reduce", "reduce-scatter". */
const char* rootedName(int kind);
/* A pre-multiplied sum's scalar for type, as the bits of one element: a value that rounds in the products (a third,
 * negative for bfloat16) or a small integer (negative for the signed types). */
uint64_t rootedScalar(fcclDataType_t type);
/* Elements of each rank's send and receive regions for the case on nranks ranks. */
size_t rootedSendElems(const struct rootedCase* c, int nranks);
size_t rootedRecvElems(const struct rootedCase* c, int nranks);
/* Whether a forced form can run the case's block (count x element size; LL: the LL area, direct: registered
 * buffers, staged: rounds a signal can count) with the environment's FCCL_STAGING_BYTES. */
int rootedFormApplicable(const struct rootedCase* c, int nranks, int registered);
/* Bytes the context's send and receive buffers need for the case (offsets included). */
size_t rootedCapacity(const struct rootedCase* c, int nranks);

/* The device memory of the pre-multiplied sums' scalars (8 bytes), per rank; made once by the test. */
void rootedSetScalarBuffer(void* deviceScalar);

/* One checked call in ctx (see the file comment); records a broadcast's output hash as shared->hashes[call][rank].
 * Returns the number of problems. */
int rootedRunCase(struct collContext* ctx, const struct rootedCase* c, uint64_t call);
/* Off: rootedRunCase still makes and waits for its call (every rank must make the same calls) but checks nothing, so
 * that a rank with many problems stays in step with its peers without flooding the log. */
void rootedSetChecking(int on);

/* The call alone, on stream, in buffers placed by the caller (graphs): sendbuf/recvbuf as the case places them;
 * op is the fcclRedOp_t to pass (a pre-multiplied sum's made by the caller). */
fcclResult_t rootedCall(const struct rootedCase* c, const void* sendbuf, void* recvbuf, fcclRedOp_t op, fcclComm_t comm,
                        cudaStream_t stream);

/* Checks the output a rank holds after the case (whole: the region the case writes, as rootedPlace gives it):
 * returns the number of wrong elements, the first described in message. scalar: a pre-multiplied sum's. */
size_t rootedCheckOutput(const struct rootedCase* c, uint64_t seed, uint64_t call, int rank, int nranks,
                         uint64_t scalar, const void* out, char* message, size_t messageSize);

/* Where the case's buffers lie in the regions for this rank: sendbuf, recvbuf (either NULL where the case passes
 * NULL), the region this rank's output is in (*out, *outBytes; NULL when the rank has none) and the buffer it
 * fills with its input (*in, elements *inElems). */
void rootedPlace(char* sendRegion, char* recvRegion, const struct rootedCase* c, int rank, int nranks, char** sendbuf,
                 char** recvbuf, char** out, size_t* outBytes, char** in, size_t* inElems);

#endif /* FCCL_TEST_ROOTED_COMMON_H_ */
