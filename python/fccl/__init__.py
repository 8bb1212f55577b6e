# SPDX-License-Identifier: Apache-2.0
"""fccl from Python: a ctypes layer over libfccl's C API (include/fccl.h).

fccl is a collective communication library for the GPUs of one NVLink domain with an NCCL-style API. This package
wraps it with the standard library only; PyTorch is optional and imported only when a call needs it (a torch
tensor as a buffer, ``Communicator.from_process_group``).

The library is the one given to ``fccl.load(path)`` or to a communicator's ``library_path=``, else the one the
environment variable FCCL_LIBRARY names (a path to libfccl.so.0), else the one inside this package (a wheel built by
scripts/python-wheel), else ``libfccl.so.0`` through the dynamic loader's search (LD_LIBRARY_PATH, the installed
prefix). It is loaded at the first call, so ``import fccl`` itself never fails
for want of it. Loading refuses a libfccl built for another CUDA major version than the torch in the process.

Example, one process per GPU started by torchrun (``torchrun --nproc-per-node 2 example.py``)::

    import torch, torch.distributed as dist
    import fccl

    dist.init_process_group("gloo")
    rank, nranks = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    box = [fccl.UniqueId.create() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    comm = fccl.Communicator.init_rank(nranks, rank, box[0])

    x = torch.randn(1 << 20, dtype=torch.bfloat16, device="cuda")
    comm.all_reduce(x)                        # eager, in place, on torch's current stream
    gathered = torch.empty(nranks * x.numel(), dtype=x.dtype, device="cuda")
    comm.all_gather(x, gathered)              # rank r's x at gathered[r * x.numel():]
    mine = torch.empty_like(x[: x.numel() // nranks])
    comm.reduce_scatter(x, mine, op="sum")    # this rank's block of the sum of every rank's x
    comm.broadcast(x, root=0)                 # rank 0's x everywhere, in place
    comm.all_reduce(x, op=fccl.PreMulSum(1 / nranks))  # the mean: each input times 1/nranks, summed (FSDP's way)
    comm.reduce(x, root=0)                    # the sum on rank 0 only
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        comm.all_reduce(x)                    # captured on the capture stream
    g.replay()
    del g
    comm.destroy()                            # collective: every rank calls it

A collective on plain (unregistered) tensors captured into a CUDA graph registers them with every rank for the
graph's lifetime (FCCL_GRAPH_REGISTER, docs/collectives.md), which makes replays as fast as registered buffers. That
registration is a host exchange during capture: every rank must capture the same calls, in the same order.

Buffers: a CUDA torch.Tensor (contiguous), any object with ``__cuda_array_interface__`` (C-contiguous), or an
explicit ``(pointer, count, dtype)`` tuple. Every failing call raises FcclError with the result code and fccl's own
words for the cause (fcclGetLastError). docs/python.md has the details.

Every communicator has a name (``name=`` at creation, else an automatic one), which the torch custom ops of
``fccl.ops`` carry instead of its address, so that graphs compiled with them outlive the process and the
communicator. ``fccl.server.CustomAllReduce`` is the custom all-reduce of an inference server (vLLM's contract).
"""

# The package is split by job into private modules; this file is its public face: every name a program uses is here.
from ._c_api import CONFIG_MAGIC, SPLIT_NOCOLOR, UNIQUE_ID_BYTES
from ._communicator import Communicator, Registration, group, mem_stats
from ._config import Config
from ._enums import DataType, Path, RedOp, Result, ScaleMode
from ._library import FcclError, error_string, load, version
from ._premul import PreMulSum
from ._unique_id import UniqueId

__version__ = "0.1.0"  # the C library's version this layer is written against (version() is the loaded one's)

__all__ = [
    "Result", "DataType", "RedOp", "PreMulSum", "ScaleMode", "Path", "FcclError", "version", "error_string",
    "UniqueId", "Config", "Communicator", "Registration", "mem_stats", "load", "group", "UNIQUE_ID_BYTES",
    "CONFIG_MAGIC", "SPLIT_NOCOLOR",
]

# Public classes and functions name this package as their home, as they did when it was one file: fccl.FcclError in
# tracebacks, help() and pickles, whichever module defines them.
for _public in (globals()[name] for name in __all__):
    if isinstance(_public, type) or callable(_public):
        _public.__module__ = __name__
del _public
