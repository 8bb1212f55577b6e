/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The element types of fcclDataType_t as every layer needs them: their sizes (the device launcher, core's checks
 * and paths) and their names (messages). Base's, so that no layer reaches up for them.
 */
#ifndef FCCL_DATATYPE_H_
#define FCCL_DATATYPE_H_

#include "fccl.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of one element of type (0 for a value outside fcclDataType_t). */
static inline size_t fcclTypeSize(fcclDataType_t type) {
  switch (type) {
    case fcclInt8:
    case fcclUint8:
    case fcclFloat8e4m3: return 1;
    case fcclFloat16:
    case fcclBfloat16: return 2;
    case fcclInt32:
    case fcclUint32:
    case fcclFloat32: return 4;
    case fcclInt64:
    case fcclUint64:
    case fcclFloat64: return 8;
    default: return 0;
  }
}

/* "bfloat16"; "unknown" outside fcclDataType_t (src/base/datatype.c). */
const char* fcclTypeName(fcclDataType_t type);

#ifdef __cplusplus
}
#endif

#endif /* FCCL_DATATYPE_H_ */
