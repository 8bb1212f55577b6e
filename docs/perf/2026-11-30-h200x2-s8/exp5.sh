#!/usr/bin/env bash
# Eighth session, fifth device call: the two-part reduce-scatter limited to 16 MiB (kTwoPartRows): build, the tests
# that run the registered two-shot, and the automatic choice at 4 MiB-256 MiB. usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
(meson setup build-gpu --buildtype=release && ninja -C build-gpu) > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
timeout 200 meson test -C build-gpu --num-processes 1 --print-errorlogs allreduce_large graph_register bench_check \
  allreduce_sweep > "$OUT/tests.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests.log"
AB_MIN=4M AB_MAX=256M AB_TURNS=1 scripts/gpu-ab "$OUT/ab" lib=build-gpu | grep -v "^=== " | head -30
