#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python layer (python/fccl) against the built library.

Without a GPU (the unit suite): loading (library_path=, FCCL_LIBRARY, the refusal of a torch of another CUDA major,
faked), device= forms and their reaching CUDA, version, result names, unique ids, config and argument errors coming back
as FcclError with fccl's own words, a communicator that cannot be made on a machine without a GPU, buffer, type,
op, root and stream checks of every collective (ValueError/TypeError before any C call), the prototypes against
fccl.h, the external-bootstrap callbacks turning a Python exception into an error code, mem_stats without a
communicator.

With PyTorch and a CUDA device (else skipped): two spawned ranks, on a GPU each when there are two, else sharing one
(Config.allow_shared_device, and an NCCL_HOSTID of its own for each rank so that NCCL takes them too), that init through a UniqueId passed over a
queue and check all_reduce (bf16 and fp32 sums on random data against a float64 host reference, in place and out of
place, bitwise equal across ranks), explicit streams, all_gather and broadcast (bit for bit, in place and out of
place, every root) and reduce_scatter (against the reference, and bit for bit the all-reduce's block), the three
captured in one CUDA graph and replayed with fresh data, a 4 MiB all-reduce captured in a CUDA graph and replayed
with fresh data, register/deregister, graph registrations in mem_stats, from_process_group over gloo, and the
torch.library custom ops (fccl.ops) and the methods under torch.compile(fullgraph=True), eager and replayed from a
CUDA graph.

  FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_fccl.py [-v]
TEST_FCCL_HEADER names include/fccl.h (default: found from this file's place in the tree).
"""
import ctypes
import functools
import hashlib
import importlib
import math
import multiprocessing
import os
import pickle
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

import fccl

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.environ.get("TEST_FCCL_HEADER", os.path.join(HERE, "..", "..", "include", "fccl.h"))
# Bounds every init attempt here, so that a bug shows as a failure, never as a hang.
SHORT_TIMEOUT_MS = 5000


def header_text():
    with open(HEADER) as header:
        return header.read()


def header_version_code():
    text = header_text()
    parts = {name: int(re.search(rf"#define FCCL_{name} (\d+)", text).group(1)) for name in ("MAJOR", "MINOR", "PATCH")}
    formula = re.search(r"#define FCCL_VERSION\(major, minor, patch\) \(\(major\) \* (\d+) \+ \(minor\) \* (\d+)",
                        text)
    return parts["MAJOR"] * int(formula.group(1)) + parts["MINOR"] * int(formula.group(2)) + parts["PATCH"]


def header_enum(name):
    """{member: value} of a typedef enum in fccl.h, e.g. header_enum('fcclResult_t')."""
    text = header_text()
    body = re.search(r"typedef enum \{([^}]*)\}\s*" + name + ";", text).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"(fccl\w+)\s*=\s*(\d+)", body)}


class FakeCudaArray:
    """Only __cuda_array_interface__: the checks must reject or accept it without touching the memory."""

    def __init__(self, shape, typestr="<f4", pointer=0x7F0000000000, strides=None, readonly=False):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (pointer, readonly),
                                         "strides": strides, "version": 3}


class LibraryTest(unittest.TestCase):
    def test_loads_the_library_named_by_fccl_library(self):
        library = fccl._lib()
        if "FCCL_LIBRARY" in os.environ:
            self.assertEqual(library._name, os.environ["FCCL_LIBRARY"])

    def test_missing_library_is_a_clear_oserror(self):
        code = ("import fccl\n"
                "try:\n"
                "    fccl.version()\n"
                "except OSError as exc:\n"
                "    print(exc)\n"
                "    raise SystemExit(3)\n")
        env = dict(os.environ, FCCL_LIBRARY="/nonexistent/libfccl.so.0")
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertIn("FCCL_LIBRARY", result.stdout)
        self.assertIn("/nonexistent/libfccl.so.0", result.stdout)

    def test_version_is_the_headers(self):
        self.assertEqual(fccl.version(), header_version_code())

    def test_package_version_is_the_headers(self):
        pyproject = os.path.join(HERE, "..", "..", "python", "pyproject.toml")
        if not os.path.exists(pyproject):
            self.skipTest("no python/pyproject.toml beside this test")
        with open(pyproject) as handle:
            declared = re.search(r'^version = "([^"]+)"', handle.read(), re.M).group(1)
        code = header_version_code()
        self.assertEqual(declared, f"{code // 10000}.{code // 100 % 100}.{code % 100}")

    def test_enums_match_the_header(self):
        for python_enum, c_enum, prefix in ((fccl.Result, "fcclResult_t", "fccl"),
                                            (fccl.DataType, "fcclDataType_t", "fccl"),
                                            (fccl.RedOp, "fcclRedOp_t", "fccl"),
                                            (fccl.Path, "fcclPath_t", "fcclPath"),
                                            (fccl.ScaleMode, "fcclScaleMode_t", "fcclScale")):
            c_values = {name[len(prefix):].lower(): value for name, value in header_enum(c_enum).items()
                        if not name.startswith("fcclNum")}
            python_values = {member.name.lower(): member.value for member in python_enum}
            self.assertEqual(python_values, c_values, c_enum)

    def test_prototypes_match_the_header(self):
        # Every declared function takes as many arguments as fccl.h gives it, the collectives included.
        text = re.sub(r"/\*.*?\*/", "", header_text(), flags=re.S)
        declared = {m.group(1): m.group(2) for m in re.finditer(r"FCCL_API [^;(]*?\b(fccl\w+)\(([^)]*)\)", text)}
        for name in ("fcclAllReduce", "fcclAllGather", "fcclReduceScatter", "fcclBroadcast", "fcclBarrier"):
            self.assertIn(name, fccl._PROTOTYPES)
        for name, (_, argtypes) in fccl._PROTOTYPES.items():
            self.assertIn(name, declared)
            parameters = [p for p in declared[name].split(",") if p.strip() and p.strip() != "void"]
            self.assertEqual(len(argtypes), len(parameters), name)

    def test_every_result_has_its_own_error_string(self):
        strings = [fccl.error_string(result) for result in fccl.Result]
        self.assertTrue(all(strings), strings)
        self.assertEqual(len(set(strings)), len(strings), strings)

    def test_struct_sizes_match_the_c_layout(self):
        # size_t, 2 x unsigned, 2 x int, a pointer, an int: 40 bytes with the tail padding on x86-64.
        self.assertEqual(ctypes.sizeof(fccl._ConfigStruct), 40)
        self.assertEqual(ctypes.sizeof(fccl._MemStatsStruct), 8 + 8 * 8)
        self.assertEqual(ctypes.sizeof(fccl._UniqueIdStruct), fccl.UNIQUE_ID_BYTES)
        self.assertEqual(ctypes.sizeof(fccl._BootstrapCallbacksStruct), 3 * ctypes.sizeof(ctypes.c_void_p))

    def test_mem_stats_without_a_communicator(self):
        stats = fccl.mem_stats()
        self.assertEqual(set(stats), {"openMappings", "mappingReferences", "bytesMapped", "totalOpens",
                                      "totalCloses", "commRegistrations", "commDeviceBytes",
                                      "commGraphRegistrations"})
        self.assertEqual(stats["commRegistrations"], 0)
        self.assertEqual(stats["commGraphRegistrations"], 0)
        self.assertTrue(all(isinstance(value, int) and value >= 0 for value in stats.values()))


class UniqueIdTest(unittest.TestCase):
    def test_create_round_trip_and_pickle(self):
        uid = fccl.UniqueId.create()
        raw = bytes(uid)
        self.assertEqual(len(raw), fccl.UNIQUE_ID_BYTES)
        self.assertEqual(fccl.UniqueId.from_bytes(raw), uid)
        self.assertEqual(pickle.loads(pickle.dumps(uid)), uid)
        self.assertNotEqual(fccl.UniqueId.create(), uid)  # each carries its own random secret

    def test_length_is_checked(self):
        for length in (0, 127, 129):
            with self.assertRaises(ValueError):
                fccl.UniqueId.from_bytes(b"\1" * length)


class InitErrorTest(unittest.TestCase):
    def assert_invalid_argument(self, nranks, rank):
        uid = fccl.UniqueId.create()
        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.init_rank(nranks, rank, uid, fccl.Config(timeout_ms=SHORT_TIMEOUT_MS))
        self.assertEqual(caught.exception.result, fccl.Result.InvalidArgument)
        self.assertTrue(caught.exception.message, str(caught.exception))

    def test_zero_ranks(self):
        self.assert_invalid_argument(0, 0)

    def test_rank_out_of_range(self):
        self.assert_invalid_argument(2, 2)
        self.assert_invalid_argument(2, -1)

    def test_config_is_checked_by_the_library(self):
        # A timeout below -1 is out of range for fccl, not for Python: the library's check must come back whole.
        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(), fccl.Config(timeout_ms=-5))
        self.assertEqual(caught.exception.result, fccl.Result.InvalidArgument)
        self.assertTrue(caught.exception.message)

    def test_one_rank_without_a_gpu_fails_promptly(self):
        if gpu_count() > 0:
            self.skipTest("a GPU is visible: a one-rank communicator can be made here")
        start = time.monotonic()
        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(),
                                        fccl.Config(timeout_ms=SHORT_TIMEOUT_MS, comm_name="no-gpu"))
        self.assertEqual(caught.exception.result, fccl.Result.UnhandledCudaError, str(caught.exception))
        self.assertTrue(caught.exception.message)
        self.assertLess(time.monotonic() - start, SHORT_TIMEOUT_MS / 1000 + 10)

    def test_external_init_without_a_gpu_fails_promptly(self):
        if gpu_count() > 0:
            self.skipTest("a GPU is visible")
        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.from_external(1, 0, lambda send: send, config=fccl.Config(timeout_ms=SHORT_TIMEOUT_MS))
        self.assertEqual(caught.exception.result, fccl.Result.UnhandledCudaError, str(caught.exception))

    def test_external_init_argument_errors(self):
        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.from_external(2, 5, lambda send: send * 2)
        self.assertEqual(caught.exception.result, fccl.Result.InvalidArgument)

    def test_config_is_not_a_dict(self):
        with self.assertRaises(TypeError):
            fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(), {"timeout_ms": 5})


def run_python(code, env=None, timeout=60):
    """Runs code in a fresh interpreter (loading libfccl is once per process); returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-c", code], env=env or dict(os.environ), capture_output=True, text=True,
                          timeout=timeout)


class CudaRuntimeTest(unittest.TestCase):
    """Which CUDA runtime libfccl loads, read from its ELF file, and the refusal of a process that would hold two
    majors: faked here with a stand-in torch module whose version.cuda is another major."""

    def fccl_major(self):
        fccl.load()
        needed = fccl._elf_needed(fccl._library_file)
        major = fccl._cudart_major(needed)
        if major is None:
            self.skipTest(f"this libfccl does not load a shared libcudart: {needed}")
        return major

    def test_elf_needed_is_the_linkers_list(self):
        fccl.load()
        needed = fccl._elf_needed(fccl._library_file)
        self.assertIn("libc.so.6", needed)
        self.assertTrue(any(re.fullmatch(r"libcudart\.so\.\d+", name) for name in needed), needed)
        readelf = shutil.which("readelf")
        if readelf:
            out = subprocess.run([readelf, "-d", fccl._library_file], capture_output=True, text=True,
                                 timeout=60).stdout
            self.assertEqual(needed, re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))

    def test_elf_needed_of_other_files_is_empty(self):
        fccl.load()
        with tempfile.TemporaryDirectory() as directory:
            text = os.path.join(directory, "text")
            with open(text, "w") as handle:
                handle.write("not an ELF file\n" * 10)
            truncated = os.path.join(directory, "truncated")
            with open(fccl._library_file, "rb") as source, open(truncated, "wb") as handle:
                handle.write(source.read(200))
            self.assertEqual(fccl._elf_needed(text), [])
            self.assertEqual(fccl._elf_needed(truncated), [])
            self.assertEqual(fccl._elf_needed(os.path.join(directory, "missing")), [])

    def test_conflict_rules(self):
        conflict = fccl._cuda_runtime_conflict
        message = conflict(13, "12.4", [12, 13])
        self.assertIn("CUDA 13", message)
        self.assertIn("12.4", message)
        self.assertIn("FCCL_LIBRARY", message)
        self.assertIn("CUDA 12 toolkit", message)
        self.assertIn("2, 13", conflict(13, None, [2, 13]))
        self.assertIsNone(conflict(13, "13.0", [13]))
        self.assertIsNone(conflict(13, None, [13]))
        self.assertIsNone(conflict(None, "12.1", [12]))  # a static cudart: nothing to compare
        self.assertIsNone(conflict(12, "12.8", [12]))

    def fake_torch(self, cuda_version):
        return ("import sys, types\n"
                "torch = types.ModuleType('torch')\n"
                f"torch.version = types.SimpleNamespace(cuda={cuda_version!r})\n"
                "sys.modules['torch'] = torch\n")

    def test_torch_of_another_major_is_refused_at_load(self):
        other = str(self.fccl_major() + 1) + ".2"
        result = run_python(self.fake_torch(other) +
                            "import fccl\n"
                            "try:\n"
                            "    fccl.load()\n"
                            "except fccl.FcclError as exc:\n"
                            "    print(int(exc.result), exc.message)\n"
                            "    raise SystemExit(3)\n")
        self.assertEqual(result.returncode, 3, result.stdout + result.stderr)
        self.assertIn(f"{int(fccl.Result.InvalidUsage)} libfccl was built with CUDA", result.stdout)
        self.assertIn(other, result.stdout)

    def test_torch_of_the_same_major_loads(self):
        same = f"{self.fccl_major()}.0"
        result = run_python(self.fake_torch(same) + "import fccl\nprint(fccl.version())\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(int(result.stdout), header_version_code())

    def test_torch_imported_after_the_load_is_refused_at_creation(self):
        other = str(self.fccl_major() + 1) + ".0"
        result = run_python("import fccl\n"
                            "fccl.load()\n" + self.fake_torch(other) +
                            "try:\n"
                            "    fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create())\n"
                            "except fccl.FcclError as exc:\n"
                            "    print(exc.call, int(exc.result))\n"
                            "    raise SystemExit(3)\n")
        self.assertEqual(result.returncode, 3, result.stdout + result.stderr)
        self.assertEqual(result.stdout.split(), ["load", str(int(fccl.Result.InvalidUsage))])


class LibraryPathTest(unittest.TestCase):
    def environment_without_fccl_library(self):
        env = dict(os.environ)
        env.pop("FCCL_LIBRARY", None)
        return env

    def test_library_path_loads_that_file(self):
        fccl.load()
        path = fccl._library_file
        result = run_python("import fccl\n"
                            f"fccl.load(library_path={path!r})\n"
                            "print(fccl._library_file, fccl.version())\n"
                            "try:\n"
                            "    fccl.load('/elsewhere/libfccl.so.0')\n"
                            "except fccl.FcclError as exc:\n"
                            "    print(int(exc.result), exc.message)\n",
                            env=self.environment_without_fccl_library())
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(lines[0], f"{path} {header_version_code()}")
        self.assertIn(f"{int(fccl.Result.InvalidUsage)} libfccl is already loaded from {path}", lines[1])
        self.assertEqual(fccl.load(path), fccl._lib())  # the same file again is no error

    def test_library_path_of_the_creation_call(self):
        result = run_python("import fccl\n"
                            "try:\n"
                            "    fccl.Communicator.from_external(1, 0, lambda send: send,\n"
                            "                                    library_path='/nonexistent/libfccl.so.0')\n"
                            "except OSError as exc:\n"
                            "    print(exc)\n"
                            "    raise SystemExit(3)\n",
                            env=self.environment_without_fccl_library())
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertIn("library_path=/nonexistent/libfccl.so.0", result.stdout)


class DeviceArgumentTest(unittest.TestCase):
    def test_forms(self):
        index = fccl._device_index
        self.assertIsNone(index(None))
        self.assertEqual(index(3), 3)
        self.assertEqual(index("cuda:1"), 1)
        self.assertIsNone(index("cuda"))

        class TorchLikeDevice:
            def __init__(self, type_, index_):
                self.type, self.index = type_, index_

        self.assertEqual(index(TorchLikeDevice("cuda", 2)), 2)
        self.assertIsNone(index(TorchLikeDevice("cuda", None)))
        with self.assertRaises(ValueError):
            index(TorchLikeDevice("cpu", None))
        for bad in ("cpu", "cuda:x", "cuda:-1", -1):
            with self.assertRaises(ValueError, msg=repr(bad)):
                index(bad)
        for bad in (True, 1.0, [0]):
            with self.assertRaises(TypeError, msg=repr(bad)):
                index(bad)

    def test_bad_device_is_refused_before_any_c_call(self):
        with self.assertRaises(ValueError):
            fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(), device="cpu")

    def test_device_reaches_cuda(self):
        config = fccl.Config(timeout_ms=SHORT_TIMEOUT_MS)
        if gpu_count() == 0:
            with self.assertRaises(fccl.FcclError) as caught:
                fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(), config, device=0)
            self.assertEqual(caught.exception.result, fccl.Result.UnhandledCudaError)
            self.assertIn("device=0", caught.exception.message)
            return
        last = gpu_count() - 1
        with fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(), config, device=f"cuda:{last}") as comm:
            self.assertEqual(comm.device, last)


