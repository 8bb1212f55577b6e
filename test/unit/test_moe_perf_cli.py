#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""moe_perf from outside (docs/benchmark.md#moe_perf).

Without --gpu-run, with every GPU hidden (CUDA_VISIBLE_DEVICES=''), so that it runs alike on any machine: --help and
-h print the usage (exit 0); every flag the usage lists is accepted with a good value, which gets the program past
its parser to the tools' one line "moe_perf: no GPU to run on: REASON" (exit 2, nothing on standard output), so the
usage lists nothing the program does not honour; the flags of the nccl-tests programs it does not take, bad values
and an output file that cannot be written are refused with exit 2 and a message before anything runs.

With --gpu-run DIR (the gpu suite): a short run on 2 ranks with -J and --csv; the JSON parses, holds one result per
token count with nwrong 0 and every op's time, its out_of_bounds count is 0; the CSV has the benchmarks' header and a
row per op and token count. Exit 77 when the program finds no GPU.

  test_moe_perf_cli.py --program build/tools/moe_perf [--gpu-run DIR]
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

failures = []

# A good value for every flag the usage may list; a flag listed but missing here fails the test, so that a new flag
# gets a value (and with it the proof that the parser takes it).
GOOD = {"-g": "2", "-t": "1,64", "-H": "1024", "-k": "4", "-e": "4", "-f": "1", "-b": "2", "-n": "2", "-w": "1",
        "-i": "3", "-G": "0", "--cudagraph": "2", "-c": "0", "--check": "1", "-J": "{dir}/out.json",
        "--output_file": "{dir}/out.json", "--csv": "{dir}/out.csv", "--compare": "nccl", "-h": None, "--help": None}
# nccl-tests' flags moe_perf has no use for, and fccl's benchmark flags it does not take.
REFUSED = [["-d", "float"], ["-o", "sum"], ["-r", "0"], ["-z", "1"], ["-I", "1"], ["-N", "0"], ["-a", "1"],
           ["-T", "10"], ["-R", "1"], ["-u", "1"], ["-np", "2"], ["--max-ctas", "8"], ["--path", "fccl"],
           ["--hosts", "2"], ["--share-gpu"], ["--progress", "1"], ["extra"]]
BAD = [["-H", "100"], ["-H", "131072"], ["-k", "9"], ["-k", "0"], ["-t", "0,4"], ["-t", "1,x"], ["-t", "4,"],
       ["-t", ",".join(["1"] * 17)], ["-f", "2"], ["-G", "-1"], ["-c", "2"], ["-g", "9"], ["-n", "0"], ["-e", "x"],
       ["--compare", "mpi"], ["-J", "/nonexistent-dir/out.json"], ["--csv", "/nonexistent-dir/out.csv"], ["-H"]]


def run(argv, hide=True):
    env = dict(os.environ)
    if hide:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def listed_flags(usage):
    flags = set()
    for line in usage.splitlines():
        match = re.match(r"^\s+(-[A-Za-z])?(?:,)?(--[a-z_-]+)?\s", line)
        if match:
            flags.update(flag for flag in match.groups() if flag)
    return flags


