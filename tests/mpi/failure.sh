#!/usr/bin/env bash
# Failing ranks under mpirun (docs/parallel.md, "`mpi`: one process per
# rank"): each case of test_comm_mpi makes one rank fail — an abort, a rank
# that never comes (timeout), mismatched calls, a process killed by SIGKILL
# or exiting without MPI_Finalize, a world of the wrong size — and checks
# that the job ends within a bound, with a non-zero status and messages
# that name the failed rank. `timeout` guards every run against a hang.
#
# usage: failure.sh TEST_COMM_MPI MPIEXEC [MPIEXEC_FLAGS...]
set -u
bin=$1 mpiexec=$2
shift 2
flags=("$@")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fails=0

# run NP MODE LIMIT_S: runs the case; sets $rc and $secs; prints the output.
run() {
  local np=$1 mode=$2 limit=$3 t0 t1
  t0=$(date +%s%N)
  timeout -k 5 60 "$mpiexec" "${flags[@]}" -np "$np" "$bin" "$mode" >"$out" 2>&1
  rc=$?
  t1=$(date +%s%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
  echo "==== $mode (np $np): exit $rc after $secs s"
  sed 's/^/  | /' "$out"
  # mpirun's own status may be 137 (a rank killed by SIGKILL): a hang is
  # told by the time.
  if [ "$rc" = 124 ] || awk -v s="$secs" 'BEGIN { exit !(s >= 60) }'; then
    echo "FAIL: $mode: hung (killed by timeout)"; fails=$((fails + 1))
  elif [ "$rc" = 0 ]; then
    echo "FAIL: $mode: the job succeeded"; fails=$((fails + 1))
  fi
  if ! awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s < l) }'; then
    echo "FAIL: $mode: took $secs s, more than $limit s"; fails=$((fails + 1))
  fi
}

# expect MODE PATTERN...: every extended regex matches some line of the output.
expect() {
  local mode=$1 p
  shift
  for p in "$@"; do
    if ! grep -Eq -- "$p" "$out"; then
      echo "FAIL: $mode: no line matches: $p"; fails=$((fails + 1))
    fi
  done
}

# The abort notice reaches every rank at once (the timeout is 120 s).
run 4 abort 20
expect abort 'abort: rank 0: checks passed' 'abort: rank 1: checks passed' 'abort: rank 2: checks passed' \
  'rank 1: all_reduce\(dp\): rank 3 failed: injected fault' \
  'ending the MPI job: rank 3 failed: injected fault'

# Rank 3 sleeps: the others time out after 1 s and MPI_Abort ends it.
run 4 timeout 20
expect timeout 'timeout: rank 0: checks passed' 'timeout: rank 1: checks passed' 'timeout: rank 2: checks passed' \
  'timed out after 1 s waiting for rank 3' 'ending the MPI job: rank 3 failed'

run 2 mismatch 20
expect mismatch 'mismatch: rank 0: checks passed' 'mismatch: rank 1: checks passed' \
  'rank 1: all_reduce\(world\): rank 0 sent 8 bytes, expected 12'

run 2 recv-size 20
expect recv-size 'recv-size: rank 0: checks passed' 'rank 0: recv: rank 1 sent 8 bytes with tag 0, expected 4'

# A process killed mid-collective: mpirun ends the others and names it.
run 4 kill 20
expect kill 'rank 2 .*(signal 9|Killed)'
if grep -q 'all_reduce returned 0' "$out"; then echo "FAIL: kill: a rank finished the all-reduce"; fails=$((fails + 1)); fi

# A process that exits without MPI_Finalize: the same.
run 4 exit 20
expect exit 'Process name: \[\[[0-9]+,[0-9]+\],2\]' 'Exit code: +3'

# A world of 3 processes for a topology of 4: every rank says so.
run 3 size 20
# Counted as occurrences, not lines: the ranks' stderr can interleave on one line.
n=$(grep -oF 'the MPI world has 3 processes but t=2 x d=2 x p=1 needs 4 (mpirun -np 4)' "$out" | wc -l)
if [ "$n" != 3 ]; then echo "FAIL: size: $n of 3 ranks reported the world size"; fails=$((fails + 1)); fi

echo "$fails failure(s)"
[ "$fails" = 0 ]
