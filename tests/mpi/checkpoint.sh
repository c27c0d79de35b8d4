#!/usr/bin/env bash
# Checkpoints, --export and --trace under mpirun (docs/checkpoints.md,
# "Under mpirun"), against the same plan run with the local communicator
# (8 threads of one process): (t,p,d) = (2,2,2) with sequence parallelism,
# 1F1B over 8 micro-batches, 6 steps with --save-interval 3.
#  1. the checkpoints of steps 3 and 6 (both files) and `latest`, and the
#     --export file, are byte-identical to the local run's (cmp); the
#     losses are identical; the same with the distributed optimizer and
#     --export-grads;
#  2. --trace is valid JSON naming the 8 processes, with spans of each;
#  3. resuming under mpirun from the mpirun checkpoint of step 3 gives the
#     uninterrupted losses of steps 4..6, bit for bit;
#  4. resharding: the mpirun checkpoint loads locally under (1,1,1), the
#     next loss within 1e-6 (relative) of a local (2,2,2) resume; and a
#     (1,1,1) checkpoint loads under mpirun (2,2,2) with the local (2,2,2)
#     resume's loss, bit for bit;
#  5. errors under mpirun -np 2, each with a non-zero status, in seconds
#     (timeout guards a hang), the message once, every rank ending with
#     status 1 rather than the job aborted: a corrupt checkpoint (the
#     tensor named); a save that fails on rank 0 after the parts came
#     (a file where iter_N goes); a save into a full tmpfs (where mount
#     works) leaves `latest` and the previous checkpoint as they were.
#
# usage: checkpoint.sh TGC MODEL TEXT PYTHON MPIEXEC [MPIEXEC_FLAGS...]
set -u
tgc=$1 model=$2 text=$3 py=$4 mpiexec=$5
shift 5
flags=("$@")
damage=$(cd "$(dirname "$0")/../lit/run/Inputs" && pwd)/ckpt_damage.py
dir=$(mktemp -d)
trap 'umount "$dir/full" 2>/dev/null; rm -rf "$dir"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
base=(--set layers=2 --set hidden=64 --set heads=4 --set seq=32 --micro-batch-size 2 --global-batch-size 16
      --data "$text")
par=(--tp 2 --pp 2 --dp 2 --sequence-parallel)
run_local() { "$tgc" run "$model" "${base[@]}" --quiet "$@" || fail "local run failed: $*"; }
mpi() { # NP ARGS...: tgc run under mpirun; output in $dir/out
  local np=$1
  shift
  timeout -k 5 120 "$mpiexec" "${flags[@]}" -np "$np" "$tgc" run "$model" "${base[@]}" "$@" >"$dir/out" 2>&1
}
mpi_ok() { mpi 8 "$@" || { sed 's/^/  | /' "$dir/out"; fail "mpirun -np 8 failed: $*"; }; }
# (not --quiet: rank 0 reports the checkpoints it saves and loads, once)
loss() { sed -n 's/.*"loss": *\([-0-9.eE+]*\).*/\1/p' "$1"; }
same_files() { # A B WHAT: cmp of every checkpoint file
  for f in iter_0000003/model.safetensors iter_0000003/optimizer.safetensors iter_0000006/model.safetensors \
           iter_0000006/optimizer.safetensors latest; do
    cmp "$1/$f" "$2/$f" || fail "$3: $f differs"
  done
}
cd "$dir" || exit 1

# 1, 2. The same run on threads and on processes.
t0=$(date +%s)
run_local "${par[@]}" --comm local --train-iters 6 --save L --save-interval 3 --export L.st --log L.jsonl --trace L.json
mpi_ok "${par[@]}" --train-iters 6 --save M --save-interval 3 --export M.st --log M.jsonl --trace M.json
same_files L M "checkpoint"
cmp L.st M.st || fail "the --export files differ"
[ "$(loss L.jsonl | wc -l)" -eq 6 ] && [ "$(loss L.jsonl)" = "$(loss M.jsonl)" ] || fail "the losses differ"
echo "1. checkpoints of steps 3 and 6, latest and --export: byte-identical to the local run's ($(($(date +%s) - t0)) s)"
run_local "${par[@]}" --use-distributed-optimizer --comm local --train-iters 6 --save DL --save-interval 3 \
  --export-grads DL.st
