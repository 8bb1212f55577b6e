/* SPDX-License-Identifier: Apache-2.0 */
/* The names of fcclDataType_t's values, for messages (datatype.h). */
#include "datatype.h"

const char* fcclTypeName(fcclDataType_t type) {
  static const char* const names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",     "uint64",
                                      "float16", "float32", "float64", "bfloat16", "float8e4m3"};
  _Static_assert(sizeof(names) / sizeof(names[0]) == fcclNumTypes, "a name for every fcclDataType_t");
  return (int)type >= 0 && type < fcclNumTypes ? names[type] : "unknown";
}
