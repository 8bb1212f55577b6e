#!/usr/bin/env bash
# Tenth session, first call on nvidia-h200-x4 (#8): what fccl-topo sees on 4 GPUs (with a P2P check, and the
# machine recorded for replay in the topology tests), fccl-info's parameters and choices for 3 and 4 ranks, and
# scripts/gpu-tune at 4 then 3 ranks (every algorithm at every size, plain and registered; staging 16-128 MiB).
# usage: OUT=dir $0 (repository root)
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
start=$SECONDS
(meson setup build-gpu --buildtype=release && ninja -C build-gpu) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "build: $((SECONDS - start)) s"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ) commit: ${GIT_COMMIT:-unknown}"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader
  nvidia-smi topo -m
  echo "=== fccl-topo --verify-p2p --record \$OUT/h200x4"
  timeout 120 build-gpu/tools/fccl-topo --verify-p2p --record "$OUT/h200x4"; echo "exit $?"
  echo "=== fccl-info --params"; build-gpu/tools/fccl-info --params
  for n in 3 4 8; do echo "=== fccl-info --algo $n"; build-gpu/tools/fccl-info --algo $n; done
} > "$OUT/topo.txt" 2>&1
timeout 60 build-gpu/tools/fccl-topo --json -o "$OUT/topo.json"
echo "topo: $((SECONDS - start)) s"
for n in 4 3; do
  mkdir -p /tmp/tune$n
  timeout 200 scripts/gpu-tune build-gpu /tmp/tune$n $n > /tmp/tune$n.log 2>&1; echo "tune $n exit $?: $((SECONDS - start)) s"
  cp /tmp/tune$n/tune.txt "$OUT/tune$n.txt"; cp /tmp/tune$n/tune.csv "$OUT/tune$n.csv"
  sed -n '/^# /,/^=== all_reduce_perf/p' /tmp/tune$n/tune.txt | head -120
done