mpi_ok "${par[@]}" --use-distributed-optimizer --train-iters 6 --save DM --save-interval 3 --export-grads DM.st
same_files DL DM "distributed optimizer checkpoint"
cmp DL.st DM.st || fail "the --export-grads files differ (distributed optimizer)"
echo "   the same with --use-distributed-optimizer and --export-grads"
"$py" - M.json L.json <<'EOF' || fail "the mpirun trace"
import json, sys
for path in sys.argv[1:]:
    t = json.load(open(path))
    ev = t["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    spans = {}
    for e in ev:
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["name"], e
            spans[e["pid"]] = spans.get(e["pid"], 0) + 1
    assert sorted(names) == list(range(8)) and sorted(spans) == list(range(8)), (path, names, spans)
    assert names[5] == "rank 5 (tp 1, dp 0, pp 1)", names[5]
    print("2. %s: valid JSON, %d processes named, spans per process %s" % (path, len(names),
          [spans[p] for p in range(8)]))
EOF

# 3. Resume under mpirun from step 3 (and save again: rank 0 says so, once).
mpi_ok "${par[@]}" --train-iters 6 --load M/iter_0000003 --log R.jsonl --save M2
[ "$(grep -c "tgc: loaded checkpoint M/iter_0000003 (step 3, saved with t=2 p=2 d=2)" "$dir/out")" -eq 1 ] &&
  [ "$(grep -c "tgc: saved checkpoint M2/iter_0000006 (step 6)" "$dir/out")" -eq 1 ] ||
  { sed 's/^/  | /' "$dir/out"; fail "not one 'loaded checkpoint' and one 'saved checkpoint' line"; }
cmp M/iter_0000006/model.safetensors M2/iter_0000006/model.safetensors || fail "the resumed run saved other weights"
echo "3. steps 4..6, uninterrupted and resumed under mpirun:"
paste <(loss M.jsonl | tail -3) <(loss R.jsonl)
[ "$(loss R.jsonl)" = "$(loss M.jsonl | tail -3)" ] || fail "the resumed losses differ"

# 4. Resharding both ways.
run_local --train-iters 4 --load M/iter_0000003 --log r1.jsonl
run_local "${par[@]}" --comm local --train-iters 4 --load M/iter_0000003 --log r8.jsonl
"$py" -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); d = abs(a - b) / abs(b)
print("4. step 4 from the mpirun checkpoint: (1,1,1) %r, (2,2,2) %r, relative difference %.2g" % (a, b, d))
sys.exit(d > 1e-6)' "$(loss r1.jsonl)" "$(loss r8.jsonl)" || fail "(1,1,1) from the mpirun checkpoint: loss differs"
run_local --train-iters 3 --save S
mpi_ok "${par[@]}" --train-iters 4 --load S --log s8m.jsonl
run_local "${par[@]}" --comm local --train-iters 4 --load S --log s8l.jsonl
echo "   step 4 from a (1,1,1) checkpoint: mpirun $(loss s8m.jsonl), local (2,2,2) $(loss s8l.jsonl)"
[ -n "$(loss s8m.jsonl)" ] && [ "$(loss s8m.jsonl)" = "$(loss s8l.jsonl)" ] || fail "(2,2,2) under mpirun from (1,1,1)"

# 5. Errors under mpirun -np 2.
expect_error() { # WHAT PATTERN ARGS...: a non-zero exit in under 60 s, the message once
  local what=$1 pat=$2 t0 rc secs
  shift 2
  t0=$(date +%s)
  mpi 2 "$@"
  rc=$? secs=$(($(date +%s) - t0))
  echo "5. $what: exit $rc after $secs s"
  grep -v '^-*$' "$dir/out" | sed 's/^/  | /'
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$secs" -lt 60 ] || fail "$what: exit $rc after $secs s"
  [ "$(grep -c -- "$pat" "$dir/out")" -eq 1 ] || fail "$what: not once: $pat"
  # Every rank knew: each ended with status 1, the job was not aborted.
  ! grep -Eq "ending the MPI job|MPI_ABORT|rank [0-9]+ failed" "$dir/out" || fail "$what: the job was aborted"
}
cp -r S bad && "$py" "$damage" flip bad/iter_0000003/model.safetensors layers.0.mlp.dense_h_to_4h.weight
expect_error "a corrupt checkpoint" \
  "model.safetensors: error: checksum mismatch in tensor 'layers.0.mlp.dense_h_to_4h.weight'" \
  --dp 2 --train-iters 4 --load bad
mkdir blocked && touch blocked/iter_0000002
expect_error "a save that fails on rank 0" "cannot move 'blocked/iter_0000002.tmp-[0-9]*' to 'blocked/iter_0000002'" \
  --pp 2 --train-iters 4 --save blocked --save-interval 2
[ ! -e blocked/latest ] && [ "$(ls -I tgc.lock blocked)" = "iter_0000002" ] || fail "the failed save left $(ls blocked)"
mkdir full
if mount -t tmpfs -o size=1800k tmpfs full 2>/dev/null; then
  expect_error "a save into a full tmpfs" "full/ck/iter_0000004.tmp-[0-9]*/.*No space left on device" \
    --pp 2 --train-iters 4 --save full/ck --save-interval 2
  grep -q "the previous checkpoint 'full/ck/iter_0000002' (named by full/ck/latest) is intact" "$dir/out" ||
    fail "the full disk: no word of the previous checkpoint"
  [ "$(cat full/ck/latest)" = 2 ] && [ "$(ls -I tgc.lock full/ck)" = "$(printf 'iter_0000002\nlatest')" ] ||
    fail "the full disk left $(ls full/ck)"
  umount full
else
  echo "5. mount -t tmpfs is not available here: the full-disk case is left out"
fi
[ "$fails" -eq 0 ] && echo "PASS ($(($(date +%s) - t0)) s)" || { echo "$fails failures"; exit 1; }
