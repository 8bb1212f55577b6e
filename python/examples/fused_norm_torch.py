#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fccl's all_reduce_add_rms_norm against torch.distributed's all_reduce (NCCL) + the residual add +
torch.nn.functional.rms_norm, on the same tensors, in CUDA graphs (docs/fused.md#against-pytorch).

For each hidden size and token count every rank holds its own input (random, bf16 by default) and the same residual
and weight. One eager call of each path from the same residual first: the results must agree within the type's
rounding (the all-reduce orders differ: NCCL's is not fccl's rank order), and the residuals too. Then --calls calls
of each path are captured into one CUDA graph, replayed --warmup times and --iters times under CUDA events, and the
time per call is printed with the speedup (torch / fccl).

Ranks are spawned processes, one GPU each while there are enough GPUs. With fewer GPUs than ranks they share them:
fccl then needs Config.allow_shared_device, and NCCL takes two ranks on one GPU only from processes that claim hosts
of their own (NCCL_HOSTID per process), so it talks over sockets and its times say nothing of NVLink; the output says
when this is so. NCCL_NVLS_ENABLE=0 always (no multicast objects). Every wait is bounded (--timeout).

  FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 python/examples/fused_norm_torch.py
  ... --ranks 2 --hidden 4096 --tokens 1,64,1024,8192 --form twoshot

Exit status: 0 when every size agreed and ran, 1 when a result disagreed or a rank failed, 2 for bad arguments,
77 without PyTorch or a CUDA device (what meson's test runner counts as skipped).
"""
import argparse
import multiprocessing
import os
import queue
import sys
import tempfile
import time
import traceback

FORMS = ("auto", "oneshot", "twoshot")  # FCCL_FUSED_ALGO (docs/env.md)
DTYPES = ("bfloat16", "float16", "float32")


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2, help="ranks, one process each (default 2)")
    parser.add_argument("--hidden", default="4096,8192", help="hidden sizes, comma separated (default 4096,8192)")
    parser.add_argument("--tokens", default="1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192",
                        help="token counts, comma separated (default 1..8192, doubling)")
    parser.add_argument("--dtype", default="bfloat16", choices=DTYPES, help="element type (default bfloat16)")
    parser.add_argument("--form", default="auto", choices=FORMS,
                        help="the fused call's form, FCCL_FUSED_ALGO (default auto)")
    parser.add_argument("--eps", type=float, default=1e-6, help="RMSNorm epsilon (default 1e-6)")
    parser.add_argument("--calls", type=int, default=20, help="calls captured per CUDA graph (default 20)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up replays (default 5)")
    parser.add_argument("--iters", type=int, default=20, help="timed replays (default 20)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole run (default 900)")
    args = parser.parse_args(argv)
    try:
        args.hidden = [int(h) for h in args.hidden.split(",")]
        args.tokens = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        parser.error("--hidden and --tokens take integers, comma separated")
    if not 1 <= args.ranks <= 8:
        parser.error("--ranks must be in 1..8")
    if any(h < 1 for h in args.hidden) or any(t < 1 for t in args.tokens):
        parser.error("--hidden and --tokens must be positive")
    if args.calls < 1 or args.iters < 1 or args.warmup < 0 or args.timeout <= 0 or args.eps < 0:
        parser.error("--calls and --iters must be >= 1, --warmup >= 0, --timeout and --eps positive")
    return args


def tolerance(torch, dtype):
    """Relative and absolute tolerance between the two paths' results: a few roundings of the type, since NCCL adds
    the ranks in another order than fccl (a sum's last bit, which the residual add can expose in absolute terms) and
    rms_norm's arithmetic is torch's own (fp32: the sum of squares in another order)."""
    if dtype == torch.float32:
        return 2.0 ** -16, 2.0 ** -16
    ulp = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}[dtype]
    return 4 * ulp, 16 * ulp


def compare(torch, name, got, want, dtype):
    """None when got and want agree within tolerance, else a line saying where they differ most."""
    rtol, atol = tolerance(torch, dtype)
    g, w = got.double(), want.double()
    if not torch.isfinite(g).all() or not torch.isfinite(w).all():
        return f"{name}: non-finite values"
    error = (g - w).abs()
    bound = atol + rtol * w.abs()
    if bool((error <= bound).all()):
        return None
    worst = int(torch.argmax(error - bound))
    return (f"{name}: element {worst}: fccl {g.flatten()[worst].item():.6g}, torch {w.flatten()[worst].item():.6g} "
            f"(max |difference| {error.max().item():.3g}, tolerance {atol:.3g} + {rtol:.3g} |x|)")


def time_graph(torch, run, calls, warmup, iters, stream):
    """Microseconds per call of run() captured `calls` times into one CUDA graph, replayed."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                run()
        for _ in range(warmup):
            graph.replay()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        stream.synchronize()
        start.record(stream)
        for _ in range(iters):
            graph.replay()
        stop.record(stream)
        stop.synchronize()
    elapsed_ms = start.elapsed_time(stop)
    del graph
    return elapsed_ms * 1000.0 / (iters * calls)


def worker(rank, args, uid_queues, results, store_path):
    """One rank: reports ("row", ...) per size from rank 0, ("problem", rank, text) for each disagreement and
    ("done", rank, ok) at the end."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # no multicast objects
    os.environ["FCCL_FUSED_ALGO"] = args.form  # fccl reads it once, at its first call
    os.environ.setdefault("FCCL_TIMEOUT", str(int(args.timeout * 1000)))  # a kernel gives up before the parent does
    ok = True
    try:
        import torch
        import torch.distributed as dist
        import torch.nn.functional as F

        import fccl

        gpus = torch.cuda.device_count()
        shared = gpus < args.ranks
        if shared:
            # NCCL takes ranks of one GPU only from processes that claim hosts of their own; they meet over sockets.
            os.environ["NCCL_HOSTID"] = f"fccl-fused-norm-{rank}"
            os.environ.setdefault("NCCL_NET", "Socket")
        device = rank % gpus
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", init_method=f"file://{store_path}", rank=rank, world_size=args.ranks,
                                device_id=torch.device("cuda", device))
        config = fccl.Config(timeout_ms=int(args.timeout * 1000), allow_shared_device=shared)
        if rank == 0:
            uid = fccl.UniqueId.create()
            for peer_queue in uid_queues[1:]:
                peer_queue.put(uid)
        else:
            uid = uid_queues[rank].get(timeout=args.timeout)
        comm = fccl.Communicator.init_rank(args.ranks, rank, uid, config, device=f"cuda:{device}")
        if rank == 0:
            results.put(("header", gpus, shared, str(comm.path)))
        dtype = getattr(torch, args.dtype)
        stream = torch.cuda.Stream()
        for hidden in args.hidden:
            for tokens in args.tokens:
                # Inputs differ per rank; residual and weight are the same on every rank.
                generator = torch.Generator(device="cuda").manual_seed(1000 * hidden + tokens + 7919 * rank)
                shared_generator = torch.Generator(device="cuda").manual_seed(1000 * hidden + tokens)
                x = (torch.randn(tokens, hidden, device="cuda", generator=generator) * 0.5).to(dtype)
                pristine = torch.randn(tokens, hidden, device="cuda", generator=shared_generator).to(dtype)
                weight = (0.5 + torch.rand(hidden, device="cuda", generator=shared_generator)).to(dtype)
                residual_fccl, residual_torch = pristine.clone(), pristine.clone()
                out_fccl = torch.empty_like(x)
                reduced = torch.empty_like(x)
                holder = {}

                def fused():
                    comm.all_reduce_add_rms_norm(x, out_fccl, residual=residual_fccl, weight=weight, eps=args.eps)

                def separate():
                    reduced.copy_(x)
                    dist.all_reduce(reduced)
                    residual_torch.add_(reduced)
                    holder["out"] = F.rms_norm(residual_torch, (hidden,), weight=weight, eps=args.eps)

                # The inputs were made on the current stream; both paths run on stream, which must wait for them
                # (torch's side streams do not wait for the default stream on their own).
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    fused()
                    separate()
                stream.synchronize()
                problems = [p for p in (compare(torch, f"{tokens} x {hidden} residual", residual_fccl,
                                                residual_torch, dtype),
                                        compare(torch, f"{tokens} x {hidden} output", out_fccl, holder["out"], dtype))
                            if p]
                for problem in problems:
                    results.put(("problem", rank, problem))
                ok = ok and not problems
                fused_us = time_graph(torch, fused, args.calls, args.warmup, args.iters, stream)
                torch_us = time_graph(torch, separate, args.calls, args.warmup, args.iters, stream)
                if rank == 0:
                    results.put(("row", hidden, tokens, fused_us, torch_us, not problems))
        if comm.async_error() != fccl.Result.Success:
            results.put(("problem", rank, f"fccl async error {comm.async_error()!r}"))
            ok = False
        comm.destroy()
        dist.destroy_process_group()
    except Exception:  # the parent reports it; the peers' waits are bounded
        results.put(("problem", rank, traceback.format_exc()))
        ok = False
    results.put(("done", rank, ok))


def main(argv):
    args = parse_arguments(argv)
    try:
        import torch  # checked here, used in the ranks
    except ImportError:
        print("SKIP: fused_norm_torch needs PyTorch with CUDA", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():  # no CUDA initialised in this process: the ranks are spawned
        print("SKIP: fused_norm_torch needs a CUDA device", file=sys.stderr)
        return 77
    context = multiprocessing.get_context("spawn")
    uid_queues = [context.Queue() for _ in range(args.ranks)]
    results = context.Queue()
    done = {}
    failed = False
    with tempfile.TemporaryDirectory() as store_dir:
        workers = [context.Process(target=worker, args=(rank, args, uid_queues, results,
                                                        os.path.join(store_dir, "store")))
                   for rank in range(args.ranks)]
        for process in workers:
            process.start()
        deadline = time.monotonic() + args.timeout
        while len(done) < args.ranks and time.monotonic() < deadline:
            try:
                message = results.get(timeout=1)
            except queue.Empty:
                if all(not p.is_alive() for p in workers) and results.empty():
                    break
                continue
            kind = message[0]
            if kind == "header":
                _, gpus, shared, path = message
                print(f"# fused_norm_torch: {args.ranks} ranks on {gpus} GPUs, {args.dtype}, form {args.form} "
                      f"(FCCL_FUSED_ALGO), fccl path {path}, CUDA graphs of {args.calls} calls, {args.iters} "
                      f"replays ({args.warmup} warm-up)")
                if shared:
                    print(f"# the ranks share {gpus} GPU(s): fccl with allow_shared_device, NCCL with an NCCL_HOSTID "
                          "per process (so over sockets): the times do not measure NVLink")
                print("# torch: torch.distributed.all_reduce (NCCL) + residual add_ + torch.nn.functional.rms_norm")
                print(f"{'hidden':>8} {'tokens':>8} {'fccl(us)':>12} {'torch(us)':>12} {'speedup':>8} {'agree':>6}")
            elif kind == "row":
                _, hidden, tokens, fused_us, torch_us, agree = message
                print(f"{hidden:>8} {tokens:>8} {fused_us:>12.2f} {torch_us:>12.2f} {torch_us / fused_us:>8.2f} "
                      f"{'yes' if agree else 'NO':>6}", flush=True)
            elif kind == "problem":
                print(f"rank {message[1]}: {message[2]}", file=sys.stderr)
                failed = True
            elif kind == "done":
                done[message[1]] = message[2]
        for process in workers:
            process.join(timeout=max(1.0, deadline - time.monotonic()))
        for rank, process in enumerate(workers):
            if process.is_alive():
                print(f"fused_norm_torch: rank {rank} did not finish within {args.timeout:g} s", file=sys.stderr)
                process.terminate()
                process.join(timeout=10)
                failed = True
            elif process.exitcode != 0 or not done.get(rank, False):
                failed = True
    if len(done) < args.ranks:
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
