# SPDX-License-Identifier: Apache-2.0
"""Which CUDA runtimes a process holds, by major version: the one a library was linked against, the ones mapped into
this process, and why two majors in one process are refused."""
import os
import re
from typing import List, Optional

_CUDART_NAME = re.compile(r"^libcudart\.so\.(\d+)$")


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
