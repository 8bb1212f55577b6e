#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What each collective checks before calling C (fccl._arguments): the counts between send and recv, types, writable
outputs, op, root, peers, streams, the ranks a shrink excludes, the variable all-gather and reduce-scatter's counts
per rank (host ints or int64 device memory), and the fused all-reduce + RMSNorm's rows, types and FP8 scales.

Run alone: FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_arguments.py [-v]
"""
import unittest

import fccl
from fccl._arguments import (_add_rms_norm_arguments, _all_gather_arguments, _all_to_all_arguments,
                             _broadcast_arguments, _exclude_list, _gather_arguments, _peer_arguments,
                             _reduce_arguments, _reduce_scatter_arguments, _scatter_arguments, _variable_arguments)
from support import FakeCudaArray


class AddRmsNormCheckTest(unittest.TestCase):
    """Everything all_reduce_add_rms_norm checks before calling C: the argument parser only."""

    def check(self, input, output, residual=None, weight=None, eps=1e-6, scale=None, scale_mode=None, hidden=None):
        return _add_rms_norm_arguments(input, residual, weight, output, hidden, eps, scale, scale_mode, None)

    def test_rows_from_the_last_dimension(self):
        args = self.check(FakeCudaArray((3, 128), "<f2"), FakeCudaArray((3, 128), "<f2"),
                          residual=FakeCudaArray((3, 128), "<f2"), weight=FakeCudaArray((128,), "<f2"))
        inp, res, w, out, tokens, hidden, eps, mode, scale, stream = args
        self.assertEqual((tokens, hidden, mode, scale, stream), (3, 128, fccl.ScaleMode.none, None, 0))
        self.assertEqual((inp.dtype, res.count, w.count, out.count), (fccl.DataType.float16, 384, 128, 384))
        self.assertAlmostEqual(eps, 1e-6)

    def test_explicit_buffers_need_hidden(self):
        with self.assertRaises(ValueError):
            self.check((0x1000, 256, "bfloat16"), (0x2000, 256, "bfloat16"))
        args = self.check((0x1000, 256, "bfloat16"), (0x2000, 256, "bfloat16"), hidden=64)
        self.assertEqual((args[4], args[5]), (4, 64))
        with self.assertRaises(ValueError):
            self.check((0x1000, 250, "bfloat16"), (0x2000, 250, "bfloat16"), hidden=64)  # not whole rows

    def test_types(self):
        for bad in ("<f8", "<i4"):
            with self.assertRaises(TypeError):
                self.check(FakeCudaArray((2, 8), bad), FakeCudaArray((2, 8), bad))
        with self.assertRaises(ValueError):  # residual of another type
            self.check(FakeCudaArray((2, 8), "<f4"), FakeCudaArray((2, 8), "<f4"),
                       residual=FakeCudaArray((2, 8), "<f2"))
        with self.assertRaises(ValueError):  # output of another type, not FP8
            self.check(FakeCudaArray((2, 8), "<f4"), FakeCudaArray((2, 8), "<f2"))
        with self.assertRaises(ValueError):  # a weight of a different length
            self.check(FakeCudaArray((2, 8), "<f4"), FakeCudaArray((2, 8), "<f4"), weight=FakeCudaArray((9,), "<f4"))

    def test_fp8_scales(self):
        inp = (0x1000, 4 * 64, "bfloat16")
        out = (0x2000, 4 * 64, "float8e4m3")
        args = self.check(inp, out, hidden=64, scale=(0x3000, 4, "float32"), scale_mode="dynamic")
        self.assertEqual((args[3].dtype, args[7], args[8].count), (fccl.DataType.float8e4m3,
                                                                   fccl.ScaleMode.dynamic, 4))
        args = self.check(inp, out, hidden=64, scale=(0x3000, 1, "float32"), scale_mode=fccl.ScaleMode.static)
        self.assertEqual(args[7], fccl.ScaleMode.static)
        for scale, mode in (((0x3000, 1, "float32"), "dynamic"),  # one scale per token needed
                            ((0x3000, 4, "float32"), "static"),  # one scale
                            ((0x3000, 4, "float16"), "dynamic"),  # float32 scales
                            (None, "dynamic"), (None, None), ((0x3000, 1, "float32"), "none")):
            with self.assertRaises(ValueError, msg=f"{scale} {mode}"):
                self.check(inp, out, hidden=64, scale=scale, scale_mode=mode)
        with self.assertRaises(ValueError):  # a scale without FP8
            self.check(inp, (0x2000, 256, "bfloat16"), hidden=64, scale=(0x3000, 1, "float32"), scale_mode="static")
        with self.assertRaises(ValueError):
            self.check(inp, out, hidden=64, scale=(0x3000, 4, "float32"), scale_mode="absmax")

    def test_eps_and_output(self):
        a = FakeCudaArray((2, 8), "<f4")
        for eps in (-1.0, float("nan"), float("inf")):
            with self.assertRaises(ValueError):
                self.check(a, FakeCudaArray((2, 8), "<f4"), eps=eps)
        with self.assertRaises(ValueError):
            self.check(a, None)
        with self.assertRaises(ValueError):
            self.check(a, FakeCudaArray((2, 8), "<f4", readonly=True))
        with self.assertRaises(ValueError):
            self.check(a, FakeCudaArray((2, 9), "<f4"))
        with self.assertRaises(ValueError):
            self.check(a, FakeCudaArray((2, 8), "<f4"), residual=FakeCudaArray((2, 8), "<f4", readonly=True))


class CollectiveArgumentTest(unittest.TestCase):
    """What all_gather, reduce_scatter and broadcast check before calling C (nranks and rank given, as the
    communicator would give them): the counts between send and recv, types, a writable recv, op, root, streams."""

    def test_all_gather_counts(self):
        send, recv, stream = _all_gather_arguments(FakeCudaArray((5,)), FakeCudaArray((3, 5)), 3, None)
        self.assertEqual((send.count, recv.count, stream), (5, 15, 0))
        for nranks, recv_count in ((3, 14), (3, 5), (2, 15), (1, 6)):
            with self.assertRaises(ValueError):
                _all_gather_arguments(FakeCudaArray((5,)), FakeCudaArray((recv_count,)), nranks, None)
        send, recv, _ = _all_gather_arguments(FakeCudaArray((5,)), FakeCudaArray((5,)), 1, 7)  # one rank
        self.assertEqual(recv.count, 5)
        with self.assertRaises(ValueError):
            _all_gather_arguments(FakeCudaArray((5,)), None, 2, None)  # recv is required

    def test_reduce_scatter_counts_and_op(self):
        send, recv, op, stream = _reduce_scatter_arguments(FakeCudaArray((8,), "<f2"), FakeCudaArray((2,), "<f2"),
                                                           "max", 4, 0x99)
        self.assertEqual((send.count, recv.count, op, stream), (8, 2, fccl.RedOp.max, 0x99))
        for nranks, recv_count in ((4, 3), (3, 2), (8, 2)):
            with self.assertRaises(ValueError):
                _reduce_scatter_arguments(FakeCudaArray((8,)), FakeCudaArray((recv_count,)), "sum", nranks, None)
        with self.assertRaises(ValueError):
            _reduce_scatter_arguments(FakeCudaArray((8,)), FakeCudaArray((2,)), "mean", 4, None)
        with self.assertRaises(TypeError):
            _reduce_scatter_arguments(FakeCudaArray((8,)), FakeCudaArray((2,)), 2.0, 4, None)
        with self.assertRaises(ValueError):
            _reduce_scatter_arguments(FakeCudaArray((8,)), None, "sum", 4, None)

    def test_types_and_read_only_recv(self):
        with self.assertRaises(ValueError):
            _all_gather_arguments(FakeCudaArray((4,), "<f4"), FakeCudaArray((8,), "<f2"), 2, None)
        with self.assertRaises(ValueError):
            _reduce_scatter_arguments(FakeCudaArray((8,), "|i1"), FakeCudaArray((4,), "|u1"), "sum", 2, None)
        with self.assertRaises(ValueError):
            _broadcast_arguments(FakeCudaArray((4,), "<i8"), FakeCudaArray((4,), "<u8"), 0, 0, 2, None)
        with self.assertRaises(ValueError):
            _all_gather_arguments(FakeCudaArray((4,)), FakeCudaArray((8,), readonly=True), 2, None)
        with self.assertRaises(ValueError):
            _reduce_scatter_arguments(FakeCudaArray((8,)), FakeCudaArray((4,), readonly=True), "sum", 2, None)
        with self.assertRaises(ValueError):
            _broadcast_arguments(FakeCudaArray((4,), readonly=True), None, 0, 0, 2, None)  # in place
        with self.assertRaises(ValueError):
            _broadcast_arguments(None, FakeCudaArray((4,), readonly=True), 0, 1, 2, None)
        _all_gather_arguments(FakeCudaArray((4,), readonly=True), FakeCudaArray((8,)), 2, None)  # send may be
        with self.assertRaises(TypeError):
            _all_gather_arguments(FakeCudaArray((4,), "<c8"), FakeCudaArray((8,), "<c8"), 2, None)
        with self.assertRaises(ValueError):
            _all_gather_arguments(FakeCudaArray((4, 4), strides=(32, 4)), FakeCudaArray((32,)), 2, None)

    def test_broadcast_root_and_buffers(self):
        send, recv, stream = _broadcast_arguments(FakeCudaArray((6,)), None, 1, 1, 2, None)
        self.assertIs(send, recv)  # in place
        send, recv, _ = _broadcast_arguments((0x1000, 6, "bfloat16"), (0x2000, 6, "bfloat16"), 0, 0, 4, None)
        self.assertEqual((send.pointer, recv.pointer), (0x1000, 0x2000))
        send, recv, _ = _broadcast_arguments(None, FakeCudaArray((6,)), 0, 3, 4, None)  # not the root
        self.assertIsNone(send)
        self.assertEqual(recv.count, 6)
        with self.assertRaises(ValueError):
            _broadcast_arguments(None, FakeCudaArray((6,)), 2, 2, 4, None)  # the root must send
        with self.assertRaises(ValueError):
            _broadcast_arguments(None, None, 0, 1, 2, None)
        with self.assertRaises(ValueError):
            _broadcast_arguments(FakeCudaArray((6,)), FakeCudaArray((7,)), 0, 0, 2, None)
        for root in (2, -1, 100):
            with self.assertRaises(ValueError):
                _broadcast_arguments(FakeCudaArray((6,)), None, root, 0, 2, None)
        for root in (0.0, "0", True, None):
            with self.assertRaises(TypeError):
                _broadcast_arguments(FakeCudaArray((6,)), None, root, 0, 2, None)

    def test_reduce_root_and_buffers(self):
        send, recv, op, stream = _reduce_arguments(FakeCudaArray((6,)), FakeCudaArray((6,)), "avg", 1, 1, 2, 5)
        self.assertEqual((send.count, recv.count, op, stream), (6, 6, fccl.RedOp.avg, 5))
        send, recv, _, _ = _reduce_arguments(FakeCudaArray((6,)), None, "sum", 1, 1, 2, None)
        self.assertIs(send, recv)  # in place on the root
        send, recv, _, _ = _reduce_arguments(FakeCudaArray((6,)), None, "sum", 1, 0, 2, None)
        self.assertIsNone(recv)  # not the root: recv is not used
        op = _reduce_arguments(FakeCudaArray((6,)), None, fccl.PreMulSum(0.5), 0, 0, 2, None)[2]
        self.assertIsInstance(op, fccl.PreMulSum)
        with self.assertRaises(ValueError):
            _reduce_arguments(FakeCudaArray((6,)), FakeCudaArray((7,)), "sum", 0, 0, 2, None)
        with self.assertRaises(ValueError):
            _reduce_arguments(FakeCudaArray((6,), readonly=True), None, "sum", 0, 0, 2, None)  # in place, read-only
        with self.assertRaises(ValueError):
            _reduce_arguments(FakeCudaArray((6,)), FakeCudaArray((6,), "<f2"), "sum", 0, 0, 2, None)
        for root in (2, -1):
            with self.assertRaises(ValueError):
                _reduce_arguments(FakeCudaArray((6,)), None, "sum", root, 0, 2, None)
        with self.assertRaises(TypeError):
            _reduce_arguments(FakeCudaArray((6,)), None, "sum", "0", 0, 2, None)

    def test_gather_root_and_counts(self):
        send, recv, stream = _gather_arguments(FakeCudaArray((5,)), FakeCudaArray((3, 5)), 2, 2, 3, None)
        self.assertEqual((send.count, recv.count, stream), (5, 15, 0))
        send, recv, _ = _gather_arguments(FakeCudaArray((5,)), None, 2, 0, 3, None)  # not the root
        self.assertIsNone(recv)
        with self.assertRaises(ValueError):
            _gather_arguments(FakeCudaArray((5,)), None, 2, 2, 3, None)  # the root receives
        with self.assertRaises(ValueError):
            _gather_arguments(FakeCudaArray((5,)), FakeCudaArray((14,)), 0, 0, 3, None)
        with self.assertRaises(ValueError):
            _gather_arguments(FakeCudaArray((5,)), FakeCudaArray((15,)), 3, 0, 3, None)

    def test_scatter_root_and_counts(self):
        send, recv, stream = _scatter_arguments(FakeCudaArray((4, 3)), FakeCudaArray((3,)), 0, 0, 4, 9)
        self.assertEqual((send.count, recv.count, stream), (12, 3, 9))
        send, recv, _ = _scatter_arguments(None, FakeCudaArray((3,)), 0, 2, 4, None)  # not the root
        self.assertIsNone(send)
        with self.assertRaises(ValueError):
            _scatter_arguments(None, FakeCudaArray((3,)), 1, 1, 4, None)  # the root sends
        with self.assertRaises(ValueError):
            _scatter_arguments(FakeCudaArray((12,)), None, 0, 0, 4, None)  # recv is required
        with self.assertRaises(ValueError):
            _scatter_arguments(FakeCudaArray((11,)), FakeCudaArray((3,)), 0, 0, 4, None)
        with self.assertRaises(ValueError):
            _scatter_arguments(None, FakeCudaArray((3,), readonly=True), 0, 1, 4, None)

    def test_send_and_recv_peers_and_buffers(self):
        buffer, stream = _peer_arguments(FakeCudaArray((6,)), 1, 2, None, "send")
        self.assertEqual((buffer.count, stream), (6, 0))
        buffer, _ = _peer_arguments((0x1000, 5, "bfloat16"), 0, 4, 7, "recv")
        self.assertEqual((buffer.pointer, buffer.dtype), (0x1000, fccl.DataType.bfloat16))
        for peer in (2, -1):
            with self.assertRaises(ValueError):
                _peer_arguments(FakeCudaArray((6,)), peer, 2, None, "send")
        for peer in (1.0, "1", True, None):
            with self.assertRaises(TypeError):
                _peer_arguments(FakeCudaArray((6,)), peer, 2, None, "send")
        with self.assertRaises(ValueError):  # a receive writes its buffer
            _peer_arguments(FakeCudaArray((6,), readonly=True), 0, 2, None, "recv")
        _peer_arguments(FakeCudaArray((6,), readonly=True), 0, 2, None, "send")  # a send only reads it

    def test_all_to_all_blocks_and_buffers(self):
        send, recv, count, _ = _all_to_all_arguments(FakeCudaArray((12,)), FakeCudaArray((12,), pointer=0x1000), 4,
                                                     None)
        self.assertEqual((send.count, recv.count, count), (12, 12, 3))
        same = FakeCudaArray((12,))
        for send, recv in ((same, same), (same, None)):  # in place is not an all-to-all
            with self.assertRaises(ValueError):
                _all_to_all_arguments(send, recv, 4, None)
        with self.assertRaises(ValueError):  # 12 elements do not split into 5 blocks
            _all_to_all_arguments(FakeCudaArray((12,)), FakeCudaArray((12,), pointer=0x1000), 5, None)
        with self.assertRaises(ValueError):
            _all_to_all_arguments(FakeCudaArray((12,)), FakeCudaArray((8,), pointer=0x1000), 4, None)
        with self.assertRaises(ValueError):
            _all_to_all_arguments(FakeCudaArray((12,)), FakeCudaArray((12,), "<f2", pointer=0x1000), 4, None)

    def test_shrink_takes_a_rank_or_ranks(self):
        self.assertEqual(_exclude_list(3), [3])
        self.assertEqual(_exclude_list((1, 2)), [1, 2])
        self.assertEqual(_exclude_list([]), [])
        for bad in (1.0, "1", [True], [1, None], None):
            with self.assertRaises(TypeError):
                _exclude_list(bad)

    def test_nranks_is_checked(self):
        for nranks in (0, -1, 1.5, True):
            with self.assertRaises(ValueError):
                _all_gather_arguments(FakeCudaArray((4,)), FakeCudaArray((4,)), nranks, None)

    def test_streams(self):
        class TorchLikeStream:
            cuda_stream = 0x4321

        _, _, stream = _all_gather_arguments(FakeCudaArray((2,)), FakeCudaArray((4,)), 2, TorchLikeStream())
        self.assertEqual(stream, 0x4321)
        _, _, _, stream = _reduce_scatter_arguments(FakeCudaArray((4,)), FakeCudaArray((2,)), "sum", 2, 0xAB)
        self.assertEqual(stream, 0xAB)
        _, _, stream = _broadcast_arguments(None, FakeCudaArray((4,)), 0, 1, 2, None)
        self.assertEqual(stream, 0)
        with self.assertRaises(TypeError):
            _broadcast_arguments(FakeCudaArray((4,)), None, 0, 0, 2, "default")

    def test_zero_counts(self):
        send, recv, _ = _all_gather_arguments((0, 0, "float32"), (0, 0, "float32"), 4, None)
        self.assertEqual((send.count, recv.count), (0, 0))
        send, recv, _, _ = _reduce_scatter_arguments((0, 0, "int8"), (0, 0, "int8"), "sum", 4, None)
        self.assertEqual((send.count, recv.count), (0, 0))


class VariableArgumentTest(unittest.TestCase):
    """What all_gather_v and reduce_scatter_v check before calling C: one count per rank, the buffers' elements
    against the counts (host counts) or taken as capacities (device counts: int64, one per rank), op, recv."""

    def test_host_counts_size_the_buffers(self):
        counts = [3, 0, 5]
        send, recv, host, device, op, stream = _variable_arguments(FakeCudaArray((5,)), FakeCudaArray((8,)), counts,
                                                                   None, 3, 2, False, None)
        self.assertEqual((send.count, recv.count, host, device, op, stream), (5, 8, [3, 0, 5], None, None, 0))
        send, recv, host, _, op, _ = _variable_arguments(FakeCudaArray((8,), "<f2"), FakeCudaArray((0,), "<f2"),
                                                         counts, "max", 3, 1, True, 0x5)
        self.assertEqual((send.count, recv.count, op), (8, 0, fccl.RedOp.max))
        for send_count, recv_count, rank in ((5, 9, 2), (4, 8, 2), (3, 8, 2), (5, 8, 0)):  # all-gather mismatches
            with self.assertRaises(ValueError):
                _variable_arguments(FakeCudaArray((send_count,)), FakeCudaArray((recv_count,)), counts, None, 3, rank,
                                    False, None)
        for send_count, recv_count, rank in ((7, 3, 0), (8, 5, 0), (8, 3, 2)):  # reduce-scatter mismatches
            with self.assertRaises(ValueError):
                _variable_arguments(FakeCudaArray((send_count,)), FakeCudaArray((recv_count,)), counts, "sum", 3, rank,
                                    True, None)

    def test_counts_are_one_non_negative_int_per_rank(self):
        for bad in ([3, 5], [3, 0, 5, 1], [3, -1, 5], [3, 1.0, 4], [3, True, 4]):
            with self.assertRaises(ValueError):
                _variable_arguments(FakeCudaArray((3,)), FakeCudaArray((8,)), bad, None, 3, 0, False, None)
        for bad in (8, "358", None):
            with self.assertRaises(TypeError):
                _variable_arguments(FakeCudaArray((3,)), FakeCudaArray((8,)), bad, None, 3, 0, False, None)
        with self.assertRaises(ValueError):
            _variable_arguments(FakeCudaArray((3,)), None, [3, 0, 5], None, 3, 0, False, None)  # recv is required
        with self.assertRaises(ValueError):
            _variable_arguments(FakeCudaArray((8,)), FakeCudaArray((3,)), [3, 0, 5], "mean", 3, 0, True, None)

    def test_device_counts_take_the_buffers_as_capacities(self):
        counts = FakeCudaArray((3,), "<i8", pointer=0x7F0000100000)
        send, recv, host, device, _, _ = _variable_arguments(FakeCudaArray((64,)), FakeCudaArray((100,)), counts,
                                                             None, 3, 1, False, 0x9)
        self.assertEqual((send.count, recv.count, host, device.count, device.pointer), (64, 100, None, 3,
                                                                                        0x7F0000100000))
        with self.assertRaises(TypeError):  # int32 counts
            _variable_arguments(FakeCudaArray((64,)), FakeCudaArray((100,)), FakeCudaArray((3,), "<i4"), None, 3, 1,
                                False, None)
        with self.assertRaises(ValueError):  # not one per rank
            _variable_arguments(FakeCudaArray((64,)), FakeCudaArray((100,)), FakeCudaArray((4,), "<i8"), None, 3, 1,
                                False, None)


if __name__ == "__main__":
    unittest.main()
