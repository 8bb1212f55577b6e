# SPDX-License-Identifier: Apache-2.0
"""fccl's collectives as torch.library custom ops, so that torch.compile keeps them inside its graph.

A call of a ctypes function is opaque to TorchDynamo: each one would end the compiled graph there (a graph break) and
``fullgraph=True`` would refuse the function. The ops below are registered once, in the ``fccl`` namespace, with
fake implementations that give the output's shape, type and device without running anything, so the compiler can
trace through them. They run the communicator's own calls on torch's current stream, so a CUDA graph captures them
as it captures the methods.

    import fccl.ops
    comm = fccl.Communicator.init_rank(nranks, rank, uid, name="tp")
    y = fccl.ops.all_reduce(x, "tp")            # out of place: a new tensor (the communicator itself does too)
    fccl.ops.all_reduce_(x, "tp", op="max")     # in place
    g = fccl.ops.all_gather(x, "tp")            # the ranks' x concatenated along dimension 0
    s = fccl.ops.reduce_scatter(x, "tp")        # this rank's block of dimension 0 of the sum
    b = fccl.ops.broadcast(x, "tp", root=0)     # root's x; broadcast_ in place
    m = fccl.ops.all_reduce(x, "tp", op=fccl.PreMulSum(0.5))  # a pre-multiplied sum (with a number)
    v = fccl.ops.all_gather_v(x, [3, 0, 5], "tp")       # rank r's counts[r] rows, concatenated
    w = fccl.ops.reduce_scatter_v(v, [3, 0, 5], "tp")   # this rank's counts[rank] rows of the sum
    v = fccl.ops.all_gather_v(x, counts, "tp", rows=n)  # counts: an int64 CUDA tensor read at every run (graphs)
    r = fccl.ops.moe_dispatch(x, layout, topk_idx, topk_weights)   # a MoeDispatchResult (docs/moe.md)
    o = fccl.ops.moe_combine(y, layout, topk_weights)              # y: the experts' outputs in r.x's rows

An op names its communicator, as torch's functional collectives name their process group: the graph holds the
string, never an address, and each run of the op looks the communicator up by that name
(Communicator.by_name). A graph compiled and cached on disk (inductor's FX graph and AOTAutograd caches,
torch._inductor.standalone_compile's artifacts, a vLLM or SGLang compile cache) therefore runs in the next process
on the communicator created there under the same name, and a compiled function keeps working when its
communicator is destroyed and created again under the same name. With no live communicator of that name the op
raises FcclError (InvalidUsage) naming it. Passing a Communicator instead of a name works as before: the op takes its
name, which is an automatic one, valid in this process only, unless the communicator was created with name=.

A CUDA graph is different: it holds the kernels' arguments by value, the communicator's device memory among them, so
a graph captured before a destroy must never be replayed after it (fccl cannot see a replay to refuse it). Capture
again after the new communicator exists; the compiled function needs no recompilation (docs/python.md).

``Communicator``'s methods take these ops themselves while torch.compile traces them, so ``comm.all_reduce(x)``
inside a compiled function needs nothing else. The op names are ``torch.ops.fccl.all_reduce`` and so on.
"""
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

import torch

from . import _torch_compile
from ._buffers import _op_of
from ._moe import FP8_SCALE_BLOCK, MoeDispatchResult, _combine, _dispatch, _lookup_layout
from ._names import _check_name, _lookup

if TYPE_CHECKING:  # for annotations only: the communicator module imports this one, never the other way round
    from ._communicator import Communicator

__all__ = ["all_reduce", "all_reduce_", "all_gather", "reduce_scatter", "broadcast", "broadcast_", "all_gather_v",
           "reduce_scatter_v", "moe_dispatch", "moe_combine"]

_torch_compile._torch_is_compiling = torch.compiler.is_compiling  # Communicator's methods ask it


def _communicator(comm_name: str) -> "Communicator":
    """The live communicator named comm_name, looked up at each run: FcclError naming it when there is none."""
    return _lookup(comm_name)


def _nranks(comm_name: str) -> int:
    return _communicator(comm_name)._nranks_cached()


