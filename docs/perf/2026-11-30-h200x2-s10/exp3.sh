#!/usr/bin/env bash
# Tenth session, third call on nvidia-h200-x2: LL128 with the input loads overlapped (c46e33e) against 6c13289, both
# built with a 16 MiB LL128 area so that 2-8 MiB fit (FCCL_LL128_AREA_BYTES), forced with FCCL_ALGO=ll128, beside
# the automatic choice; then the LL128-covering tests on the default build.
# usage: OUT=dir $0 (repository root, the base tree unpacked in build-base-src)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
area="-DFCCL_LL128_AREA_BYTES=16777216u"
(meson setup build-gpu --buildtype=release && ninja -C build-gpu) > /tmp/build-gpu.log 2>&1 &
(meson setup build-new16 --buildtype=release "-Dc_args=$area" "-Dcuda_args=$area" && ninja -C build-new16 tools/all_reduce_perf) \
  > /tmp/build-new16.log 2>&1 &
(meson setup build-base16 build-base-src --buildtype=release "-Dc_args=$area" "-Dcuda_args=$area" &&
  ninja -C build-base16 tools/all_reduce_perf) > /tmp/build-base16.log 2>&1 &
wait
for b in gpu new16 base16; do tail -1 /tmp/build-$b.log; done
AB_MIN=256K AB_MAX=8M AB_TURNS=2 AB_BUFFERS=plain scripts/gpu-ab "$OUT/ab" base=build-base16,FCCL_ALGO=ll128 \
  new=build-new16,FCCL_ALGO=ll128 auto=build-new16 | grep -v "^=== " | head -30
timeout 240 meson test -C build-gpu --num-processes 1 --print-errorlogs allreduce_sweep allreduce_large \
  allreduce_ranks3 allreduce_ranks8 graph barrier_timeout barrier_abort > "$OUT/tests.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests.log"
