#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python layer's reduce, gather, scatter and bcast, its pre-multiplied sums and the SM budget on GPUs, with
PyTorch: two spawned ranks (a GPU each when there are two, else sharing one) that check

  reduce        every root, in place and out of place, recv None off the root: the root gets the float64 sum within
                the dtype's tolerance and bit for bit what all_reduce gives
  gather        every root, in place (send a view of the root's recv) and out of place: the ranks' inputs, bit for bit
  scatter       every root, send None off the root: the root's blocks, bit for bit
  bcast         every root, in place
  premul        all_reduce, reduce_scatter and reduce with fccl.PreMulSum(number), with a one-element CUDA tensor, and
                with torch.distributed's own (_make_nccl_premul_sum), bf16 and fp32: the sum of each input times the
                scalar
  premul_graph  an all_reduce with a device scalar captured in a CUDA graph, replayed with a new scalar each time
  premul_compile  fccl.ops.all_reduce with a PreMulSum under torch.compile(fullgraph=True)
  sm_budget     a communicator made with Config(max_ctas=4, min_ctas=2): its all_reduce right

Without torch or a CUDA device it exits 77, which meson counts as a skip.

  FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_rooted_gpu.py [-v]
"""
import importlib
import traceback
import unittest

import fccl
from support import check_sum, digest, gpu_test_main, rank_inputs, spawn_ranks, torch_cuda_devices

GPU_RANKS = 2
GPU_TIMEOUT_S = 240
COUNTS = (1, 1007, 300001)


def rooted_scenarios(torch, comm, rank, nranks, report):
    """reduce, gather, scatter, bcast: one report each."""
    problems, digests = [], []
    for root in range(nranks):
        for count in COUNTS:
            inputs = rank_inputs(torch, torch.float32, count, nranks, seed=10 + root * 7 + count)
            send = inputs[rank].cuda()
            recv = torch.full_like(send, float("nan")) if rank == root or count > 1 else None
            returned = comm.reduce(send, recv, root=root)
            in_place = send.clone()
            comm.reduce(in_place, root=root)
            reduced = torch.empty_like(send)
            comm.all_reduce(send, reduced)
            torch.cuda.synchronize()
            if rank != root:
                if returned is not None:
                    problems.append("reduce returned something off the root")
                if recv is not None and not torch.isnan(recv).all():
                    problems.append(f"root {root} count {count}: recv written off the root")
                if not torch.equal(in_place, send):
                    problems.append(f"root {root} count {count}: an input changed off the root")
                continue
            if returned is not recv:
                problems.append("reduce did not return recv on the root")
            problems += [f"root {root} count {count}: {p}" for p in check_sum(torch, recv, inputs, "float32")]
            if not torch.equal(recv, reduced) or not torch.equal(in_place, reduced):
                problems.append(f"root {root} count {count}: the reduce's bits are not the all-reduce's")
            digests.append(digest(torch, recv))
    report("reduce", problems)  # the root's result only

    problems, digests = [], []
    for root in range(nranks):
        for count in COUNTS:
            inputs = rank_inputs(torch, torch.bfloat16, count, nranks, seed=20 + root * 7 + count)
            send = inputs[rank].cuda()
            recv = torch.full((nranks * count,), float("nan"), dtype=torch.bfloat16, device="cuda")
            returned = comm.gather(send, recv if rank == root else None, root=root)
            in_place = torch.full_like(recv, float("nan"))
            in_place[rank * count:(rank + 1) * count].copy_(send)
            comm.gather(in_place[rank * count:(rank + 1) * count], in_place, root=root)
            torch.cuda.synchronize()
            if rank != root:
                if returned is not None:
                    problems.append("gather returned something off the root")
                continue
            for name, result in (("out of place", recv), ("in place", in_place)):
                if not torch.equal(result.cpu(), torch.cat(inputs)):
                    problems.append(f"root {root} count {count} {name}: not the ranks' inputs")
    report("gather", problems)

    problems, digests = [], []
    for root in range(nranks):
        for count in COUNTS:
            inputs = rank_inputs(torch, torch.float16, nranks * count, nranks, seed=30 + root * 7 + count)
            send = inputs[rank].cuda() if rank == root else None
            recv = torch.full((count,), float("nan"), dtype=torch.float16, device="cuda")
            if comm.scatter(send, recv, root=root) is not recv:
                problems.append("scatter did not return recv")
            torch.cuda.synchronize()
            if not torch.equal(recv.cpu(), inputs[root][rank * count:(rank + 1) * count]):
                problems.append(f"root {root} count {count}: not the root's block")
    report("scatter", problems)

    problems, digests = [], []
    for root in range(nranks):
        inputs = rank_inputs(torch, torch.bfloat16, 100003, nranks, seed=40 + root)
        buffer = inputs[rank].cuda()
        if comm.bcast(buffer, root=root) is not buffer:
            problems.append("bcast did not return its buffer")
        torch.cuda.synchronize()
        if not torch.equal(buffer.cpu(), inputs[root]):
            problems.append(f"root {root}: not the root's input")
        digests.append(digest(torch, buffer))
    report("bcast", problems, digests)


def scaled(torch, inputs, factor):
    return [x.to(torch.float64) * factor for x in inputs]


def premul_scenarios(torch, comm, rank, nranks, report):
    """Pre-multiplied sums: a number, a device tensor, torch's own op; in a graph; under torch.compile."""
    dist = importlib.import_module("torch.distributed")
    problems, digests = [], []
    for dtype_name, factor in (("bfloat16", 0.5), ("float32", 1 / 3)):
        dtype = getattr(torch, dtype_name)
        device_factor = torch.tensor([factor], dtype=dtype, device="cuda")
        exact = float(device_factor.item())  # the factor as the dtype holds it
        ops = [("number", fccl.PreMulSum(factor), exact), ("device tensor", fccl.PreMulSum(device_factor), exact)]
        make = getattr(dist, "_make_nccl_premul_sum", None)
        if make is not None:  # torch.distributed's own ReduceOp.PREMUL_SUM with its factor
            ops.append(("torch op", make(factor), exact))
        for name, op, value in ops:
            for count in COUNTS:
                inputs = rank_inputs(torch, dtype, count, nranks, seed=50 + count)
                send = inputs[rank].cuda()
                out = torch.full_like(send, float("nan"))
                comm.all_reduce(send, out, op=op)
                rs_inputs = rank_inputs(torch, dtype, nranks * count, nranks, seed=60 + count)
                block = torch.full((count,), float("nan"), dtype=dtype, device="cuda")
                comm.reduce_scatter(rs_inputs[rank].cuda(), block, op=op)
                root_out = send.clone()
                comm.reduce(root_out, root=nranks - 1, op=op)
                torch.cuda.synchronize()
                where = f"{dtype_name} {name} count {count}"
                problems += [f"{where}: all_reduce: {p}" for p in check_sum(torch, out, scaled(torch, inputs, value),
                                                                             dtype_name)]
                rs_blocks = [x[rank * count:(rank + 1) * count] for x in rs_inputs]
                problems += [f"{where}: reduce_scatter: {p}"
                             for p in check_sum(torch, block, scaled(torch, rs_blocks, value), dtype_name)]
                if rank == nranks - 1 and not torch.equal(root_out, out):
                    problems.append(f"{where}: the reduce's bits are not the all-reduce's")
                digests.append(digest(torch, out))
    report("premul", problems, digests)

    problems, digests = [], []
    count = 1 << 20
    factor = torch.zeros(1, dtype=torch.float32, device="cuda")
    static_in = torch.empty(count, dtype=torch.float32, device="cuda")
    static_out = torch.empty_like(static_in)
    static_in.fill_(1)
    comm.all_reduce(static_in, static_out, op=fccl.PreMulSum(factor))  # eager warm-up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        comm.all_reduce(static_in, static_out, op=fccl.PreMulSum(factor))
    for replay in range(5):
        inputs = rank_inputs(torch, torch.float32, count, nranks, seed=70 + replay)
        static_in.copy_(inputs[rank])
        factor.fill_(0.25 * (replay + 1))  # read by the kernel of this replay
        static_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        problems += [f"replay {replay}: {p}"
                     for p in check_sum(torch, static_out, scaled(torch, inputs, 0.25 * (replay + 1)), "float32")]
        digests.append(digest(torch, static_out))
    del graph
    torch.cuda.synchronize()
    report("premul_graph", problems, digests)

    problems, digests = [], []
    fccl_ops = importlib.import_module("fccl.ops")

    mean = fccl.PreMulSum(1 / nranks)  # made outside: the compiled function reads its name

    @torch.compile(fullgraph=True)
    def averaged(x):
        return fccl_ops.all_reduce(x * 2, comm, op=mean)

    for seed in (80, 81):
        inputs = rank_inputs(torch, torch.float32, 4099, nranks, seed=seed)
        result = averaged(inputs[rank].cuda())
        torch.cuda.synchronize()
        problems += check_sum(torch, result, scaled(torch, inputs, 2 / nranks), "float32")
        digests.append(digest(torch, result))
    report("premul_compile", problems, digests)


def gpu_worker(me):
    scenario = "start"
    rank, nranks, report = me.rank, me.nranks, me.report
    try:
        torch, _, shared = me.start_gpu()
        config = fccl.Config(timeout_ms=30000, allow_shared_device=shared)
        comm = fccl.Communicator.init_rank(nranks, rank, me.unique_id(0), config)
        scenario = "reduce"
        rooted_scenarios(torch, comm, rank, nranks, report)
        scenario = "premul"
        premul_scenarios(torch, comm, rank, nranks, report)
        comm.destroy()

        scenario = "sm_budget"
        budget = fccl.Config(timeout_ms=30000, allow_shared_device=shared, min_ctas=2, max_ctas=4)
        with fccl.Communicator.init_rank(nranks, rank, me.unique_id(1), budget) as bounded:
            inputs = rank_inputs(torch, torch.float32, (1 << 22) + 3, nranks, seed=90)
            x = inputs[rank].cuda()
            bounded.all_reduce(x)
            torch.cuda.synchronize()
            report(scenario, check_sum(torch, x, inputs, "float32"), [digest(torch, x)])
    except BaseException:  # reported, not raised: the parent owns the verdict
        report(scenario, ["raised:\n" + traceback.format_exc()])


SCENARIOS = ["reduce", "gather", "scatter", "bcast", "premul", "premul_graph", "premul_compile", "sm_budget"]


@unittest.skipUnless(torch_cuda_devices() >= 1, "needs torch with a CUDA device")
class RootedGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.spawned = spawn_ranks(gpu_worker, GPU_RANKS, SCENARIOS, GPU_TIMEOUT_S)

    def check_scenario(self, scenario):
        self.spawned.check(self, scenario)

    def test_reduce(self):
        self.check_scenario("reduce")

    def test_gather(self):
        self.check_scenario("gather")

    def test_scatter(self):
        self.check_scenario("scatter")

    def test_bcast(self):
        self.check_scenario("bcast")

    def test_premul(self):
        self.check_scenario("premul")

    def test_premul_in_a_graph(self):
        self.check_scenario("premul_graph")

    def test_premul_under_torch_compile(self):
        self.check_scenario("premul_compile")

    def test_sm_budget(self):
        self.check_scenario("sm_budget")


if __name__ == "__main__":
    gpu_test_main()
