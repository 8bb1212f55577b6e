# SPDX-License-Identifier: Apache-2.0
"""What the Python tests share: fccl.h read for its version and enums, a stand-in for a CUDA array, a fresh interpreter
to load libfccl in, and the number of GPUs the CUDA runtime sees (asked without torch)."""
import functools
import os
import re
import subprocess
import sys

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


def run_python(code, env=None, timeout=60):
    """Runs code in a fresh interpreter (loading libfccl is once per process); returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-c", code], env=env or dict(os.environ), capture_output=True, text=True,
                          timeout=timeout)


@functools.lru_cache(maxsize=None)
def gpu_count():
    """CUDA devices the runtime sees, asked in a child of the libcudart that libfccl links (no torch needed, and
    this process's CUDA state stays untouched); 0 when there is no driver or no device."""
    code = ("import ctypes, fccl\n"
            "fccl.load()\n"
            "path = next(line.split()[-1] for line in open('/proc/self/maps') if 'libcudart' in line)\n"
            "count = ctypes.c_int()\n"
            "print(count.value if ctypes.CDLL(path).cudaGetDeviceCount(ctypes.byref(count)) == 0 else 0)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"cannot count the GPUs: {result.stderr}")
    return int(result.stdout)
