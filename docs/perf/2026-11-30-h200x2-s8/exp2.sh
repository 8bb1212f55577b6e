#!/usr/bin/env bash
# Eighth session, second device call: phases.cu (batched reductions, PDL, parts), the collective tests that cover
# the one-shot push and the staged two-shot, and the library's automatic choice against the one-shot push forced
# (plain and registered) and without PDL, 1-16 MiB. usage (repository root, GPU machine): OUT=dir $0
set -uo pipefail
. scripts/env.sh
here=docs/perf/2026-11-30-h200x2-s8
(meson setup build-gpu --buildtype=release && ninja -C build-gpu) > "$OUT/build.log" 2>&1 &
nvcc -O3 -arch=sm_90 -o /tmp/phases "$here/phases.cu" && timeout 240 /tmp/phases ${PHASES_FILTER:-} | tee "$OUT/phases.txt"
wait || { tail -30 "$OUT/build.log"; exit 1; }
timeout 400 meson test -C build-gpu --num-processes 1 --print-errorlogs allreduce_sweep allreduce_ranks3 allreduce_ranks8 \
  allreduce_large allreduce_wrap graph graph_register bench_check > "$OUT/tests.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests.log"
AB_MIN=1M AB_MAX=16M AB_TURNS=2 scripts/gpu-ab "$OUT/ab" lib=build-gpu push=build-gpu,FCCL_ALGO=oneshot_push \
  nopdl=build-gpu,FCCL_PDL=0 | grep -v "^=== " | head -40
