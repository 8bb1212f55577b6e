#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python layer on GPUs, with PyTorch: two spawned ranks, on a GPU each when there are two, else sharing one
(Config.allow_shared_device, and an NCCL_HOSTID of its own for each rank so that NCCL takes them too), that init
through a UniqueId passed over a queue and check all_reduce (bf16 and fp32 sums on random data against a float64
host reference, in place and out of place, bitwise equal across ranks), explicit streams, the fused all-reduce +
RMSNorm, all_gather and broadcast (bit for bit, in place and out of place, every root) and reduce_scatter (against
the reference, and bit for bit the all-reduce's block), the three captured in one CUDA graph and replayed with fresh
data, a 4 MiB all-reduce captured in a CUDA graph and replayed with fresh data, register/deregister, graph
registrations in mem_stats, from_process_group over gloo, from_nccl, and the torch.library custom ops (fccl.ops) and
the methods under torch.compile(fullgraph=True), eager and replayed from a CUDA graph.

Without torch or a CUDA device it exits 77, which meson counts as a skip.

  FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_two_rank_gpu.py [-v]
"""
import ctypes
import importlib
import os
import tempfile
import time
import traceback
import unittest

import fccl
from support import check_sum, digest, gpu_test_main, rank_inputs, spawn_ranks, torch_cuda_devices

GPU_RANKS = 2
GPU_TIMEOUT_S = 240  # for the whole two-rank run, torch's start and compilation included; under meson's 300 s
GRAPH_BYTES = 4 << 20
GRAPH_REPLAYS = 20
EAGER_COUNTS = (1, 7, 1000, 65536 + 3, (1 << 20) + 5)


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]  # NCCL_UNIQUE_ID_BYTES


def nccl_scenario(torch, dist, rank, nranks, config):
    """Communicator.from_nccl over an NCCL communicator made here through libnccl itself (the one torch loaded, or
    the system's): its id travels over the gloo group. Returns (problems, digests)."""
    nccl = ctypes.CDLL("libnccl.so.2")
    nccl.ncclGetUniqueId.argtypes = [ctypes.POINTER(NcclUniqueId)]
    nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, NcclUniqueId, ctypes.c_int]
    nccl.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    nccl.ncclGetErrorString.restype = ctypes.c_char_p
    uid = NcclUniqueId()
    if rank == 0 and nccl.ncclGetUniqueId(ctypes.byref(uid)) != 0:
        raise RuntimeError("ncclGetUniqueId failed")
    # All 128 bytes: the array's .value would stop at the first zero byte.
    shared = [ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid)) if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)
    ctypes.memmove(ctypes.addressof(uid), shared[0], ctypes.sizeof(uid))
    nccl_comm = ctypes.c_void_p()
    result = nccl.ncclCommInitRank(ctypes.byref(nccl_comm), nranks, uid, rank)
    if result != 0:
        raise RuntimeError(f"ncclCommInitRank: {nccl.ncclGetErrorString(result).decode()}")
    problems = []
    try:
        with fccl.Communicator.from_nccl(nccl_comm.value, config=config) as nccl_based:
            if (nccl_based.rank, nccl_based.nranks) != (rank, nranks):
                problems.append(f"rank/nranks {nccl_based.rank}/{nccl_based.nranks}")
            inputs = rank_inputs(torch, torch.bfloat16, 54321, nranks, seed=9)
            x = inputs[rank].cuda()
            y = torch.full_like(x, float("nan"))
            nccl_based.all_reduce(x, y)
            torch.cuda.synchronize()
            problems += check_sum(torch, y, inputs, "bfloat16")
            digests = [digest(torch, y)]
    finally:
        nccl.ncclCommDestroy(nccl_comm)
    return problems, digests


COLLECTIVE_COUNTS = (1, 1007, 300001)  # 300001 bf16 elements: beyond LL for 2 ranks, direct or staged
COLLECTIVE_REPLAYS = 5


