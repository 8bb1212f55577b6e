#!/usr/bin/env bash
# Eleventh session, calls 1-2 on nvidia-h200-x2: tmapush.cu (call 2 adds relaxed chunk flags), the chunked bulk-copy one-shot push against the plain one.
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
nvcc -O3 -arch=sm_90 -o /tmp/tmapush docs/perf/2026-11-30-h200x2-s11/tmapush.cu &&
  timeout 300 /tmp/tmapush 2>&1 | tee "$OUT/tmapush.txt"
