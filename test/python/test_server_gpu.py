#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fccl.server's CustomAllReduce on GPUs with PyTorch, driven as an inference server drives its custom all-reduce.
Two ranks, new processes, one GPU each when there are two, else sharing one (Config.allow_shared_device), meet over a
gloo file store; each makes CustomAllReduce.from_process_group(name="tp-server"), which owns its communicator.

- eligibility: should_custom_ar against real tensors (types, sizes up to max_size and one element past it,
  non-contiguous, host, empty), and no call for a refused one;
- eager: custom_all_reduce of bf16, fp16 and fp32 at odd counts up to max_size, out of place, against the float64
  host reference, input unchanged, bit for bit equal on both ranks;
- fused: all_reduce_fused_add_rms_norm and its static and dynamic FP8 forms on 7 x 1031 bf16 and on a 3-D input:
  the residual updated in place bit for bit as the all-reduce's sum plus the residual rounded once, the output
  against float64 arithmetic, FP8 within one E4M3 step of y / scale, per-token scales shaped tokens x 1; refusals;
- graph: inside capture(), eager warm-up calls (real results) and a CUDA graph holding three custom all-reduces
  (6 KiB, 16 KiB, and 4 MiB, registered for the graph) and a fused call, replayed 5 times with fresh data; capture()'s
  end-of-capture check passes (both ranks captured 4 calls) and the graph registrations are counted;
- close: a second close does nothing, everything returns None afterwards, the owned communicator is gone; a
  CustomAllReduce over the caller's own communicator leaves it alive at close.

Without torch or a CUDA device it exits 77, which meson counts as a skip.

  FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_server_gpu.py [-v]