def collective_scenarios(torch, comm, rank, nranks, report, progress):
    """all_gather, reduce_scatter and broadcast, eager in place and out of place (outputs poisoned with NaN), and
    the three captured in one CUDA graph replayed with fresh data; reports one scenario each."""
    def block(tensor, count):
        return tensor[rank * count:(rank + 1) * count]

    progress[0] = "all_gather"
    problems, digests = [], []
    for count in COLLECTIVE_COUNTS:
        inputs = rank_inputs(torch, torch.bfloat16, count, nranks, seed=200 + count)
        expected = torch.cat(inputs)
        send = inputs[rank].cuda()
        recv = torch.full((nranks * count,), float("nan"), dtype=torch.bfloat16, device="cuda")
        if comm.all_gather(send, recv) is not recv:
            problems.append("all_gather did not return recv")
        in_place = torch.full_like(recv, float("nan"))
        block(in_place, count).copy_(send)
        comm.all_gather(block(in_place, count), in_place)
        torch.cuda.synchronize()
        for name, result in (("out of place", recv), ("in place", in_place)):
            if not torch.equal(result.cpu(), expected):  # moved, not computed: bit for bit
                problems.append(f"count {count} {name}: the gathered tensor is not the ranks' inputs")
            digests.append(digest(torch, result))
        if not torch.equal(send.cpu(), inputs[rank]):
            problems.append(f"count {count}: send was modified")
    report("all_gather", problems, digests)

    progress[0] = "reduce_scatter"
    problems = []
    for count in COLLECTIVE_COUNTS:
        inputs = rank_inputs(torch, torch.float32, nranks * count, nranks, seed=300 + count)
        send = inputs[rank].cuda()
        recv = torch.full((count,), float("nan"), dtype=torch.float32, device="cuda")
        if comm.reduce_scatter(send, recv, op="sum") is not recv:
            problems.append("reduce_scatter did not return recv")
        reduced = torch.empty_like(send)
        comm.all_reduce(send, reduced)
        in_place = send.clone()
        comm.reduce_scatter(in_place, block(in_place, count))
        torch.cuda.synchronize()
        problems += [f"count {count}: {p}" for p in check_sum(torch, recv, [block(x, count) for x in inputs],
                                                              "float32")]
        if not torch.equal(recv, block(reduced, count)):
            problems.append(f"count {count}: the reduce-scatter's bits are not the all-reduce's")
        if not torch.equal(block(in_place, count), recv):
            problems.append(f"count {count}: in place differs from out of place")
    report("reduce_scatter", problems)  # each rank holds its own block: nothing to compare across ranks

    progress[0] = "broadcast"
    problems, digests = [], []
    for root in range(nranks):
        for count in (7, 100003):
            inputs = rank_inputs(torch, torch.bfloat16, count, nranks, seed=400 + 10 * root + count)
            mine = inputs[rank].cuda()
            recv = torch.full_like(mine, float("nan"))
            comm.broadcast(mine if rank == root else None, recv, root=root)  # send is read on root only
            buffer = mine.clone()
            if comm.broadcast(buffer, root=root) is not buffer:
                problems.append("an in-place broadcast did not return its buffer")
            torch.cuda.synchronize()
            for name, result in (("out of place", recv), ("in place", buffer)):
                if not torch.equal(result.cpu(), inputs[root]):
                    problems.append(f"root {root} count {count} {name}: not the root's input")
                digests.append(digest(torch, result))
    report("broadcast", problems, digests)

    progress[0] = "collectives_graph"
    problems, digests = [], []
    count = COLLECTIVE_COUNTS[-1]
    gather_in = torch.empty(count, dtype=torch.bfloat16, device="cuda")
    gathered = torch.empty(nranks * count, dtype=torch.bfloat16, device="cuda")
    scatter_in = torch.empty(nranks * count, dtype=torch.float32, device="cuda")
    scattered = torch.empty(count, dtype=torch.float32, device="cuda")
    message = torch.empty(count, dtype=torch.bfloat16, device="cuda")
    root = nranks - 1

    def sequence():
        comm.all_gather(gather_in, gathered)
        comm.reduce_scatter(scatter_in, scattered, op="sum")
        comm.broadcast(message, root=root)

    for tensor in (gather_in, scatter_in, message):
        tensor.fill_(1)
    sequence()  # eager warm-up, as torch.cuda.graph recommends
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sequence()
    torch.cuda.synchronize()
    for replay in range(COLLECTIVE_REPLAYS):
        gather_inputs = rank_inputs(torch, torch.bfloat16, count, nranks, seed=500 + replay)
        scatter_inputs = rank_inputs(torch, torch.float32, nranks * count, nranks, seed=600 + replay)
        messages = rank_inputs(torch, torch.bfloat16, count, nranks, seed=700 + replay)
        gather_in.copy_(gather_inputs[rank])
        scatter_in.copy_(scatter_inputs[rank])
        message.copy_(messages[rank])
        gathered.fill_(float("nan"))
        scattered.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        if not torch.equal(gathered.cpu(), torch.cat(gather_inputs)):
            problems.append(f"replay {replay}: the all-gather is not the ranks' inputs")
        problems += [f"replay {replay}: reduce-scatter: {p}"
                     for p in check_sum(torch, scattered, [block(x, count) for x in scatter_inputs], "float32")]
        if not torch.equal(message.cpu(), messages[root]):
            problems.append(f"replay {replay}: the broadcast is not the root's input")
        digests += [digest(torch, gathered), digest(torch, message)]
    del graph
    torch.cuda.synchronize()
    report("collectives_graph", problems, digests)


