#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fccl-info --memory on any machine: exit 0, a slot line for each of 2 to 8 ranks with a size, and either "memory
# (measured) : no GPU" or, on a GPU, the first communicator's line and the second's, each with its own MiB and the
# process's arena (one chunk, then two: fccl allocates a communicator's slot when it comes, not four at once).
# usage: check_fccl_info_memory.sh FCCL_INFO
out=$("$1" --memory 2>&1)
code=$?
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
[ $code = 0 ] || fail "fccl-info --memory exited $code"
for n in 2 3 4 5 6 7 8; do
  echo "$out" | grep -qE "^  $n ranks: slot [0-9]+\.[0-9] MiB$" || fail "no slot line for $n ranks"
done
if echo "$out" | grep -qx "memory (measured) : no GPU"; then
  echo "no GPU: the measured lines are not expected"
else
  echo "$out" | grep -qE "^memory \(measured\) : GPU 0, a first communicator .*: [0-9.]+ MiB of its own; .* in 1 chunk" ||
    fail "no line for the first communicator, or its arena is not one chunk"
  echo "$out" | grep -qE "^memory \(measured\) : GPU 0, a second beside it: [0-9.]+ MiB of its own; .* in 2 chunk" ||
    fail "no line for the second communicator, or the arena did not grow by one chunk"
fi
if [ $failures != 0 ]; then
  echo "--- fccl-info --memory (exit $code):"
  echo "$out"
fi
echo "fccl-info --memory: $failures failed"
[ $failures = 0 ]
