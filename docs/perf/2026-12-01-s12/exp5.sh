#!/usr/bin/env bash
# Twelfth session, on one H200 (the ranks share it): are the two experiments correct? One build with both knobs
# (-DFCCL_COPY_SCATTER_PULL=1 -DFCCL_LL128_SPLIT=1, 16 MiB LL128 area so that forced LL128 runs up to 7.5 MiB), and
# the tests that reach them: the sweeps (every algorithm forced, LL128 included; the copy scatter at every size),
# the large cases (the copy scatter at 256 MiB, LL128 at its old limit), 3 and 8 ranks, graphs, epoch wrap.
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
{ echo "commit: ${GIT_COMMIT:-unknown}"; date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi -L; } > "$OUT/summary.txt"
knobs="-DFCCL_COPY_SCATTER_PULL=1 -DFCCL_LL128_SPLIT=1 -DFCCL_LL128_AREA_BYTES=16777216u"
meson setup build-knobs --buildtype=release "-Dc_args=$knobs" "-Dcuda_args=$knobs" > /tmp/build.log 2>&1 &&
  ninja -C build-knobs >> /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
build-knobs/tools/fccl-info --algo 2 --sms 132 | grep -E "ll128|copy" | head -8 >> "$OUT/summary.txt"
timeout 500 meson test -C build-knobs --num-processes 1 --print-errorlogs allreduce_sweep allreduce_sweep_copy \
  allreduce_large allreduce_large_inbox allreduce_ranks3 allreduce_ranks8 allreduce_wrap graph graph_copy \
  > "$OUT/tests-knobs.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests-knobs.log" | tee -a "$OUT/summary.txt"