COMPILE_SHAPE = (8, 129)  # two dimensions: the ops gather and scatter along dimension 0


def compile_scenarios(torch, comm, rank, nranks, report, progress):
    """The collectives under torch.compile(fullgraph=True), which refuses any graph break: through fccl.ops' custom
    ops, then through the Communicator's methods (which take the ops while traced); each compiled function is run
    with two sets of data, then captured in a CUDA graph and replayed with fresh data."""
    import fccl.ops
    root = nranks - 1

    def with_ops(x):
        total = fccl.ops.all_reduce(x * 2, comm) + 1
        gathered = fccl.ops.all_gather(x, comm)
        scattered = fccl.ops.reduce_scatter(gathered, comm)  # every rank gathered the same: nranks * x_rank
        broadcast = fccl.ops.broadcast(x, comm, root=root)
        in_place = x.clone()
        fccl.ops.all_reduce_(in_place, comm, op="max")
        return total, gathered, scattered, broadcast, in_place

    def with_methods(x, recv):
        in_place = x * 1
        comm.all_reduce(in_place)
        comm.all_gather(x, recv)
        block = torch.empty_like(x)
        comm.reduce_scatter(recv, block, op="sum")
        message = x.clone()
        comm.broadcast(message, root=root)
        return in_place, block, message

    def inputs_for(seed):
        flat = rank_inputs(torch, torch.float32, COMPILE_SHAPE[0] * COMPILE_SHAPE[1], nranks, seed)
        return [x.view(COMPILE_SHAPE) for x in flat]

    def check_ops(outputs, inputs):
        total, gathered, scattered, broadcast, in_place = [t.cpu() for t in outputs]
        problems = check_sum(torch, (total - 1) / 2, inputs, "float32")
        if not torch.equal(gathered, torch.cat(inputs)):
            problems.append(f"all_gather is not the ranks' inputs (shape {tuple(gathered.shape)})")
        if not torch.equal(scattered, inputs[rank] * nranks):
            problems.append(f"reduce_scatter is not {nranks} x this rank's input (shape {tuple(scattered.shape)})")
        if not torch.equal(broadcast, inputs[root]):
            problems.append("broadcast is not the root's input")
        if not torch.equal(in_place, torch.stack(inputs).max(0).values):
            problems.append("the in-place max is not the ranks' maximum")
        return problems

    def check_methods(outputs, inputs):
        in_place, block, message = [t.cpu() for t in outputs]
        problems = check_sum(torch, in_place, inputs, "float32")
        if not torch.equal(block, inputs[rank] * nranks):
            problems.append("reduce_scatter of the gathered inputs is not nranks x this rank's input")
        if not torch.equal(message, inputs[root]):
            problems.append("broadcast is not the root's input")
        return problems

    for name, function, extra, check in (("compile_ops", with_ops, (), check_ops),
                                         ("compile_methods", with_methods, (COMPILE_SHAPE[0] * nranks,),
                                          check_methods)):
        progress[0] = name
        problems, digests = [], []
        compiled = torch.compile(function, fullgraph=True)
        static_x = torch.empty(COMPILE_SHAPE, dtype=torch.float32, device="cuda")
        static_extra = [torch.empty((rows, COMPILE_SHAPE[1]), dtype=torch.float32, device="cuda") for rows in extra]
        for seed in (800, 801):
            inputs = inputs_for(seed)
            static_x.copy_(inputs[rank])
            outputs = compiled(static_x, *static_extra)
            torch.cuda.synchronize()
            problems += [f"eager seed {seed}: {p}" for p in check(outputs, inputs)]
            if name == "compile_ops":  # the all-reduce's result: the same bits on every rank
                digests.append(digest(torch, outputs[0]))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = compiled(static_x, *static_extra)
        torch.cuda.synchronize()
        for replay in range(3):
            inputs = inputs_for(900 + replay)
            static_x.copy_(inputs[rank])
            graph.replay()
            torch.cuda.synchronize()
            problems += [f"replay {replay}: {p}" for p in check(captured, inputs)]
        del graph
        torch.cuda.synchronize()
        report(name, problems, digests)


