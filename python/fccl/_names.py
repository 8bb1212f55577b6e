# SPDX-License-Identifier: Apache-2.0
"""Communicators by name. Every Communicator has a name, unique in its process: the one given at creation (name=),
else an automatic one. fccl.ops' torch custom ops carry the name, not the communicator's address, and find the
communicator here each time they run, so a graph that torch.compile saved (inductor's caches, a vLLM or SGLang
compile cache) stays valid in the next process and after a destroy: a communicator created there under the same
name serves it, and a name that no live communicator holds is an FcclError that says so.

The registry holds a communicator from its creation until its destroy() or abort(). Automatic names hold the
process id, so a graph compiled with an unnamed communicator never meets another communicator in another process."""
import itertools
import os
import threading

from ._enums import Result
from ._library import FcclError

_lock = threading.Lock()
_communicators = {}  # name -> Communicator, or _CREATING while the creation under that name runs
_serial = itertools.count()
_CREATING = object()


def _check_name(name):
    if not isinstance(name, str):
        raise TypeError(f"a communicator's name is a str, not {type(name).__name__}")
    if not name or "\0" in name:
        raise ValueError(f"a communicator's name must be a non-empty string without NUL, got {name!r}")
    return name


def _reserve(name=None) -> str:
    """Takes name (None: a new automatic name) for a creation about to run; returns it. A name held by a live
    communicator or a creation under way raises ValueError, before anything collective has started."""
    with _lock:
        if name is None:
            name = f"anonymous-{os.getpid()}-{next(_serial)}"
        _check_name(name)
        if name in _communicators:
            what = "a creation under way" if _communicators[name] is _CREATING else "a live communicator"
            raise ValueError(f"the communicator name {name!r} is taken by {what}; destroy that communicator first, "
                             "or choose another name")
        _communicators[name] = _CREATING
        return name


def _bind(name, comm):
    """Gives name, reserved for the creation just done (or free), to the communicator it created."""
    _check_name(name)
    with _lock:
        holder = _communicators.get(name, _CREATING)
        if holder is not _CREATING and holder is not comm:
            raise ValueError(f"the communicator name {name!r} is taken by a live communicator")
        _communicators[name] = comm


def _release(name, comm=None):
    """Frees name: a creation that failed (comm None), or comm's destroy or abort."""
    with _lock:
        holder = _communicators.get(name)
        if holder is (comm if comm is not None else _CREATING):
            del _communicators[name]


class _Reservation:
    """`with _Reservation(name) as name:` around a creation: the name is freed again when the creation raises."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.name = _reserve(self.name)
        return self.name

    def __exit__(self, kind, value, traceback):
        if kind is not None:
            _release(self.name)
        return False


def _lookup(name):
    """The live communicator named name; FcclError (InvalidUsage) naming it when there is none."""
    communicator = _communicators.get(name) if isinstance(name, str) else None
    if communicator is None or communicator is _CREATING:
        with _lock:
            live = sorted(n for n, c in _communicators.items() if c is not _CREATING)
        known = ", ".join(repr(n) for n in live) if live else "none"
        raise FcclError(Result.InvalidUsage,
                        f"no fccl communicator named {name!r} lives in this process (destroyed, aborted, or not "
                        f"created here: create one with name={name!r}); live names: {known}", "lookup")
    return communicator


def _names():
    """The names of the live communicators, sorted."""
    with _lock:
        return sorted(n for n, c in _communicators.items() if c is not _CREATING)
