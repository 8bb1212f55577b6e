#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fused-norm-tune end to end without a GPU, on a stand-in build tree: a build.ninja whose targets are there, a
# stand-in fused_norm_perf that writes made-up timings in the real one's CSV format, and a libfccl beside meson's
# object directory (libfccl.so.0.1.0.p, which a glob on libfccl.so.0.* also matches). A python3 first on PATH
# records the FCCL_LIBRARY the PyTorch stage gets, then runs the real python3 (the benchmark exits 77 without
# PyTorch). Checks the flags each timing run gets, the library the PyTorch stage loads (the file, not the object
# directory: which of the two a glob finds first is the file system's order) and the table. The stand-in tree is no meson build, so the
# tests stage fails and the script exits 1: expected here.
# usage: check_fused_norm_tune.sh GPU_LAB_DIR
lab=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
build="$dir/build"
mkdir -p "$build/tools" "$build/test/gpu" "$build/src" "$dir/bin"
for target in tools/fccl-info test/gpu/test_fused_norm test/gpu/test_fused_norm_shapes; do
  printf '#!/bin/sh\nexit 77\n' > "$build/$target"
  chmod +x "$build/$target"
done
cat > "$build/tools/fused_norm_perf" <<'PERF'
#!/bin/sh
echo "$*" >> "$FAKE_LOG"
csv= kernel=row
while [ $# -gt 0 ]; do
  case $1 in
    --csv) csv=$2; shift ;;
    -K) kernel=$2; shift ;;
  esac
  shift
done
[ -s "$csv" ] || echo "kind,form,kernel,hidden,tokens,row_threads,block_threads,us,GBps,check" >> "$csv"
for tokens in 1 64; do
  if [ "$kernel" = legacy ]; then
    echo "fused,auto,legacy,4096,$tokens,0,0,9.000,100.0,ulp" >> "$csv"
  else
    echo "fused,auto,row,4096,$tokens,0,0,4.000,200.0,yes" >> "$csv"
    echo "pair,auto,row,4096,$tokens,128,512,8.000,100.0,-" >> "$csv"
    echo "norm,auto,row,4096,$tokens,128,512,3.000,300.0,yes" >> "$csv"
    echo "cand,auto,row,4096,$tokens,64,256,2.500,320.0,ulp" >> "$csv"
    echo "cand,auto,row,4096,$tokens,256,512,2.000,400.0,NO" >> "$csv"
  fi
done
PERF
chmod +x "$build/tools/fused_norm_perf"
cat > "$build/build.ninja" <<'NINJA'
build tools/fused_norm_perf tools/fccl-info test/gpu/test_fused_norm test/gpu/test_fused_norm_shapes: phony
NINJA
mkdir -p "$build/src/libfccl.so.0.1.0.p"
echo "not a real library" > "$build/src/libfccl.so.0.1.0"
ln -s libfccl.so.0.1.0 "$build/src/libfccl.so.0"
python=$(command -v python3)
cat > "$dir/bin/python3" <<PY
#!/bin/sh
[ -n "\${FCCL_LIBRARY:-}" ] && echo "\$FCCL_LIBRARY" >> "$dir/library.txt"
exec "$python" "\$@"
PY
chmod +x "$dir/bin/python3"
export FAKE_LOG="$dir/calls.txt"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
PATH="$dir/bin:$PATH" BUILDDIR="$build" TUNE_HIDDEN=4096 TUNE_TOKENS=1,64 TUNE_SECONDS=60 \
  bash "$lab/fused-norm-tune" "$dir/out" > "$dir/stdout.txt" 2>&1
code=$?
cat "$dir/stdout.txt"
[ "$code" = 1 ] || fail "exit status $code, not 1 (the stand-in tree fails the tests stage)"
grep -q -- "-g 1 -H 4096 -t 1,64 -K row -C --csv $dir/out/perf.csv" "$dir/calls.txt" ||
  fail "the row kernel's timing run got other flags: $(cat "$dir/calls.txt")"
grep -q -- "-g 1 -H 4096 -t 1,64 -K legacy -b 0 --csv $dir/out/perf.csv" "$dir/calls.txt" ||
  fail "the legacy kernel's timing run got other flags: $(cat "$dir/calls.txt")"
library=$(head -1 "$dir/library.txt" 2>/dev/null)
{ [ -f "$library" ] && [ "$(cat "$library")" = "not a real library" ]; } ||
  fail "the PyTorch stage got FCCL_LIBRARY=$library, not the library"
# hidden 4096, 1 token: legacy 9 us, fused 4 us (same: yes), norm 3, pair 8, best checked candidate 64x256.
awk '$1 == 4096 && $2 == 1 && $4 == "9.00" && $7 == "4.00" && $10 == "yes" && $12 == "3.00" && $14 == "8.00" &&
     $18 == "64x256" { found = 1 } END { exit !found }' "$dir/out/summary.txt" ||
  fail "no right table row for hidden 4096, 1 token"
for file in build.log tests.log perf.txt perf.csv torch.txt env.txt summary.txt; do
  [ -f "$dir/out/$file" ] || fail "no $file"
done
[ "$failures" = 0 ] || exit 1
echo "fused-norm-tune: ok"
