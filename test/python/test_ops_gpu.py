#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fccl.ops by communicator name across processes and re-creations, on GPUs with PyTorch. Two ranks, one GPU each
when there are two, else sharing one (Config.allow_shared_device), meet over a gloo file store and make their
communicator with Communicator.from_process_group(name="tp"). Each phase is a pair of new processes:

save  - torch._inductor.standalone_compile of the Dynamo graph of `layer` (every fccl.ops collective, by name),
        saved to a file (CompiledArtifact.save), as vLLM's compile cache keeps its graphs; then torch.compile of
        `layer`, which fills inductor's FX graph and AOTAutograd caches under TORCHINDUCTOR_CACHE_DIR. Both run here
        against the float64 host reference.
load  - with a new communicator of the same name: torch.compile of `layer` must be served by those caches (a cache
        hit) and give the reference; the saved artifact, loaded with CompiledArtifact.load (no tracing at all), too.
        Then the communicator is destroyed: both compiled forms, and fccl.ops called eagerly, raise FcclError naming
        "tp". Created again under "tp", both work again. Last, CUDA graphs: the compiled function and the artifact
        captured (a 4 MiB all-reduce among the calls, registered for the graph) and replayed with fresh data; the
        communicator destroyed while that graph lives (never replayed after: it holds the old communicator's
        memory), created again, the same compiled function and artifact captured in a new graph and replayed.

Without torch or a CUDA device it exits 77, which meson counts as a skip. Every wait is bounded (fccl's timeouts,
the store's, each phase's deadline).

  FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_ops_gpu.py [-v]
"""
import datetime
import importlib
import os
import shutil
import tempfile
import unittest

import fccl
from support import (RankReport, check_reported, check_sum, gpu_ranks_environment, gpu_test_main, rank_inputs,
                     run_ranks, torch_cuda_devices)

NAME = "tp"
RANKS = 2
ROOT = RANKS - 1
SHAPE = (8, 129)  # two dimensions: the ops gather and scatter along dimension 0
BIG = (2 << 20) + 3  # bf16 elements, 4 MiB: above the size where a captured all-reduce registers its buffers
PHASE_TIMEOUT_S = 270  # per phase, torch's start and compilation included; two phases under meson's 600 s


def layer(x, y):
    """What is compiled: every fccl.ops collective, naming the communicator (a string in the graph)."""
    total = fccl.ops.all_reduce(x * 2, NAME) + 1
    gathered = fccl.ops.all_gather(x, NAME)
    scattered = fccl.ops.reduce_scatter(gathered, NAME)  # every rank gathered the same: nranks x this rank's x
    broadcast = fccl.ops.broadcast(x, NAME, root=ROOT)
    big = fccl.ops.all_reduce(y, NAME)
    return total, gathered, scattered, broadcast, big


def layer_inputs(torch, seed):
    """Every rank's (x, y) on the host, the same on every rank."""
    xs = [x.view(SHAPE) for x in rank_inputs(torch, torch.float32, SHAPE[0] * SHAPE[1], RANKS, seed)]
    ys = rank_inputs(torch, torch.bfloat16, BIG, RANKS, seed + 500)
    return xs, ys


def check_layer(torch, outputs, xs, ys, rank):
    """Problems with layer's outputs against the host reference of every rank's inputs."""
    outputs = list(outputs)
    if len(outputs) != 5:
        return [f"{len(outputs)} outputs, 5 expected"]
    total, gathered, scattered, broadcast, big = [t.detach().cpu() for t in outputs]
    problems = [f"all_reduce: {p}" for p in check_sum(torch, (total - 1) / 2, xs, "float32")]
    if not torch.equal(gathered, torch.cat(xs)):
        problems.append(f"all_gather is not the ranks' inputs (shape {tuple(gathered.shape)})")
    if not torch.equal(scattered, xs[rank] * RANKS):
        problems.append(f"reduce_scatter is not {RANKS} x this rank's input (shape {tuple(scattered.shape)})")
    if not torch.equal(broadcast, xs[ROOT]):
        problems.append("broadcast is not the root's input")
    problems += [f"4 MiB all_reduce: {p}" for p in check_sum(torch, big, ys, "bfloat16")]
    return problems


