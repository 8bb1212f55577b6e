#!/usr/bin/env bash
# Tenth session, last calls on nvidia-h200-x2: copycost.cu, the parts of the copy-engine reduce-scatter's fixed cost
# (4b00d22), then the same with stream memory operations before the copy (the next commit).
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
nvcc -O3 -arch=sm_90 -o /tmp/copycost docs/perf/2026-11-30-h200x2-s10/copycost.cu &&
  timeout 120 /tmp/copycost | tee "$OUT/copycost.txt"
