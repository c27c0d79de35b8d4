#!/usr/bin/env bash
# The library's trainer under mpirun (include/tgc.h, docs/api.md): the
# example program examples/train_gpt.c, one process per rank ("comm" auto
# under mpirun), gives for a dp=2 plan the losses, gradient norms and
# learning rates the same plan gives on two rank threads of one process
# (comm=local), digit for digit; only the reporting rank's process prints.
#
# usage: api.sh TRAIN_GPT MODEL TEXT MPIEXEC [MPIEXEC_FLAGS...]
. "$(dirname "$0")/lib.sh" "$@"
prog=$tgc
args=(set=layers=2 set=hidden=64 set=heads=4 set=seq=32 micro-batch-size=2 global-batch-size=8 dp=2 train-iters=4)

"$prog" "$model" "$text" "${args[@]}" comm=local >"$dir/local.out" 2>&1 || { cat "$dir/local.out"; fail "the local run failed"; }
timeout -k 5 240 "$mpiexec" "${flags[@]}" -np 2 "$prog" "$model" "$text" "${args[@]}" >"$dir/mpi.out" 2>&1 ||
  { sed 's/^/  | /' "$dir/mpi.out"; fail "mpirun -np 2 failed"; }
echo "rank threads (comm=local), then mpirun -np 2:"
sed 's/^/  | /' "$dir/local.out" "$dir/mpi.out"
[ "$(grep -c '^iteration ' "$dir/local.out")" -eq 4 ] || fail "the local run printed $(grep -c '^iteration ' "$dir/local.out") iterations"
cmp -s "$dir/local.out" "$dir/mpi.out" || fail "the processes' output differs from the threads'"
[ "$fails" -eq 0 ] && echo "PASS" || { echo "$fails failures"; exit 1; }
