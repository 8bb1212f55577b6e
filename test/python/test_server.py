#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fccl.server's CustomAllReduce without a GPU: a stand-in `torch` module as sys.modules["torch"] and a stand-in
communicator that records its calls. They check the rules the object adds around the communicator: which tensors
should_custom_ar and should_fuse_add_rms_norm take, that a refused tensor makes no call, what is allocated and
passed to the communicator (out of place, FP8 outputs, per-token scales shaped tokens x 1), capture()'s counting and
its end-of-capture check across ranks (a mismatch raises on every rank, a block that raises skips it), and close().
test_server_gpu.py runs the object on GPUs with torch.

Run alone: FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_server.py [-v]
"""
import importlib
import math
import sys
import types
import unittest

import fccl
from fccl import _names


class DType:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def __repr__(self):
        return f"torch.{self.name}"


class Device:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index

    def __eq__(self, other):
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)


def fake_torch():
    torch = types.ModuleType("torch")
    for name, size in (("float16", 2), ("bfloat16", 2), ("float32", 4), ("float64", 8), ("int32", 4),
                       ("int64", 8), ("float8_e4m3fn", 1)):
        setattr(torch, name, DType(name, size))

    class Tensor:
        def __init__(self, shape, dtype, device=Device("cuda", 0), contiguous=True, values=None):
            self.shape, self.dtype, self.device, self.contiguous = tuple(shape), dtype, device, contiguous
            self.values = values

        @property
        def is_cuda(self):
            return self.device.type == "cuda"

        def is_contiguous(self):
            return self.contiguous

        def numel(self):
            return math.prod(self.shape)

        def element_size(self):
            return self.dtype.size

        def dim(self):
            return len(self.shape)

        def tolist(self):
            return list(self.values)

    torch.Tensor = Tensor
    torch.device = Device
    torch.empty_like = lambda t: Tensor(t.shape, t.dtype, t.device)
    torch.empty = lambda shape, dtype, device: Tensor(shape, dtype, device)
    torch.tensor = lambda values, dtype, device: Tensor((len(values),), dtype, device, values=list(values))
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: False)
    torch.capturing = False  # what torch.cuda.is_current_stream_capturing answers; the tests set it
    torch.cuda = types.SimpleNamespace(is_current_stream_capturing=lambda: torch.capturing)
    return torch


class FakeCommunicator(fccl.Communicator):
    """Answers like a communicator of nranks ranks on device 0 and records the calls; its all-reduce of the
    end-of-capture counts combines them with what the peers captured (peer_counts)."""

    def __init__(self, nranks=2, path=fccl.Path.fccl, name=None):
        self._handle, self._bootstrap, self._device, self._nranks = None, None, 0, nranks
        self._name = _names._reserve(name)
        _names._bind(self._name, self)
        self._path = path
        self.calls, self.destroyed, self.peer_counts = [], 0, []

    nranks = property(lambda self: self._nranks)
    rank = property(lambda self: 0)
    device = property(lambda self: self._device)
    path = property(lambda self: self._path)
    path_reason = property(lambda self: "a stand-in")

    def all_reduce(self, send, recv=None, op="sum", stream=None):
        self.calls.append(("all_reduce", send, recv, op))
        if send.values is not None:  # the end-of-capture check: [captured, -captured], reduced with max
            for peer in self.peer_counts:
                send.values = [max(mine, theirs) for mine, theirs in zip(send.values, (peer, -peer))]
        return send if recv is None else recv

    def all_reduce_add_rms_norm(self, input, output, residual=None, weight=None, eps=1e-6, scale=None,
                                scale_mode=None, hidden=None, stream=None):
        self.calls.append(("all_reduce_add_rms_norm", input, output, residual, weight, eps, scale, scale_mode))
        return output

    def mem_stats(self):
        return {"commGraphRegistrations": 3}

    def destroy(self):
        self.destroyed += 1
        super().destroy()  # a handle of None: gives the name back and calls nothing


class ServerTest(unittest.TestCase):
    def setUp(self):
        if "torch" in sys.modules:
            self.skipTest("a real torch is imported here")
        self.torch = fake_torch()
        sys.modules["torch"] = self.torch
        self.addCleanup(sys.modules.pop, "torch")
        sys.modules.pop("fccl.server", None)
        self.addCleanup(sys.modules.pop, "fccl.server", None)
        self.server = importlib.import_module("fccl.server")
        self.comm = FakeCommunicator()
        self.addCleanup(self.comm.destroy)
        self.ar = self.server.CustomAllReduce(self.comm, max_size=4096)

    def tensor(self, shape=(64,), dtype="bfloat16", **keywords):
        return self.torch.Tensor(shape, getattr(self.torch, dtype), **keywords)

    def test_enabled_only_for_several_ranks_on_the_fccl_path(self):
        self.assertFalse(self.ar.disabled)
        one = FakeCommunicator(nranks=1)
        self.addCleanup(one.destroy)
        self.assertIn("one rank", self.server.CustomAllReduce(one).disabled_reason)
        nccl = FakeCommunicator(path=fccl.Path.nccl)
        self.addCleanup(nccl.destroy)
        on_nccl = self.server.CustomAllReduce(nccl)
        self.assertTrue(on_nccl.disabled)
        self.assertIn("nccl path", on_nccl.disabled_reason)
        self.assertFalse(on_nccl.should_custom_ar(self.tensor()))
        self.assertIsNone(on_nccl.custom_all_reduce(self.tensor()))
        self.assertEqual(nccl.calls, [])

    def test_arguments(self):
        with self.assertRaises(TypeError):
            self.server.CustomAllReduce(object())
        for bad in (0, -1, 1.5, True):
            with self.assertRaises(ValueError):
                self.server.CustomAllReduce(self.comm, max_size=bad)

    def test_should_custom_ar(self):
        taken = [self.tensor((1,), "float32"), self.tensor((3, 5), "float16"), self.tensor((2048,), "bfloat16"),
                 self.tensor((1024,), "float32"), self.tensor((7,), "bfloat16")]  # any count: no 16-byte rule
        refused = [self.tensor((2049,), "bfloat16"),  # one element past max_size
                   self.tensor((0,), "bfloat16"), self.tensor((64,), "int32"), self.tensor((64,), "float64"),
                   self.tensor(contiguous=False), self.tensor(device=Device("cpu")),
                   self.tensor(device=Device("cuda", 1)), "not a tensor", None]
        for tensor in taken:
            self.assertTrue(self.ar.should_custom_ar(tensor), tensor.shape)
        for tensor in refused:
            self.assertFalse(self.ar.should_custom_ar(tensor), getattr(tensor, "shape", tensor))
            self.assertIsNone(self.ar.custom_all_reduce(tensor))
        self.assertEqual(self.comm.calls, [])  # a refused tensor makes no collective call

    def test_custom_all_reduce_is_out_of_place(self):
        x = self.tensor((4, 16))
        out = self.ar.custom_all_reduce(x)
        self.assertIsNot(out, x)
        self.assertEqual((out.shape, out.dtype), (x.shape, x.dtype))
        self.assertEqual(self.comm.calls, [("all_reduce", x, out, "sum")])
        self.assertEqual(self.ar.captured_calls, 0)  # eager

    def test_capture_counts_captured_calls_and_checks_them_at_the_end(self):
        x = self.tensor()
        with self.ar.capture():
            self.ar.custom_all_reduce(x)  # a warm-up between captures: eager, not counted
            self.torch.capturing = True
            self.ar.custom_all_reduce(x)
            self.ar.all_reduce_fused_add_rms_norm(self.tensor((2, 8)), self.tensor((2, 8)), self.tensor((8,)), 1e-6)
            self.torch.capturing = False
        self.assertEqual(self.ar.captured_calls, 2)
        name, counts, recv, op = self.comm.calls[-1]  # the end-of-capture exchange
        self.assertEqual((name, recv, op, counts.dtype), ("all_reduce", None, "max", self.torch.int64))
        self.assertEqual(self.ar.graph_registrations, 3)

    def test_capture_mismatch_raises(self):
        self.comm.peer_counts = [2]  # the peer captured two calls, this rank one
        with self.assertRaises(fccl.FcclError) as caught:
            with self.ar.capture():
                self.torch.capturing = True
                self.ar.custom_all_reduce(self.tensor())
                self.torch.capturing = False
        self.assertEqual(caught.exception.result, fccl.Result.InvalidUsage)
        self.assertIn("between 1 and 2", str(caught.exception))
        self.comm.peer_counts = [0]  # and the other way round: fewer on the peer
        with self.assertRaises(fccl.FcclError):
            with self.ar.capture():
                self.torch.capturing = True
                self.ar.custom_all_reduce(self.tensor())
                self.torch.capturing = False

    def test_capture_block_that_raises_skips_the_check(self):
        with self.assertRaises(KeyError):
            with self.ar.capture():
                raise KeyError("capture failed")
        self.assertEqual(self.comm.calls, [])
        with self.ar.capture():  # usable again
            pass

    def test_capture_misuse(self):
        with self.ar.capture():
            with self.assertRaises(RuntimeError):
                with self.ar.capture():
                    pass
        with self.assertRaises(RuntimeError):  # left while the stream is still being captured
            with self.ar.capture():
                self.torch.capturing = True
        self.torch.capturing = False

    def test_fused_add_rms_norm_eligibility(self):
        x, residual, weight = self.tensor((3, 8)), self.tensor((3, 8)), self.tensor((8,))
        self.assertTrue(self.ar.should_fuse_add_rms_norm(x, residual, weight))
        self.assertTrue(self.ar.should_fuse_add_rms_norm(self.tensor((2, 3, 8)), self.tensor((2, 3, 8)), weight))
        self.assertTrue(self.ar.should_fuse_add_rms_norm(self.tensor((100, 8)), self.tensor((100, 8)), weight))
        wide = (1, 32768)  # 64 KiB of bf16: the largest row
        self.assertTrue(self.ar.should_fuse_add_rms_norm(self.tensor(wide), self.tensor(wide), self.tensor((32768,))))
        refused = [
            (self.tensor((1, 32769)), self.tensor((1, 32769)), self.tensor((32769,))),  # a row past 64 KiB
            (x, self.tensor((3, 8), "float32"), weight), (x, residual, self.tensor((8,), "float16")),
            (x, self.tensor((8, 3)), weight), (x, residual, self.tensor((9,))),
            (x, self.tensor((3, 8), contiguous=False), weight), (self.tensor((0, 8)), self.tensor((0, 8)), weight),
            (self.tensor((3, 8), "int32"), self.tensor((3, 8), "int32"), self.tensor((8,), "int32")),
            (x, residual, self.tensor((8,), device=Device("cuda", 1))),
        ]
        for arguments in refused:
            self.assertFalse(self.ar.should_fuse_add_rms_norm(*arguments), [a.shape for a in arguments])
            self.assertIsNone(self.ar.all_reduce_fused_add_rms_norm(*arguments, 1e-6))
            self.assertIsNone(self.ar.all_reduce_fused_add_rms_norm_dynamic_fp8_quant(*arguments, 1e-6))
        self.assertEqual(self.comm.calls, [])

    def test_fused_add_rms_norm_outputs(self):
        x, residual, weight = self.tensor((2, 3, 8)), self.tensor((2, 3, 8)), self.tensor((8,))
        output, returned = self.ar.all_reduce_fused_add_rms_norm(x, residual, weight, 1e-5)
        self.assertIs(returned, residual)  # updated in place, as vLLM's fused_add_rms_norm does
        self.assertEqual((output.shape, output.dtype), (x.shape, x.dtype))
        self.assertEqual(self.comm.calls[-1], ("all_reduce_add_rms_norm", x, output, residual, weight, 1e-5, None,
                                               None))

        scale = self.tensor((1,), "float32")
        output, returned = self.ar.all_reduce_fused_add_rms_norm_static_fp8_quant(x, residual, weight, scale, 1e-5)
        self.assertEqual((output.shape, output.dtype), (x.shape, self.torch.float8_e4m3fn))
        self.assertEqual(self.comm.calls[-1][6:], (scale, "static"))
        calls = len(self.comm.calls)
        for bad_scale in (self.tensor((2,), "float32"), self.tensor((1,), "bfloat16"),
                          self.tensor((1,), "float32", device=Device("cpu")), None):
            self.assertIsNone(self.ar.all_reduce_fused_add_rms_norm_static_fp8_quant(x, residual, weight, bad_scale,
                                                                                     1e-5))
        self.assertEqual(len(self.comm.calls), calls)

        output, scales, returned = self.ar.all_reduce_fused_add_rms_norm_dynamic_fp8_quant(x, residual, weight, 1e-5)
        self.assertEqual((output.shape, output.dtype), (x.shape, self.torch.float8_e4m3fn))
        self.assertEqual((scales.shape, scales.dtype), ((6, 1), self.torch.float32))  # tokens x 1, as vLLM's
        self.assertEqual(self.comm.calls[-1][6:], (scales, "dynamic"))

    def test_close(self):
        self.ar.close()
        self.ar.close()
        self.assertEqual(self.comm.destroyed, 0)  # the caller's communicator stays the caller's
        self.assertTrue(self.ar.disabled)
        self.assertFalse(self.ar.should_custom_ar(self.tensor()))
        self.assertIsNone(self.ar.custom_all_reduce(self.tensor()))
        with self.ar.capture():  # nothing to check once closed
            pass
        self.assertEqual(self.comm.calls, [])
        owned_comm = FakeCommunicator(name="server-owned")
        with self.server.CustomAllReduce(owned_comm, _owns_communicator=True) as owner:
            self.assertIn("'server-owned'", repr(owner))
        owner.close()
        self.assertEqual(owned_comm.destroyed, 1)
        with self.assertRaises(fccl.FcclError):
            fccl.Communicator.by_name("server-owned")


if __name__ == "__main__":
    unittest.main()
