# SPDX-License-Identifier: Apache-2.0
"""The Communicator: its creation (a unique id, the application's exchange, a torch.distributed group or an NCCL
communicator), its collectives, point-to-point calls and registrations, its teardown; and the calls around it
(mem_stats, group).

fccl.ops (torch custom ops) is imported here only inside functions, and only once torch is in the process: it
depends on the modules below this one, never on this one, so there is no import cycle."""
import ctypes
import importlib
import sys
from typing import Callable, Optional

from ._arguments import (_add_rms_norm_arguments, _all_gather_arguments, _all_reduce_arguments,
                         _all_to_all_arguments, _broadcast_arguments, _exclude_list, _gather_arguments,
                         _peer_arguments, _reduce_arguments, _reduce_scatter_arguments, _scatter_arguments,
                         _variable_arguments)
from ._buffers import _as_buffer, _is_torch_tensor, _stream_handle
from ._c_api import _MEM_STATS_FIELDS, SPLIT_NOCOLOR, _MemStatsStruct
from ._config import Config, _config_pointer
from ._device import _device_index, _OnDevice
from ._enums import Path, Result
from ._external_bootstrap import _ExternalBootstrap
from . import _moe
from ._library import FcclError, _check, _check_cuda_runtimes, _lib, load
from ._names import _bind, _lookup, _release, _reserve, _Reservation
from ._premul import _CallOp
from ._torch_compile import _compiling, _traced_stream
from ._unique_id import UniqueId


class Registration:
    """A buffer registered with fcclCommRegister on every rank; deregister() (collective) releases it. It keeps the
    buffer object alive until then, since peers map its memory."""

    def __init__(self, comm, handle, buffer):
        self._comm = comm
        self._handle = handle
        self.buffer = buffer

    def deregister(self):
        """fcclCommDeregister: collective, in registration order on every rank. Does nothing the second time, nor
        after the communicator's destroy or abort, which released it."""
        if self._handle is None or self._comm._handle is None:
            self._handle = self.buffer = None
            return
        handle, self._handle = self._handle, None
        comm_handle = self._comm._live_handle()
        _check(_lib().fcclCommDeregister(comm_handle, handle), "fcclCommDeregister", comm_handle)
        self.buffer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.deregister()


class _Creation:
    """A communicator's creation: loads libfccl (library_path), checks the process's CUDA runtimes again (torch may
    have come in since the load) and holds device current; yields the library."""

    def __init__(self, device, library_path):
        self.index = _device_index(device)
        self.library_path = library_path
        self.on_device = None

    def __enter__(self):
        library = load(self.library_path)
        _check_cuda_runtimes()
        self.on_device = _OnDevice(self.index)
        self.on_device.__enter__()
        return library

    def __exit__(self, *exc_info):
        return self.on_device.__exit__(*exc_info)


