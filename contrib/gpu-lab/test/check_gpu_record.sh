#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gpu-record's paths, faults and fused stages without a GPU: a "build" of stand-ins that record their arguments.
# Checks the runs each stage makes on 4 GPUs and on 2 (where the hierarchical path cannot be laid), the files they
# leave (each stage's environment among them), a failing run failing its stage only, and the refusal of an unknown
# stage.
# usage: check_gpu_record.sh GPU_LAB_DIR
lab=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/build/tools"
cp "$(dirname "$0")/fake_all_reduce_perf.sh" "$dir/build/tools/all_reduce_perf"
for tool in fccl-faultbench fused_norm_perf; do
  # shellcheck disable=SC2016 # the stand-in's own variables, expanded when it runs
  printf '#!/bin/sh\necho "%s $*" >> "$FAKE_LOG"\n[ -z "${FAKE_FAIL:-}" ] || [ "$FAKE_FAIL" != %s ]\n' "$tool" "$tool" \
    > "$dir/build/tools/$tool"
done
chmod +x "$dir/build/tools/"*
export FAKE_LOG="$dir/calls.txt" RECORD_BUILD="$dir/build"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

RECORD_GPUS=4 bash "$lab/gpu-record" "$dir/out4" paths faults fused > "$dir/stdout4.txt" 2>&1 ||
  fail "gpu-record on 4 GPUs exited non-zero"
cat "$dir/stdout4.txt"
[ "$(grep -c "^gpu-record: .*: ok in" "$dir/stdout4.txt")" = 3 ] || fail "expected three stages ok"
runs=$(grep -c -- "-np 4 .*--compare nccl" "$dir/calls.txt")
[ "$runs" = 4 ] || fail "expected 4 all_reduce_perf runs of 4 ranks beside NCCL on 4 GPUs, got $runs"
grep -q -- "--hosts 4 --progress 0" "$dir/calls.txt" || fail "no run with every process its own host"
grep -q -- "--path nccl --progress 0" "$dir/calls.txt" || fail "no NCCL-path run on one host"
grep -q -- "--hosts 2 --path hier" "$dir/calls.txt" || fail "no hierarchical run of two hosts"
grep -q -- "--hosts 2 --path nccl" "$dir/calls.txt" || fail "no NCCL-path run of two hosts"
grep -q "^fccl-faultbench -s kernel -n 50 -r 2 -J $dir/out4/faults/kernel.json" "$dir/calls.txt" ||
  fail "no fault run of 50 kills"
grep -q "^fccl-faultbench -s all -n 10 -r 3" "$dir/calls.txt" || fail "no run of every fault scenario"
grep -q "^fused_norm_perf -H 4096,8192 -t 1:8192 -F auto,oneshot,twoshot" "$dir/calls.txt" || fail "no fused run"
for file in paths/nccl-hosts.csv paths/nccl-one-host.csv paths/hier-2hosts.csv paths/nccl-2hosts.csv \
  paths/nccl-hosts.txt faults/kernel.txt faults/all.txt fused/fused.txt paths/env.txt faults/env.txt fused/env.txt; do
  [ -f "$dir/out4/$file" ] || fail "no $file"
done
grep -q "^commit: " "$dir/out4/paths/env.txt" || fail "the paths stage's env.txt names no commit"

: > "$dir/calls.txt"
RECORD_GPUS=2 FAKE_FAIL=fccl-faultbench bash "$lab/gpu-record" "$dir/out2" paths faults > "$dir/stdout2.txt" 2>&1 &&
  fail "a failing fault run did not fail gpu-record"
cat "$dir/stdout2.txt"
grep -q "^gpu-record: paths: ok" "$dir/stdout2.txt" || fail "the paths stage on 2 GPUs did not pass"
grep -q "^gpu-record: faults: failed" "$dir/stdout2.txt" || fail "the failing fault run did not fail its stage"
[ "$(grep -c -- "-np 2 " "$dir/calls.txt")" = 2 ] || fail "expected 2 all_reduce_perf runs on 2 GPUs"
grep -q -- "--path hier" "$dir/calls.txt" && fail "the hierarchical path ran on 2 GPUs"
grep -q "two hosts of two or more GPUs" "$dir/out2/paths/hier.txt" || fail "no word on the hierarchical path"

bash "$lab/gpu-record" "$dir/out3" paths bogus > /dev/null 2>&1
[ $? = 2 ] || fail "an unknown stage was not refused with status 2"
[ -d "$dir/out3" ] && fail "an unknown stage still ran the others"
echo "gpu-record: $failures failed"
[ $failures = 0 ]