@functools.lru_cache(maxsize=None)
def gpu_count():
    """CUDA devices the runtime sees, asked in a child of the libcudart that libfccl links (no torch needed, and
    this process's CUDA state stays untouched); 0 when there is no driver or no device."""
    code = ("import ctypes, fccl\n"
            "fccl._lib()\n"
            "path = next(line.split()[-1] for line in open('/proc/self/maps') if 'libcudart' in line)\n"
            "count = ctypes.c_int()\n"
            "print(count.value if ctypes.CDLL(path).cudaGetDeviceCount(ctypes.byref(count)) == 0 else 0)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"cannot count the GPUs: {result.stderr}")
    return int(result.stdout)


class AddRmsNormCheckTest(unittest.TestCase):
    """Everything all_reduce_add_rms_norm checks before calling C: the argument parser only."""

    def check(self, input, output, residual=None, weight=None, eps=1e-6, scale=None, scale_mode=None, hidden=None):
        return fccl._add_rms_norm_arguments(input, residual, weight, output, hidden, eps, scale, scale_mode, None)

    def test_rows_from_the_last_dimension(self):
        args = self.check(FakeCudaArray((3, 128), "<f2"), FakeCudaArray((3, 128), "<f2"),
                          residual=FakeCudaArray((3, 128), "<f2"), weight=FakeCudaArray((128,), "<f2"))
        inp, res, w, out, tokens, hidden, eps, mode, scale, stream = args
        self.assertEqual((tokens, hidden, mode, scale, stream), (3, 128, fccl.ScaleMode.none, None, 0))
        self.assertEqual((inp.dtype, res.count, w.count, out.count), (fccl.DataType.float16, 384, 128, 384))
        self.assertAlmostEqual(eps, 1e-6)

    def test_explicit_buffers_need_hidden(self):
        with self.assertRaises(ValueError):
            self.check((0x1000, 256, "bfloat16"), (0x2000, 256, "bfloat16"))
        args = self.check((0x1000, 256, "bfloat16"), (0x2000, 256, "bfloat16"), hidden=64)
        self.assertEqual((args[4], args[5]), (4, 64))
        with self.assertRaises(ValueError):
            self.check((0x1000, 250, "bfloat16"), (0x2000, 250, "bfloat16"), hidden=64)  # not whole rows

    def test_types(self):
        for bad in ("<f8", "<i4"):
            with self.assertRaises(TypeError):
                self.check(FakeCudaArray((2, 8), bad), FakeCudaArray((2, 8), bad))
        with self.assertRaises(ValueError):  # residual of another type
            self.check(FakeCudaArray((2, 8), "<f4"), FakeCudaArray((2, 8), "<f4"),
                       residual=FakeCudaArray((2, 8), "<f2"))
        with self.assertRaises(ValueError):  # output of another type, not FP8
            self.check(FakeCudaArray((2, 8), "<f4"), FakeCudaArray((2, 8), "<f2"))
        with self.assertRaises(ValueError):  # a weight of a different length
            self.check(FakeCudaArray((2, 8), "<f4"), FakeCudaArray((2, 8), "<f4"), weight=FakeCudaArray((9,), "<f4"))

    def test_fp8_scales(self):
        inp = (0x1000, 4 * 64, "bfloat16")
        out = (0x2000, 4 * 64, "float8e4m3")
        args = self.check(inp, out, hidden=64, scale=(0x3000, 4, "float32"), scale_mode="dynamic")
        self.assertEqual((args[3].dtype, args[7], args[8].count), (fccl.DataType.float8e4m3,
                                                                   fccl.ScaleMode.dynamic, 4))
        args = self.check(inp, out, hidden=64, scale=(0x3000, 1, "float32"), scale_mode=fccl.ScaleMode.static)
        self.assertEqual(args[7], fccl.ScaleMode.static)
        for scale, mode in (((0x3000, 1, "float32"), "dynamic"),  # one scale per token needed
                            ((0x3000, 4, "float32"), "static"),  # one scale
                            ((0x3000, 4, "float16"), "dynamic"),  # float32 scales
                            (None, "dynamic"), (None, None), ((0x3000, 1, "float32"), "none")):
            with self.assertRaises(ValueError, msg=f"{scale} {mode}"):
                self.check(inp, out, hidden=64, scale=scale, scale_mode=mode)
        with self.assertRaises(ValueError):  # a scale without FP8
            self.check(inp, (0x2000, 256, "bfloat16"), hidden=64, scale=(0x3000, 1, "float32"), scale_mode="static")
        with self.assertRaises(ValueError):
            self.check(inp, out, hidden=64, scale=(0x3000, 4, "float32"), scale_mode="absmax")

    def test_eps_and_output(self):
        a = FakeCudaArray((2, 8), "<f4")
        for eps in (-1.0, float("nan"), float("inf")):
            with self.assertRaises(ValueError):
                self.check(a, FakeCudaArray((2, 8), "<f4"), eps=eps)
        with self.assertRaises(ValueError):
            self.check(a, None)
        with self.assertRaises(ValueError):
            self.check(a, FakeCudaArray((2, 8), "<f4", readonly=True))
        with self.assertRaises(ValueError):
            self.check(a, FakeCudaArray((2, 9), "<f4"))
        with self.assertRaises(ValueError):
            self.check(a, FakeCudaArray((2, 8), "<f4"), residual=FakeCudaArray((2, 8), "<f4", readonly=True))


class BufferCheckTest(unittest.TestCase):
    """Everything all_reduce checks before calling C: these run the argument parser only."""

    def check(self, send, recv=None, op="sum", stream=None):
        return fccl._all_reduce_arguments(send, recv, op, stream)

    def test_cuda_array_interface_types(self):
        for typestr, dtype in (("<f2", fccl.DataType.float16), ("<f4", fccl.DataType.float32),
                               ("<f8", fccl.DataType.float64), ("|i1", fccl.DataType.int8),
                               ("|u1", fccl.DataType.uint8), ("<i4", fccl.DataType.int32),
                               ("<u4", fccl.DataType.uint32), ("<i8", fccl.DataType.int64),
                               ("<u8", fccl.DataType.uint64)):
            send, recv, op, stream = self.check(FakeCudaArray((3, 5), typestr), FakeCudaArray((15,), typestr))
            self.assertEqual((send.dtype, send.count, recv.count, op, stream), (dtype, 15, 15, fccl.RedOp.sum, 0))

    def test_unknown_typestr_is_a_type_error(self):
        for typestr in (">f4", "<c8", "|b1", "<f16", "bf16"):
            with self.assertRaises(TypeError):
                self.check(FakeCudaArray((4,), typestr))

    def test_non_contiguous_is_a_value_error(self):
        with self.assertRaises(ValueError):
            self.check(FakeCudaArray((4, 4), "<f4", strides=(32, 4)))  # every other row
        with self.assertRaises(ValueError):
            self.check(FakeCudaArray((4, 4), "<f4", strides=(4, 16)))  # Fortran order

    def test_contiguous_strides_are_accepted(self):
        send, _, _, _ = self.check(FakeCudaArray((4, 4), "<f4", strides=(16, 4)))
        self.assertEqual(send.count, 16)
        send, _, _, _ = self.check(FakeCudaArray((1, 8), "<f2", strides=(999, 2)))  # one row: any outer stride
        self.assertEqual(send.count, 8)

    def test_in_place_when_recv_is_none(self):
        array = FakeCudaArray((7,))
        send, recv, _, _ = self.check(array)
        self.assertIs(send, recv)

    def test_dtype_and_count_must_agree(self):
        with self.assertRaises(ValueError):
            self.check(FakeCudaArray((8,), "<f4"), FakeCudaArray((8,), "<f2"))
        with self.assertRaises(ValueError):
            self.check(FakeCudaArray((8,), "<f4"), FakeCudaArray((9,), "<f4"))
        with self.assertRaises(ValueError):
            self.check((0x1000, 8, "bfloat16"), (0x2000, 8, fccl.DataType.float16))

    def test_read_only_recv_is_refused(self):
        with self.assertRaises(ValueError):
            self.check(FakeCudaArray((8,)), FakeCudaArray((8,), readonly=True))
        self.check(FakeCudaArray((8,), readonly=True), FakeCudaArray((8,)))  # a read-only send is fine

    def test_explicit_tuples(self):
        send, recv, _, _ = self.check((0x1000, 10, "bfloat16"), (0x2000, 10, fccl.DataType.bfloat16))
        self.assertEqual((send.pointer, send.count, send.dtype, recv.pointer), (0x1000, 10, fccl.DataType.bfloat16,
                                                                                 0x2000))
        self.assertEqual(send.nbytes, 20)
        for bad in ((0x1000, 10), (0x1000, -1, "float32"), ("0x1000", 1, "float32"), (0x1000, 1.5, "float32")):
            with self.assertRaises((TypeError, ValueError)):
                self.check(bad)
        with self.assertRaises(ValueError):
            self.check((0x1000, 10, "float128"))

    def test_other_objects_are_a_type_error(self):
        for bad in (b"bytes", [1, 2, 3], 12345, None):
            with self.assertRaises(TypeError):
                self.check(bad)

    def test_ops(self):
        array = FakeCudaArray((4,))
        for name, value in (("sum", 0), ("prod", 1), ("max", 2), ("min", 3), ("avg", 4)):
            self.assertEqual(self.check(array, op=name)[2], fccl.RedOp(value))
            self.assertEqual(self.check(array, op=fccl.RedOp(value))[2], fccl.RedOp(value))
        with self.assertRaises(ValueError):
            self.check(array, op="mean")
        with self.assertRaises(TypeError):
            self.check(array, op=1.0)

    def test_torch_reduce_ops(self):
        """torch.distributed.ReduceOp members are taken by name, as torch spells them (RedOpType.SUM), whether
        torch is installed or not; the ones fccl has no equivalent for are refused with their name."""
        array = FakeCudaArray((4,))

        class RedOpType:  # the shape of torch.distributed.ReduceOp.SUM: a member with a name
            def __init__(self, name):
                self.name = name

            def __str__(self):
                return "RedOpType." + self.name

        for name, value in (("SUM", 0), ("PRODUCT", 1), ("MAX", 2), ("MIN", 3), ("AVG", 4)):
            self.assertEqual(self.check(array, op=RedOpType(name))[2], fccl.RedOp(value))
        with self.assertRaisesRegex(ValueError, "BXOR"):
            self.check(array, op=RedOpType("BXOR"))
        try:
            import torch.distributed as dist
        except ImportError:
            return
        self.assertEqual(self.check(array, op=dist.ReduceOp.SUM)[2], fccl.RedOp.sum)
        self.assertEqual(self.check(array, op=dist.ReduceOp.MAX)[2], fccl.RedOp.max)

    def test_version_and_typing(self):
        self.assertEqual(fccl.__version__, "0.1.0")
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(fccl.__file__), "py.typed")))

    def test_streams(self):
        array = FakeCudaArray((4,))

        class TorchLikeStream:
            cuda_stream = 0x1234

        class CupyLikeStream:
            ptr = 0x5678

        self.assertEqual(self.check(array)[3], 0)
        self.assertEqual(self.check(array, stream=0xABC)[3], 0xABC)
        self.assertEqual(self.check(array, stream=TorchLikeStream())[3], 0x1234)
        self.assertEqual(self.check(array, stream=CupyLikeStream())[3], 0x5678)
        for bad in ("default", 1.0, object()):
            with self.assertRaises(TypeError):
                self.check(array, stream=bad)

    def test_stream_none_does_not_import_torch(self):
        if "torch" in sys.modules:
            self.skipTest("torch is imported already")
        self.check(FakeCudaArray((4,)))
        self.assertNotIn("torch", sys.modules)

    def test_destroyed_communicator_refuses_calls(self):
        comm = fccl.Communicator(None)
        with self.assertRaises(fccl.FcclError) as caught:
            comm.all_reduce(FakeCudaArray((4,)))
        self.assertEqual(caught.exception.result, fccl.Result.InvalidUsage)
        for call in (lambda: comm.all_gather(FakeCudaArray((4,)), FakeCudaArray((8,))),
                     lambda: comm.reduce_scatter(FakeCudaArray((8,)), FakeCudaArray((4,))),
                     lambda: comm.broadcast(FakeCudaArray((4,)))):
            with self.assertRaises(fccl.FcclError) as caught:
                call()
            self.assertEqual(caught.exception.result, fccl.Result.InvalidUsage)
        with self.assertRaises(fccl.FcclError):
            comm.register(FakeCudaArray((4,)))
        # A registration outliving its communicator was released by the destroy: deregister must not call C.
        fccl.Registration(comm, 0x1234, FakeCudaArray((4,))).deregister()
        comm.destroy()  # idempotent
        comm.abort()
        with comm:
            pass

    def test_error_pickles(self):
        error = fccl.FcclError(fccl.Result.Timeout, "rank 1 never arrived", "fcclCommInitRankConfig")
        copy = pickle.loads(pickle.dumps(error))
        self.assertEqual((copy.result, copy.message, copy.call, str(copy)),
                         (error.result, error.message, error.call, str(error)))
        self.assertIn("rank 1 never arrived", str(error))


