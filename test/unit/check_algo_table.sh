#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fccl-info --algo prints the selection that fcclAllReduce makes: it must match the table in docs/collectives.md
# (2, 4 and 8 ranks), one rank's copy, FCCL_ALGO's forcing and fallback, and refuse bad arguments.
# usage: check_algo_table.sh FCCL_INFO
info=$1
failures=0
# "plain registered" algorithm names at one size.
choice() {
  "$info" --algo "$1" --sms 132 | awk -v b="$2" '$1 == b { print $2, ($2 == "copy" ? $3 : $4) }'
}
expect() { # ranks bytes "plain registered" [FCCL_ALGO [FCCL_LL128]]
  got=$(FCCL_ALGO=${4:-} FCCL_LL128=${5:-1} choice "$1" "$2")
  if [ "$got" != "$3" ]; then
    echo "FAIL: $1 ranks, $2 bytes, FCCL_ALGO='${4:-}' FCCL_LL128='${5:-1}': got '$got', expected '$3'"
    failures=$((failures + 1))
  fi
}
expect 2 262144 "ll ll"
expect 2 524288 "ll128 ll128"
expect 2 1048576 "ll128 ll128"
expect 2 1048576 "oneshot_push twoshot_reg" "" 0
expect 2 1048576 "ll128 ll128" ll128 0
expect 2 2097152 "oneshot_push twoshot_reg"
expect 2 4194304 "oneshot_push twoshot_reg"
expect 2 8388608 "oneshot_push twoshot_reg"
expect 2 16777216 "twoshot_staged twoshot_reg"
expect 4 32768 "ll ll"
expect 4 65536 "oneshot_push oneshot_pull"
expect 4 262144 "oneshot_push oneshot_pull"
expect 4 524288 "twoshot_staged twoshot_reg"
expect 8 16384 "ll ll"
expect 8 32768 "oneshot_push oneshot_pull"
expect 8 131072 "oneshot_push oneshot_pull"
expect 8 262144 "twoshot_staged twoshot_reg"
expect 1 1024 "copy copy"
expect 1 1024 "ll ll" ll
expect 2 1024 "twoshot_staged twoshot_reg" twoshot
expect 2 262144 "ll ll" ll
# The LL area of 2 ranks holds 256 KiB: beyond it FCCL_ALGO=ll falls back to the table.
expect 2 524288 "ll128 ll128" ll
expect 2 1024 "ll128 ll128" ll128
# LL128 holds 1.875 MiB per peer for 2 ranks: beyond it FCCL_ALGO=ll128 falls back to the table.
expect 2 16777216 "twoshot_staged twoshot_reg" ll128
expect 2 8 "oneshot_push oneshot_pull" oneshot
# The registered two-shot scatters by push for 2 ranks from 16 MiB (into the inbox while a share fits one 8 MiB
# staging chunk: 16 MiB) and by the copy engines from 256 MiB (the plain column never does), and never for more
# ranks.
scatterRows() { "$info" --algo "$1" --sms 132 | awk -v kind="$2" '/^ / && $NF == kind { print $1 }' | tr '\n' ' '; }
got=$(scatterRows 2 inbox-scatter)
if [ "$got" != "16777216 " ]; then
  echo "FAIL: 2 ranks scatter into the inbox at '$got', expected at 16 MiB"
  failures=$((failures + 1))
fi
got=$(FCCL_STAGING_BYTES=67108864 scatterRows 2 inbox-scatter)
if [ "$got" != "16777216 33554432 " ]; then
  echo "FAIL: 2 ranks with 64 MiB of staging scatter into the inbox at '$got', expected at 16-32 MiB"
  failures=$((failures + 1))
fi
got=$(scatterRows 2 push-scatter)
if [ "$got" != "33554432 67108864 134217728 " ]; then
  echo "FAIL: 2 ranks scatter by push at '$got', expected at 32-128 MiB"
  failures=$((failures + 1))
fi
got=$(scatterRows 2 copy-scatter)
if [ "$got" != "268435456 536870912 1073741824 " ]; then
  echo "FAIL: 2 ranks scatter by copy at '$got', expected from 256 MiB"
  failures=$((failures + 1))
fi
for ranks in 3 4 8; do
  if [ -n "$(scatterRows $ranks push-scatter)$(scatterRows $ranks inbox-scatter)$(scatterRows $ranks copy-scatter)" ]; then
    echo "FAIL: $ranks ranks scatter by push or copy at $(scatterRows $ranks push-scatter)$(scatterRows $ranks inbox-scatter)$(scatterRows $ranks copy-scatter)"
    failures=$((failures + 1))
  fi
done
rows=$("$info" --algo 8 | grep -c '^ ')
if [ "$rows" != 28 ]; then
  echo "FAIL: --algo 8 printed $rows sizes, expected 28 (8 B .. 1 GiB)"
  failures=$((failures + 1))
fi
for bad in "--algo 9" "--algo 0" "--algo x" "--sms 10" "--algo 2 --sms 0"; do
  # shellcheck disable=SC2086
  "$info" $bad > /dev/null 2>&1
  code=$?
  if [ $code != 2 ]; then
    echo "FAIL: fccl-info $bad exited $code, expected 2"
    failures=$((failures + 1))
  fi
done
FCCL_ALGO=bogus "$info" --algo 2 > /dev/null 2>&1
if [ $? != 2 ]; then
  echo "FAIL: FCCL_ALGO=bogus was accepted"
  failures=$((failures + 1))
