# SPDX-License-Identifier: Apache-2.0
"""libfccl in this process: loading it (once: a process holds one libfccl), its result codes as FcclError, and the
calls that need no communicator (version, error_string)."""
import ctypes
import os
import sys
from typing import List, Optional

from ._c_api import _PROTOTYPES
from ._cuda_runtime import _cuda_runtime_conflict, _cudart_major, _mapped_files
from ._elf import _elf_needed
from ._enums import Result

_cdll = None  # the loaded libfccl (ctypes.CDLL) with every prototype declared
_library_file = None  # the real path of the loaded libfccl
_library_needed: List[str] = []  # the libraries it was linked against (its DT_NEEDED), read once at load


class FcclError(RuntimeError):
    """A call into fccl returned something other than fcclSuccess.

    ``result`` is the Result, ``message`` fccl's words for the cause (fcclGetLastError; may be empty)."""

    def __init__(self, result, message="", call=""):
        known = int(result) in Result._value2member_map_
        self.result = Result(result) if known else int(result)  # a newer library may return a newer code
        self.message = message
        self.call = call
        text = f"{call}: " if call else ""
        name = self.result.name if known else f"result {self.result}"
        text += f"{name} ({_error_string_or_name(result)})"
        if message:
            text += f": {message}"
        super().__init__(text)

    def __reduce__(self):  # so that it crosses process boundaries (multiprocessing) intact
        return (FcclError, (int(self.result), self.message, self.call))


def _check_cuda_runtimes():
    """Raises FcclError when libfccl and the rest of the process use CUDA runtimes of different majors. Asked at
    load and again at each communicator's creation, since torch may be imported after fccl was loaded."""
    fccl_major = _cudart_major(_library_needed)
    torch = sys.modules.get("torch")
    torch_cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch is not None else None
    mapped = [_cudart_major([path]) for path in _mapped_files()]
    problem = _cuda_runtime_conflict(fccl_major, torch_cuda, [major for major in mapped if major is not None])
    if problem:
        raise FcclError(Result.InvalidUsage, problem, "load")


def _loaded_file(name) -> Optional[str]:
    """The real path of the library just loaded as name: name itself when it is a path, else the mapped file of
    that name."""
    if os.sep in name:
        return os.path.realpath(name)
    for path in _mapped_files():
        if os.path.basename(path).startswith("libfccl.so"):
            return os.path.realpath(path)
    return None


def load(library_path: Optional[str] = None):
    """Loads libfccl now: library_path, else FCCL_LIBRARY, else the libfccl.so.0 inside this package (a wheel that
    carries it), else libfccl.so.0 through the loader's search path.
    A process holds one libfccl: asking for another file once one is loaded raises FcclError (InvalidUsage).
    Returns the ctypes library."""
    global _cdll, _library_file, _library_needed
    if _cdll is not None:
        if library_path is not None and _library_file and os.path.realpath(library_path) != _library_file:
            raise FcclError(Result.InvalidUsage, f"libfccl is already loaded from {_library_file}; a process holds "
                            f"one libfccl, so {library_path} cannot be loaded beside it", "load")
        return _cdll
    path = library_path or os.environ.get("FCCL_LIBRARY")
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libfccl.so.0")
    name = path or (bundled if os.path.exists(bundled) else "libfccl.so.0")
    try:
        library = ctypes.CDLL(name)
    except OSError as exc:
        if library_path:
            where = f"library_path={library_path}"
        elif path:
            where = f"FCCL_LIBRARY={path}"
        elif name == bundled:  # present but not loadable: most often its libcudart is not on the loader's path
            where = f"the libfccl.so.0 of this package ({bundled})"
        else:
            where = "libfccl.so.0 through the dynamic loader's search path"
        raise OSError(f"fccl: cannot load {where} ({exc}); set FCCL_LIBRARY (or library_path=) to the path of "
                      f"libfccl.so.0, e.g. FCCL_LIBRARY=$PWD/build/src/libfccl.so.0") from exc
    for function_name, (restype, argtypes) in _PROTOTYPES.items():
        function = getattr(library, function_name)
        function.restype = restype
        function.argtypes = argtypes
    _cdll, _library_file = library, _loaded_file(name)
    _library_needed = _elf_needed(_library_file) if _library_file else []
    _check_cuda_runtimes()
    return _cdll


def _lib():
    """The loaded libfccl with every prototype declared; loaded at the first call."""
    return _cdll if _cdll is not None else load()


def _last_error(comm_handle=None):
    text = _lib().fcclGetLastError(comm_handle)
    return text.decode("utf-8", "replace") if text else ""


def _check(result, call, comm_handle=None, allowed=(Result.Success,)):
    """Raises FcclError for a result outside allowed, with the calling thread's last error (the comm's when the
    thread has none: an error a kernel or the init thread recorded)."""
    if result in allowed:
        return result
    message = _last_error(None)
    if not message and comm_handle:
        message = _last_error(comm_handle)
    raise FcclError(result, message, call)


def _error_string_or_name(result):
    try:
        return error_string(result)
    except OSError:  # the library itself failed to load: the code alone must do
        return f"result {int(result)}"


def version() -> int:
    """FCCL_VERSION_CODE of the library actually loaded (major * 10000 + minor * 100 + patch)."""
    value = ctypes.c_int()
    _check(_lib().fcclGetVersion(ctypes.byref(value)), "fcclGetVersion")
    return value.value


def error_string(result) -> str:
    """fccl's short static name for a result code."""
    return _lib().fcclGetErrorString(int(result)).decode("utf-8", "replace")
