# SPDX-License-Identifier: Apache-2.0
"""fccl as an inference server's custom all-reduce: the contract vLLM's CUDA communicator drives its custom
all-reduce through (should_custom_ar, custom_all_reduce, capture, close, disabled), plus the fused all-reduce +
residual add + RMSNorm (+ FP8) in the argument order of vLLM's fused_add_rms_norm ops.

    from fccl.server import CustomAllReduce

    ar = CustomAllReduce.from_process_group(cpu_group, device=local_rank, name="tp")  # a gloo group is enough
    out = ar.custom_all_reduce(x)            # the sum over the ranks as a new tensor, or None: use your own path
    with ar.capture():                       # around the engine's CUDA graph captures
        ...
    ar.close()                               # collective when this object created the communicator

Every method returns None (and does nothing) where fccl is not the one to do the call, so the engine's own path
(NCCL, torch.distributed) takes over: a tensor that should_custom_ar refuses, a communicator on the NCCL path, one
rank, a closed object. docs/python.md has the contract, the differences from vLLM's own custom all-reduce, and how an
engine plugs this in.
"""
import contextlib
from typing import Optional, Tuple

import torch

from ._communicator import Communicator
from ._enums import Path, Result
from ._library import FcclError

__all__ = ["CustomAllReduce", "DEFAULT_MAX_SIZE"]

DEFAULT_MAX_SIZE = 8 << 20  # bytes: the largest all-reduce taken by default (vLLM's custom all-reduce's default)
_TYPES = (torch.float16, torch.bfloat16, torch.float32)  # what servers reduce and what the fused norm takes
_MAX_ROW_BYTES = 65536  # fcclAllReduceAddRMSNorm's largest row (fccl.h)


def _check_max_size(max_size):
    if not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < 1:
        raise ValueError(f"max_size must be a positive number of bytes, got {max_size!r}")


