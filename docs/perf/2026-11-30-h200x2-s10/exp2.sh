#!/usr/bin/env bash
# Tenth session, second call on nvidia-h200-x2: why the library's registered two-shot (push scatter, two parts)
# takes 52.3 us at 16 MiB where s8's stripped-down kernel takes 50.7 (exp1). The SASS of both (cuobjdump there;
# none here), and the harness with the pulling loop's depth for 2 ranks at 1, 2 and 4 units (FCCL_PULL_DEPTH_2RANKS).
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
cd docs/perf/2026-11-30-h200x2-s8
flags="-O3 -arch=sm_90 -DWITH_LIBRARY_KERNELS -I../../../src/device -I../../../src/include -I../../../include"
for depth in 1 2 4; do
  nvcc $flags -DFCCL_PULL_DEPTH_2RANKS=$depth -o /tmp/phases-d$depth phases.cu > /tmp/nvcc-d$depth.log 2>&1 &
done
nvcc $flags -cubin -o /tmp/phases.cubin phases.cu > /tmp/nvcc-cubin.log 2>&1 &
wait
tail -3 /tmp/nvcc-*.log
for f in _ZN4fccl19allReduceTwoshotRegILi9ELi0ELi2EEEv11fcclDevComm11fcclDevArgs _Z8tsKernelILb0ELb0ELb1EEv4Args; do
  cuobjdump -sass -fun "$f" /tmp/phases.cubin
done > "$OUT/sass.txt" 2>&1
wc -l "$OUT/sass.txt"
for turn in 1 2; do
  for depth in 1 2 4; do
    echo "=== depth $depth, turn $turn"
    timeout 100 /tmp/phases-d$depth "tsb P=2,lib-ts 132" 2>&1 | grep -v "^#"
  done
done | tee "$OUT/phases-depth.txt"
