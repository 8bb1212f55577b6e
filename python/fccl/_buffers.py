# SPDX-License-Identifier: Apache-2.0
"""What the C calls take, made from what Python passes: a buffer (pointer, element count, data type) from a CUDA torch
tensor, an object with __cuda_array_interface__ or an explicit tuple; a data type, a reduction and a stream from
their names, enums or torch objects. torch is never imported here: a tensor exists only once torch is."""
import math
import sys

from ._enums import _ITEM_SIZE, DataType, RedOp
from ._premul import PreMulSum, _premul_from_name, _premul_from_torch


# __cuda_array_interface__ type strings. bfloat16 has none (CuPy and numba lack it): pass a torch tensor or a tuple.
_TYPESTR_TO_DTYPE = {
    "<f2": DataType.float16, "<f4": DataType.float32, "<f8": DataType.float64, "|i1": DataType.int8,
    "|u1": DataType.uint8, "<i4": DataType.int32, "<u4": DataType.uint32, "<i8": DataType.int64,
    "<u8": DataType.uint64,
}

# torch dtype names (str(torch.float32) == "torch.float32"): compared by name so torch need not be imported here.
_TORCH_DTYPE_TO_DTYPE = {
    "torch.float16": DataType.float16, "torch.bfloat16": DataType.bfloat16, "torch.float32": DataType.float32,
    "torch.float64": DataType.float64, "torch.int8": DataType.int8, "torch.uint8": DataType.uint8,
    "torch.int32": DataType.int32, "torch.int64": DataType.int64, "torch.float8_e4m3fn": DataType.float8e4m3,
}


class _Buffer:
    __slots__ = ("pointer", "count", "dtype", "readonly", "torch_tensor")

    def __init__(self, pointer, count, dtype, readonly=False, torch_tensor=None):
        self.pointer = pointer
        self.count = count
        self.dtype = dtype
        self.readonly = readonly
        self.torch_tensor = torch_tensor

    @property
    def nbytes(self):
        return self.count * _ITEM_SIZE[self.dtype]


def _is_torch_tensor(obj):
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported: no import here
    return torch is not None and isinstance(obj, torch.Tensor)


def _enum_member(enum_type, value, noun):
    """value as a member of enum_type when it is one, its name or its number; None for anything else."""
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        try:
            return enum_type[value]
        except KeyError:
            raise ValueError(f"unknown {noun} {value!r}; one of {', '.join(m.name for m in enum_type)}")
    if isinstance(value, int) and not isinstance(value, bool):
        return enum_type(value)
    return None


def _dtype_of(value):
    member = _enum_member(DataType, value, "fccl data type")
    if member is not None:
        return member
    name = str(value)
    if name in _TORCH_DTYPE_TO_DTYPE:
        return _TORCH_DTYPE_TO_DTYPE[name]
    raise TypeError(f"cannot use {value!r} as a fccl data type")


def _c_contiguous(shape, strides, itemsize):
    if strides is None:
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:  # a dimension of one element may carry any stride
            return False
        expected *= extent
    return True