"""
import datetime
import os
import shutil
import tempfile
import unittest

import fccl
from support import (RankReport, check_reported, check_sum, digest, gpu_ranks_environment, gpu_test_main, rank_inputs,
                     run_ranks, torch_cuda_devices)

NAME = "tp-server"
RANKS = 2
MAX_SIZE = 8 << 20  # bytes, the default; the eager sizes reach it
TIMEOUT_S = 240
REPLAYS = 5
EPS = 1e-6


def run_rank(rank, workdir):
    import torch
    import torch.distributed as dist

    from fccl.server import CustomAllReduce

    device, shared = gpu_ranks_environment(rank, RANKS, torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(workdir, 'store')}", rank=rank,
                            world_size=RANKS, timeout=datetime.timedelta(seconds=120))
    config = fccl.Config(timeout_ms=30000, allow_shared_device=shared)
    report = RankReport(os.path.join(workdir, f"report-server-{rank}.json"))
    ar = CustomAllReduce.from_process_group(device=device, max_size=MAX_SIZE, name=NAME, config=config)

    def inputs(dtype, shape, seed):
        count = 1
        for extent in shape:
            count *= extent
        return [x.view(shape) for x in rank_inputs(torch, dtype, count, RANKS, seed)]

    def eligibility():
        problems = []
        if ar.disabled or (ar.world_size, ar.rank, ar.device.index) != (RANKS, rank, device):
            problems.append(f"{ar!r}: disabled {ar.disabled_reason}, world {ar.world_size}, rank {ar.rank}")
        cuda = f"cuda:{device}"
        taken = [torch.empty(1, dtype=torch.float32, device=cuda), torch.empty(3, 5, dtype=torch.float16, device=cuda),
                 torch.empty(MAX_SIZE // 2, dtype=torch.bfloat16, device=cuda)]
        refused = [torch.empty(MAX_SIZE // 2 + 1, dtype=torch.bfloat16, device=cuda),
                   torch.empty(64, dtype=torch.int32, device=cuda), torch.empty(64, dtype=torch.float64, device=cuda),
                   torch.empty(8, 16, dtype=torch.bfloat16, device=cuda).t(), torch.empty(64, dtype=torch.bfloat16),
                   torch.empty(0, dtype=torch.bfloat16, device=cuda)]
        for tensor in taken:
            if not ar.should_custom_ar(tensor):
                problems.append(f"refused {tensor.dtype} {tuple(tensor.shape)}")
        for tensor in refused:
            if ar.should_custom_ar(tensor) or ar.custom_all_reduce(tensor) is not None:
                problems.append(f"took {tensor.dtype} {tuple(tensor.shape)} on {tensor.device}, contiguous "
                                f"{tensor.is_contiguous()}")
        return problems

    def eager():
        problems, digests = [], []
        for dtype_name, counts in (("bfloat16", (1, 7, 1000, 65536 + 3, MAX_SIZE // 2)),
                                   ("float16", (5, 4099)), ("float32", (3, 12345, MAX_SIZE // 4))):
            dtype = getattr(torch, dtype_name)
            for count in counts:
                host = rank_inputs(torch, dtype, count, RANKS, seed=count)
                x = host[rank].cuda()
                out = ar.custom_all_reduce(x)
                torch.cuda.synchronize()
                if out is None or out is x or out.shape != x.shape or out.dtype != x.dtype:
                    problems.append(f"{dtype_name} {count}: custom_all_reduce gave {out!r:.80}")
                    continue
                problems += [f"{dtype_name} {count}: {p}" for p in check_sum(torch, out, host, dtype_name)]
                if not torch.equal(x.cpu(), host[rank]):
                    problems.append(f"{dtype_name} {count}: the input was modified")
                digests.append(digest(torch, out))
        return problems, digests

    def norm_reference(summed, residual0, weight):
        """(r', y): the residual plus the all-reduce's own sum rounded once, and the float64 RMSNorm of r'."""
        want = (residual0.float() + summed.float()).to(residual0.dtype)
        r = want.double()
        y = r * torch.rsqrt((r * r).mean(dim=-1, keepdim=True) + EPS) * weight.double()
        return want, y

    def check_fp8(output, y, scale):
        """Problems unless output is within one E4M3 step of y / scale (scale a float, or per token)."""
        q = y / scale
        got = output.cpu().float().double()
        step = torch.exp2(torch.floor(torch.log2(q.abs().clamp(min=2.0 ** -6))) - 3)  # subnormals: 2^-9
        if output.dtype != torch.float8_e4m3fn or not bool(((got - q.clamp(-448, 448)).abs() <= 1.5 * step).all()):
            return [f"FP8 output ({output.dtype}) more than one step from y / scale"]
        return []

    def fused_case(shape, seed):
        problems, digests = [], []
        hidden = shape[-1]
        x = inputs(torch.bfloat16, shape, seed)[rank].cuda()
        residual0 = inputs(torch.bfloat16, shape, seed + 1)[0]
        weight = (rank_inputs(torch, torch.float64, hidden, 1, seed + 2)[0].abs() + 0.5).to(torch.bfloat16).cuda()
        summed = ar.custom_all_reduce(x)  # the all-reduce's bits, which r' is built on
        x_before = x.clone()
        want, y = norm_reference(summed.cpu(), residual0, weight.cpu())
        tokens = x.numel() // hidden

        residual = residual0.cuda()
        output, returned = ar.all_reduce_fused_add_rms_norm(x, residual, weight, EPS)
        scale = torch.tensor([float(y.abs().max()) / 300.0], dtype=torch.float32, device=x.device)
        residual_static = residual0.cuda()
        output_static, _ = ar.all_reduce_fused_add_rms_norm_static_fp8_quant(x, residual_static, weight, scale, EPS)
        residual_dynamic = residual0.cuda()
        output_dynamic, scales, _ = ar.all_reduce_fused_add_rms_norm_dynamic_fp8_quant(x, residual_dynamic, weight,
                                                                                      EPS)
        torch.cuda.synchronize()
        if returned is not residual or output.shape != x.shape or output.dtype != x.dtype:
            problems.append("the fused call did not return (output shaped like input, the residual itself)")
        for label, updated in (("plain", residual), ("static", residual_static), ("dynamic", residual_dynamic)):
            if not torch.equal(updated.cpu(), want):
                problems.append(f"{label}: r' is not the all-reduce's sum plus the residual rounded once")
        error = (output.cpu().double() - y).abs()
        if not bool((error <= y.abs() * (2.0 ** -8 + 1e-4) + 1e-30).all()):
            problems.append(f"output off by up to {float(error.max())}")
        problems += [f"static: {p}" for p in check_fp8(output_static, y, float(scale))]
        if scales.shape != (tokens, 1) or scales.dtype != torch.float32:
            problems.append(f"dynamic scales shaped {tuple(scales.shape)} {scales.dtype}, want ({tokens}, 1) float32")
        else:
            want_scales = y.reshape(tokens, hidden).abs().amax(dim=1, keepdim=True) / 448.0
            if not bool(((scales.cpu().double() - want_scales).abs() <= want_scales * 1e-4).all()):
                problems.append("dynamic scales are not max|y| / 448 per token")
            per_token = scales.cpu().double().reshape(tuple(shape[:-1]) + (1,))
            problems += [f"dynamic: {p}" for p in check_fp8(output_dynamic, y, per_token)]
        if not torch.equal(x, x_before):
            problems.append("the input was modified")
        digests += [digest(torch, t) for t in (output, residual, output_static, output_dynamic, scales)]
        return problems, digests

    def fused():
        problems, digests = [], []
        for shape, seed in (((7, 1031), 400), ((2, 3, 1024), 410)):
            case_problems, case_digests = fused_case(shape, seed)
            problems += [f"{shape}: {p}" for p in case_problems]
            digests += case_digests
        cuda = f"cuda:{device}"
        x = torch.ones(4, 64, dtype=torch.bfloat16, device=cuda)
        weight = torch.ones(64, dtype=torch.bfloat16, device=cuda)
        wide = torch.ones(1, 32769, dtype=torch.bfloat16, device=cuda)  # a row past 64 KiB
        for label, arguments in (("short weight", (x, x.clone(), weight[:63])),
                                 ("residual of another type", (x, x.float(), weight)),
                                 ("row too wide", (wide, wide.clone(), torch.ones(32769, dtype=torch.bfloat16,
                                                                                  device=cuda))),
                                 ("non-contiguous", (x.t(), x.t().clone(), torch.ones(4, dtype=torch.bfloat16,
                                                                                     device=cuda)))):
            if ar.should_fuse_add_rms_norm(*arguments) or ar.all_reduce_fused_add_rms_norm(*arguments, EPS):
                problems.append(f"took {label}")
        return problems, digests

    def graph():
        problems, digests = [], []
        shapes = (((3, 1031), torch.bfloat16, "bfloat16"), ((4096,), torch.float32, "float32"),
                  ((2 << 20,), torch.bfloat16, "bfloat16"))  # 6 KiB, 16 KiB, 4 MiB
        statics = [inputs(dtype, shape, 600 + i)[rank].cuda() for i, (shape, dtype, _) in enumerate(shapes)]
        norm_x = inputs(torch.bfloat16, (5, 1031), 650)[rank].cuda()
        norm_residual = inputs(torch.bfloat16, (5, 1031), 651)[0].cuda()
        weight = (rank_inputs(torch, torch.float64, 1031, 1, 652)[0].abs() + 0.5).to(torch.bfloat16).cuda()
        registrations_before = ar.graph_registrations
        with ar.capture():
            warm = [ar.custom_all_reduce(x) for x in statics]  # eager between captures: real all-reduces
            torch.cuda.synchronize()
            for i, ((shape, dtype, dtype_name), out) in enumerate(zip(shapes, warm)):
                problems += [f"warm-up {shape}: {p}" for p in
                             check_sum(torch, out, inputs(dtype, shape, 600 + i), dtype_name)]
            cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cuda_graph):
                outs = [ar.custom_all_reduce(x) for x in statics]
                norm_out, _ = ar.all_reduce_fused_add_rms_norm(norm_x, norm_residual, weight, EPS)
        torch.cuda.synchronize()
        if ar.captured_calls != 4:
            problems.append(f"captured_calls {ar.captured_calls}, want 4")
        if ar.graph_registrations <= registrations_before:
            problems.append("the 4 MiB all-reduce was not registered for the graph")
        for replay in range(REPLAYS):
            fresh = [inputs(dtype, shape, 700 + 10 * replay + i) for i, (shape, dtype, _) in enumerate(shapes)]
            for x, host in zip(statics, fresh):
                x.copy_(host[rank])
            fresh_norm = inputs(torch.bfloat16, (5, 1031), 760 + replay)
            residual0 = inputs(torch.bfloat16, (5, 1031), 780 + replay)[0]
            norm_x.copy_(fresh_norm[rank])
            norm_residual.copy_(residual0)
            for out in outs:
                out.fill_(float("nan"))
            cuda_graph.replay()
            torch.cuda.synchronize()
            for (shape, _, dtype_name), out, host in zip(shapes, outs, fresh):
                problems += [f"replay {replay} {shape}: {p}" for p in check_sum(torch, out, host, dtype_name)]
                digests.append(digest(torch, out))
            summed = fresh_norm[0].float()
            for other in fresh_norm[1:]:  # fccl's sum: fp32, in rank order, rounded once
                summed = summed + other.float()
            summed = summed.to(torch.bfloat16)
            want, y = norm_reference(summed, residual0, weight.cpu())
            if not torch.equal(norm_residual.cpu(), want):
                problems.append(f"replay {replay}: the fused call's r' is not the sum plus the residual")
            error = (norm_out.cpu().double() - y).abs()
            if not bool((error <= y.abs() * (2.0 ** -8 + 1e-4) + 1e-30).all()):
                problems.append(f"replay {replay}: the fused output is off by up to {float(error.max())}")
            digests.append(digest(torch, norm_out))
        del cuda_graph
        torch.cuda.synchronize()
        return problems, digests

    def close():
        problems = []
        ar.close()
        ar.close()
        x = torch.ones(64, dtype=torch.bfloat16, device=f"cuda:{device}")
        if not ar.disabled or ar.should_custom_ar(x) or ar.custom_all_reduce(x) is not None:
            problems.append("the closed object still takes tensors")
        try:
            fccl.Communicator.by_name(NAME)
            problems.append("the owned communicator outlived close()")
        except fccl.FcclError:
            pass
        comm = fccl.Communicator.from_process_group(config=config, name="tp-caller")
        small = CustomAllReduce(comm, max_size=4096)
        if not small.should_custom_ar(torch.ones(2048, dtype=torch.bfloat16, device=x.device)):
            problems.append("max_size=4096 refused 4096 bytes")
        if small.should_custom_ar(torch.ones(2049, dtype=torch.bfloat16, device=x.device)):
            problems.append("max_size=4096 took 4098 bytes")
        small.close()
        if fccl.Communicator.by_name("tp-caller") is not comm:
            problems.append("close() destroyed the caller's communicator")
        comm.all_reduce(x)  # still usable
        torch.cuda.synchronize()
        if not torch.equal(x.cpu(), torch.full((64,), float(RANKS), dtype=torch.bfloat16)):
            problems.append("the caller's communicator no longer reduces")
        comm.destroy()
        return problems

    for name, function in (("eligibility", eligibility), ("eager", eager), ("fused", fused), ("graph", graph),
                           ("close", close)):
        report.run(name, function)
    ar.close()
    dist.destroy_process_group()


@unittest.skipUnless(torch_cuda_devices() >= 1, "needs torch with a CUDA device")
class CustomAllReduceGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="fccl-server-")
        cls.results = run_ranks(__file__, [], RANKS, cls.workdir, "server", TIMEOUT_S)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.workdir, ignore_errors=True)

    def test_eligibility(self):
        check_reported(self, self.results, "eligibility")

    def test_eager_out_of_place(self):
        check_reported(self, self.results, "eager")

    def test_fused_add_rms_norm_and_fp8(self):
        check_reported(self, self.results, "fused")

    def test_graph_capture(self):
        check_reported(self, self.results, "graph")

    def test_close(self):
        check_reported(self, self.results, "close")


if __name__ == "__main__":
    gpu_test_main(run_rank)
