#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# scripts/check-style in a made-up repository: older code laid out by hand, then the commit that brings .clang-format.
# Checks that a line over 120 columns fails even in old code, while old code's hand layout passes; that a badly laid
# out change fails, naming the fix, and that --fix reformats that change and nothing older; that golden data is
# exempt; that a shallow clone is refused with what to run. Skips (77) without clang-format and git-clang-format.
# usage: check_style.sh SOURCE_ROOT
root=$1
command -v git-clang-format > /dev/null || command -v git-clang-format-14 > /dev/null || {
  echo "skipped: no git-clang-format"
  exit 77
}
command -v clang-format-14 > /dev/null || command -v clang-format > /dev/null || {
  echo "skipped: no clang-format"
  exit 77
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
repo=$dir/repo
mkdir -p "$repo/src" "$repo/scripts" "$repo/test/data"
cd "$repo" || exit 1
git init -q . && git config user.email test@example.com && git config user.name test
# Old code: aligned by hand in a way clang-format would change, and a line over 120 columns.
long=$(printf '%0130d' 0)
printf 'int old(int a) {\n  int b   = a;  /* hand-aligned */\n  return b;\n}\n' > src/old.c
printf '/* %s */\n' "$long" > src/wide.c
git add src && git commit -qm old
cp "$root/.clang-format" .clang-format
cp "$root/scripts/check-style" scripts/check-style
git add .clang-format scripts && git commit -qm style

# The long line fails although it is old; the hand layout of old code does not.
scripts/check-style > "$dir/out.txt" 2>&1 && fail "an old line of 136 columns passed"
grep -q "^src/wide.c:1: 136 columns$" "$dir/out.txt" || fail "the long line is not named: $(cat "$dir/out.txt")"
grep -q "^diff" "$dir/out.txt" && fail "untouched old code was reformatted: $(cat "$dir/out.txt")"
git rm -q src/wide.c && git commit -qm narrow
scripts/check-style > "$dir/out.txt" 2>&1 || fail "untouched old code failed: $(cat "$dir/out.txt")"

# A change laid out badly, below the old code: fails naming the fix; --fix formats it and nothing older.
printf 'int added( int x ){return x+1;}\n' >> src/old.c
scripts/check-style > "$dir/out.txt" 2>&1 && fail "a badly laid out change passed"
grep -q "scripts/check-style --fix" "$dir/out.txt" || fail "the failure does not say what to run: $(cat "$dir/out.txt")"
scripts/check-style --fix > "$dir/out.txt" 2>&1 || fail "--fix did not end in a pass: $(cat "$dir/out.txt")"
grep -q "^int added(int x) { return x + 1; }$" src/old.c || fail "--fix did not reformat the change: $(cat src/old.c)"
grep -q "^  int b   = a;  /\* hand-aligned \*/$" src/old.c || fail "--fix reformatted old code: $(cat src/old.c)"
git commit -qam fixed

# Golden data is exempt from both checks.
printf '/* %s */\n' "$long" > test/data/golden.h
git add test/data && git commit -qm golden
scripts/check-style > "$dir/out.txt" 2>&1 || fail "a long line in test/data failed: $(cat "$dir/out.txt")"

# A shallow clone cannot find the commit that brought .clang-format: refused, saying what to run.
git clone -q --depth 1 "file://$repo" "$dir/shallow" 2> /dev/null
(cd "$dir/shallow" && scripts/check-style > "$dir/out.txt" 2>&1) && fail "a shallow clone passed"
grep -q "git fetch --unshallow" "$dir/out.txt" || fail "the shallow clone's refusal: $(cat "$dir/out.txt")"

echo "check_style: $failures failed"
[ $failures = 0 ]
