#!/usr/bin/env bash
# gpu_check_sim.sh TGC: scripts/gpu_check.sh's dry run (GPU_CHECK_BACKEND=sim)
# on a few checks that pass on the simulator: its table, its log under $OUT
# and its exit status; a tolerance no run can meet makes it fail; bad
# arguments and a spent budget are reported.
set -uo pipefail
tgc=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "gpu_check_sim: $*" >&2; exit 1; }
gc() { TGC=$tgc GPU_CHECK_BACKEND=sim "$root/scripts/gpu_check.sh" "$@"; }

OUT=$tmp/out gc ckpt eval tests >"$tmp/ok.txt" 2>&1 || { cat "$tmp/ok.txt"; fail "the dry run failed"; }
grep -q '^gpu check (sim): every check passed' "$tmp/ok.txt" || fail "no verdict"
for row in '| checkpoint, kill, resume | serial, sim ' '| checkpoint, kill, resume | --tp 2, sim ' '| evaluation ' \
           '| GPU tests of the build '; do
  grep -F "$row" "$tmp/ok.txt" | grep '| ok ' >/dev/null || { cat "$tmp/ok.txt"; fail "no ok row '$row'"; }
done
grep -F '| checkpoint, kill, resume | serial' "$tmp/ok.txt" | grep 'bit for bit: yes); exported weights identical' >/dev/null ||
  fail "the checkpoint row lacks its figures"
cmp -s "$tmp/ok.txt" "$tmp/out/gpu_check.log" || fail "\$OUT/gpu_check.log is not the output"
grep -q '| machine ' "$tmp/ok.txt" && fail "a check that was not asked for ran"

# A tolerance below zero: the comparison fails, the script exits non-zero.
GPU_CHECK_TOL=-1 gc eval >"$tmp/bad.txt" 2>&1 && { cat "$tmp/bad.txt"; fail "a failed check exited 0"; }
grep -F '| evaluation ' "$tmp/bad.txt" | grep 'FAILED' >/dev/null || { cat "$tmp/bad.txt"; fail "no FAILED row"; }
grep -q '^gpu check (sim): 1 check(s) failed' "$tmp/bad.txt" || fail "no count of failed checks"

# No time left: every check is skipped, which is not a failure.
GPU_CHECK_BUDGET=0 gc eval ckpt >"$tmp/skip.txt" 2>&1 || { cat "$tmp/skip.txt"; fail "skipped checks failed"; }
[ "$(grep -c 'skipped *| over the 0 s budget' "$tmp/skip.txt")" = 3 ] || { cat "$tmp/skip.txt"; fail "not 3 skipped rows"; }

GPU_CHECK_BACKEND=gpu "$root/scripts/gpu_check.sh" >"$tmp/e1.txt" 2>&1
[ $? = 2 ] && grep -q 'GPU_CHECK_BACKEND=gpu: cuda or sim' "$tmp/e1.txt" || fail "a bad backend was not refused"
gc warp >"$tmp/e2.txt" 2>&1
[ $? = 2 ] && grep -q "unknown check 'warp'" "$tmp/e2.txt" || fail "an unknown check was not refused"
echo "gpu_check.sh dry run: ok"
