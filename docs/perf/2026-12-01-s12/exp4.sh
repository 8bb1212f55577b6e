#!/usr/bin/env bash
# Twelfth session, one call on nvidia-h200-x2, timing only (the tests run with whatever is kept): exp2's and exp3's
# comparisons together. (1) forkcopy.cu; (2) the copy-engine scatter pushed (as built) against pulled by the owners
# (-DFCCL_COPY_SCATTER_PULL=1), registered, 64 MiB-1 GiB, also with the copy from 16 MiB; (3) LL128 with split
# warps (-DFCCL_LL128_SPLIT=1) at 256 and 512 threads against LL128 as it is and the automatic choice, 16 MiB LL128
# area, 512 KiB-4 MiB. 2 turns each.
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
build s256 "$area -DFCCL_LL128_SPLIT=1" &
build s512 "$area -DFCCL_LL128_SPLIT=1 -DFCCL_LL128_THREADS=512" &
nvcc -O3 -arch=sm_90 -o /tmp/forkcopy docs/perf/2026-12-01-s12/forkcopy.cu &&
  timeout 60 /tmp/forkcopy 2>&1 | tee "$OUT/forkcopy.txt"
wait
AB_MIN=64M AB_MAX=1G AB_TURNS=2 AB_BUFFERS=registered scripts/gpu-ab "$OUT/ab-copy" push=build-base pull=build-pull \
  pull16=build-pull,FCCL_COPY_SCATTER_MIN=16777216 | grep -v "^=== " | head -12
AB_MIN=512K AB_MAX=4M AB_TURNS=2 scripts/gpu-ab "$OUT/ab-ll128" auto=build-ll ll128=build-ll,FCCL_ALGO=ll128 \
  s256=build-s256,FCCL_ALGO=ll128 s512=build-s512,FCCL_ALGO=ll128 | grep -v "^=== " | head -16
