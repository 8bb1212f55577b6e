# SPDX-License-Identifier: Apache-2.0
"""The rendezvous token of fcclGetUniqueId."""
import ctypes

from ._c_api import UNIQUE_ID_BYTES, _UniqueIdStruct
from ._library import _check, _lib


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
