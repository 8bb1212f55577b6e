#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nccl-tests' newer flags through all_reduce_perf on the GPUs of this machine (two ranks; with one GPU they share it):

  periter   -I 1 -K 2: nccl-tests' per-iteration header line and i_min/i_max/i_p99/i_cv% columns (i_min <= i_p99 <=
            i_max, all positive), the JSON's out_of_place_per_iter/in_place_per_iter (every iteration in times_us, the
            first two skipped, one series per process) and the CSV's i_* columns; -I under -G is turned off with
            nccl-tests' warning and the run goes on.
  forever   -N 0: rows of several cycles, then SIGINT to the launcher alone (kill PID), and again with SIGINT to the
            whole process group (Ctrl-C): each time exit status 0, "# Stopped on a signal", the footer, a whole JSON
            document and CSV with every printed row.
  defaults  nccl-tests' defaults -x 0 and -V 16 accepted, -z 3 -G 2 warned about and run as -G 2, checked clean.

Skips (77) when the program says there is no GPU. Every run is bounded; nothing asserts on time.

  test_bench_features.py build/tools/all_reduce_perf MODE
"""
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
        return max(1, sum(1 for line in out.splitlines() if line.startswith("GPU ")))
    except (OSError, subprocess.SubprocessError):
        return 1


def ranks():
    return ["-np", "2"] + (["--share-gpu"] if gpu_count() < 2 else [])


def run(program, flags, timeout=300):
    result = subprocess.run([program] + flags, capture_output=True, text=True, timeout=timeout)
    if result.returncode == 2 and ": no GPU to run on: " in result.stderr:
        print("SKIP: " + result.stderr.strip())
        sys.exit(77)
    return result


def rows(text):
    return [line.split() for line in text.splitlines() if line and not line.startswith("#")]


def mode_periter(program, scratch):
    out_json, out_csv = os.path.join(scratch, "p.json"), os.path.join(scratch, "p.csv")
    flags = ranks() + ["-b", "8", "-e", "1M", "-f", "32", "-n", "20", "-w", "2", "-I", "1", "-K", "2", "--progress", "0",
                       "-J", out_json, "--csv", out_csv]
    result = run(program, flags)
    check(result.returncode == 0, f"-I 1 -K 2: exit {result.returncode}: {result.stderr}")
    check("# Per-Iteration Report: CUDA event timing; i_* uses max over process rows; summary skips first 2 "
          "iterations \n" in result.stdout, "-I: no per-iteration report line:\n" + result.stdout)
    check("i_min    i_max    i_p99    i_cv%" in result.stdout, "-I: no i_* column headers:\n" + result.stdout)
    table = rows(result.stdout)
    check(len(table) == 4, f"-I: {len(table)} rows, want 4 (8 B .. 1 MiB by 32)")
    for row in table:
        check(len(row) == 21, f"-I: row of {len(row)} fields, want 21: {row}")
        if len(row) != 21:
            continue
        for first in (9, 17):  # i_min, i_max, i_p99, i_cv% after each placement's #wrong
            low, high, p99, cv = (float(row[first + k]) for k in range(4))
            check(0 < low <= p99 <= high and cv >= 0, f"-I: i_min {low} i_p99 {p99} i_max {high} i_cv% {cv}: {row}")
        check(row[8] == "0" and row[16] == "0", f"-I: wrong results: {row}")
    document = json.load(open(out_json))
    check(document["config"]["per_iter_timing"] == "true" and document["config"]["per_iter_skip"] == 2,
          "-I: config.per_iter_timing/per_iter_skip")
    for result_row in document["results"]:
        for place in ("out_of_place", "in_place"):
            stats = result_row.get(place + "_per_iter")
            check(stats is not None, f"-I: no {place}_per_iter in a JSON result")
            if stats:
                check(len(stats["times_us"]) == 20 and stats["skipped_iterations"] == 2,
                      f"-I: {place}_per_iter: {len(stats['times_us'])} times, {stats['skipped_iterations']} skipped")
                check(stats["min_us"] <= stats["p50_us"] <= stats["p95_us"] <= stats["p99_us"] <= stats["max_us"],
                      f"-I: {place}_per_iter statistics out of order: {stats}")
                check(max(stats["times_us"][2:]) == stats["max_us"], f"-I: max_us is not the largest counted time")
                check(len(stats.get("per_process_max_times_us", [])) == 2, "-I: not one series per process")
    with open(out_csv) as handle:
        lines = list(csv.DictReader(handle))
    check(len(lines) == 8 and all(line["i_p99_us"] for line in lines), f"-I: CSV i_* columns: {lines[:1]}")
    # -I under -G: turned off with nccl-tests' warning, the run goes on.
    result = run(program, ranks() + ["-b", "8", "-e", "8", "-n", "5", "-G", "2", "-I", "1", "--progress", "0"])
    check(result.returncode == 0 and "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling."
          in result.stderr and "i_p99" not in result.stdout, f"-I -G: {result.returncode} {result.stderr}")


def stop_forever(program, scratch, whole_group):
    out_json, out_csv = os.path.join(scratch, "f.json"), os.path.join(scratch, "f.csv")
    flags = ranks() + ["-b", "8", "-e", "64K", "-f", "8", "-n", "5", "-w", "1", "-N", "0", "--progress", "0",
                       "-J", out_json, "--csv", out_csv]
    process = subprocess.Popen([program] + flags, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    seen, lines = 0, []
    deadline = time.monotonic() + 240
    # Three cycles and more of the five sizes (8 B .. 32 KiB by 8), then the signal.
    while seen < 18 and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        seen += 0 if line.startswith("#") else 1
    what = "SIGINT to the process group" if whole_group else "SIGINT to the launcher"
    check(seen >= 18, f"-N 0 ({what}): {seen} rows before the signal:\n" + "".join(lines))
    if whole_group:
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGINT)
    try:
        rest, errors = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        rest, errors = process.communicate()
        check(False, f"-N 0 ({what}): still running 120 s after the signal")
    text = "".join(lines) + rest
    check(process.returncode == 0, f"-N 0 ({what}): exit {process.returncode}: {errors}")
    check("# Stopped on a signal (-N 0) after " in text and "# Out of bounds values : 0 OK" in text and
          "# Collective test concluded: all_reduce_perf" in text, f"-N 0 ({what}): no stop line or footer:\n{text}")
    table = rows(text)
    try:
        document = json.load(open(out_json))
    except (OSError, ValueError) as error:
        check(False, f"-N 0 ({what}): the JSON file: {error}")
        return
    check(len(document["results"]) == len(table), f"-N 0 ({what}): {len(document['results'])} JSON results for "
          f"{len(table)} rows")
    check(document["config"]["run_cycles"] == 0 and max(r["cycle"] for r in document["results"]) >= 2,
          f"-N 0 ({what}): cycles in the JSON")
    with open(out_csv) as handle:
        check(len(list(csv.DictReader(handle))) == 2 * len(table), f"-N 0 ({what}): CSV lines")


def mode_forever(program, scratch):
    # A short ordinary run first: without a GPU this is where the test skips.
    result = run(program, ranks() + ["-b", "8", "-e", "8", "-n", "1", "--progress", "0"])
    check(result.returncode == 0, f"a one-size run: exit {result.returncode}: {result.stderr}")
    stop_forever(program, scratch, whole_group=False)
    stop_forever(program, scratch, whole_group=True)


def mode_defaults(program, scratch):
    result = run(program, ranks() + ["-b", "8", "-e", "64K", "-f", "8", "-n", "5", "-x", "0", "-V", "16", "-z", "3",
                                     "-G", "2", "--progress", "0"])
    check(result.returncode == 0, f"-x 0 -V 16 -z 3 -G 2: exit {result.returncode}: {result.stderr}")
    check("blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling." in result.stderr,
          "-z 3 -G 2: no warning: " + result.stderr)
    check("graph: 2" in result.stdout and "Blocking Enabled" not in result.stdout, "-z 3 -G 2: not run as -G 2")
    table = rows(result.stdout)
    check(len(table) == 5 and all(row[8] == "0" and row[12] == "0" for row in table), f"-z 3 -G 2 rows: {table}")


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("periter", "forever", "defaults"):
        print(__doc__, file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="fccl-bench-features-") as scratch:
        {"periter": mode_periter, "forever": mode_forever, "defaults": mode_defaults}[sys.argv[2]](sys.argv[1], scratch)
    print(f"bench_{sys.argv[2]}: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
