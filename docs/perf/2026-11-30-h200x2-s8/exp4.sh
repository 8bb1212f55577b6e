#!/usr/bin/env bash
# Eighth session, fourth device call: phases.cu with the library's kernels as built now (element-by-element paths
# out of line), on the GPUs while the library builds, then scripts/gpu-check (suites and full benchmark).
# usage (repository root, GPU machine): OUT=dir GIT_COMMIT=sha $0
set -uo pipefail
. scripts/env.sh
root=$PWD
(cd docs/perf/2026-11-30-h200x2-s8 && nvcc -O3 -arch=sm_90 -DWITH_LIBRARY_KERNELS -I../../../src/device \
  -I../../../src/include -I../../../include -o /tmp/phases phases.cu &&
  timeout 200 /tmp/phases "${PHASES_FILTER:-push K=0,ts P=1,lib-}" > "$OUT/phases.txt" 2>&1) &
(meson setup build-gpu --buildtype=release && ninja -C build-gpu) > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
wait
cat "$OUT/phases.txt"
cd "$root" && FCCLTEST_CYCLES=1000 scripts/gpu-check