class CollectiveArgumentTest(unittest.TestCase):
    """What all_gather, reduce_scatter and broadcast check before calling C (nranks and rank given, as the
    communicator would give them): the counts between send and recv, types, a writable recv, op, root, streams."""

    def test_all_gather_counts(self):
        send, recv, stream = fccl._all_gather_arguments(FakeCudaArray((5,)), FakeCudaArray((3, 5)), 3, None)
        self.assertEqual((send.count, recv.count, stream), (5, 15, 0))
        for nranks, recv_count in ((3, 14), (3, 5), (2, 15), (1, 6)):
            with self.assertRaises(ValueError):
                fccl._all_gather_arguments(FakeCudaArray((5,)), FakeCudaArray((recv_count,)), nranks, None)
        send, recv, _ = fccl._all_gather_arguments(FakeCudaArray((5,)), FakeCudaArray((5,)), 1, 7)  # one rank
        self.assertEqual(recv.count, 5)
        with self.assertRaises(ValueError):
            fccl._all_gather_arguments(FakeCudaArray((5,)), None, 2, None)  # recv is required

    def test_reduce_scatter_counts_and_op(self):
        send, recv, op, stream = fccl._reduce_scatter_arguments(FakeCudaArray((8,), "<f2"), FakeCudaArray((2,), "<f2"),
                                                                "max", 4, 0x99)
        self.assertEqual((send.count, recv.count, op, stream), (8, 2, fccl.RedOp.max, 0x99))
        for nranks, recv_count in ((4, 3), (3, 2), (8, 2)):
            with self.assertRaises(ValueError):
                fccl._reduce_scatter_arguments(FakeCudaArray((8,)), FakeCudaArray((recv_count,)), "sum", nranks, None)
        with self.assertRaises(ValueError):
            fccl._reduce_scatter_arguments(FakeCudaArray((8,)), FakeCudaArray((2,)), "mean", 4, None)
        with self.assertRaises(TypeError):
            fccl._reduce_scatter_arguments(FakeCudaArray((8,)), FakeCudaArray((2,)), 2.0, 4, None)
        with self.assertRaises(ValueError):
            fccl._reduce_scatter_arguments(FakeCudaArray((8,)), None, "sum", 4, None)

    def test_types_and_read_only_recv(self):
        with self.assertRaises(ValueError):
            fccl._all_gather_arguments(FakeCudaArray((4,), "<f4"), FakeCudaArray((8,), "<f2"), 2, None)
        with self.assertRaises(ValueError):
            fccl._reduce_scatter_arguments(FakeCudaArray((8,), "|i1"), FakeCudaArray((4,), "|u1"), "sum", 2, None)
        with self.assertRaises(ValueError):
            fccl._broadcast_arguments(FakeCudaArray((4,), "<i8"), FakeCudaArray((4,), "<u8"), 0, 0, 2, None)
        with self.assertRaises(ValueError):
            fccl._all_gather_arguments(FakeCudaArray((4,)), FakeCudaArray((8,), readonly=True), 2, None)
        with self.assertRaises(ValueError):
            fccl._reduce_scatter_arguments(FakeCudaArray((8,)), FakeCudaArray((4,), readonly=True), "sum", 2, None)
        with self.assertRaises(ValueError):
            fccl._broadcast_arguments(FakeCudaArray((4,), readonly=True), None, 0, 0, 2, None)  # in place
        with self.assertRaises(ValueError):
            fccl._broadcast_arguments(None, FakeCudaArray((4,), readonly=True), 0, 1, 2, None)
        fccl._all_gather_arguments(FakeCudaArray((4,), readonly=True), FakeCudaArray((8,)), 2, None)  # send may be
        with self.assertRaises(TypeError):
            fccl._all_gather_arguments(FakeCudaArray((4,), "<c8"), FakeCudaArray((8,), "<c8"), 2, None)
        with self.assertRaises(ValueError):
            fccl._all_gather_arguments(FakeCudaArray((4, 4), strides=(32, 4)), FakeCudaArray((32,)), 2, None)

    def test_broadcast_root_and_buffers(self):
        send, recv, stream = fccl._broadcast_arguments(FakeCudaArray((6,)), None, 1, 1, 2, None)
        self.assertIs(send, recv)  # in place
        send, recv, _ = fccl._broadcast_arguments((0x1000, 6, "bfloat16"), (0x2000, 6, "bfloat16"), 0, 0, 4, None)
        self.assertEqual((send.pointer, recv.pointer), (0x1000, 0x2000))
        send, recv, _ = fccl._broadcast_arguments(None, FakeCudaArray((6,)), 0, 3, 4, None)  # not the root
        self.assertIsNone(send)
        self.assertEqual(recv.count, 6)
        with self.assertRaises(ValueError):
            fccl._broadcast_arguments(None, FakeCudaArray((6,)), 2, 2, 4, None)  # the root must send
        with self.assertRaises(ValueError):
            fccl._broadcast_arguments(None, None, 0, 1, 2, None)
        with self.assertRaises(ValueError):
            fccl._broadcast_arguments(FakeCudaArray((6,)), FakeCudaArray((7,)), 0, 0, 2, None)
        for root in (2, -1, 100):
            with self.assertRaises(ValueError):
                fccl._broadcast_arguments(FakeCudaArray((6,)), None, root, 0, 2, None)
        for root in (0.0, "0", True, None):
            with self.assertRaises(TypeError):
                fccl._broadcast_arguments(FakeCudaArray((6,)), None, root, 0, 2, None)

    def test_send_and_recv_peers_and_buffers(self):
        buffer, stream = fccl._peer_arguments(FakeCudaArray((6,)), 1, 2, None, "send")
        self.assertEqual((buffer.count, stream), (6, 0))
        buffer, _ = fccl._peer_arguments((0x1000, 5, "bfloat16"), 0, 4, 7, "recv")
        self.assertEqual((buffer.pointer, buffer.dtype), (0x1000, fccl.DataType.bfloat16))
        for peer in (2, -1):
            with self.assertRaises(ValueError):
                fccl._peer_arguments(FakeCudaArray((6,)), peer, 2, None, "send")
        for peer in (1.0, "1", True, None):
            with self.assertRaises(TypeError):
                fccl._peer_arguments(FakeCudaArray((6,)), peer, 2, None, "send")
        with self.assertRaises(ValueError):  # a receive writes its buffer
            fccl._peer_arguments(FakeCudaArray((6,), readonly=True), 0, 2, None, "recv")
        fccl._peer_arguments(FakeCudaArray((6,), readonly=True), 0, 2, None, "send")  # a send only reads it

    def test_all_to_all_blocks_and_buffers(self):
        send, recv, count, _ = fccl._all_to_all_arguments(FakeCudaArray((12,)), FakeCudaArray((12,), pointer=0x1000),
                                                          4, None)
        self.assertEqual((send.count, recv.count, count), (12, 12, 3))
        same = FakeCudaArray((12,))
        for send, recv in ((same, same), (same, None)):  # in place is not an all-to-all
            with self.assertRaises(ValueError):
                fccl._all_to_all_arguments(send, recv, 4, None)
        with self.assertRaises(ValueError):  # 12 elements do not split into 5 blocks
            fccl._all_to_all_arguments(FakeCudaArray((12,)), FakeCudaArray((12,), pointer=0x1000), 5, None)
        with self.assertRaises(ValueError):
            fccl._all_to_all_arguments(FakeCudaArray((12,)), FakeCudaArray((8,), pointer=0x1000), 4, None)
        with self.assertRaises(ValueError):
            fccl._all_to_all_arguments(FakeCudaArray((12,)), FakeCudaArray((12,), "<f2", pointer=0x1000), 4, None)

    def test_shrink_takes_a_rank_or_ranks(self):
        self.assertEqual(fccl._exclude_list(3), [3])
        self.assertEqual(fccl._exclude_list((1, 2)), [1, 2])
        self.assertEqual(fccl._exclude_list([]), [])
        for bad in (1.0, "1", [True], [1, None], None):
            with self.assertRaises(TypeError):
                fccl._exclude_list(bad)

    def test_path_names_are_the_librarys(self):
        for path in fccl.Path:
            self.assertEqual(fccl._lib().fcclGetPathName(int(path)).decode(), path.name)
        self.assertEqual(fccl._lib().fcclGetPathName(len(fccl.Path)).decode(), "unknown")

    def test_group_nests_and_ends_when_the_block_raises(self):
        try:
            with fccl.group():
                with fccl.group():
                    pass
        except fccl.FcclError as error:  # a machine without NCCL: the group calls say what to install
            self.assertIn("NCCL", str(error))
            return
        with self.assertRaises(KeyError):  # the block's exception, not the group's
            with fccl.group():
                raise KeyError("inside")
        with fccl.group():  # the one above was ended: a new group starts from the top
            pass
        with self.assertRaises(fccl.FcclError) as caught:  # and no group is left open on this thread
            fccl._check(fccl._lib().fcclGroupEnd(), "fcclGroupEnd")
        self.assertIn("no group was started", str(caught.exception))

    def test_nranks_is_checked(self):
        for nranks in (0, -1, 1.5, True):
            with self.assertRaises(ValueError):
                fccl._all_gather_arguments(FakeCudaArray((4,)), FakeCudaArray((4,)), nranks, None)

    def test_streams(self):
        class TorchLikeStream:
            cuda_stream = 0x4321

        _, _, stream = fccl._all_gather_arguments(FakeCudaArray((2,)), FakeCudaArray((4,)), 2, TorchLikeStream())
        self.assertEqual(stream, 0x4321)
        _, _, _, stream = fccl._reduce_scatter_arguments(FakeCudaArray((4,)), FakeCudaArray((2,)), "sum", 2, 0xAB)
        self.assertEqual(stream, 0xAB)
        _, _, stream = fccl._broadcast_arguments(None, FakeCudaArray((4,)), 0, 1, 2, None)
        self.assertEqual(stream, 0)
        with self.assertRaises(TypeError):
            fccl._broadcast_arguments(FakeCudaArray((4,)), None, 0, 0, 2, "default")

    def test_zero_counts(self):
        send, recv, _ = fccl._all_gather_arguments((0, 0, "float32"), (0, 0, "float32"), 4, None)
        self.assertEqual((send.count, recv.count), (0, 0))
        send, recv, _, _ = fccl._reduce_scatter_arguments((0, 0, "int8"), (0, 0, "int8"), "sum", 4, None)
        self.assertEqual((send.count, recv.count), (0, 0))


