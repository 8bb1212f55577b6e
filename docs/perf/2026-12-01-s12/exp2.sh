#!/usr/bin/env bash
# Twelfth session, on nvidia-h200-x2: (1) forkcopy.cu, the copy path's edges with peer copies pushed and pulled, and
# a forked copy beside a spinning kernel; (2) the registered two-shot's reduce-scatter by copies the owners pull
# (-DFCCL_COPY_SCATTER_PULL=1: no "sent" hop, each copy writes locally) against the pushed copies, 16 MiB-1 GiB,
# registered, 2 turns, the copy from 256 MiB (as built) and from 16 MiB; (3) the copy tests on the pull build.
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
{ echo "commit: ${GIT_COMMIT:-unknown}"; date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi -L; } > "$OUT/summary.txt"
nvcc -O3 -arch=sm_90 -o /tmp/forkcopy docs/perf/2026-12-01-s12/forkcopy.cu &&
  timeout 120 /tmp/forkcopy 2>&1 | tee "$OUT/forkcopy.txt"
meson setup build-base --buildtype=release > /tmp/build-base.log 2>&1 &&
  ninja -C build-base tools/all_reduce_perf >> /tmp/build-base.log 2>&1 &
meson setup build-pull --buildtype=release -Dc_args=-DFCCL_COPY_SCATTER_PULL=1 -Dcuda_args=-DFCCL_COPY_SCATTER_PULL=1 \
  > /tmp/build-pull.log 2>&1 &&
  ninja -C build-pull >> /tmp/build-pull.log 2>&1 &
wait
tail -1 /tmp/build-base.log /tmp/build-pull.log
AB_MIN=16M AB_MAX=1G AB_TURNS=2 AB_BUFFERS=registered scripts/gpu-ab "$OUT/ab" push=build-base pull=build-pull \
  push16=build-base,FCCL_COPY_SCATTER_MIN=16777216 pull16=build-pull,FCCL_COPY_SCATTER_MIN=16777216 |
  grep -v "^=== " | head -20
timeout 400 meson test -C build-pull --num-processes 1 --print-errorlogs allreduce_sweep_copy graph_copy \
  allreduce_large allreduce_large_inbox > "$OUT/tests-pull.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests-pull.log" | tee -a "$OUT/summary.txt"
