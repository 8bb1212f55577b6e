# SPDX-License-Identifier: Apache-2.0
"""The CUDA device a communicator is created on: what a device= argument names, and making it current for the
creation through the libcudart that libfccl loads."""
import ctypes
import re
from typing import Optional

from . import _library  # its _library_needed, read when a device is switched
from ._cuda_runtime import _CUDART_NAME
from ._enums import Result
from ._library import FcclError


def _device_index(device) -> Optional[int]:
    """The CUDA device index that device names: None (the current device), an int, "cuda" / "cuda:N", or a
    torch.device of type cuda."""
    if device is None:
        return None
    if isinstance(device, bool):
        raise TypeError("device: a bool is not a device index")
    if isinstance(device, int):
        index = device
    elif isinstance(device, str):
        match = re.fullmatch(r"cuda(?::(\d+))?", device.strip())
        if not match:
            raise ValueError(f"device: {device!r} is not a CUDA device; give an index, 'cuda' or 'cuda:N'")
        index = int(match.group(1)) if match.group(1) is not None else None
    elif hasattr(device, "type") and hasattr(device, "index"):  # torch.device, without importing torch
        if device.type != "cuda":
            raise ValueError(f"device: {device} is not a CUDA device")
        index = device.index
    else:
        raise TypeError(f"device: expected None, an int, 'cuda:N' or a torch.device, not {type(device).__name__}")
    if index is not None and index < 0:
        raise ValueError(f"device: index {index} is negative")
    return index


_CUDA_SUCCESS = 0


class _OnDevice:
    """Makes a device current for a communicator's creation (fccl takes the device current at init; its other
    calls switch to the communicator's own) and restores the caller's on leaving. Through the libcudart that
    libfccl loads, so torch's current device, which is that runtime's, moves with it."""

    def __init__(self, index: Optional[int]):
        self.index = index
        self.saved = None

    def _runtime(self):
        name = next((n for n in _library._library_needed if _CUDART_NAME.match(n)), None)
        if name is None:
            raise FcclError(Result.InvalidUsage, "device=: libfccl does not load a shared libcudart, so fccl cannot "
                            "switch devices for it; make the device current yourself (torch.cuda.set_device)",
                            "cudaSetDevice")
        return ctypes.CDLL(name)

    def _call(self, runtime, function_name, *arguments):
        result = getattr(runtime, function_name)(*arguments)
        if result != _CUDA_SUCCESS:
            text = runtime.cudaGetErrorString(result)
            reason = text.decode("utf-8", "replace") if text else f"error {result}"
            raise FcclError(Result.UnhandledCudaError, f"{function_name} for device={self.index} failed: {reason}",
                            function_name)

    def __enter__(self):
        if self.index is None:
            return self
        runtime = self._runtime()
        runtime.cudaGetErrorString.restype = ctypes.c_char_p
        current = ctypes.c_int()
        self._call(runtime, "cudaGetDevice", ctypes.byref(current))
        if current.value != self.index:
            self._call(runtime, "cudaSetDevice", ctypes.c_int(self.index))
            self.saved = (runtime, current.value)
        return self

    def __exit__(self, *exc_info):
        if self.saved is not None:
            runtime, previous = self.saved
            runtime.cudaSetDevice(ctypes.c_int(previous))  # best effort: the creation's own error matters more
        return False
