#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The CUDA runtime and device (fccl._elf, _cuda_runtime, _device): which libcudart libfccl loads, read from its ELF
file; the refusal of a process that would hold two CUDA majors (faked with a stand-in torch module); the forms of
device= and their reaching CUDA.

Run alone: FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_cuda_runtime.py [-v]
TEST_FCCL_HEADER names include/fccl.h (default: found from this file's place in the tree).
"""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import fccl
import fccl._library
from fccl._cuda_runtime import _cuda_runtime_conflict, _cudart_major
from fccl._device import _device_index
from fccl._elf import _elf_needed
from support import SHORT_TIMEOUT_MS, gpu_count, header_version_code, run_python


class CudaRuntimeTest(unittest.TestCase):
    """Which CUDA runtime libfccl loads, read from its ELF file, and the refusal of a process that would hold two
    majors: faked here with a stand-in torch module whose version.cuda is another major."""

    def fccl_major(self):
        fccl.load()
        needed = _elf_needed(fccl._library._library_file)
        major = _cudart_major(needed)
        if major is None:
            self.skipTest(f"this libfccl does not load a shared libcudart: {needed}")
        return major

    def test_elf_needed_is_the_linkers_list(self):
        fccl.load()
        needed = _elf_needed(fccl._library._library_file)
        self.assertIn("libc.so.6", needed)
        self.assertTrue(any(re.fullmatch(r"libcudart\.so\.\d+", name) for name in needed), needed)
        readelf = shutil.which("readelf")
        if readelf:
            out = subprocess.run([readelf, "-d", fccl._library._library_file], capture_output=True, text=True,
                                 timeout=60).stdout
            self.assertEqual(needed, re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))

    def test_elf_needed_of_other_files_is_empty(self):
        fccl.load()
        with tempfile.TemporaryDirectory() as directory:
            text = os.path.join(directory, "text")
            with open(text, "w") as handle:
                handle.write("not an ELF file\n" * 10)
            truncated = os.path.join(directory, "truncated")
            with open(fccl._library._library_file, "rb") as source, open(truncated, "wb") as handle:
                handle.write(source.read(200))
            self.assertEqual(_elf_needed(text), [])
            self.assertEqual(_elf_needed(truncated), [])
            self.assertEqual(_elf_needed(os.path.join(directory, "missing")), [])

    def test_conflict_rules(self):
        conflict = _cuda_runtime_conflict
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


class DeviceArgumentTest(unittest.TestCase):
    def test_forms(self):
        index = _device_index
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


if __name__ == "__main__":
    unittest.main()
