# SPDX-License-Identifier: Apache-2.0
"""Metadata is in pyproject.toml. This file only gives the wheel its platform tag.

From python/ as it is in the repository, the package is Python code that loads libfccl.so.0 at run time (FCCL_LIBRARY
or the dynamic loader): the wheel is pure, py3-none-any. A wheel that carries libfccl.so.0 inside the package
(scripts/python-wheel puts it there) is for one platform: py3-none-manylinux_2_N_<arch>, N being the newest glibc
symbol version the library needs, when the library needs nothing beyond glibc's own libraries and the CUDA runtime
(libcudart.so.M, which it leaves to the system as CUDA wheels do: auditwheel's --exclude); otherwise the plain
py3-none-linux_<arch>. No binary in it is Python-version specific (ctypes), hence py3-none."""
import importlib.util
import os
import re
import sys

from setuptools import setup
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(HERE, "fccl", "libfccl.so.0")
BUNDLED = os.path.exists(LIBRARY)
# What a manylinux wheel may take from the system without carrying it (PEP 600's glibc family), plus the CUDA runtime.
GLIBC_FAMILY = re.compile(r"(libc\.so\.6|libm\.so\.6|libdl\.so\.2|librt\.so\.1|libpthread\.so\.0|"
                          r"ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1)$")
CUDA_RUNTIME = re.compile(r"libcudart\.so\.\d+$")
OLDEST_MANYLINUX = 17  # manylinux_2_17 is the oldest name PEP 600 gives


def _elf_module():
    """fccl/_elf.py itself (standard library only): the package is not installed while it is being built."""
    spec = importlib.util.spec_from_file_location("fccl_elf_for_setup", os.path.join(HERE, "fccl", "_elf.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def platform_tag(library):
    elf = _elf_module()
    machine = elf._elf_machine(library)
    if machine is None:
        sys.exit(f"setup.py: {library} is not an x86-64 or aarch64 ELF shared object")
    needed = elf._elf_needed(library)
    others = [name for name in needed if not GLIBC_FAMILY.match(name) and not CUDA_RUNTIME.match(name)]
    glibc_minors = [OLDEST_MANYLINUX]
    for versions in elf._elf_version_needs(library).values():
        for version in versions:
            match = re.fullmatch(r"GLIBC_2\.(\d+)(?:\.\d+)*", version)
            if match:
                glibc_minors.append(int(match.group(1)))
    if others or not needed:
        print(f"setup.py: {library} needs {others or 'nothing readable'} beyond glibc and the CUDA runtime: "
              f"tagged linux_{machine}, not manylinux", file=sys.stderr)
        return f"linux_{machine}"
    return f"manylinux_2_{max(glibc_minors)}_{machine}"


class PlatformDistribution(Distribution):
    def has_ext_modules(self):
        return BUNDLED


commands = {}
if BUNDLED:
    try:  # setuptools >= 70.1 has its own; before, the wheel package's
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:
        from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        """py3-none-<platform>: ctypes code for any Python 3, a library for one platform."""

        def get_tag(self):
            return "py3", "none", platform_tag(LIBRARY)

    commands["bdist_wheel"] = PlatformWheel

setup(distclass=PlatformDistribution, cmdclass=commands)
