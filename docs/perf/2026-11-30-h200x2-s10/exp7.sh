#!/usr/bin/env bash
# Tenth session, last call on nvidia-h200-x2: the registered two-shot without UnitIO's per-access checks when every
# unit is whole and every buffer aligned, against 7ee48e0 (registered, 1-64 MiB, in turns), then the tests that
# cover both paths (the sweep's odd counts and misaligned offsets take the checked one).
# usage: OUT=dir $0 (repository root, the base tree unpacked in build-base-src)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
(meson setup build-gpu --buildtype=release && ninja -C build-gpu) > /tmp/build-gpu.log 2>&1 &
(meson setup build-base build-base-src --buildtype=release && ninja -C build-base tools/all_reduce_perf) \
  > /tmp/build-base.log 2>&1 &
wait
for b in gpu base; do tail -1 /tmp/build-$b.log; done
AB_MIN=1M AB_MAX=64M AB_TURNS=2 AB_BUFFERS=registered scripts/gpu-ab "$OUT/ab" base=build-base new=build-gpu |
  grep -v "^=== " | head -12
timeout 200 meson test -C build-gpu --num-processes 1 --print-errorlogs allreduce_sweep allreduce_sweep_copy \
  allreduce_large allreduce_ranks4 allreduce_ranks8 graph graph_register bench_check > "$OUT/tests.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests.log"
