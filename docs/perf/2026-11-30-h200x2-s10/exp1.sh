#!/usr/bin/env bash
# Tenth session, first call on nvidia-h200-x2: (1) s8's phase harness with the library's kernels as they are now
# (per rank bound, no spills) beside its stripped-down two-shot, 1-64 MiB, while the library builds; (2) where the
# copy-engine reduce-scatter's fixed cost goes: an Nsight Systems trace (if nsys is there) of the registered
# 256 MiB all-reduce in a graph, one process driving both GPUs, as a per-node GPU timeline.
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
(meson setup build-gpu --buildtype=release && ninja -C build-gpu) > /tmp/build.log 2>&1 &
build=$!
(cd docs/perf/2026-11-30-h200x2-s8 && nvcc -O3 -arch=sm_90 -DWITH_LIBRARY_KERNELS -I../../../src/device \
  -I../../../src/include -I../../../include -o /tmp/phases phases.cu) && \
  timeout 200 /tmp/phases "ts P=1,ts P=2,lib-ts 132" > "$OUT/phases.txt" 2>&1
cat "$OUT/phases.txt"
wait $build || { tail -30 /tmp/build.log; exit 1; }
nsys=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/*/bin/nsys /usr/local/cuda*/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${nsys:-none}"
if [ -n "$nsys" ]; then
  timeout 150 "$nsys" profile --cuda-graph-trace=node -t cuda -o /tmp/copy -f true build-gpu/tools/all_reduce_perf \
    -np 1 -g 2 -b 256M -e 256M -d bfloat16 -o sum -R 2 -G 3 -n 2 -w 1 > "$OUT/nsys.txt" 2>&1
  timeout 100 "$nsys" stats -r cuda_gpu_trace -f csv -o /tmp/copy /tmp/copy.nsys-rep >> "$OUT/nsys.txt" 2>&1
  ls /tmp/copy* >> "$OUT/nsys.txt"
  cp /tmp/copy*gpu_trace*.csv "$OUT/copy-trace.csv" 2>/dev/null
  tail -5 "$OUT/nsys.txt"
fi
