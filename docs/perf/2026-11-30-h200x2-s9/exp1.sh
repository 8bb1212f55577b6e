#!/usr/bin/env bash
# Ninth session, first device call: the kernels compiled per rank bound (no spills) against the last commit
# of s8. Builds both (base: the s8 tree unpacked in build-base-src, carried), runs the all-reduce and graph
# tests of the new build, then A/B timing at 256 KiB-256 MiB in three turns.
# usage: OUT=dir $0 (repository root, base sources in build-base-src)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
(meson setup build-gpu --buildtype=release && ninja -C build-gpu) > /tmp/build-new.log 2>&1 &
(meson setup build-base build-base-src --buildtype=release && ninja -C build-base tools/all_reduce_perf) \
  > /tmp/build-base.log 2>&1 &
wait
for b in new base; do tail -2 /tmp/build-$b.log; done
timeout 150 meson test -C build-gpu --num-processes 1 --print-errorlogs allreduce_sweep allreduce_ranks3 \
  allreduce_ranks4 allreduce_ranks8 allreduce_large allreduce_wrap graph graph_ranks4 bench_check \
  > "$OUT/tests.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests.log"
AB_MIN=256K AB_MAX=256M AB_TURNS=3 scripts/gpu-ab "$OUT/ab" base=build-base new=build-gpu | grep -v "^=== " | head -40
