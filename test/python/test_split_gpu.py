#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Communicator.split and Communicator.finalize on GPUs, with PyTorch: three spawned ranks (sharing the GPUs when
there are fewer) split their communicator by parity with keys reversed (ranks 2, 0 and rank 1 alone), check each
child's rank, size and an all-reduce of rank-dependent data against the float64 host reference, split a child again,
let rank 1 join no child (None), split without blocking (async_error polled until Success), finalize the children
(then every collective call is refused) and destroy them; the parent works on.

Without torch or a CUDA device it exits 77, which meson counts as a skip.

  FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_split_gpu.py [-v]
"""
import time
import traceback
import unittest

import fccl
from support import check_sum, gpu_test_main, rank_inputs, spawn_ranks

RANKS = 3
TIMEOUT_S = 240
COUNT = 4099


def wait_ready(comm):
    """async_error() until it is no longer InProgress (bounded); the final state."""
    deadline = time.monotonic() + 60
    state = comm.async_error()
    while state == fccl.Result.InProgress and time.monotonic() < deadline:
        time.sleep(0.001)
        state = comm.async_error()
    return state


def check_child(torch, child, members, rank, label):
    """Problems with child: this rank's place among members (parent ranks in child order), the size, and an
    all-reduce of every member's input."""
    problems = []
    if child.nranks != len(members) or child.rank != members.index(rank):
        problems.append(f"{label}: rank {child.rank} of {child.nranks}, expected {members.index(rank)} of "
                        f"{len(members)}")
    inputs = rank_inputs(torch, torch.float32, COUNT, RANKS, seed=17)
    x = inputs[rank].cuda()
    y = torch.full_like(x, float("nan"))
    child.all_reduce(x, y)
    torch.cuda.synchronize()
    problems += [f"{label}: {p}" for p in check_sum(torch, y, [inputs[m] for m in members], "float32")]
    return problems


def worker(me):
    rank = me.rank
    problems = []
    try:
        torch, _, shared = me.start_gpu()
        config = fccl.Config(timeout_ms=30000, allow_shared_device=shared)
        parent = fccl.Communicator.init_rank(RANKS, rank, me.unique_id(), config, name=f"split-parent-{rank}")

        # By parity, keys reversed: color 0 is ranks 2, 0 in that order; rank 1 is alone.
        child = parent.split(rank % 2, key=-rank, name=f"split-child-{rank}")
        members = [2, 0] if rank % 2 == 0 else [1]
        problems += check_child(torch, child, members, rank, "parity")
        # A split of that child: each of its ranks alone.
        grandchild = child.split(child.rank, key=0)
        problems += check_child(torch, grandchild, [rank], rank, "nested")
        grandchild.destroy()
        child.finalize()
        try:
            child.all_reduce(torch.ones(4, device="cuda"))
            problems.append("all_reduce on a finalized communicator was not refused")
        except fccl.FcclError as error:
            if error.result != fccl.Result.InvalidUsage:
                problems.append(f"all_reduce after finalize raised {error.result}")
        child.destroy()

        # Rank 1 joins none and gets None; the others make a child without blocking, polled until ready.
        nonblocking = fccl.Config(timeout_ms=30000, allow_shared_device=shared, blocking=False)
        child = parent.split(None if rank == 1 else 5, key=rank, config=nonblocking)
        if rank == 1:
            if child is not None:
                problems.append(f"a rank of SPLIT_NOCOLOR got {child!r}")
            if wait_ready(parent) != fccl.Result.Success:
                problems.append("the parent did not come back from a split without blocking")
        else:
            if wait_ready(child) != fccl.Result.Success:
                problems.append(f"the non-blocking child ended as {child.async_error()}")
            problems += check_child(torch, child, [0, 2], rank, "non-blocking")
            child.finalize()  # non-blocking like its config: polled
            if wait_ready(child) != fccl.Result.Success:
                problems.append("the non-blocking finalize did not finish")
            child.destroy()
        problems += check_child(torch, parent, [0, 1, 2], rank, "the parent after its splits")
        parent.destroy()
    except BaseException:
        problems.append("raised:\n" + traceback.format_exc())
    me.report("split_and_finalize", problems)


class SplitGpuTest(unittest.TestCase):
    def test_split_and_finalize(self):
        spawned = spawn_ranks(worker, RANKS, ["split_and_finalize"], TIMEOUT_S)
        spawned.check(self, "split_and_finalize", same_digests=False)


if __name__ == "__main__":
    gpu_test_main()
