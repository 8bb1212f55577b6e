#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Pre-multiplied sums in Python (fccl._premul) without a GPU: fccl.PreMulSum and the names fccl.ops carries, the
ops torch.distributed makes (ReduceOp.PREMUL_SUM with its factor, as pickled), the scalar as one element of the
call's type, and the C op made and destroyed around a call (a communicator that is no live one refuses it).

Run alone: FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_premul.py [-v]
"""
import math
import struct
import unittest

import fccl
from fccl._buffers import _op_of
from fccl._premul import _CallOp, _host_bytes


class RedOpType:
    """Stands for torch.distributed.ReduceOp.RedOpType (dist.ReduceOp.SUM, ... are its members)."""

    def __init__(self, name):
        self.name = name


class ReduceOp:
    """Stands for a torch.distributed.ReduceOp object: .op and the pickled state (op, factor)."""

    def __init__(self, name, factor=None):
        self.op = RedOpType(name)
        self.factor = factor

    def __getstate__(self):
        return (self.op, self.factor)


class PreMulSumTest(unittest.TestCase):
    def test_name_carries_the_scalar_exactly(self):
        for scalar in (0.125, 1 / 3, -2.5e-30, 7):
            op = fccl.PreMulSum(scalar)
            self.assertTrue(op.name.startswith("premul_sum:"))
            again = _op_of(op.name)
            self.assertIsInstance(again, fccl.PreMulSum)
            self.assertEqual(again.scalar, float(scalar))
        with self.assertRaises(ValueError):
            _op_of("premul_sum:half")

    def test_ops_of_every_kind(self):
        self.assertIs(_op_of("max"), fccl.RedOp.max)
        op = fccl.PreMulSum(0.5)
        self.assertIs(_op_of(op), op)
        self.assertIs(_op_of(RedOpType("SUM")), fccl.RedOp.sum)
        premul = _op_of(ReduceOp("PREMUL_SUM", 0.25))
        self.assertIsInstance(premul, fccl.PreMulSum)
        self.assertEqual(premul.scalar, 0.25)
        with self.assertRaises(ValueError):  # torch's bare RedOpType.PREMUL_SUM: no factor
            _op_of(RedOpType("PREMUL_SUM"))
        with self.assertRaises(ValueError):
            _op_of(ReduceOp("BAND"))
        for bad in (True, [0.5], "premul"):
            with self.assertRaises((TypeError, ValueError)):
                fccl.PreMulSum(bad) if not isinstance(bad, str) else _op_of(bad)

    def test_scalar_as_an_element(self):
        D = fccl.DataType
        self.assertEqual(_host_bytes(0.5, D.float16), struct.pack("<H", 0x3800))
        self.assertEqual(_host_bytes(1 / 3, D.float32), struct.pack("<f", 1 / 3))
        self.assertEqual(_host_bytes(1 / 3, D.float64), struct.pack("<d", 1 / 3))
        self.assertEqual(_host_bytes(1.0, D.bfloat16), struct.pack("<H", 0x3F80))
        # bfloat16 rounds to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (even: 1).
        self.assertEqual(_host_bytes(1 + 2 ** -8, D.bfloat16), struct.pack("<H", 0x3F80))
        self.assertEqual(_host_bytes(1 + 3 * 2 ** -9, D.bfloat16), struct.pack("<H", 0x3F81))
        self.assertEqual(struct.unpack("<H", _host_bytes(math.nan, D.bfloat16))[0] & 0x7FC0, 0x7FC0)
        self.assertEqual(_host_bytes(-3, D.int8), struct.pack("<b", -3))
        self.assertEqual(_host_bytes(4.0, D.uint64), struct.pack("<Q", 4))
        for scalar, dtype in ((0.5, D.int32), (300, D.uint8), (-1, D.uint32), (1e6, D.float16), (1e39, D.float32)):
            with self.assertRaises(ValueError, msg=f"{scalar} as {dtype.name}"):
                _host_bytes(scalar, dtype)
        with self.assertRaises(ValueError):
            _host_bytes(1.0, D.float8e4m3)

    def test_a_built_in_op_makes_nothing(self):
        with _CallOp(fccl.RedOp.avg, fccl.DataType.float32, None) as op:
            self.assertEqual(op, int(fccl.RedOp.avg))

    def test_the_c_op_needs_a_live_communicator(self):
        with self.assertRaises(fccl.FcclError) as caught:
            with _CallOp(fccl.PreMulSum(0.5), fccl.DataType.float32, None):
                self.fail("no op may be made without a communicator")
        self.assertEqual(caught.exception.result, fccl.Result.InvalidArgument)
        self.assertIn("invalid communicator handle", caught.exception.message)


if __name__ == "__main__":
    unittest.main()