def _as_buffer(obj, what):
    """A torch CUDA tensor, an object with __cuda_array_interface__, or (pointer, count, dtype) as a _Buffer."""
    if _is_torch_tensor(obj):
        if not obj.is_cuda:
            raise ValueError(f"{what}: the tensor is on {obj.device}, fccl needs a CUDA tensor")
        if not obj.is_contiguous():
            raise ValueError(f"{what}: the tensor is not contiguous (call .contiguous() first)")
        dtype = _TORCH_DTYPE_TO_DTYPE.get(str(obj.dtype))
        if dtype is None:
            raise TypeError(f"{what}: fccl has no type for {obj.dtype}")
        return _Buffer(obj.data_ptr(), obj.numel(), dtype, torch_tensor=obj)
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is not None:
        typestr = interface.get("typestr")
        dtype = _TYPESTR_TO_DTYPE.get(typestr)
        if dtype is None:
            raise TypeError(f"{what}: fccl has no type for __cuda_array_interface__ typestr {typestr!r}; "
                            f"one of {', '.join(_TYPESTR_TO_DTYPE)}")
        shape = tuple(interface["shape"])
        if not _c_contiguous(shape, interface.get("strides"), _ITEM_SIZE[dtype]):
            raise ValueError(f"{what}: the array is not C-contiguous (strides {interface.get('strides')})")
        pointer, readonly = interface["data"]
        return _Buffer(pointer or 0, math.prod(shape), dtype, readonly=bool(readonly))
    if isinstance(obj, tuple):
        if len(obj) != 3:
            raise TypeError(f"{what}: an explicit buffer is (pointer, count, dtype), got {len(obj)} items")
        pointer, count, dtype = obj
        if not isinstance(pointer, int) or not isinstance(count, int) or pointer < 0 or count < 0:
            raise ValueError(f"{what}: pointer and count must be non-negative ints, got {pointer!r}, {count!r}")
        return _Buffer(pointer, count, _dtype_of(dtype))
    raise TypeError(f"{what}: expected a CUDA torch.Tensor, an object with __cuda_array_interface__ or "
                    f"(pointer, count, dtype), got {type(obj).__name__}")


# torch.distributed.ReduceOp members by name (str(dist.ReduceOp.SUM) ends in "SUM"): torch need not be imported.
_TORCH_REDUCE_OPS = {"SUM": RedOp.sum, "PRODUCT": RedOp.prod, "MAX": RedOp.max, "MIN": RedOp.min, "AVG": RedOp.avg}


def _op_of(op):
    """A reduction: a RedOp, or a PreMulSum (fccl's, its "premul_sum:<float.hex>" name, or torch's PREMUL_SUM)."""
    if isinstance(op, PreMulSum):
        return op
    if isinstance(op, str):
        premul = _premul_from_name(op)
        if premul is not None:
            return premul
    member = _enum_member(RedOp, op, "reduction")
    if member is not None:
        return member
    kind = type(op).__name__
    if kind in ("ReduceOp", "RedOpType"):
        # dist.ReduceOp.SUM is a RedOpType (its .name); a ReduceOp object holds one in .op (PREMUL_SUM's, with its
        # factor, from torch.distributed._make_nccl_premul_sum).
        inner = getattr(op, "op", None)
        name = getattr(op, "name", None) or getattr(inner, "name", None) or str(op).rsplit(".", 1)[-1]
        if name in _TORCH_REDUCE_OPS:
            return _TORCH_REDUCE_OPS[name]
        if name == "PREMUL_SUM":
            return _premul_from_torch(op)
        raise ValueError(f"torch.distributed.ReduceOp.{name} has no fccl equivalent (fccl has "
                         f"{', '.join(_TORCH_REDUCE_OPS)}, PREMUL_SUM)")
    raise TypeError(f"op must be a name, fccl.RedOp, fccl.PreMulSum or torch.distributed.ReduceOp, not {kind}")


def _stream_handle(stream, torch_device=None):
    """A cudaStream_t as an int. None: torch's current stream of torch_device when the buffers are torch tensors
    (inside torch.cuda.graph that is the capture stream), else 0, the default stream."""
    if stream is None:
        if torch_device is not None:
            return sys.modules["torch"].cuda.current_stream(torch_device).cuda_stream
        return 0
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attribute in ("cuda_stream", "ptr"):  # torch.cuda.Stream, CuPy's Stream
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int):
            return handle
    raise TypeError(f"stream must be None, an int cudaStream_t or an object with .cuda_stream or .ptr, "
                    f"not {type(stream).__name__}")


def _stream_of(stream, *buffers):
    """The stream handle for buffers (torch's current stream of the first torch tensor's device when None)."""
    tensor = next((b.torch_tensor for b in buffers if b is not None and b.torch_tensor is not None), None)
    return _stream_handle(stream, tensor.device if tensor is not None else None)
