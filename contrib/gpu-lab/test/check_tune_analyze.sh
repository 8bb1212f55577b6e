#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tune-analyze on made-up measurements with known crossovers: LL fastest up to 64 KiB, LL128 up to 256 KiB
# (where it is 0.5% behind one-shot, inside the 2% tolerance), one-shot up to 512 KiB, two-shot beyond; a 1% LL
# loss at 8 KiB stays inside the tolerance too. Without LL128 files, LL128's limit is LL's. Bad file names are
# refused.
# usage: check_tune_analyze.sh GPU_LAB_DIR
lab=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
header="collective,engine,buffers,graph,nranks,size,count,type,redop,placement,time_us,algbw_gbs,busbw_gbs,wrong"
for algo in ll ll128 oneshot twoshot auto; do
  echo "$header" > "$dir/2-plain-$algo.csv"
done
size=1024
while [ $size -le 4194304 ]; do
  # time(us) = fixed cost + bytes / bandwidth, per algorithm; each row also has an NCCL and an in-place twin
  # that the analysis must ignore.
  awk -v s=$size -v d="$dir" 'BEGIN {
    ll = 2.5 + s / 40000; ll128 = 3.8 + s / 140000; one = 4.0 + s / 160000; two = 6.0 + s / 250000
    if (s == 8192) ll = (ll128 < one ? ll128 : one) * 1.01
    auto = ll; if (s > 65536) auto = one; if (s > 524288) auto = two
    split("ll ll128 oneshot twoshot auto", names, " ")
    t["ll"] = ll; t["ll128"] = ll128; t["oneshot"] = one; t["twoshot"] = two; t["auto"] = auto
    for (i = 1; i <= 5; i++) {
      a = names[i]
      if (a == "ll" && s > 262144) continue
      if (a == "ll128" && s > 1048576) continue
      if (a == "oneshot" && s > 2097152) continue
      f = d "/2-plain-" a ".csv"
      printf "all_reduce_perf,fccl,plain,20,2,%d,%d,bfloat16,sum,out-of-place,%.3f,0,0,0\n", s, s / 2, t[a] >> f
      printf "all_reduce_perf,fccl,plain,20,2,%d,%d,bfloat16,sum,in-place,%.3f,0,0,0\n", s, s / 2, 0.001 >> f
      printf "all_reduce_perf,nccl,plain,20,2,%d,%d,bfloat16,sum,out-of-place,%.3f,0,0,0\n", s, s / 2, 0.001 >> f
    }
  }'
  size=$((size * 2))
done
output=$(python3 "$lab/tune-analyze" "$dir"/*.csv) || { echo "FAIL: tune-analyze exited non-zero"; exit 1; }
echo "$output"
failures=0
echo "$output" | grep -q "suggested for 2 ranks, plain: ll up to 65536 B, ll128 up to 262144 B, oneshot up to 524288 B" ||
  { echo "FAIL: wrong suggestion"; failures=$((failures + 1)); }
# At 128 KiB LL128 is the fastest (4.74 us) and auto ran one-shot (4.82): ratio 1.02.
echo "$output" | awk '$1 == 131072 && $7 == "ll128" && $8 == "1.02" { found = 1 } END { exit !found }' ||
  { echo "FAIL: the 128 KiB row is wrong"; failures=$((failures + 1)); }
# At 1 MiB two-shot is the fastest and auto ran it: ratio 1.00.
echo "$output" | awk '$1 == 1048576 && $7 == "twoshot" && $8 == "1.00" { found = 1 } END { exit !found }' ||
  { echo "FAIL: the 1 MiB row is wrong"; failures=$((failures + 1)); }
# The same measurements without LL128: its limit collapses onto LL's.
mkdir "$dir/noll128"
for algo in ll oneshot twoshot auto; do cp "$dir/2-plain-$algo.csv" "$dir/noll128/"; done
python3 "$lab/tune-analyze" "$dir/noll128"/*.csv |
  grep -q "suggested for 2 ranks, plain: ll up to 65536 B, ll128 up to 65536 B, oneshot up to 524288 B" ||
  { echo "FAIL: wrong suggestion without LL128 measurements"; failures=$((failures + 1)); }
# LL cannot run 512 KiB: its cell is '-'.
echo "$output" | awk '$1 == 524288 && $2 == "-" { found = 1 } END { exit !found }' ||
  { echo "FAIL: the 512 KiB LL cell should be '-'"; failures=$((failures + 1)); }
cp "$dir/2-plain-ll.csv" "$dir/bogus.csv"
if python3 "$lab/tune-analyze" "$dir/bogus.csv" > /dev/null 2>&1; then
  echo "FAIL: a file not named RANKS-BUFFERS-ALGO.csv was accepted"
  failures=$((failures + 1))
fi
echo "tune-analyze: $failures failed"
[ $failures = 0 ]
