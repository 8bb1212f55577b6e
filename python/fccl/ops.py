# SPDX-License-Identifier: Apache-2.0
"""fccl's collectives as torch.library custom ops, so that torch.compile keeps them inside its graph.

A call of a ctypes function is opaque to TorchDynamo: each one would end the compiled graph there (a graph break) and
``fullgraph=True`` would refuse the function. The ops below are registered once, in the ``fccl`` namespace, with
fake implementations that give the output's shape, type and device without running anything, so the compiler can
trace through them. They run the communicator's own calls on torch's current stream, so a CUDA graph captures them
as it captures the methods.

    import fccl.ops
    y = fccl.ops.all_reduce(x, comm)            # out of place: a new tensor
    fccl.ops.all_reduce_(x, comm, op="max")     # in place
    g = fccl.ops.all_gather(x, comm)            # the ranks' x concatenated along dimension 0
    s = fccl.ops.reduce_scatter(x, comm)        # this rank's block of dimension 0 of the sum
    b = fccl.ops.broadcast(x, comm, root=0)     # root's x; broadcast_ in place

``Communicator``'s methods take these ops themselves while torch.compile traces them, so ``comm.all_reduce(x)``
inside a compiled function needs nothing else. The op names are ``torch.ops.fccl.all_reduce`` and so on; their
communicator argument is the communicator's handle (an int), which TorchDynamo treats as a constant of the graph.
A communicator must outlive the graphs compiled with it.
"""
import weakref
from typing import TYPE_CHECKING

import torch

from . import _torch_compile
from ._buffers import _op_of
from ._enums import Result
from ._library import FcclError

if TYPE_CHECKING:  # for annotations only: the communicator module imports this one, never the other way round
    from ._communicator import Communicator

__all__ = ["all_reduce", "all_reduce_", "all_gather", "reduce_scatter", "broadcast", "broadcast_"]

_torch_compile._torch_is_compiling = torch.compiler.is_compiling  # Communicator's methods ask it

# Communicators by handle, for the ops' implementations: an op's arguments can only be tensors and plain values.
# Weak, so that a communicator no graph holds goes away as before; Communicator.__init__ adds each one.
_communicators: "weakref.WeakValueDictionary[int, Communicator]" = weakref.WeakValueDictionary()


def _remember(comm: "Communicator") -> None:
    if comm._handle is not None:
        _communicators[comm._handle] = comm


def _communicator(handle: int) -> "Communicator":
    comm = _communicators.get(handle)
    if comm is None or comm._handle != handle:
        raise FcclError(Result.InvalidUsage, f"no live fccl communicator has handle {handle:#x} (destroyed?)")
    return comm


def _nranks(handle: int) -> int:
    return _communicator(handle)._nranks_cached()


def _gathered_shape(x: torch.Tensor, nranks: int):
    if x.dim() == 0:
        raise ValueError("all_gather: a 0-dimensional tensor has no dimension 0 to concatenate along")
    return (nranks * x.shape[0],) + tuple(x.shape[1:])


def _scattered_shape(x: torch.Tensor, nranks: int):
    if x.dim() == 0 or x.shape[0] % nranks != 0:
        raise ValueError(f"reduce_scatter: dimension 0 of shape {tuple(x.shape)} is not a multiple of {nranks} ranks")
    return (x.shape[0] // nranks,) + tuple(x.shape[1:])


# ---- the ops: real implementations, then fake ones (shape, type and device only) -----------------------------------

@torch.library.custom_op("fccl::all_reduce", mutates_args=(), device_types="cuda")
def _all_reduce(x: torch.Tensor, comm: int, op: str) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _communicator(comm).all_reduce(x.contiguous(), out, op=op)
    return out


@_all_reduce.register_fake
def _(x, comm, op):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("fccl::all_reduce_", mutates_args=("x",), device_types="cuda")
def _all_reduce_inplace(x: torch.Tensor, comm: int, op: str) -> None:
    _communicator(comm).all_reduce(x, op=op)


@_all_reduce_inplace.register_fake
def _(x, comm, op):
    return None


@torch.library.custom_op("fccl::all_gather", mutates_args=(), device_types="cuda")
def _all_gather(x: torch.Tensor, comm: int) -> torch.Tensor:
    communicator = _communicator(comm)
    out = x.new_empty(_gathered_shape(x, communicator._nranks_cached()))
    communicator.all_gather(x.contiguous(), out)
    return out


@_all_gather.register_fake
def _(x, comm):
    return x.new_empty(_gathered_shape(x, _nranks(comm)))


@torch.library.custom_op("fccl::reduce_scatter", mutates_args=(), device_types="cuda")
def _reduce_scatter(x: torch.Tensor, comm: int, op: str) -> torch.Tensor:
    communicator = _communicator(comm)
    out = x.new_empty(_scattered_shape(x, communicator._nranks_cached()))
    communicator.reduce_scatter(x.contiguous(), out, op=op)
    return out


@_reduce_scatter.register_fake
def _(x, comm, op):
    return x.new_empty(_scattered_shape(x, _nranks(comm)))


@torch.library.custom_op("fccl::broadcast", mutates_args=(), device_types="cuda")
def _broadcast(x: torch.Tensor, comm: int, root: int) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _communicator(comm).broadcast(x.contiguous(), out, root=root)
    return out


@_broadcast.register_fake
def _(x, comm, root):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("fccl::broadcast_", mutates_args=("x",), device_types="cuda")
def _broadcast_inplace(x: torch.Tensor, comm: int, root: int) -> None:
    _communicator(comm).broadcast(x, root=root)


@_broadcast_inplace.register_fake
def _(x, comm, root):
    return None


# ---- the functions to call ----------------------------------------------------------------------------------------

def _op_name(op) -> str:
    return _op_of(op).name  # checked here, outside the graph; the op takes the name


def all_reduce(x: torch.Tensor, comm: "Communicator", op="sum") -> torch.Tensor:
    """The all-reduce of x over comm's ranks, as a new tensor (x is unchanged)."""
    return torch.ops.fccl.all_reduce(x, comm._live_handle(), _op_name(op))


def all_reduce_(x: torch.Tensor, comm: "Communicator", op="sum") -> torch.Tensor:
    """The all-reduce of x in place (x must be contiguous); returns x."""
    torch.ops.fccl.all_reduce_(x, comm._live_handle(), _op_name(op))
    return x


def all_gather(x: torch.Tensor, comm: "Communicator") -> torch.Tensor:
    """Every rank's x concatenated along dimension 0, in rank order (nranks x x.shape[0] rows)."""
    return torch.ops.fccl.all_gather(x, comm._live_handle())


def reduce_scatter(x: torch.Tensor, comm: "Communicator", op="sum") -> torch.Tensor:
    """Block rank of dimension 0 (x.shape[0] / nranks rows) of the reduction of every rank's x."""
    return torch.ops.fccl.reduce_scatter(x, comm._live_handle(), _op_name(op))


def broadcast(x: torch.Tensor, comm: "Communicator", root: int = 0) -> torch.Tensor:
    """root's x on every rank, as a new tensor (x is read on root only)."""
    return torch.ops.fccl.broadcast(x, comm._live_handle(), int(root))


def broadcast_(x: torch.Tensor, comm: "Communicator", root: int = 0) -> torch.Tensor:
    """root's x into x on every rank, in place; returns x."""
    torch.ops.fccl.broadcast_(x, comm._live_handle(), int(root))
    return x
