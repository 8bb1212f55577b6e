# SPDX-License-Identifier: Apache-2.0
"""The enums of include/fccl.h, with the same values, and the size of an element of each data type."""
import enum


class Result(enum.IntEnum):
    """fcclResult_t; the values are stable and 0-7 match NCCL's."""
    Success = 0
    UnhandledCudaError = 1
    SystemError = 2
    InternalError = 3
    InvalidArgument = 4
    InvalidUsage = 5
    RemoteError = 6
    InProgress = 7
    Timeout = 8


class DataType(enum.IntEnum):
    """fcclDataType_t; the values match NCCL's."""
    int8 = 0
    uint8 = 1
    int32 = 2
    uint32 = 3
    int64 = 4
    uint64 = 5
    float16 = 6
    float32 = 7
    float64 = 8
    bfloat16 = 9
    float8e4m3 = 10  # an output type of all_reduce_add_rms_norm only


class ScaleMode(enum.IntEnum):
    """fcclScaleMode_t: how all_reduce_add_rms_norm scales an FP8 output (docs/fused.md#fp8)."""
    none = 0
    static = 1
    dynamic = 2


class Path(enum.IntEnum):
    """fcclPath_t: the engine that carries a communicator's collectives (docs/paths.md)."""
    fccl = 0
    nccl = 1
    hier = 2


class RedOp(enum.IntEnum):
    """fcclRedOp_t; the values match NCCL's."""
    sum = 0
    prod = 1
    max = 2
    min = 3
    avg = 4


_ITEM_SIZE = {
    DataType.int8: 1, DataType.uint8: 1, DataType.int32: 4, DataType.uint32: 4, DataType.int64: 8,
    DataType.uint64: 8, DataType.float16: 2, DataType.float32: 4, DataType.float64: 8, DataType.bfloat16: 2,
    DataType.float8e4m3: 1,
}
