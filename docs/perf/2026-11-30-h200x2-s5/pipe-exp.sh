#!/usr/bin/env bash
# Experiment: oneshot_pipe correctness (quick collective tests) and timing against auto.
set -uo pipefail
. scripts/env.sh
export NCCL_NVLS_ENABLE=0
b=build-gpu
[ -f $b/build.ninja ] || meson setup $b --buildtype=release > /dev/null 2>&1
ninja -C $b > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
timeout 400 meson test -C $b --num-processes 1 --print-errorlogs ${TESTS:-allreduce_sweep allreduce_large graph allreduce_ranks3 barrier_stress allreduce_reinit} > $OUT/tests.log 2>&1
grep -E "^ *[0-9]+/[0-9]+ " $OUT/tests.log
p=$b/tools/all_reduce_perf
run() { # label, env..., then perf args after --
  local label=$1; shift
  echo "=== $label"
  env "$@" timeout 120 $p -np 2 -d bfloat16 -o sum -G 20 -n 20 -w 5 --progress 0 ${RANGE:--b 1M -e 256M -f 4} ${REG:-} 2>&1 | grep -E "^ +[0-9]+ " | awk '{print $1, $6, $10, "wrong", $9 + $13}'
}
{
REG="-R 2" RANGE="-b 1M -e 1G -f 2" run "registered auto (twoshot_reg from 2 MiB)" FCCL_ALGO=auto
REG="-R 2" RANGE="-b 256K -e 1M -f 2" run "registered twoshot_reg forced" FCCL_ALGO=twoshot_reg
} 2>&1 | tee $OUT/timing.txt
