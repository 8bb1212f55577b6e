#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fccl's all_reduce_add_rms_norm on one rank against PyTorch's residual add + torch.nn.functional.rms_norm, the
pair a model runs without it, in CUDA graphs (docs/fused.md#against-pytorch).

One rank, so the all-reduce is the identity and both sides do the same local work: read the input and the residual,
write the residual and the output, read the weight. For each hidden size and token count, one eager call of each from
the same residual first: the residuals must agree bit for bit (both round input + residual once to the type) and the
outputs within a few roundings (rms_norm is torch's arithmetic); then --calls calls of each are captured into one CUDA
graph, replayed --warmup times and --iters times under CUDA events, and the time per call is printed with the memory
bandwidth it reached (bytes of the local part: 4 x tokens x hidden x the element size, plus the weight once, over the
time) and the speedup (torch / fccl). --csv appends the rows to a file. FCCL_FUSED_KERNEL in the environment picks the
fused call's kernel (docs/env.md).

  FCCL_LIBRARY=build/src/libfccl.so.0 PYTHONPATH=python python3 python/benchmarks/fused_norm_bench.py
  ... --hidden 4096 --tokens 1,64,512,1024,4096,8192 --csv out.csv

Exit status: 0 when every size agreed and ran, 1 when a result disagreed or a call failed, 2 for bad arguments, 77
without PyTorch or a CUDA device (what meson's test runner counts as skipped).
"""
import argparse
import os
import sys

DTYPES = ("bfloat16", "float16", "float32")


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", default="4096,8192", help="hidden sizes, comma separated (default 4096,8192)")
    parser.add_argument("--tokens", default="1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192",
                        help="token counts, comma separated (default 1..8192, doubling)")
    parser.add_argument("--dtype", default="bfloat16", choices=DTYPES, help="element type (default bfloat16)")
    parser.add_argument("--eps", type=float, default=1e-6, help="RMSNorm epsilon (default 1e-6)")
    parser.add_argument("--calls", type=int, default=20, help="calls captured per CUDA graph (default 20)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up replays (default 5)")
    parser.add_argument("--iters", type=int, default=20, help="timed replays (default 20)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    parser.add_argument("--csv", help="append every row to this CSV file")
    args = parser.parse_args(argv)
    try:
        args.hidden = [int(h) for h in args.hidden.split(",")]
        args.tokens = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        parser.error("--hidden and --tokens take integers, comma separated")
    if any(h < 1 for h in args.hidden) or any(t < 1 for t in args.tokens):
        parser.error("--hidden and --tokens must be positive")
    if args.calls < 1 or args.iters < 1 or args.warmup < 0 or args.eps < 0 or args.device < 0:
        parser.error("--calls and --iters must be >= 1, --warmup, --eps and --device >= 0")
    return args


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


def disagreement(torch, fused_out, torch_out, fused_res, torch_res, dtype):
    """None when the residuals are equal and the outputs within a few roundings of the type, else what differs."""
    if not torch.equal(fused_res, torch_res):
        return "the residuals differ"
    ulp = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10, torch.float32: 2.0 ** -20}[dtype]
    got, want = fused_out.double(), torch_out.double()
    error = (got - want).abs()
    bound = 4 * ulp * want.abs() + 1e-6
    if bool((error <= bound).all()):
        return None
    return f"outputs differ by up to {error.max().item():.3g}"


def main(argv):
    args = parse_arguments(argv)
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("SKIP: fused_norm_bench needs PyTorch with CUDA", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("SKIP: fused_norm_bench needs a CUDA device", file=sys.stderr)
        return 77
    import fccl

    torch.cuda.set_device(args.device)
    comm = fccl.Communicator.init_rank(1, 0, fccl.UniqueId.create(), fccl.Config(), device=f"cuda:{args.device}")
    dtype = getattr(torch, args.dtype)
    size = torch.empty((), dtype=dtype).element_size()
    stream = torch.cuda.Stream()
    csv = open(args.csv, "a") if args.csv else None
    if csv is not None and csv.tell() == 0:
        csv.write("hidden,tokens,fccl_us,fccl_GBps,torch_us,torch_GBps,agree\n")
    kernel = os.environ.get("FCCL_FUSED_KERNEL", "") or "row"
    print(f"# fused_norm_bench: one rank on {torch.cuda.get_device_name(args.device)}, {args.dtype}, fccl "
          f"all_reduce_add_rms_norm (kernel {kernel}) against torch's residual add_ + F.rms_norm, CUDA graphs of "
          f"{args.calls} calls, {args.iters} replays ({args.warmup} warm-up)")
    print("# GB/s: bytes of the local part (input read, residual read and written, output written, weight once) / time")
    print(f"{'hidden':>8} {'tokens':>8} {'fccl(us)':>10} {'GB/s':>8} {'torch(us)':>10} {'GB/s':>8} {'speedup':>8} "
          f"{'agree':>6}")
    failed = False
    try:
        for hidden in args.hidden:
            for tokens in args.tokens:
                generator = torch.Generator(device="cuda").manual_seed(1000 * hidden + tokens)
                x = (torch.randn(tokens, hidden, device="cuda", generator=generator) * 0.5).to(dtype)
                pristine = torch.randn(tokens, hidden, device="cuda", generator=generator).to(dtype)
                weight = (0.5 + torch.rand(hidden, device="cuda", generator=generator)).to(dtype)
                residual_fccl, residual_torch = pristine.clone(), pristine.clone()
                out_fccl = torch.empty_like(x)
                holder = {}

                def fused():
                    comm.all_reduce_add_rms_norm(x, out_fccl, residual=residual_fccl, weight=weight, eps=args.eps)

                def separate():
                    residual_torch.add_(x)
                    holder["out"] = F.rms_norm(residual_torch, (hidden,), weight=weight, eps=args.eps)

                # Made on the current stream; both paths run on stream, which must wait for them.
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    fused()
                    separate()
                stream.synchronize()
                problem = disagreement(torch, out_fccl, holder["out"], residual_fccl, residual_torch, dtype)
                if problem:
                    print(f"{tokens} x {hidden}: {problem}", file=sys.stderr)
                    failed = True
                fccl_us = time_graph(torch, fused, args.calls, args.warmup, args.iters, stream)
                torch_us = time_graph(torch, separate, args.calls, args.warmup, args.iters, stream)
                gb = (4.0 * tokens * hidden + hidden) * size / 1e3  # GB/s from microseconds
                print(f"{hidden:>8} {tokens:>8} {fccl_us:>10.2f} {gb / fccl_us:>8.0f} {torch_us:>10.2f} "
                      f"{gb / torch_us:>8.0f} {torch_us / fccl_us:>8.2f} {'NO' if problem else 'yes':>6}", flush=True)
                if csv is not None:
                    csv.write(f"{hidden},{tokens},{fccl_us:.3f},{gb / fccl_us:.1f},{torch_us:.3f},{gb / torch_us:.1f},"
                              f"{'no' if problem else 'yes'}\n")
                    csv.flush()
        if comm.async_error() != fccl.Result.Success:
            print(f"fccl async error {comm.async_error()!r}", file=sys.stderr)
            failed = True
    finally:
        comm.destroy()
        if csv is not None:
            csv.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
