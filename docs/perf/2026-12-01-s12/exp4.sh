#!/usr/bin/env bash
# Twelfth session, one call on nvidia-h200-x2, timing only (the tests ran on one GPU, exp5.sh; the full suites run
# with whatever is kept). (1) The copy-engine scatter pushed (as built) against pulled by the owners
# (-DFCCL_COPY_SCATTER_PULL=1), registered, 128 MiB-1 GiB, copies from 256 MiB. (2) LL128 as it is, with its pushes'
# input loaded 4 groups at a time (-DFCCL_LL128_PUSH_BATCH=4), with split warps (-DFCCL_LL128_SPLIT=1) at 256
# threads with the batch and at 512 without, against the automatic choice; 16 MiB LL128 area, 1-4 MiB. 2 turns.
# (3) forkcopy.cu last (it may give up, as on one GPU).
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
{ echo "commit: ${GIT_COMMIT:-unknown}"; date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi -L; } > "$OUT/summary.txt"
area="-DFCCL_LL128_AREA_BYTES=16777216u"
build() { # name, extra args (host and device)
  meson setup "build-$1" --buildtype=release "-Dc_args=$2" "-Dcuda_args=$2" > "/tmp/build-$1.log" 2>&1 &&
    ninja -C "build-$1" tools/all_reduce_perf >> "/tmp/build-$1.log" 2>&1
  echo "build-$1: $(tail -1 "/tmp/build-$1.log")"
}
build base "" &
build pull "-DFCCL_COPY_SCATTER_PULL=1" &
build ll "$area" &
build b4 "$area -DFCCL_LL128_PUSH_BATCH=4" &
build s256b4 "$area -DFCCL_LL128_SPLIT=1 -DFCCL_LL128_PUSH_BATCH=4" &
build s512 "$area -DFCCL_LL128_SPLIT=1 -DFCCL_LL128_THREADS=512" &
wait
AB_MIN=128M AB_MAX=1G AB_TURNS=2 AB_BUFFERS=registered scripts/gpu-ab "$OUT/ab-copy" push=build-base \
  pull=build-pull | grep -v "^=== " | head -10
AB_MIN=1M AB_MAX=4M AB_TURNS=2 scripts/gpu-ab "$OUT/ab-ll128" auto=build-ll ll128=build-ll,FCCL_ALGO=ll128 \
  b4=build-b4,FCCL_ALGO=ll128 s256b4=build-s256b4,FCCL_ALGO=ll128 s512=build-s512,FCCL_ALGO=ll128 |
  grep -v "^=== " | head -14
nvcc -O3 -arch=sm_90 -o /tmp/forkcopy docs/perf/2026-12-01-s12/forkcopy.cu &&
  timeout 40 /tmp/forkcopy 2>&1 | tee "$OUT/forkcopy.txt"
