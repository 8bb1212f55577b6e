#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Communicator.all_gather_v / reduce_scatter_v and fccl.ops.all_gather_v / reduce_scatter_v on GPUs with PyTorch.
Three ranks, one GPU each when there are three, else sharing them (Config.allow_shared_device), meet over a gloo file
store and make their communicator with Communicator.from_process_group(name="ep"). Each rank reports:

eager     - rows per rank with one rank empty, bf16 and float32, through the ops and the methods: the gathered rows
            are every rank's rows in rank order, bit for bit (and the same bits on every rank), the scattered rows the
            float64 host reference's sums; with equal counts the bits of all_gather / reduce_scatter
compiled  - the same under torch.compile(fullgraph=True) (a graph break would raise), the methods included
graph     - counts in an int64 CUDA tensor: the compiled function captured once in a CUDA graph and replayed with new
            counts (an empty rank, every row on one rank) and new rows before every replay
invalid   - counts that do not match the tensors, or are not one per rank, raise before anything runs

Without torch or a CUDA device it exits 77, which meson counts as a skip. Every wait is bounded (fccl's timeouts, the
store's, the ranks' deadline).

  FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_variable_gpu.py [-v]
"""
import datetime
import importlib
import os
import shutil
import tempfile
import unittest

import fccl
from support import (RankReport, check_reported, check_sum, digest, gpu_ranks_environment, gpu_test_main, rank_inputs,
                     run_ranks, torch_cuda_devices)

NAME = "ep"
RANKS = 3
HIDDEN = 48
COUNTS = [5, 0, 11]  # rows per rank: one rank empty
MAX_ROWS = 16  # the graph's worst case per rank
TIMEOUT_S = 500


def rows_of(torch, dtype, counts, seed, hidden=HIDDEN):
    """Every rank's rows (counts[r] x hidden), the same on every rank, on the host."""
    rows = []
    for rank, count in enumerate(counts):
        flat = rank_inputs(torch, dtype, max(count, 1) * hidden, RANKS, seed)[rank][:count * hidden]
        rows.append(flat.reshape(count, hidden))
    return rows


def blocks_of(torch, dtype, counts, seed, hidden=HIDDEN):
    """Every rank's reduce-scatter input (sum(counts) x hidden), the same on every rank, on the host."""
    total = sum(counts)
    return [x[:total * hidden].reshape(total, hidden)
            for x in rank_inputs(torch, dtype, max(total, 1) * hidden, RANKS, seed + 7)]


def check_gathered(torch, got, xs, what):
    want = torch.cat(xs)
    if tuple(got.shape) != tuple(want.shape):
        return [f"{what}: shape {tuple(got.shape)}, {tuple(want.shape)} expected"]
    return [] if torch.equal(got.detach().cpu(), want) else [f"{what}: not every rank's rows in rank order"]


def check_scattered(torch, got, ys, counts, rank, dtype_name, what):
    start = sum(counts[:rank])
    mine = [y[start:start + counts[rank]] for y in ys]
    if tuple(got.shape) != (counts[rank], HIDDEN):
        return [f"{what}: shape {tuple(got.shape)}, {(counts[rank], HIDDEN)} expected"]
    return [f"{what}: {p}" for p in check_sum(torch, got, mine, dtype_name)]


