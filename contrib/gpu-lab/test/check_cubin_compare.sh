#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cubin-compare without a GPU: a kernel hashed twice is identical, one with another constant differs in its .text
# section only, a kernel missing on one side is reported, and each of those sets the exit status.
# usage: check_cubin_compare.sh GPU_LAB_DIR
lab=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
mkdir -p "$dir/one" "$dir/two" "$dir/extra"
printf '__global__ void store(int* p) { p[threadIdx.x] = 1; }\n' > "$dir/one/k.cu"
printf '__global__ void store(int* p) { p[threadIdx.x] = 2; }\n' > "$dir/two/k.cu"
printf '__global__ void other(int* p) { p[0] = 3; }\n' > "$dir/extra/x.cu"
CUBIN_SOURCES="$dir/one/k.cu" bash "$lab/cubin-compare" hash "$dir/A" 90 || fail "hash A"
CUBIN_SOURCES="$dir/one/k.cu" bash "$lab/cubin-compare" hash "$dir/A2" 90 || fail "hash A2"
CUBIN_SOURCES="$dir/two/k.cu" bash "$lab/cubin-compare" hash "$dir/B" 90 || fail "hash B"
CUBIN_SOURCES="$dir/one/k.cu $dir/extra/x.cu" bash "$lab/cubin-compare" hash "$dir/C" 90 || fail "hash C"
grep -q '^[0-9a-f]\{16\} \.text\.' "$dir/A/k.sm_90.sections" || fail "no .text section hashed: $(cat "$dir/A/k.sm_90.sections")"

out=$(bash "$lab/cubin-compare" diff "$dir/A" "$dir/A2") || fail "same source reported as different: $out"
echo "$out" | grep -q "k.sm_90: identical" || fail "same source: $out"
out=$(bash "$lab/cubin-compare" diff "$dir/A" "$dir/B") && fail "another constant not reported: $out"
echo "$out" | grep -q "k.sm_90: DIFFERS in: .text._Z5storePi" || fail "another constant: $out"
out=$(bash "$lab/cubin-compare" diff "$dir/C" "$dir/A") && fail "a missing source not reported: $out"
echo "$out" | grep -q "x.sm_90: missing" || fail "missing source: $out"
bash "$lab/cubin-compare" --help | grep -q "cubin-compare hash OUT_DIR" || fail "--help"
[ $failures -eq 0 ] && echo "cubin_compare: all checks passed"
exit $failures
