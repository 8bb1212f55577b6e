#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The benchmark's -J document against nccl-tests' own: every member of the nccl-tests document recorded in
test/data/bench (written from nccl-tests' JSON writer, src/util.cu) must be in ours, under the same name and with
the same JSON type (integers and doubles are both numbers), at every level (each element of an array against the
first of nccl-tests'); fccl's own members may be added. Then a few values that readers of nccl-tests' files rely on.

  test_bench_json.py --writer build/test/unit/test_bench_json --recorded test/data/bench/nccl-tests-all_reduce_perf.json
  test_bench_json.py --writer ... --per-iter --recorded test/data/bench/nccl-tests-all_reduce_perf-per-iter.json

--per-iter: the writer's -I 1 -K 1 document (two processes) against nccl-tests' -I 1 -K 1 one, whose results carry
"out_of_place_per_iter" and "in_place_per_iter" with their statistics and series.
"""
import argparse
import json
import subprocess
import sys


def kind(value):
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if value is None:
        return "null"
    return {str: "string", list: "array", dict: "object"}[type(value)]


def compare(theirs, ours, path="$"):
    """Differences between nccl-tests' document and ours, as strings."""
    if kind(theirs) != kind(ours):
        return ["%s: nccl-tests has a %s (%r), fccl a %s (%r)" % (path, kind(theirs), theirs, kind(ours), ours)]
    problems = []
    if isinstance(theirs, dict):
        for key, value in theirs.items():
            if key not in ours:
                problems.append("%s: fccl lacks nccl-tests' member %r" % (path, key))
            else:
                problems += compare(value, ours[key], "%s.%s" % (path, key))
    elif isinstance(theirs, list) and theirs:
        # An empty array of ours has nothing to compare (fccl's "errors" is [] where nccl-tests writes
        # ncclGetLastError's empty string); the expected values below make sure the ones that matter are filled.
        for i, item in enumerate(ours):
            problems += compare(theirs[0], item, "%s[%d]" % (path, i))
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--writer", required=True)
    parser.add_argument("--recorded", required=True)
    parser.add_argument("--per-iter", action="store_true")
    args = parser.parse_args()
    with open(args.recorded) as handle:
        theirs = json.load(handle)
    written = subprocess.run([args.writer] + (["per-iter"] if args.per_iter else []), capture_output=True, text=True,
                             timeout=60)
    if written.returncode != 0:
        print("FAIL %s exited %d: %s" % (args.writer, written.returncode, written.stderr.strip()))
        return 1
    try:
        ours = json.loads(written.stdout)
    except ValueError as error:
        print("FAIL the benchmark's document is not JSON: %s\n%s" % (error, written.stdout))
        return 1
    problems = compare(theirs, ours)
    # The self-check: the comparison must see a renamed member and a changed type.
    broken = json.loads(written.stdout)
    broken["config"]["devices"][0]["host_name"] = broken["config"]["devices"][0].pop("hostname")
    broken["results"][0]["root"] = -1
    if len(compare(theirs, broken)) != 2:
        problems.append("the comparison does not notice a renamed member and a changed type")
    expected = [
        (ours.get("version"), 3, "version"),
        (len(ours["results"]), 2, "the number of results"),
        (ours["results"][0]["root"], "    -1", "results[0].root (nccl-tests writes the table's %6i text)"),
        (ours["config"]["blocking_collectives"], "false", "config.blocking_collectives (a string in nccl-tests)"),
        (ours["config"]["devices"][1], theirs["config"]["devices"][1], "config.devices[1]"),
        (ours["out_of_bounds"]["okay"], "true", "out_of_bounds.okay"),
        (ours["average_bus_bandwidth"]["okay"], "unchecked", "average_bus_bandwidth.okay"),
        (ours["env"], ["NCCL_DEBUG=WARN", "FCCL_DEBUG=INFO"], "env (the FCCL_*, NCCL_*, CUDA_* variables)"),
        (ours["comparison"]["engine"], "nccl", "comparison.engine"),
    ]
    if args.per_iter:
        stats = ours["results"][0]["out_of_place_per_iter"]
        expected += [
            (ours["config"]["per_iter_timing"], "true", "config.per_iter_timing (a string in nccl-tests)"),
            (ours["config"]["per_iter_skip"], 1, "config.per_iter_skip"),
            (stats["skipped_iterations"], 1, "results[0].out_of_place_per_iter.skipped_iterations"),
            ((stats["min_us"], stats["max_us"], stats["p99_us"]), (6.25, 7.0, 7.0), "the statistics of iterations 1..3"),
            (stats["times_us"], [8.5, 6.25, 6.5, 7.0], "times_us (every iteration)"),
            (len(stats["per_process_max_times_us"]), 2, "per_process_max_times_us (one series per process)"),
            ("in_place_per_iter" in ours["results"][1]["nccl"], True, "results[1].nccl.in_place_per_iter"),
        ]
    else:
        expected.append(("out_of_place_per_iter" in ours["results"][0], False, "per-iteration members without -I"))
    for got, want, what in expected:
        if got != want:
            problems.append("%s is %r, want %r" % (what, got, want))
    for problem in problems:
        print("FAIL " + problem)
    print("bench_json: %d differences from nccl-tests' document" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
