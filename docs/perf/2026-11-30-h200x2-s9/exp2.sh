#!/usr/bin/env bash
# Ninth session, second device call: NVLink per direction with SM stores mixed with SM loads or with the copy
# engines (linkmix.cu). usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
cd docs/perf/2026-11-30-h200x2-s9 && nvcc -O3 -arch=sm_90 -o /tmp/linkmix linkmix.cu && timeout 240 /tmp/linkmix | tee "$OUT/linkmix.txt"
