#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Buffers, types, reductions and streams as the C calls take them (fccl._buffers), through all_reduce's argument
parser: __cuda_array_interface__ objects, explicit (pointer, count, dtype) tuples and torch tensors (a stand-in torch
module, so no torch is needed), contiguity, read-only outputs, fccl and torch.distributed reductions, stream objects.
Every mistake is a ValueError or TypeError before any C call.

Run alone: FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_buffers.py [-v]
"""
import math
import sys
import unittest

import fccl
from fccl._arguments import (_add_rms_norm_arguments, _all_gather_arguments, _all_reduce_arguments,
                             _broadcast_arguments, _reduce_scatter_arguments)
from fccl._buffers import _as_buffer
from support import FakeCudaArray


class BufferCheckTest(unittest.TestCase):
    """Everything all_reduce checks before calling C: these run the argument parser only."""

    def check(self, send, recv=None, op="sum", stream=None):
        return _all_reduce_arguments(send, recv, op, stream)

    def test_cuda_array_interface_types(self):
        for typestr, dtype in (("<f2", fccl.DataType.float16), ("<f4", fccl.DataType.float32),
                               ("<f8", fccl.DataType.float64), ("|i1", fccl.DataType.int8),
                               ("|u1", fccl.DataType.uint8), ("<i4", fccl.DataType.int32),
                               ("<u4", fccl.DataType.uint32), ("<i8", fccl.DataType.int64),
                               ("<u8", fccl.DataType.uint64)):
            send, recv, op, stream = self.check(FakeCudaArray((3, 5), typestr), FakeCudaArray((15,), typestr))
            self.assertEqual((send.dtype, send.count, recv.count, op, stream), (dtype, 15, 15, fccl.RedOp.sum, 0))

    def test_unknown_typestr_is_a_type_error(self):
        for typestr in (">f4", "<c8", "|b1", "<f16", "bf16"):
            with self.assertRaises(TypeError):
                self.check(FakeCudaArray((4,), typestr))

    def test_non_contiguous_is_a_value_error(self):
        with self.assertRaises(ValueError):
            self.check(FakeCudaArray((4, 4), "<f4", strides=(32, 4)))  # every other row
        with self.assertRaises(ValueError):
            self.check(FakeCudaArray((4, 4), "<f4", strides=(4, 16)))  # Fortran order

    def test_contiguous_strides_are_accepted(self):
        send, _, _, _ = self.check(FakeCudaArray((4, 4), "<f4", strides=(16, 4)))
        self.assertEqual(send.count, 16)
        send, _, _, _ = self.check(FakeCudaArray((1, 8), "<f2", strides=(999, 2)))  # one row: any outer stride
        self.assertEqual(send.count, 8)

    def test_in_place_when_recv_is_none(self):
        array = FakeCudaArray((7,))
        send, recv, _, _ = self.check(array)
        self.assertIs(send, recv)

    def test_dtype_and_count_must_agree(self):
        with self.assertRaises(ValueError):
            self.check(FakeCudaArray((8,), "<f4"), FakeCudaArray((8,), "<f2"))
        with self.assertRaises(ValueError):
            self.check(FakeCudaArray((8,), "<f4"), FakeCudaArray((9,), "<f4"))
        with self.assertRaises(ValueError):
            self.check((0x1000, 8, "bfloat16"), (0x2000, 8, fccl.DataType.float16))

    def test_read_only_recv_is_refused(self):
        with self.assertRaises(ValueError):
            self.check(FakeCudaArray((8,)), FakeCudaArray((8,), readonly=True))
        self.check(FakeCudaArray((8,), readonly=True), FakeCudaArray((8,)))  # a read-only send is fine

    def test_explicit_tuples(self):
        send, recv, _, _ = self.check((0x1000, 10, "bfloat16"), (0x2000, 10, fccl.DataType.bfloat16))
        self.assertEqual((send.pointer, send.count, send.dtype, recv.pointer), (0x1000, 10, fccl.DataType.bfloat16,
                                                                                 0x2000))
        self.assertEqual(send.nbytes, 20)
        for bad in ((0x1000, 10), (0x1000, -1, "float32"), ("0x1000", 1, "float32"), (0x1000, 1.5, "float32")):
            with self.assertRaises((TypeError, ValueError)):
                self.check(bad)
        with self.assertRaises(ValueError):
            self.check((0x1000, 10, "float128"))

    def test_other_objects_are_a_type_error(self):
        for bad in (b"bytes", [1, 2, 3], 12345, None):
            with self.assertRaises(TypeError):
                self.check(bad)

    def test_ops(self):
        array = FakeCudaArray((4,))
        for name, value in (("sum", 0), ("prod", 1), ("max", 2), ("min", 3), ("avg", 4)):
            self.assertEqual(self.check(array, op=name)[2], fccl.RedOp(value))
            self.assertEqual(self.check(array, op=fccl.RedOp(value))[2], fccl.RedOp(value))
        with self.assertRaises(ValueError):
            self.check(array, op="mean")
        with self.assertRaises(TypeError):
            self.check(array, op=1.0)

    def test_torch_reduce_ops(self):
        """torch.distributed.ReduceOp members are taken by name, as torch spells them (RedOpType.SUM), whether
        torch is installed or not; the ones fccl has no equivalent for are refused with their name."""
        array = FakeCudaArray((4,))

        class RedOpType:  # the shape of torch.distributed.ReduceOp.SUM: a member with a name
            def __init__(self, name):
                self.name = name

            def __str__(self):
                return "RedOpType." + self.name

        for name, value in (("SUM", 0), ("PRODUCT", 1), ("MAX", 2), ("MIN", 3), ("AVG", 4)):
            self.assertEqual(self.check(array, op=RedOpType(name))[2], fccl.RedOp(value))
        with self.assertRaisesRegex(ValueError, "BXOR"):
            self.check(array, op=RedOpType("BXOR"))
        try:
            import torch.distributed as dist
        except ImportError:
            return
        self.assertEqual(self.check(array, op=dist.ReduceOp.SUM)[2], fccl.RedOp.sum)
        self.assertEqual(self.check(array, op=dist.ReduceOp.MAX)[2], fccl.RedOp.max)

    def test_streams(self):
        array = FakeCudaArray((4,))

        class TorchLikeStream:
            cuda_stream = 0x1234

        class CupyLikeStream:
            ptr = 0x5678

        self.assertEqual(self.check(array)[3], 0)
        self.assertEqual(self.check(array, stream=0xABC)[3], 0xABC)
        self.assertEqual(self.check(array, stream=TorchLikeStream())[3], 0x1234)
        self.assertEqual(self.check(array, stream=CupyLikeStream())[3], 0x5678)
        for bad in ("default", 1.0, object()):
            with self.assertRaises(TypeError):
                self.check(array, stream=bad)

    def test_stream_none_does_not_import_torch(self):
        if "torch" in sys.modules:
            self.skipTest("torch is imported already")
        self.check(FakeCudaArray((4,)))
        self.assertNotIn("torch", sys.modules)


class FakeTorchTest(unittest.TestCase):
    """The torch branch of the buffer and stream rules, with a stand-in module as sys.modules["torch"]: it checks
    the attributes the layer reads (is_cuda, is_contiguous, dtype, numel, data_ptr, device, the current stream)."""

    def setUp(self):
        if "torch" in sys.modules:
            self.skipTest("the real torch is imported")
        streams = []

        class Tensor:
            def __init__(self, dtype="torch.bfloat16", numel=6, pointer=0x7000, is_cuda=True, contiguous=True):
                self.dtype, self._numel, self._pointer = dtype, numel, pointer
                self.is_cuda, self._contiguous, self.device = is_cuda, contiguous, "cuda:1" if is_cuda else "cpu"

            def is_contiguous(self):
                return self._contiguous

            def numel(self):
                return self._numel

            def data_ptr(self):
                return self._pointer

        class Stream:
            cuda_stream = 0xBEEF

        def current_stream(device):
            streams.append(device)
            return Stream()

        module = type(sys)("torch")
        module.Tensor = Tensor
        module.cuda = type(sys)("torch.cuda")
        module.cuda.current_stream = current_stream
        sys.modules["torch"] = module
        self.addCleanup(sys.modules.pop, "torch")
        self.Tensor, self.streams = Tensor, streams

    def test_tensor_and_its_current_stream(self):
        send, recv, _, stream = _all_reduce_arguments(self.Tensor(), self.Tensor(pointer=0x8000), "sum", None)
        self.assertEqual((send.pointer, send.count, send.dtype, recv.pointer), (0x7000, 6, fccl.DataType.bfloat16,
                                                                                 0x8000))
        self.assertEqual((stream, self.streams), (0xBEEF, ["cuda:1"]))
        _, _, _, stream = _all_reduce_arguments(self.Tensor(), None, "sum", 5)
        self.assertEqual(stream, 5)  # an explicit stream wins

    def test_dtypes(self):
        for name, dtype in (("float16", fccl.DataType.float16), ("bfloat16", fccl.DataType.bfloat16),
                            ("float32", fccl.DataType.float32), ("float64", fccl.DataType.float64),
                            ("int8", fccl.DataType.int8), ("uint8", fccl.DataType.uint8),
                            ("int32", fccl.DataType.int32), ("int64", fccl.DataType.int64),
                            ("float8_e4m3fn", fccl.DataType.float8e4m3)):  # FP8: the fused norm's output only
            self.assertEqual(_as_buffer(self.Tensor(dtype="torch." + name), "send").dtype, dtype)
        for name in ("torch.complex64", "torch.bool", "torch.float8_e5m2"):
            with self.assertRaises(TypeError):
                _as_buffer(self.Tensor(dtype=name), "send")

    def test_add_rms_norm_takes_rows_and_the_current_stream(self):
        def tensor(dtype, shape, pointer):
            t = self.Tensor(dtype=dtype, numel=math.prod(shape), pointer=pointer)
            t.shape = shape
            return t
        inp = tensor("torch.bfloat16", (4, 64), 0x10000)
        out = tensor("torch.float8_e4m3fn", (4, 64), 0x20000)
        scales = tensor("torch.float32", (4,), 0x30000)
        args = _add_rms_norm_arguments(inp, tensor("torch.bfloat16", (4, 64), 0x40000),
                                       tensor("torch.bfloat16", (64,), 0x50000), out, None, 1e-5, scales, "dynamic",
                                       None)
        self.assertEqual((args[4], args[5], args[7], args[9]), (4, 64, fccl.ScaleMode.dynamic, 0xBEEF))
        with self.assertRaises(ValueError):  # an FP8 output needs a scale mode
            _add_rms_norm_arguments(inp, None, None, out, None, 1e-5, None, None, None)

    def test_collectives_take_the_tensors_current_stream(self):
        _, _, stream = _all_gather_arguments(self.Tensor(numel=3), self.Tensor(numel=6, pointer=0x9000), 2, None)
        self.assertEqual((stream, self.streams), (0xBEEF, ["cuda:1"]))
        _, _, _, stream = _reduce_scatter_arguments(self.Tensor(numel=6), self.Tensor(numel=3), "sum", 2, None)
        self.assertEqual(stream, 0xBEEF)
        send, recv, stream = _broadcast_arguments(None, self.Tensor(), 0, 1, 2, None)  # recv's device
        self.assertEqual((send, recv.pointer, stream), (None, 0x7000, 0xBEEF))
        with self.assertRaises(ValueError):
            _all_gather_arguments(self.Tensor(), self.Tensor(numel=12, dtype="torch.float16"), 2, None)
        with self.assertRaises(ValueError):
            _broadcast_arguments(self.Tensor(is_cuda=False), None, 0, 0, 2, None)

    def test_host_or_strided_tensors_are_refused(self):
        with self.assertRaises(ValueError):
            _as_buffer(self.Tensor(is_cuda=False), "send")
        with self.assertRaises(ValueError):
            _as_buffer(self.Tensor(contiguous=False), "send")
        with self.assertRaises(ValueError):
            _all_reduce_arguments(self.Tensor(), self.Tensor(dtype="torch.float32"), "sum", None)
        with self.assertRaises(ValueError):
            _all_reduce_arguments(self.Tensor(), self.Tensor(numel=7), "sum", None)


if __name__ == "__main__":
    unittest.main()
