# SPDX-License-Identifier: Apache-2.0
"""Mixture-of-experts dispatch and combine (docs/moe.md) on torch tensors: MoeLayout (fcclMoeLayout_t) and the calls
Communicator.moe_layout, moe_dispatch and moe_combine delegate to.

A layout has a name, unique in its process, by which fccl.ops' custom ops find it when they run (as they find a
communicator): the graph holds the string, never an address. torch is imported only by the calls, which take and
make torch tensors."""
import ctypes
import itertools
import os
import sys
import threading
from typing import NamedTuple, Optional

from ._buffers import _stream_handle
from ._c_api import MOE_CONFIG_MAGIC, _MoeConfigStruct, _MoeRecvStruct
from ._enums import DataType, Result
from ._library import FcclError, _check, _lib, version

FP8_SCALE_BLOCK = 128  # FP8 elements per fp32 scale

_lock = threading.Lock()
_layouts = {}  # name -> MoeLayout, from creation to destroy
_serial = itertools.count()

# torch dtype names (compared by name: torch need not be imported here) -> fcclDataType_t
_ROW_TYPES = {"torch.bfloat16": DataType.bfloat16, "torch.float16": DataType.float16,
              "torch.float8_e4m3fn": DataType.float8e4m3}
_INDEX_TYPES = {"torch.int32": DataType.int32, "torch.int64": DataType.int64}


class MoeDispatchResult(NamedTuple):
    """What a dispatch delivers to this rank, rows grouped by local expert (docs/moe.md#layouts): x (recv_rows x
    hidden, the dispatch's type), scales (recv_rows x hidden / 128 float32 for FP8, else None), weights (recv_rows
    float32 router weights, None without topk_weights), source_tokens (recv_rows int32: source rank x
    max_tokens_per_rank + token), expert_counts (local_experts int32), expert_offsets (local_experts + 1 int32). Only
    the first expert_counts[e] rows of each expert's block are written."""
    x: "object"
    scales: Optional["object"]
    weights: Optional["object"]
    source_tokens: "object"
    expert_counts: "object"
    expert_offsets: "object"


def _lookup_layout(name):
    with _lock:
        layout = _layouts.get(name)
    if layout is None:
        raise FcclError(Result.InvalidUsage, f"no live MoE layout is named {name!r} in this process")
    return layout


class MoeLayout:
    """fcclMoeLayout_t: one MoE configuration on a communicator, its peer memory sized by max_tokens_per_rank, and
    the routing of its last dispatch, which the next combine sends back. Make it with Communicator.moe_layout
    (collective); destroy() is collective too (`with layout:` calls it)."""

    def __init__(self, comm, handle, num_experts, topk, hidden, max_tokens_per_rank, padded, name):
        self.comm = comm
        self._handle = handle
        self.num_experts = num_experts
        self.topk = topk
        self.hidden = hidden
        self.max_tokens_per_rank = max_tokens_per_rank
        self.padded = padded
        self.local_experts = num_experts // comm._nranks_cached()
        self.name = name
        self.last_tokens = None  # this rank's tokens of the last dispatch, which its combine returns
        rows = ctypes.c_size_t()
        _check(_lib().fcclMoeLayoutRecvRows(handle, ctypes.byref(rows)), "fcclMoeLayoutRecvRows")
        self.recv_rows = rows.value

    def _live_handle(self):
        if self._handle is None:
            raise FcclError(Result.InvalidUsage, f"the MoE layout {self.name!r} was destroyed")
        return self._handle

    def destroy(self):
        """fcclMoeLayoutDestroy: collective; waits for the device. Does nothing the second time."""
        with _lock:
            if _layouts.get(self.name) is self:
                del _layouts[self.name]
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        _check(_lib().fcclMoeLayoutDestroy(handle), "fcclMoeLayoutDestroy")

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.destroy()

    def __repr__(self):
        return (f"MoeLayout({self.name!r}, {self.num_experts} experts, top-{self.topk}, hidden {self.hidden}, "
                f"{self.max_tokens_per_rank} tokens per rank, {self.recv_rows} rows)")


def _create_layout(comm, num_experts, topk, hidden, max_tokens_per_rank, padded, expert_alignment, blocks, name):
    for value, what in ((num_experts, "num_experts"), (topk, "topk"), (hidden, "hidden"),
                        (max_tokens_per_rank, "max_tokens_per_rank"), (expert_alignment, "expert_alignment"),
                        (blocks, "blocks")):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"moe_layout: {what} must be a non-negative int, got {value!r}")
    if name is None:
        name = f"moe-{os.getpid()}-{next(_serial)}"
    elif not isinstance(name, str) or not name:
        raise ValueError(f"moe_layout: name must be a non-empty str, got {name!r}")
    with _lock:
        if name in _layouts:
            raise ValueError(f"moe_layout: a live MoE layout is named {name!r} already")
    config = _MoeConfigStruct()
    config.size = ctypes.sizeof(_MoeConfigStruct)
    config.magic = MOE_CONFIG_MAGIC
    config.version = version()
    config.numExperts = num_experts
    config.topk = topk
    config.hidden = hidden
    config.maxTokensPerRank = max_tokens_per_rank
    config.recvLayout = 1 if padded else 0
    config.expertAlignment = expert_alignment
    config.blocks = blocks
    comm_handle = comm._live_handle()
    handle = ctypes.c_void_p()
    _check(_lib().fcclMoeLayoutCreate(comm_handle, ctypes.byref(config), ctypes.byref(handle)),
           "fcclMoeLayoutCreate", comm_handle)
    layout = MoeLayout(comm, handle.value, num_experts, topk, hidden, max_tokens_per_rank, bool(padded), name)
    with _lock:
        _layouts[name] = layout
    return layout


