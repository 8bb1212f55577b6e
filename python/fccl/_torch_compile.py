# SPDX-License-Identifier: Apache-2.0
"""Whether torch.compile is tracing the caller. This module imports nothing: fccl.ops sets the hook below when it is
imported, so the methods can ask without importing torch or fccl.ops themselves."""

_torch_is_compiling = None  # torch.compiler.is_compiling, set by fccl.ops when it is imported


def _compiling() -> bool:
    """True while torch.compile traces the caller: the methods then take fccl.ops' custom ops instead of ctypes,
    which TorchDynamo cannot trace. False whenever fccl.ops is not imported (it is once a communicator exists in a
    process that has imported torch)."""
    return _torch_is_compiling is not None and _torch_is_compiling()


def _traced_stream(stream, call):
    """Refuses stream= under torch.compile: the custom ops run on torch's current stream."""
    if stream is not None:
        raise ValueError(f"{call}: stream= cannot be given under torch.compile (the op runs on torch's current "
                         "stream; use `with torch.cuda.stream(s):`)")
