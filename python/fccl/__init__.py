# SPDX-License-Identifier: Apache-2.0
"""fccl from Python: a ctypes layer over libfccl's C API (include/fccl.h).

fccl is a collective communication library for the GPUs of one NVLink domain with an NCCL-style API. This module
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
"""
import ctypes
import enum
import math
import os
import re
import struct
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional

__version__ = "0.1.0"  # the C library's version this layer is written against (version() is the loaded one's)

__all__ = [
    "Result", "DataType", "RedOp", "ScaleMode", "Path", "FcclError", "version", "error_string", "UniqueId", "Config",
    "Communicator", "Registration", "mem_stats", "load", "group", "UNIQUE_ID_BYTES", "CONFIG_MAGIC",
]

UNIQUE_ID_BYTES = 128
CONFIG_MAGIC = 0xFCC1C0F1
_CONFIG_UNDEF_INT = -1


class Result(enum.IntEnum):
    """fcclResult_t; the values are stable and 0-7 match NCCL's."""
    Success = 0
    UnhandledCudaError = 1
    SystemError = 2
    InternalError = 3
    InvalidArgument = 4
    InvalidUsage = 5
    RemoteError = 6
    InProgress = 7
    Timeout = 8


class DataType(enum.IntEnum):
    """fcclDataType_t; the values match NCCL's."""
    int8 = 0
    uint8 = 1
    int32 = 2
    uint32 = 3
    int64 = 4
    uint64 = 5
    float16 = 6
    float32 = 7
    float64 = 8
    bfloat16 = 9
    float8e4m3 = 10  # an output type of all_reduce_add_rms_norm only


class ScaleMode(enum.IntEnum):
    """fcclScaleMode_t: how all_reduce_add_rms_norm scales an FP8 output (docs/fused.md#fp8)."""
    none = 0
    static = 1
    dynamic = 2


class Path(enum.IntEnum):
    """fcclPath_t: the engine that carries a communicator's collectives (docs/paths.md)."""
    fccl = 0
    nccl = 1
    hier = 2


class RedOp(enum.IntEnum):
    """fcclRedOp_t; the values match NCCL's."""
    sum = 0
    prod = 1
    max = 2
    min = 3
    avg = 4


_ITEM_SIZE = {
    DataType.int8: 1, DataType.uint8: 1, DataType.int32: 4, DataType.uint32: 4, DataType.int64: 8,
    DataType.uint64: 8, DataType.float16: 2, DataType.float32: 4, DataType.float64: 8, DataType.bfloat16: 2,
    DataType.float8e4m3: 1,
}

# __cuda_array_interface__ type strings. bfloat16 has none (CuPy and numba lack it): pass a torch tensor or a tuple.
_TYPESTR_TO_DTYPE = {
    "<f2": DataType.float16, "<f4": DataType.float32, "<f8": DataType.float64, "|i1": DataType.int8,
    "|u1": DataType.uint8, "<i4": DataType.int32, "<u4": DataType.uint32, "<i8": DataType.int64,
    "<u8": DataType.uint64,
}

# torch dtype names (str(torch.float32) == "torch.float32"): compared by name so torch need not be imported here.
_TORCH_DTYPE_TO_DTYPE = {
    "torch.float16": DataType.float16, "torch.bfloat16": DataType.bfloat16, "torch.float32": DataType.float32,
    "torch.float64": DataType.float64, "torch.int8": DataType.int8, "torch.uint8": DataType.uint8,
    "torch.int32": DataType.int32, "torch.int64": DataType.int64, "torch.float8_e4m3fn": DataType.float8e4m3,
}


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


# ---- the library ------------------------------------------------------------------------------------------------

