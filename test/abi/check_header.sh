#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Compiles a public header on its own as C11 and as C++ with warnings as errors.
# usage: check_header.sh header.h [include-dir...]
set -eu
header=$1
shift
incs=""
for dir in "$@"; do incs="$incs -I$dir"; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include "%s"\nint fcclHeaderCheck(void) { return (int)sizeof(fcclResult_t); }\n' "$header" > "$tmp/t.c"
cp "$tmp/t.c" "$tmp/t.cc"
${CC:-cc} -std=c11 -Wall -Wextra -Wpedantic -Werror $incs -c "$tmp/t.c" -o "$tmp/c.o"
${CXX:-c++} -std=c++11 -Wall -Wextra -Wpedantic -Werror $incs -c "$tmp/t.cc" -o "$tmp/cc.o"
echo "header: $header compiles as C11 and C++11"