def _gathered_shape(x: torch.Tensor, nranks: int):
    if x.dim() == 0:
        raise ValueError("all_gather: a 0-dimensional tensor has no dimension 0 to concatenate along")
    return (nranks * x.shape[0],) + tuple(x.shape[1:])


def _scattered_shape(x: torch.Tensor, nranks: int):
    if x.dim() == 0 or x.shape[0] % nranks != 0:
        raise ValueError(f"reduce_scatter: dimension 0 of shape {tuple(x.shape)} is not a multiple of {nranks} ranks")
    return (x.shape[0] // nranks,) + tuple(x.shape[1:])


def _row_elements(x: torch.Tensor, call: str) -> int:
    if x.dim() == 0:
        raise ValueError(f"{call}: a 0-dimensional tensor has no dimension 0 to split into rows")
    elements = 1
    for size in x.shape[1:]:
        elements *= size
    return elements


def _check_row_counts(counts, nranks: int, call: str) -> None:
    if len(counts) != nranks:
        raise ValueError(f"{call}: {len(counts)} counts, one per rank ({nranks}) expected")
    for rank, count in enumerate(counts):
        if count < 0:
            raise ValueError(f"{call}: counts[{rank}] = {count} is negative")


def _device_counts(counts: torch.Tensor, x: torch.Tensor, nranks: int, call: str) -> torch.Tensor:
    """Rows per rank (an int64 CUDA tensor of nranks) as the elements the C call takes, on the stream: a copy scaled
    by the row's elements unless a row is one element."""
    if counts.dtype != torch.int64 or counts.dim() != 1 or counts.shape[0] != nranks:
        raise ValueError(f"{call}: counts must be an int64 tensor of {nranks} rows per rank, got {counts.dtype} "
                         f"{tuple(counts.shape)}")
    row = _row_elements(x, call)
    return counts.contiguous() if row == 1 else counts * row


# ---- the ops: real implementations, then fake ones (shape, type and device only) -----------------------------------

@torch.library.custom_op("fccl::all_reduce", mutates_args=(), device_types="cuda")
def _all_reduce(x: torch.Tensor, comm_name: str, op: str) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _communicator(comm_name).all_reduce(x.contiguous(), out, op=op)
    return out


@_all_reduce.register_fake
def _(x, comm_name, op):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("fccl::all_reduce_", mutates_args=("x",), device_types="cuda")
def _all_reduce_inplace(x: torch.Tensor, comm_name: str, op: str) -> None:
    _communicator(comm_name).all_reduce(x, op=op)


@_all_reduce_inplace.register_fake
def _(x, comm_name, op):
    return None


@torch.library.custom_op("fccl::all_gather", mutates_args=(), device_types="cuda")
def _all_gather(x: torch.Tensor, comm_name: str) -> torch.Tensor:
    communicator = _communicator(comm_name)
    out = x.new_empty(_gathered_shape(x, communicator._nranks_cached()))
    communicator.all_gather(x.contiguous(), out)
    return out


@_all_gather.register_fake
def _(x, comm_name):
    return x.new_empty(_gathered_shape(x, _nranks(comm_name)))


@torch.library.custom_op("fccl::reduce_scatter", mutates_args=(), device_types="cuda")
def _reduce_scatter(x: torch.Tensor, comm_name: str, op: str) -> torch.Tensor:
    communicator = _communicator(comm_name)
    out = x.new_empty(_scattered_shape(x, communicator._nranks_cached()))
    communicator.reduce_scatter(x.contiguous(), out, op=op)
    return out


@_reduce_scatter.register_fake
def _(x, comm_name, op):
    return x.new_empty(_scattered_shape(x, _nranks(comm_name)))


@torch.library.custom_op("fccl::broadcast", mutates_args=(), device_types="cuda")
def _broadcast(x: torch.Tensor, comm_name: str, root: int) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _communicator(comm_name).broadcast(x.contiguous(), out, root=root)
    return out


@_broadcast.register_fake
def _(x, comm_name, root):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("fccl::broadcast_", mutates_args=("x",), device_types="cuda")
def _broadcast_inplace(x: torch.Tensor, comm_name: str, root: int) -> None:
    _communicator(comm_name).broadcast(x, root=root)


@_broadcast_inplace.register_fake
def _(x, comm_name, root):
    return None


@torch.library.custom_op("fccl::all_gather_v", mutates_args=(), device_types="cuda")
def _all_gather_v(x: torch.Tensor, counts: List[int], comm_name: str) -> torch.Tensor:
    communicator = _communicator(comm_name)
    _check_row_counts(counts, communicator._nranks_cached(), "all_gather_v")
    row = _row_elements(x, "all_gather_v")
    out = x.new_empty((sum(counts),) + tuple(x.shape[1:]))
    communicator.all_gather_v(x.contiguous(), out, [count * row for count in counts])
    return out


@_all_gather_v.register_fake
def _(x, counts, comm_name):
    return x.new_empty((sum(counts),) + tuple(x.shape[1:]))


@torch.library.custom_op("fccl::reduce_scatter_v", mutates_args=(), device_types="cuda")
def _reduce_scatter_v(x: torch.Tensor, counts: List[int], comm_name: str, op: str) -> torch.Tensor:
    communicator = _communicator(comm_name)
    _check_row_counts(counts, communicator._nranks_cached(), "reduce_scatter_v")
    row = _row_elements(x, "reduce_scatter_v")
    out = x.new_empty((counts[communicator._rank_cached()],) + tuple(x.shape[1:]))
    communicator.reduce_scatter_v(x.contiguous(), out, [count * row for count in counts], op=op)
    return out


@_reduce_scatter_v.register_fake
def _(x, counts, comm_name, op):
    return x.new_empty((counts[_communicator(comm_name)._rank_cached()],) + tuple(x.shape[1:]))


@torch.library.custom_op("fccl::all_gather_v_device", mutates_args=(), device_types="cuda")
def _all_gather_v_device(x: torch.Tensor, counts: torch.Tensor, rows: int, comm_name: str) -> torch.Tensor:
    communicator = _communicator(comm_name)
    elements = _device_counts(counts, x, communicator._nranks_cached(), "all_gather_v")
    out = x.new_empty((rows,) + tuple(x.shape[1:]))
    communicator.all_gather_v(x.contiguous(), out, elements)
    return out


@_all_gather_v_device.register_fake
def _(x, counts, rows, comm_name):
    return x.new_empty((rows,) + tuple(x.shape[1:]))


@torch.library.custom_op("fccl::reduce_scatter_v_device", mutates_args=(), device_types="cuda")
def _reduce_scatter_v_device(x: torch.Tensor, counts: torch.Tensor, rows: int, comm_name: str,
                             op: str) -> torch.Tensor:
    communicator = _communicator(comm_name)
    elements = _device_counts(counts, x, communicator._nranks_cached(), "reduce_scatter_v")
    out = x.new_empty((rows,) + tuple(x.shape[1:]))
    communicator.reduce_scatter_v(x.contiguous(), out, elements, op=op)
    return out


@_reduce_scatter_v_device.register_fake
def _(x, counts, rows, comm_name, op):
    return x.new_empty((rows,) + tuple(x.shape[1:]))


# The MoE ops name their layout, which names its communicator. The dispatch returns every output, scales and weights
# as empty tensors when the call has none (a custom op returns tensors, never None); the combine takes the dispatch's
# expert_counts, which it does not read, so that the graph orders it after its dispatch.

def _dispatch_shapes(layout, x, has_weights):
    rows, local, hidden = layout.recv_rows, layout.local_experts, layout.hidden
    fp8 = str(x.dtype) == "torch.float8_e4m3fn"
    return ((rows, hidden), (rows if fp8 else 0, hidden // FP8_SCALE_BLOCK), (rows if has_weights else 0,), (rows,),
            (local,), (local + 1,))


@torch.library.custom_op("fccl::moe_dispatch", mutates_args=(), device_types="cuda")
def _moe_dispatch(x: torch.Tensor, x_scales: Optional[torch.Tensor], topk_idx: torch.Tensor,
                  topk_weights: Optional[torch.Tensor], layout_name: str,
                  blocks: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                        torch.Tensor]:
    layout = _lookup_layout(layout_name)
    result = _dispatch(layout.comm, layout, x.contiguous(), topk_idx.contiguous(),
                       topk_weights.contiguous() if topk_weights is not None else None,
                       x_scales.contiguous() if x_scales is not None else None, blocks, None)
    empty = x.new_empty((0,), dtype=torch.float32)
    scales = result.scales if result.scales is not None else empty.new_empty((0, layout.hidden // FP8_SCALE_BLOCK))
    weights = result.weights if result.weights is not None else empty
    return result.x, scales, weights, result.source_tokens, result.expert_counts, result.expert_offsets


@_moe_dispatch.register_fake
def _(x, x_scales, topk_idx, topk_weights, layout_name, blocks):
    shapes = _dispatch_shapes(_lookup_layout(layout_name), x, topk_weights is not None)
    types = (x.dtype, torch.float32, torch.float32, torch.int32, torch.int32, torch.int32)
    return tuple(x.new_empty(shape, dtype=dtype) for shape, dtype in zip(shapes, types))


@torch.library.custom_op("fccl::moe_combine", mutates_args=(), device_types="cuda")
def _moe_combine(y: torch.Tensor, topk_weights: Optional[torch.Tensor], expert_counts: torch.Tensor,
                 layout_name: str, tokens: int, blocks: int) -> torch.Tensor:
    layout = _lookup_layout(layout_name)
    return _combine(layout.comm, layout, y.contiguous(),
                    topk_weights.contiguous() if topk_weights is not None else None, tokens, blocks, None)


@_moe_combine.register_fake
def _(y, topk_weights, expert_counts, layout_name, tokens, blocks):
    return y.new_empty((tokens, _lookup_layout(layout_name).hidden))


# ---- the functions to call ----------------------------------------------------------------------------------------

def _op_name(op) -> str:
    """The op's name, which the custom op carries: checked here, outside the graph. A pre-multiplied sum is
    "premul_sum:<the scalar's float.hex()>" (fccl.PreMulSum(x).name, or the PreMulSum itself made outside the compiled
    function): such a name is parsed when the op runs."""
    if isinstance(op, str) and op.startswith("premul_sum:"):
        return op
    return _op_of(op).name


def _comm_name(comm: Union[str, "Communicator"]) -> str:
    """The name the op carries: comm itself, or a live Communicator's name."""
    if isinstance(comm, str):
        return _check_name(comm)
    comm._live_handle()  # a destroyed communicator is refused here, at the call, as before
    return comm.name


def all_reduce(x: torch.Tensor, comm: Union[str, "Communicator"], op="sum") -> torch.Tensor:
    """The all-reduce of x over the ranks of comm (a communicator's name, or the Communicator), as a new tensor
    (x is unchanged)."""
    return torch.ops.fccl.all_reduce(x, _comm_name(comm), _op_name(op))


def all_reduce_(x: torch.Tensor, comm: Union[str, "Communicator"], op="sum") -> torch.Tensor:
    """The all-reduce of x in place (x must be contiguous); returns x."""
    torch.ops.fccl.all_reduce_(x, _comm_name(comm), _op_name(op))
    return x


def all_gather(x: torch.Tensor, comm: Union[str, "Communicator"]) -> torch.Tensor:
    """Every rank's x concatenated along dimension 0, in rank order (nranks x x.shape[0] rows)."""
    return torch.ops.fccl.all_gather(x, _comm_name(comm))


def reduce_scatter(x: torch.Tensor, comm: Union[str, "Communicator"], op="sum") -> torch.Tensor:
    """Block rank of dimension 0 (x.shape[0] / nranks rows) of the reduction of every rank's x."""
    return torch.ops.fccl.reduce_scatter(x, _comm_name(comm), _op_name(op))


def broadcast(x: torch.Tensor, comm: Union[str, "Communicator"], root: int = 0) -> torch.Tensor:
    """root's x on every rank, as a new tensor (x is read on root only)."""
    return torch.ops.fccl.broadcast(x, _comm_name(comm), int(root))


def broadcast_(x: torch.Tensor, comm: Union[str, "Communicator"], root: int = 0) -> torch.Tensor:
    """root's x into x on every rank, in place; returns x."""
    torch.ops.fccl.broadcast_(x, _comm_name(comm), int(root))
    return x


def _rows(rows) -> int:
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise ValueError(f"rows must be a non-negative int (the output's rows, sized for the worst case), got {rows!r}")
    return rows


def all_gather_v(x: torch.Tensor, counts: Union[Sequence[int], torch.Tensor], comm: Union[str, "Communicator"],
                 rows: Optional[int] = None) -> torch.Tensor:
    """Rank r's x (counts[r] rows of dimension 0, any of them 0) concatenated in rank order on every rank.
    counts: ints, the same on every rank (x has counts[rank] rows; a CUDA graph keeps the counts it captured); or an
    int64 CUDA tensor of rows per rank, read at every run, so that a captured graph serves new counts: then x holds
    the most rows a rank may send, rows= gives the output's rows (the most the counts may add up to), and the rows
    past their sum are unspecified."""
    if isinstance(counts, torch.Tensor):
        if rows is None:
            raise ValueError("all_gather_v: rows= is required with counts in a tensor (the output's rows)")
        return torch.ops.fccl.all_gather_v_device(x, counts, _rows(rows), _comm_name(comm))
    return torch.ops.fccl.all_gather_v(x, [int(c) for c in counts], _comm_name(comm))


def reduce_scatter_v(x: torch.Tensor, counts: Union[Sequence[int], torch.Tensor], comm: Union[str, "Communicator"],
                     op="sum", rows: Optional[int] = None) -> torch.Tensor:
    """This rank's block (counts[rank] rows, after the blocks of ranks before it) of the reduction of every rank's
    x, summed in rank order. counts: ints (x has their sum of rows), or an int64 CUDA tensor of rows per rank read
    at every run: then x holds the most rows the counts may add up to, rows= gives the output's rows (the most one
    rank may receive), and the rows past counts[rank] are unspecified."""
    if isinstance(counts, torch.Tensor):
        if rows is None:
            raise ValueError("reduce_scatter_v: rows= is required with counts in a tensor (the output's rows)")
        return torch.ops.fccl.reduce_scatter_v_device(x, counts, _rows(rows), _comm_name(comm), _op_name(op))
    return torch.ops.fccl.reduce_scatter_v(x, [int(c) for c in counts], _comm_name(comm), _op_name(op))


def _layout_name(layout) -> str:
    """The name the op carries: layout itself, or a live MoeLayout's name (no lookup: torch.compile traces this)."""
    if isinstance(layout, str):
        return layout
    layout._live_handle()  # a destroyed layout is refused here, at the call
    return layout.name


def moe_dispatch(x: torch.Tensor, layout, topk_idx: torch.Tensor, topk_weights: Optional[torch.Tensor] = None,
                 x_scales: Optional[torch.Tensor] = None, blocks: int = 0) -> MoeDispatchResult:
    """Communicator.moe_dispatch as a custom op, on layout (a MoeLayout or its name); a MoeDispatchResult whose
    scales and weights are None when the call has none."""
    name = _layout_name(layout)
    out = torch.ops.fccl.moe_dispatch(x, x_scales, topk_idx, topk_weights, name, int(blocks))
    return MoeDispatchResult(out[0], out[1] if x_scales is not None else None,
                             out[2] if topk_weights is not None else None, out[3], out[4], out[5])


def moe_combine(y: torch.Tensor, layout, topk_weights: Optional[torch.Tensor] = None, tokens: Optional[int] = None,
                blocks: int = 0, expert_counts: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Communicator.moe_combine as a custom op: tokens x hidden, y's type. tokens: this rank's tokens of the
    dispatch (None: topk_weights' rows, else the layout's last dispatch's). expert_counts: the dispatch's, which
    orders the combine after it in a graph (None: y's own order does)."""
    name = _layout_name(layout)
    if tokens is None and topk_weights is not None:
        tokens = topk_weights.shape[0]
    if tokens is None:
        tokens = (_lookup_layout(name) if isinstance(layout, str) else layout).last_tokens
    if tokens is None:
        raise ValueError("moe_combine: no dispatch on this layout yet, and no tokens or topk_weights to count")
    if expert_counts is None:
        expert_counts = y.new_empty((0,), dtype=torch.int32)
    return torch.ops.fccl.moe_combine(y, topk_weights, expert_counts, name, tokens, int(blocks))