class _UniqueIdStruct(ctypes.Structure):
    # c_ubyte rather than c_char: a c_char array field reads back cut at the first NUL byte.
    _fields_ = [("internal", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


class _ConfigStruct(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("blocking", ctypes.c_int),
        ("timeoutMs", ctypes.c_int),
        ("commName", ctypes.c_char_p),
        ("allowSharedDevice", ctypes.c_int),
    ]


_ALLGATHER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_BARRIER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _BootstrapCallbacksStruct(ctypes.Structure):
    _fields_ = [("userContext", ctypes.c_void_p), ("allgather", _ALLGATHER_FN), ("barrier", _BARRIER_FN)]


_MEM_STATS_FIELDS = ("openMappings", "mappingReferences", "bytesMapped", "totalOpens", "totalCloses",
                     "commRegistrations", "commDeviceBytes", "commGraphRegistrations")


class _MemStatsStruct(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(name, ctypes.c_uint64) for name in _MEM_STATS_FIELDS]


_c_int_p = ctypes.POINTER(ctypes.c_int)
_comm_t = ctypes.c_void_p
_result_t = ctypes.c_int
# name: (restype, argtypes)
_PROTOTYPES = {
    "fcclGetVersion": (_result_t, [_c_int_p]),
    "fcclGetErrorString": (ctypes.c_char_p, [_result_t]),
    "fcclGetLastError": (ctypes.c_char_p, [_comm_t]),
    "fcclGetUniqueId": (_result_t, [ctypes.POINTER(_UniqueIdStruct)]),
    "fcclCommInitRankConfig": (_result_t, [ctypes.POINTER(_comm_t), ctypes.c_int, _UniqueIdStruct, ctypes.c_int,
                                           ctypes.POINTER(_ConfigStruct)]),
    "fcclCommInitExternal": (_result_t, [ctypes.POINTER(_comm_t), ctypes.c_int, ctypes.c_int,
                                         ctypes.POINTER(_BootstrapCallbacksStruct), ctypes.POINTER(_ConfigStruct)]),
    "fcclCommInitFromNccl": (_result_t, [ctypes.POINTER(_comm_t), ctypes.c_void_p, ctypes.POINTER(_ConfigStruct)]),
    "fcclCommDestroy": (_result_t, [_comm_t]),
    "fcclCommAbort": (_result_t, [_comm_t]),
    "fcclCommGetAsyncError": (_result_t, [_comm_t, _c_int_p]),
    "fcclCommCount": (_result_t, [_comm_t, _c_int_p]),
    "fcclCommCuDevice": (_result_t, [_comm_t, _c_int_p]),
    "fcclCommUserRank": (_result_t, [_comm_t, _c_int_p]),
    "fcclAllReduce": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  _comm_t, ctypes.c_void_p]),
    "fcclAllGather": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, _comm_t,
                                  ctypes.c_void_p]),
    "fcclReduceScatter": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      _comm_t, ctypes.c_void_p]),
    "fcclBroadcast": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  _comm_t, ctypes.c_void_p]),
    "fcclAllReduceAddRMSNorm": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                            ctypes.c_size_t, ctypes.c_size_t, ctypes.c_float, ctypes.c_int,
                                            ctypes.c_int, ctypes.c_int, ctypes.c_void_p, _comm_t, ctypes.c_void_p]),
    "fcclBarrier": (_result_t, [_comm_t, ctypes.c_void_p]),
    "fcclCommRegister": (_result_t, [_comm_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]),
    "fcclCommDeregister": (_result_t, [_comm_t, ctypes.c_void_p]),
    "fcclCommGetMemStats": (_result_t, [_comm_t, ctypes.POINTER(_MemStatsStruct)]),
    "fcclCommGetPath": (_result_t, [_comm_t, _c_int_p, ctypes.POINTER(ctypes.c_char_p)]),
    "fcclGetPathName": (ctypes.c_char_p, [ctypes.c_int]),
    "fcclSend": (_result_t, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _comm_t, ctypes.c_void_p]),
    "fcclRecv": (_result_t, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _comm_t, ctypes.c_void_p]),
    "fcclAllToAll": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, _comm_t,
                                 ctypes.c_void_p]),
    "fcclGroupStart": (_result_t, []),
    "fcclCommShrink": (_result_t, [_comm_t, _c_int_p, ctypes.c_int, ctypes.POINTER(_comm_t),
                                   ctypes.POINTER(_ConfigStruct), ctypes.c_int]),
    "fcclGroupEnd": (_result_t, []),
}

_library = None
_library_file = None  # the real path of the loaded libfccl
_library_needed = []  # the libraries it was linked against (its DT_NEEDED), read once at load

_CUDART_NAME = re.compile(r"^libcudart\.so\.(\d+)$")


def _elf_needed(path) -> List[str]:
    """The DT_NEEDED names of an ELF64 little-endian shared object: the libraries it was linked against (its
    dynamic section, found through the section headers; only those parts are read). [] for anything else."""
    try:
        with open(path, "rb") as handle:
            def read(offset, size):
                handle.seek(offset)
                data = handle.read(size)
                if len(data) != size:
                    raise ValueError("truncated")
                return data

            header = read(0, 64)
            if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
                return []
            section_offset, = struct.unpack_from("<Q", header, 0x28)
            entry_size, count = struct.unpack_from("<HH", header, 0x3A)
            if entry_size != 64:
                return []
            table = read(section_offset, count * 64)
            # Elf64_Shdr: name, type, flags, addr, offset, size, link, info, addralign, entsize
            sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * 64) for i in range(count)]
            needed = []
            for section in sections:
                if section[1] != 6 or section[6] >= count:  # SHT_DYNAMIC, linked to its string table
                    continue
                strings_section = sections[section[6]]
                strings = read(strings_section[4], strings_section[5])
                dynamic = read(section[4], section[5] - section[5] % 16)
                for offset in range(0, len(dynamic), 16):
                    tag, value = struct.unpack_from("<qQ", dynamic, offset)
                    if tag == 0:  # DT_NULL
                        break
                    end = strings.find(b"\0", value)
                    if tag == 1 and end > value:  # DT_NEEDED
                        needed.append(strings[value:end].decode("utf-8", "replace"))
            return needed
    except (OSError, ValueError, struct.error):
        return []


def _cudart_major(names) -> Optional[int]:
    """The major version of the first libcudart.so.N among names (None: none, e.g. a static cudart)."""
    for name in names:
        match = _CUDART_NAME.match(os.path.basename(name))
        if match:
            return int(match.group(1))
    return None


