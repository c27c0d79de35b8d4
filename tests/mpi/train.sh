#!/usr/bin/env bash
# tgc run under mpirun (docs/pipeline.md, "Execution"; docs/parallel.md):
#  1. 8 processes of a (t,p,d) = (2,2,2) plan with sequence parallelism,
#     1F1B over 4 micro-batches, give the losses of the same plan run with
#     the local communicator (8 threads of one process), bit for bit;
#  2. a world whose size is not t*d*p is refused, naming both sizes;
#  3. a rank killed by SIGKILL in step 2 ends the whole job promptly with a
#     non-zero status, the failed rank named (TGC_TEST_FAULT, docs/testing.md).
#
# usage: train.sh TGC MODEL TEXT MPIEXEC [MPIEXEC_FLAGS...]
. "$(dirname "$0")/lib.sh" "$@"
args=(--set layers=4 --set hidden=64 --set heads=4 --set seq=32 --micro-batch-size 2 --global-batch-size 16
      --tp 2 --pp 2 --dp 2 --sequence-parallel --data "$text" --quiet)  # each run gives its --train-iters (once)

"$tgc" run "$model" "${args[@]}" --train-iters 5 --comm local --log "$dir/local.jsonl" || fail "the local run failed"
timeout -k 5 300 "$mpiexec" "${flags[@]}" -np 8 "$tgc" run "$model" "${args[@]}" --train-iters 5 --log "$dir/mpi.jsonl" \
  >"$dir/mpi.out" 2>&1 || { sed 's/^/  | /' "$dir/mpi.out"; fail "mpirun -np 8 failed"; }
loss() { sed -n 's/.*"loss": *\([-0-9.eE+]*\).*/\1/p' "$1"; }
echo "step losses, local (8 threads) and mpi (8 processes):"
paste <(loss "$dir/local.jsonl") <(loss "$dir/mpi.jsonl")
[ "$(loss "$dir/local.jsonl" | wc -l)" -eq 5 ] || fail "the local run logged $(loss "$dir/local.jsonl" | wc -l) steps"
[ "$(loss "$dir/local.jsonl")" = "$(loss "$dir/mpi.jsonl")" ] || fail "the losses differ"

# 2. The world size must be t*d*p: refused before the model compiles, rank 0
#    naming both sizes once; the other ranks leave quietly (exiting first with
#    a failure, they got rank 0 killed before its message was out). Five
#    times: the loss of the message was a race.
for try in 1 2 3 4 5; do
  t0=$(date +%s%N)
  timeout -k 5 120 "$mpiexec" "${flags[@]}" -np 3 "$tgc" run "$model" "${args[@]}" --train-iters 5 >"$dir/size.out" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  [ "$try" -eq 1 ] && sed 's/^/  | /' "$dir/size.out"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "try $try: a world of 3 for 8 ranks: exit $rc"
  [ "$(grep -c "mpirun started 3 processes (OMPI_COMM_WORLD_SIZE=3) but the plan needs t x d x p = 8" "$dir/size.out")" -eq 1 ] ||
    { sed 's/^/  | /' "$dir/size.out"; fail "try $try: no message naming the sizes, once"; }
  [ "$(grep -c "error" "$dir/size.out")" -eq 1 ] || fail "try $try: other errors than rank 0's"
  echo "try $try: exit $rc after $ms ms"
done

# 3. A rank killed in step 2.
t0=$(date +%s)
TGC_TEST_FAULT=5:2:kill timeout -k 5 120 "$mpiexec" "${flags[@]}" -np 8 "$tgc" run "$model" "${args[@]}" \
  --train-iters 50 >"$dir/kill.out" 2>&1
rc=$?
secs=$(($(date +%s) - t0))
sed 's/^/  | /' "$dir/kill.out"
echo "killed rank 5: exit $rc after $secs s"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "the job did not fail promptly (exit $rc)"
[ "$secs" -lt 60 ] || fail "the job took $secs s to end"
grep -Eq "rank 5" "$dir/kill.out" || fail "the failed rank is not named"
[ "$fails" -eq 0 ] && echo "PASS" || { echo "$fails failures"; exit 1; }