def add_rms_norm_scenario(torch, comm, rank, nranks):
    """all_reduce_add_rms_norm in bf16 (7 tokens; an odd hidden, which takes the kernel's general path, and 4096, its
    vector path): r' bit for bit all_reduce's sum plus the residual in fp32 rounded once, the output within bf16's
    rounding of float64 arithmetic on r', and the FP8 dynamic form within one E4M3 step, its scales max|y| / 448
    (docs/fused.md)."""
    problems, digests = [], []
    for hidden in (1031, 4096):
        found, sums = add_rms_norm_case(torch, comm, rank, nranks, hidden)
        problems += [f"hidden {hidden}: {p}" for p in found]
        digests += sums
    return problems, digests


def add_rms_norm_case(torch, comm, rank, nranks, hidden):
    """One hidden size of add_rms_norm_scenario."""
    problems, digests = [], []
    tokens, eps = 7, 1e-6
    inputs = rank_inputs(torch, torch.bfloat16, tokens * hidden, nranks, seed=400)
    residual0 = rank_inputs(torch, torch.bfloat16, tokens * hidden, 1, seed=401)[0].view(tokens, hidden)
    weight = (rank_inputs(torch, torch.float64, hidden, 1, seed=402)[0].abs() + 0.5).to(torch.bfloat16)
    x = inputs[rank].cuda().view(tokens, hidden)
    reduced = x.clone()
    comm.all_reduce(reduced)
    residual = residual0.cuda()
    out = torch.full_like(x, float("nan"))
    if comm.all_reduce_add_rms_norm(x, out, residual=residual, weight=weight.cuda(), eps=eps) is not out:
        problems.append("all_reduce_add_rms_norm did not return output")
    residual8 = residual0.cuda()
    out8 = torch.empty((tokens, hidden), dtype=torch.float8_e4m3fn, device="cuda")
    scales = torch.full((tokens,), float("nan"), dtype=torch.float32, device="cuda")
    comm.all_reduce_add_rms_norm(x, out8, residual=residual8, weight=weight.cuda(), eps=eps, scale=scales,
                                 scale_mode="dynamic")
    torch.cuda.synchronize()
    want = (residual0.float() + reduced.cpu().float()).to(torch.bfloat16)
    if not torch.equal(residual.cpu(), want) or not torch.equal(residual8.cpu(), want):
        problems.append("r' is not all_reduce's sum plus the residual rounded once")
    r = want.double()
    y = r * torch.rsqrt((r * r).mean(dim=1, keepdim=True) + eps) * weight.double()
    error = (out.cpu().double() - y).abs()
    if not bool((error <= y.abs() * (2.0 ** -8 + 1e-4) + 1e-30).all()):
        problems.append(f"output off by up to {float(error.max())}")
    want_scales = y.abs().amax(dim=1) / 448.0
    if not bool(((scales.cpu().double() - want_scales).abs() <= want_scales * 1e-4).all()):
        problems.append(f"scales {scales.cpu().tolist()}, want {want_scales.tolist()}")
    q = y / scales.cpu().double()[:, None]
    got = out8.cpu().float().double()
    # One E4M3 step at q: 2^(floor(log2 |q|) - 3), subnormals 2^-9, saturated at 448.
    step = torch.exp2(torch.floor(torch.log2(q.abs().clamp(min=2.0 ** -6))) - 3)
    if not bool(((got - q.clamp(-448, 448)).abs() <= 1.5 * step).all()):
        problems.append("FP8 output more than one step from y / scale")
    digests += [digest(torch, out), digest(torch, residual), digest(torch, out8), digest(torch, scales)]
    return problems, digests