class FakeTorchTest(unittest.TestCase):
    """The torch branch of the buffer and stream rules, with a stand-in module as sys.modules["torch"]: it checks
    the attributes the layer reads (is_cuda, is_contiguous, dtype, numel, data_ptr, device, the current stream)."""

    def setUp(self):
        if "torch" in sys.modules:
            self.skipTest("the real torch is imported")
        streams = []

        class Tensor:
            def __init__(self, dtype="torch.bfloat16", numel=6, pointer=0x7000, is_cuda=True, contiguous=True):
                self.dtype, self._numel, self._pointer = dtype, numel, pointer
                self.is_cuda, self._contiguous, self.device = is_cuda, contiguous, "cuda:1" if is_cuda else "cpu"

            def is_contiguous(self):
                return self._contiguous

            def numel(self):
                return self._numel

            def data_ptr(self):
                return self._pointer

        class Stream:
            cuda_stream = 0xBEEF

        def current_stream(device):
            streams.append(device)
            return Stream()

        module = type(sys)("torch")
        module.Tensor = Tensor
        module.cuda = type(sys)("torch.cuda")
        module.cuda.current_stream = current_stream
        sys.modules["torch"] = module
        self.addCleanup(sys.modules.pop, "torch")
        self.Tensor, self.streams = Tensor, streams

    def test_tensor_and_its_current_stream(self):
        send, recv, _, stream = fccl._all_reduce_arguments(self.Tensor(), self.Tensor(pointer=0x8000), "sum", None)
        self.assertEqual((send.pointer, send.count, send.dtype, recv.pointer), (0x7000, 6, fccl.DataType.bfloat16,
                                                                                 0x8000))
        self.assertEqual((stream, self.streams), (0xBEEF, ["cuda:1"]))
        _, _, _, stream = fccl._all_reduce_arguments(self.Tensor(), None, "sum", 5)
        self.assertEqual(stream, 5)  # an explicit stream wins

    def test_dtypes(self):
        for name, dtype in (("float16", fccl.DataType.float16), ("bfloat16", fccl.DataType.bfloat16),
                            ("float32", fccl.DataType.float32), ("float64", fccl.DataType.float64),
                            ("int8", fccl.DataType.int8), ("uint8", fccl.DataType.uint8),
                            ("int32", fccl.DataType.int32), ("int64", fccl.DataType.int64),
                            ("float8_e4m3fn", fccl.DataType.float8e4m3)):  # FP8: the fused norm's output only
            self.assertEqual(fccl._as_buffer(self.Tensor(dtype="torch." + name), "send").dtype, dtype)
        for name in ("torch.complex64", "torch.bool", "torch.float8_e5m2"):
            with self.assertRaises(TypeError):
                fccl._as_buffer(self.Tensor(dtype=name), "send")

    def test_add_rms_norm_takes_rows_and_the_current_stream(self):
        def tensor(dtype, shape, pointer):
            t = self.Tensor(dtype=dtype, numel=math.prod(shape), pointer=pointer)
            t.shape = shape
            return t
        inp = tensor("torch.bfloat16", (4, 64), 0x10000)
        out = tensor("torch.float8_e4m3fn", (4, 64), 0x20000)
        scales = tensor("torch.float32", (4,), 0x30000)
        args = fccl._add_rms_norm_arguments(inp, tensor("torch.bfloat16", (4, 64), 0x40000),
                                            tensor("torch.bfloat16", (64,), 0x50000), out, None, 1e-5, scales,
                                            "dynamic", None)
        self.assertEqual((args[4], args[5], args[7], args[9]), (4, 64, fccl.ScaleMode.dynamic, 0xBEEF))
        with self.assertRaises(ValueError):  # an FP8 output needs a scale mode
            fccl._add_rms_norm_arguments(inp, None, None, out, None, 1e-5, None, None, None)

    def test_collectives_take_the_tensors_current_stream(self):
        _, _, stream = fccl._all_gather_arguments(self.Tensor(numel=3), self.Tensor(numel=6, pointer=0x9000), 2, None)
        self.assertEqual((stream, self.streams), (0xBEEF, ["cuda:1"]))
        _, _, _, stream = fccl._reduce_scatter_arguments(self.Tensor(numel=6), self.Tensor(numel=3), "sum", 2, None)
        self.assertEqual(stream, 0xBEEF)
        send, recv, stream = fccl._broadcast_arguments(None, self.Tensor(), 0, 1, 2, None)  # recv's device
        self.assertEqual((send, recv.pointer, stream), (None, 0x7000, 0xBEEF))
        with self.assertRaises(ValueError):
            fccl._all_gather_arguments(self.Tensor(), self.Tensor(numel=12, dtype="torch.float16"), 2, None)
        with self.assertRaises(ValueError):
            fccl._broadcast_arguments(self.Tensor(is_cuda=False), None, 0, 0, 2, None)

    def test_host_or_strided_tensors_are_refused(self):
        with self.assertRaises(ValueError):
            fccl._as_buffer(self.Tensor(is_cuda=False), "send")
        with self.assertRaises(ValueError):
            fccl._as_buffer(self.Tensor(contiguous=False), "send")
        with self.assertRaises(ValueError):
            fccl._all_reduce_arguments(self.Tensor(), self.Tensor(dtype="torch.float32"), "sum", None)
        with self.assertRaises(ValueError):
            fccl._all_reduce_arguments(self.Tensor(), self.Tensor(numel=7), "sum", None)


