# SPDX-License-Identifier: Apache-2.0
"""fcclConfig_t: the options of a communicator's creation."""
import ctypes
from dataclasses import dataclass
from typing import Optional

from ._c_api import CONFIG_MAGIC, _CONFIG_UNDEF_INT, _ConfigStruct
from ._library import version


@dataclass
class Config:
    """fcclConfig_t, started like FCCL_CONFIG_INITIALIZER. timeout_ms -1 means FCCL_BOOTSTRAP_TIMEOUT; with
    blocking False the init returns at once and Communicator.async_error() is InProgress until it is done.
    split_share: NCCL's splitShare for the NCCL communicators of split()'s children (None: NCCL's default).
    min_ctas and max_ctas are the SM budget (NCCL's minCTAs and maxCTAs): every kernel of the communicator runs on
    at least and at most that many blocks; -1: FCCL_MIN_CTAS and FCCL_MAX_CTAS, else none (docs/collectives.md)."""
    blocking: bool = True
    timeout_ms: int = _CONFIG_UNDEF_INT
    comm_name: Optional[str] = None
    allow_shared_device: bool = False
    split_share: Optional[bool] = None
    min_ctas: int = _CONFIG_UNDEF_INT
    max_ctas: int = _CONFIG_UNDEF_INT

    def _struct(self):
        """The C struct; it holds the only reference to the encoded name, so it must live while the call runs."""
        config = _ConfigStruct()
        config.size = ctypes.sizeof(_ConfigStruct)
        config.magic = CONFIG_MAGIC
        config.version = version()  # the loaded library's, as the header's initializer uses the compiled one
        config.blocking = 1 if self.blocking else 0
        config.timeoutMs = int(self.timeout_ms)
        config.commName = self.comm_name.encode() if self.comm_name is not None else None
        config.allowSharedDevice = 1 if self.allow_shared_device else 0
        config.splitShare = _CONFIG_UNDEF_INT if self.split_share is None else (1 if self.split_share else 0)
        config.minCTAs = int(self.min_ctas)
        config.maxCTAs = int(self.max_ctas)
        return config


def _config_pointer(config):
    if config is None:
        return None
    if not isinstance(config, Config):
        raise TypeError(f"config must be a fccl.Config, not {type(config).__name__}")
    return ctypes.pointer(config._struct())