def gpu_worker(me, store_path):
    """One rank: runs every scenario in order and reports each; stops at the first exception (the peers then fail on
    the communicator's timeout, which is short here)."""
    scenario = "start"
    rank, nranks, report = me.rank, me.nranks, me.report
    try:
        torch, device, shared = me.start_gpu(host_id="fccl-pytest")  # a host id each: NCCL then shares a GPU
        config = fccl.Config(timeout_ms=30000, comm_name=f"pytest-{rank}", allow_shared_device=shared)
        uid = me.unique_id()
        comm = fccl.Communicator.init_rank(nranks, rank, uid, config, device=f"cuda:{device}")  # device= on a GPU

        scenario = "properties"
        report(scenario, [f"{name} is {got}, want {want}" for name, got, want in
                          (("nranks", comm.nranks, nranks), ("rank", comm.rank, rank),
                           ("device", comm.device, device), ("async_error", comm.async_error(), fccl.Result.Success))
                          if got != want])

        for dtype_name in ("bfloat16", "float32"):
            dtype = getattr(torch, dtype_name)
            for in_place in (True, False):
                scenario = f"eager_{dtype_name}_{'in_place' if in_place else 'out_of_place'}"
                problems, digests = [], []
                for count in EAGER_COUNTS:
                    inputs = rank_inputs(torch, dtype, count, nranks, seed=count)
                    send = inputs[rank].cuda()
                    if in_place:
                        comm.all_reduce(send)
                        result = send
                    else:
                        recv = torch.full_like(send, float("nan"))  # unwritten elements show
                        returned = comm.all_reduce(send, recv, op="sum")
                        if returned is not recv:
                            problems.append("all_reduce did not return recv")
                        result = recv
                        if not torch.equal(send.cpu(), inputs[rank]):
                            problems.append(f"count {count}: send was modified")
                    torch.cuda.synchronize()
                    problems += [f"count {count}: {p}" for p in check_sum(torch, result, inputs, dtype_name)]
                    digests.append(digest(torch, result))
                report(scenario, problems, digests)

        scenario = "streams"
        problems = []
        side = torch.cuda.Stream()
        inputs = rank_inputs(torch, torch.float32, 4099, nranks, seed=7)
        x = inputs[rank].cuda()
        side.wait_stream(torch.cuda.current_stream())
        comm.all_reduce(x, stream=side)  # the torch.cuda.Stream object
        comm.all_reduce(x, op=fccl.RedOp.sum, stream=side.cuda_stream)  # the raw handle: 2 * n * input
        with torch.cuda.stream(side):
            comm.barrier()
        side.synchronize()
        problems += check_sum(torch, x / nranks, inputs, "float32")
        report(scenario, problems)

        scenario = "add_rms_norm"
        problems, digests = add_rms_norm_scenario(torch, comm, rank, nranks)
        report(scenario, problems, digests)

        progress = ["all_gather"]  # the scenario running, for the report of an exception
        try:
            collective_scenarios(torch, comm, rank, nranks, report, progress)
        finally:
            scenario = progress[0]

        scenario = "graph"
        problems = []
        count = GRAPH_BYTES // 2
        static_in = torch.empty(count, dtype=torch.bfloat16, device="cuda")
        static_out = torch.empty_like(static_in)
        static_in.copy_(rank_inputs(torch, torch.bfloat16, count, nranks, seed=1)[rank])
        comm.all_reduce(static_in, static_out)  # eager warm-up, as torch.cuda.graph recommends
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            comm.all_reduce(static_in, static_out)
        torch.cuda.synchronize()
        if comm.mem_stats()["commGraphRegistrations"] <= 0:
            problems.append(f"no graph registration while the graph lives: {comm.mem_stats()}")
        digests = []
        for replay in range(GRAPH_REPLAYS):
            inputs = rank_inputs(torch, torch.bfloat16, count, nranks, seed=100 + replay)
            static_in.copy_(inputs[rank])
            static_out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            problems += [f"replay {replay}: {p}" for p in check_sum(torch, static_out, inputs, "bfloat16")]
            digests.append(digest(torch, static_out))
        del graph
        torch.cuda.synchronize()
        # CUDA runs the graph's user-object destructor on a thread of its own, soon after the graph goes; the
        # communicator's next barrier (or all-reduce) then releases the registrations. Bounded polling.
        # The ranks leave the loop together (on the sum of what is left everywhere): a rank that stopped on its own
        # count while a peer went on would leave that peer's barrier waiting until the communicator's timeout.
        for _ in range(500):
            comm.barrier()
            torch.cuda.synchronize()
            left = comm.mem_stats()["commGraphRegistrations"]
            everywhere = torch.tensor([float(left)], device="cuda")
            comm.all_reduce(everywhere)
            torch.cuda.synchronize()
            if everywhere.item() == 0:
                break
            time.sleep(0.01)
        if left != 0:
            problems.append(f"{left} graph registrations left after the graph was destroyed")
        report(scenario, problems, digests)

        scenario = "register"
        problems = []
        count = (1 << 21) + 1
        inputs = rank_inputs(torch, torch.float32, count, nranks, seed=3)
        buffer = inputs[rank].cuda()
        registration = comm.register(buffer)
        if comm.mem_stats()["commRegistrations"] != 1:
            problems.append(f"commRegistrations {comm.mem_stats()['commRegistrations']} after register, want 1")
        comm.all_reduce(buffer)
        torch.cuda.synchronize()
        problems += check_sum(torch, buffer, inputs, "float32")
        registration.deregister()
        registration.deregister()  # the second time does nothing
        if comm.mem_stats()["commRegistrations"] != 0:
            problems.append(f"commRegistrations {comm.mem_stats()['commRegistrations']} after deregister")
        stats = comm.mem_stats()
        # fccl's own shared buffers: at least the chunk this communicator's slot lives in, and the peer's chunk mapped.
        if stats["arenaChunks"] < 1 or stats["arenaBytes"] < stats["commDeviceBytes"] or stats["commDeviceBytes"] == 0:
            problems.append(f"arena numbers inconsistent: {stats}")
        if stats["commPeerBytes"] == 0 or stats["commPeerBytes"] > stats["bytesMapped"]:
            problems.append(f"commPeerBytes {stats['commPeerBytes']} with {stats['bytesMapped']} bytes mapped")
        report(scenario, problems, [digest(torch, buffer)])

        progress[0] = "compile_ops"
        try:
            compile_scenarios(torch, comm, rank, nranks, report, progress)
        finally:
            scenario = progress[0]

        scenario = "destroy"
        comm.destroy()
        comm.destroy()
        report(scenario, [])

        scenario = "process_group"
        dist = importlib.import_module("torch.distributed")
        dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=nranks)
        problems = []
        with fccl.Communicator.from_process_group(config=config) as group_comm:
            if (group_comm.rank, group_comm.nranks) != (rank, nranks):
                problems.append(f"rank/nranks {group_comm.rank}/{group_comm.nranks}")
            inputs = rank_inputs(torch, torch.float32, 12345, nranks, seed=5)
            x = inputs[rank].cuda()
            group_comm.all_reduce(x)
            torch.cuda.synchronize()
            problems += check_sum(torch, x, inputs, "float32")
            digests = [digest(torch, x)]
        report(scenario, problems, digests)

        scenario = "from_nccl"
        problems, digests = nccl_scenario(torch, dist, rank, nranks, config)
        dist.destroy_process_group()
        report(scenario, problems, digests)
    except BaseException:  # reported, not raised: the parent owns the verdict
        report(scenario, ["raised:\n" + traceback.format_exc()])


