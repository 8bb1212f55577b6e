#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Fails unless the shared library exports exactly the names in the checked-in list, and the list names exactly
# the functions that include/fccl.h declares with FCCL_API (so the header, the version script and the library
# cannot drift apart).
# usage: check_exports.sh libfccl.so exported-symbols.txt fccl.h
set -eu
lib=$1 list=$2 header=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Type A entries are version nodes (FCCL_0), not symbols.
nm -D --defined-only "$lib" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u > "$tmp/actual"
grep -v '^#' "$list" | sed '/^$/d' | sort -u > "$tmp/expected"
sed -n 's/^FCCL_API[^(]*[ *]\(fccl[A-Za-z0-9_]*\)(.*/\1/p' "$header" | sort -u > "$tmp/declared"
status=0
if ! diff -u "$tmp/expected" "$tmp/actual" > "$tmp/diff1"; then
  echo "exported symbols differ from $list (- expected, + exported):"
  cat "$tmp/diff1"
  status=1
fi
if ! diff -u "$tmp/declared" "$tmp/expected" > "$tmp/diff2"; then
  echo "functions declared FCCL_API in $header differ from $list (- declared, + listed):"
  cat "$tmp/diff2"
  status=1
fi
[ $status -eq 0 ] && echo "abi: $(wc -l < "$tmp/actual") exported symbols match"
exit $status
