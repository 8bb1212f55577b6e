# SPDX-License-Identifier: Apache-2.0
"""Pre-multiplied sums (fcclRedOpCreatePreMulSum): the op that multiplies every rank's input by a scalar, then sums
(torch.distributed's ReduceOp.PREMUL_SUM, which FSDP uses to average gradients). A call with one makes the C op on
its communicator for its datatype, runs, and destroys the op as soon as it returned, which fccl (as NCCL) allows:
the work enqueued keeps what it needs."""
import ctypes
import math
import struct

from ._enums import DataType, RedOp
from ._library import _check, _lib

_PREFIX = "premul_sum:"
_SCALAR_DEVICE = 0  # fcclScalarResidence_t
_SCALAR_HOST_IMMEDIATE = 1

# (struct format, bits) of the integer types: the scalar of an integer sum must be an integer of its range.
_INTEGERS = {DataType.int8: ("<b", 8), DataType.uint8: ("<B", 8), DataType.int32: ("<i", 32),
             DataType.uint32: ("<I", 32), DataType.int64: ("<q", 64), DataType.uint64: ("<Q", 64)}


class PreMulSum:
    """op=fccl.PreMulSum(scalar) for all_reduce, reduce_scatter and reduce: every rank's input, its own included,
    multiplied by scalar, then summed (docs/collectives.md#pre-multiplied-sums). scalar: a Python number, read when
    the call is made and converted to the call's datatype (round to nearest; an integer type takes an integer of its
    range); or a one-element CUDA torch.Tensor of the call's datatype on the communicator's device, read when the
    call's kernel runs (a captured CUDA graph reads the value of each replay), which must live while the call runs.

    torch.distributed's own (``torch.distributed._make_nccl_premul_sum(factor)``, ReduceOp.PREMUL_SUM with its
    factor) is taken as op too, its factor as scalar."""

    def __init__(self, scalar):
        if isinstance(scalar, bool) or not (isinstance(scalar, (int, float)) or hasattr(scalar, "data_ptr")):
            raise TypeError(f"PreMulSum's scalar must be a number or a one-element CUDA tensor, not "
                            f"{type(scalar).__name__}")
        if hasattr(scalar, "data_ptr"):
            if scalar.numel() != 1:
                raise ValueError(f"PreMulSum's scalar tensor has {scalar.numel()} elements, not 1")
            if not scalar.is_cuda:
                scalar = scalar.item()  # a host tensor is a host value
        self.scalar = scalar
        # Made here, once: torch.compile traces the op's name as a plain attribute (fccl.ops).
        self._name = None if self.on_device else _PREFIX + float(scalar).hex()

    @property
    def on_device(self) -> bool:
        return hasattr(self.scalar, "data_ptr")

    @property
    def name(self) -> str:
        """What fccl.ops' custom ops carry: "premul_sum:" and the scalar exactly (float.hex). A scalar in device
        memory cannot be carried by a string: those calls are made outside torch.compile."""
        if self._name is None:
            raise ValueError("fccl.ops cannot carry a PreMulSum whose scalar is a CUDA tensor (it is read when the "
                             "kernel runs): call the Communicator's method outside torch.compile, or give a number")
        return self._name

    def __repr__(self):
        return f"fccl.PreMulSum({self.scalar!r})"


def _premul_from_name(name: str):
    """The PreMulSum a "premul_sum:<float.hex>" names, or None for another name."""
    if not name.startswith(_PREFIX):
        return None
    try:
        return PreMulSum(float.fromhex(name[len(_PREFIX):]))
    except ValueError:
        raise ValueError(f"unknown reduction {name!r}: a pre-multiplied sum is spelt premul_sum:<float.hex()>") from None


def _premul_from_torch(op):
    """torch.distributed's ReduceOp.PREMUL_SUM with its factor (pickled with the op: __getstate__() is
    (RedOpType.PREMUL_SUM, factor)) as a PreMulSum."""
    getstate = getattr(op, "__getstate__", None)
    state = getstate() if callable(getstate) else None
    factor = state[1] if isinstance(state, tuple) and len(state) == 2 else None
    if factor is None:
        raise ValueError("torch.distributed.ReduceOp.PREMUL_SUM needs its factor: make the op with "
                         "torch.distributed._make_nccl_premul_sum(factor)")
    return PreMulSum(factor)


def _bfloat16_bits(value: float) -> int:
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    if math.isnan(value):
        return (bits >> 16) | 0x40
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


def _host_bytes(scalar, dtype: DataType) -> bytes:
    """scalar as one element of dtype, little-endian."""
    try:
        if dtype in _INTEGERS:
            form, bits = _INTEGERS[dtype]
            if isinstance(scalar, float) and not scalar.is_integer():
                raise ValueError(f"a pre-multiplied sum of {dtype.name} takes an integer scalar, not {scalar!r}")
            return struct.pack(form, int(scalar))
        value = float(scalar)
        if dtype == DataType.float16:
            return struct.pack("<e", value)
        if dtype == DataType.bfloat16:
            return struct.pack("<H", _bfloat16_bits(value))
        if dtype == DataType.float32:
            return struct.pack("<f", value)
        if dtype == DataType.float64:
            return struct.pack("<d", value)
    except (struct.error, OverflowError) as exc:
        raise ValueError(f"the scalar {scalar!r} does not fit {dtype.name} ({exc})") from None
    raise ValueError(f"a pre-multiplied sum takes no {dtype.name} data")


class _CallOp:
    """with _CallOp(reduction, dtype, comm_handle) as op: the fcclRedOp_t value of a call: a built-in op's, or a
    pre-multiplied sum made on the communicator for dtype and destroyed when the block is left."""

    def __init__(self, reduction, dtype: DataType, comm_handle):
        self.reduction = reduction
        self.dtype = dtype
        self.handle = comm_handle
        self.made = None

    def __enter__(self) -> int:
        if isinstance(self.reduction, RedOp):
            return int(self.reduction)
        premul = self.reduction
        if premul.on_device:
            from ._buffers import _as_buffer  # the tensor as a buffer: its pointer, type and element count
            scalar_buffer = _as_buffer(premul.scalar, "the PreMulSum's scalar")
            if scalar_buffer.dtype != self.dtype:
                raise ValueError(f"the PreMulSum's scalar tensor is {scalar_buffer.dtype.name}, the call's data "
                                 f"{self.dtype.name}: they must be the same")
            pointer, residence = ctypes.c_void_p(scalar_buffer.pointer), _SCALAR_DEVICE
        else:
            host = ctypes.create_string_buffer(_host_bytes(premul.scalar, self.dtype), 8)
            pointer, residence = ctypes.cast(host, ctypes.c_void_p), _SCALAR_HOST_IMMEDIATE
        op = ctypes.c_int()
        _check(_lib().fcclRedOpCreatePreMulSum(ctypes.byref(op), pointer, int(self.dtype), residence, self.handle),
               "fcclRedOpCreatePreMulSum", self.handle)
        self.made = op.value
        return self.made

    def __exit__(self, kind, value, traceback):
        if self.made is None:
            return False
        made, self.made = self.made, None
        result = _lib().fcclRedOpDestroy(made, self.handle)
        if kind is None:  # the call's own error, when there is one, is the one to see
            _check(result, "fcclRedOpDestroy", self.handle)
        return False