def artifact_path(workdir, rank):
    return os.path.join(workdir, f"layer-rank{rank}.bin")


def run_rank(phase, rank, workdir):
    import torch
    import torch._dynamo
    import torch._inductor
    import torch.distributed as dist
    from torch._dynamo.utils import counters

    importlib.import_module("fccl.ops")  # the custom ops; layer calls them through the package

    device, shared = gpu_ranks_environment(rank, RANKS, torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(workdir, 'store-' + phase)}", rank=rank,
                            world_size=RANKS, timeout=datetime.timedelta(seconds=120))
    config = fccl.Config(timeout_ms=30000, allow_shared_device=shared)
    me = RankReport(os.path.join(workdir, f"report-{phase}-{rank}.json"))
    comms = [fccl.Communicator.from_process_group(config=config, name=NAME)]

    def on_device(xs, ys):
        return xs[rank].cuda(), ys[rank].cuda()

    def run_and_check(function, seed):
        xs, ys = layer_inputs(torch, seed)
        outputs = function(*on_device(xs, ys))
        torch.cuda.synchronize()
        return check_layer(torch, outputs, xs, ys, rank)

    if phase == "save":
        def save_artifact():
            captured = []

            def capture_backend(gm, example_inputs):
                captured.append((gm, list(example_inputs)))
                return gm  # runs the graph as it is: the real collectives, once

            problems = run_and_check(torch.compile(layer, fullgraph=True, backend=capture_backend), 10)
            gm, example_inputs = captured[0]
            artifact = torch._inductor.standalone_compile(gm, example_inputs)
            problems += [f"standalone_compile here: {p}" for p in run_and_check(artifact, 11)]
            artifact.save(path=artifact_path(workdir, rank), format="binary")
            torch._dynamo.reset()
            return problems

        def fill_the_caches():
            problems = run_and_check(torch.compile(layer, fullgraph=True), 12)
            # A miss stores the graph; a hit means standalone_compile stored it already. Either way it is on disk.
            consulted = sum(counters[kind][f"{cache}_{outcome}"] for kind, cache in
                            (("inductor", "fxgraph_cache"), ("aot_autograd", "autograd_cache"))
                            for outcome in ("hit", "miss"))
            if consulted == 0:
                problems.append(f"the on-disk caches were bypassed: {dict(counters['inductor'])}, "
                                f"{dict(counters['aot_autograd'])}")
            return problems

        me.run("save_artifact", save_artifact)
        me.run("save_compiled", fill_the_caches)
    else:
        compiled = torch.compile(layer, fullgraph=True)
        loaded = []

        def cache_hit():
            problems = run_and_check(compiled, 20)
            hits = counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]
            if hits == 0:
                problems.append(f"torch.compile was not served by the on-disk caches: {dict(counters['inductor'])}, "
                                f"{dict(counters['aot_autograd'])}")
            return problems

        def artifact_load():
            loaded.append(torch._inductor.CompiledArtifact.load(path=artifact_path(workdir, rank), format="binary"))
            return run_and_check(loaded[0], 21)

        def missing_name():
            comms.pop().destroy()
            xs, ys = layer_inputs(torch, 22)
            x, y = on_device(xs, ys)
            problems = []
            for what, call in (("compiled", lambda: compiled(x, y)), ("artifact", lambda: loaded[0](x, y)),
                               ("eager fccl.ops", lambda: fccl.ops.all_reduce(x, NAME))):
                try:
                    call()
                    problems.append(f"{what}: ran with no communicator named {NAME!r}")
                except fccl.FcclError as error:
                    if error.result != fccl.Result.InvalidUsage or repr(NAME) not in str(error):
                        problems.append(f"{what}: {error!r} does not name the missing communicator")
                except Exception as error:  # anything else is a wrong answer too, with its type shown
                    problems.append(f"{what}: {type(error).__name__}, not FcclError: {error}")
            torch.cuda.synchronize()  # nothing was left broken on the device
            return problems

        def recreated():
            comms.append(fccl.Communicator.from_process_group(config=config, name=NAME))
            return ([f"compiled: {p}" for p in run_and_check(compiled, 23)]
                    + [f"artifact: {p}" for p in run_and_check(loaded[0], 24)])

        def graphs_across_recreation():
            xs, ys = layer_inputs(torch, 30)
            static_x, static_y = on_device(xs, ys)
            problems = []

            def capture_and_replay(label, seeds):
                for function in (compiled, loaded[0]):  # eager first, as torch.cuda.graph recommends
                    function(static_x, static_y)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    outputs = [compiled(static_x, static_y), loaded[0](static_x, static_y)]
                torch.cuda.synchronize()
                for seed in seeds:
                    fresh_xs, fresh_ys = layer_inputs(torch, seed)
                    static_x.copy_(fresh_xs[rank])
                    static_y.copy_(fresh_ys[rank])
                    graph.replay()
                    torch.cuda.synchronize()
                    for what, result in zip(("compiled", "artifact"), outputs):
                        problems.extend(f"{label} replay {seed} {what}: {p}"
                                        for p in check_layer(torch, result, fresh_xs, fresh_ys, rank))
                return graph

            graphs = [capture_and_replay("first communicator", (31, 32))]
            if comms[0].mem_stats()["commGraphRegistrations"] <= 0:
                problems.append("the 4 MiB all-reduce captured no graph registration")
            comms.pop().destroy()  # while the first graph lives: it must never be replayed from here on
            comms.append(fccl.Communicator.from_process_group(config=config, name=NAME))
            graphs.append(capture_and_replay("second communicator", (33, 34)))
            graphs.clear()  # the first graph is destroyed after its communicator, which fccl allows
            torch.cuda.synchronize()
            return problems

        for name, function in (("cache_hit", cache_hit), ("artifact_load", artifact_load),
                               ("missing_name", missing_name), ("recreated", recreated),
                               ("graphs_across_recreation", graphs_across_recreation)):
            if not me.run(name, function) and name == "recreated":
                break  # what follows needs a communicator
    for comm in comms:
        comm.destroy()
    dist.destroy_process_group()


