#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# nccl-tests, unchanged, with libfccl-nccl preloaded: every program's own data check (-c 1) on fccl's collectives
# (all_reduce, all_gather, reduce_scatter, broadcast, reduce, gather, scatter) and on those NCCL carries (alltoall,
# sendrecv), eager and in CUDA graphs (-G), plain and registered (-R 0/1/2), in place and out of place (every run
# does both), every type (-d all); the reductions with a pre-multiplied sum (-o mulsum: ncclRedOpCreatePreMulSum,
# fccl's twin of the op); an all-reduce under an SM budget (NCCL_MAX_CTAS, which the library hands fccl); and the
# library's own count, at each communicator's destroy, of what fccl carried.
#
# usage: check_nccl_tests.sh LIBRARY DRIVER WORKDIR MODE
#   LIBRARY  libfccl-nccl.so.2;  DRIVER  test_nccl_api (it counts the GPUs);  WORKDIR  where nccl-tests is built
#   MODE     ranks2 | ranks3: that many processes (mpirun) sharing GPU 0, each with its own NCCL_HOSTID;
#            gpus: one process driving every GPU (up to 4) from one thread (nccl-tests -g N), no MPI needed
# The source of nccl-tests (v2.19.6, a copy of NVIDIA's release) comes from NCCL_TESTS_SRC, else from
# build-nccl-tests-src/ at the top of the source tree. Exit status 77 (skip), naming what is missing, without a GPU,
# the source, or (ranksN) mpirun and mpi.h. Never runs nccl-tests' -D (its device kernels use multimem).
set -uo pipefail
library=$1 driver=$2 workdir=$3 mode=$4
here=$(cd "$(dirname "$0")" && pwd)
source_root=$(cd "$here/../.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

gpus=$("$driver" gpus 2>/dev/null || echo 0)
[ "${gpus:-0}" -ge 1 ] || skip "no CUDA GPU"
case $mode in
  ranks2) nranks=2 ;;
  ranks3) nranks=3 ;;
  gpus) [ "$gpus" -ge 2 ] || skip "one process driving several GPUs needs 2 or more, found $gpus"
        nranks=$(( gpus > 4 ? 4 : gpus )) ;;
  *) echo "usage: $0 LIBRARY DRIVER WORKDIR ranks2|ranks3|gpus"; exit 2 ;;
esac

src=${NCCL_TESTS_SRC:-$source_root/build-nccl-tests-src}
[ -f "$src/src/all_reduce.cu" ] ||
  skip "no nccl-tests source at $src: set NCCL_TESTS_SRC to a copy of nccl-tests v2.19.6"
cuda_home=${CUDA_HOME:-/usr/local/cuda}
nccl_home=${NCCL_HOME:-$cuda_home}
[ -f "$nccl_home/include/nccl.h" ] || skip "no nccl.h under NCCL_HOME=$nccl_home"
nccl_lib=$nccl_home/lib64
[ -f "$nccl_lib/libnccl.so.2" ] || nccl_lib=$nccl_home/lib
[ -f "$nccl_lib/libnccl.so.2" ] || skip "no libnccl.so.2 under NCCL_HOME=$nccl_home"

# MPI: the processes of ranksN meet through it (nccl-tests has no other launcher for several processes).
mpi_home=""
for candidate in "${MPI_HOME:-}" /usr/lib/x86_64-linux-gnu/openmpi /usr/local/mpi /opt/hpcx/ompi /usr/mpi/gcc/openmpi \
                 "$(dirname "$(dirname "$(command -v mpicc 2>/dev/null || echo /none/bin/mpicc)")")"; do
  if [ -n "$candidate" ] && [ -f "$candidate/include/mpi.h" ]; then mpi_home=$candidate; break; fi
done
mpirun=$(command -v mpirun || true)
if [ "$mode" != gpus ]; then
  [ -n "$mpirun" ] ||
    skip "mpirun not found (OpenMPI: the openmpi-bin package); nccl-tests needs it for $nranks processes"
  [ -n "$mpi_home" ] || skip "mpi.h not found (OpenMPI: libopenmpi-dev; or set MPI_HOME)"
fi
use_mpi=0
[ -n "$mpi_home" ] && [ -n "$mpirun" ] && use_mpi=1

# Build once per work directory (the tests of this script share it), under a lock.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
[ -n "$arch" ] || arch=90
bin=$workdir/nccl-tests-mpi$use_mpi
mkdir -p "$workdir"
(
  flock 9
  if [ ! -x "$bin/all_reduce_perf" ]; then
    echo "building nccl-tests from $src into $bin (MPI=$use_mpi, sm_$arch)"
    make -C "$src" -j"$(nproc)" MPI=$use_mpi ${mpi_home:+MPI_HOME=$mpi_home} NCCL_HOME="$nccl_home" \
      CUDA_HOME="$cuda_home" NVCC_GENCODE="-gencode=arch=compute_$arch,code=sm_$arch" BUILDDIR="$bin" \
      > "$workdir/nccl-tests-build-$use_mpi.log" 2>&1 || { tail -30 "$workdir/nccl-tests-build-$use_mpi.log"; exit 1; }
  fi
) 9> "$workdir/nccl-tests.lock" || fail "nccl-tests did not build (log: $workdir/nccl-tests-build-$use_mpi.log)"