class CustomAllReduce:
    """A communicator's all-reduce behind an inference server's custom all-reduce contract.

    comm: a fccl.Communicator whose ranks are the tensor-parallel group, one process per rank. max_size: the largest
    tensor, in bytes, that should_custom_ar accepts. The communicator stays the caller's unless this object created
    it (from_process_group), in which case close() destroys it.

    Not thread safe, like the communicator: one thread drives it (the engine's model runner)."""

    def __init__(self, comm: Communicator, *, max_size: int = DEFAULT_MAX_SIZE, _owns_communicator: bool = False):
        if not isinstance(comm, Communicator):
            raise TypeError(f"comm must be a fccl.Communicator, not {type(comm).__name__}")
        _check_max_size(max_size)
        self.comm = comm
        self.max_size = max_size
        self.world_size = comm.nranks
        self.rank = comm.rank
        self.device = torch.device("cuda", comm.device)
        self._owns_communicator = _owns_communicator
        path = comm.path
        # What should_custom_ar reads on every call, asked of the library once: it must stay cheap and traceable.
        if self.world_size < 2:
            self.disabled_reason = "one rank: there is nothing to reduce"
        elif path != Path.fccl:
            self.disabled_reason = f"the communicator is on the {path.name} path ({comm.path_reason})"
        else:
            self.disabled_reason = None
        self.disabled = self.disabled_reason is not None
        self._closed = False
        self._capturing = False
        self.captured_calls = 0  # calls captured into CUDA graphs inside capture(), all of them since creation

    @classmethod
    def from_process_group(cls, group=None, *, device=None, max_size: int = DEFAULT_MAX_SIZE,
                           name: Optional[str] = None, config=None, library_path: Optional[str] = None):
        """A communicator over a torch.distributed group (Communicator.from_process_group: collective over the
        group; a gloo group is enough) owned by the new object, which close() destroys. device: the GPU (None:
        torch's current device); name: the communicator's name (fccl.ops); config, library_path: as
        Communicator.init_rank's."""
        _check_max_size(max_size)  # before the creation: nothing collective to undo
        comm = Communicator.from_process_group(group, config, device=device, library_path=library_path, name=name)
        return cls(comm, max_size=max_size, _owns_communicator=True)

    # ---- the all-reduce -------------------------------------------------------------------------------------------

    def _takes(self, tensor) -> bool:
        return (not self.disabled and isinstance(tensor, torch.Tensor) and tensor.dtype in _TYPES
                and tensor.is_cuda and tensor.device.index == self.device.index and tensor.is_contiguous())

    def should_custom_ar(self, inp: torch.Tensor) -> bool:
        """Whether custom_all_reduce takes inp: a contiguous float16, bfloat16 or float32 CUDA tensor of the
        communicator's device, of 1 to max_size bytes, while this object is enabled (2 ranks or more, the
        communicator on fccl's own path, not closed). Any element count: there is no multiple-of-16-bytes rule."""
        if not self._takes(inp):
            return False
        nbytes = inp.numel() * inp.element_size()
        return 0 < nbytes <= self.max_size

    def custom_all_reduce(self, inp: torch.Tensor) -> Optional[torch.Tensor]:
        """The sum of inp over the ranks as a new tensor (inp is unchanged), enqueued on torch's current stream; None
        when should_custom_ar(inp) is False. Collective: every rank calls it with the same shape and type.
        Captured into a CUDA graph like any fccl call; under torch.compile it is fccl.ops.all_reduce."""
        if not self.should_custom_ar(inp):
            return None
        if torch.compiler.is_compiling():
            from . import ops
            return ops.all_reduce(inp, self.comm)
        out = torch.empty_like(inp)
        self.comm.all_reduce(inp, out)
        self._count_if_captured()
        return out

    def _count_if_captured(self):
        if self._capturing and torch.cuda.is_current_stream_capturing():
            self.captured_calls += 1

    # ---- CUDA graphs ----------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def capture(self):
        """Around an engine's CUDA graph captures (all the batch sizes of one capture pass), as vLLM's
        graph_capture() enters its custom all-reduce's capture(). Inside, calls captured by torch.cuda.graph run
        on the capture stream; eager calls between captures (warm-up runs) are real all-reduces.

        fccl registers a captured call's buffers when the call is captured, not at the end as vLLM's custom
        all-reduce does: a captured kernel holds the peers' addresses as arguments (CUDA graphs keep them by value),
        so they must be known at that moment. Above the size where it pays (1 MiB for 2 ranks) the call exchanges
        with its peers during capture, registers both tensors with every rank for the graph's lifetime
        (FCCL_GRAPH_REGISTER) and replays read them in place; below it registered and plain buffers run the same
        algorithm, so smaller calls replay through staging. The registrations end when the graph is destroyed.

        Leaving the block is the end of capture: the ranks check together (one small all-reduce) that each captured
        the same number of calls inside it, and raise FcclError (InvalidUsage) on every rank if not, since such
        graphs could not replay together. Collective; skipped when the block raises. Not reentrant."""
        if self._capturing:
            raise RuntimeError("CustomAllReduce.capture() is already active: it does not nest")
        captured_before = self.captured_calls
        self._capturing = True
        try:
            yield self
        finally:
            self._capturing = False
        if not self.disabled:
            self._check_capture(self.captured_calls - captured_before)

    def _check_capture(self, captured: int):
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("CustomAllReduce.capture() was left while the current stream is still being captured; "
                               "leave it after the torch.cuda.graph blocks")
        counts = torch.tensor([captured, -captured], dtype=torch.int64, device=self.device)
        self.comm.all_reduce(counts, op="max")
        most, fewest = (int(value) for value in counts.tolist())
        fewest = -fewest
        if most != fewest:
            raise FcclError(Result.InvalidUsage, f"the ranks captured different numbers of calls inside capture(): "
                            f"between {fewest} and {most} (this rank {captured}); their graphs cannot replay "
                            "together", "CustomAllReduce.capture")

    @property
    def graph_registrations(self) -> int:
        """Tensors the communicator holds registered for CUDA graphs that are still alive (commGraphRegistrations)."""
        return self.comm.mem_stats()["commGraphRegistrations"]

    # ---- the fused all-reduce + residual add + RMSNorm -------------------------------------------------------------

    def should_fuse_add_rms_norm(self, input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> bool:
        """Whether the all_reduce_fused_add_rms_norm calls take these: input and residual contiguous tensors of the
        same shape (..., hidden), weight of hidden elements, all of one type (float16, bfloat16 or float32) on the
        communicator's device, a row of at most 64 KiB, at least one element, this object enabled. Any number of
        tokens: max_size does not apply (the fused call moves the rows in rounds)."""
        if not (self._takes(input) and self._takes(residual) and self._takes(weight)):
            return False
        if input.dim() < 1 or input.numel() == 0 or residual.shape != input.shape:
            return False
        hidden = input.shape[-1]
        if residual.dtype != input.dtype or weight.dtype != input.dtype or tuple(weight.shape) != (hidden,):
            return False
        return hidden * input.element_size() <= _MAX_ROW_BYTES

    def all_reduce_fused_add_rms_norm(self, input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                                      epsilon: float) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """all_reduce(input), then vLLM's fused_add_rms_norm(that, residual, weight, epsilon), in one call
        (fcclAllReduceAddRMSNorm, docs/fused.md): residual becomes residual + the sum over the ranks of input
        (in place, as in vLLM), and the RMSNorm of it times weight is returned as a new tensor shaped like input;
        input is unchanged. Returns (output, residual), or None when should_fuse_add_rms_norm is False. Collective."""
        if not self.should_fuse_add_rms_norm(input, residual, weight):
            return None
        output = torch.empty_like(input)
        self.comm.all_reduce_add_rms_norm(input, output, residual=residual, weight=weight, eps=epsilon)
        self._count_if_captured()
        return output, residual

    def all_reduce_fused_add_rms_norm_static_fp8_quant(self, input: torch.Tensor, residual: torch.Tensor,
                                                       weight: torch.Tensor, scale: torch.Tensor, epsilon: float
                                                       ) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """As all_reduce_fused_add_rms_norm with vLLM's fused_add_rms_norm_static_fp8_quant's output: the normalised
        rows divided by scale (one float32 on the device, read when the call runs) and saturated to
        torch.float8_e4m3fn. Returns (output, residual), or None as all_reduce_fused_add_rms_norm does, or when scale
        is not one float32 element on the communicator's device."""
        if not self.should_fuse_add_rms_norm(input, residual, weight) or not self._is_scale(scale, 1):
            return None
        output = torch.empty(input.shape, dtype=torch.float8_e4m3fn, device=input.device)
        self.comm.all_reduce_add_rms_norm(input, output, residual=residual, weight=weight, eps=epsilon, scale=scale,
                                          scale_mode="static")
        self._count_if_captured()
        return output, residual

    def all_reduce_fused_add_rms_norm_dynamic_fp8_quant(self, input: torch.Tensor, residual: torch.Tensor,
                                                        weight: torch.Tensor, epsilon: float
                                                        ) -> Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """As all_reduce_fused_add_rms_norm with a per-token FP8 output, as vLLM's rms_norm_dynamic_per_token_quant
        gives it: scales (tokens x 1 float32, tokens = input.numel() / hidden) hold max|y| / 448 of each token's
        normalised row y, and the output (torch.float8_e4m3fn) y / scale. A row of zeros has scale 0 and outputs 0;
        there is no scale_ub. Returns (output, scales, residual), or None as all_reduce_fused_add_rms_norm does."""
        if not self.should_fuse_add_rms_norm(input, residual, weight):
            return None
        output = torch.empty(input.shape, dtype=torch.float8_e4m3fn, device=input.device)
        scales = torch.empty((input.numel() // input.shape[-1], 1), dtype=torch.float32, device=input.device)
        self.comm.all_reduce_add_rms_norm(input, output, residual=residual, weight=weight, eps=epsilon, scale=scales,
                                          scale_mode="dynamic")
        self._count_if_captured()
        return output, scales, residual

    def _is_scale(self, scale, count) -> bool:
        return (isinstance(scale, torch.Tensor) and scale.dtype == torch.float32 and scale.is_cuda
                and scale.device.index == self.device.index and scale.numel() == count and scale.is_contiguous())

    # ---- the end --------------------------------------------------------------------------------------------------

    def close(self):
        """Disables this object (every call returns None from now on) and, when it created its communicator
        (from_process_group), destroys that: collective then, every rank calls it. A second call does nothing. Not
        called from __del__, for the reason Communicator gives. CUDA graphs captured through it must not be replayed
        after the communicator is destroyed."""
        if self._closed:
            return
        self._closed = True
        self.disabled, self.disabled_reason = True, "closed"
        if self._owns_communicator:
            self.comm.destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        state = f"disabled: {self.disabled_reason}" if self.disabled else f"max_size {self.max_size}"
        return f"<fccl.server.CustomAllReduce {self.comm.name!r} rank {self.rank} of {self.world_size}, {state}>"
