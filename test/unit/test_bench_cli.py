#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The benchmark's command line from outside, without a GPU: scripts/bench says plainly that there is nothing to run
on (before installing or building anything) and exits 2; the programs given (all_reduce_perf, all_gather_perf,
reduce_scatter_perf, broadcast_perf, reduce_perf, gather_perf, scatter_perf, sendrecv_perf, alltoall_perf,
barrier_perf) reject bad flags, unwritable output
files, inconsistent launcher variables and a machine without a visible GPU with exit status 2 and one line on standard
error that names the program, and write nothing to standard output (that is for the table); every flag a program's
--help lists gets past its parser, and barrier_perf refuses the nccl-tests flags it has no use for. CUDA_VISIBLE_DEVICES='' hides every GPU, so the no-GPU paths run the same on a machine with GPUs. scripts/plot-perf
reports a missing or malformed CSV in one line.

  test_bench_cli.py --script scripts/bench [--plot scripts/plot-perf] [--program build/tools/all_reduce_perf ...]
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

failures = 0
passed = 0


def check(condition, what):
    global failures, passed
    if condition:
        passed += 1
    else:
        failures += 1
        print(f"FAIL: {what}", file=sys.stderr)


def run(command, env_changes, timeout=60):
    env = dict(os.environ)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    start = time.monotonic()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    return result, time.monotonic() - start


def expect_refusal(command, env_changes, program, needle, code=2):
    result, _ = run(command, env_changes)
    what = " ".join(command)
    check(result.returncode == code, f"{what}: exit {result.returncode}, want {code} (stderr: {result.stderr!r})")
    check(result.stdout == "", f"{what}: wrote to standard output: {result.stdout[:200]!r}")
    check(result.stderr.startswith(program + ": "), f"{what}: the message does not name {program}: {result.stderr!r}")
    check(needle in result.stderr, f"{what}: the message does not say {needle!r}: {result.stderr!r}")
    check(result.stderr.count("\n") == 1, f"{what}: not one line on standard error: {result.stderr!r}")


