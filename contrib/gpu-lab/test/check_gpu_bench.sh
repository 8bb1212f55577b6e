#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gpu-bench without a GPU: a "build" of stand-ins (the fake all_reduce_perf for every *_perf program, a barrier_perf
# and fccl-info that print one line). Checks that a run leaves what docs/perf/results/ keeps of it: bench.txt,
# bench.csv with the selected runs' rows, bench.json, and env.txt naming the commit and the build's fccl-info.
# usage: check_gpu_bench.sh GPU_LAB_DIR
lab=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/build/tools"
for program in all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf; do
  cp "$(dirname "$0")/fake_all_reduce_perf.sh" "$dir/build/tools/$program"
done
# shellcheck disable=SC2016 # the stand-in's own variables, expanded when it runs
printf '#!/bin/sh\necho "barrier_perf $*" >> "$FAKE_LOG"\n' > "$dir/build/tools/barrier_perf"
printf '#!/bin/sh\necho "fccl version      : stand-in $*"\n' > "$dir/build/tools/fccl-info"
chmod +x "$dir/build/tools/"*
export FAKE_LOG="$dir/calls.txt"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

GIT_COMMIT=0123abc BENCH_QUICK=1 BENCH_ONLY='allreduce-bf16-(graph|eager)$' \
  bash "$lab/gpu-bench" "$dir/build" "$dir/out" > "$dir/stdout.txt" 2>&1 || fail "gpu-bench exited non-zero"
cat "$dir/stdout.txt"
[ "$(grep -c "^FCCL_ALGO= FCCL_STAGING_BYTES= -b 8 -e 64M .*--compare nccl" "$dir/calls.txt")" = 2 ] ||
  fail "expected the two selected all_reduce_perf runs, quick, beside NCCL"
grep -q "barrier_perf" "$dir/calls.txt" && fail "BENCH_ONLY did not leave the barrier out"
for file in bench.txt bench.csv bench.json env.txt; do
  [ -s "$dir/out/$file" ] || fail "no $file"
done
# 8 B .. 64 MiB by 2: 24 sizes per run, two runs, one header.
[ "$(wc -l < "$dir/out/bench.csv")" = 49 ] || fail "bench.csv holds $(wc -l < "$dir/out/bench.csv") lines, not 49"
grep -q "^=== allreduce-bf16-eager: all_reduce_perf" "$dir/out/bench.txt" || fail "bench.txt does not name the eager run"
grep -q "^commit: 0123abc$" "$dir/out/env.txt" || fail "env.txt does not name the commit"
grep -q "^fccl version      : stand-in --params$" "$dir/out/env.txt" || fail "env.txt lacks fccl-info --params"
grep -q "all-reduce bf16 sum, CUDA graph (out-of-place" "$dir/stdout.txt" || fail "no summary table"
echo "gpu-bench: $failures failed"
[ $failures = 0 ]