fi
# The other collectives' table (docs/collectives.md): LL up to the all-reduce's LL limit, then direct or staged.
move() { # collective ranks bytes "plain registered" [VARIABLE=value]
  got=$(env ${5:-FCCLTEST_NONE=1} "$info" --algo "$2" --collective "$1" --sms 132 |
        awk -v b="$3" '$1 == b { print $2, ($2 == "copy" ? $3 : $4) }')
  if [ "$got" != "$4" ]; then
    echo "FAIL: $1, $2 ranks, $3 bytes ${5:-}: got '$got', expected '$4'"
    failures=$((failures + 1))
  fi
}
move allgather 2 262144 "allgather_ll allgather_ll"
move allgather 2 524288 "allgather_staged allgather_direct"
move reducescatter 4 32768 "reducescatter_ll reducescatter_ll"
move reducescatter 4 65536 "reducescatter_staged reducescatter_direct"
move broadcast 8 16384 "broadcast_ll broadcast_ll"
move broadcast 8 32768 "broadcast_staged broadcast_direct"
move broadcast 1 1024 "copy copy"
move allgather 2 1024 "allgather_staged allgather_staged" FCCL_ALLGATHER_ALGO=staged
# The copy engines: never by the automatic choice by default; forced on registered buffers (plain ones fall back to
# the table); from FCCL_COPY_MOVE_MIN on registered buffers beyond LL; never for the reduce-scatter.
move allgather 2 1073741824 "allgather_staged allgather_direct"
move broadcast 2 1073741824 "broadcast_staged broadcast_direct"
move allgather 2 1024 "allgather_ll allgather_copy" FCCL_ALLGATHER_ALGO=copy
move broadcast 8 1048576 "broadcast_staged broadcast_copy" FCCL_BROADCAST_ALGO=copy
move broadcast 4 1048576 "broadcast_staged broadcast_copy" FCCL_COPY_MOVE_MIN=1048576
move broadcast 4 524288 "broadcast_staged broadcast_direct" FCCL_COPY_MOVE_MIN=1048576
move allgather 2 262144 "allgather_ll allgather_ll" FCCL_COPY_MOVE_MIN=1
move allgather 2 524288 "allgather_staged allgather_copy" FCCL_COPY_MOVE_MIN=1
move reducescatter 2 1048576 "reducescatter_staged reducescatter_direct" FCCL_COPY_MOVE_MIN=1
# The rooted collectives: the same table, no copy form, no variable of their own.
move reduce 2 262144 "reduce_ll reduce_ll"
move reduce 2 524288 "reduce_staged reduce_direct"
move gather 4 32768 "gather_ll gather_ll"
move gather 4 65536 "gather_staged gather_direct"
move scatter 8 16384 "scatter_ll scatter_ll"
move scatter 8 1073741824 "scatter_staged scatter_direct"
move reduce 1 1024 "copy copy"
# The SM budget: every grid within it, from the variables or from --max-ctas / --min-ctas (a config's fields),
# which the variables override; the one-block LL call raised to the minimum, the maximum winning over it.
budget() { # ranks bytes "plain grid" "options" [VARIABLE=value]
  got=$(env ${5:-FCCLTEST_NONE=1} "$info" --algo "$1" --sms 132 $4 | awk -v b="$2" '$1 == b { print $2, $3 }')
  if [ "$got" != "$3" ]; then
    echo "FAIL: SM budget: $1 ranks, $2 bytes, options '$4' ${5:-}: got '$got', expected '$3'"
    failures=$((failures + 1))
  fi
}
budget 2 1073741824 "twoshot_staged 132x512" ""
budget 2 1073741824 "twoshot_staged 8x512" "" FCCL_MAX_CTAS=8
budget 2 1073741824 "twoshot_staged 16x512" "--max-ctas 16"
budget 2 1073741824 "twoshot_staged 8x512" "--max-ctas 16" FCCL_MAX_CTAS=8
budget 2 8 "ll 1x32" ""
budget 2 8 "ll 4x32" "--min-ctas 4"
budget 2 8 "ll 6x32" "--min-ctas 4 --max-ctas 8" FCCL_MIN_CTAS=6
budget 8 131072 "oneshot_push 3x512" "--max-ctas 3"
budget 4 8 "ll 2x32" "--max-ctas 2" FCCL_MIN_CTAS=4
got=$("$info" --algo 2 --collective gather --sms 132 --max-ctas 5 | awk '$1 == 1073741824 { print $2, $3 }')
if [ "$got" != "gather_staged 5x512" ]; then
  echo "FAIL: SM budget: a gather of 1 GiB blocks with --max-ctas 5: got '$got'"
  failures=$((failures + 1))
fi
if [ -z "$("$info" --algo 2 --max-ctas 7 | grep '^# SM budget: 0..7 blocks')" ]; then
  echo "FAIL: fccl-info --algo does not show the SM budget"
  failures=$((failures + 1))
fi
for bad in "--max-ctas 4" "--algo 2 --max-ctas 0" "--algo 2 --min-ctas 9 --max-ctas 3" "--algo 2 --min-ctas x"; do
  # shellcheck disable=SC2086
  "$info" $bad > /dev/null 2>&1
  code=$?
  if [ $code != 2 ]; then
    echo "FAIL: fccl-info $bad exited $code, expected 2"
    failures=$((failures + 1))
  fi
done
FCCL_REDUCESCATTER_ALGO=copy "$info" --algo 2 --collective reducescatter > /dev/null 2>&1
if [ $? != 2 ]; then
  echo "FAIL: FCCL_REDUCESCATTER_ALGO=copy was accepted (the reduce-scatter has no copy form)"
  failures=$((failures + 1))
fi
for bad in "--algo 2 --collective alltoall" "--collective allgather"; do
  # shellcheck disable=SC2086
  "$info" $bad > /dev/null 2>&1
  code=$?
  if [ $code != 2 ]; then
    echo "FAIL: fccl-info $bad exited $code, expected 2"
    failures=$((failures + 1))
  fi
done
echo "algo table: $failures failed"
[ $failures = 0 ]
