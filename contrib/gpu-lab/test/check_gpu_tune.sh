#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gpu-tune end to end without a GPU: a stand-in all_reduce_perf (made-up times from FCCL_ALGO, the size and
# FCCL_STAGING_BYTES, in all_reduce_perf's CSV format) beside the real fccl-info. Checks the sizes each forced
# algorithm was run at (fccl-info --algo's ranges), the suggestion, the staging table and the files written.
# usage: check_gpu_tune.sh GPU_LAB_DIR FCCL_INFO
lab=$1
info=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/build/tools" "$dir/out"
cp "$info" "$dir/build/tools/fccl-info"
cp "$(dirname "$0")/fake_all_reduce_perf.sh" "$dir/build/tools/all_reduce_perf"
chmod +x "$dir/build/tools/all_reduce_perf"
export FAKE_LOG="$dir/calls.txt"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
bash "$lab/gpu-tune" "$dir/build" "$dir/out" 2 > "$dir/stdout.txt" 2>&1 || fail "gpu-tune exited non-zero"
cat "$dir/stdout.txt"
# LL runs up to its 256 KiB area for 2 ranks, plain one-shot up to one 8 MiB chunk, registered one-shot and the
# rest up to the 256 MiB cap.
grep -q "^FCCL_ALGO=ll .* -e 262144 " "$dir/calls.txt" || fail "LL was not run up to 262144"
grep -q "^FCCL_ALGO=ll128 .* -e 1048576 " "$dir/calls.txt" || fail "LL128 was not run up to 1048576 (its area)"
grep -q "^FCCL_ALGO=oneshot .*-e 8388608 " "$dir/calls.txt" || fail "plain one-shot was not run up to 8388608"
grep -q "^FCCL_ALGO=oneshot .*-e 268435456 .*-R 2" "$dir/calls.txt" || fail "registered one-shot not up to 256 MiB"
[ "$(grep -c "FCCL_STAGING_BYTES=[0-9]" "$dir/calls.txt")" = 4 ] || fail "expected 4 staging runs"
grep -q "suggested for 2 ranks, plain: ll up to 65536 B, ll128 up to 262144 B, oneshot up to 524288 B" "$dir/out/tune.txt" ||
  fail "wrong or missing suggestion"
# The staging table: 1 GiB at 128 MiB of staging is faster than at 16 MiB (fewer rounds in the made-up model).
awk '/FCCL_STAGING_BYTES \(MiB\)/ { t = 1 } t && $1 == 1073741824 { found = ($5 < $2) } END { exit !found }' \
  "$dir/out/tune.txt" || fail "staging table missing or wrong"
files=$(ls "$dir/out" | tr '\n' ' ')
[ "$files" = "tune.csv tune.txt " ] || fail "gpu-tune wrote '$files', expected tune.csv and tune.txt"
head -1 "$dir/out/tune.csv" | grep -q "^ranks,buffers,algo,collective," || fail "tune.csv header"
echo "gpu-tune: $failures failed"
[ $failures = 0 ]