class ExternalCallbackTest(unittest.TestCase):
    """The CFUNCTYPE callbacks called directly, as fccl would call them."""

    def call_allgather(self, bootstrap, send):
        send_buffer = ctypes.create_string_buffer(send, len(send))
        recv_buffer = ctypes.create_string_buffer(len(send) * bootstrap.nranks)
        result = bootstrap.allgather_fn(None, ctypes.addressof(send_buffer), ctypes.addressof(recv_buffer), len(send))
        return result, recv_buffer.raw

    def test_allgather_copies_in_rank_order(self):
        bootstrap = fccl._ExternalBootstrap(3, lambda send: b"".join(bytes([rank]) + send[1:] for rank in range(3)),
                                            None)
        result, gathered = self.call_allgather(bootstrap, b"\x09abc")
        self.assertEqual(result, fccl.Result.Success)
        self.assertEqual(gathered, b"\x00abc\x01abc\x02abc")
        self.assertIsNone(bootstrap.error)

    def test_exception_becomes_a_system_error(self):
        def broken(send):
            raise ConnectionError("peer went away")

        bootstrap = fccl._ExternalBootstrap(2, broken, None)
        result, _ = self.call_allgather(bootstrap, b"1234")
        self.assertEqual(result, fccl.Result.SystemError)
        self.assertIsInstance(bootstrap.error, ConnectionError)
        with self.assertRaises(fccl.FcclError) as caught:
            bootstrap.raise_for(result, "fcclCommInitExternal")
        self.assertEqual(caught.exception.result, fccl.Result.SystemError)
        self.assertIn("peer went away", str(caught.exception))
        self.assertIsInstance(caught.exception.__cause__, ConnectionError)

    def test_wrong_length_is_an_error(self):
        bootstrap = fccl._ExternalBootstrap(2, lambda send: send, None)  # one rank's worth, not two
        result, _ = self.call_allgather(bootstrap, b"1234")
        self.assertEqual(result, fccl.Result.SystemError)
        self.assertIsInstance(bootstrap.error, ValueError)

    def test_barrier(self):
        calls = []
        bootstrap = fccl._ExternalBootstrap(2, lambda send: send * 2, lambda: calls.append(1))
        self.assertEqual(bootstrap.barrier_fn(None), fccl.Result.Success)
        self.assertEqual(calls, [1])
        failing = fccl._ExternalBootstrap(2, lambda send: send * 2, lambda: 1 / 0)
        self.assertEqual(failing.barrier_fn(None), fccl.Result.SystemError)
        self.assertIsInstance(failing.error, ZeroDivisionError)
        self.assertFalse(fccl._ExternalBootstrap(2, lambda send: send, None).callbacks.barrier)  # NULL: fccl's own

    def test_callback_exception_through_the_library(self):
        # Two ranks, so that fccl calls the allgather (one rank exchanges nothing): with a GPU the callback's
        # exception comes back as fcclSystemError naming it; without one the init fails on the device first. Either
        # way nothing waits, and the exception does not escape through C.
        def broken(send):
            raise RuntimeError("no exchange today")

        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.from_external(2, 0, broken, config=fccl.Config(timeout_ms=SHORT_TIMEOUT_MS))
        if gpu_count() > 0:
            self.assertEqual(caught.exception.result, fccl.Result.SystemError, str(caught.exception))
            self.assertIn("no exchange today", str(caught.exception))
            self.assertIsInstance(caught.exception.__cause__, RuntimeError)
        else:
            self.assertEqual(caught.exception.result, fccl.Result.UnhandledCudaError, str(caught.exception))