def _mapped_files() -> List[str]:
    """The files mapped into this process (/proc/self/maps; [] where there is none)."""
    try:
        with open("/proc/self/maps") as handle:
            fields = [line.split(None, 5) for line in handle]
    except OSError:
        return []
    return sorted({field[5].strip() for field in fields if len(field) == 6 and field[5].startswith("/")})


def _cuda_runtime_conflict(fccl_major, torch_cuda, mapped_majors) -> Optional[str]:
    """Why this process would run two CUDA runtimes of different majors, with what to do; None when it would
    not. fccl_major: libfccl's libcudart major; torch_cuda: torch.version.cuda of an imported torch (or None);
    mapped_majors: the majors of every libcudart.so.N mapped into the process."""
    torch_major = int(str(torch_cuda).split(".")[0]) if torch_cuda else None
    if fccl_major is not None and torch_major is not None and fccl_major != torch_major:
        return (f"libfccl was built with CUDA {fccl_major} (it loads libcudart.so.{fccl_major}) but the torch in this "
                f"process with CUDA {torch_cuda}: two CUDA runtimes in one process, each with its own device and error "
                f"state, on a driver that must serve both, which fccl does not support. Build fccl with a CUDA "
                f"{torch_major} toolkit (CUDA_HOME=<its path> meson setup build) and point FCCL_LIBRARY at that "
                f"libfccl.so.0, or install a torch built for CUDA {fccl_major}")
    majors = sorted(set(mapped_majors))
    if fccl_major is not None and len(majors) > 1:
        return (f"this process has CUDA runtimes of majors {', '.join(map(str, majors))} loaded beside libfccl's "
                f"(CUDA {fccl_major}): two CUDA runtimes in one process, which fccl does not support. Load one "
                f"CUDA major only: build fccl with the toolkit of the other libraries, or theirs with fccl's")
    return None


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
    global _library, _library_file, _library_needed
    if _library is not None:
        if library_path is not None and _library_file and os.path.realpath(library_path) != _library_file:
            raise FcclError(Result.InvalidUsage, f"libfccl is already loaded from {_library_file}; a process holds "
                            f"one libfccl, so {library_path} cannot be loaded beside it", "load")
        return _library
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
    _library, _library_file = library, _loaded_file(name)
    _library_needed = _elf_needed(_library_file) if _library_file else []
    _check_cuda_runtimes()
    return _library


def _lib():
    """The loaded libfccl with every prototype declared; loaded at the first call."""
    return _library if _library is not None else load()


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
        name = next((n for n in _library_needed if _CUDART_NAME.match(n)), None)
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


def mem_stats(comm: Optional["Communicator"] = None) -> dict:
    """fcclCommGetMemStats: the process's peer-mapping numbers, and comm's own when given (else those are 0)."""
    stats = _MemStatsStruct()
    stats.size = ctypes.sizeof(_MemStatsStruct)  # fields beyond size are not written
    handle = comm._live_handle() if comm is not None else None
    _check(_lib().fcclCommGetMemStats(handle, ctypes.byref(stats)), "fcclCommGetMemStats", handle)
    return {name: getattr(stats, name) for name in _MEM_STATS_FIELDS}


# ---- unique id and config ---------------------------------------------------------------------------------------

class UniqueId:
    """The rendezvous token of fcclGetUniqueId: 128 opaque bytes, created on one process and sent to every rank
    (bytes(uid) and UniqueId.from_bytes, or pickle). The creating process listens for the ranks until they arrive."""

    __slots__ = ("_bytes",)

    def __init__(self, data: bytes):
        data = bytes(data)
        if len(data) != UNIQUE_ID_BYTES:
            raise ValueError(f"a fccl unique id has {UNIQUE_ID_BYTES} bytes, got {len(data)}")
        self._bytes = data

    @classmethod
    def create(cls) -> "UniqueId":
        raw = _UniqueIdStruct()
        _check(_lib().fcclGetUniqueId(ctypes.byref(raw)), "fcclGetUniqueId")
        return cls(bytes(raw))

    @classmethod
    def from_bytes(cls, data: bytes) -> "UniqueId":
        return cls(data)

    def __bytes__(self):
        return self._bytes

    def __eq__(self, other):
        return isinstance(other, UniqueId) and self._bytes == other._bytes

    def __hash__(self):
        return hash(self._bytes)

    def __reduce__(self):
        return (UniqueId, (self._bytes,))

    def __repr__(self):
        return f"UniqueId({self._bytes[:8].hex()}...)"

    def _struct(self):
        return _UniqueIdStruct.from_buffer_copy(self._bytes)


