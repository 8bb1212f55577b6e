#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Communicators by name (fccl._names, Communicator.name and by_name), what fccl.ops' custom ops carry instead of an
address: automatic names, a name taken twice refused before anything collective starts, a failed creation giving its
name back, destroy and abort giving it back, the lookup of a missing name as an FcclError that names it, and the
names' own checks. With a visible GPU a one-rank communicator is made, destroyed and made again under one name.

Run alone: FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_names.py [-v]
"""
import os
import unittest

import fccl
from fccl import _names
from support import SHORT_TIMEOUT_MS, gpu_count


class Holder:
    """A stand-in communicator for the registry alone."""


class RegistryTest(unittest.TestCase):
    def test_automatic_names_are_unique_and_hold_the_process_id(self):
        first, second = _names._reserve(), _names._reserve()
        self.addCleanup(_names._release, first)
        self.addCleanup(_names._release, second)
        self.assertNotEqual(first, second)
        for name in (first, second):
            self.assertIn(f"-{os.getpid()}-", name)

    def test_reserve_bind_lookup_release(self):
        name = _names._reserve("registry-tp")
        with self.assertRaises(fccl.FcclError):  # a creation under way is not a communicator yet
            _names._lookup(name)
        holder = Holder()
        _names._bind(name, holder)
        self.assertIs(_names._lookup(name), holder)
        self.assertIn(name, _names._names())
        _names._release(name, Holder())  # another object's release leaves it alone
        self.assertIs(_names._lookup(name), holder)
        _names._release(name, holder)
        self.assertNotIn(name, _names._names())
        _names._release(name, holder)  # twice: nothing

    def test_a_taken_name_is_refused(self):
        name = _names._reserve("registry-taken")
        self.addCleanup(_names._release, name)
        with self.assertRaises(ValueError) as caught:
            _names._reserve(name)
        self.assertIn("creation under way", str(caught.exception))
        holder = Holder()
        _names._bind(name, holder)
        self.addCleanup(_names._release, name, holder)
        with self.assertRaises(ValueError) as caught:
            _names._reserve(name)
        self.assertIn("live communicator", str(caught.exception))
        with self.assertRaises(ValueError):
            _names._bind(name, Holder())

    def test_missing_name_is_an_error_naming_it(self):
        holder = Holder()
        _names._bind("registry-present", holder)
        self.addCleanup(_names._release, "registry-present", holder)
        with self.assertRaises(fccl.FcclError) as caught:
            fccl.Communicator.by_name("registry-absent")
        error = caught.exception
        self.assertEqual(error.result, fccl.Result.InvalidUsage)
        self.assertEqual(error.call, "lookup")
        self.assertIn("'registry-absent'", error.message)
        self.assertIn("'registry-present'", error.message)  # the live names, to spot a typo

    def test_name_checks(self):
        for bad in (5, b"tp", None):
            with self.assertRaises(TypeError):
                _names._check_name(bad)
        for bad in ("", "t\0p"):
            with self.assertRaises(ValueError):
                _names._check_name(bad)

    def test_reservation_is_given_back_when_the_block_raises(self):
        with self.assertRaises(KeyError):
            with _names._Reservation("registry-failed"):
                raise KeyError("creation failed")
        _names._release(_names._reserve("registry-failed"))  # free again


class CommunicatorNameTest(unittest.TestCase):
    def test_communicator_without_a_name_gets_one_and_gives_it_back(self):
        comm = fccl.Communicator(None)  # a handle of None: a communicator already gone, for the Python side alone
        self.assertTrue(comm.name.startswith("anonymous-"))
        self.assertIs(fccl.Communicator.by_name(comm.name), comm)
        self.assertIn(repr(comm.name), repr(comm))
        with self.assertRaises(fccl.FcclError) as caught:
            comm.all_reduce((0x7000, 4, "float32"))
        self.assertIn(repr(comm.name), caught.exception.message)
        comm.destroy()
        with self.assertRaises(fccl.FcclError):
            fccl.Communicator.by_name(comm.name)

    def test_abort_gives_the_name_back(self):
        comm = fccl.Communicator(None, name="abort-me")
        comm.abort()
        _names._release(_names._reserve("abort-me"))

    def test_taken_name_is_refused_before_the_creation(self):
        holder = Holder()
        _names._bind("creation-taken", holder)
        self.addCleanup(_names._release, "creation-taken", holder)
        uid = fccl.UniqueId.create()
        # Two ranks and no peer: were the creation to start, it would wait for the peer until its timeout.
        for create in (lambda: fccl.Communicator.init_rank(2, 0, uid, name="creation-taken"),
                       lambda: fccl.Communicator.from_external(2, 0, lambda send: send * 2, name="creation-taken"),
                       lambda: fccl.Communicator.from_nccl(0x1234, name="creation-taken")):
            with self.assertRaises(ValueError) as caught:
                create()
            self.assertIn("'creation-taken'", str(caught.exception))
        self.assertIs(fccl.Communicator.by_name("creation-taken"), holder)

    def test_bad_names_are_refused_before_the_creation(self):
        uid = fccl.UniqueId.create()
        with self.assertRaises(TypeError):
            fccl.Communicator.init_rank(2, 0, uid, name=7)
        with self.assertRaises(ValueError):
            fccl.Communicator.init_rank(2, 0, uid, name="")

    def test_failed_creation_gives_the_name_back(self):
        uid = fccl.UniqueId.create()
        with self.assertRaises(fccl.FcclError) as caught:  # rank outside 0..nranks-1: refused by the library
            fccl.Communicator.init_rank(2, 5, uid, fccl.Config(timeout_ms=SHORT_TIMEOUT_MS), name="creation-failed")
        self.assertEqual(caught.exception.result, fccl.Result.InvalidArgument)
        with self.assertRaises(fccl.FcclError):  # the external bootstrap's refusal, the same way
            fccl.Communicator.from_external(2, 5, lambda send: send * 2, name="creation-failed")
        with self.assertRaises(ValueError):  # Python's own checks of the device, after the name was taken
            fccl.Communicator.init_rank(1, 0, uid, device="cpu", name="creation-failed")
        _names._release(_names._reserve("creation-failed"))  # free again

    def test_one_rank_communicator_by_name(self):
        config = fccl.Config(timeout_ms=SHORT_TIMEOUT_MS)
        if gpu_count() == 0:
            with self.assertRaises(fccl.FcclError):
                fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(), config, name="one-rank")
            _names._release(_names._reserve("one-rank"))  # given back after the failed init
            return
        for _ in range(2):  # made, destroyed and made again under the same name
            comm = fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(), config, name="one-rank")
            try:
                self.assertEqual(comm.name, "one-rank")
                self.assertIs(fccl.Communicator.by_name("one-rank"), comm)
                with self.assertRaises(ValueError):
                    fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(), config, name="one-rank")
                self.assertIs(fccl.Communicator.by_name("one-rank"), comm)
            finally:
                comm.destroy()
            with self.assertRaises(fccl.FcclError) as caught:
                fccl.Communicator.by_name("one-rank")
            self.assertIn("'one-rank'", caught.exception.message)


if __name__ == "__main__":
    unittest.main()
