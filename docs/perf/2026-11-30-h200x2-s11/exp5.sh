#!/usr/bin/env bash
# Eleventh session, call 5 on nvidia-h200-x2: the registered two-shot's reduce-scatter by push into the owner's
# inbox (FCCL_SCATTER_INBOX, no "ready" wait) against the base (pull below 16 MiB, push into the output from
# there): as built (inbox only where a share fits one 8 MiB chunk: 16 MiB) and with the push from 2 MiB
# (FCCL_PUSH_SCATTER_MIN_2RANKS), registered buffers 2-32 MiB, 3 turns; then the tests the change touches.
# usage: OUT=dir $0 (repository root), with build-base-src = git archive of the commit before
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
(meson setup build-gpu --buildtype=release && ninja -C build-gpu) > /tmp/build-gpu.log 2>&1 &
(meson setup build-base build-base-src --buildtype=release && ninja -C build-base tools/all_reduce_perf) \
  > /tmp/build-base.log 2>&1 &
(meson setup build-p2 --buildtype=release -Dc_args=-DFCCL_PUSH_SCATTER_MIN_2RANKS=2097152u &&
  ninja -C build-p2 tools/all_reduce_perf) > /tmp/build-p2.log 2>&1 &
wait
for b in gpu base p2; do tail -1 /tmp/build-$b.log; done
AB_MIN=2M AB_MAX=32M AB_TURNS=3 AB_BUFFERS=registered scripts/gpu-ab "$OUT/ab" base=build-base new=build-gpu \
  p2=build-p2 | grep -v "^=== " | head -12
awk -F, 'NR > 1 && $0 ~ /fccl/ { for (i = 1; i <= NF; i++) if ($i ~ /^[1-9][0-9]*$/ && h[i] ~ /wrong/) bad++ }
  NR == 1 { for (i = 1; i <= NF; i++) h[i] = $i } END { print "rows with wrong elements:", bad + 0 }' "$OUT/ab/ab.csv"
timeout 200 meson test -C build-gpu --num-processes 1 --print-errorlogs allreduce_sweep allreduce_large \
  allreduce_ranks4 graph graph_register bench_check > "$OUT/tests.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests.log"