def run_rank(rank, workdir):
    import torch
    import torch.distributed as dist
    importlib.import_module("fccl.ops")
    device, shared = gpu_ranks_environment(rank, RANKS, torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(workdir, 'store')}", rank=rank,
                            world_size=RANKS, timeout=datetime.timedelta(seconds=120))
    config = fccl.Config(timeout_ms=30000, allow_shared_device=shared)
    me = RankReport(os.path.join(workdir, f"report-variable-{rank}.json"))
    comm = fccl.Communicator.from_process_group(config=config, name=NAME)

    def eager():
        problems, digests = [], []
        for dtype, dtype_name, seed in ((torch.bfloat16, "bfloat16", 1), (torch.float32, "float32", 2)):
            xs = rows_of(torch, dtype, COUNTS, seed)
            ys = blocks_of(torch, dtype, COUNTS, seed)
            x, y = xs[rank].cuda(), ys[rank].cuda()
            gathered = fccl.ops.all_gather_v(x, COUNTS, NAME)
            scattered = fccl.ops.reduce_scatter_v(y, COUNTS, NAME)
            by_method = torch.full((sum(COUNTS), HIDDEN), float("nan"), dtype=dtype, device="cuda")
            comm.all_gather_v(x, by_method, [c * HIDDEN for c in COUNTS])
            scattered_by_method = torch.empty((COUNTS[rank], HIDDEN), dtype=dtype, device="cuda")
            comm.reduce_scatter_v(y, scattered_by_method, [c * HIDDEN for c in COUNTS], op="sum")
            torch.cuda.synchronize()
            problems += check_gathered(torch, gathered, xs, f"{dtype_name} ops.all_gather_v")
            problems += check_gathered(torch, by_method, xs, f"{dtype_name} all_gather_v method")
            problems += check_scattered(torch, scattered, ys, COUNTS, rank, dtype_name, f"{dtype_name} ops")
            if not torch.equal(scattered, scattered_by_method):
                problems.append(f"{dtype_name}: the method's reduce_scatter_v differs from the op's")
            digests.append(digest(torch, gathered))
            # Equal counts: the bits of the fixed-count collectives.
            equal = [7] * RANKS
            ys = blocks_of(torch, dtype, equal, seed + 100)
            y = ys[rank].cuda()
            if not torch.equal(fccl.ops.reduce_scatter_v(y, equal, NAME), fccl.ops.reduce_scatter(y, NAME)):
                problems.append(f"{dtype_name}: reduce_scatter_v with equal counts differs from reduce_scatter")
            torch.cuda.synchronize()
        return problems, digests

    def layer(x, y):
        gathered = fccl.ops.all_gather_v(x, COUNTS, NAME)
        scattered = fccl.ops.reduce_scatter_v(y, COUNTS, NAME, op="sum")
        flat = torch.empty(sum(COUNTS) * HIDDEN, dtype=x.dtype, device=x.device)
        comm.all_gather_v(x.reshape(-1), flat, [c * HIDDEN for c in COUNTS])
        return gathered * 1, scattered, flat.view(sum(COUNTS), HIDDEN)

    def compiled():
        function = torch.compile(layer, fullgraph=True)
        problems, digests = [], []
        for seed in (10, 11):
            xs = rows_of(torch, torch.float32, COUNTS, seed)
            ys = blocks_of(torch, torch.float32, COUNTS, seed)
            gathered, scattered, by_method = function(xs[rank].cuda(), ys[rank].cuda())
            torch.cuda.synchronize()
            problems += check_gathered(torch, gathered, xs, f"compiled {seed} ops.all_gather_v")
            problems += check_gathered(torch, by_method, xs, f"compiled {seed} all_gather_v method")
            problems += check_scattered(torch, scattered, ys, COUNTS, rank, "float32", f"compiled {seed}")
            digests.append(digest(torch, gathered))
        return problems, digests

    def device_layer(x, y, counts):
        gathered = fccl.ops.all_gather_v(x, counts, NAME, rows=RANKS * MAX_ROWS)
        scattered = fccl.ops.reduce_scatter_v(y, counts, NAME, rows=MAX_ROWS)
        return gathered, scattered

    def graph():
        function = torch.compile(device_layer, fullgraph=True)
        static_x = torch.zeros((MAX_ROWS, HIDDEN), dtype=torch.bfloat16, device="cuda")
        static_y = torch.zeros((RANKS * MAX_ROWS, HIDDEN), dtype=torch.bfloat16, device="cuda")
        static_counts = torch.tensor([1] * RANKS, dtype=torch.int64, device="cuda")
        function(static_x, static_y, static_counts)  # eager first, as torch.cuda.graph recommends
        torch.cuda.synchronize()
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph):
            gathered, scattered = function(static_x, static_y, static_counts)
        torch.cuda.synchronize()
        problems, digests = [], []
        generator = torch.Generator().manual_seed(1234)  # the same counts on every rank
        for replay in range(12):
            if replay % 4 == 1:
                counts = [0] * RANKS
                counts[replay % RANKS] = MAX_ROWS  # every row on one rank
            else:
                counts = [int(c) for c in torch.randint(0, MAX_ROWS + 1, (RANKS,), generator=generator)]
                if replay % 4 == 2:
                    counts[(replay + 1) % RANKS] = 0  # an empty rank
            xs = rows_of(torch, torch.bfloat16, counts, 100 + replay)
            ys = blocks_of(torch, torch.bfloat16, counts, 100 + replay)
            static_counts.copy_(torch.tensor(counts, dtype=torch.int64))
            static_x[:counts[rank]].copy_(xs[rank])
            static_y[:sum(counts)].copy_(ys[rank])
            cuda_graph.replay()
            torch.cuda.synchronize()
            total = sum(counts)
            problems += check_gathered(torch, gathered[:total], xs, f"replay {replay} counts {counts}")
            problems += check_scattered(torch, scattered[:counts[rank]], ys, counts, rank, "bfloat16",
                                        f"replay {replay} counts {counts}")
            digests.append(digest(torch, gathered[:total]))
        return problems, digests

    def invalid():
        problems = []
        x = torch.zeros((COUNTS[rank], HIDDEN), device="cuda")
        for what, call in (("counts not one per rank", lambda: fccl.ops.all_gather_v(x, [5, 11], NAME)),
                           ("rows that do not match counts[rank]",
                            lambda: comm.all_gather_v(x, torch.empty(sum(COUNTS) * HIDDEN, device="cuda"),
                                                      [c * HIDDEN + 1 for c in COUNTS])),
                           ("device counts without rows=",
                            lambda: fccl.ops.all_gather_v(x, torch.zeros(RANKS, dtype=torch.int64, device="cuda"),
                                                          NAME)),
                           ("int32 device counts",
                            lambda: comm.all_gather_v(x, torch.empty(64 * HIDDEN, device="cuda"),
                                                      torch.zeros(RANKS, dtype=torch.int32, device="cuda")))):
            try:
                call()
                problems.append(f"{what}: accepted")
            except (ValueError, TypeError):
                pass
            except Exception as error:  # anything else is a wrong answer too, with its type shown
                problems.append(f"{what}: {type(error).__name__}, not ValueError/TypeError: {error}")
        torch.cuda.synchronize()
        if comm.async_error() != fccl.Result.Success:
            problems.append(f"the communicator failed: {comm.async_error()!r}")
        return problems

    for name, function in (("eager", eager), ("compiled", compiled), ("graph", graph), ("invalid", invalid)):
        me.run(name, function)
    comm.destroy()
    dist.destroy_process_group()


@unittest.skipUnless(torch_cuda_devices() >= 1, "needs torch with a CUDA device")
class VariableCollectivesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="fccl-variable-")

        def caches(rank):  # each rank its own inductor cache
            return {"TORCHINDUCTOR_CACHE_DIR": os.path.join(cls.workdir, f"inductor-rank{rank}"),
                    "TORCHINDUCTOR_COMPILE_THREADS": "1"}

        cls.results = run_ranks(__file__, [], RANKS, cls.workdir, "variable", TIMEOUT_S, caches)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.workdir, ignore_errors=True)

    def test_eager_ops_and_methods(self):
        check_reported(self, self.results, "eager")

    def test_compiled_fullgraph(self):
        check_reported(self, self.results, "compiled")

    def test_graph_replays_new_device_counts(self):
        check_reported(self, self.results, "graph")

    def test_bad_counts_raise(self):
        check_reported(self, self.results, "invalid", same_digests=False)


if __name__ == "__main__":
    gpu_test_main(run_rank)
