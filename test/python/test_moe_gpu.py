#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Communicator.moe_dispatch / moe_combine and fccl.ops' MoE custom ops on GPUs, with PyTorch: two spawned ranks
(sharing the GPU when there is one) check, against a host reference computed from every rank's seeded routing:
the received rows per local expert (bits, weights, sources, counts, offsets) for bf16 and FP8 with scales, a rank
with no tokens, the combine against a float64 sum within bf16 rounding and bit for bit across two runs; the custom
ops under torch.compile(fullgraph=True) bit for bit the methods'; dispatch + combine captured in a CUDA graph and
replayed with new routing, bit for bit the eager calls'; more tokens than the layout's worst case is
FcclError(InvalidArgument).

Without torch or a CUDA device it exits 77, which meson counts as a skip.

  FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 test/python/test_moe_gpu.py [-v]
"""
import traceback
import unittest

import fccl
from support import gpu_test_main, spawn_ranks

RANKS = 2
TIMEOUT_S = 280  # the whole run, torch's start and compilation included; under meson's 300 s
EXPERTS_PER_RANK = 3
TOPK = 2
HIDDEN = 256
MAX_TOKENS = 48


def tokens_of(rank, call):
    """Rank's tokens in call: the worst case, fewer, or none (rank 1 of call 1)."""
    if rank == 1 and call == 1:
        return 0
    return MAX_TOKENS if (rank + call) % 2 == 0 else 29


