#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""pip installs of the Python layer, offline, each into a fresh virtual environment:
- the documented command, `pip install --no-build-isolation ./python`, run as it is with pip kept off every index
  (PIP_NO_INDEX); the library then comes from FCCL_LIBRARY;
- the wheel pip builds from python/: pure (py3-none-any), with the repository's LICENSE, no binary;
- a wheel that scripts/python-wheel builds with this build's libfccl.so.0 inside, tagged
  py3-none-manylinux_2_N_<arch> with N the newest glibc version the library needs (readelf's answer), with the
  LICENSE, which loads the library it carries with neither FCCL_LIBRARY nor PYTHONPATH set.

The environments see the interpreter's own pip, setuptools and wheel (--system-site-packages, as Debian's are): no
index is used.

  FCCL_LIBRARY=build/src/libfccl.so.0 python3 test/python/test_packaging.py [-v]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
HEADER = os.environ.get("TEST_FCCL_HEADER", os.path.join(ROOT, "include", "fccl.h"))
LIBRARY = os.environ.get("FCCL_LIBRARY", os.path.join(ROOT, "build", "src", "libfccl.so.0"))
TIMEOUT_S = 240
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}  # pip never asks an index


def packaging_python():
    """The first interpreter that has pip, setuptools and wheel: this one, python3 on PATH, Debian's."""
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if candidate and subprocess.run([candidate, "-c", "import setuptools, wheel, pip, venv"],
                                        capture_output=True, timeout=60).returncode == 0:
            return candidate
    return None


def header_version_code():
    with open(HEADER) as handle:
        text = handle.read()
    parts = [int(re.search(rf"#define FCCL_{name}\s+(\d+)", text).group(1)) for name in ("MAJOR", "MINOR", "PATCH")]
    return parts[0] * 10000 + parts[1] * 100 + parts[2]


