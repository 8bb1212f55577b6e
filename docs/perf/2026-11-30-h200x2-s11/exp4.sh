#!/usr/bin/env bash
# Eleventh session, call 4 on nvidia-h200-x2: 16 MiB (52.1-52.3 us, target 52). The registered two-shot's
# all-gather stores our own output before the peer's on rank 0 and after it on rank 1 (rank order); does storing
# the peer's first help (FCCL_STORE_REMOTE_FIRST)? And three parts of the reduce-scatter by push instead of two
# (FCCL_PUSH_PARTS). Registered buffers, 4-64 MiB, 3 turns.
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
build() { # name, extra cuda args
  meson setup "build-$1" --buildtype=release "-Dcuda_args=$2" > "/tmp/build-$1.log" 2>&1 &&
    ninja -C "build-$1" tools/all_reduce_perf >> "/tmp/build-$1.log" 2>&1
  tail -1 "/tmp/build-$1.log"
}
build base "" &
build rf "-DFCCL_STORE_REMOTE_FIRST" &
build p3 "-DFCCL_PUSH_PARTS=3" &
build rfp3 "-DFCCL_STORE_REMOTE_FIRST -DFCCL_PUSH_PARTS=3" &
wait
AB_MIN=4M AB_MAX=64M AB_TURNS=3 AB_BUFFERS=registered scripts/gpu-ab "$OUT/ab" base=build-base rf=build-rf \
  p3=build-p3 rfp3=build-rfp3 | grep -v "^=== " | head -20