def inputs(torch, rank, call, fp8=False, tokens=None):
    """Rank's x, topk_idx (distinct experts, about one entry in six -1), topk_weights and FP8 scales (or None) of
    call, on the host: every rank makes every rank's. tokens: tokens_of's unless given."""
    generator = torch.Generator().manual_seed(7919 * call + rank)
    tokens = tokens_of(rank, call) if tokens is None else tokens
    experts = EXPERTS_PER_RANK * RANKS
    idx = torch.full((tokens, TOPK), -1, dtype=torch.int64)
    for t in range(tokens):
        idx[t] = torch.randperm(experts, generator=generator)[:TOPK]
    idx[torch.rand((tokens, TOPK), generator=generator) < 0.16] = -1
    weights = torch.rand((tokens, TOPK), generator=generator, dtype=torch.float32) + 0.125
    values = torch.randn((tokens, HIDDEN), generator=generator)
    if not fp8:
        return values.to(torch.bfloat16), idx, weights, None
    scales = torch.rand((tokens, HIDDEN // 128), generator=generator, dtype=torch.float32) + 0.5
    return (values * 8).to(torch.float8_e4m3fn), idx, weights, scales


def expected_rows(everyone, rank):
    """For each local expert of rank, its rows: (source, token, entry), sources in rank order, tokens in order."""
    rows = []
    for e in range(EXPERTS_PER_RANK):
        expert = rank * EXPERTS_PER_RANK + e
        rows.append([(s, t, j) for s, (_, idx, _, _) in enumerate(everyone) for t in range(idx.shape[0])
                     for j in range(TOPK) if int(idx[t, j]) == expert])
    return rows


def bits(torch, tensor):
    tensor = tensor.detach().cpu().contiguous()
    return tensor.view(torch.uint8) if tensor.element_size() == 1 else tensor.view(torch.int16)


def check_dispatch(torch, result, everyone, rank, label):
    """Problems with a dispatch's result against the reference (packed rows, alignment 1)."""
    problems = []
    want = expected_rows(everyone, rank)
    result = type(result)(*[t.cpu() if t is not None else None for t in result])
    counts = result.expert_counts.tolist()
    offsets = result.expert_offsets.tolist()
    if counts != [len(rows) for rows in want]:
        return [f"{label}: counts {counts}, want {[len(rows) for rows in want]}"]
    start = 0
    for e, rows in enumerate(want):
        if offsets[e] != start:
            problems.append(f"{label}: expert {e} starts at {offsets[e]}, want {start}")
            return problems
        for n, (s, t, j) in enumerate(rows):
            x, _, weights, scales = everyone[s]
            row = start + n
            same = torch.equal(bits(torch, result.x[row]), bits(torch, x[t]))
            same = same and float(result.weights[row]) == float(weights[t, j])
            same = same and int(result.source_tokens[row]) == s * MAX_TOKENS + t
            if scales is not None:
                same = same and torch.equal(result.scales[row], scales[t])
            if not same:
                problems.append(f"{label}: row {row} (expert {e}) is not rank {s}'s token {t} (entry {j})")
                return problems
        start += len(rows)
    if offsets[EXPERTS_PER_RANK] != start:
        problems.append(f"{label}: the rows end at {offsets[EXPERTS_PER_RANK]}, want {start}")
    return problems


def check_combine(torch, out, mine, factor, label):
    """Problems with a combine of the experts' outputs factor x row: the float64 weighted sum, within bf16's
    rounding of an fp32 sum."""
    x, idx, weights, scales = mine
    values = x.to(torch.float32).to(torch.float64)
    reference = torch.zeros((x.shape[0], HIDDEN), dtype=torch.float64)
    for j in range(TOPK):
        valid = (idx[:, j] >= 0).to(torch.float64).unsqueeze(1)
        reference += valid * weights[:, j].to(torch.float64).unsqueeze(1) * values * factor
    got = out.cpu().to(torch.float64)
    if tuple(got.shape) != tuple(reference.shape):
        return [f"{label}: shape {tuple(got.shape)}, want {tuple(reference.shape)}"]
    error = (got - reference).abs() - (2.0 ** -7 * reference.abs() + 1e-6)
    if x.shape[0] and float(error.max()) > 0:
        where = int(error.argmax())
        return [f"{label}: element {where} is {float(got.view(-1)[where])}, reference "
                f"{float(reference.view(-1)[where])}"]
    return []


def scenarios(torch, comm, rank, problems):
    layout = comm.moe_layout(EXPERTS_PER_RANK * RANKS, TOPK, HIDDEN, MAX_TOKENS, name=f"moe-test-{rank}")
    if layout.recv_rows != RANKS * MAX_TOKENS * TOPK:
        problems.append(f"recv_rows {layout.recv_rows}, want {RANKS * MAX_TOKENS * TOPK}")

    # Eager: bf16 and FP8, a rank without tokens, the combine twice (the same bits).
    for call, fp8 in ((0, False), (1, False), (2, True)):
        everyone = [inputs(torch, r, call, fp8) for r in range(RANKS)]
        x, idx, weights, scales = everyone[rank]
        result = comm.moe_dispatch(layout, x.cuda(), idx.cuda(), weights.cuda(),
                                   scales.cuda() if scales is not None else None)
        torch.cuda.synchronize()
        problems += check_dispatch(torch, result, everyone, rank, f"call {call}")
        y = result.x.to(torch.bfloat16) if fp8 else result.x * 2
        first = comm.moe_combine(layout, y, weights.cuda())
        second = comm.moe_combine(layout, y, weights.cuda())
        torch.cuda.synchronize()
        problems += check_combine(torch, first, everyone[rank], 1 if fp8 else 2, f"call {call} combine")
        if not torch.equal(bits(torch, first), bits(torch, second)):
            problems.append(f"call {call}: two combines of the same rows differ")

    # The custom ops under torch.compile(fullgraph=True): the methods' bits.
    def layer(x, idx, weights):
        result = fccl.ops.moe_dispatch(x, layout, idx, weights)
        return fccl.ops.moe_combine(result.x * 2, layout, weights, expert_counts=result.expert_counts)

    compiled = torch.compile(layer, fullgraph=True)
    for call in (3, 4):
        x, idx, weights, _ = [t.cuda() if t is not None else None for t in inputs(torch, rank, call)]
        got = compiled(x, idx, weights)
        eager = comm.moe_combine(layout, comm.moe_dispatch(layout, x, idx, weights).x * 2, weights)
        torch.cuda.synchronize()
        if not torch.equal(bits(torch, got), bits(torch, eager)):
            problems.append(f"call {call}: the compiled ops' combine differs from the methods'")

    # A CUDA graph of dispatch + the experts + combine, replayed with new routing (every rank at its worst case).
    static = [t.cuda() for t in inputs(torch, rank, 9, tokens=MAX_TOKENS)[:3]]
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        with torch.cuda.graph(graph):
            captured = comm.moe_dispatch(layout, static[0], static[1], static[2])
            captured_out = comm.moe_combine(layout, captured.x * 2, static[2])
    torch.cuda.current_stream().wait_stream(side)
    for replay in range(4):
        fresh = inputs(torch, rank, 10 + replay, tokens=MAX_TOKENS)
        for target, source in zip(static, fresh[:3]):
            target.copy_(source)
        graph.replay()
        torch.cuda.synchronize()
        counts = captured.expert_counts.clone()
        out = captured_out.clone()
        eager = comm.moe_dispatch(layout, static[0], static[1], static[2])
        eager_out = comm.moe_combine(layout, eager.x * 2, static[2])
        torch.cuda.synchronize()
        if not torch.equal(counts, eager.expert_counts) or not torch.equal(bits(torch, out), bits(torch, eager_out)):
            problems.append(f"replay {replay}: the graph's dispatch or combine differs from the eager calls'")
    del graph

    # More tokens than the worst case: the library's documented error, nothing launched.
    x = torch.zeros((MAX_TOKENS + 1, HIDDEN), dtype=torch.bfloat16, device="cuda")
    idx = torch.zeros((MAX_TOKENS + 1, TOPK), dtype=torch.int32, device="cuda")
    try:
        comm.moe_dispatch(layout, x, idx)
        problems.append("a dispatch of more tokens than the worst case was not refused")
    except fccl.FcclError as error:
        if error.result != fccl.Result.InvalidArgument:
            problems.append(f"too many tokens raised {error.result}, want InvalidArgument")
    if comm.async_error() != fccl.Result.Success:
        problems.append(f"the communicator failed: {comm.async_error()}")
    layout.destroy()


def worker(me):
    problems = []
    try:
        # A rank may wait in a kernel while its peer compiles: a longer FCCL_TIMEOUT than the default.
        torch, _, shared = me.start_gpu(fccl_timeout_ms=120000)
        config = fccl.Config(timeout_ms=60000, allow_shared_device=shared)
        comm = fccl.Communicator.init_rank(RANKS, me.rank, me.unique_id(), config, name=f"moe-comm-{me.rank}")
        scenarios(torch, comm, me.rank, problems)
        comm.destroy()
    except BaseException:
        problems.append("raised:\n" + traceback.format_exc())
    me.report("dispatch_and_combine", problems)


class MoeGpuTest(unittest.TestCase):
    def test_dispatch_and_combine(self):
        spawned = spawn_ranks(worker, RANKS, ["dispatch_and_combine"], TIMEOUT_S)
        spawned.check(self, "dispatch_and_combine", same_digests=False)


if __name__ == "__main__":
    gpu_test_main()
