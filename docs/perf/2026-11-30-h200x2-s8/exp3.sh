#!/usr/bin/env bash
# Eighth session, third device call: the library's one-shot push and registered two-shot kernels run by phases.cu's
# harness beside its own stripped-down kernels. usage (repository root, GPU machine): OUT=dir $0
set -uo pipefail
. scripts/env.sh
cd docs/perf/2026-11-30-h200x2-s8 || exit 1
nvcc -O3 -arch=sm_90 -DWITH_LIBRARY_KERNELS -I../../../src/device -I../../../src/include -I../../../include \
  -o /tmp/phases phases.cu || exit 1
timeout 240 /tmp/phases "${PHASES_FILTER:-push K=0,pushb K=0 132,ts P=1,tsp P=2,lib-}" | tee "$OUT/phases.txt"