# ---- with GPUs ----------------------------------------------------------------------------------------------------

GPU_RANKS = 2
GPU_TIMEOUT_S = 240  # for the whole two-rank run, torch's start and compilation included; under meson's 300 s
GRAPH_BYTES = 4 << 20
GRAPH_REPLAYS = 20
EAGER_COUNTS = (1, 7, 1000, 65536 + 3, (1 << 20) + 5)
TOLERANCE = {"bfloat16": 1e-2, "float32": 1e-5}


def torch_cuda_devices():
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def rank_inputs(torch, dtype, count, nranks, seed):
    """Every rank's input, the same on every rank (seeded per rank): random magnitudes in [0.25, 1.25), random signs,
    never zero. Returned on the host as the dtype itself, so the reference sees exactly what the ranks send."""
    inputs = []
    for rank in range(nranks):
        generator = torch.Generator().manual_seed(seed * 1000 + rank)
        magnitude = torch.rand(count, generator=generator, dtype=torch.float64) + 0.25
        sign = torch.randint(0, 2, (count,), generator=generator, dtype=torch.float64) * 2 - 1
        inputs.append((magnitude * sign).to(dtype))
    return inputs


def check_sum(torch, result, inputs, dtype_name):
    """Problems with result against the float64 sum of inputs: the error bound is the dtype's relative tolerance
    times the sum of the magnitudes (which grows with the number of ranks), element by element."""
    stacked = torch.stack([x.to(torch.float64) for x in inputs])
    reference = stacked.sum(0)
    bound = TOLERANCE[dtype_name] * stacked.abs().sum(0)
    error = (result.cpu().to(torch.float64) - reference).abs()
    bad = ~(error <= bound)  # NaN (a poisoned element never written) counts as bad
    if bad.any():
        index = int(bad.nonzero()[0])
        return [f"{int(bad.sum())} of {result.numel()} elements wrong, first at {index}: "
                f"{float(result.cpu()[index])} against {float(reference[index])}"]
    return []


def digest(torch, tensor):
    host = tensor.detach().cpu().contiguous()
    return hashlib.sha256(ctypes.string_at(host.data_ptr(), host.numel() * host.element_size())).hexdigest()


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]  # NCCL_UNIQUE_ID_BYTES


def nccl_scenario(torch, dist, rank, nranks, config):
    """Communicator.from_nccl over an NCCL communicator made here through libnccl itself (the one torch loaded, or
    the system's): its id travels over the gloo group. Returns (problems, digests)."""
    nccl = ctypes.CDLL("libnccl.so.2")
    nccl.ncclGetUniqueId.argtypes = [ctypes.POINTER(NcclUniqueId)]
    nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, NcclUniqueId, ctypes.c_int]
    nccl.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    nccl.ncclGetErrorString.restype = ctypes.c_char_p
    uid = NcclUniqueId()
    if rank == 0 and nccl.ncclGetUniqueId(ctypes.byref(uid)) != 0:
        raise RuntimeError("ncclGetUniqueId failed")
    # All 128 bytes: the array's .value would stop at the first zero byte.
    shared = [ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid)) if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)
    ctypes.memmove(ctypes.addressof(uid), shared[0], ctypes.sizeof(uid))
    nccl_comm = ctypes.c_void_p()
    result = nccl.ncclCommInitRank(ctypes.byref(nccl_comm), nranks, uid, rank)
    if result != 0:
        raise RuntimeError(f"ncclCommInitRank: {nccl.ncclGetErrorString(result).decode()}")
    problems = []
    try:
        with fccl.Communicator.from_nccl(nccl_comm.value, config=config) as nccl_based:
            if (nccl_based.rank, nccl_based.nranks) != (rank, nranks):
                problems.append(f"rank/nranks {nccl_based.rank}/{nccl_based.nranks}")
            inputs = rank_inputs(torch, torch.bfloat16, 54321, nranks, seed=9)
            x = inputs[rank].cuda()
            y = torch.full_like(x, float("nan"))
            nccl_based.all_reduce(x, y)
            torch.cuda.synchronize()
            problems += check_sum(torch, y, inputs, "bfloat16")
            digests = [digest(torch, y)]
    finally:
        nccl.ncclCommDestroy(nccl_comm)
    return problems, digests


COLLECTIVE_COUNTS = (1, 1007, 300001)  # 300001 bf16 elements: beyond LL for 2 ranks, direct or staged
COLLECTIVE_REPLAYS = 5


def collective_scenarios(torch, comm, rank, nranks, report, progress):
    """all_gather, reduce_scatter and broadcast, eager in place and out of place (outputs poisoned with NaN), and
    the three captured in one CUDA graph replayed with fresh data; reports one scenario each."""
    def block(tensor, count):
        return tensor[rank * count:(rank + 1) * count]

    progress[0] = "all_gather"
    problems, digests = [], []
    for count in COLLECTIVE_COUNTS:
        inputs = rank_inputs(torch, torch.bfloat16, count, nranks, seed=200 + count)
        expected = torch.cat(inputs)
        send = inputs[rank].cuda()
        recv = torch.full((nranks * count,), float("nan"), dtype=torch.bfloat16, device="cuda")
        if comm.all_gather(send, recv) is not recv:
            problems.append("all_gather did not return recv")
        in_place = torch.full_like(recv, float("nan"))
        block(in_place, count).copy_(send)
        comm.all_gather(block(in_place, count), in_place)
        torch.cuda.synchronize()
        for name, result in (("out of place", recv), ("in place", in_place)):
            if not torch.equal(result.cpu(), expected):  # moved, not computed: bit for bit
                problems.append(f"count {count} {name}: the gathered tensor is not the ranks' inputs")
            digests.append(digest(torch, result))
        if not torch.equal(send.cpu(), inputs[rank]):
            problems.append(f"count {count}: send was modified")
    report("all_gather", problems, digests)

    progress[0] = "reduce_scatter"
    problems = []
    for count in COLLECTIVE_COUNTS:
        inputs = rank_inputs(torch, torch.float32, nranks * count, nranks, seed=300 + count)
        send = inputs[rank].cuda()
        recv = torch.full((count,), float("nan"), dtype=torch.float32, device="cuda")
        if comm.reduce_scatter(send, recv, op="sum") is not recv:
            problems.append("reduce_scatter did not return recv")
        reduced = torch.empty_like(send)
        comm.all_reduce(send, reduced)
        in_place = send.clone()
        comm.reduce_scatter(in_place, block(in_place, count))
        torch.cuda.synchronize()
        problems += [f"count {count}: {p}" for p in check_sum(torch, recv, [block(x, count) for x in inputs],
                                                              "float32")]
        if not torch.equal(recv, block(reduced, count)):
            problems.append(f"count {count}: the reduce-scatter's bits are not the all-reduce's")
        if not torch.equal(block(in_place, count), recv):
            problems.append(f"count {count}: in place differs from out of place")
    report("reduce_scatter", problems)  # each rank holds its own block: nothing to compare across ranks

    progress[0] = "broadcast"
    problems, digests = [], []
    for root in range(nranks):
        for count in (7, 100003):
            inputs = rank_inputs(torch, torch.bfloat16, count, nranks, seed=400 + 10 * root + count)
            mine = inputs[rank].cuda()
            recv = torch.full_like(mine, float("nan"))
            comm.broadcast(mine if rank == root else None, recv, root=root)  # send is read on root only
            buffer = mine.clone()
            if comm.broadcast(buffer, root=root) is not buffer:
                problems.append("an in-place broadcast did not return its buffer")
            torch.cuda.synchronize()
            for name, result in (("out of place", recv), ("in place", buffer)):
                if not torch.equal(result.cpu(), inputs[root]):
                    problems.append(f"root {root} count {count} {name}: not the root's input")
                digests.append(digest(torch, result))
    report("broadcast", problems, digests)

    progress[0] = "collectives_graph"
    problems, digests = [], []
    count = COLLECTIVE_COUNTS[-1]
    gather_in = torch.empty(count, dtype=torch.bfloat16, device="cuda")
    gathered = torch.empty(nranks * count, dtype=torch.bfloat16, device="cuda")
    scatter_in = torch.empty(nranks * count, dtype=torch.float32, device="cuda")
    scattered = torch.empty(count, dtype=torch.float32, device="cuda")
    message = torch.empty(count, dtype=torch.bfloat16, device="cuda")
    root = nranks - 1

    def sequence():
        comm.all_gather(gather_in, gathered)
        comm.reduce_scatter(scatter_in, scattered, op="sum")
        comm.broadcast(message, root=root)

    for tensor in (gather_in, scatter_in, message):
        tensor.fill_(1)
    sequence()  # eager warm-up, as torch.cuda.graph recommends
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sequence()
    torch.cuda.synchronize()
    for replay in range(COLLECTIVE_REPLAYS):
        gather_inputs = rank_inputs(torch, torch.bfloat16, count, nranks, seed=500 + replay)
        scatter_inputs = rank_inputs(torch, torch.float32, nranks * count, nranks, seed=600 + replay)
        messages = rank_inputs(torch, torch.bfloat16, count, nranks, seed=700 + replay)
        gather_in.copy_(gather_inputs[rank])
        scatter_in.copy_(scatter_inputs[rank])
        message.copy_(messages[rank])
        gathered.fill_(float("nan"))
        scattered.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        if not torch.equal(gathered.cpu(), torch.cat(gather_inputs)):
            problems.append(f"replay {replay}: the all-gather is not the ranks' inputs")
        problems += [f"replay {replay}: reduce-scatter: {p}"
                     for p in check_sum(torch, scattered, [block(x, count) for x in scatter_inputs], "float32")]
        if not torch.equal(message.cpu(), messages[root]):
            problems.append(f"replay {replay}: the broadcast is not the root's input")
        digests += [digest(torch, gathered), digest(torch, message)]
    del graph
    torch.cuda.synchronize()
    report("collectives_graph", problems, digests)


