#!/usr/bin/env bash
# Tenth session, fourth call on nvidia-h200-x2: what holds LL128 at 2-4 MiB (exp3: 4 MiB 18.85 us against 17.14
# for the automatic two-shot). Three builds with a 16 MiB LL128 area: as committed (256 threads, 4 line groups per
# receive batch), 512 threads per block, 8 line groups; forced with FCCL_ALGO=ll128, beside the automatic choice.
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
area="-DFCCL_LL128_AREA_BYTES=16777216u"
build() { # name, extra c args, extra cuda args
  meson setup "build-$1" --buildtype=release "-Dc_args=$area $2" "-Dcuda_args=$area $3" > "/tmp/build-$1.log" 2>&1 &&
    ninja -C "build-$1" tools/all_reduce_perf >> "/tmp/build-$1.log" 2>&1
  tail -1 "/tmp/build-$1.log"
}
build a16 "" "" &
build t512 "-DFCCL_LL128_THREADS=512" "-DFCCL_LL128_THREADS=512" &
build g8 "" "-DFCCL_LL128_GROUPS=8" &
wait
AB_MIN=512K AB_MAX=4M AB_TURNS=2 AB_BUFFERS=plain scripts/gpu-ab "$OUT/ab" ll128=build-a16,FCCL_ALGO=ll128 \
  t512=build-t512,FCCL_ALGO=ll128 g8=build-g8,FCCL_ALGO=ll128 auto=build-a16 | grep -v "^=== " | head -20
