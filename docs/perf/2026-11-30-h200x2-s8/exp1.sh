#!/usr/bin/env bash
# Eighth session, first device call: phases.cu (all variants) and the library's automatic choice at 1-64 MiB
# beside it, on the same machine. usage (repository root, on the GPU machine): OUT=dir docs/perf/2026-11-30-h200x2-s8/exp1.sh
set -uo pipefail
. scripts/env.sh
here=docs/perf/2026-11-30-h200x2-s8
(meson setup build-gpu --buildtype=release && ninja -C build-gpu) > "$OUT/build.log" 2>&1 &
nvcc -O3 -arch=sm_90 -o /tmp/phases "$here/phases.cu" && timeout 240 /tmp/phases ${PHASES_FILTER:-} | tee "$OUT/phases.txt"
wait
AB_MIN=1M AB_MAX=64M AB_TURNS=1 scripts/gpu-ab "$OUT/ab" lib=build-gpu | tail -20