@dataclass
class Config:
    """fcclConfig_t, started like FCCL_CONFIG_INITIALIZER. timeout_ms -1 means FCCL_BOOTSTRAP_TIMEOUT; with
    blocking False the init returns at once and Communicator.async_error() is InProgress until it is done."""
    blocking: bool = True
    timeout_ms: int = _CONFIG_UNDEF_INT
    comm_name: Optional[str] = None
    allow_shared_device: bool = False

    def _struct(self):
        """The C struct; it holds the only reference to the encoded name, so it must live while the call runs."""
        config = _ConfigStruct()
        config.size = ctypes.sizeof(_ConfigStruct)
        config.magic = CONFIG_MAGIC
        config.version = version()  # the loaded library's, as the header's initializer uses the compiled one
        config.blocking = 1 if self.blocking else 0
        config.timeoutMs = int(self.timeout_ms)
        config.commName = self.comm_name.encode() if self.comm_name is not None else None
        config.allowSharedDevice = 1 if self.allow_shared_device else 0
        return config


def _config_pointer(config):
    if config is None:
        return None
    if not isinstance(config, Config):
        raise TypeError(f"config must be a fccl.Config, not {type(config).__name__}")
    return ctypes.pointer(config._struct())


# ---- buffers and streams ----------------------------------------------------------------------------------------

class _Buffer:
    __slots__ = ("pointer", "count", "dtype", "readonly", "torch_tensor")

    def __init__(self, pointer, count, dtype, readonly=False, torch_tensor=None):
        self.pointer = pointer
        self.count = count
        self.dtype = dtype
        self.readonly = readonly
        self.torch_tensor = torch_tensor

    @property
    def nbytes(self):
        return self.count * _ITEM_SIZE[self.dtype]


def _is_torch_tensor(obj):
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported: no import here
    return torch is not None and isinstance(obj, torch.Tensor)


def _enum_member(enum_type, value, noun):
    """value as a member of enum_type when it is one, its name or its number; None for anything else."""
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        try:
            return enum_type[value]
        except KeyError:
            raise ValueError(f"unknown {noun} {value!r}; one of {', '.join(m.name for m in enum_type)}")
    if isinstance(value, int) and not isinstance(value, bool):
        return enum_type(value)
    return None


def _dtype_of(value):
    member = _enum_member(DataType, value, "fccl data type")
    if member is not None:
        return member
    name = str(value)
    if name in _TORCH_DTYPE_TO_DTYPE:
        return _TORCH_DTYPE_TO_DTYPE[name]
    raise TypeError(f"cannot use {value!r} as a fccl data type")


def _c_contiguous(shape, strides, itemsize):
    if strides is None:
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:  # a dimension of one element may carry any stride
            return False
        expected *= extent
    return True


def _as_buffer(obj, what):
    """A torch CUDA tensor, an object with __cuda_array_interface__, or (pointer, count, dtype) as a _Buffer."""
    if _is_torch_tensor(obj):
        if not obj.is_cuda:
            raise ValueError(f"{what}: the tensor is on {obj.device}, fccl needs a CUDA tensor")
        if not obj.is_contiguous():
            raise ValueError(f"{what}: the tensor is not contiguous (call .contiguous() first)")
        dtype = _TORCH_DTYPE_TO_DTYPE.get(str(obj.dtype))
        if dtype is None:
            raise TypeError(f"{what}: fccl has no type for {obj.dtype}")
        return _Buffer(obj.data_ptr(), obj.numel(), dtype, torch_tensor=obj)
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is not None:
        typestr = interface.get("typestr")
        dtype = _TYPESTR_TO_DTYPE.get(typestr)
        if dtype is None:
            raise TypeError(f"{what}: fccl has no type for __cuda_array_interface__ typestr {typestr!r}; "
                            f"one of {', '.join(_TYPESTR_TO_DTYPE)}")
        shape = tuple(interface["shape"])
        if not _c_contiguous(shape, interface.get("strides"), _ITEM_SIZE[dtype]):
            raise ValueError(f"{what}: the array is not C-contiguous (strides {interface.get('strides')})")
        pointer, readonly = interface["data"]
        return _Buffer(pointer or 0, math.prod(shape), dtype, readonly=bool(readonly))
    if isinstance(obj, tuple):
        if len(obj) != 3:
            raise TypeError(f"{what}: an explicit buffer is (pointer, count, dtype), got {len(obj)} items")
        pointer, count, dtype = obj
        if not isinstance(pointer, int) or not isinstance(count, int) or pointer < 0 or count < 0:
            raise ValueError(f"{what}: pointer and count must be non-negative ints, got {pointer!r}, {count!r}")
        return _Buffer(pointer, count, _dtype_of(dtype))
    raise TypeError(f"{what}: expected a CUDA torch.Tensor, an object with __cuda_array_interface__ or "
                    f"(pointer, count, dtype), got {type(obj).__name__}")


# torch.distributed.ReduceOp members by name (str(dist.ReduceOp.SUM) ends in "SUM"): torch need not be imported.
_TORCH_REDUCE_OPS = {"SUM": RedOp.sum, "PRODUCT": RedOp.prod, "MAX": RedOp.max, "MIN": RedOp.min, "AVG": RedOp.avg}


