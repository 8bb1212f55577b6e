#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gpu-ab end to end without a GPU: two "builds" holding the stand-in all_reduce_perf, three variants (one
# with an environment setting that adds 1 us to every time). Checks the turns, the settings reaching the runs, the
# table's ratios and the files written (the run: table, CSV, environment; the log: runs/), also when a second run
# goes into the same folder; a variant naming no build must be refused.
# usage: check_gpu_ab.sh GPU_LAB_DIR
lab=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for build in a b; do
  mkdir -p "$dir/$build/tools"
  cp "$(dirname "$0")/fake_all_reduce_perf.sh" "$dir/$build/tools/all_reduce_perf"
  chmod +x "$dir/$build/tools/all_reduce_perf"
done
export FAKE_LOG="$dir/calls.txt"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
AB_MAX=64K AB_BUFFERS=plain bash "$lab/gpu-ab" "$dir/out" base="$dir/a" same="$dir/b" \
  slow="$dir/b,FAKE_EXTRA_US=1,FCCL_ALGO=ll" > "$dir/stdout.txt" 2>&1 || fail "gpu-ab exited non-zero"
cat "$dir/stdout.txt"
[ "$(grep -c . "$dir/calls.txt")" = 6 ] || fail "expected 3 variants x 2 turns = 6 runs"
[ "$(grep -c "^FCCL_ALGO=ll " "$dir/calls.txt")" = 2 ] || fail "the slow variant's settings did not reach its runs"
grep -q -- "-R 2" "$dir/calls.txt" && fail "AB_BUFFERS=plain ran registered buffers"
# 1 KiB: base and same 2.5 + 1024 / 40000 = 2.53 us; slow (FCCL_ALGO=ll, +1 us) 3.53 us, ratio 1.40.
awk '$1 == 1024 && $2 == "2.53" && $4 == "2.53" && $6 == "3.53" && $7 == "(1.396)" { found = 1 } END { exit !found }' \
  "$dir/out/ab.txt" || fail "wrong table row for 1024 bytes"
[ "$(ls "$dir/out" | tr '\n' ' ')" = "ab.csv ab.txt env.txt runs " ] || fail "gpu-ab wrote $(ls "$dir/out")"
grep -q "^commit: " "$dir/out/env.txt" || fail "env.txt names no commit"
grep -q "FCCL_ALGO=ll" "$dir/out/ab.txt" && fail "ab.txt holds the runs' output, which belongs in runs/"
set -- "$dir"/out/runs/*.csv
[ $# = 6 ] || fail "gpu-ab kept $# CSVs in runs/, not the 6 runs'"
grep -q "^=== turn 2, slow" "$dir/out/runs/runs.txt" || fail "gpu-ab kept no output of the runs in runs/"
[ "$(grep -c ',1024,512,' "$dir/out/ab.csv")" = 6 ] || fail "ab.csv does not hold 6 rows for 1024 bytes"
# Again into the same folder: the table is this run's alone, not the last one's CSVs as well.
AB_MAX=64K AB_BUFFERS=plain bash "$lab/gpu-ab" "$dir/out" base="$dir/a" same="$dir/b" > /dev/null 2>&1 ||
  fail "gpu-ab exited non-zero the second time"
[ "$(grep -c ',1024,512,' "$dir/out/ab.csv")" = 4 ] ||
  fail "the second run's ab.csv does not hold its own 4 rows for 1024 bytes"
[ "$(grep -c '^# plain buffers' "$dir/out/ab.txt")" = 1 ] || fail "the second run's ab.txt holds more than its table"
bash "$lab/gpu-ab" "$dir/out2" base="$dir/none" > /dev/null 2>&1 && fail "a variant without a build ran"
echo "gpu-ab: $failures failed"
[ $failures = 0 ]
