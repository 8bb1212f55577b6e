#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs a tool that needs a GPU as a gpu-suite test: the tools' "PROGRAM: no GPU to run on: ..." with exit status 2
# (tools/common/cuda_status.h) becomes meson's skip (77); every other outcome, its output included, is the tool's.
# usage: skip_without_gpu.sh PROGRAM [ARGS...]
errors=$(mktemp) || exit 1
"$@" 2>"$errors"
code=$?
cat "$errors" >&2
if [ "$code" -eq 2 ] && grep -q ": no GPU to run on: " "$errors"; then
  code=77
fi
rm -f "$errors"
exit "$code"
