#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/install-deps in made-up machines: a PATH of stand-ins (dpkg-query answering from a list, apt-get and sudo
recording their calls, id giving a chosen uid, nvcc giving a chosen release) and INSTALL_DEPS_ROOT for the toolkit
and NCCL files. Nothing is installed. Checks that it installs only what is missing, as root directly and otherwise
through sudo; says so and fails with neither; fails with a message on where to get CUDA when there is no toolkit (or
an old one); and warns, without failing, when NCCL is missing.

  test_install_deps.py --script scripts/install-deps
"""
import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile

PACKAGES = ["meson", "ninja-build", "pkg-config", "libhwloc-dev", "hwloc", "libssl3", "clang", "libclang-rt-14-dev",
            "clang-format-14", "gnuplot-nox", "python3", "python3-jsonschema", "python3-pip", "python3-setuptools",
            "python3-wheel"]
failures = []
passed = 0


def check(condition, what):
    global passed
    if condition:
        passed += 1
    else:
        failures.append(what)


def write_tool(path, body):
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def machine(scratch, installed, uid=0, sudo=False, cuda="13.0", cuda_on_path=False, nccl=("nccl.h", "libnccl.so")):
    """A directory tree for one case; returns the environment to run the script in."""
    top = tempfile.mkdtemp(dir=scratch)
    bin_dir = os.path.join(top, "bin")
    root = os.path.join(top, "root")
    os.makedirs(bin_dir)
    log = os.path.join(top, "calls.log")
    # The few real programs the script uses, and nothing else from this machine (no real sudo, apt-get or nvcc).
    for tool in ("grep", "sed", "head", "dirname", "cat"):
        os.symlink(shutil.which(tool), os.path.join(bin_dir, tool))
    write_tool(os.path.join(bin_dir, "dpkg-query"),
               'for p in %s; do [ "$p" = "$3" ] && { printf "install ok installed"; exit 0; }; done\nexit 1\n'
               % " ".join(installed or ["none"]))
    write_tool(os.path.join(bin_dir, "apt-get"), 'echo "apt-get $*" >> "%s"\n' % log)
    write_tool(os.path.join(bin_dir, "id"), "echo %d\n" % uid)
    if sudo:
        write_tool(os.path.join(bin_dir, "sudo"), 'echo "sudo $1" >> "%s"\n"$@"\n' % log)
    if cuda:
        cuda_dir = os.path.join(top, "toolkit") if cuda_on_path else os.path.join(root, "usr", "local", "cuda")
        os.makedirs(os.path.join(cuda_dir, "bin"))
        os.makedirs(os.path.join(cuda_dir, "include"))
        os.makedirs(os.path.join(cuda_dir, "lib64"))
        write_tool(os.path.join(cuda_dir, "bin", "nvcc"),
                   'echo "nvcc: NVIDIA (R) Cuda compiler driver"\necho "Cuda compilation tools, release %s, V%s.88"\n'
                   % (cuda, cuda))
        if "nccl.h" in nccl:
            open(os.path.join(cuda_dir, "include", "nccl.h"), "w").close()
        if "libnccl.so" in nccl:
            open(os.path.join(cuda_dir, "lib64", "libnccl.so"), "w").close()
    path = bin_dir + (":" + os.path.join(top, "toolkit", "bin") if cuda and cuda_on_path else "")
    env = {"PATH": path, "INSTALL_DEPS_ROOT": root, "HOME": top, "LC_ALL": "C"}
    return env, log


def run(script, env):
    result = subprocess.run(["/bin/bash", script], env=env, capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout, result.stderr


def calls(log):
    return open(log).read() if os.path.exists(log) else ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    script = parser.parse_args().script
    scratch = tempfile.mkdtemp(prefix="fccl-install-deps-")
    try:
        # Everything there: nothing to do, nothing said.
        env, log = machine(scratch, PACKAGES)
        code, out, err = run(script, env)
        check(code == 0 and err == "" and calls(log) == "", "ready machine: exit %d, %r, calls %r" % (code, err, calls(log)))

        # Root, two packages missing, no sudo on the machine: apt-get directly, only those two.
        env, log = machine(scratch, [p for p in PACKAGES if p not in ("hwloc", "python3-jsonschema")])
        code, out, err = run(script, env)
        made = calls(log)
        check(code == 0, "root: exit %d: %s" % (code, err))
        check("apt-get update" in made and "install -y -qq --no-install-recommends hwloc python3-jsonschema" in made
              and "sudo" not in made, "root: apt-get calls %r" % made)
        check("installing: hwloc python3-jsonschema" in err, "root: does not say what it installs: %r" % err)

        # Not root, sudo there: through sudo.
        env, log = machine(scratch, [p for p in PACKAGES if p != "meson"], uid=1000, sudo=True)
        code, out, err = run(script, env)
        made = calls(log)
        check(code == 0 and "sudo apt-get" in made and "install -y -qq --no-install-recommends meson" in made,
              "sudo: exit %d, calls %r" % (code, made))

        # Not root and no sudo: says so, names the packages, installs nothing, fails.
        env, log = machine(scratch, [p for p in PACKAGES if p not in ("clang", "meson")], uid=1000)
        code, out, err = run(script, env)
        check(code == 1, "neither root nor sudo: exit %d" % code)
        check("neither root nor has sudo" in err and "clang" in err and "meson" in err,
              "neither root nor sudo: message %r" % err)
        check(calls(log) == "", "neither root nor sudo: called %r" % calls(log))

        # No CUDA toolkit: an error that says where it comes from.
        env, log = machine(scratch, PACKAGES, cuda=None)
        code, out, err = run(script, env)
        check(code == 1, "no toolkit: exit %d" % code)
        check("error: no CUDA toolkit" in err and "NVIDIA's CUDA repository" in err and "cuda-toolkit" in err
              and "CUDA_HOME" in err, "no toolkit: message %r" % err)

        # The toolkit found through PATH, and one that is too old.
        env, log = machine(scratch, PACKAGES, cuda_on_path=True)
        code, out, err = run(script, env)
        check(code == 0 and err == "", "nvcc on PATH: exit %d, %r" % (code, err))
        env, log = machine(scratch, PACKAGES, cuda="12.4")
        code, out, err = run(script, env)
        check(code == 1 and "CUDA 12.4; fccl needs 12.8 or newer" in err, "CUDA 12.4: exit %d, %r" % (code, err))

        # No NCCL, or half of it: a warning (exit 0) that says what the build lacks and where NCCL comes from.
        for present, absent in (((), "nccl.h libnccl.so"), (("nccl.h",), "libnccl.so"), (("libnccl.so",), "nccl.h")):
            env, log = machine(scratch, PACKAGES, nccl=present)
            code, out, err = run(script, env)
            check(code == 0, "NCCL without %s: exit %d" % (absent, code))
            check("warning: no NCCL (%s not found" % absent in err and "no NCCL comparison" in err
                  and "libnccl2 libnccl-dev" in err, "NCCL without %s: message %r" % (absent, err))

        # Every message is the script's, on standard error.
        check(out == "", "wrote to standard output: %r" % out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for failure in failures:
        print("FAIL " + failure)
    print("install_deps: %d passed, %d failed" % (passed, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
