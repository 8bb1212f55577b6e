#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The library as Python loads it (fccl._library, _c_api, _enums): FCCL_LIBRARY and library_path=, one libfccl per
process, a clear OSError when none loads, the version, the enums and prototypes against fccl.h, the struct sizes,
error strings, FcclError across processes, mem_stats without a communicator, the package's version and py.typed.

Run alone: FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_library.py [-v]
TEST_FCCL_HEADER names include/fccl.h (default: found from this file's place in the tree).
"""
import ctypes
import os
import pickle
import re
import subprocess
import sys
import unittest

import fccl
import fccl._library
from fccl._c_api import _PROTOTYPES, _BootstrapCallbacksStruct, _ConfigStruct, _MemStatsStruct, _UniqueIdStruct
from fccl._library import _lib
from support import HERE, header_enum, header_text, header_version_code, run_python


class LibraryTest(unittest.TestCase):
    def test_loads_the_library_named_by_fccl_library(self):
        library = _lib()
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
            # fcclNum* count the members; fcclMaxRedOp only gives the op type the range of communicators' own ops.
            # A second C name for a value (fcclChar, fcclHalf: NCCL's own second names) is a C spelling only: the
            # Python enum names each value once.
            c_values = {}
            for name, value in header_enum(c_enum).items():
                if not name.startswith("fcclNum") and name != "fcclMaxRedOp" and value not in c_values.values():
                    c_values[name[len(prefix):].lower()] = value
            python_values = {member.name.lower(): member.value for member in python_enum}
            self.assertEqual(python_values, c_values, c_enum)

    def test_split_nocolor_is_the_headers(self):
        found = re.search(r"#define FCCL_SPLIT_NOCOLOR \((-?\d+)\)", header_text())
        self.assertIsNotNone(found)
        self.assertEqual(fccl.SPLIT_NOCOLOR, int(found.group(1)))

    def test_prototypes_match_the_header(self):
        # Every declared function takes as many arguments as fccl.h gives it, the collectives included.
        text = re.sub(r"/\*.*?\*/", "", header_text(), flags=re.S)
        declared = {m.group(1): m.group(2) for m in re.finditer(r"FCCL_API [^;(]*?\b(fccl\w+)\(([^)]*)\)", text)}
        for name in ("fcclAllReduce", "fcclAllGather", "fcclReduceScatter", "fcclBroadcast", "fcclBarrier"):
            self.assertIn(name, _PROTOTYPES)
        for name, (_, argtypes) in _PROTOTYPES.items():
            self.assertIn(name, declared)
            parameters = [p for p in declared[name].split(",") if p.strip() and p.strip() != "void"]
            self.assertEqual(len(argtypes), len(parameters), name)

    def test_every_result_has_its_own_error_string(self):
        strings = [fccl.error_string(result) for result in fccl.Result]
        self.assertTrue(all(strings), strings)
        self.assertEqual(len(set(strings)), len(strings), strings)

    def test_scalar_residences_match_the_header(self):
        from fccl import _premul
        self.assertEqual(header_enum("fcclScalarResidence_t"),
                         {"fcclScalarDevice": _premul._SCALAR_DEVICE,
                          "fcclScalarHostImmediate": _premul._SCALAR_HOST_IMMEDIATE})
        self.assertEqual(header_enum("fcclRedOp_t")["fcclNumOps"], 5)

    def test_struct_sizes_match_the_c_layout(self):
        # size_t, 2 x unsigned, 2 x int, a pointer, 4 x int (allowSharedDevice, splitShare, minCTAs, maxCTAs): 48
        # bytes on x86-64.
        self.assertEqual(ctypes.sizeof(_ConfigStruct), 48)
        self.assertEqual([name for name, _ in _ConfigStruct._fields_][-3:], ["splitShare", "minCTAs", "maxCTAs"])
        self.assertEqual(ctypes.sizeof(_MemStatsStruct), 8 + 11 * 8)
        self.assertEqual(ctypes.sizeof(_UniqueIdStruct), fccl.UNIQUE_ID_BYTES)
        self.assertEqual(ctypes.sizeof(_BootstrapCallbacksStruct), 3 * ctypes.sizeof(ctypes.c_void_p))

    def test_mem_stats_without_a_communicator(self):
        stats = fccl.mem_stats()
        self.assertEqual(set(stats), {"openMappings", "mappingReferences", "bytesMapped", "totalOpens",
                                      "totalCloses", "commRegistrations", "commDeviceBytes",
                                      "commGraphRegistrations", "arenaBytes", "arenaChunks", "commPeerBytes"})
        self.assertEqual(stats["commRegistrations"], 0)
        self.assertEqual(stats["commPeerBytes"], 0)
        self.assertEqual(stats["commGraphRegistrations"], 0)
        self.assertTrue(all(isinstance(value, int) and value >= 0 for value in stats.values()))

    def test_version_and_typing(self):
        self.assertEqual(fccl.__version__, "0.1.0")
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(fccl.__file__), "py.typed")))

    def test_error_pickles(self):
        error = fccl.FcclError(fccl.Result.Timeout, "rank 1 never arrived", "fcclCommInitRankConfig")
        copy = pickle.loads(pickle.dumps(error))
        self.assertEqual((copy.result, copy.message, copy.call, str(copy)),
                         (error.result, error.message, error.call, str(error)))
        self.assertIn("rank 1 never arrived", str(error))

    def test_path_names_are_the_librarys(self):
        for path in fccl.Path:
            self.assertEqual(_lib().fcclGetPathName(int(path)).decode(), path.name)
        self.assertEqual(_lib().fcclGetPathName(len(fccl.Path)).decode(), "unknown")


class LibraryPathTest(unittest.TestCase):
    def environment_without_fccl_library(self):
        env = dict(os.environ)
        env.pop("FCCL_LIBRARY", None)
        return env

    def test_library_path_loads_that_file(self):
        fccl.load()
        path = fccl._library._library_file
        result = run_python("import fccl\n"
                            f"fccl.load(library_path={path!r})\n"
                            "print(fccl._library._library_file, fccl.version())\n"
                            "try:\n"
                            "    fccl.load('/elsewhere/libfccl.so.0')\n"
                            "except fccl.FcclError as exc:\n"
                            "    print(int(exc.result), exc.message)\n",
                            env=self.environment_without_fccl_library())
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(lines[0], f"{path} {header_version_code()}")
        self.assertIn(f"{int(fccl.Result.InvalidUsage)} libfccl is already loaded from {path}", lines[1])
        self.assertEqual(fccl.load(path), _lib())  # the same file again is no error

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


if __name__ == "__main__":
    unittest.main()