def clean_environment(**extra):
    env = {key: value for key, value in os.environ.items()
           if key not in ("FCCL_LIBRARY", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def run(command, env=None, cwd=None):
    result = subprocess.run(command, env=env or clean_environment(), cwd=cwd, capture_output=True, text=True,
                            timeout=TIMEOUT_S)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result.stdout


PROBE = ("import fccl, fccl._library, os, importlib.metadata\n"
         "print(os.path.realpath(fccl.__file__))\n"
         "print(fccl.version())\n"
         "print(fccl._library._library_file)\n"
         "print(sum(1 for f in importlib.metadata.files('fccl') if f.name == 'LICENSE'))\n")


def repository_license():
    with open(os.path.join(ROOT, "LICENSE"), "rb") as handle:
        return handle.read()


def readelf_platform(library):
    """manylinux_2_N_<arch> for library, from binutils' readelf (an account of the ELF file independent of setup.py's
    own reader): N the newest GLIBC_2.N it needs."""
    versions = subprocess.run(["readelf", "-V", "--wide", library], capture_output=True, text=True,
                              timeout=60, check=True).stdout
    minors = [int(m) for m in re.findall(r"Name: GLIBC_2\.(\d+)", versions)]
    header = subprocess.run(["readelf", "-h", library], capture_output=True, text=True, timeout=60,
                            check=True).stdout
    machine = "x86_64" if "X86-64" in header else "aarch64" if "AArch64" in header else "unknown"
    return f"manylinux_2_{max(minors + [17])}_{machine}"


def wheel_metadata(archive):
    """(the WHEEL file's lines, the dist-info's LICENSE bytes or None)."""
    names = archive.namelist()
    wheel_file = next(name for name in names if name.endswith(".dist-info/WHEEL"))
    licence = next((name for name in names if ".dist-info/" in name and name.endswith("/LICENSE")), None)
    return (archive.read(wheel_file).decode().splitlines(), archive.read(licence) if licence else None)


class PackagingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.python = packaging_python()
        if cls.python is None:
            raise AssertionError("no python3 with pip, setuptools and wheel (scripts/install-deps installs "
                                 "python3-pip python3-setuptools python3-wheel)")
        if not os.path.exists(LIBRARY):
            raise AssertionError(f"no library at {LIBRARY}: set FCCL_LIBRARY to a built libfccl.so.0")
        cls.scratch = tempfile.mkdtemp(prefix="fccl-packaging-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def environment(self, name):
        """A fresh virtual environment; returns its python."""
        path = os.path.join(self.scratch, name)
        run([self.python, "-m", "venv", "--system-site-packages", "--without-pip", path])
        return os.path.join(path, "bin", "python"), os.path.realpath(path)

    def source_copy(self):
        """python/ copied to <scratch>/python (pip builds in the tree it is given), without build leftovers."""
        source = os.path.join(self.scratch, "python")
        if not os.path.exists(source):
            shutil.copytree(os.path.join(ROOT, "python"), source,
                            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "libfccl.so.0"))
        return source

    def test_license_is_the_repository_license(self):
        with open(os.path.join(ROOT, "python", "LICENSE"), "rb") as handle:
            self.assertEqual(handle.read(), repository_license(), "python/LICENSE must be a copy of LICENSE")

    def test_documented_install_offline(self):
        python, prefix = self.environment("from-repository")
        self.source_copy()
        run([python, "-m", "pip", "install", "--no-build-isolation", "./python"],
            env=clean_environment(**OFFLINE), cwd=self.scratch)
        where, version, loaded, licences = run([python, "-c", PROBE],
                                               env=clean_environment(FCCL_LIBRARY=LIBRARY), cwd=self.scratch).split()
        self.assertTrue(where.startswith(prefix + os.sep), where)
        self.assertEqual(int(version), header_version_code())
        self.assertEqual(loaded, os.path.realpath(LIBRARY))
        self.assertEqual(licences, "1")
        self.assertFalse(os.path.exists(os.path.join(os.path.dirname(where), "libfccl.so.0")))

    def test_pure_wheel_from_the_repository(self):
        out = os.path.join(self.scratch, "pure")
        run([self.python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", out,
             "./python"], env=clean_environment(**OFFLINE), cwd=os.path.dirname(self.source_copy()))
        wheels = [name for name in os.listdir(out) if name.endswith(".whl")]
        self.assertEqual(len(wheels), 1, wheels)
        self.assertRegex(wheels[0], r"^fccl-[\d.]+-py3-none-any\.whl$")  # loads libfccl at run time: no binary
        with zipfile.ZipFile(os.path.join(out, wheels[0])) as archive:
            self.assertFalse([name for name in archive.namelist() if ".so" in os.path.basename(name)])
            lines, licence = wheel_metadata(archive)
        self.assertIn("Root-Is-Purelib: true", lines)
        self.assertIn("Tag: py3-none-any", lines)
        self.assertEqual(licence, repository_license())

    def test_wheel_that_carries_the_library(self):
        out = os.path.join(self.scratch, "dist")
        run([os.path.join(ROOT, "scripts", "python-wheel"), LIBRARY, out],
            env=clean_environment(PYTHON=self.python))
        wheels = [name for name in os.listdir(out) if name.endswith(".whl")]
        self.assertEqual(len(wheels), 1, wheels)
        platform = readelf_platform(os.path.realpath(LIBRARY))
        self.assertRegex(wheels[0], rf"^fccl-[\d.]+-py3-none-{platform}\.whl$")
        with zipfile.ZipFile(os.path.join(out, wheels[0])) as archive:
            names = archive.namelist()
            self.assertIn("fccl/libfccl.so.0", names)
            self.assertIn("fccl/py.typed", names)
            with open(os.path.realpath(LIBRARY), "rb") as built:
                self.assertEqual(archive.read("fccl/libfccl.so.0"), built.read())
            lines, licence = wheel_metadata(archive)
        self.assertIn("Root-Is-Purelib: false", lines)
        self.assertIn(f"Tag: py3-none-{platform}", lines)
        self.assertEqual(licence, repository_license())

        python, prefix = self.environment("from-wheel")
        run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", os.path.join(out, wheels[0])])
        where, version, loaded, licences = run([python, "-c", PROBE], cwd=self.scratch).split()
        self.assertTrue(where.startswith(prefix + os.sep), where)
        self.assertEqual(int(version), header_version_code())
        self.assertEqual(loaded, os.path.join(os.path.dirname(where), "libfccl.so.0"))
        self.assertEqual(licences, "1")

    def test_wheel_needs_a_built_library(self):
        result = subprocess.run([os.path.join(ROOT, "scripts", "python-wheel"), os.path.join(self.scratch, "none")],
                                env=clean_environment(), capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(result.returncode, 1)
        self.assertIn("build the library first", result.stderr)


if __name__ == "__main__":
    unittest.main()
