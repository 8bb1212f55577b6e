#!/usr/bin/env bash
# Twelfth session, on nvidia-h200-x2: LL128 with split warps (-DFCCL_LL128_SPLIT=1: half of each block's warps push
# while the other half receive and reduce, instead of every warp pushing all its lines first), at 256 and 512
# threads per block, against LL128 as it is and the automatic choice; 16 MiB LL128 area in every build (LL128 up to
# 7.5 MiB when forced), 256 KiB-4 MiB, plain and registered, 2 turns; then the LL128 tests on the split build.
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
area="-DFCCL_LL128_AREA_BYTES=16777216u"
build() { # name, extra args (host and device), ninja target (empty: everything)
  meson setup "build-$1" --buildtype=release "-Dc_args=$area $2" "-Dcuda_args=$area $2" > "/tmp/build-$1.log" 2>&1 &&
    ninja -C "build-$1" $3 >> "/tmp/build-$1.log" 2>&1
  tail -1 "/tmp/build-$1.log"
}
build ll "" tools/all_reduce_perf &
build s256 "-DFCCL_LL128_SPLIT=1" "" &
build s512 "-DFCCL_LL128_SPLIT=1 -DFCCL_LL128_THREADS=512" tools/all_reduce_perf &
wait
AB_MIN=256K AB_MAX=4M AB_TURNS=2 scripts/gpu-ab "$OUT/ab-ll128" auto=build-ll ll128=build-ll,FCCL_ALGO=ll128 \
  s256=build-s256,FCCL_ALGO=ll128 s512=build-s512,FCCL_ALGO=ll128 s256auto=build-s256 | grep -v "^=== " | head -30
timeout 400 meson test -C build-s256 --num-processes 1 --print-errorlogs allreduce_sweep allreduce_large \
  allreduce_ranks3 allreduce_ranks8 graph > "$OUT/tests-split.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests-split.log"
