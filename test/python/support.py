# SPDX-License-Identifier: Apache-2.0
"""What the Python tests share: fccl.h read for its version and enums, a stand-in for a CUDA array, a fresh interpreter
to load libfccl in, the number of GPUs the CUDA runtime sees (asked without torch), and for the GPU tests with torch
their random inputs, float64 reference and digests, their ranks as new processes (run as scripts that each write a
report, or spawned with multiprocessing and reporting over a queue) and their __main__ (a skip without a GPU)."""
import argparse
import ctypes
import functools
import hashlib
import importlib
import json
import multiprocessing
import os
import queue
import re
import subprocess
import sys
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.environ.get("TEST_FCCL_HEADER", os.path.join(HERE, "..", "..", "include", "fccl.h"))
# Bounds every init attempt here, so that a bug shows as a failure, never as a hang.
SHORT_TIMEOUT_MS = 5000


def header_text():
    with open(HEADER) as header:
        return header.read()


def header_version_code():
    text = header_text()
    parts = {name: int(re.search(rf"#define FCCL_{name} (\d+)", text).group(1)) for name in ("MAJOR", "MINOR", "PATCH")}
    formula = re.search(r"#define FCCL_VERSION\(major, minor, patch\) \(\(major\) \* (\d+) \+ \(minor\) \* (\d+)",
                        text)
    return parts["MAJOR"] * int(formula.group(1)) + parts["MINOR"] * int(formula.group(2)) + parts["PATCH"]


def header_enum(name):
    """{member: value} of a typedef enum in fccl.h, e.g. header_enum('fcclResult_t')."""
    text = header_text()
    body = re.search(r"typedef enum \{([^}]*)\}\s*" + name + ";", text).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return {m.group(1): int(m.group(2), 0) for m in re.finditer(r"(fccl\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)", body)}


class FakeCudaArray:
    """Only __cuda_array_interface__: the checks must reject or accept it without touching the memory."""

    def __init__(self, shape, typestr="<f4", pointer=0x7F0000000000, strides=None, readonly=False):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (pointer, readonly),
                                         "strides": strides, "version": 3}


