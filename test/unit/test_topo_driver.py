#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fccl-info and fccl-topo agree about the CUDA driver on this machine (tools/common/cuda_status.c words it for both):
the same driver version, or, without GPUs, the same reason; and on a machine without an NVIDIA driver (no
/dev/nvidia* device node, or no libcuda.so.1) both say "no NVIDIA driver found" and neither repeats CUDA's
"driver version is insufficient".

  test_topo_driver.py --info build/tools/fccl-info --topo build/tools/fccl-topo
"""
import argparse
import ctypes
import glob
import json
import os
import re
import subprocess
import sys


def driver_missing():
    nodes = (os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/dxg") or glob.glob("/dev/nvidia[0-9]*"))
    try:
        ctypes.CDLL("libcuda.so.1")
        library = True
    except OSError:
        library = False
    return not nodes or not library


def run(argv):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout, result.stderr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--info", required=True)
    parser.add_argument("--topo", required=True)
    args = parser.parse_args()
    failures = []
    code, info, err = run([args.info])
    if code != 0:
        failures.append("fccl-info exited %d: %s" % (code, err.strip()))
    code, topo_json, err = run([args.topo, "--json"])
    if code != 0:
        failures.append("fccl-topo --json exited %d: %s" % (code, err.strip()))
    code, topo_human, err = run([args.topo])
    if code != 0:
        failures.append("fccl-topo exited %d: %s" % (code, err.strip()))
    if failures:
        for failure in failures:
            print("FAIL " + failure)
        return 1
    cuda = json.loads(topo_json)["cuda"]
    driver_line = re.search(r"^CUDA driver +: (.*)$", info, re.M)
    gpus_line = re.search(r"^GPUs +: (.*)$", info, re.M)
    if not driver_line or not gpus_line:
        failures.append("fccl-info has no 'CUDA driver' or 'GPUs' line:\n" + info)
    else:
        version = cuda["driver_version"]
        if version:
            want = "%d.%d" % (version // 1000, (version % 1000) // 10)
            if driver_line.group(1) != want:
                failures.append("fccl-info says driver %r, fccl-topo %r" % (driver_line.group(1), want))
        none = re.match(r"none found \((.*)\)$", gpus_line.group(1))
        if none and none.group(1) != cuda["status"]:
            failures.append("no GPU: fccl-info says %r, fccl-topo %r" % (none.group(1), cuda["status"]))
        if none and ("no GPU found (%s)" % none.group(1)) not in topo_human:
            failures.append("fccl-topo's report does not give fccl-info's reason %r" % none.group(1))
    if driver_missing():
        for name, text in (("fccl-info", info), ("fccl-topo", topo_human), ("fccl-topo --json", topo_json)):
            if "no NVIDIA driver found" not in text:
                failures.append("%s does not say 'no NVIDIA driver found' on a machine without a driver" % name)
            if "insufficient" in text:
                failures.append("%s repeats CUDA's 'driver version is insufficient' without a driver" % name)
    for failure in failures:
        print("FAIL " + failure)
    print("topo_driver: %d failures (%s)" % (len(failures), "no driver here" if driver_missing() else "a driver here"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
