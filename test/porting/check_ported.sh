#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The porting test (docs/porting.md): an NCCL program renamed mechanically, sed 's/nccl/fccl/g; s/NCCL/FCCL/g', must
# build against fccl.h with warnings as errors and link against libfccl; with "run" it then runs (77, a skip, when
# there is no GPU). The program is checked to be NCCL code first: it compiles against nccl.h as it is, when nccl.h is
# there.
# usage: check_ported.sh compile|run program.c fccl-include-dir cuda-include-dir libfccl.so cuda-lib-dir [ranks]
# CC: the C compiler command (default cc).
set -eu
mode=$1 program=$2 fcclInclude=$3 cudaInclude=$4 libfccl=$5 cudaLib=$6 ranks=${7:-2}
cc=${CC:-cc}
libfccl=$(readlink -f "$libfccl")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -f "$cudaInclude/nccl.h" ]; then
  $cc -std=c11 -Wall -Wextra -Werror -I"$cudaInclude" -fsyntax-only "$program"
  echo "porting: $(basename "$program") is NCCL code: it compiles against nccl.h"
fi
sed 's/nccl/fccl/g; s/NCCL/FCCL/g' "$program" > "$tmp/ported.c"
if grep -qi nccl "$tmp/ported.c"; then
  echo "porting: the renamed program still says nccl" >&2
  exit 1
fi
$cc -std=c11 -Wall -Wextra -Werror -I"$fcclInclude" -I"$cudaInclude" -c "$tmp/ported.c" -o "$tmp/ported.o"
$cc "$tmp/ported.o" -o "$tmp/ported" "$libfccl" -Wl,-rpath,"$(dirname "$libfccl")" -L"$cudaLib" -lcudart
echo "porting: renamed with sed, it compiles against fccl.h with warnings as errors and links against libfccl"
[ "$mode" = run ] || exit 0
status=0
"$tmp/ported" "$ranks" || status=$?
[ $status -eq 77 ] && echo "porting: no GPU: the renamed program did not run"
exit $status
