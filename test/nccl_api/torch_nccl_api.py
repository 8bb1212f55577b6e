#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch's nccl backend with libfccl-nccl preloaded (LD_PRELOAD), ranks as processes sharing GPU 0 when there
are fewer GPUs than ranks (each its own NCCL_HOSTID, loopback sockets).

  basic        all_reduce (sum, avg, max; fp32, bf16, fp16, int32), all_gather_into_tensor, reduce_scatter_tensor,
               broadcast, barrier, new_group (a split) and a subgroup, send/recv, an all_reduce captured in a CUDA
               graph and replayed, all_reduce and reduce_scatter_tensor with ReduceOp.PREMUL_SUM
               (dist._make_nccl_premul_sum: a float factor, read on the host, and a tensor factor in device memory),
               a group whose NCCL config caps the CTAs (ProcessGroupNCCL.Options().config.max_ctas) all-reducing;
               results against a float64 host reference of every rank's input; ncclGetVersion through the library
               equal to torch's NCCL version; the library's count shows fccl carried the four collectives, the
               pre-multiplied sums (NCCL none of them) and the capped group's all-reduce (with fccl's SM budget).
  nonblocking  the same first checks on non-blocking communicators (TORCH_NCCL_USE_COMM_NONBLOCKING=1).
  kill         the last rank is killed (SIGKILL) in a loop of all-reduces: the survivors' error must reach PyTorch
               (an exception, or its watchdog ending the process with NCCL's error) long before PyTorch's timeout
               (10 minutes here); the time it took is printed.

usage: torch_nccl_api.py --library libfccl-nccl.so.2 --mode basic|nonblocking|kill [--ranks N]
Exit status 77 (skip) without torch or a CUDA GPU.
"""
import argparse
import ctypes
import datetime
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77


class Stats(ctypes.Structure):
    """fcclNcclStats_t of fccl_nccl.h, second version."""
    _fields_ = [("size", ctypes.c_size_t), ("comms", ctypes.c_uint64), ("commsWithFccl", ctypes.c_uint64),
                ("fcclCalls", ctypes.c_uint64 * 5), ("ncclCalls", ctypes.c_uint64 * 5),
                ("fcclCallsAll", ctypes.c_uint64 * 7), ("ncclCallsAll", ctypes.c_uint64 * 7),
                ("fcclPreMulSumCalls", ctypes.c_uint64), ("ncclPreMulSumCalls", ctypes.c_uint64),
                ("preMulSumOps", ctypes.c_uint64), ("commsWithBudget", ctypes.c_uint64)]


COLLS = ["allreduce", "allgather", "reducescatter", "broadcast", "reduce", "gather", "scatter"]


def stats(library):
    s = Stats()
    s.size = ctypes.sizeof(Stats)
    if library.fcclNcclGetStats(ctypes.byref(s)) != 0:
        raise RuntimeError("fcclNcclGetStats failed")
    return s


class Checker:
    def __init__(self, rank):
        self.rank = rank
        self.failed = 0
        self.passed = 0

    def check(self, condition, what):
        if condition:
            self.passed += 1
        else:
            self.failed += 1
            print(f"rank {self.rank}: FAIL: {what}", flush=True)


def rank_input(torch, r, count, dtype, salt):
    """Rank r's input, reproducible on every rank: the host reference needs every rank's."""
    g = torch.Generator().manual_seed(1000 * salt + r)
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, (count,), generator=g, dtype=torch.int32)
    return torch.randn(count, generator=g, dtype=torch.float64).to(dtype)


def close(torch, got, reference, dtype, magnitude):
    """got against the float64 reference: exact for integers; floats within a few roundings of the type."""
    got = got.double().cpu()
    if dtype == torch.int32:
        return bool(torch.equal(got, reference))
    eps = {torch.float32: 2.0 ** -20, torch.bfloat16: 2.0 ** -6, torch.float16: 2.0 ** -9}[dtype]
    return bool(((got - reference).abs() <= eps * magnitude + 1e-30).all())


def worker(args):
    import torch
    import torch.distributed as dist

    rank, n = args.rank, args.ranks
    device = torch.device("cuda", rank if torch.cuda.device_count() >= n else 0)
    torch.cuda.set_device(device)
    library = ctypes.CDLL(args.library)  # the preloaded library itself
    c = Checker(rank)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=device,
                            timeout=datetime.timedelta(minutes=10))

    if args.mode == "kill":
        x = torch.ones(1 << 16, device=device)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        try:
            for i in range(1 << 30):
                dist.all_reduce(x)
                if i % 16 == 0:
                    torch.cuda.synchronize()
                if rank == n - 1 and i == 200:
                    torch.cuda.synchronize()
                    with open(os.path.join(args.workdir, "killed"), "w") as f:
                        f.write(f"{time.monotonic()}\n")
                    os.kill(os.getpid(), signal.SIGKILL)
        except Exception as error:  # noqa: BLE001 - any error PyTorch raises is the error under test
            with open(os.path.join(args.workdir, f"error.{rank}"), "w") as f:
                f.write(f"{time.monotonic()}\n{type(error).__name__}: {error}\n")
            os._exit(0)
        return 1

    version = ctypes.c_int()
    c.check(library.ncclGetVersion(ctypes.byref(version)) == 0, "ncclGetVersion")
    major, minor, patch = tuple(torch.cuda.nccl.version())[:3]  # some versions add a suffix
    c.check(version.value == major * 10000 + minor * 100 + patch,
            f"ncclGetVersion {version.value} is not torch's NCCL {major}.{minor}.{patch}")

    before = stats(library)
    types = [torch.float32, torch.bfloat16, torch.float16, torch.int32]
    for salt, (dtype, count) in enumerate([(t, k) for t in types for k in (1, 1000, (1 << 20) + 3)]):
        x = rank_input(torch, rank, count, dtype, salt).to(device)
        dist.all_reduce(x)
        inputs = [rank_input(torch, r, count, dtype, salt).double() for r in range(n)]
        reference = sum(inputs)
        magnitude = sum(i.abs() for i in inputs)
        c.check(close(torch, x, reference, dtype, magnitude), f"all_reduce sum {dtype} x {count}")
    for op, combine in [(dist.ReduceOp.AVG, lambda t: sum(t) / n),
                        (dist.ReduceOp.MAX, lambda t: torch.stack(t).max(0)[0])]:
        x = rank_input(torch, rank, 4099, torch.float32, 90).to(device)
        dist.all_reduce(x, op=op)
        inputs = [rank_input(torch, r, 4099, torch.float32, 90).double() for r in range(n)]
        c.check(close(torch, x, combine(inputs), torch.float32, sum(i.abs() for i in inputs)), f"all_reduce {op}")

    k = 12345
    x = rank_input(torch, rank, k, torch.bfloat16, 91).to(device)
    out = torch.empty(n * k, dtype=torch.bfloat16, device=device)
    dist.all_gather_into_tensor(out, x)
    expected = torch.cat([rank_input(torch, r, k, torch.bfloat16, 91) for r in range(n)])
    c.check(torch.equal(out.cpu(), expected), "all_gather_into_tensor")

    big = rank_input(torch, rank, n * k, torch.float32, 92).to(device)
    part = torch.empty(k, dtype=torch.float32, device=device)
    dist.reduce_scatter_tensor(part, big)
    inputs = [rank_input(torch, r, n * k, torch.float32, 92).double()[rank * k:(rank + 1) * k] for r in range(n)]
    c.check(close(torch, part, sum(inputs), torch.float32, sum(i.abs() for i in inputs)), "reduce_scatter_tensor")

    x = rank_input(torch, rank, 777, torch.float16, 93).to(device)
    dist.broadcast(x, src=n - 1)
    c.check(torch.equal(x.cpu(), rank_input(torch, n - 1, 777, torch.float16, 93)), "broadcast")
    dist.barrier()

    if args.mode == "basic":
        everyone = dist.new_group(ranks=list(range(n)))
        pair = dist.new_group(ranks=[0, 1])
        x = rank_input(torch, rank, 5000, torch.float32, 94).to(device)
        dist.all_reduce(x, group=everyone)
        inputs = [rank_input(torch, r, 5000, torch.float32, 94).double() for r in range(n)]
        c.check(close(torch, x, sum(inputs), torch.float32, sum(i.abs() for i in inputs)), "all_reduce on new_group")
        if rank < 2:
            x = rank_input(torch, rank, 300, torch.float32, 95).to(device)
            dist.all_reduce(x, group=pair)
            inputs = [rank_input(torch, r, 300, torch.float32, 95).double() for r in range(2)]
            c.check(close(torch, x, sum(inputs), torch.float32, sum(i.abs() for i in inputs)),
                    "all_reduce on a subgroup")

        # send/recv around a ring: NCCL's
        token = rank_input(torch, rank, 64, torch.float32, 96).to(device)
        received = torch.empty_like(token)
        if rank % 2 == 0:
            dist.send(token, dst=(rank + 1) % n)
            dist.recv(received, src=(rank - 1) % n)
        else:
            dist.recv(received, src=(rank - 1) % n)
            dist.send(token, dst=(rank + 1) % n)
        c.check(torch.equal(received.cpu(), rank_input(torch, (rank - 1) % n, 64, torch.float32, 96)), "send/recv")

        # an all_reduce captured in a CUDA graph, replayed with new inputs
        static = torch.zeros(65536, dtype=torch.float32, device=device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                dist.all_reduce(static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            dist.all_reduce(static)
        for replay in range(3):
            static.copy_(rank_input(torch, rank, 65536, torch.float32, 100 + replay).to(device))
            graph.replay()
            torch.cuda.synchronize()
            inputs = [rank_input(torch, r, 65536, torch.float32, 100 + replay).double() for r in range(n)]
            c.check(close(torch, static, sum(inputs), torch.float32, sum(i.abs() for i in inputs)),
                    f"all_reduce replayed from a CUDA graph ({replay})")
        del graph

        # ReduceOp.PREMUL_SUM: torch makes the op with ncclRedOpCreatePreMulSum around each call (a float factor on
        # the host, a tensor factor in device memory) and destroys it after; fccl's twin carries the call
        torch.cuda.synchronize()
        premul_before = stats(library)
        for salt, dtype in enumerate([torch.float32, torch.bfloat16], start=110):
            for factor_kind in ("float", "tensor"):
                factor = 2.5 if factor_kind == "float" else torch.tensor([0.75], dtype=dtype, device=device)
                value = factor if factor_kind == "float" else 0.75
                x = rank_input(torch, rank, 3001, dtype, salt).to(device)
                dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor))
                inputs = [rank_input(torch, r, 3001, dtype, salt).double() * value for r in range(n)]
                c.check(close(torch, x, sum(inputs), dtype, sum(i.abs() for i in inputs)),
                        f"all_reduce PREMUL_SUM ({factor_kind} factor) {dtype}")
                big = rank_input(torch, rank, n * 513, dtype, salt + 10).to(device)
                part = torch.empty(513, dtype=dtype, device=device)
                dist.reduce_scatter_tensor(part, big, op=dist._make_nccl_premul_sum(factor))
                inputs = [rank_input(torch, r, n * 513, dtype, salt + 10).double()[rank * 513:(rank + 1) * 513] * value
                          for r in range(n)]
                c.check(close(torch, part, sum(inputs), dtype, sum(i.abs() for i in inputs)),
                        f"reduce_scatter_tensor PREMUL_SUM ({factor_kind} factor) {dtype}")
        torch.cuda.synchronize()
        premul_after = stats(library)
        carried_premul = premul_after.fcclPreMulSumCalls - premul_before.fcclPreMulSumCalls
        nccl_premul = premul_after.ncclPreMulSumCalls - premul_before.ncclPreMulSumCalls
        twins = premul_after.preMulSumOps - premul_before.preMulSumOps
        print(f"rank {rank}: PREMUL_SUM calls: fccl {carried_premul}, NCCL {nccl_premul}; fccl twins made {twins}",
              flush=True)
        c.check(carried_premul == 8 and nccl_premul == 0, f"PREMUL_SUM: fccl {carried_premul} of 8, NCCL {nccl_premul}")
        c.check(twins == 8, f"PREMUL_SUM: {twins} fccl twins made, not 8")

        # a group whose NCCL config caps the CTAs: fccl's communicator keeps the budget and carries its all-reduce
        options = dist.ProcessGroupNCCL.Options()
        config = getattr(options, "config", None)
        if config is None or not hasattr(config, "max_ctas"):
            print(f"rank {rank}: this torch has no ProcessGroupNCCL.Options().config.max_ctas: the capped group is "
                  "not run", flush=True)
        else:
            config.max_ctas = 4
            capped_before = stats(library)
            capped = dist.new_group(ranks=list(range(n)), pg_options=options)
            x = rank_input(torch, rank, 70000, torch.float32, 120).to(device)
            dist.all_reduce(x, group=capped)
            torch.cuda.synchronize()
            capped_after = stats(library)
            inputs = [rank_input(torch, r, 70000, torch.float32, 120).double() for r in range(n)]
            c.check(close(torch, x, sum(inputs), torch.float32, sum(i.abs() for i in inputs)),
                    "all_reduce on a group of config.max_ctas = 4")
            budgeted = capped_after.commsWithBudget - capped_before.commsWithBudget
            by_fccl = capped_after.fcclCalls[0] - capped_before.fcclCalls[0]
            by_nccl = capped_after.ncclCalls[0] - capped_before.ncclCalls[0]
            print(f"rank {rank}: capped group: {budgeted} communicator(s) with fccl's SM budget; all_reduce: fccl "
                  f"{by_fccl}, NCCL {by_nccl}", flush=True)
            c.check(budgeted >= 1, "the capped group's communicator got no fccl SM budget")
            c.check(by_fccl >= 1 and by_nccl == 0, f"capped group's all_reduce: fccl {by_fccl}, NCCL {by_nccl}")
            dist.destroy_process_group(capped)

    torch.cuda.synchronize()
    after = stats(library)
    carried = {COLLS[i]: after.fcclCallsAll[i] - before.fcclCallsAll[i] for i in range(len(COLLS))}
    by_nccl = {COLLS[i]: after.ncclCallsAll[i] - before.ncclCallsAll[i] for i in range(len(COLLS))}
    print(f"rank {rank}: fccl carried {carried}; NCCL {by_nccl}; communicators {after.comms}, "
          f"with fccl {after.commsWithFccl}", flush=True)
    for coll in ("allreduce", "allgather", "reducescatter", "broadcast"):
        c.check(carried[coll] > 0, f"fccl carried no {coll}")
    c.check(after.commsWithFccl >= 1, "fccl attached to no communicator")
    dist.destroy_process_group()
    print(f"rank {rank}: {c.passed} passed, {c.failed} failed", flush=True)
    return 0 if c.failed == 0 and c.passed > 0 else 1


def loaded_library(stem):
    """The path of the library of this name the process has mapped (torch's CUDA runtime, say), or None."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith(stem):
                return path
    return None


def preload_for(library):
    """LD_PRELOAD for the workers: the library, after torch's own CUDA runtime. Preloaded alone it would bring the
    CUDA runtime it links (the toolkit's) ahead of torch's, which may be newer (docs/nccl-api.md)."""
    cudart = loaded_library("libcudart.so")
    return f"{cudart} {library}" if cudart else library


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parent(args):
    try:
        import torch
    except ImportError as error:
        print(f"SKIP: torch is not importable ({error})")
        return SKIP
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        print("SKIP: no CUDA GPU")
        return SKIP
    if args.ranks < 2:
        print("needs 2 ranks or more")
        return 2
    workdir = tempfile.mkdtemp(prefix="fccl-torch-")
    port = free_port()
    preload = preload_for(args.library)
    print(f"LD_PRELOAD={preload}")
    processes = []
    for rank in range(args.ranks):
        env = dict(os.environ)
        env.update({
            "LD_PRELOAD": preload, "RANK": str(rank), "WORLD_SIZE": str(args.ranks), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NCCL_HOSTID": f"fccl-torch-{rank}",
            "NCCL_SOCKET_IFNAME": "lo", "NCCL_NVLS_ENABLE": "0", "FCCL_DEBUG": "INFO", "FCCL_DEBUG_SUBSYS": "INIT",
        })
        if args.mode == "nonblocking":
            env["TORCH_NCCL_USE_COMM_NONBLOCKING"] = "1"
        command = [sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(rank), "--ranks",
                   str(args.ranks), "--library", args.library, "--mode", args.mode, "--workdir", workdir]
        processes.append(subprocess.Popen(command, env=env))

    if args.mode != "kill":
        deadline = time.monotonic() + args.timeout
        codes = []
        for p in processes:
            try:
                codes.append(p.wait(timeout=max(1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append("timeout")
        print(f"exit codes {codes}")
        return 0 if all(code == 0 for code in codes) else 1

    # kill: the last rank dies; every other rank must see it
    victim, survivors = processes[-1], processes[:-1]
    try:
        victim.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
        print("FAIL: the last rank did not kill itself")
        return 1
    killed_at = None
    try:
        with open(os.path.join(workdir, "killed")) as f:
            killed_at = float(f.read().split()[0])
    except OSError:
        pass
    if killed_at is None:
        for p in survivors:
            p.kill()
        print(f"FAIL: the last rank ended ({victim.returncode}) before it was killed")
        return 1
    failures = 0
    for rank, p in enumerate(survivors):
        ended_at = None
        while ended_at is None:
            code = p.poll()
            if code is not None:
                ended_at = time.monotonic()
            elif time.monotonic() - killed_at > args.timeout:
                break
            time.sleep(0.005)
        error_file = os.path.join(workdir, f"error.{rank}")
        if os.path.exists(error_file):
            with open(error_file) as f:
                seen_at = float(f.readline())
                message = f.read().strip()
            how = "an exception"
        elif ended_at is not None:
            seen_at, message, how = ended_at, f"exit status {p.returncode}", "the process ended (PyTorch's watchdog)"
        else:
            p.kill()
            print(f"FAIL: rank {rank} saw nothing within {args.timeout} s of its peer's death")
            failures += 1
            continue
        latency = seen_at - killed_at
        print(f"rank {rank}: the peer's death reached PyTorch after {latency * 1000:.0f} ms as {how}: {message[:300]}")
        # Not a timing test: PyTorch's own timeout is 10 minutes here, and nothing but fccl's detection ends the wait
        # this soon. The latency is printed for the record.
        if latency > 30:
            print(f"FAIL: rank {rank}: {latency:.1f} s is PyTorch's timeout, not fccl's detection")
            failures += 1
    return 0 if failures == 0 else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", required=True)
    parser.add_argument("--mode", choices=["basic", "nonblocking", "kill"], default="basic")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--workdir", default="")
    args = parser.parse_args()
    if args.worker:
        sys.exit(worker(args))
    sys.exit(parent(args))


if __name__ == "__main__":
    main()
