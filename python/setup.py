# SPDX-License-Identifier: Apache-2.0
"""Metadata is in pyproject.toml. This file only marks a package that carries libfccl.so.0 (a wheel made by
scripts/python-wheel) as one for this platform, so pip does not install a Linux x86-64 library elsewhere."""
import os

from setuptools import setup
from setuptools.dist import Distribution

BUNDLED = os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fccl", "libfccl.so.0"))


class PlatformDistribution(Distribution):
    def has_ext_modules(self):
        return BUNDLED


commands = {}
if BUNDLED:
    from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        """py3-none-<platform>: ctypes code for any Python 3, a library for one platform."""

        def get_tag(self):
            _, _, platform = super().get_tag()
            return "py3", "none", platform

    commands["bdist_wheel"] = PlatformWheel

setup(distclass=PlatformDistribution, cmdclass=commands)
