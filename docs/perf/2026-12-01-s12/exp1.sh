#!/usr/bin/env bash
# Twelfth session, first call (one H200: the two-GPU kinds were not lent): compute-sanitizer over the collective
# tests, now with the full-size large cases (every scatter form of the registered two-shot) and the copy-engine
# scatter sweep; then forkcopy.cu (the copy-to-kernel edge, forked).
# usage: OUT=dir GIT_COMMIT=sha $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
{ echo "commit: ${GIT_COMMIT:-unknown}"; date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi -L; } > "$OUT/summary.txt"
meson setup build-gpu --buildtype=release > "$OUT/build.log" 2>&1 && ninja -C build-gpu >> "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
rm -f "$OUT/build.log"
nvcc -O3 -arch=sm_90 -o /tmp/forkcopy docs/perf/2026-12-01-s12/forkcopy.cu &&
  timeout 120 /tmp/forkcopy > "$OUT/forkcopy.txt" 2>&1
cat "$OUT/forkcopy.txt"
scripts/gpu-sanitize build-gpu "$OUT" >> "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