def _op_of(op):
    member = _enum_member(RedOp, op, "reduction")
    if member is not None:
        return member
    kind = type(op).__name__
    if kind in ("ReduceOp", "RedOpType"):
        name = getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]
        if name in _TORCH_REDUCE_OPS:
            return _TORCH_REDUCE_OPS[name]
        raise ValueError(f"torch.distributed.ReduceOp.{name} has no fccl equivalent (fccl has "
                         f"{', '.join(_TORCH_REDUCE_OPS)})")
    raise TypeError(f"op must be a name, fccl.RedOp or torch.distributed.ReduceOp, not {kind}")


def _stream_handle(stream, torch_device=None):
    """A cudaStream_t as an int. None: torch's current stream of torch_device when the buffers are torch tensors
    (inside torch.cuda.graph that is the capture stream), else 0, the default stream."""
    if stream is None:
        if torch_device is not None:
            return sys.modules["torch"].cuda.current_stream(torch_device).cuda_stream
        return 0
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attribute in ("cuda_stream", "ptr"):  # torch.cuda.Stream, CuPy's Stream
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int):
            return handle
    raise TypeError(f"stream must be None, an int cudaStream_t or an object with .cuda_stream or .ptr, "
                    f"not {type(stream).__name__}")


def _all_reduce_arguments(send, recv, op, stream):
    """Everything fcclAllReduce needs, checked in Python first: (send, recv, op, stream handle)."""
    send_buffer = _as_buffer(send, "send")
    recv_buffer = send_buffer if recv is None or recv is send else _as_buffer(recv, "recv")
    if send_buffer.dtype != recv_buffer.dtype:
        raise ValueError(f"send is {send_buffer.dtype.name} but recv is {recv_buffer.dtype.name}")
    if send_buffer.count != recv_buffer.count:
        raise ValueError(f"send has {send_buffer.count} elements but recv has {recv_buffer.count}")
    if recv_buffer.readonly:
        raise ValueError("recv is read-only (its __cuda_array_interface__ says so)")
    reduction = _op_of(op)
    tensor = send_buffer.torch_tensor if send_buffer.torch_tensor is not None else recv_buffer.torch_tensor
    handle = _stream_handle(stream, tensor.device if tensor is not None else None)
    return send_buffer, recv_buffer, reduction, handle


def _pair(send, recv, send_name="send", recv_name="recv"):
    """send and recv as buffers of one type, recv writable; recv None or send itself: the same buffer."""
    send_buffer = _as_buffer(send, send_name)
    recv_buffer = send_buffer if recv is None or recv is send else _as_buffer(recv, recv_name)
    if send_buffer.dtype != recv_buffer.dtype:
        raise ValueError(f"{send_name} is {send_buffer.dtype.name} but {recv_name} is {recv_buffer.dtype.name}")
    if recv_buffer.readonly:
        raise ValueError(f"{recv_name} is read-only (its __cuda_array_interface__ says so)")
    return send_buffer, recv_buffer


def _stream_of(stream, *buffers):
    """The stream handle for buffers (torch's current stream of the first torch tensor's device when None)."""
    tensor = next((b.torch_tensor for b in buffers if b is not None and b.torch_tensor is not None), None)
    return _stream_handle(stream, tensor.device if tensor is not None else None)


def _check_nranks(nranks):
    if not isinstance(nranks, int) or isinstance(nranks, bool) or nranks < 1:
        raise ValueError(f"nranks must be a positive int, got {nranks!r}")


def _all_gather_arguments(send, recv, nranks, stream):
    """Everything fcclAllGather needs, checked in Python first: (send, recv, stream handle). recv holds nranks x
    send's elements; in place when send is this rank's block of recv (a view of it)."""
    _check_nranks(nranks)
    if recv is None:
        raise ValueError("recv is required: it holds every rank's send")
    send_buffer, recv_buffer = _pair(send, recv)
    if recv_buffer.count != nranks * send_buffer.count:
        raise ValueError(f"recv has {recv_buffer.count} elements; an all-gather of {send_buffer.count} over {nranks} "
                         f"ranks needs {nranks * send_buffer.count}")
    return send_buffer, recv_buffer, _stream_of(stream, send_buffer, recv_buffer)


def _reduce_scatter_arguments(send, recv, op, nranks, stream):
    """Everything fcclReduceScatter needs, checked in Python first: (send, recv, op, stream handle). send holds
    nranks x recv's elements; in place when recv is this rank's block of send (a view of it)."""
    _check_nranks(nranks)
    if recv is None:
        raise ValueError("recv is required: it holds this rank's block of the reduction")
    send_buffer, recv_buffer = _pair(send, recv)
    if send_buffer.count != nranks * recv_buffer.count:
        raise ValueError(f"send has {send_buffer.count} elements; a reduce-scatter into {recv_buffer.count} over "
                         f"{nranks} ranks needs {nranks * recv_buffer.count}")
    reduction = _op_of(op)
    return send_buffer, recv_buffer, reduction, _stream_of(stream, send_buffer, recv_buffer)