@unittest.skipUnless(torch_cuda_devices() >= 1, "needs torch with a CUDA device")
class OpsAcrossProcessesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="fccl-ops-")
        cls.results = {}

        def caches(rank):  # each rank its own, as vLLM keeps one per rank
            return {"TORCHINDUCTOR_CACHE_DIR": os.path.join(cls.workdir, f"inductor-rank{rank}"),
                    "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
                    "TORCHINDUCTOR_COMPILE_THREADS": "1"}

        for phase in ("save", "load"):  # each phase a new pair of processes
            cls.results[phase] = run_ranks(__file__, ["--phase", phase], RANKS, cls.workdir, phase, PHASE_TIMEOUT_S,
                                           caches)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.workdir, ignore_errors=True)

    def check(self, phase, scenario):
        check_reported(self, self.results[phase], scenario, same_digests=False)

    def test_save_standalone_artifact(self):
        self.check("save", "save_artifact")

    def test_save_compiled_into_the_caches(self):
        self.check("save", "save_compiled")

    def test_new_process_served_by_the_caches(self):
        self.check("load", "cache_hit")

    def test_new_process_runs_the_saved_artifact(self):
        self.check("load", "artifact_load")

    def test_missing_communicator_is_an_error_naming_it(self):
        self.check("load", "missing_name")

    def test_recreated_under_the_same_name(self):
        self.check("load", "recreated")

    def test_graphs_captured_again_after_recreation(self):
        self.check("load", "graphs_across_recreation")


if __name__ == "__main__":
    gpu_test_main(run_rank, phases=("save", "load"))
