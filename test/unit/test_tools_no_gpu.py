#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every tool that needs a GPU says the same when there is none, with the same exit status: with CUDA_VISIBLE_DEVICES=''
(every GPU hidden, so this runs alike on machines with GPUs) each program given exits 2, writes nothing to standard
output, and writes one line to standard error, "PROGRAM: no GPU to run on: REASON" (tools/common/cuda_status.h). REASON
is the same for all of them and the one fccl-info gives on its "GPUs" line: "no NVIDIA driver found: ..." on a machine
without a driver (never CUDA's "driver version is insufficient"), else "no CUDA device visible:
CUDA_VISIBLE_DEVICES='' hides them all".

  test_tools_no_gpu.py --info build/tools/fccl-info --program NAME=PATH:FLAGS ...
"""
import argparse
import ctypes
import glob
import os
import re
import subprocess
import sys

failures = []


def driver_missing():
    nodes = os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/dxg") or glob.glob("/dev/nvidia[0-9]*")
    try:
        ctypes.CDLL("libcuda.so.1")
        library = True
    except OSError:
        library = False
    return not nodes or not library


def run(argv):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--info", required=True)
    parser.add_argument("--program", action="append", default=[], help="NAME=PATH[:FLAG,FLAG...]")
    args = parser.parse_args()
    info = run([args.info])
    match = re.search(r"^GPUs +: none found \((.*)\)$", info.stdout, re.M)
    if info.returncode != 0 or not match:
        print(f"FAIL fccl-info: exit {info.returncode}, no 'GPUs : none found (...)' line:\n{info.stdout}{info.stderr}")
        return 1
    reason = match.group(1)
    wanted = "no NVIDIA driver found" if driver_missing() else "no CUDA device visible: CUDA_VISIBLE_DEVICES='' hides"
    if not reason.startswith(wanted):
        failures.append(f"fccl-info says {reason!r}, want it to start with {wanted!r}")
    checked = 0
    for spec in args.program:
        name, rest = spec.split("=", 1)
        path, _, flags = rest.partition(":")
        result = run([path] + [flag for flag in flags.split(",") if flag])
        line = f"{name}: no GPU to run on: {reason}\n"
        if result.returncode != 2:
            failures.append(f"{name}: exit {result.returncode}, want 2 (stderr {result.stderr!r})")
        if result.stdout:
            failures.append(f"{name}: wrote to standard output: {result.stdout[:200]!r}")
        if result.stderr != line:
            failures.append(f"{name}: standard error {result.stderr!r}, want {line!r}")
        if "insufficient" in result.stderr:
            failures.append(f"{name}: repeats CUDA's 'driver version is insufficient'")
        checked += 1
    for failure in failures:
        print("FAIL " + failure)
    print(f"tools_no_gpu: {checked} programs, reason {reason!r}, {len(failures)} failures")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