export LD_LIBRARY_PATH=$nccl_lib:$cuda_home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN FCCL_DEBUG=INFO FCCL_DEBUG_SUBSYS=INIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
logs=$workdir/logs-$mode
rm -rf "$logs"
mkdir -p "$logs"
failures=0 runs=0 limited=0

# launch LOG PRELOAD PROGRAM ARGS...: one nccl-tests program; PRELOAD is the library to preload, or "".
launch() {
  local out=$1 preload=$2 program=$3
  shift 3
  if [ "$mode" = gpus ]; then
    LD_PRELOAD=$preload timeout 600 "$bin/${program}_perf" -g "$nranks" "$@" > "$out" 2>&1
    return $?
  fi
  # Every process on GPU 0, each its own host for NCCL (NCCL_HOSTID), loopback sockets; fccl sees one host. The
  # environment is set in the launcher, so that nothing depends on what mpirun forwards.
  local launcher=$out.launch.sh
  cat > "$launcher" <<LAUNCH
#!/bin/sh
export LD_LIBRARY_PATH='$LD_LIBRARY_PATH' NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN FCCL_DEBUG=INFO FCCL_DEBUG_SUBSYS=INIT
export FCCL_NCCL_API_DISABLE='${FCCL_NCCL_API_DISABLE:-}' NCCL_SOCKET_IFNAME=lo NCCL_TESTS_DEVICE=0
${NCCL_MAX_CTAS:+export NCCL_MAX_CTAS='$NCCL_MAX_CTAS'}
export NCCL_HOSTID=fccl-nccl-api-\${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-\$\$}}
LD_PRELOAD='$preload' exec "\$@"
LAUNCH
  timeout 600 "$mpirun" --oversubscribe --bind-to none -np "$nranks" sh "$launcher" "$bin/${program}_perf" "$@" \
    > "$out" 2>&1
}

passed_check() { [ "$1" -eq 0 ] && grep -q "Out of bounds values : 0 OK" "$2"; }

# run NAME PROGRAM ARGS...: the program with the library preloaded, its log ($log) checked. A registered run (-R)
# that fails is run again without the library: when NCCL alone fails it too, registration in this layout (ranks that
# NCCL sees on separate hosts) is NCCL's limit, said and not counted. Any other failure counts.
run() {
  local name=$1 program=$2
  shift 2
  log=$logs/$name.log
  runs=$((runs + 1))
  launch "$log" "$library" "$program" "$@"
  local status=$?
  passed_check $status "$log" && return 0
  if [[ $name != *-R* ]]; then
    echo "FAIL: $name: exit status $status"
    grep -E "Out of bounds|WARN|error|Error" "$log" | head -20
    tail -5 "$log"
    failures=$((failures + 1))
    return 1
  fi
  launch "$log.nccl-alone" "" "$program" "$@"
  if ! passed_check $? "$log.nccl-alone"; then
    echo "NOTE: $name: NCCL alone fails it too in this layout (log: $log.nccl-alone): not counted"
    limited=$((limited + 1))
    return 1
  fi
  echo "FAIL: $name: exit status $status with the library, passes with NCCL alone"
  grep -E "Out of bounds|WARN|error|Error" "$log" | head -20
  tail -5 "$log"
  failures=$((failures + 1))
  return 1
}

# fccl's count of COLL on every rank, from the library's line at each communicator's destroy ("calls: allreduce fccl
# N nccl M, allgather ..."): COLL as a whole name (gather is not allgather's tail).
fccl_counts() {
  grep -o "destroyed; calls: .*" "$log" | grep -oE "(: |, )$1 fccl [0-9]+" | awk '{print $(NF)}'
}
nccl_counts() {
  grep -o "destroyed; calls: .*" "$log" | grep -oE "(: |, )$1 fccl [0-9]+ nccl [0-9]+" | awk '{print $(NF)}'
}

# check_carried NAME COLL: every rank attached fccl, and fccl carried COLL on every rank.
check_carried() {
  local name=$1 coll=$2
  local attached counts
  attached=$(grep -c "fccl carries allreduce, allgather, reducescatter, broadcast, reduce, gather, scatter" "$log")
  counts=$(fccl_counts "$coll")
  if [ "$attached" -ne "$nranks" ] || [ "$(echo "$counts" | grep -c '^[1-9]')" -ne "$nranks" ]; then
    echo "FAIL: $name: fccl did not carry $coll on all $nranks ranks (attached on $attached; counts: $(echo $counts))"
    grep -E "nccl-api|FCCL WARN" "$log" | head -20
    failures=$((failures + 1))
  fi
}

