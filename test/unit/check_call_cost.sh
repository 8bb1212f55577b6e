#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fccl-call-cost with good flags gets past its parser and then either measures (exit 0: its header, then a line per
# step down to the registered all-reduce) or, on a machine without a GPU, says "no GPU to run on" and why in the
# tools' one line (tools/common/cuda_status.h) and exits 2, the status of "nothing to run on". Its usage (also status 2: bad flags), a crash (a signal) or any other status
# fails.
# usage: check_call_cost.sh FCCL_CALL_COST FLAGS...
program=$1
shift
flags="$*"
out=$("$program" "$@" 2>&1)
code=$?
fail() {
  echo "FAIL: fccl-call-cost $flags: $1"
  echo "--- its output (exit $code):"
  echo "$out"
  exit 1
}
case $code in
  0)
    echo "$out" | grep -q "^# fccl-call-cost: host time per call" || fail "exit 0 without its header line"
    echo "$out" | grep -q "^fcclAllReduce registered  *[0-9]" || fail "exit 0 without the last step's line"
    ;;
  2)
    echo "$out" | grep -q "^usage:" && fail "good flags refused with the usage"
    echo "$out" | grep -q "^fccl-call-cost: no GPU to run on: ." || fail "exit 2 without saying there is no GPU"
    ;;
  *)
    if [ $code -gt 128 ]; then fail "killed by signal $((code - 128))"; fi
    fail "exit $code"
    ;;
esac
echo "fccl-call-cost $flags: exit $code, as expected"
