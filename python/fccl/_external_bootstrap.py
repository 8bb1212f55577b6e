# SPDX-License-Identifier: Apache-2.0
"""fcclCommInitExternal's rendezvous through the application's own exchange: Python allgather and barrier
functions as the C callbacks fccl calls."""
import ctypes
from typing import Callable, Optional

from ._c_api import _ALLGATHER_FN, _BARRIER_FN, _BootstrapCallbacksStruct
from ._enums import Result
from ._library import FcclError, _last_error


class _ExternalBootstrap:
    """The Python allgather/barrier as fcclBootstrapCallbacks_t. The CFUNCTYPE objects live as long as this object,
    which the communicator keeps until destroy: fccl calls them in init and may call them in fcclCommDestroy.
    An exception cannot cross C: it becomes fcclSystemError, and is kept in .error for the FcclError raised."""

    def __init__(self, nranks: int, allgather: Callable[[bytes], bytes], barrier: Optional[Callable[[], None]]):
        self.nranks = nranks
        self.allgather = allgather
        self.barrier = barrier
        self.error = None
        self.allgather_fn = _ALLGATHER_FN(self._allgather)
        self.barrier_fn = _BARRIER_FN(self._barrier) if barrier is not None else _BARRIER_FN()
        self.callbacks = _BootstrapCallbacksStruct(None, self.allgather_fn, self.barrier_fn)

    def _allgather(self, _context, sendbuf, recvbuf, bytes_per_rank):
        try:
            gathered = bytes(self.allgather(ctypes.string_at(sendbuf, bytes_per_rank) if bytes_per_rank else b""))
            expected = bytes_per_rank * self.nranks
            if len(gathered) != expected:
                raise ValueError(f"allgather returned {len(gathered)} bytes, expected {expected} "
                                 f"({self.nranks} ranks x {bytes_per_rank})")
            ctypes.memmove(recvbuf, gathered, expected)
            return Result.Success
        except BaseException as exc:  # noqa: B902 - anything, KeyboardInterrupt included, must not reach C
            self.error = exc
            return Result.SystemError

    def _barrier(self, _context):
        try:
            self.barrier()
            return Result.Success
        except BaseException as exc:
            self.error = exc
            return Result.SystemError

    def raise_for(self, result, call):
        """FcclError for a failed init or destroy, naming the callback's exception when there was one."""
        message = _last_error(None)
        cause, self.error = self.error, None
        if cause is not None:
            message = f"{message}; callback raised {type(cause).__name__}: {cause}" if message else \
                f"callback raised {type(cause).__name__}: {cause}"
        raise FcclError(result, message, call) from cause