class Communicator:
    """An fccl communicator: one rank of a group of GPUs. Create it with init_rank, from_external,
    from_process_group or from_nccl, on the CUDA device that is current (torch.cuda.set_device first).

    Every communicator has a name, unique in its process: name= at creation, else an automatic one. fccl.ops' custom
    ops carry the name and find the communicator by it when they run (Communicator.by_name), so a compiled graph
    outlives the communicator: one created again under the same name serves it, in this process or the next.

    destroy() is collective and must be called by every rank; `with comm:` calls it on leaving. There is no
    destroy in __del__: garbage collection runs at a different moment on each rank, and a collective teardown
    started by it would wait for peers that are not there. Until destroy() or abort() the communicator stays
    reachable by its name, so it is not garbage collected before."""

    def __init__(self, handle, bootstrap=None, name=None):
        self._handle = handle
        self._bootstrap = bootstrap  # kept until destroy: fccl may call the callbacks inside fcclCommDestroy
        self._device = None
        self._nranks = None
        self._rank = None
        self._name = _reserve(None) if name is None else name
        _bind(self._name, self)
        if "torch" in sys.modules:  # registers the custom ops for torch.compile (fccl.ops), once
            importlib.import_module(".ops", __package__)

    @property
    def name(self) -> str:
        """The name fccl.ops' custom ops carry for this communicator (name= at creation, else an automatic one)."""
        return self._name

    @staticmethod
    def by_name(name: str) -> "Communicator":
        """The live communicator named name in this process; FcclError (InvalidUsage) naming it when no live
        communicator has it (destroyed, aborted, or never created here)."""
        return _lookup(name)

    @classmethod
    def init_rank(cls, nranks: int, rank: int, unique_id, config: Optional[Config] = None, *, device=None,
                  library_path: Optional[str] = None, name: Optional[str] = None) -> "Communicator":
        """fcclCommInitRankConfig: collective over nranks processes holding the same id (UniqueId or its bytes).
        device: the GPU (an index, "cuda:N" or a torch.device; None: the current device, torch's). library_path:
        the libfccl to load if none is loaded yet (fccl.load). name: the communicator's name in this process (None:
        an automatic one); a name a live communicator holds raises ValueError before the creation starts."""
        if not isinstance(unique_id, UniqueId):
            unique_id = UniqueId.from_bytes(unique_id)
        handle = ctypes.c_void_p()
        config_pointer = _config_pointer(config)
        with _Reservation(name) as name:
            with _Creation(device, library_path) as library:
                result = library.fcclCommInitRankConfig(ctypes.byref(handle), int(nranks), unique_id._struct(),
                                                        int(rank), config_pointer)
            _check(result, "fcclCommInitRankConfig", allowed=(Result.Success, Result.InProgress))
        return cls(handle.value, name=name)

    @classmethod
    def from_external(cls, nranks: int, rank: int, allgather: Callable[[bytes], bytes],
                      barrier: Optional[Callable[[], None]] = None, config: Optional[Config] = None, *,
                      device=None, library_path: Optional[str] = None, name: Optional[str] = None) -> "Communicator":
        """fcclCommInitExternal over the application's own exchange: allgather(send) returns every rank's send
        bytes concatenated in rank order; barrier() returns when every rank has called it (None: fccl uses a
        one-byte allgather). Both may be called again inside destroy(). An exception in either becomes the init's
        error (fcclSystemError), raised as FcclError chained to it. device, library_path and name: as init_rank's."""
        bootstrap = _ExternalBootstrap(int(nranks), allgather, barrier)
        handle = ctypes.c_void_p()
        config_pointer = _config_pointer(config)
        with _Reservation(name) as name:
            with _Creation(device, library_path) as library:
                result = library.fcclCommInitExternal(ctypes.byref(handle), int(nranks), int(rank),
                                                      ctypes.byref(bootstrap.callbacks), config_pointer)
            if result not in (Result.Success, Result.InProgress):
                bootstrap.raise_for(result, "fcclCommInitExternal")
        return cls(handle.value, bootstrap, name=name)

    @classmethod
    def from_process_group(cls, group=None, config: Optional[Config] = None, *, device=None,
                           library_path: Optional[str] = None, name: Optional[str] = None) -> "Communicator":
        """from_external over a torch.distributed group (None: the default group), with the group's ranks, through
        all_gather_object. A gloo group is the cheap choice: the exchange is a few small host messages, which an
        NCCL group would copy through the GPU. device (None: torch's current device), library_path and name: as
        init_rank's."""
        import torch.distributed as dist

        def allgather(send: bytes) -> bytes:
            gathered = [None] * dist.get_world_size(group)
            dist.all_gather_object(gathered, send, group=group)
            return b"".join(gathered)

        return cls.from_external(dist.get_world_size(group), dist.get_rank(group), allgather, None, config,
                                 device=device, library_path=library_path, name=name)

    @classmethod
    def from_nccl(cls, nccl_comm_ptr: int, config: Optional[Config] = None, *, device=None,
                  library_path: Optional[str] = None, name: Optional[str] = None) -> "Communicator":
        """fcclCommInitFromNccl: the ranks of an existing ncclComm_t (its address as an int), whose device must be
        current (or given as device=). Needs a build with NCCL support and libnccl.so.2 loaded in the process.
        library_path and name: as init_rank's."""
        handle = ctypes.c_void_p()
        config_pointer = _config_pointer(config)
        with _Reservation(name) as name:
            with _Creation(device, library_path) as library:
                result = library.fcclCommInitFromNccl(ctypes.byref(handle), ctypes.c_void_p(int(nccl_comm_ptr)),
                                                      config_pointer)
            _check(result, "fcclCommInitFromNccl", allowed=(Result.Success, Result.InProgress))
        return cls(handle.value, name=name)

    def _live_handle(self):
        if self._handle is None:
            raise FcclError(Result.InvalidUsage, f"the communicator {self._name!r} was destroyed or aborted")
        return self._handle

    def _query_int(self, function_name):
        handle = self._live_handle()
        value = ctypes.c_int()
        _check(getattr(_lib(), function_name)(handle, ctypes.byref(value)), function_name, handle)
        return value.value

    @property
    def nranks(self) -> int:
        return self._query_int("fcclCommCount")

    def _nranks_cached(self) -> int:
        if self._nranks is None:  # fixed at creation; asked on every traced op (fccl.ops)
            self._nranks = self.nranks
        return self._nranks

    @property
    def rank(self) -> int:
        return self._query_int("fcclCommUserRank")

    def _rank_cached(self) -> int:
        if self._rank is None:  # fixed at creation; asked by the variable ops' shapes (fccl.ops)
            self._rank = self.rank
        return self._rank

    @property
    def device(self) -> int:
        if self._device is None:  # fixed at creation
            self._device = self._query_int("fcclCommCuDevice")
        return self._device

    def all_reduce(self, send, recv=None, op="sum", stream=None):
        """fcclAllReduce of send into recv (None: in place), enqueued on stream; returns recv (or send).
        op: "sum", "prod", "max", "min", "avg", a RedOp, a torch.distributed.ReduceOp, or a pre-multiplied sum
        (fccl.PreMulSum(scalar), torch's ReduceOp.PREMUL_SUM with its factor). stream: None (torch's current stream
        for torch tensors, else the default stream), an int cudaStream_t, or an object with .cuda_stream or .ptr.
        Under torch.compile it is the custom op fccl.ops.all_reduce (torch tensors, stream None)."""
        if _compiling():
            from . import ops
            _traced_stream(stream, "all_reduce")
            if recv is None or recv is send:
                return ops.all_reduce_(send, self, op)
            return recv.copy_(ops.all_reduce(send, self, op))
        send_buffer, recv_buffer, reduction, stream_handle = _all_reduce_arguments(send, recv, op, stream)
        handle = self._live_handle()
        with _CallOp(reduction, send_buffer.dtype, handle) as op_value:
            result = _lib().fcclAllReduce(send_buffer.pointer or None, recv_buffer.pointer or None, send_buffer.count,
                                          int(send_buffer.dtype), op_value, handle, stream_handle or None)
            _check(result, "fcclAllReduce", handle)
        return send if recv is None else recv

    def all_gather(self, send, recv, stream=None):
        """fcclAllGather: every rank's send (count elements) into recv (nranks x count elements, rank r's at
        r x count) on every rank, enqueued on stream; returns recv. In place when send is this rank's block of recv
        (recv[rank * count:(rank + 1) * count] of a torch tensor). stream: as all_reduce's. Under torch.compile:
        fccl.ops.all_gather."""
        if _compiling():
            from . import ops
            _traced_stream(stream, "all_gather")
            return recv.copy_(ops.all_gather(send.reshape(-1), self).view(recv.shape))
        send_buffer, recv_buffer, stream_handle = _all_gather_arguments(send, recv, self.nranks, stream)
        handle = self._live_handle()
        result = _lib().fcclAllGather(send_buffer.pointer or None, recv_buffer.pointer or None, send_buffer.count,
                                      int(send_buffer.dtype), handle, stream_handle or None)
        _check(result, "fcclAllGather", handle)
        return recv

    def reduce_scatter(self, send, recv, op="sum", stream=None):
        """fcclReduceScatter: block r (recv's count elements at r x count) of every rank's send (nranks x count
        elements), reduced with op, into rank r's recv, enqueued on stream; returns recv. The bits are what
        all_reduce gives for those elements. In place when recv is this rank's block of send. op and stream: as
        all_reduce's. Under torch.compile: fccl.ops.reduce_scatter."""
        if _compiling():
            from . import ops
            _traced_stream(stream, "reduce_scatter")
            return recv.copy_(ops.reduce_scatter(send.reshape(-1), self, op).view(recv.shape))
        send_buffer, recv_buffer, reduction, stream_handle = _reduce_scatter_arguments(send, recv, op, self.nranks,
                                                                                       stream)
        handle = self._live_handle()
        with _CallOp(reduction, send_buffer.dtype, handle) as op_value:
            result = _lib().fcclReduceScatter(send_buffer.pointer or None, recv_buffer.pointer or None,
                                              recv_buffer.count, int(send_buffer.dtype), op_value, handle,
                                              stream_handle or None)
            _check(result, "fcclReduceScatter", handle)
        return recv

    def all_gather_v(self, send, recv, counts, stream=None):
        """fcclAllGatherV: rank r's send (counts[r] elements, any of them 0) into recv on every rank after the blocks
        of ranks 0..r-1, enqueued on stream; returns recv. counts: nranks ints, the same on every rank (send holds
        counts[rank] elements, recv their sum; in place when send is this rank's block of recv); or nranks int64 in
        device memory (a CUDA tensor), read when the call runs, so that a captured CUDA graph serves new counts at
        every replay: then send and recv are sized for the worst case (every count within send's elements, their
        sum within recv's; the elements of recv past the sum are left as they were eagerly, unspecified under
        torch.compile), and counts that do not fit fail the communicator (FcclError InvalidArgument from the next
        call or async_error). stream: as all_reduce's. Under torch.compile: fccl.ops.all_gather_v."""
        if _compiling():
            from . import ops
            _traced_stream(stream, "all_gather_v")
            flat = send.reshape(-1)
            result = (ops.all_gather_v(flat, counts, self, rows=recv.numel()) if _is_torch_tensor(counts)
                      else ops.all_gather_v(flat, [int(c) for c in counts], self))
            return recv.copy_(result.view(recv.shape))
        send_buffer, recv_buffer, host, device, _, stream_handle = _variable_arguments(
            send, recv, counts, None, self._nranks_cached(), self._rank_cached(), False, stream)
        handle = self._live_handle()
        if device is None:
            result = _lib().fcclAllGatherV(send_buffer.pointer or None, recv_buffer.pointer or None,
                                           (ctypes.c_size_t * len(host))(*host), int(send_buffer.dtype), handle,
                                           stream_handle or None)
            _check(result, "fcclAllGatherV", handle)
        else:
            result = _lib().fcclAllGatherVDevice(send_buffer.pointer or None, recv_buffer.pointer or None,
                                                 device.pointer or None, send_buffer.count, recv_buffer.count,
                                                 int(send_buffer.dtype), handle, stream_handle or None)
            _check(result, "fcclAllGatherVDevice", handle)
        return recv

    def reduce_scatter_v(self, send, recv, counts, op="sum", stream=None):
        """fcclReduceScatterV: block r (counts[r] elements after the blocks of ranks 0..r-1) of every rank's send,
        reduced with op in rank order (the bits of reduce_scatter with equal counts), into rank r's recv, enqueued
        on stream; returns recv. counts: as all_gather_v's (send holds their sum, recv counts[rank]; in place when
        recv is this rank's block of send), or int64 in device memory with send and recv sized for the worst case
        (their sum within send's elements, every count within recv's). op and stream: as all_reduce's. Under
        torch.compile: fccl.ops.reduce_scatter_v."""
        if _compiling():
            from . import ops
            _traced_stream(stream, "reduce_scatter_v")
            flat = send.reshape(-1)
            result = (ops.reduce_scatter_v(flat, counts, self, op, rows=recv.numel()) if _is_torch_tensor(counts)
                      else ops.reduce_scatter_v(flat, [int(c) for c in counts], self, op))
            return recv.copy_(result.view(recv.shape))
        send_buffer, recv_buffer, host, device, reduction, stream_handle = _variable_arguments(
            send, recv, counts, op, self._nranks_cached(), self._rank_cached(), True, stream)
        handle = self._live_handle()
        with _CallOp(reduction, send_buffer.dtype, handle) as op_value:
            if device is None:
                result = _lib().fcclReduceScatterV(send_buffer.pointer or None, recv_buffer.pointer or None,
                                                   (ctypes.c_size_t * len(host))(*host), int(send_buffer.dtype),
                                                   op_value, handle, stream_handle or None)
                _check(result, "fcclReduceScatterV", handle)
            else:
                result = _lib().fcclReduceScatterVDevice(send_buffer.pointer or None, recv_buffer.pointer or None,
                                                         device.pointer or None, send_buffer.count,
                                                         recv_buffer.count, int(send_buffer.dtype), op_value, handle,
                                                         stream_handle or None)
                _check(result, "fcclReduceScatterVDevice", handle)
        return recv

    def broadcast(self, send, recv=None, root=0, stream=None):
        """fcclBroadcast: root's send into recv on every rank (root's too), enqueued on stream; returns recv (send
        when recv is None: in place, the one buffer on every rank). send is read on root only: other ranks may pass
        None with a recv. root: the same rank on every rank. stream: as all_reduce's. Under torch.compile:
        fccl.ops.broadcast."""
        if _compiling():
            from . import ops
            _traced_stream(stream, "broadcast")
            if recv is None or recv is send:
                return ops.broadcast_(send, self, root)
            return recv.copy_(ops.broadcast(send if send is not None else recv, self, root))
        send_buffer, recv_buffer, stream_handle = _broadcast_arguments(send, recv, root, self.rank, self.nranks,
                                                                       stream)
        handle = self._live_handle()
        send_pointer = send_buffer.pointer if send_buffer is not None else 0
        result = _lib().fcclBroadcast(send_pointer or None, recv_buffer.pointer or None, recv_buffer.count,
                                      int(recv_buffer.dtype), int(root), handle, stream_handle or None)
        _check(result, "fcclBroadcast", handle)
        return send if recv is None else recv

    def reduce(self, send, recv=None, root=0, op="sum", stream=None):
        """fcclReduce: every rank's send reduced with op into root's recv (None on the root: in place), enqueued on
        stream; returns recv on the root (send when in place), None elsewhere, where recv is not used. The root gets
        the bits all_reduce gives. op and stream: as all_reduce's (pre-multiplied sums included)."""
        send_buffer, recv_buffer, reduction, stream_handle = _reduce_arguments(send, recv, op, root, self.rank,
                                                                               self._nranks_cached(), stream)
        handle = self._live_handle()
        recv_pointer = recv_buffer.pointer if recv_buffer is not None else 0
        with _CallOp(reduction, send_buffer.dtype, handle) as op_value:
            result = _lib().fcclReduce(send_buffer.pointer or None, recv_pointer or None, send_buffer.count,
                                       int(send_buffer.dtype), op_value, int(root), handle, stream_handle or None)
            _check(result, "fcclReduce", handle)
        if self.rank != root:
            return None
        return send if recv is None else recv

    def bcast(self, buf, root=0, stream=None):
        """fcclBcast: root's buf into buf on every rank (NCCL's in-place ncclBcast; broadcast(buf) is the same call);
        returns buf. stream: as all_reduce's."""
        _, buffer, stream_handle = _broadcast_arguments(buf, None, root, self.rank, self._nranks_cached(), stream)
        handle = self._live_handle()
        _check(_lib().fcclBcast(buffer.pointer or None, buffer.count, int(buffer.dtype), int(root), handle,
                                stream_handle or None), "fcclBcast", handle)
        return buf

    def gather(self, send, recv=None, root=0, stream=None):
        """fcclGather: every rank's send (count elements) into root's recv (nranks x count elements, rank r's at
        r x count), enqueued on stream; returns recv on the root, None elsewhere (recv is not used there and may be
        None). In place when send is the root's block of recv. stream: as all_reduce's."""
        send_buffer, recv_buffer, stream_handle = _gather_arguments(send, recv, root, self.rank,
                                                                    self._nranks_cached(), stream)
        handle = self._live_handle()
        recv_pointer = recv_buffer.pointer if recv_buffer is not None else 0
        _check(_lib().fcclGather(send_buffer.pointer or None, recv_pointer or None, send_buffer.count,
                                 int(send_buffer.dtype), int(root), handle, stream_handle or None), "fcclGather",
               handle)
        return recv if self.rank == root else None

    def scatter(self, send, recv, root=0, stream=None):
        """fcclScatter: block r (recv's count elements at r x count) of root's send (nranks x count elements) into
        rank r's recv, enqueued on stream; returns recv. send is read on the root only (None elsewhere is fine); in
        place when recv is the root's block of send. stream: as all_reduce's."""
        send_buffer, recv_buffer, stream_handle = _scatter_arguments(send, recv, root, self.rank,
                                                                     self._nranks_cached(), stream)
        handle = self._live_handle()
        send_pointer = send_buffer.pointer if send_buffer is not None else 0
        _check(_lib().fcclScatter(send_pointer or None, recv_buffer.pointer or None, recv_buffer.count,
                                  int(recv_buffer.dtype), int(root), handle, stream_handle or None), "fcclScatter",
               handle)
        return recv

    def all_reduce_add_rms_norm(self, input, output, residual=None, weight=None, eps=1e-6, scale=None,
                                scale_mode=None, hidden=None, stream=None):
        """fcclAllReduceAddRMSNorm (docs/fused.md): r' = residual + the all-reduce sum of input (written into
        residual), output = r' * rsqrt(mean(r'^2) + eps) * weight, row by row, enqueued on stream; returns output.
        input: tokens x hidden elements of float16, bfloat16 or float32 (hidden: its last dimension unless given);
        residual and weight (hidden elements) of the same type, or None; output: input's type, or float8e4m3
        (torch.float8_e4m3fn) with scale_mode "static" (scale: one float32 the kernel reads) or "dynamic" (scale:
        tokens float32, written as max|y| / 448 per token). stream: as all_reduce's."""
        (input_buffer, residual_buffer, weight_buffer, output_buffer, tokens, hidden, eps, mode, scale_buffer,
         stream_handle) = _add_rms_norm_arguments(input, residual, weight, output, hidden, eps, scale, scale_mode,
                                                  stream)
        handle = self._live_handle()

        def pointer(buffer):
            return buffer.pointer or None if buffer is not None else None

        result = _lib().fcclAllReduceAddRMSNorm(pointer(input_buffer), pointer(residual_buffer),
                                                pointer(weight_buffer), pointer(output_buffer), tokens, hidden, eps,
                                                int(input_buffer.dtype), int(output_buffer.dtype), int(mode),
                                                pointer(scale_buffer), handle, stream_handle or None)
        _check(result, "fcclAllReduceAddRMSNorm", handle)
        return output

    def moe_layout(self, num_experts, topk, hidden, max_tokens_per_rank, *, padded=False, expert_alignment=1,
                   blocks=0, name=None):
        """fcclMoeLayoutCreate (docs/moe.md): a MoeLayout of num_experts experts (a multiple of nranks; rank r holds
        [r x L, (r + 1) x L)), topk experts per token, rows of hidden elements and at most max_tokens_per_rank tokens
        per rank; received rows packed by expert (each expert's first row a multiple of expert_alignment), or padded
        (expert e at row e x nranks x max_tokens_per_rank). blocks: the SM budget of calls that pass 0 (0: fccl's
        default). name: the layout's name for fccl.ops (None: an automatic one). Collective, same arguments on every
        rank."""
        return _moe._create_layout(self, num_experts, topk, hidden, max_tokens_per_rank, padded, expert_alignment,
                                   blocks, name)

    def moe_dispatch(self, layout, x, topk_idx, topk_weights=None, x_scales=None, *, blocks=0, stream=None):
        """fcclMoeDispatch: every token (row of x: tokens x hidden, bfloat16, float16 or float8_e4m3fn with x_scales,
        tokens x hidden / 128 float32) to the ranks holding its experts (topk_idx: tokens x topk int32 or int64, -1
        for none); returns a MoeDispatchResult of new tensors, rows grouped by local expert, with counts on the
        device: no host synchronisation, capturable in a CUDA graph. topk_weights (tokens x topk float32) are
        carried to the result's weights. Collective; every rank calls it, with 0 tokens too."""
        if _compiling():
            from . import ops
            _traced_stream(stream, "moe_dispatch")
            return ops.moe_dispatch(x, layout, topk_idx, topk_weights, x_scales, blocks=blocks)
        return _moe._dispatch(self, layout, x, topk_idx, topk_weights, x_scales, blocks, stream)

    def moe_combine(self, layout, y, topk_weights=None, *, tokens=None, blocks=0, stream=None):
        """fcclMoeCombine: y (recv_rows x hidden, bfloat16 or float16) holds each expert's output in the rows of the
        layout's last dispatch; returns a new tokens x hidden tensor, each token's expert outputs weighted by
        topk_weights (None: 1) and summed in fp32 in ascending expert order, rounded once: bitwise reproducible.
        tokens: this rank's tokens of that dispatch (None: as the last dispatch through this layout). Collective."""
        if _compiling():
            from . import ops
            _traced_stream(stream, "moe_combine")
            return ops.moe_combine(y, layout, topk_weights, tokens=tokens, blocks=blocks)
        return _moe._combine(self, layout, y, topk_weights, tokens, blocks, stream)

    @property
    def path(self) -> Path:
        """fcclCommGetPath: the engine that carries this communicator (Path.fccl, Path.nccl or Path.hier)."""
        return self._path_and_reason()[0]

    @property
    def path_reason(self) -> str:
        """fcclCommGetPath's reason: why the path was chosen."""
        return self._path_and_reason()[1]

    def _path_and_reason(self):
        handle = self._live_handle()
        value, reason = ctypes.c_int(), ctypes.c_char_p()
        _check(_lib().fcclCommGetPath(handle, ctypes.byref(value), ctypes.byref(reason)), "fcclCommGetPath", handle)
        return Path(value.value), (reason.value or b"").decode(errors="replace")

    def shrink(self, exclude, config: Optional[Config] = None, abort: bool = False,
               name: Optional[str] = None) -> "Communicator":
        """fcclCommShrink: the ranks not in exclude (ranks of this communicator, not this one) make a new communicator
        of their own, without a new unique id; after a peer died, call it on the failed communicator with the dead
        ranks. Collective over the survivors. abort: FCCL_SHRINK_ABORT (this communicator fails first, so its kernels
        stop). This communicator stays to be destroyed or aborted. config None: this one's timeout, log name and
        allow_shared_device. name: the new communicator's name (None: an automatic one; this one's is still taken
        until this one is destroyed)."""
        ranks = [int(r) for r in _exclude_list(exclude)]
        handle = self._live_handle()
        array = (ctypes.c_int * max(1, len(ranks)))(*ranks)
        new = ctypes.c_void_p()
        config_pointer = _config_pointer(config)
        with _Reservation(name) as name:
            result = _lib().fcclCommShrink(handle, array if ranks else None, len(ranks), ctypes.byref(new),
                                           config_pointer, 1 if abort else 0)
            _check(result, "fcclCommShrink", handle)
        return Communicator(new.value, name=name)

    def split(self, color: Optional[int], key: int = 0, config: Optional[Config] = None,
              name: Optional[str] = None) -> Optional["Communicator"]:
        """fcclCommSplit (ncclCommSplit's semantics): the ranks that pass the same color (an int >= 0) make a new
        communicator, ordered by key, then by their rank here; color None (or fccl.SPLIT_NOCOLOR) joins none and
        returns None. Collective: every rank of this communicator calls it. The new one runs on the path its own
        ranks allow, on this one's device, and this one stays usable. config None: this one's options; with blocking
        False the call returns at once and the new communicator's async_error() is InProgress until it is ready
        (None's rank: this one's async_error()). name: the new communicator's name (None: an automatic one)."""
        nocolor = color is None or int(color) == SPLIT_NOCOLOR
        handle = self._live_handle()
        new = ctypes.c_void_p()
        config_pointer = _config_pointer(config)
        if nocolor:
            result = _lib().fcclCommSplit(handle, SPLIT_NOCOLOR, int(key), ctypes.byref(new), config_pointer)
            _check(result, "fcclCommSplit", handle, allowed=(Result.Success, Result.InProgress))
            return None
        with _Reservation(name) as name:
            result = _lib().fcclCommSplit(handle, int(color), int(key), ctypes.byref(new), config_pointer)
            _check(result, "fcclCommSplit", handle, allowed=(Result.Success, Result.InProgress))
        return Communicator(new.value, name=name)

    def finalize(self):
        """fcclCommFinalize (ncclCommFinalize's semantics): finishes this communicator's work with its peers, so that
        destroy() afterwards is local and quick; collective. A non-blocking communicator returns at once with
        async_error() InProgress until it is done. The communicator takes no collective call afterwards."""
        handle = self._live_handle()
        _check(_lib().fcclCommFinalize(handle), "fcclCommFinalize", handle, allowed=(Result.Success, Result.InProgress))

    def send(self, send, peer: int, stream=None):
        """fcclSend of send's elements to rank peer, which posts the matching recv; through NCCL on every path (on
        the fccl path the communicator needs FCCL_NCCL_COMM=init, docs/paths.md). stream: as all_reduce's."""
        buffer, stream_handle = _peer_arguments(send, peer, self._nranks_cached(), stream, "send")
        handle = self._live_handle()
        _check(_lib().fcclSend(buffer.pointer or None, buffer.count, int(buffer.dtype), int(peer), handle,
                               stream_handle or None), "fcclSend", handle)

    def recv(self, recv, peer: int, stream=None):
        """fcclRecv of recv's elements from rank peer; returns recv. As send otherwise."""
        buffer, stream_handle = _peer_arguments(recv, peer, self._nranks_cached(), stream, "recv")
        handle = self._live_handle()
        _check(_lib().fcclRecv(buffer.pointer or None, buffer.count, int(buffer.dtype), int(peer), handle,
                               stream_handle or None), "fcclRecv", handle)
        return recv

    def all_to_all(self, send, recv, stream=None):
        """fcclAllToAll: block p of this rank's send (send has nranks equal blocks) lands in rank p's recv at block
        rank; returns recv. send and recv are separate buffers of the same size. As send otherwise."""
        send_buffer, recv_buffer, count, stream_handle = _all_to_all_arguments(send, recv, self._nranks_cached(),
                                                                              stream)
        handle = self._live_handle()
        _check(_lib().fcclAllToAll(send_buffer.pointer or None, recv_buffer.pointer or None, count,
                                   int(send_buffer.dtype), handle, stream_handle or None), "fcclAllToAll", handle)
        return recv

    def barrier(self, stream=None):
        """fcclBarrier on stream. None: torch's current stream of the communicator's device when torch has
        initialised CUDA in this process (so it is captured inside torch.cuda.graph), else the default stream."""
        handle = self._live_handle()
        torch = sys.modules.get("torch")
        if stream is None and torch is not None and torch.cuda.is_initialized():
            stream_handle = torch.cuda.current_stream(self.device).cuda_stream
        else:
            stream_handle = _stream_handle(stream)
        _check(_lib().fcclBarrier(handle, stream_handle or None), "fcclBarrier", handle)

    def register(self, buf) -> Registration:
        """fcclCommRegister of buf's bytes (any buffer kind all_reduce takes). Collective: every rank registers
        its own buffer, in the same order. Collectives on it (all-reduce, all-gather, reduce-scatter, broadcast; send
        and recv both inside registered buffers, at the same offsets on every rank) then move the data in place."""
        buffer = _as_buffer(buf, "buf")
        if buffer.nbytes == 0:
            raise ValueError("buf: cannot register an empty buffer")
        handle = self._live_handle()
        registration = ctypes.c_void_p()
        result = _lib().fcclCommRegister(handle, buffer.pointer, buffer.nbytes, ctypes.byref(registration))
        _check(result, "fcclCommRegister", handle)
        return Registration(self, registration.value, buf)

    def mem_stats(self) -> dict:
        """fcclCommGetMemStats for this communicator (commRegistrations, commGraphRegistrations, ...)."""
        return mem_stats(self)

    def async_error(self) -> Result:
        """fcclCommGetAsyncError: Success, InProgress (non-blocking init running) or the recorded error."""
        handle = self._live_handle()
        value = ctypes.c_int()
        _check(_lib().fcclCommGetAsyncError(handle, ctypes.byref(value)), "fcclCommGetAsyncError", handle)
        return Result(value.value)

    def abort(self):
        """fcclCommAbort: stops waits and kernels at once and frees everything local without the peers."""
        _release(self._name, self)
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        try:
            _check(_lib().fcclCommAbort(handle), "fcclCommAbort")
        finally:
            self._bootstrap = None

    def destroy(self):
        """fcclCommDestroy: collective teardown, then free. Does nothing the second time; the communicator is
        freed even when a teardown step with the peers fails (the error is raised all the same)."""
        _release(self._name, self)  # from now on the name may be given to a new communicator
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        try:
            result = _lib().fcclCommDestroy(handle)
            if result != Result.Success:
                if self._bootstrap is not None:
                    self._bootstrap.raise_for(result, "fcclCommDestroy")
                _check(result, "fcclCommDestroy")
        finally:
            self._bootstrap = None  # only now: the teardown may have called the callbacks

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.destroy()

    def __repr__(self):
        if self._handle is None:
            return f"<fccl.Communicator {self._name!r} destroyed>"
        return f"<fccl.Communicator {self._name!r} rank {self.rank} of {self.nranks} on device {self.device}>"


def mem_stats(comm: Optional["Communicator"] = None) -> dict:
    """fcclCommGetMemStats: the process's peer-mapping numbers, and comm's own when given (else those are 0)."""
    stats = _MemStatsStruct()
    stats.size = ctypes.sizeof(_MemStatsStruct)  # fields beyond size are not written
    handle = comm._live_handle() if comm is not None else None
    _check(_lib().fcclCommGetMemStats(handle, ctypes.byref(stats)), "fcclCommGetMemStats", handle)
    return {name: getattr(stats, name) for name in _MEM_STATS_FIELDS}


class group:
    """fcclGroupStart on entering, fcclGroupEnd on leaving (also when the block raises): the NCCL calls inside
    (send, recv, all_to_all, and every call of a communicator on the NCCL path) are issued together. Groups nest."""

    def __enter__(self):
        _check(_lib().fcclGroupStart(), "fcclGroupStart")
        return self

    def __exit__(self, kind, value, traceback):
        result = _lib().fcclGroupEnd()
        if kind is None:  # an exception from the block is the one to see; the group is ended all the same
            _check(result, "fcclGroupEnd")
        return False
