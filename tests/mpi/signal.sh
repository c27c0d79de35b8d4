#!/usr/bin/env bash
# Stopping a run under mpirun (docs/checkpoints.md, "Stopping a run"):
# mpirun -np 4 (t, p, d) = (1, 2, 2) with --save; SIGTERM goes to world rank
# 0 alone (the pid its lock file DIR/tgc.lock names, as a scheduler might
# signal one task first). Every rank must stop after the same step: the job
# ends with status 143 and the message once; `latest` names the log's last
# step; resuming under mpirun gives the next two steps' losses of an
# uninterrupted mpirun run, bit for bit (a rank that had gone on, or
# stopped earlier, would have hung the save or changed them). Meanwhile a
# second writer of the directory is refused, naming rank 0's pid.
#
# usage: signal.sh TGC MODEL TEXT MPIEXEC [MPIEXEC_FLAGS...]
. "$(dirname "$0")/lib.sh" "$@"
args=(--set layers=2 --set hidden=32 --set heads=2 --set seq=16 --micro-batch-size 2 --global-batch-size 8
      --pp 2 --dp 2 --data "$text" --quiet)
mpi() { timeout -k 5 120 "$mpiexec" "${flags[@]}" -np 4 "$tgc" run "$model" "${args[@]}" "$@"; }
loss() { sed -n 's/.*"loss": *\([-0-9.eE+]*\).*/\1/p' "$1"; }
cd "$dir" || exit 1

mpi --train-iters 100000 --save ck --log a.jsonl >out 2>&1 &
job=$!
for _ in $(seq 600); do [ -s a.jsonl ] && [ "$(wc -l <a.jsonl)" -ge 2 ] && break; sleep 0.1; done
pid=$(sed -n 's/^pid \([0-9]*\) on host .*/\1/p' ck/tgc.lock 2>/dev/null)
[ -n "$pid" ] || { kill $job; fail "no pid in ck/tgc.lock"; exit 1; }
# World rank 0 holds the directory's lock: a second writer is refused, naming it.
"$tgc" run "$model" "${args[@]}" --train-iters 1 --save ck >second.out 2>&1
src=$?
grep -q "tgc: error: --save ck: another run is writing its checkpoints there: 'ck/tgc.lock' is held by pid $pid on host" second.out &&
  [ "$src" -eq 1 ] || { sed 's/^/  | /' second.out; fail "a second writer: exit $src"; }
kill -TERM "$pid"
wait $job
rc=$?
n=$(cat ck/latest 2>/dev/null)
last=$(sed -n 's/^{"step":\([0-9]*\),.*/\1/p' a.jsonl | tail -1)
echo "SIGTERM to rank 0 (pid $pid): exit $rc, latest $n, the log's last step $last"
grep -v '^-*$' out | sed 's/^/  | /'
[ "$rc" -eq 143 ] || fail "exit $rc, not 143"
[ -n "$n" ] && [ "$n" = "$last" ] || fail "latest '$n' is not the log's last step '$last'"
[ "$(grep -c "tgc: SIGTERM: every rank stopped after step $n of 100000; its checkpoint is ck/iter_$(printf %07d "$n")" out)" -eq 1 ] ||
  fail "not the stop message once"

mpi --train-iters $((n + 2)) --log full.jsonl >out 2>&1 || fail "the uninterrupted run failed"
mpi --train-iters $((n + 2)) --load ck --log b.jsonl >out 2>&1 || { sed 's/^/  | /' out; fail "the resumed run failed"; }
echo "steps $((n + 1)), $((n + 2)): uninterrupted and resumed:"
paste <(loss full.jsonl | tail -2) <(loss b.jsonl)
[ -n "$(loss b.jsonl)" ] && [ "$(loss b.jsonl)" = "$(loss full.jsonl | tail -2)" ] || fail "the resumed losses differ"
[ "$fails" -eq 0 ] && echo PASS || { echo "$fails failures"; exit 1; }