def run_python(code, env=None, timeout=60):
    """Runs code in a fresh interpreter (loading libfccl is once per process); returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-c", code], env=env or dict(os.environ), capture_output=True, text=True,
                          timeout=timeout)


@functools.lru_cache(maxsize=None)
def gpu_count():
    """CUDA devices the runtime sees, asked in a child of the libcudart that libfccl links (no torch needed, and
    this process's CUDA state stays untouched); 0 when there is no driver or no device."""
    code = ("import ctypes, fccl\n"
            "fccl.load()\n"
            "path = next(line.split()[-1] for line in open('/proc/self/maps') if 'libcudart' in line)\n"
            "count = ctypes.c_int()\n"
            "print(count.value if ctypes.CDLL(path).cudaGetDeviceCount(ctypes.byref(count)) == 0 else 0)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"cannot count the GPUs: {result.stderr}")
    return int(result.stdout)


# ---- for the GPU tests with torch (torch is passed in: this module never imports it) -------------------------------

TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}


def torch_cuda_devices():
    """CUDA devices torch sees; 0 without torch or without a device."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def rank_inputs(torch, dtype, count, nranks, seed):
    """Every rank's input, the same on every rank (seeded per rank): random magnitudes in [0.25, 1.25), random signs,
    never zero. Returned on the host as the dtype itself, so the reference sees exactly what the ranks send."""
    inputs = []
    for rank in range(nranks):
        generator = torch.Generator().manual_seed(seed * 1000 + rank)
        magnitude = torch.rand(count, generator=generator, dtype=torch.float64) + 0.25
        sign = torch.randint(0, 2, (count,), generator=generator, dtype=torch.float64) * 2 - 1
        inputs.append((magnitude * sign).to(dtype))
    return inputs


def check_sum(torch, result, inputs, dtype_name):
    """Problems with result against the float64 sum of inputs: the error bound is the dtype's relative tolerance
    times the sum of the magnitudes (which grows with the number of ranks), element by element."""
    stacked = torch.stack([x.to(torch.float64).reshape(-1) for x in inputs])
    reference = stacked.sum(0)
    bound = TOLERANCE[dtype_name] * stacked.abs().sum(0)
    flat = result.detach().cpu().to(torch.float64).reshape(-1)
    if flat.numel() != reference.numel():
        return [f"{flat.numel()} elements, {reference.numel()} expected"]
    bad = ~((flat - reference).abs() <= bound)  # NaN (a poisoned element never written) counts as bad
    if bad.any():
        index = int(bad.nonzero()[0])
        return [f"{int(bad.sum())} of {flat.numel()} elements wrong, first at {index}: "
                f"{float(flat[index])} against {float(reference[index])}"]
    return []


def digest(torch, tensor):
    """sha256 of a tensor's bytes: results compared bit for bit across ranks."""
    host = tensor.detach().cpu().contiguous()
    return hashlib.sha256(ctypes.string_at(host.data_ptr(), host.numel() * host.element_size())).hexdigest()


def gpu_ranks_environment(rank, nranks, devices):
    """(device, shared) for a rank: a GPU each while there are enough, else sharing them (fccl then needs
    Config.allow_shared_device)."""
    return rank % devices, devices < nranks


class RankReport:
    """A rank's report in a file, rewritten after each scenario (problems and digests), so that a peer's failure or
    a deadline still leaves what was learnt. A scenario that raises is reported, not raised: the parent owns the
    verdict."""

    def __init__(self, path):
        self.path = path
        self.scenarios = {}

    def run(self, name, function, *arguments):
        """Runs function(*arguments), which returns problems or (problems, digests); True when there was none."""
        try:
            result = function(*arguments)
            problems, digests = result if isinstance(result, tuple) else (result, [])
        except BaseException:
            problems, digests = ["raised:\n" + traceback.format_exc()], []
        self.scenarios[name] = {"problems": list(problems), "digests": list(digests)}
        with open(self.path + ".tmp", "w") as handle:
            json.dump(self.scenarios, handle)
        os.replace(self.path + ".tmp", self.path)
        return not problems


def run_ranks(script, arguments, nranks, workdir, label, timeout_s, environment=lambda rank: {}):
    """Starts `script arguments --rank R --dir workdir` for every rank as a new process (its output in a log
    file), waits for all of them until timeout_s has passed (then kills the rest) and returns {rank: (report,
    log)}: the RankReport each wrote to workdir/report-<label>-<rank>.json ({} when none) and the end of its
    output with its exit status."""
    processes = []
    for rank in range(nranks):
        env = dict(os.environ)
        env["NCCL_NVLS_ENABLE"] = "0"  # NCCL must create no multicast objects here
        env.update(environment(rank))
        env.setdefault("FCCL_TIMEOUT", "20000")  # a kernel waiting for a dead peer gives up well before the deadline
        log_path = os.path.join(workdir, f"log-{label}-{rank}.txt")
        with open(log_path, "w") as log:
            processes.append((rank, log_path, subprocess.Popen(
                [sys.executable, os.path.abspath(script), *arguments, "--rank", str(rank), "--dir", workdir],
                env=env, cwd=HERE, stdout=log, stderr=subprocess.STDOUT)))
    deadline = time.monotonic() + timeout_s
    results = {}
    for rank, log_path, process in processes:
        try:
            process.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        with open(log_path, errors="replace") as log:
            tail = f"exit {process.returncode}; last output:\n" + log.read()[-4000:]
        try:
            with open(os.path.join(workdir, f"report-{label}-{rank}.json")) as handle:
                report = json.load(handle)
        except (OSError, ValueError):
            report = {}
        results[rank] = (report, tail)
    return results


def check_reported(test, results, scenario, same_digests=True):
    """Fails test unless every rank reported scenario without problems (and, with same_digests, with the same
    digests: results that must be bit for bit equal on every rank)."""
    for rank, (report, tail) in sorted(results.items()):
        if scenario not in report:
            test.fail(f"rank {rank} did not report {scenario}; {tail}")
        test.assertEqual(report[scenario]["problems"], [], f"rank {rank}, {scenario}")
    if same_digests:
        digests = [report[scenario]["digests"] for report, _ in results.values()]
        test.assertTrue(all(d == digests[0] for d in digests), f"{scenario}: results differ between ranks")


class SpawnedRank:
    """A rank's side of spawn_ranks: its rank and nranks, the UniqueIds rank 0 hands out, its reports to the
    parent."""

    def __init__(self, rank, nranks, uid_queues, results):
        self.rank = rank
        self.nranks = nranks
        self._uid_queues = uid_queues
        self._results = results

    def start_gpu(self, fccl_timeout_ms=20000, host_id=None):
        """What the rank does before its first fccl or NCCL call; returns (torch, device, shared). FCCL_TIMEOUT is
        fccl_timeout_ms unless the environment sets it (a kernel waiting for a rank that died gives up after it, well
        before the parent's deadline; fccl reads it at its first call); NCCL_NVLS_ENABLE=0 (NCCL must create no
        multicast objects here). The device is gpu_ranks_environment's, made current. With host_id and a shared GPU,
        NCCL_HOSTID is host_id-<rank>: NCCL takes two ranks on one GPU only from processes that claim hosts of their
        own."""
        os.environ.setdefault("FCCL_TIMEOUT", str(fccl_timeout_ms))
        os.environ["NCCL_NVLS_ENABLE"] = "0"
        torch = importlib.import_module("torch")
        device, shared = gpu_ranks_environment(self.rank, self.nranks, torch.cuda.device_count())
        if shared and host_id is not None:
            os.environ["NCCL_HOSTID"] = f"{host_id}-{self.rank}"
        torch.cuda.set_device(device)
        return torch, device, shared

    def unique_id(self, which=0):
        """The UniqueId of the rank's communicator number `which` (0, 1, ... in the order every rank makes them):
        rank 0 creates it and hands it to the others, which wait for it 60 s at most."""
        fccl = importlib.import_module("fccl")
        if self.rank == 0:
            uid = fccl.UniqueId.create()
            for peer_queue in self._uid_queues[1:]:
                peer_queue.put((which, uid))
            return uid
        got, uid = self._uid_queues[self.rank].get(timeout=60)
        if got != which:
            raise RuntimeError(f"unique id {got} came for {which}")
        return uid

    def report(self, scenario, problems, digests=()):
        """Tells the parent the rank's problems with scenario (none: it passed) and the digests of its results."""
        self._results.put((self.rank, scenario, list(problems), list(digests)))


class SpawnedReports:
    """What spawn_ranks collected: reports, {(rank, scenario): (problems, digests)}, and the ranks' exit codes."""

    def __init__(self, nranks, reports, exit_codes):
        self.nranks = nranks
        self.reports = reports
        self.exit_codes = exit_codes

    def check(self, test, scenario, same_digests=True):
        """Fails test unless every rank reported scenario without problems (and, with same_digests, with the same
        digests on every rank); a rank that did not report is named with the exit codes and what any rank raised."""
        for rank in range(self.nranks):
            report = self.reports.get((rank, scenario))
            if report is None:
                raised = [f"rank {r} at {s}: {p}" for (r, s), (p, _) in self.reports.items()
                          if any("raised" in x for x in p)]
                test.fail(f"rank {rank} did not report {scenario} (exit codes {self.exit_codes}); {raised}")
            test.assertEqual(report[0], [], f"rank {rank}, {scenario}")
        if same_digests:
            digests = [self.reports[(rank, scenario)][1] for rank in range(self.nranks)]
            test.assertTrue(all(d == digests[0] for d in digests), f"{scenario}: results differ between ranks")


def spawn_ranks(worker, nranks, scenarios, timeout_s, arguments=()):
    """Runs worker(SpawnedRank, *arguments) for every rank in a new process (multiprocessing's spawn: the ranks
    inherit no CUDA state) and collects their reports until each rank has sent as many as there are scenarios, all
    have exited, or timeout_s has passed; then joins them (terminating those still running) and returns the
    SpawnedReports."""
    context = multiprocessing.get_context("spawn")
    uid_queues = [context.Queue() for _ in range(nranks)]
    results = context.Queue()
    workers = [context.Process(target=worker, args=(SpawnedRank(rank, nranks, uid_queues, results), *arguments))
               for rank in range(nranks)]
    for process in workers:
        process.start()
    reports = {}
    deadline = time.monotonic() + timeout_s
    while len(reports) < nranks * len(scenarios) and time.monotonic() < deadline:
        try:
            rank, scenario, problems, digests = results.get(timeout=1)
            reports[(rank, scenario)] = (problems, digests)
        except queue.Empty:
            if all(not process.is_alive() for process in workers) and results.empty():
                break
    for process in workers:
        process.join(timeout=max(1, deadline - time.monotonic()))
        if process.is_alive():
            process.terminate()
            process.join(timeout=10)
    return SpawnedReports(nranks, reports, [process.exitcode for process in workers])


def gpu_test_main(run_rank=None, phases=None):
    """The __main__ of a GPU test with torch. As a rank of run_ranks (with --rank, or --phase where the test has
    phases): parses --rank and --dir (and --phase, one of phases), runs run_rank(rank, dir) (run_rank(phase, rank,
    dir)) and exits 0. Otherwise exits 77, which meson counts as a skip, without torch or a CUDA device, else runs
    the unittest cases of the file run."""
    if run_rank is not None and ("--phase" if phases else "--rank") in sys.argv:
        parser = argparse.ArgumentParser()
        if phases:
            parser.add_argument("--phase", choices=phases, required=True)
        parser.add_argument("--rank", type=int, required=True)
        parser.add_argument("--dir", required=True)
        arguments = parser.parse_args()
        if phases:
            run_rank(arguments.phase, arguments.rank, arguments.dir)
        else:
            run_rank(arguments.rank, arguments.dir)
        sys.exit(0)
    if torch_cuda_devices() < 1:
        print("SKIP: needs torch with a CUDA device", file=sys.stderr)
        sys.exit(77)
    unittest.main()
