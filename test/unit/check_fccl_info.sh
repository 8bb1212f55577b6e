#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fccl-info --params on any machine (a GPU or none): exit 0, the library and header version, the build configuration
# this build was configured with, the CUDA driver, runtime and GPU lines, and every parameter of the registry
# (src/include/param_list.h) once, by name, with its value.
# usage: check_fccl_info.sh FCCL_INFO PARAM_LIST VERSION BUILD_TYPE CUDA_VERSION GPU_ARCHS NCCL HWLOC MPI
#        (NCCL, HWLOC, MPI: yes or no)
info=$1
list=$2
out=$("$info" --params 2>/dev/null)
code=$?
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
expectLine() { # the exact line
  echo "$out" | grep -qxF -- "$1" || fail "no line '$1'"
}
[ $code = 0 ] || fail "fccl-info --params exited $code"
expectLine "fccl version      : $3 (header $3)"
expectLine "build type        : $4"
expectLine "built with CUDA   : $5, gpu_archs '$6'"
expectLine "NCCL support      : $7"
expectLine "hwloc support     : $8"
expectLine "MPI support       : $9"
for label in "CUDA driver" "CUDA runtime" "GPUs" "NCCL at run time" "path (local GPUs)"; do
  echo "$out" | grep -q "^$label  *: ." || fail "no '$label' line"
done
expectLine "Environment parameters (value / default):"
names=$(sed -n 's/^FCCL_PARAM(\([A-Z0-9_]*\),.*/FCCL_\1/p' "$list")
[ -n "$names" ] || fail "no FCCL_PARAM entry read from $list"
for name in $names; do
  count=$(echo "$out" | grep -c "^  $name  *= .*(default \"")
  [ "$count" = 1 ] || fail "parameter $name printed $count times, expected once"
done
printed=$(echo "$out" | grep -c "^  FCCL_[A-Z0-9_]*  *= ")
expected=$(echo "$names" | wc -w)
[ "$printed" = "$expected" ] || fail "$printed parameters printed, the registry has $expected"
if [ $failures != 0 ]; then
  echo "--- fccl-info --params (exit $code):"
  echo "$out"
fi
echo "fccl-info: $failures failed"
[ $failures = 0 ]