def _broadcast_arguments(send, recv, root, rank, nranks, stream):
    """Everything fcclBroadcast needs, checked in Python first: (send or None, recv, stream handle). recv None: in
    place (send is the buffer). send None: allowed on ranks other than root, which do not read it."""
    _check_nranks(nranks)
    if not isinstance(root, int) or isinstance(root, bool):
        raise TypeError(f"root must be an int, not {type(root).__name__}")
    if not 0 <= root < nranks:
        raise ValueError(f"root {root} is not a rank of this communicator (0..{nranks - 1})")
    if send is None:
        if rank == root:
            raise ValueError(f"send is None on the root (rank {root}): the root sends it")
        if recv is None:
            raise ValueError("send and recv are both None: recv receives the message")
        recv_buffer = _as_buffer(recv, "recv")
        if recv_buffer.readonly:
            raise ValueError("recv is read-only (its __cuda_array_interface__ says so)")
        return None, recv_buffer, _stream_of(stream, recv_buffer)
    send_buffer, recv_buffer = _pair(send, recv)
    if send_buffer.count != recv_buffer.count:
        raise ValueError(f"send has {send_buffer.count} elements but recv has {recv_buffer.count}")
    return send_buffer, recv_buffer, _stream_of(stream, send_buffer, recv_buffer)


def _peer_arguments(buf, peer, nranks, stream, what):
    """Everything fcclSend or fcclRecv needs, checked in Python first: (buffer, stream handle)."""
    _check_nranks(nranks)
    if not isinstance(peer, int) or isinstance(peer, bool):
        raise TypeError(f"peer must be an int, not {type(peer).__name__}")
    if not 0 <= peer < nranks:
        raise ValueError(f"peer {peer} is not a rank of this communicator (0..{nranks - 1})")
    buffer = _as_buffer(buf, what)
    if what == "recv" and buffer.readonly:
        raise ValueError("recv is read-only (its __cuda_array_interface__ says so)")
    return buffer, _stream_of(stream, buffer)


def _all_to_all_arguments(send, recv, nranks, stream):
    """Everything fcclAllToAll needs: (send, recv, count per peer, stream handle). send and recv each hold nranks
    blocks of the same size and must be separate buffers."""
    _check_nranks(nranks)
    if recv is None or recv is send:
        raise ValueError("all_to_all needs separate send and recv buffers")
    send_buffer, recv_buffer = _pair(send, recv)
    if send_buffer.count != recv_buffer.count:
        raise ValueError(f"send has {send_buffer.count} elements but recv has {recv_buffer.count}")
    if send_buffer.count % nranks != 0:
        raise ValueError(f"{send_buffer.count} elements do not split into {nranks} equal blocks")
    return send_buffer, recv_buffer, send_buffer.count // nranks, _stream_of(stream, send_buffer, recv_buffer)


def _exclude_list(exclude):
    """exclude as a list of ints (a single rank, or an iterable of them)."""
    if isinstance(exclude, int) and not isinstance(exclude, bool):
        return [exclude]
    try:
        ranks = list(exclude)
    except TypeError:
        raise TypeError(f"exclude must be a rank or ranks, not {type(exclude).__name__}") from None
    for rank in ranks:
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise TypeError(f"exclude holds {rank!r}, not a rank (an int)")
    return ranks


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


_NORM_TYPES = (DataType.float16, DataType.bfloat16, DataType.float32)


