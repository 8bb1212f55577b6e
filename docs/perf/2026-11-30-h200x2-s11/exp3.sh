#!/usr/bin/env bash
# Eleventh session, call 3 on nvidia-h200-x2: does LL128's polling slow its lines' arrival at 2-4 MiB? A pause
# after each unsuccessful poll of a batch (FCCL_LL128_POLL_BACKOFF_NS, an experiment knob), at 256 and 512 threads,
# 16 MiB LL128 area, forced with FCCL_ALGO=ll128, beside the automatic choice.
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
back="-DFCCL_LL128_POLL_BACKOFF_NS=128"
build a16 "" "" &
build b256 "" "$back" &
build t512 "$t512" "$t512" &
build b512 "$t512" "$t512 $back" &
wait
AB_MIN=1M AB_MAX=4M AB_TURNS=2 AB_BUFFERS=plain scripts/gpu-ab "$OUT/ab" v256=build-a16,FCCL_ALGO=ll128 \
  b256=build-b256,FCCL_ALGO=ll128 v512=build-t512,FCCL_ALGO=ll128 b512=build-b512,FCCL_ALGO=ll128 auto=build-a16 |
  grep -v "^=== " | head -20
