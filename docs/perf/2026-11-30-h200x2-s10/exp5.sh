#!/usr/bin/env bash
# Tenth session, fifth call on nvidia-h200-x2: is it LL128's volatile (relaxed system-scope) line stores that keep
# it under the SM push's 364 GB/s at 2-4 MiB? 16 MiB LL128 area; 256 and 512 threads, each with volatile and with
# weak stores (FCCL_LL128_WEAK_STORES, an experiment only), forced with FCCL_ALGO=ll128, beside the automatic choice.
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
t512="-DFCCL_LL128_THREADS=512"
build a16 "" "" &
build w256 "" "-DFCCL_LL128_WEAK_STORES" &
build t512 "$t512" "$t512" &
build w512 "$t512" "$t512 -DFCCL_LL128_WEAK_STORES" &
wait
AB_MIN=1M AB_MAX=4M AB_TURNS=2 AB_BUFFERS=plain scripts/gpu-ab "$OUT/ab" v256=build-a16,FCCL_ALGO=ll128 \
  w256=build-w256,FCCL_ALGO=ll128 v512=build-t512,FCCL_ALGO=ll128 w512=build-w512,FCCL_ALGO=ll128 auto=build-a16 |
  grep -v "^=== " | head -20