def _add_rms_norm_arguments(input, residual, weight, output, hidden, eps, scale, scale_mode, stream):
    """Everything fcclAllReduceAddRMSNorm needs, checked in Python first: (input, residual or None, weight or None,
    output, tokens, hidden, eps, scale mode, scale or None, stream handle). hidden None: the last dimension of a
    torch tensor or __cuda_array_interface__ input."""
    input_buffer = _as_buffer(input, "input")
    if input_buffer.dtype not in _NORM_TYPES:
        raise TypeError(f"input is {input_buffer.dtype.name}; the fused norm takes float16, bfloat16 or float32")
    if hidden is None:
        shape = tuple(input.shape) if _is_torch_tensor(input) else tuple(
            getattr(input, "__cuda_array_interface__", {}).get("shape", ()))
        if not shape:
            raise ValueError("hidden is required when input has no shape (an explicit (pointer, count, dtype))")
        hidden = shape[-1]
    if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 1:
        raise ValueError(f"hidden must be a positive int, got {hidden!r}")
    if input_buffer.count % hidden != 0:
        raise ValueError(f"input has {input_buffer.count} elements, not a whole number of rows of {hidden}")
    tokens = input_buffer.count // hidden
    eps = float(eps)
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")

    def same_type(obj, name, count):
        if obj is None:
            return None
        buffer = _as_buffer(obj, name)
        if buffer.dtype != input_buffer.dtype:
            raise ValueError(f"{name} is {buffer.dtype.name} but input is {input_buffer.dtype.name}")
        if buffer.count != count:
            raise ValueError(f"{name} has {buffer.count} elements, {count} expected")
        return buffer

    residual_buffer = same_type(residual, "residual", input_buffer.count)
    weight_buffer = same_type(weight, "weight", hidden)
    if residual_buffer is not None and residual_buffer.readonly:
        raise ValueError("residual is read-only, but r' is written into it")
    if output is None:
        raise ValueError("output is required")
    output_buffer = _as_buffer(output, "output")
    if output_buffer.readonly:
        raise ValueError("output is read-only (its __cuda_array_interface__ says so)")
    if output_buffer.count != input_buffer.count:
        raise ValueError(f"output has {output_buffer.count} elements, input {input_buffer.count}")
    fp8 = output_buffer.dtype == DataType.float8e4m3
    if not fp8 and output_buffer.dtype != input_buffer.dtype:
        raise ValueError(f"output is {output_buffer.dtype.name}: input's type ({input_buffer.dtype.name}) or "
                         f"float8e4m3")
    mode = _enum_member(ScaleMode, scale_mode if scale_mode is not None else "none", "scale mode")
    if mode is None:
        raise TypeError(f"scale_mode must be a name or fccl.ScaleMode, not {type(scale_mode).__name__}")
    if fp8 != (mode != ScaleMode.none):
        raise ValueError(f"scale_mode {mode.name} with a {output_buffer.dtype.name} output: an FP8 output takes "
                         f"'static' or 'dynamic', any other 'none'")
    scale_buffer = None
    if mode == ScaleMode.none:
        if scale is not None:
            raise ValueError("scale is given without an FP8 output")
    else:
        if scale is None:
            raise ValueError(f"scale is required with scale_mode {mode.name}")
        scale_buffer = _as_buffer(scale, "scale")
        if scale_buffer.dtype != DataType.float32:
            raise ValueError(f"scale is {scale_buffer.dtype.name}, float32 expected")
        want = 1 if mode == ScaleMode.static else tokens
        if scale_buffer.count != want:
            raise ValueError(f"scale has {scale_buffer.count} elements, {want} expected ({mode.name})")
        if mode == ScaleMode.dynamic and scale_buffer.readonly:
            raise ValueError("scale is read-only but the dynamic scales are written into it")
    stream_handle = _stream_of(stream, input_buffer, output_buffer)
    return (input_buffer, residual_buffer, weight_buffer, output_buffer, tokens, hidden, eps, mode, scale_buffer,
            stream_handle)


# ---- external bootstrap -----------------------------------------------------------------------------------------

def _compiling() -> bool:
    """True while torch.compile traces the caller: the methods then take fccl.ops' custom ops instead of ctypes,
    which TorchDynamo cannot trace. False whenever fccl.ops is not imported (it is once a communicator exists in a
    process that has imported torch)."""
    return _torch_is_compiling is not None and _torch_is_compiling()


_torch_is_compiling = None  # torch.compiler.is_compiling, set by fccl.ops when it is imported


def _traced_stream(stream, call):
    if stream is not None:
        raise ValueError(f"{call}: stream= cannot be given under torch.compile (the op runs on torch's current "
                         "stream; use `with torch.cuda.stream(s):`)")


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


