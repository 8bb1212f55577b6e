/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A communicator's reduction ops beyond the built-in ones (src/core/coll/redop.c): the pre-multiplied sums of
 * fcclRedOpCreatePreMulSum, each an op value from fcclNumOps up that is valid on its communicator only, with its
 * datatype, its scalar (the bits of a host value, or the device address of one) and, where NCCL carries the
 * communicator's reductions, the NCCL op made with it. docs/collectives.md#pre-multiplied-sums.
 */
#ifndef FCCL_CORE_REDOP_H_
#define FCCL_CORE_REDOP_H_

#include "fccl.h"

#include <stdint.h>

struct fcclComm;

/* What a call's op means to the engine that runs it. */
struct fcclRedOpUse {
  fcclRedOp_t kernelOp; /* for fccl's kernels: FCCL_DEVICE_OP_PREMULSUM */
  uint64_t scalar;      /* the scalar's bits (a host value), or 0 */
  uint64_t scalarPtr;   /* the device address of the scalar, or 0 */
  int ncclOp;           /* the NCCL op of the communicator's NCCL communicator; -1: none was made */
};

/* Resolves op (>= fcclNumOps) of comm for a call of datatype named caller: fcclInvalidArgument (with a message) for an
 * op that is not a live op of comm, or one made for another datatype. Any thread. */
fcclResult_t fcclRedOpResolve(struct fcclComm* comm, fcclRedOp_t op, fcclDataType_t datatype, const char* caller,
                              struct fcclRedOpUse* use);

/* Frees the ops of comm (its teardown; the NCCL ops went with the NCCL communicator). NULL and none are fine. */
void fcclRedOpFreeAll(struct fcclComm* comm);

#endif /* FCCL_CORE_REDOP_H_ */