COMPILE_SHAPE = (8, 129)  # two dimensions: the ops gather and scatter along dimension 0


def compile_scenarios(torch, comm, rank, nranks, report, progress):
    """The collectives under torch.compile(fullgraph=True), which refuses any graph break: through fccl.ops' custom
    ops, then through the Communicator's methods (which take the ops while traced); each compiled function is run
    with two sets of data, then captured in a CUDA graph and replayed with fresh data."""
    import fccl.ops
    root = nranks - 1

    def with_ops(x):
        total = fccl.ops.all_reduce(x * 2, comm) + 1
        gathered = fccl.ops.all_gather(x, comm)
        scattered = fccl.ops.reduce_scatter(gathered, comm)  # every rank gathered the same: nranks * x_rank
        broadcast = fccl.ops.broadcast(x, comm, root=root)
        in_place = x.clone()
        fccl.ops.all_reduce_(in_place, comm, op="max")
        return total, gathered, scattered, broadcast, in_place

    def with_methods(x, recv):
        in_place = x * 1
        comm.all_reduce(in_place)
        comm.all_gather(x, recv)
        block = torch.empty_like(x)
        comm.reduce_scatter(recv, block, op="sum")
        message = x.clone()
        comm.broadcast(message, root=root)
        return in_place, block, message

    def inputs_for(seed):
        flat = rank_inputs(torch, torch.float32, COMPILE_SHAPE[0] * COMPILE_SHAPE[1], nranks, seed)
        return [x.view(COMPILE_SHAPE) for x in flat]

    def check_ops(outputs, inputs):
        total, gathered, scattered, broadcast, in_place = [t.cpu() for t in outputs]
        problems = check_sum(torch, (total - 1) / 2, inputs, "float32")
        if not torch.equal(gathered, torch.cat(inputs)):
            problems.append(f"all_gather is not the ranks' inputs (shape {tuple(gathered.shape)})")
        if not torch.equal(scattered, inputs[rank] * nranks):
            problems.append(f"reduce_scatter is not {nranks} x this rank's input (shape {tuple(scattered.shape)})")
        if not torch.equal(broadcast, inputs[root]):
            problems.append("broadcast is not the root's input")
        if not torch.equal(in_place, torch.stack(inputs).max(0).values):
            problems.append("the in-place max is not the ranks' maximum")
        return problems

    def check_methods(outputs, inputs):
        in_place, block, message = [t.cpu() for t in outputs]
        problems = check_sum(torch, in_place, inputs, "float32")
        if not torch.equal(block, inputs[rank] * nranks):
            problems.append("reduce_scatter of the gathered inputs is not nranks x this rank's input")
        if not torch.equal(message, inputs[root]):
            problems.append("broadcast is not the root's input")
        return problems

    for name, function, extra, check in (("compile_ops", with_ops, (), check_ops),
                                         ("compile_methods", with_methods, (COMPILE_SHAPE[0] * nranks,), check_methods)):
        progress[0] = name
        problems, digests = [], []
        compiled = torch.compile(function, fullgraph=True)
        static_x = torch.empty(COMPILE_SHAPE, dtype=torch.float32, device="cuda")
        static_extra = [torch.empty((rows, COMPILE_SHAPE[1]), dtype=torch.float32, device="cuda") for rows in extra]
        for seed in (800, 801):
            inputs = inputs_for(seed)
            static_x.copy_(inputs[rank])
            outputs = compiled(static_x, *static_extra)
            torch.cuda.synchronize()
            problems += [f"eager seed {seed}: {p}" for p in check(outputs, inputs)]
            if name == "compile_ops":  # the all-reduce's result: the same bits on every rank
                digests.append(digest(torch, outputs[0]))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = compiled(static_x, *static_extra)
        torch.cuda.synchronize()
        for replay in range(3):
            inputs = inputs_for(900 + replay)
            static_x.copy_(inputs[rank])
            graph.replay()
            torch.cuda.synchronize()
            problems += [f"replay {replay}: {p}" for p in check(captured, inputs)]
        del graph
        torch.cuda.synchronize()
        report(name, problems, digests)


def add_rms_norm_scenario(torch, comm, rank, nranks):
    """all_reduce_add_rms_norm in bf16 (7 tokens; an odd hidden, which takes the kernel's general path, and 4096, its
    vector path): r' bit for bit all_reduce's sum plus the residual in fp32 rounded once, the output within bf16's
    rounding of float64 arithmetic on r', and the FP8 dynamic form within one E4M3 step, its scales max|y| / 448
    (docs/fused.md)."""
    problems, digests = [], []
    for hidden in (1031, 4096):
        found, sums = add_rms_norm_case(torch, comm, rank, nranks, hidden)
        problems += [f"hidden {hidden}: {p}" for p in found]
        digests += sums
    return problems, digests


def add_rms_norm_case(torch, comm, rank, nranks, hidden):
    """One hidden size of add_rms_norm_scenario."""
    problems, digests = [], []
    tokens, eps = 7, 1e-6
    inputs = rank_inputs(torch, torch.bfloat16, tokens * hidden, nranks, seed=400)
    residual0 = rank_inputs(torch, torch.bfloat16, tokens * hidden, 1, seed=401)[0].view(tokens, hidden)
    weight = (rank_inputs(torch, torch.float64, hidden, 1, seed=402)[0].abs() + 0.5).to(torch.bfloat16)
    x = inputs[rank].cuda().view(tokens, hidden)
    reduced = x.clone()
    comm.all_reduce(reduced)
    residual = residual0.cuda()
    out = torch.full_like(x, float("nan"))
    if comm.all_reduce_add_rms_norm(x, out, residual=residual, weight=weight.cuda(), eps=eps) is not out:
        problems.append("all_reduce_add_rms_norm did not return output")
    residual8 = residual0.cuda()
    out8 = torch.empty((tokens, hidden), dtype=torch.float8_e4m3fn, device="cuda")
    scales = torch.full((tokens,), float("nan"), dtype=torch.float32, device="cuda")
    comm.all_reduce_add_rms_norm(x, out8, residual=residual8, weight=weight.cuda(), eps=eps, scale=scales,
                                 scale_mode="dynamic")
    torch.cuda.synchronize()
    want = (residual0.float() + reduced.cpu().float()).to(torch.bfloat16)
    if not torch.equal(residual.cpu(), want) or not torch.equal(residual8.cpu(), want):
        problems.append("r' is not all_reduce's sum plus the residual rounded once")
    r = want.double()
    y = r * torch.rsqrt((r * r).mean(dim=1, keepdim=True) + eps) * weight.double()
    error = (out.cpu().double() - y).abs()
    if not bool((error <= y.abs() * (2.0 ** -8 + 1e-4) + 1e-30).all()):
        problems.append(f"output off by up to {float(error.max())}")
    want_scales = y.abs().amax(dim=1) / 448.0
    if not bool(((scales.cpu().double() - want_scales).abs() <= want_scales * 1e-4).all()):
        problems.append(f"scales {scales.cpu().tolist()}, want {want_scales.tolist()}")
    q = y / scales.cpu().double()[:, None]
    got = out8.cpu().float().double()
    # One E4M3 step at q: 2^(floor(log2 |q|) - 3), subnormals 2^-9, saturated at 448.
    step = torch.exp2(torch.floor(torch.log2(q.abs().clamp(min=2.0 ** -6))) - 3)
    if not bool(((got - q.clamp(-448, 448)).abs() <= 1.5 * step).all()):
        problems.append("FP8 output more than one step from y / scale")
    digests += [digest(torch, out), digest(torch, residual), digest(torch, out8), digest(torch, scales)]
    return problems, digests