def _tensor(obj, what, shape, types):
    """obj checked as a contiguous CUDA torch tensor of shape and one of types (names); its fccl type."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        raise TypeError(f"{what}: expected a CUDA torch.Tensor, got {type(obj).__name__}")
    if not obj.is_cuda or not obj.is_contiguous():
        raise ValueError(f"{what}: must be a contiguous CUDA tensor")
    if tuple(obj.shape) != tuple(shape):
        raise ValueError(f"{what}: shape {tuple(obj.shape)}, expected {tuple(shape)}")
    dtype = types.get(str(obj.dtype))
    if dtype is None:
        raise TypeError(f"{what}: dtype {obj.dtype}; one of {', '.join(types)}")
    return dtype


def _pointer(tensor):
    return tensor.data_ptr() or None if tensor is not None else None


def _dispatch(comm, layout, x, topk_idx, topk_weights, x_scales, blocks, stream):
    torch = sys.modules["torch"]
    if layout.comm is not comm:
        raise ValueError(f"moe_dispatch: {layout!r} belongs to another communicator")
    handle = layout._live_handle()
    if x.dim() != 2:
        raise ValueError(f"moe_dispatch: x must be tokens x hidden, got shape {tuple(x.shape)}")
    tokens, hidden = int(x.shape[0]), layout.hidden
    row_type = _tensor(x, "moe_dispatch: x", (tokens, hidden), _ROW_TYPES)
    index_type = _tensor(topk_idx, "moe_dispatch: topk_idx", (tokens, layout.topk), _INDEX_TYPES)
    fp8 = row_type == DataType.float8e4m3
    if topk_weights is not None:
        _tensor(topk_weights, "moe_dispatch: topk_weights", (tokens, layout.topk),
                {"torch.float32": DataType.float32})
    if fp8 != (x_scales is not None):
        raise ValueError("moe_dispatch: x_scales (tokens x hidden / 128 float32) go with an FP8 x, and only with it")
    if fp8:
        if hidden % FP8_SCALE_BLOCK:
            raise ValueError(f"moe_dispatch: FP8 rows need hidden a multiple of 128, the layout's is {hidden}")
        _tensor(x_scales, "moe_dispatch: x_scales", (tokens, hidden // FP8_SCALE_BLOCK),
                {"torch.float32": DataType.float32})
    rows, local, device = layout.recv_rows, layout.local_experts, x.device
    out = MoeDispatchResult(
        x=torch.empty((rows, hidden), dtype=x.dtype, device=device),
        scales=torch.empty((rows, hidden // FP8_SCALE_BLOCK), dtype=torch.float32, device=device) if fp8 else None,
        weights=torch.empty((rows,), dtype=torch.float32, device=device) if topk_weights is not None else None,
        source_tokens=torch.empty((rows,), dtype=torch.int32, device=device),
        expert_counts=torch.empty((local,), dtype=torch.int32, device=device),
        expert_offsets=torch.empty((local + 1,), dtype=torch.int32, device=device))
    recv = _MoeRecvStruct(_pointer(out.x), _pointer(out.scales), _pointer(out.weights), _pointer(out.source_tokens),
                          _pointer(out.expert_counts), _pointer(out.expert_offsets))
    stream_handle = _stream_handle(stream, device)
    result = _lib().fcclMoeDispatch(_pointer(x), _pointer(x_scales), _pointer(topk_idx), int(index_type),
                                    _pointer(topk_weights), tokens, int(row_type), ctypes.byref(recv), int(blocks),
                                    handle, stream_handle or None)
    _check(result, "fcclMoeDispatch", comm._live_handle())
    layout.last_tokens = tokens
    return out


def _combine(comm, layout, y, topk_weights, tokens, blocks, stream):
    torch = sys.modules["torch"]
    if layout.comm is not comm:
        raise ValueError(f"moe_combine: {layout!r} belongs to another communicator")
    handle = layout._live_handle()
    if tokens is None:
        tokens = layout.last_tokens
    if tokens is None:
        raise FcclError(Result.InvalidUsage, f"moe_combine: no dispatch on {layout!r} yet")
    out_type = _tensor(y, "moe_combine: y", (layout.recv_rows, layout.hidden),
                       {"torch.bfloat16": DataType.bfloat16, "torch.float16": DataType.float16})
    if topk_weights is not None:
        _tensor(topk_weights, "moe_combine: topk_weights", (tokens, layout.topk), {"torch.float32": DataType.float32})
    out = torch.empty((tokens, layout.hidden), dtype=y.dtype, device=y.device)
    result = _lib().fcclMoeCombine(_pointer(y), _pointer(out), _pointer(topk_weights), int(tokens), int(out_type),
                                   int(blocks), handle, _stream_handle(stream, y.device) or None)
    _check(result, "fcclMoeCombine", comm._live_handle())
    return out
