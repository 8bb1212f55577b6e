#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A stand-in all_reduce_perf for the script tests: records its arguments in $FAKE_LOG and writes one out-of-place
# fccl row per size from -b to -e (factor -f) into --csv, with made-up times from FCCL_ALGO, the size,
# FCCL_STAGING_BYTES and FAKE_EXTRA_US (added to every time).
echo "FCCL_ALGO=${FCCL_ALGO:-} FCCL_STAGING_BYTES=${FCCL_STAGING_BYTES:-} $*" >> "$FAKE_LOG"
b=0 e=0 f=2 csv=""
while [ $# -gt 0 ]; do
  case $1 in
    -b) b=$2; shift ;; -e) e=$2; shift ;; -f) f=$2; shift ;; --csv) csv=$2; shift ;;
  esac
  shift
done
bytes() { case $1 in *K) echo $((${1%K} << 10)) ;; *M) echo $((${1%M} << 20)) ;; *G) echo $((${1%G} << 30)) ;; *) echo "$1" ;; esac; }
awk -v b="$(bytes "$b")" -v e="$(bytes "$e")" -v f="$f" -v algo="${FCCL_ALGO:-}" -v staging="${FCCL_STAGING_BYTES:-33554432}" \
  -v extra="${FAKE_EXTRA_US:-0}" 'BEGIN {
  print "collective,engine,buffers,graph,nranks,size,count,type,redop,placement,time_us,algbw_gbs,busbw_gbs,wrong"
  for (s = b; s <= e; s *= f) {
    ll = 2.5 + s / 40000; ll128 = 3.8 + s / 140000; one = 4.0 + s / 160000; two = 6.0 + s / 250000 + (s / staging) * 2
    t = algo == "ll" ? ll : algo == "ll128" ? ll128 : algo == "oneshot" ? one : algo == "twoshot" ? two : (s <= 65536 ? ll : s <= 524288 ? one : two)
    printf "all_reduce_perf,fccl,plain,20,2,%d,%d,bfloat16,sum,out-of-place,%.3f,0,0,0\n", s, s / 2, t + extra
  }
}' > "$csv"