SCENARIOS = ["properties", "eager_bfloat16_in_place", "eager_bfloat16_out_of_place", "eager_float32_in_place",
             "eager_float32_out_of_place", "streams", "add_rms_norm", "all_gather", "reduce_scatter", "broadcast",
             "collectives_graph", "graph", "register", "compile_ops", "compile_methods", "destroy", "process_group",
             "from_nccl"]


@unittest.skipUnless(torch_cuda_devices() >= 1, "needs torch with a CUDA device")
class TwoRankGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory() as store_dir:
            cls.spawned = spawn_ranks(gpu_worker, GPU_RANKS, SCENARIOS, GPU_TIMEOUT_S,
                                      (os.path.join(store_dir, "store"),))

    def check_scenario(self, scenario):
        self.spawned.check(self, scenario)

    def test_properties(self):
        self.check_scenario("properties")

    def test_eager_bfloat16_in_place(self):
        self.check_scenario("eager_bfloat16_in_place")

    def test_eager_bfloat16_out_of_place(self):
        self.check_scenario("eager_bfloat16_out_of_place")

    def test_eager_float32_in_place(self):
        self.check_scenario("eager_float32_in_place")

    def test_eager_float32_out_of_place(self):
        self.check_scenario("eager_float32_out_of_place")

    def test_streams(self):
        self.check_scenario("streams")

    def test_add_rms_norm(self):
        self.check_scenario("add_rms_norm")

    def test_all_gather(self):
        self.check_scenario("all_gather")

    def test_reduce_scatter(self):
        self.check_scenario("reduce_scatter")

    def test_broadcast(self):
        self.check_scenario("broadcast")

    def test_collectives_captured_in_a_graph(self):
        self.check_scenario("collectives_graph")

    def test_graph_replays_with_fresh_data(self):
        self.check_scenario("graph")

    def test_register_all_reduce_deregister(self):
        self.check_scenario("register")

    def test_custom_ops_under_torch_compile(self):
        self.check_scenario("compile_ops")

    def test_methods_under_torch_compile(self):
        self.check_scenario("compile_methods")

    def test_destroy(self):
        self.check_scenario("destroy")

    def test_from_process_group_gloo(self):
        self.check_scenario("process_group")

    def test_from_nccl(self):
        self.check_scenario("from_nccl")


if __name__ == "__main__":
    gpu_test_main()