# check_forwarded NAME: every rank attached fccl, which carried none of its collectives (NCCL carried them).
check_forwarded() {
  local name=$1 attached
  attached=$(grep -c "fccl carries allreduce" "$log")
  for coll in allreduce allgather reducescatter broadcast reduce gather scatter; do
    if fccl_counts "$coll" | grep -q '^[1-9]'; then
      echo "FAIL: $name: fccl carried $coll"; failures=$((failures + 1))
    fi
  done
  if [ "$attached" -ne "$nranks" ]; then
    echo "FAIL: $name: fccl attached on $attached of $nranks ranks"; failures=$((failures + 1))
  fi
}

common=(-c 1 -b 8 -e 8M -f 8 -n 4 -w 1)
# check_nccl_none NAME COLL: NCCL carried none of COLL's calls, on every rank.
check_nccl_none() {
  [ "$(nccl_counts "$2" | grep -c '^0$')" -eq "$nranks" ] ||
    { echo "FAIL: $1: NCCL carried some $2 calls ($(nccl_counts "$2" | tr '\n' ' '))"; failures=$((failures + 1)); }
}

declare -A coll_of=([all_reduce]=allreduce [all_gather]=allgather [reduce_scatter]=reducescatter
                    [broadcast]=broadcast [reduce]=reduce [gather]=gather [scatter]=scatter)
for program in all_reduce all_gather reduce_scatter broadcast reduce gather scatter; do
  coll=${coll_of[$program]}
  # every type (bf16, fp16, fp32, int32 among them): fccl's own, and the 8-bit floats (NCCL's for the reductions,
  # fccl's as bytes for the moves)
  run "$program-eager" "$program" "${common[@]}" -d all && check_carried "$program-eager" "$coll"
  run "$program-graph" "$program" "${common[@]}" -d all -G 2 && check_carried "$program-graph" "$coll"
  for registration in 1 2; do
    run "$program-R$registration" "$program" "${common[@]}" -d bfloat16 -R $registration &&
      check_carried "$program-R$registration" "$coll"
  done
  # one type fccl reduces: NCCL carried none of these calls
  run "$program-float" "$program" "${common[@]}" -d float &&
    check_carried "$program-float" "$coll" && check_nccl_none "$program-float" "$coll"
done
# pre-multiplied sums (-o mulsum: an op of ncclRedOpCreatePreMulSum made and destroyed around every call, its scalar
# on the host): fccl's twin carries them for the types up to bfloat16 (NCCL the 8-bit floats' with -d all)
for program in all_reduce reduce_scatter reduce; do
  coll=${coll_of[$program]}
  run "$program-mulsum" "$program" "${common[@]}" -d all -o mulsum && check_carried "$program-mulsum" "$coll"
  run "$program-mulsum-float" "$program" "${common[@]}" -d float -o mulsum &&
    check_carried "$program-mulsum-float" "$coll" && check_nccl_none "$program-mulsum-float" "$coll"
done
run "all_reduce-mulsum-graph" all_reduce "${common[@]}" -d bfloat16 -o mulsum -G 2 &&
  check_carried "all_reduce-mulsum-graph" allreduce && check_nccl_none "all_reduce-mulsum-graph" allreduce
# an SM budget (NCCL's variable, as a job sets it): fccl keeps it and carries the calls
NCCL_MAX_CTAS=4 run "all_reduce-maxctas" all_reduce "${common[@]}" -d float &&
  check_carried "all_reduce-maxctas" allreduce && check_nccl_none "all_reduce-maxctas" allreduce &&
  { [ "$(grep -c "within an SM budget of 0..4 CTAs" "$log")" -eq "$nranks" ] ||
    { echo "FAIL: all_reduce-maxctas: not every rank's fccl keeps the budget of 4 CTAs"; failures=$((failures + 1)); }; }
for program in alltoall sendrecv; do
  run "$program" "$program" "${common[@]}" -d float && check_forwarded "$program"
done
# fccl turned off: the library passes everything through
FCCL_NCCL_API_DISABLE=all run "all_reduce-disabled" all_reduce "${common[@]}" -d float &&
  { grep -q "NCCL carries every call: rank 0: FCCL_NCCL_API_DISABLE=all" "$log" ||
    { echo "FAIL: all_reduce-disabled: no line saying NCCL carries every call"; failures=$((failures + 1)); }; }

echo "$runs nccl-tests runs ($mode, $nranks ranks), $failures failed, $limited failed with NCCL alone too;" \
  "logs in $logs"
[ $failures -eq 0 ] || exit 1
echo "OK"
