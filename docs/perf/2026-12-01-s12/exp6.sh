#!/usr/bin/env bash
# Twelfth session, on one H200 (no two-GPU kind was lent all session): (1) the LL128 push batch and split knobs
# together under the LL128 tests (the ranks share the GPU, as processes); (2) a rough look at the LL128 variants'
# kernel-side throughput: two ranks as threads of one process on the one GPU (-t 2 --share-gpu), so the "link" is
# the GPU's own memory and the two kernels share its SMs. Not the NVLink numbers #5 is about: only whether the
# batch or the split change what the kernels themselves can issue.
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
{ echo "commit: ${GIT_COMMIT:-unknown}"; date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi -L; } > "$OUT/summary.txt"
area="-DFCCL_LL128_AREA_BYTES=16777216u"
build() { # name, extra args (host and device), ninja target (empty: everything)
  meson setup "build-$1" --buildtype=release "-Dc_args=$2" "-Dcuda_args=$2" > "/tmp/build-$1.log" 2>&1 &&
    ninja -C "build-$1" $3 >> "/tmp/build-$1.log" 2>&1
  echo "build-$1: $(tail -1 "/tmp/build-$1.log")"
}
build knobs "$area -DFCCL_LL128_PUSH_BATCH=4 -DFCCL_LL128_SPLIT=1" "" &
build ll "$area" tools/all_reduce_perf &
build b4 "$area -DFCCL_LL128_PUSH_BATCH=4" tools/all_reduce_perf &
build s256b4 "$area -DFCCL_LL128_SPLIT=1 -DFCCL_LL128_PUSH_BATCH=4" tools/all_reduce_perf &
build s512 "$area -DFCCL_LL128_SPLIT=1 -DFCCL_LL128_THREADS=512" tools/all_reduce_perf &
wait
timeout 300 meson test -C build-knobs --num-processes 1 --print-errorlogs allreduce_sweep allreduce_large \
  allreduce_ranks3 allreduce_ranks8 graph > "$OUT/tests-batch.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests-batch.log" | tee -a "$OUT/summary.txt"
AB_MIN=256K AB_MAX=4M AB_TURNS=2 AB_BUFFERS=plain AB_ITERS="-n 50 -w 10 -t 2 --share-gpu" scripts/gpu-ab \
  "$OUT/ab-local" ll128=build-ll,FCCL_ALGO=ll128 b4=build-b4,FCCL_ALGO=ll128 s256b4=build-s256b4,FCCL_ALGO=ll128 \
  s512=build-s512,FCCL_ALGO=ll128 | grep -v "^=== " | head -12 | tee -a "$OUT/summary.txt"
