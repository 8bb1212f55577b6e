#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Communicators and what makes them (fccl._communicator, _unique_id, _config, _external_bootstrap): unique ids,
config and argument errors coming back as FcclError with fccl's own words, a communicator that cannot be made on a
machine without a GPU, a destroyed communicator refusing calls, groups, and the external bootstrap's callbacks
turning a Python exception into an error code.

Run alone: FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_communicator.py [-v]
"""
import ctypes
import pickle
import time
import unittest

import fccl
from fccl._external_bootstrap import _ExternalBootstrap
from fccl._library import _check, _lib
from support import SHORT_TIMEOUT_MS, FakeCudaArray, gpu_count


class UniqueIdTest(unittest.TestCase):
    def test_create_round_trip_and_pickle(self):
        uid = fccl.UniqueId.create()
        raw = bytes(uid)
        self.assertEqual(len(raw), fccl.UNIQUE_ID_BYTES)
        self.assertEqual(fccl.UniqueId.from_bytes(raw), uid)
        self.assertEqual(pickle.loads(pickle.dumps(uid)), uid)
        self.assertNotEqual(fccl.UniqueId.create(), uid)  # each carries its own random secret

    def test_length_is_checked(self):
        for length in (0, 127, 129):
            with self.assertRaises(ValueError):
                fccl.UniqueId.from_bytes(b"\1" * length)


class InitErrorTest(unittest.TestCase):
    def assert_invalid_argument(self, nranks, rank):
        uid = fccl.UniqueId.create()
        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.init_rank(nranks, rank, uid, fccl.Config(timeout_ms=SHORT_TIMEOUT_MS))
        self.assertEqual(caught.exception.result, fccl.Result.InvalidArgument)
        self.assertTrue(caught.exception.message, str(caught.exception))

    def test_zero_ranks(self):
        self.assert_invalid_argument(0, 0)

    def test_rank_out_of_range(self):
        self.assert_invalid_argument(2, 2)
        self.assert_invalid_argument(2, -1)

    def test_config_is_checked_by_the_library(self):
        # A timeout below -1 is out of range for fccl, not for Python: the library's check must come back whole.
        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(), fccl.Config(timeout_ms=-5))
        self.assertEqual(caught.exception.result, fccl.Result.InvalidArgument)
        self.assertTrue(caught.exception.message)

    def test_one_rank_without_a_gpu_fails_promptly(self):
        if gpu_count() > 0:
            self.skipTest("a GPU is visible: a one-rank communicator can be made here")
        start = time.monotonic()
        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(),
                                        fccl.Config(timeout_ms=SHORT_TIMEOUT_MS, comm_name="no-gpu"))
        self.assertEqual(caught.exception.result, fccl.Result.UnhandledCudaError, str(caught.exception))
        self.assertTrue(caught.exception.message)
        self.assertLess(time.monotonic() - start, SHORT_TIMEOUT_MS / 1000 + 10)

    def test_external_init_without_a_gpu_fails_promptly(self):
        if gpu_count() > 0:
            self.skipTest("a GPU is visible")
        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.from_external(1, 0, lambda send: send, config=fccl.Config(timeout_ms=SHORT_TIMEOUT_MS))
        self.assertEqual(caught.exception.result, fccl.Result.UnhandledCudaError, str(caught.exception))

    def test_external_init_argument_errors(self):
        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.from_external(2, 5, lambda send: send * 2)
        self.assertEqual(caught.exception.result, fccl.Result.InvalidArgument)

    def test_config_is_not_a_dict(self):
        with self.assertRaises(TypeError):
            fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(), {"timeout_ms": 5})


class CommunicatorTest(unittest.TestCase):
    """The calls of a communicator that is gone, and groups."""

    def test_destroyed_communicator_refuses_calls(self):
        comm = fccl.Communicator(None)
        with self.assertRaises(fccl.FcclError) as caught:
            comm.all_reduce(FakeCudaArray((4,)))
        self.assertEqual(caught.exception.result, fccl.Result.InvalidUsage)
        for call in (lambda: comm.all_gather(FakeCudaArray((4,)), FakeCudaArray((8,))),
                     lambda: comm.reduce_scatter(FakeCudaArray((8,)), FakeCudaArray((4,))),
                     lambda: comm.broadcast(FakeCudaArray((4,)))):
            with self.assertRaises(fccl.FcclError) as caught:
                call()
            self.assertEqual(caught.exception.result, fccl.Result.InvalidUsage)
        with self.assertRaises(fccl.FcclError):
            comm.register(FakeCudaArray((4,)))
        # A registration outliving its communicator was released by the destroy: deregister must not call C.
        fccl.Registration(comm, 0x1234, FakeCudaArray((4,))).deregister()
        comm.destroy()  # idempotent
        comm.abort()
        with comm:
            pass

    def test_group_nests_and_ends_when_the_block_raises(self):
        try:
            with fccl.group():
                with fccl.group():
                    pass
        except fccl.FcclError as error:  # a machine without NCCL: the group calls say what to install
            self.assertIn("NCCL", str(error))
            return
        with self.assertRaises(KeyError):  # the block's exception, not the group's
            with fccl.group():
                raise KeyError("inside")
        with fccl.group():  # the one above was ended: a new group starts from the top
            pass
        with self.assertRaises(fccl.FcclError) as caught:  # and no group is left open on this thread
            _check(_lib().fcclGroupEnd(), "fcclGroupEnd")
        self.assertIn("no group was started", str(caught.exception))


class ExternalCallbackTest(unittest.TestCase):
    """The CFUNCTYPE callbacks called directly, as fccl would call them."""

    def call_allgather(self, bootstrap, send):
        send_buffer = ctypes.create_string_buffer(send, len(send))
        recv_buffer = ctypes.create_string_buffer(len(send) * bootstrap.nranks)
        result = bootstrap.allgather_fn(None, ctypes.addressof(send_buffer), ctypes.addressof(recv_buffer), len(send))
        return result, recv_buffer.raw

    def test_allgather_copies_in_rank_order(self):
        bootstrap = _ExternalBootstrap(3, lambda send: b"".join(bytes([rank]) + send[1:] for rank in range(3)), None)
        result, gathered = self.call_allgather(bootstrap, b"\x09abc")
        self.assertEqual(result, fccl.Result.Success)
        self.assertEqual(gathered, b"\x00abc\x01abc\x02abc")
        self.assertIsNone(bootstrap.error)

    def test_exception_becomes_a_system_error(self):
        def broken(send):
            raise ConnectionError("peer went away")

        bootstrap = _ExternalBootstrap(2, broken, None)
        result, _ = self.call_allgather(bootstrap, b"1234")
        self.assertEqual(result, fccl.Result.SystemError)
        self.assertIsInstance(bootstrap.error, ConnectionError)
        with self.assertRaises(fccl.FcclError) as caught:
            bootstrap.raise_for(result, "fcclCommInitExternal")
        self.assertEqual(caught.exception.result, fccl.Result.SystemError)
        self.assertIn("peer went away", str(caught.exception))
        self.assertIsInstance(caught.exception.__cause__, ConnectionError)

    def test_wrong_length_is_an_error(self):
        bootstrap = _ExternalBootstrap(2, lambda send: send, None)  # one rank's worth, not two
        result, _ = self.call_allgather(bootstrap, b"1234")
        self.assertEqual(result, fccl.Result.SystemError)
        self.assertIsInstance(bootstrap.error, ValueError)

    def test_barrier(self):
        calls = []
        bootstrap = _ExternalBootstrap(2, lambda send: send * 2, lambda: calls.append(1))
        self.assertEqual(bootstrap.barrier_fn(None), fccl.Result.Success)
        self.assertEqual(calls, [1])
        failing = _ExternalBootstrap(2, lambda send: send * 2, lambda: 1 / 0)
        self.assertEqual(failing.barrier_fn(None), fccl.Result.SystemError)
        self.assertIsInstance(failing.error, ZeroDivisionError)
        self.assertFalse(_ExternalBootstrap(2, lambda send: send, None).callbacks.barrier)  # NULL: fccl's own

    def test_callback_exception_through_the_library(self):
        # Two ranks, so that fccl calls the allgather (one rank exchanges nothing): with a GPU the callback's
        # exception comes back as fcclSystemError naming it; without one the init fails on the device first. Either
        # way nothing waits, and the exception does not escape through C.
        def broken(send):
            raise RuntimeError("no exchange today")

        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.from_external(2, 0, broken, config=fccl.Config(timeout_ms=SHORT_TIMEOUT_MS))
        if gpu_count() > 0:
            self.assertEqual(caught.exception.result, fccl.Result.SystemError, str(caught.exception))
            self.assertIn("no exchange today", str(caught.exception))
            self.assertIsInstance(caught.exception.__cause__, RuntimeError)
        else:
            self.assertEqual(caught.exception.result, fccl.Result.UnhandledCudaError, str(caught.exception))


if __name__ == "__main__":
    unittest.main()