# ---- communicator -----------------------------------------------------------------------------------------------

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

    destroy() is collective and must be called by every rank; `with comm:` calls it on leaving. There is no
    destroy in __del__: garbage collection runs at a different moment on each rank, and a collective teardown
    started by it would wait for peers that are not there."""

    def __init__(self, handle, bootstrap=None):
        self._handle = handle
        self._bootstrap = bootstrap  # kept until destroy: fccl may call the callbacks inside fcclCommDestroy
        self._device = None
        self._nranks = None
        if "torch" in sys.modules:  # the custom ops for torch.compile (fccl.ops) find communicators by handle
            from . import ops
            ops._remember(self)

    @classmethod
    def init_rank(cls, nranks: int, rank: int, unique_id, config: Optional[Config] = None, *, device=None,
                  library_path: Optional[str] = None) -> "Communicator":
        """fcclCommInitRankConfig: collective over nranks processes holding the same id (UniqueId or its bytes).
        device: the GPU (an index, "cuda:N" or a torch.device; None: the current device, torch's). library_path:
        the libfccl to load if none is loaded yet (fccl.load)."""
        if not isinstance(unique_id, UniqueId):
            unique_id = UniqueId.from_bytes(unique_id)
        handle = ctypes.c_void_p()
        config_pointer = _config_pointer(config)
        with _Creation(device, library_path) as library:
            result = library.fcclCommInitRankConfig(ctypes.byref(handle), int(nranks), unique_id._struct(),
                                                    int(rank), config_pointer)
        _check(result, "fcclCommInitRankConfig", allowed=(Result.Success, Result.InProgress))
        return cls(handle.value)

    @classmethod
    def from_external(cls, nranks: int, rank: int, allgather: Callable[[bytes], bytes],
                      barrier: Optional[Callable[[], None]] = None, config: Optional[Config] = None, *,
                      device=None, library_path: Optional[str] = None) -> "Communicator":
        """fcclCommInitExternal over the application's own exchange: allgather(send) returns every rank's send
        bytes concatenated in rank order; barrier() returns when every rank has called it (None: fccl uses a
        one-byte allgather). Both may be called again inside destroy(). An exception in either becomes the init's
        error (fcclSystemError), raised as FcclError chained to it. device and library_path: as init_rank's."""
        bootstrap = _ExternalBootstrap(int(nranks), allgather, barrier)
        handle = ctypes.c_void_p()
        config_pointer = _config_pointer(config)
        with _Creation(device, library_path) as library:
            result = library.fcclCommInitExternal(ctypes.byref(handle), int(nranks), int(rank),
                                                  ctypes.byref(bootstrap.callbacks), config_pointer)
        if result not in (Result.Success, Result.InProgress):
            bootstrap.raise_for(result, "fcclCommInitExternal")
        return cls(handle.value, bootstrap)

    @classmethod
    def from_process_group(cls, group=None, config: Optional[Config] = None, *, device=None,
                           library_path: Optional[str] = None) -> "Communicator":
        """from_external over a torch.distributed group (None: the default group), with the group's ranks, through
        all_gather_object. A gloo group is the cheap choice: the exchange is a few small host messages, which an
        NCCL group would copy through the GPU. device (None: torch's current device) and library_path: as
        init_rank's."""
        import torch.distributed as dist

        def allgather(send: bytes) -> bytes:
            gathered = [None] * dist.get_world_size(group)
            dist.all_gather_object(gathered, send, group=group)
            return b"".join(gathered)

        return cls.from_external(dist.get_world_size(group), dist.get_rank(group), allgather, None, config,
                                 device=device, library_path=library_path)

    @classmethod
    def from_nccl(cls, nccl_comm_ptr: int, config: Optional[Config] = None, *, device=None,
                  library_path: Optional[str] = None) -> "Communicator":
        """fcclCommInitFromNccl: the ranks of an existing ncclComm_t (its address as an int), whose device must be
        current (or given as device=). Needs a build with NCCL support and libnccl.so.2 loaded in the process.
        library_path: as init_rank's."""
        handle = ctypes.c_void_p()
        config_pointer = _config_pointer(config)
        with _Creation(device, library_path) as library:
            result = library.fcclCommInitFromNccl(ctypes.byref(handle), ctypes.c_void_p(int(nccl_comm_ptr)),
                                                  config_pointer)
        _check(result, "fcclCommInitFromNccl", allowed=(Result.Success, Result.InProgress))
        return cls(handle.value)

    def _live_handle(self):
        if self._handle is None:
            raise FcclError(Result.InvalidUsage, "the communicator was destroyed or aborted")
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

    @property
    def device(self) -> int:
        if self._device is None:  # fixed at creation
            self._device = self._query_int("fcclCommCuDevice")
        return self._device

    def all_reduce(self, send, recv=None, op="sum", stream=None):
        """fcclAllReduce of send into recv (None: in place), enqueued on stream; returns recv (or send).
        op: "sum", "prod", "max", "min", "avg" or a RedOp. stream: None (torch's current stream for torch
        tensors, else the default stream), an int cudaStream_t, or an object with .cuda_stream or .ptr.
        Under torch.compile it is the custom op fccl.ops.all_reduce (torch tensors, stream None)."""
        if _compiling():
            from . import ops
            _traced_stream(stream, "all_reduce")
            if recv is None or recv is send:
                return ops.all_reduce_(send, self, op)
            return recv.copy_(ops.all_reduce(send, self, op))
        send_buffer, recv_buffer, reduction, stream_handle = _all_reduce_arguments(send, recv, op, stream)
        handle = self._live_handle()
        result = _lib().fcclAllReduce(send_buffer.pointer or None, recv_buffer.pointer or None, send_buffer.count,
                                      int(send_buffer.dtype), int(reduction), handle, stream_handle or None)
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
        result = _lib().fcclReduceScatter(send_buffer.pointer or None, recv_buffer.pointer or None, recv_buffer.count,
                                          int(send_buffer.dtype), int(reduction), handle, stream_handle or None)
        _check(result, "fcclReduceScatter", handle)
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

    def shrink(self, exclude, config: Optional[Config] = None, abort: bool = False) -> "Communicator":
        """fcclCommShrink: the ranks not in exclude (ranks of this communicator, not this one) make a new communicator
        of their own, without a new unique id; after a peer died, call it on the failed communicator with the dead
        ranks. Collective over the survivors. abort: FCCL_SHRINK_ABORT (this communicator fails first, so its kernels
        stop). This communicator stays to be destroyed or aborted. config None: this one's timeout, name and
        allow_shared_device."""
        ranks = [int(r) for r in _exclude_list(exclude)]
        handle = self._live_handle()
        array = (ctypes.c_int * max(1, len(ranks)))(*ranks)
        new = ctypes.c_void_p()
        result = _lib().fcclCommShrink(handle, array if ranks else None, len(ranks), ctypes.byref(new),
                                       _config_pointer(config), 1 if abort else 0)
        _check(result, "fcclCommShrink", handle)
        return Communicator(new.value)

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
            return "<fccl.Communicator destroyed>"
        return f"<fccl.Communicator rank {self.rank} of {self.nranks} on device {self.device}>"
