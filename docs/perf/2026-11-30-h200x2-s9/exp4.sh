#!/usr/bin/env bash
# Ninth session, last device call: the push scatter in two parts up to 8 grid rows per block (16 MiB, the
# default) against up to 32 (64 MiB) and 64 (128 MiB), now that the kernels no longer spill.
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
[ -f build-gpu/build.ninja ] || meson setup build-gpu --buildtype=release > /tmp/b.log 2>&1
ninja -C build-gpu tools/all_reduce_perf >> /tmp/b.log 2>&1 &
for rows in 32 64; do
  (meson setup build-rows$rows --buildtype=release \
     -Dcuda_args=-DFCCL_TWO_PART_ROWS=$rows && ninja -C build-rows$rows tools/all_reduce_perf) > /tmp/b$rows.log 2>&1 &
done
wait
for rows in 32 64; do tail -1 /tmp/b$rows.log; done
AB_MIN=16M AB_MAX=128M AB_TURNS=3 scripts/gpu-ab "$OUT/ab" rows8=build-gpu rows32=build-rows32 rows64=build-rows64 \
  | grep -v "^=== " | head -20
