#!/usr/bin/env bash
# Tenth session, last call on nvidia-h200-x2: where an eager small all-reduce spends its 5-6 us (the full run at
# accdd82: 5.1-5.9 us per call, while fccl-call-cost puts its host time at 2.9 us). GPU time and host time per call
# (-C 1) over 1000 calls, with programmatic dependent launch (FCCL_PDL=1, the default) and without; NCCL beside.
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
(meson setup build-gpu --buildtype=release && ninja -C build-gpu tools/all_reduce_perf) > /tmp/build.log 2>&1 ||
  { tail -20 /tmp/build.log; exit 1; }
for pdl in 1 0; do
  for cpu in 0 1; do
    echo "=== FCCL_PDL=$pdl -C $cpu"
    FCCL_PDL=$pdl timeout 60 build-gpu/tools/all_reduce_perf -b 8 -e 64K -f 8 -d bfloat16 -o sum -n 1000 -w 100 \
      -C $cpu --compare nccl --progress 0 2>&1 | grep -v "^#\|^$"
  done
done | tee "$OUT/eager.txt"
