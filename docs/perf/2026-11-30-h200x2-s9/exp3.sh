#!/usr/bin/env bash
# Ninth session, third device call: the reduce-scatter by the copy engines (FCCL_COPY_SCATTER_MIN) against
# cbca756 (base, unpacked in build-base-src and carried). Builds both, runs the tests that cover the copy path,
# then A/B at 4 MiB-1 GiB: base, new (copy from 64 MiB), new with the copy from 16 MiB.
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
(meson setup build-gpu --buildtype=release && ninja -C build-gpu) > /tmp/build-new.log 2>&1 &
(meson setup build-base build-base-src --buildtype=release && ninja -C build-base tools/all_reduce_perf) \
  > /tmp/build-base.log 2>&1 &
wait
for b in new base; do tail -2 /tmp/build-$b.log; done
timeout 200 meson test -C build-gpu --num-processes 1 --print-errorlogs allreduce_sweep_copy allreduce_large graph_copy \
  graph bench_check > "$OUT/tests.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests.log"
AB_MIN=4M AB_MAX=1G AB_TURNS=2 scripts/gpu-ab "$OUT/ab" base=build-base new=build-gpu \
  copy16=build-gpu,FCCL_COPY_SCATTER_MIN=16777216 | grep -v "^=== " | head -32
