#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A PyNccl-style client: libfccl-nccl loaded by path with ctypes (as vLLM's VLLM_NCCL_SO_PATH and SGLang's
SGLANG_NCCL_SO_PATH load NCCL), binding the 18 functions those wrappers bind, with the argument types they give, and
ncclGather, ncclScatter, ncclRedOpCreatePreMulSum and ncclRedOpDestroy. Two ranks (processes; they share GPU 0 when
there is one GPU, each its own NCCL_HOSTID). Tensors are PyTorch's, which also loads the real libnccl.so.2 that the
library forwards to.

Checked against a float64 host reference: ncclAllReduce (fp32, bf16; eager and captured in a CUDA graph, as vLLM
captures it), ncclAllGather, ncclReduceScatter, ncclBroadcast, ncclReduce, ncclGather, ncclScatter, pre-multiplied
sums (a scalar per rank, on the host, and in device memory read when each call runs) with ncclAllReduce,
ncclReduceScatter and ncclReduce, ncclSend/ncclRecv in a group (NCCL's); ncclMemAlloc'd buffers registered as a
symmetric window (ncclCommWindowRegister) and all-reduced in place; the version is the real NCCL's; the library's
count shows fccl carried the seven collectives and the pre-multiplied sums, NCCL none of the latter.

usage: pynccl_client.py --library libfccl-nccl.so.2     (exit status 77 without torch or a CUDA GPU)
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

SKIP = 77
ncclResult_t = ctypes.c_int
ncclComm_t = ctypes.c_void_p
ncclWindow_t = ctypes.c_void_p
cudaStream_t = ctypes.c_void_p
buffer_type = ctypes.c_void_p
ncclDataType_t = ctypes.c_int
ncclRedOp_t = ctypes.c_int


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


# name, return type, argument types: the 18 functions vLLM's and SGLang's NCCL wrappers bind
FUNCTIONS = [
    ("ncclGetErrorString", ctypes.c_char_p, [ncclResult_t]),
    ("ncclGetVersion", ncclResult_t, [ctypes.POINTER(ctypes.c_int)]),
    ("ncclGetUniqueId", ncclResult_t, [ctypes.POINTER(ncclUniqueId)]),
    ("ncclCommInitRank", ncclResult_t, [ctypes.POINTER(ncclComm_t), ctypes.c_int, ncclUniqueId, ctypes.c_int]),
    ("ncclAllReduce", ncclResult_t,
     [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t]),
    ("ncclAllGather", ncclResult_t, [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ncclComm_t,
                                     cudaStream_t]),
    ("ncclReduce", ncclResult_t,
     [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ncclRedOp_t, ctypes.c_int, ncclComm_t,
      cudaStream_t]),
    ("ncclReduceScatter", ncclResult_t,
     [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t]),
    ("ncclSend", ncclResult_t, [buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t,
                                cudaStream_t]),
    ("ncclRecv", ncclResult_t, [buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t,
                                cudaStream_t]),
    ("ncclBroadcast", ncclResult_t,
     [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t, cudaStream_t]),
    ("ncclCommDestroy", ncclResult_t, [ncclComm_t]),
    ("ncclGroupStart", ncclResult_t, []),
    ("ncclGroupEnd", ncclResult_t, []),
    ("ncclCommWindowRegister", ncclResult_t,
     [ncclComm_t, buffer_type, ctypes.c_size_t, ctypes.POINTER(ncclWindow_t), ctypes.c_int]),
    ("ncclCommWindowDeregister", ncclResult_t, [ncclComm_t, ncclWindow_t]),
    ("ncclMemAlloc", ncclResult_t, [ctypes.POINTER(buffer_type), ctypes.c_size_t]),
    ("ncclMemFree", ncclResult_t, [buffer_type]),
    # beyond vLLM's and SGLang's: the calls fccl carries besides theirs
    ("ncclGather", ncclResult_t,
     [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t, cudaStream_t]),
    ("ncclScatter", ncclResult_t,
     [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t, cudaStream_t]),
    ("ncclRedOpCreatePreMulSum", ncclResult_t,
     [ctypes.POINTER(ncclRedOp_t), ctypes.c_void_p, ncclDataType_t, ctypes.c_int, ncclComm_t]),
    ("ncclRedOpDestroy", ncclResult_t, [ncclRedOp_t, ncclComm_t]),
]
FLOAT32, BFLOAT16 = 7, 9
SUM = 0
NCCL_WIN_COLL_SYMMETRIC = 1
SCALAR_DEVICE, SCALAR_HOST = 0, 1
COLLS = ["allreduce", "allgather", "reducescatter", "broadcast", "reduce", "gather", "scatter"]


class Stats(ctypes.Structure):
    """fcclNcclStats_t of fccl_nccl.h, second version."""
    _fields_ = [("size", ctypes.c_size_t), ("comms", ctypes.c_uint64), ("commsWithFccl", ctypes.c_uint64),
                ("fcclCalls", ctypes.c_uint64 * 5), ("ncclCalls", ctypes.c_uint64 * 5),
                ("fcclCallsAll", ctypes.c_uint64 * 7), ("ncclCallsAll", ctypes.c_uint64 * 7),
                ("fcclPreMulSumCalls", ctypes.c_uint64), ("ncclPreMulSumCalls", ctypes.c_uint64),
                ("preMulSumOps", ctypes.c_uint64), ("commsWithBudget", ctypes.c_uint64)]


class Nccl:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        for name, restype, argtypes in FUNCTIONS:
            function = getattr(self.lib, name)  # AttributeError: the library lacks a name the client binds
            function.restype, function.argtypes = restype, argtypes
            setattr(self, name, function)

    def check(self, result, what):
        if result != 0:
            raise RuntimeError(f"{what}: {self.ncclGetErrorString(result).decode()} (code {result})")


def worker(args):
    import torch

    rank, n = args.rank, 2
    device = torch.device("cuda", rank if torch.cuda.device_count() >= n else 0)
    torch.cuda.set_device(device)
    nccl = Nccl(args.library)
    failed = passed = 0

    def expect(condition, what):
        nonlocal failed, passed
        if condition:
            passed += 1
        else:
            failed += 1
            print(f"rank {rank}: FAIL: {what}", flush=True)

    version = ctypes.c_int()
    nccl.check(nccl.ncclGetVersion(ctypes.byref(version)), "ncclGetVersion")
    major, minor, patch = tuple(torch.cuda.nccl.version())[:3]  # some versions add a suffix
    expect(version.value == major * 10000 + minor * 100 + patch, f"version {version.value}")

    id_path = os.path.join(args.workdir, "unique-id")
    unique = ncclUniqueId()
    if rank == 0:
        nccl.check(nccl.ncclGetUniqueId(ctypes.byref(unique)), "ncclGetUniqueId")
        with open(id_path + ".tmp", "wb") as f:
            f.write(bytes(unique.internal))
        os.rename(id_path + ".tmp", id_path)
    else:
        deadline = time.monotonic() + 60
        while not os.path.exists(id_path) and time.monotonic() < deadline:
            time.sleep(0.01)
        with open(id_path, "rb") as f:
            ctypes.memmove(unique.internal, f.read(128), 128)
    comm = ncclComm_t()
    nccl.check(nccl.ncclCommInitRank(ctypes.byref(comm), n, unique, rank), "ncclCommInitRank")
    stream = torch.cuda.current_stream()
    handle = ctypes.c_void_p(stream.cuda_stream)

    def data(r, count, dtype, salt):
        g = torch.Generator().manual_seed(500 * salt + r)
        return torch.randn(count, generator=g, dtype=torch.float64).to(dtype)

    def reference_sum(count, dtype, salt):
        parts = [data(r, count, dtype, salt).double() for r in range(n)]
        return sum(parts), sum(p.abs() for p in parts)

    def near(got, reference, magnitude, dtype):
        eps = 2.0 ** -20 if dtype == torch.float32 else 2.0 ** -6
        return bool(((got.double().cpu() - reference).abs() <= eps * magnitude + 1e-30).all())

    for salt, (dtype, code, count) in enumerate([(torch.float32, FLOAT32, 1), (torch.float32, FLOAT32, 300001),
                                                 (torch.bfloat16, BFLOAT16, 4096)]):
        x = data(rank, count, dtype, salt).to(device)
        nccl.check(nccl.ncclAllReduce(x.data_ptr(), x.data_ptr(), count, code, SUM, comm, handle), "ncclAllReduce")
        stream.synchronize()
        reference, magnitude = reference_sum(count, dtype, salt)
        expect(near(x, reference, magnitude, dtype), f"ncclAllReduce {dtype} x {count}")

    k = 1000
    x = data(rank, k, torch.float32, 10).to(device)
    out = torch.empty(n * k, device=device)
    nccl.check(nccl.ncclAllGather(x.data_ptr(), out.data_ptr(), k, FLOAT32, comm, handle), "ncclAllGather")
    big = data(rank, n * k, torch.float32, 11).to(device)
    part = torch.empty(k, device=device)
    nccl.check(nccl.ncclReduceScatter(big.data_ptr(), part.data_ptr(), k, FLOAT32, SUM, comm, handle),
               "ncclReduceScatter")
    root = data(rank, k, torch.float32, 12).to(device)
    nccl.check(nccl.ncclBroadcast(root.data_ptr(), root.data_ptr(), k, FLOAT32, 1, comm, handle), "ncclBroadcast")
    reduced = torch.empty(k, device=device)
    nccl.check(nccl.ncclReduce(x.data_ptr(), reduced.data_ptr(), k, FLOAT32, SUM, 0, comm, handle), "ncclReduce")
    stream.synchronize()
    expect(torch.equal(out.cpu(), torch.cat([data(r, k, torch.float32, 10) for r in range(n)])), "ncclAllGather")
    parts = [data(r, n * k, torch.float32, 11).double()[rank * k:(rank + 1) * k] for r in range(n)]
    expect(near(part, sum(parts), sum(p.abs() for p in parts), torch.float32), "ncclReduceScatter")
    expect(torch.equal(root.cpu(), data(1, k, torch.float32, 12)), "ncclBroadcast")
    if rank == 0:
        reference, magnitude = reference_sum(k, torch.float32, 10)
        expect(near(reduced, reference, magnitude, torch.float32), "ncclReduce")

    # gather to rank 1 and scatter from rank 0 (each rank's block, in rank order): moves, bit for bit
    piece = data(rank, k + 3, torch.bfloat16, 14).to(device)
    gathered = torch.zeros(n * (k + 3), dtype=torch.bfloat16, device=device)
    nccl.check(nccl.ncclGather(piece.data_ptr(), gathered.data_ptr(), k + 3, BFLOAT16, 1, comm, handle), "ncclGather")
    whole = data(rank, n * k, torch.float32, 15).to(device)
    block = torch.zeros(k, device=device)
    nccl.check(nccl.ncclScatter(whole.data_ptr(), block.data_ptr(), k, FLOAT32, 0, comm, handle), "ncclScatter")
    stream.synchronize()
    if rank == 1:
        expect(torch.equal(gathered.cpu(), torch.cat([data(r, k + 3, torch.bfloat16, 14) for r in range(n)])),
               "ncclGather")
    expect(torch.equal(block.cpu(), data(0, n * k, torch.float32, 15)[rank * k:(rank + 1) * k]), "ncclScatter")

    # pre-multiplied sums: every rank its own scalar (NCCL allows it), exact in bf16, on the host (read at creation)
    def scale(r, variant):
        return (0.5 + r) * (1.0 if variant == 0 else -0.25)

    def premul_reference(count, dtype, salt, variant, block=None):
        parts = [data(r, count, dtype, salt).double() * scale(r, variant) for r in range(n)]
        if block is not None:
            parts = [p[block * (count // n):(block + 1) * (count // n)] for p in parts]
        return sum(parts), sum(p.abs() for p in parts)

    for salt, (dtype, code) in enumerate([(torch.float32, FLOAT32), (torch.bfloat16, BFLOAT16)], start=40):
        host_scalar = torch.tensor([scale(rank, 0)], dtype=dtype)
        op = ncclRedOp_t()
        nccl.check(nccl.ncclRedOpCreatePreMulSum(ctypes.byref(op), host_scalar.data_ptr(), code, SCALAR_HOST, comm),
                   "ncclRedOpCreatePreMulSum (host scalar)")
        host_scalar.fill_(1000.0)  # read at creation: this must not matter
        x = data(rank, 5003, dtype, salt).to(device)
        nccl.check(nccl.ncclAllReduce(x.data_ptr(), x.data_ptr(), 5003, code, op.value, comm, handle),
                   "ncclAllReduce (pre-multiplied)")
        big = data(rank, n * 2048, dtype, salt + 10).to(device)
        part = torch.empty(2048, dtype=dtype, device=device)
        nccl.check(nccl.ncclReduceScatter(big.data_ptr(), part.data_ptr(), 2048, code, op.value, comm, handle),
                   "ncclReduceScatter (pre-multiplied)")
        y = data(rank, 999, dtype, salt + 20).to(device)
        rooted = torch.empty(999, dtype=dtype, device=device)
        nccl.check(nccl.ncclReduce(y.data_ptr(), rooted.data_ptr(), 999, code, op.value, 1, comm, handle),
                   "ncclReduce (pre-multiplied)")
        stream.synchronize()
        nccl.check(nccl.ncclRedOpDestroy(op.value, comm), "ncclRedOpDestroy")
        expect(near(x, *premul_reference(5003, dtype, salt, 0), dtype), f"pre-multiplied ncclAllReduce {dtype}")
        expect(near(part, *premul_reference(n * 2048, dtype, salt + 10, 0, block=rank), dtype),
               f"pre-multiplied ncclReduceScatter {dtype}")
        if rank == 1:
            expect(near(rooted, *premul_reference(999, dtype, salt + 20, 0), dtype),
                   f"pre-multiplied ncclReduce {dtype}")

    # the scalar in device memory: read when each call runs, so a new value there changes the next call's result
    device_scalar = torch.tensor([scale(rank, 0)], dtype=torch.float32, device=device)
    op = ncclRedOp_t()
    nccl.check(nccl.ncclRedOpCreatePreMulSum(ctypes.byref(op), device_scalar.data_ptr(), FLOAT32, SCALAR_DEVICE, comm),
               "ncclRedOpCreatePreMulSum (device scalar)")
    for variant in (0, 1):
        device_scalar.fill_(scale(rank, variant))
        x = data(rank, 70001, torch.float32, 50 + variant).to(device)
        nccl.check(nccl.ncclAllReduce(x.data_ptr(), x.data_ptr(), 70001, FLOAT32, op.value, comm, handle),
                   "ncclAllReduce (device scalar)")
        stream.synchronize()
        expect(near(x, *premul_reference(70001, torch.float32, 50 + variant, variant), torch.float32),
               f"pre-multiplied ncclAllReduce, device scalar (value {variant})")
    nccl.check(nccl.ncclRedOpDestroy(op.value, comm), "ncclRedOpDestroy (device scalar)")

    # send and receive in a group (NCCL's), each rank to the other
    token = data(rank, 257, torch.float32, 13).to(device)
    got = torch.empty_like(token)
    nccl.check(nccl.ncclGroupStart(), "ncclGroupStart")
    nccl.check(nccl.ncclSend(token.data_ptr(), 257, FLOAT32, 1 - rank, comm, handle), "ncclSend")
    nccl.check(nccl.ncclRecv(got.data_ptr(), 257, FLOAT32, 1 - rank, comm, handle), "ncclRecv")
    nccl.check(nccl.ncclGroupEnd(), "ncclGroupEnd")
    stream.synchronize()
    expect(torch.equal(got.cpu(), data(1 - rank, 257, torch.float32, 13)), "ncclSend/ncclRecv")

    # captured in a CUDA graph, as vLLM captures its all-reduce, and replayed with new inputs
    static = torch.zeros(8192, device=device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        capture = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        nccl.check(nccl.ncclAllReduce(static.data_ptr(), static.data_ptr(), 8192, FLOAT32, SUM, comm, capture),
                   "ncclAllReduce (captured)")
    for replay in range(3):
        static.copy_(data(rank, 8192, torch.float32, 20 + replay).to(device))
        graph.replay()
        torch.cuda.synchronize()
        reference, magnitude = reference_sum(8192, torch.float32, 20 + replay)
        expect(near(static, reference, magnitude, torch.float32), f"replayed ncclAllReduce ({replay})")
    del graph

    # a symmetric window of ncclMemAlloc'd memory, filled and read back through collectives (no copy API needed):
    # all-gather every rank's part into it, all-reduce it in place, all-gather one part of it back out
    count = 1 << 16
    window_buffer = ctypes.c_void_p()
    nccl.check(nccl.ncclMemAlloc(ctypes.byref(window_buffer), count * 4), "ncclMemAlloc")
    window = ncclWindow_t()
    registered = nccl.ncclCommWindowRegister(comm, window_buffer, count * 4, ctypes.byref(window),
                                             NCCL_WIN_COLL_SYMMETRIC)
    if registered != 0:
        # NCCL's own answer for this layout (ranks NCCL sees on separate hosts), not the library's: said, not failed
        print(f"rank {rank}: NCCL refuses a symmetric window here ({nccl.ncclGetErrorString(registered).decode()}); "
              "the window part is not run", flush=True)
    else:
        piece = data(rank, count // n, torch.float32, 30).to(device)
        nccl.check(nccl.ncclAllGather(piece.data_ptr(), window_buffer, count // n, FLOAT32, comm, handle),
                   "into the window")
        nccl.check(nccl.ncclAllReduce(window_buffer, window_buffer, count, FLOAT32, SUM, comm, handle),
                   "in the window")
        back = torch.empty(count, device=device)
        mine = window_buffer.value + rank * (count // n) * 4
        nccl.check(nccl.ncclAllGather(mine, back.data_ptr(), count // n, FLOAT32, comm, handle), "out of the window")
        stream.synchronize()
        whole = torch.cat([data(r, count // n, torch.float32, 30) for r in range(n)]).double()
        expect(near(back, n * whole, n * whole.abs(), torch.float32), "all-reduce in a registered window")
        nccl.check(nccl.ncclCommWindowDeregister(comm, window), "ncclCommWindowDeregister")
    nccl.check(nccl.ncclMemFree(window_buffer), "ncclMemFree")

    stats = Stats()
    stats.size = ctypes.sizeof(Stats)
    nccl.lib.fcclNcclGetStats(ctypes.byref(stats))
    expect(stats.size == ctypes.sizeof(Stats), f"fcclNcclGetStats filled {stats.size} bytes of {ctypes.sizeof(Stats)}")
    carried = list(stats.fcclCallsAll)
    print(f"rank {rank}: fccl carried {carried} ({', '.join(COLLS)}); NCCL {list(stats.ncclCallsAll)}; "
          f"pre-multiplied: fccl {stats.fcclPreMulSumCalls}, NCCL {stats.ncclPreMulSumCalls}, "
          f"{stats.preMulSumOps} ops with fccl's twin", flush=True)
    for index, coll in enumerate(COLLS):
        expect(carried[index] > 0, f"fccl carried no {coll}")
    expect(stats.fcclPreMulSumCalls == 8, f"fccl carried {stats.fcclPreMulSumCalls} pre-multiplied sums, not 8")
    expect(stats.ncclPreMulSumCalls == 0, f"NCCL carried {stats.ncclPreMulSumCalls} pre-multiplied sums")
    expect(stats.preMulSumOps == 3, f"{stats.preMulSumOps} ops with fccl's twin, not 3")
    nccl.check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
    print(f"rank {rank}: {passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 and passed > 0 else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", required=True)
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--workdir", default="")
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    if args.worker:
        sys.exit(worker(args))
    try:
        import torch
    except ImportError as error:
        print(f"SKIP: torch is not importable ({error})")
        sys.exit(SKIP)
    if not torch.cuda.is_available():
        print("SKIP: no CUDA GPU")
        sys.exit(SKIP)
    workdir = tempfile.mkdtemp(prefix="fccl-pynccl-")
    processes = []
    for rank in range(2):
        env = dict(os.environ, NCCL_HOSTID=f"fccl-pynccl-{rank}", NCCL_SOCKET_IFNAME="lo", NCCL_NVLS_ENABLE="0",
                   FCCL_DEBUG="INFO", FCCL_DEBUG_SUBSYS="INIT")
        env.pop("LD_PRELOAD", None)  # loaded by path only
        processes.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(rank),
                                           "--library", args.library, "--workdir", workdir], env=env))
    deadline = time.monotonic() + args.timeout
    codes = []
    for p in processes:
        try:
            codes.append(p.wait(timeout=max(1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append("timeout")
    print(f"exit codes {codes}")
    sys.exit(0 if all(code == 0 for code in codes) else 1)


if __name__ == "__main__":
    main()
