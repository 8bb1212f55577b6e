#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small mixture-of-experts layer on fccl's dispatch and combine (docs/moe.md#an-moe-layer-in-pytorch), checked
against the same layer computed on one rank in fp32.

The layer, with random weights that every rank draws from the same seed:
  router   p = softmax(x @ Wr) over num_experts = ranks x experts-per-rank experts; the top-k of p, renormalised to
           sum to 1, are each token's experts and weights (the logits in float64, so that the fccl path and the
           reference pick the same experts: a fp32 near-tie could go either way in a batch of another shape)
  expert e y_e = silu(x @ W1[e]) @ W2[e], a two-layer MLP (hidden -> ffn -> hidden) in bf16
  output   out[t] = sum over t's experts e of weight_e x y_e(x[t])
Rank r holds experts [r x L, (r + 1) x L) (L experts per rank) and its own tokens (a different count on odd ranks).
On fccl each rank routes its tokens, moe_dispatch sends every token to the ranks of its experts, each rank runs its
L experts' GEMMs on the rows it received (grouped by local expert, expert-major), and moe_combine sends the outputs
back and sums them per token, weighted by the router's weights. It runs twice:
  eager     a packed layout: one GEMM pair per local expert on its block of rows (expert_offsets read on the host,
            where a grouped GEMM would read them on the device)
  compiled  torch.compile(fullgraph=True) of the whole layer on a padded layout: every local expert's block has the
            same fixed rows, so the experts are one batched GEMM (torch.bmm) over [L, ranks x tokens, hidden] with
            no host synchronisation (rows past a block's count hold stale data; combine never reads them)

Every rank also computes the whole layer for every rank's tokens alone, in fp32 from the same bf16 inputs and
weights (exact in fp32), and compares its own rows. The fccl path rounds to bf16 three times where the reference
does not: the hidden activations h, the expert outputs y and the combined output (fccl sums in fp32 and rounds
once). A rounding is a relative error of at most 2^-8; y's error from h's roundings is a sum of ffn independent
terms, about 2^-8 / sqrt(3) x rms(y) (a random walk), so the bound per element is
  |fccl - reference| <= 2^-6 |reference| + 2^-5 rms(reference)
about 13 standard deviations of that walk on top of the two roundings of the element itself, while a token routed
to a wrong expert, a row that went to the wrong place or a missing weight is off by about rms(reference).

Ranks are spawned processes, one GPU each while there are enough; with fewer GPUs they share them
(Config.allow_shared_device). NCCL_NVLS_ENABLE=0. Every wait is bounded (--timeout).

  FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 python/examples/moe_layer.py
  ... --ranks 4 --tokens 256 --hidden 1024 --ffn 2048 --topk 2

Exit status: 0 when every rank's output matched the reference, 1 when one did not or a rank failed, 2 for bad
arguments, 77 without PyTorch or a CUDA device (what meson's test runner counts as skipped).
"""
import argparse
import multiprocessing
import os
import queue
import sys
import time
import traceback

SEED = 20260


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2, help="ranks, one process each (1..8, default 2)")
    parser.add_argument("--experts-per-rank", type=int, default=2, help="experts each rank holds (default 2)")
    parser.add_argument("--topk", type=int, default=2, help="experts per token (1..8, default 2)")
    parser.add_argument("--tokens", type=int, default=96,
                        help="tokens of the even ranks, the layout's worst case (odd ranks: 3/4 of it; default 96)")
    parser.add_argument("--hidden", type=int, default=256, help="model width, a multiple of 8 (default 256)")
    parser.add_argument("--ffn", type=int, default=512, help="the experts' inner width (default 512)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile(fullgraph=True) run")
    parser.add_argument("--timeout", type=float, default=500.0, help="seconds for the whole run (default 500)")
    args = parser.parse_args(argv)
    if not 1 <= args.ranks <= 8:
        parser.error("--ranks must be in 1..8")
    if args.experts_per_rank < 1 or not 1 <= args.topk <= min(8, args.ranks * args.experts_per_rank):
        parser.error("--experts-per-rank must be >= 1 and --topk in 1..min(8, the number of experts)")
    if args.tokens < 1 or args.hidden < 8 or args.hidden % 8 or args.ffn < 1 or args.timeout <= 0:
        parser.error("--tokens and --ffn must be >= 1, --hidden a multiple of 8, --timeout positive")
    return args


def tokens_of(args, rank):
    return args.tokens if rank % 2 == 0 else args.tokens * 3 // 4


def make_weights(torch, args, device):
    """Router (float64) and expert weights (bf16), the same on every rank: a seeded host generator."""
    generator = torch.Generator().manual_seed(SEED)
    experts = args.ranks * args.experts_per_rank
    router = torch.randn((args.hidden, experts), generator=generator, dtype=torch.float64) / args.hidden ** 0.5
    w1 = torch.randn((experts, args.hidden, args.ffn), generator=generator) / args.hidden ** 0.5
    w2 = torch.randn((experts, args.ffn, args.hidden), generator=generator) / args.ffn ** 0.5
    return router.to(device), w1.to(torch.bfloat16).to(device), w2.to(torch.bfloat16).to(device)


def make_input(torch, args, rank, device):
    generator = torch.Generator().manual_seed(SEED + 1 + rank)
    return torch.randn((tokens_of(args, rank), args.hidden), generator=generator).to(torch.bfloat16).to(device)


def route(torch, x, router, topk):
    """topk_idx (int64) and topk_weights (float32) of x's tokens: the top-k of softmax(x @ Wr), renormalised."""
    probabilities = torch.softmax(x.to(torch.float64) @ router, dim=-1)
    values, idx = torch.topk(probabilities, topk, dim=-1)
    return idx, (values / values.sum(dim=-1, keepdim=True)).to(torch.float32)


def reference_layer(torch, args, router, w1, w2, device):
    """The whole layer on this rank alone, for every rank's tokens, in fp32: a list of each rank's output."""
    xs = [make_input(torch, args, r, device) for r in range(args.ranks)]
    x = torch.cat(xs).to(torch.float32)
    idx, weights = route(torch, x, router, args.topk)
    out = torch.zeros_like(x)
    for e in range(w1.shape[0]):
        token, entry = (idx == e).nonzero(as_tuple=True)
        if token.numel():
            y = torch.nn.functional.silu(x[token] @ w1[e].to(torch.float32)) @ w2[e].to(torch.float32)
            out.index_add_(0, token, y * weights[token, entry].unsqueeze(1))
    return list(torch.split(out, [t.shape[0] for t in xs]))


def compare(torch, name, got, want):
    """(ok, line): got against want within the bound of the module's docstring."""
    got, want = got.to(torch.float64), want.to(torch.float64)
    rms = float(want.square().mean().sqrt()) if want.numel() else 0.0
    error = (got - want).abs()
    bound = 2.0 ** -6 * want.abs() + 2.0 ** -5 * rms
    ok = bool(torch.isfinite(got).all()) and bool((error <= bound).all())
    worst = float((error / (rms or 1.0)).max()) if want.numel() else 0.0
    return ok, f"{name}: max |fccl - fp32 reference| = {worst:.2e} x rms(reference) ({rms:.3g}), {'ok' if ok else 'WRONG'}"


def worker(rank, args, uid_queues, results):
    """One rank: ("line", text) for rank 0's report, ("problem", rank, text), ("done", rank, ok)."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # no multicast objects
    os.environ.setdefault("FCCL_TIMEOUT", str(int(args.timeout * 1000)))  # a peer may be compiling meanwhile
    ok = True
    try:
        import torch
        import torch.nn.functional as F

        import fccl

        # The tolerance above assumes fp32 GEMMs in fp32 and bf16 GEMMs that accumulate in fp32.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        gpus = torch.cuda.device_count()
        device = torch.device("cuda", rank % gpus)
        torch.cuda.set_device(device)
        config = fccl.Config(timeout_ms=int(args.timeout * 1000), allow_shared_device=gpus < args.ranks)
        if rank == 0:
            uid = fccl.UniqueId.create()
            for peer_queue in uid_queues[1:]:
                peer_queue.put(uid)
        else:
            uid = uid_queues[rank].get(timeout=args.timeout)
        comm = fccl.Communicator.init_rank(args.ranks, rank, uid, config, device=f"cuda:{device.index}")
        local = args.experts_per_rank
        experts = args.ranks * local
        router, w1, w2 = make_weights(torch, args, device)
        mine = slice(rank * local, (rank + 1) * local)
        w1_local, w2_local = w1[mine].contiguous(), w2[mine].contiguous()
        x = make_input(torch, args, rank, device)
        want = reference_layer(torch, args, router, w1, w2, device)[rank]
        if rank == 0:
            results.put(("line", f"# moe_layer: {args.ranks} ranks on {gpus} GPU(s), {experts} experts ({local} per "
                                 f"rank), top-{args.topk}, hidden {args.hidden}, ffn {args.ffn}, bf16, "
                                 f"{args.tokens} tokens per even rank, {tokens_of(args, 1)} per odd rank"))

        # Eager, packed layout: one GEMM pair per local expert on its block of received rows.
        packed = comm.moe_layout(experts, args.topk, args.hidden, args.tokens, name=f"moe-layer-packed-{rank}")
        idx, weights = route(torch, x, router, args.topk)
        received = comm.moe_dispatch(packed, x, idx, weights)
        y = torch.empty_like(received.x)
        offsets = received.expert_offsets.tolist()
        counts = received.expert_counts.tolist()
        for e in range(local):
            rows = slice(offsets[e], offsets[e] + counts[e])
            y[rows] = F.silu(received.x[rows] @ w1_local[e]) @ w2_local[e]
        out = comm.moe_combine(packed, y, weights)
        torch.cuda.synchronize()
        checks = [compare(torch, f"rank {rank} eager (packed layout, {sum(counts)} rows received)", out, want)]
        packed.destroy()

        # torch.compile(fullgraph=True), padded layout: the experts as one batched GEMM, no host synchronisation.
        if not args.no_compile:
            padded = comm.moe_layout(experts, args.topk, args.hidden, args.tokens, padded=True,
                                     name=f"moe-layer-padded-{rank}")
            block = args.ranks * args.tokens

            def layer(tokens):
                # route()'s arithmetic, written out so that the traced function holds no module passed as a value.
                probabilities = torch.softmax(tokens.to(torch.float64) @ router, dim=-1)
                values, topk_idx = torch.topk(probabilities, args.topk, dim=-1)
                topk_weights = (values / values.sum(dim=-1, keepdim=True)).to(torch.float32)
                result = fccl.ops.moe_dispatch(tokens, padded, topk_idx, topk_weights)
                rows = result.x.view(local, block, args.hidden)
                outputs = torch.bmm(F.silu(torch.bmm(rows, w1_local)), w2_local)
                return fccl.ops.moe_combine(outputs.view(local * block, args.hidden), padded, topk_weights,
                                            expert_counts=result.expert_counts)

            out = torch.compile(layer, fullgraph=True)(x)
            torch.cuda.synchronize()
            checks.append(compare(torch, f"rank {rank} torch.compile(fullgraph=True) (padded layout)", out, want))
            padded.destroy()
        for good, line in checks:
            results.put(("line", line) if good else ("problem", rank, line))
            ok = ok and good
        if comm.async_error() != fccl.Result.Success:
            results.put(("problem", rank, f"fccl async error {comm.async_error()!r}"))
            ok = False
        comm.destroy()
    except Exception:  # the parent reports it; the peers' waits are bounded
        results.put(("problem", rank, traceback.format_exc()))
        ok = False
    results.put(("done", rank, ok))


def main(argv):
    args = parse_arguments(argv)
    try:
        import torch  # checked here, used in the ranks
    except ImportError:
        print("SKIP: moe_layer needs PyTorch with CUDA", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():  # no CUDA initialised in this process: the ranks are spawned
        print("SKIP: moe_layer needs a CUDA device", file=sys.stderr)
        return 77
    context = multiprocessing.get_context("spawn")
    uid_queues = [context.Queue() for _ in range(args.ranks)]
    results = context.Queue()
    workers = [context.Process(target=worker, args=(rank, args, uid_queues, results)) for rank in range(args.ranks)]
    for process in workers:
        process.start()
    done = {}
    failed = False
    deadline = time.monotonic() + args.timeout
    while len(done) < args.ranks and time.monotonic() < deadline:
        try:
            message = results.get(timeout=1)
        except queue.Empty:
            if all(not p.is_alive() for p in workers) and results.empty():
                break
            continue
        if message[0] == "line":
            print(message[1], flush=True)
        elif message[0] == "problem":
            print(f"rank {message[1]}: {message[2]}", file=sys.stderr)
            failed = True
        elif message[0] == "done":
            done[message[1]] = message[2]
    for process in workers:
        process.join(timeout=max(1.0, deadline - time.monotonic()))
    for rank, process in enumerate(workers):
        if process.is_alive():
            print(f"moe_layer: rank {rank} did not finish within {args.timeout:g} s", file=sys.stderr)
            process.terminate()
            process.join(timeout=10)
            failed = True
        elif process.exitcode != 0 or not done.get(rank, False):
            failed = True
    return 1 if failed or len(done) < args.ranks else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