def gpu_worker(rank, nranks, uid_queues, results, store_path):
    """One rank: runs every scenario in order and reports (rank, scenario, problems, digests) for each; stops at
    the first exception (the peers then fail on the communicator's timeout, which is short here)."""
    scenario = "start"
    # A kernel waiting for a rank that died gives up after this (default 10 minutes), well before the parent's
    # deadline; fccl reads it once, at its first call.
    os.environ.setdefault("FCCL_TIMEOUT", "20000")
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # no multicast objects on the GPU machine
    try:
        torch = importlib.import_module("torch")
        device = rank % torch.cuda.device_count()
        shared = torch.cuda.device_count() < nranks
        if shared:  # NCCL takes two ranks on one GPU only from processes that claim hosts of their own
            os.environ["NCCL_HOSTID"] = f"fccl-pytest-{rank}"
        torch.cuda.set_device(device)
        config = fccl.Config(timeout_ms=30000, comm_name=f"pytest-{rank}", allow_shared_device=shared)
        if rank == 0:
            uid = fccl.UniqueId.create()
            for peer_queue in uid_queues[1:]:
                peer_queue.put(uid)
        else:
            uid = uid_queues[rank].get(timeout=60)
        comm = fccl.Communicator.init_rank(nranks, rank, uid, config, device=f"cuda:{device}")  # device= on a GPU

        def report(name, problems, digests=()):
            results.put((rank, name, problems, list(digests)))

        scenario = "properties"
        report(scenario, [f"{name} is {got}, want {want}" for name, got, want in
                          (("nranks", comm.nranks, nranks), ("rank", comm.rank, rank),
                           ("device", comm.device, device), ("async_error", comm.async_error(), fccl.Result.Success))
                          if got != want])

        for dtype_name in ("bfloat16", "float32"):
            dtype = getattr(torch, dtype_name)
            for in_place in (True, False):
                scenario = f"eager_{dtype_name}_{'in_place' if in_place else 'out_of_place'}"
                problems, digests = [], []
                for count in EAGER_COUNTS:
                    inputs = rank_inputs(torch, dtype, count, nranks, seed=count)
                    send = inputs[rank].cuda()
                    if in_place:
                        comm.all_reduce(send)
                        result = send
                    else:
                        recv = torch.full_like(send, float("nan"))  # unwritten elements show
                        returned = comm.all_reduce(send, recv, op="sum")
                        if returned is not recv:
                            problems.append("all_reduce did not return recv")
                        result = recv
                        if not torch.equal(send.cpu(), inputs[rank]):
                            problems.append(f"count {count}: send was modified")
                    torch.cuda.synchronize()
                    problems += [f"count {count}: {p}" for p in check_sum(torch, result, inputs, dtype_name)]
                    digests.append(digest(torch, result))
                report(scenario, problems, digests)

        scenario = "streams"
        problems = []
        side = torch.cuda.Stream()
        inputs = rank_inputs(torch, torch.float32, 4099, nranks, seed=7)
        x = inputs[rank].cuda()
        side.wait_stream(torch.cuda.current_stream())
        comm.all_reduce(x, stream=side)  # the torch.cuda.Stream object
        comm.all_reduce(x, op=fccl.RedOp.sum, stream=side.cuda_stream)  # the raw handle: 2 * n * input
        with torch.cuda.stream(side):
            comm.barrier()
        side.synchronize()
        problems += check_sum(torch, x / nranks, inputs, "float32")
        report(scenario, problems)

        scenario = "add_rms_norm"
        problems, digests = add_rms_norm_scenario(torch, comm, rank, nranks)
        report(scenario, problems, digests)

        progress = ["all_gather"]  # the scenario running, for the report of an exception
        try:
            collective_scenarios(torch, comm, rank, nranks, report, progress)
        finally:
            scenario = progress[0]

        scenario = "graph"
        problems = []
        count = GRAPH_BYTES // 2
        static_in = torch.empty(count, dtype=torch.bfloat16, device="cuda")
        static_out = torch.empty_like(static_in)
        static_in.copy_(rank_inputs(torch, torch.bfloat16, count, nranks, seed=1)[rank])
        comm.all_reduce(static_in, static_out)  # eager warm-up, as torch.cuda.graph recommends
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            comm.all_reduce(static_in, static_out)
        torch.cuda.synchronize()
        if comm.mem_stats()["commGraphRegistrations"] <= 0:
            problems.append(f"no graph registration while the graph lives: {comm.mem_stats()}")
        digests = []
        for replay in range(GRAPH_REPLAYS):
            inputs = rank_inputs(torch, torch.bfloat16, count, nranks, seed=100 + replay)
            static_in.copy_(inputs[rank])
            static_out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            problems += [f"replay {replay}: {p}" for p in check_sum(torch, static_out, inputs, "bfloat16")]
            digests.append(digest(torch, static_out))
        del graph
        torch.cuda.synchronize()
        # CUDA runs the graph's user-object destructor on a thread of its own, soon after the graph goes; the
        # communicator's next barrier (or all-reduce) then releases the registrations. Bounded polling.
        # The ranks leave the loop together (on the sum of what is left everywhere): a rank that stopped on its own
        # count while a peer went on would leave that peer's barrier waiting until the communicator's timeout.
        for _ in range(500):
            comm.barrier()
            torch.cuda.synchronize()
            left = comm.mem_stats()["commGraphRegistrations"]
            everywhere = torch.tensor([float(left)], device="cuda")
            comm.all_reduce(everywhere)
            torch.cuda.synchronize()
            if everywhere.item() == 0:
                break
            time.sleep(0.01)
        if left != 0:
            problems.append(f"{left} graph registrations left after the graph was destroyed")
        report(scenario, problems, digests)

        scenario = "register"
        problems = []
        count = (1 << 21) + 1
        inputs = rank_inputs(torch, torch.float32, count, nranks, seed=3)
        buffer = inputs[rank].cuda()
        registration = comm.register(buffer)
        if comm.mem_stats()["commRegistrations"] != 1:
            problems.append(f"commRegistrations {comm.mem_stats()['commRegistrations']} after register, want 1")
        comm.all_reduce(buffer)
        torch.cuda.synchronize()
        problems += check_sum(torch, buffer, inputs, "float32")
        registration.deregister()
        registration.deregister()  # the second time does nothing
        if comm.mem_stats()["commRegistrations"] != 0:
            problems.append(f"commRegistrations {comm.mem_stats()['commRegistrations']} after deregister")
        report(scenario, problems, [digest(torch, buffer)])

        progress[0] = "compile_ops"
        try:
            compile_scenarios(torch, comm, rank, nranks, report, progress)
        finally:
            scenario = progress[0]

        scenario = "destroy"
        comm.destroy()
        comm.destroy()
        report(scenario, [])

        scenario = "process_group"
        dist = importlib.import_module("torch.distributed")
        dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=nranks)
        problems = []
        with fccl.Communicator.from_process_group(config=config) as group_comm:
            if (group_comm.rank, group_comm.nranks) != (rank, nranks):
                problems.append(f"rank/nranks {group_comm.rank}/{group_comm.nranks}")
            inputs = rank_inputs(torch, torch.float32, 12345, nranks, seed=5)
            x = inputs[rank].cuda()
            group_comm.all_reduce(x)
            torch.cuda.synchronize()
            problems += check_sum(torch, x, inputs, "float32")
            digests = [digest(torch, x)]
        report(scenario, problems, digests)

        scenario = "from_nccl"
        problems, digests = nccl_scenario(torch, dist, rank, nranks, config)
        dist.destroy_process_group()
        report(scenario, problems, digests)
    except BaseException:  # reported, not raised: the parent owns the verdict
        results.put((rank, scenario, ["raised:\n" + traceback.format_exc()], []))


SCENARIOS = ["properties", "eager_bfloat16_in_place", "eager_bfloat16_out_of_place", "eager_float32_in_place",
             "eager_float32_out_of_place", "streams", "add_rms_norm", "all_gather", "reduce_scatter", "broadcast",
             "collectives_graph", "graph", "register", "compile_ops", "compile_methods", "destroy", "process_group",
             "from_nccl"]


@unittest.skipUnless(torch_cuda_devices() >= 1, "needs torch with a CUDA device")
class TwoRankGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        context = multiprocessing.get_context("spawn")
        uid_queues = [context.Queue() for _ in range(GPU_RANKS)]
        results = context.Queue()
        cls.reports = {}  # (rank, scenario) -> (problems, digests)
        with tempfile.TemporaryDirectory() as store_dir:
            workers = [context.Process(target=gpu_worker, args=(rank, GPU_RANKS, uid_queues, results,
                                                                os.path.join(store_dir, "store")))
                       for rank in range(GPU_RANKS)]
            for worker in workers:
                worker.start()
            deadline = time.monotonic() + GPU_TIMEOUT_S
            expected = GPU_RANKS * len(SCENARIOS)
            while len(cls.reports) < expected and time.monotonic() < deadline:
                try:
                    rank, scenario, problems, digests = results.get(timeout=1)
                    cls.reports[(rank, scenario)] = (problems, digests)
                except queue.Empty:
                    if all(not worker.is_alive() for worker in workers) and results.empty():
                        break
            for worker in workers:
                worker.join(timeout=max(1, deadline - time.monotonic()))
                if worker.is_alive():
                    worker.terminate()
                    worker.join(timeout=10)
            cls.exit_codes = [worker.exitcode for worker in workers]

    def check_scenario(self, scenario):
        for rank in range(GPU_RANKS):
            report = self.reports.get((rank, scenario))
            if report is None:
                raised = [f"rank {r} at {s}: {p}" for (r, s), (p, _) in self.reports.items()
                          if any("raised" in x for x in p)]
                self.fail(f"rank {rank} did not report {scenario} (exit codes {self.exit_codes}); {raised}")
            self.assertEqual(report[0], [], f"rank {rank}, {scenario}")
        digests = [self.reports[(rank, scenario)][1] for rank in range(GPU_RANKS)]
        self.assertTrue(all(d == digests[0] for d in digests), f"{scenario}: results differ between ranks")

    def test_properties(self):
        self.check_scenario("properties")

    def test_eager_bfloat16_in_place(self):
        self.check_scenario("eager_bfloat16_in_place")

    def test_eager_bfloat16_out_of_place(self):
        self.check_scenario("eager_bfloat16_out_of_place")

    def test_eager_float32_in_place(self):
        self.check_scenario("eager_float32_in_place")

    def test_eager_float32_out_of_place(self):
        self.check_scenario("eager_float32_out_of_place")

    def test_streams(self):
        self.check_scenario("streams")

    def test_add_rms_norm(self):
        self.check_scenario("add_rms_norm")

    def test_all_gather(self):
        self.check_scenario("all_gather")

    def test_reduce_scatter(self):
        self.check_scenario("reduce_scatter")

    def test_broadcast(self):
        self.check_scenario("broadcast")

    def test_collectives_captured_in_a_graph(self):
        self.check_scenario("collectives_graph")

    def test_graph_replays_with_fresh_data(self):
        self.check_scenario("graph")

    def test_register_all_reduce_deregister(self):
        self.check_scenario("register")

    def test_custom_ops_under_torch_compile(self):
        self.check_scenario("compile_ops")

    def test_methods_under_torch_compile(self):
        self.check_scenario("compile_methods")

    def test_destroy(self):
        self.check_scenario("destroy")

    def test_from_process_group_gloo(self):
        self.check_scenario("process_group")

    def test_from_nccl(self):
        self.check_scenario("from_nccl")


if __name__ == "__main__":
    unittest.main()
