#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# libfccl-nccl exports exactly the functions nccl.h declares (ncclX and pncclX: a loader that binds NCCL's names on
# the library's handle, as PyNccl does, finds every one) plus its own fcclNccl* calls; its SONAME is not
# libnccl.so.2 and it does not link NCCL (it opens the real one at run time).
# usage: check_symbols.sh LIBRARY NCCL_H [MORE_HEADERS...]
set -eu
lib=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Every function a header declares: a line starting with its return type and an nccl/pnccl name with "(".
declaration='^[[:space:]]*(__attribute__[^)]*\)\)[[:space:]]*)?(ncclResult_t|const char[[:space:]]*\*|void)'
declaration="$declaration"'[[:space:]*]*(p?nccl[A-Za-z0-9_]*)[[:space:]]*\(.*'
cat "$@" | tr -d '\r' | sed -En "s/$declaration/\\3/p" | sort -u > "$tmp/declared"
# The deprecated ncclResetDebugInit is declared on the line after its attribute: the pattern above finds it there.
nm -D --defined-only "$lib" | awk '$2 ~ /^[TWi]$/ {print $3}' | sort -u > "$tmp/exported"
status=0
if [ "$(wc -l < "$tmp/declared")" -lt 40 ]; then
  echo "FAIL: only $(wc -l < "$tmp/declared") functions found in $*: the header was not read right"
  status=1
fi
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
extra=$(grep -v '^fcclNccl' "$tmp/exported" | comm -13 "$tmp/declared" -)
if [ -n "$missing" ]; then
  echo "FAIL: declared by the headers, not exported:"; echo "$missing"; status=1
fi
if [ -n "$extra" ]; then
  echo "FAIL: exported, not declared by the headers:"; echo "$extra"; status=1
fi
grep -q '^fcclNcclGetStats$' "$tmp/exported" || { echo "FAIL: fcclNcclGetStats is not exported"; status=1; }
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libfccl-nccl.so.2" ] || { echo "FAIL: SONAME is '$soname', not libfccl-nccl.so.2"; status=1; }
if readelf -d "$lib" | grep NEEDED | grep -q 'libnccl'; then
  echo "FAIL: $lib links NCCL"; status=1
fi
[ $status -eq 0 ] &&
  echo "OK: $(wc -l < "$tmp/declared") functions of the headers exported, SONAME $soname, NCCL not linked"
exit $status