def check_no_gpu(program, directory):
    for flag in ("--help", "-h"):
        result = run([program, flag])
        if result.returncode != 0 or not result.stdout.startswith("usage:"):
            failures.append(f"{flag}: exit {result.returncode}, stdout {result.stdout[:80]!r}")
    usage = run([program, "--help"]).stdout
    flags = listed_flags(usage)
    if len(flags) < 10:
        failures.append(f"--help lists only {sorted(flags)}")
    for flag in sorted(flags):
        if flag not in GOOD:
            failures.append(f"--help lists {flag}, which this test has no value for")
            continue
        if GOOD[flag] is None:
            continue
        argv = [program, flag, GOOD[flag].format(dir=directory)]
        result = run(argv)
        if result.returncode != 2 or result.stdout or not re.fullmatch(r"moe_perf: no GPU to run on: .+\n",
                                                                       result.stderr):
            failures.append(f"{argv[1:]}: exit {result.returncode}, stdout {result.stdout!r}, stderr {result.stderr!r}"
                            " (want the parser to take it and the no-GPU line, exit 2)")
    for flag in sorted(set(GOOD) - flags):
        failures.append(f"{flag} is not in --help")
    for argv in REFUSED + BAD:
        result = run([program] + argv)
        if result.returncode != 2 or "no GPU to run on" in result.stderr or not result.stderr.startswith("moe_perf: "):
            failures.append(f"{argv}: exit {result.returncode}, stderr {result.stderr[:200]!r} (want a refusal, exit 2)")
    for name in ("out.json", "out.csv"):
        if os.path.exists(os.path.join(directory, name)):
            failures.append(f"{name} was written without a GPU")
    result = run([program])
    if result.returncode != 2 or result.stdout or result.stderr.count("\n") != 1:
        failures.append(f"no flags: exit {result.returncode}, stdout {result.stdout!r}, stderr {result.stderr!r}")


def check_gpu_run(program, directory):
    json_path, csv_path = os.path.join(directory, "moe.json"), os.path.join(directory, "moe.csv")
    argv = [program, "-g", "2", "-t", "1,64", "-H", "1024", "-k", "4", "-e", "4", "-n", "2", "-w", "1", "-i", "3",
            "-G", "2", "--compare", "nccl", "-J", json_path, "--csv", csv_path]
    result = run(argv, hide=False)
    print(result.stdout, end="")
    print(result.stderr, end="", file=sys.stderr)
    if result.returncode == 2 and "no GPU to run on" in result.stderr:
        print("SKIP: no GPU")
        sys.exit(77)
    if result.returncode != 0:
        failures.append(f"moe_perf exited {result.returncode}")
        return
    with open(json_path) as f:
        document = json.load(f)
    results = document.get("results", [])
    if document.get("tool") != "moe_perf" or [r.get("tokens") for r in results] != [1, 64]:
        failures.append(f"-J: tool {document.get('tool')!r}, tokens {[r.get('tokens') for r in results]}")
    for r in results:
        ops = [op for op in ("dispatch", "combine", "all_gather", "reduce_scatter") if op in r]
        if r.get("nwrong") != 0 or len(ops) != 4 or any(r[op]["time"] <= 0 for op in ops):
            failures.append(f"-J: result {r}")
    if document.get("out_of_bounds", {}).get("count") != 0 or document.get("errors"):
        failures.append(f"-J: out_of_bounds {document.get('out_of_bounds')}, errors {document.get('errors')}")
    with open(csv_path) as f:
        rows = list(csv.reader(f))
    header = ("collective,engine,buffers,graph,nranks,size,count,type,redop,placement,time_us,algbw_gbs,busbw_gbs,"
              "wrong,i_min_us,i_max_us,i_p99_us,i_cv_pct").split(",")
    if not rows or rows[0] != header:
        failures.append(f"--csv header {rows[:1]}")
        return
    body = [dict(zip(header, row)) for row in rows[1:]]
    fccl_rows = [row for row in body if row["engine"] == "fccl"]
    if len(fccl_rows) != 8 or any(row["collective"] != "moe_perf" or row["graph"] != "2" for row in body):
        failures.append(f"--csv rows {body}")
    if any(row["wrong"] != "0" for row in fccl_rows if row["placement"] in ("dispatch", "combine")):
        failures.append("--csv: a checked row has wrong elements")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--program", required=True)
    parser.add_argument("--gpu-run", metavar="DIR")
    args = parser.parse_args()
    if args.gpu_run:
        os.makedirs(args.gpu_run, exist_ok=True)
        check_gpu_run(args.program, args.gpu_run)
    else:
        with tempfile.TemporaryDirectory() as directory:
            check_no_gpu(args.program, directory)
    for failure in failures:
        print("FAIL", failure)
    print("ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