def check_script(script):
    # A build directory that must not appear: the script gives up before installing or building.
    scratch = tempfile.mkdtemp(prefix="fccl-bench-cli-")
    build = os.path.join(scratch, "build")
    try:
        cases = [("hidden", {"CUDA_VISIBLE_DEVICES": ""}, "CUDA_VISIBLE_DEVICES='' hides every GPU"),
                 ("hidden -1", {"CUDA_VISIBLE_DEVICES": "-1"}, "hides every GPU")]
        if not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/dxg") and not shutil.which("nvidia-smi"):
            cases.append(("this machine", {"CUDA_VISIBLE_DEVICES": None}, "no NVIDIA GPU device"))
        for name, env, needle in cases:
            env = dict(env, BUILDDIR=build)
            result, seconds = run([script, "-G", "20"], env)
            check(result.returncode == 2, f"scripts/bench ({name}): exit {result.returncode}, want 2: {result.stderr!r}")
            check(result.stdout == "", f"scripts/bench ({name}): wrote to standard output: {result.stdout[:200]!r}")
            check(result.stderr.startswith("bench: no GPU to run on: ") and needle in result.stderr,
                  f"scripts/bench ({name}): message {result.stderr!r} does not say {needle!r}")
            check(not os.path.exists(build) and seconds < 10,
                  f"scripts/bench ({name}): built or installed before saying there is no GPU ({seconds:.1f} s)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# A value each of nccl-tests' flags takes, for the runs that must get past the parser (to "no GPU to run on").
GOOD_VALUES = {"-t": "1", "-g": "1", "-b": "8", "-e": "64M", "-i": "8", "-f": "2", "-n": "1", "-w": "0", "-N": "1",
               "-c": "1", "-d": "float", "-o": "sum", "-r": "0", "-z": "0", "-G": "0", "-I": "1", "-K": "0", "-a": "1",
               "-T": "10", "-u": "0", "-R": "0", "-C": "0", "-S": "0", "-M": "0", "-p": "1", "-m": "1", "-y": "0",
               "-x": "0", "-D": "0", "-V": "16"}


def expect_no_gpu(command, env_changes, program, notices=()):
    """The flags get past the parser: the program's notices (nccl-tests' "... Disabling." lines), then no GPU."""
    result, _ = run(command, env_changes)
    what = " ".join(command)
    lines = result.stderr.splitlines()
    check(result.returncode == 2 and result.stdout == "", f"{what}: exit {result.returncode}: {result.stderr!r}")
    check(len(lines) == len(notices) + 1 and lines[-1].startswith(program + ": no GPU to run on: "),
          f"{what}: standard error {result.stderr!r}")
    for line, notice in zip(lines, notices):
        check(line == f"{program}: {notice}", f"{what}: {line!r}, want {program}: {notice}")


def listed_flags(usage):
    """The flags --help lists as honoured: its option lines before "accepted ... without effect" and "fccl's own"."""
    honoured = usage.split("accepted as nccl-tests accepts them")[0].split("fccl's own:")[0]
    return set(re.findall(r"^  (-[A-Za-z]),--", honoured, re.M))


def check_program(path):
    program = os.path.basename(path)
    barrier = program == "barrier_perf"  # not one of nccl-tests' programs: no sizes, types, ops, root or -I
    no_gpu = {"CUDA_VISIBLE_DEVICES": ""}
    help_result, _ = run([path, "--help"], no_gpu)
    check(help_result.returncode == 0 and f"USAGE: {program}" in help_result.stdout and help_result.stderr == "",
          f"{program} --help: exit {help_result.returncode}, stderr {help_result.stderr!r}")
    # --help lists only what the program honours: every flag it lists gets past the parser; barrier_perf refuses
    # every nccl-tests flag it does not list.
    listed = listed_flags(help_result.stdout)
    check("-n" in listed and "-G" in listed, f"{program} --help: no -n or -G among {sorted(listed)}")
    for flag in sorted(listed):
        with tempfile.TemporaryDirectory() as scratch:
            value = os.path.join(scratch, "out.json") if flag == "-J" else GOOD_VALUES.get(flag)
            if value is None:
                check(False, f"{program} --help lists {flag}, which this test has no value for")
                continue
            expect_no_gpu([path, flag, value], no_gpu, program)
    if barrier:
        for flag in sorted(set(GOOD_VALUES) - listed):
            expect_refusal([path, flag, GOOD_VALUES[flag]], no_gpu, program, f"{flag} does not apply to this program")
        check(listed - {"-J"} == set(GOOD_VALUES) - {"-b", "-e", "-i", "-f", "-c", "-d", "-o", "-r", "-u", "-R", "-I", "-K",
                                            "-p", "-m", "-y", "-x", "-D", "-V"},
              f"barrier_perf --help lists {sorted(listed)}")
    else:
        check("-b" in listed and "-I" in listed and "-K" in listed, f"{program} --help lists {sorted(listed)}")
    expect_refusal([path, "-q"], no_gpu, program, "unknown flag '-q'")
    expect_refusal([path, "-n", "ten"], no_gpu, program, "'ten' is not an integer")
    expect_refusal([path, "-z", "4"], no_gpu, program, "3 (wait and barrier, the barrier not timed), not 4")
    expect_refusal([path, "-z", "1", "-G", "2"], no_gpu, program, "use one or the other")
    expect_refusal([path, "-N", "-1"], no_gpu, program, "0 (until SIGINT or SIGTERM) to 100000")
    expect_refusal([path, "-T", "100000"], no_gpu, program, "86400")
    expect_refusal([path, "-J", "/nonexistent/dir/out.json"], no_gpu, program, "cannot write /nonexistent/dir/out.json")
    expect_refusal([path, "--csv", "/"], no_gpu, program, "is a directory")
    expect_refusal([path], {"CUDA_VISIBLE_DEVICES": "", "WORLD_SIZE": "2", "RANK": None}, program,
                   "RANK is missing")
    expect_refusal([path, "-n", "1"], no_gpu, program, "no GPU to run on")
    # -N 0 (until a signal) and -z 3 get past the parser, to the GPU count; -z 3 under -G is turned off as nccl-tests
    # does, saying so in its words.
    expect_no_gpu([path, "-N", "0", "-z", "3", "-S", "1", "-M", "1", "-C", "1"], no_gpu, program)
    expect_no_gpu([path, "-z", "3", "-G", "5"], no_gpu, program,
                  ["blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling."])
    if barrier:
        expect_refusal([path, "--max-ctas", "8"], no_gpu, program, "--max-ctas does not apply to this program")
        return
    # --max-ctas: a list of budgets gets past the parser; the libraries' own variables, which would override every
    # budget, are refused (0 and below, which both ignore, are not); -J's per-budget files must be writable too.
    expect_no_gpu([path, "--max-ctas", "8,16,32"], no_gpu, program)
    expect_no_gpu([path, "--max-ctas", "8"], dict(no_gpu, FCCL_MAX_CTAS="0", NCCL_MAX_CTAS="4"), program)
    expect_refusal([path, "--max-ctas", "8,0"], no_gpu, program, "'0': a block count is 1 to 65535")
    expect_refusal([path, "--max-ctas", "8", "-N", "0"], no_gpu, program, "--max-ctas with -N 0")
    expect_refusal([path, "--max-ctas", "8"], dict(no_gpu, FCCL_MAX_CTAS="4"), program,
                   "--max-ctas: FCCL_MAX_CTAS=4 overrides every communicator's maxCTAs")
    expect_refusal([path, "--max-ctas", "8", "--compare", "nccl"], dict(no_gpu, NCCL_MAX_CTAS="4"), program,
                   "NCCL_MAX_CTAS=4 overrides")
    with tempfile.TemporaryDirectory() as scratch:
        os.mkdir(os.path.join(scratch, "out.max-ctas-16.json"))
        expect_refusal([path, "--max-ctas", "8,16", "-J", os.path.join(scratch, "out.json")], no_gpu, program,
                       "out.max-ctas-16.json is a directory")
    # nccl-tests' defaults for NCCL's own flags get past; other values say why not, rather than "unknown flag".
    expect_no_gpu([path, "-I", "1", "-K", "2", "-x", "0", "-V", "16", "-y", "0", "-D", "0", "-m", "1"], no_gpu, program)
    expect_no_gpu([path, "-I", "1", "-G", "3", "-K", "2"], no_gpu, program,
                  ["per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.",
                   "per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling."])
    expect_no_gpu([path, "-I", "1", "-n", "5", "-K", "5"], no_gpu, program,
                  ["per-iteration skip (-K) must be between 0 and 4. Disabling."])
    expect_refusal([path, "-I", "2"], no_gpu, program, "0 or 1, not 2")
    expect_refusal([path, "-y", "1"], no_gpu, program, "NULL stream is not supported")
    expect_refusal([path, "-x", "1"], no_gpu, program, "CTA policies (1 efficiency, 2 zero) are not supported")
    expect_refusal([path, "-V", "32"], no_gpu, program, "only -V 16")
    expect_refusal([path, "-b", "nan"], no_gpu, program, "not a size")
    expect_refusal([path, "-r", "-1"], no_gpu, program, "the root cannot be negative")
    expect_refusal([path, "-o", "mean"], no_gpu, program, "unknown reduction 'mean'")
    expect_refusal([path, "-d", "complex64"], no_gpu, program, "unknown datatype 'complex64'")


def check_plot(plot):
    """scripts/plot-perf: a missing or malformed CSV is one line on standard error and exit 1, not a traceback."""
    scratch = tempfile.mkdtemp(prefix="fccl-plot-cli-")
    try:
        malformed = os.path.join(scratch, "bad.csv")
        with open(malformed, "w") as handle:
            handle.write("collective,engine,buffers,graph,nranks,size,count,type,redop,placement,time_us,algbw_gbs,"
                         "busbw_gbs,wrong\nall_reduce_perf,fccl,plain,x,2,8,2,bfloat16,sum,out-of-place,1,1,1,0\n")
        for path, needle in ((os.path.join(scratch, "missing.csv"), "cannot read"), (malformed, "bad.csv:2:")):
            result, _ = run([plot, path, "-o", scratch], {})
            what = f"plot-perf {os.path.basename(path)}"
            check(result.returncode == 1, f"{what}: exit {result.returncode}, want 1")
            if shutil.which("gnuplot"):
                check(result.stderr.startswith("plot-perf: ") and needle in result.stderr
                      and "Traceback" not in result.stderr, f"{what}: message {result.stderr!r}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    parser.add_argument("--plot")
    parser.add_argument("--program", action="append", default=[])
    args = parser.parse_args()
    check_script(args.script)
    if args.plot:
        check_plot(args.plot)
    for program in args.program:
        check_program(program)
    print(f"bench_cli: {passed} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
