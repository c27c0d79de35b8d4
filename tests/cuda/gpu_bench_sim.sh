#!/usr/bin/env bash
# gpu_bench_sim.sh TGC: bench/gpu_bench.sh without a GPU. The script parses
# (bash -n); its dry run prints the GPT-2 124M commands (s = 1024, bf16,
# fused attention, the TGC_DEBUG=2 profile) and, for a GPU named H200 (a
# stand-in nvidia-smi), its bf16 dense peak; bad arguments are refused; and
# the same commands at a tiny size run on --backend sim, printing tokens/s,
# TFLOP/s and the profile with its GB/s column.
set -uo pipefail
tgc=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
bench=$root/bench/gpu_bench.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "gpu_bench_sim: $*" >&2; exit 1; }

bash -n "$bench" || fail "bash -n failed"

mkdir "$tmp/bin"
printf '#!/bin/sh\necho "NVIDIA H200"\n' >"$tmp/bin/nvidia-smi"
chmod +x "$tmp/bin/nvidia-smi"
PATH=$tmp/bin:$PATH "$bench" --dry-run --tgc "$tgc" >"$tmp/dry.txt" 2>&1 || { cat "$tmp/dry.txt"; fail "the dry run failed"; }
grep -q '^GPU: NVIDIA H200; bf16 dense peak: 989.4 TFLOP/s$' "$tmp/dry.txt" || { cat "$tmp/dry.txt"; fail "no H200 peak"; }
[ "$(grep -c '^+ ' "$tmp/dry.txt")" = 4 ] || { cat "$tmp/dry.txt"; fail "not 4 commands"; }
for want in 'layers=12' 'hidden=768' 'heads=12' 'seq=1024' 'vocab=50304' '--bf16' '--attention-backend tgc' \
            '--backend cuda' 'TGC_DEBUG=2'; do
  grep -q -e "$want" "$tmp/dry.txt" || { cat "$tmp/dry.txt"; fail "the dry run lacks '$want'"; }
done
[ "$(grep -c -e '--bf16 --attention-backend tgc --backend cuda' "$tmp/dry.txt")" = 2 ] ||
  fail "the timed run and the profile run differ in their options"

# A device not in the table: no peak, no MFU.
printf '#!/bin/sh\necho "NVIDIA Quadro Imaginary"\n' >"$tmp/bin/nvidia-smi"
PATH=$tmp/bin:$PATH "$bench" --dry-run --tgc "$tgc" >"$tmp/dry2.txt" 2>&1
grep -q 'not in the table (no MFU)' "$tmp/dry2.txt" || { cat "$tmp/dry2.txt"; fail "an unknown GPU got a peak"; }

"$bench" --frobnicate >"$tmp/e.txt" 2>&1
[ $? = 2 ] && grep -q "unknown argument '--frobnicate'" "$tmp/e.txt" || fail "a bad argument was not refused"
"$bench" --backend tpu --dry-run >"$tmp/e.txt" 2>&1
[ $? = 2 ] && grep -q "cuda or sim" "$tmp/e.txt" || fail "a bad backend was not refused"
"$bench" --iters 0 --dry-run >"$tmp/e.txt" 2>&1
[ $? = 2 ] || fail "--iters 0 was not refused"
"$bench" --tgc "$tmp/none" >"$tmp/e.txt" 2>&1
[ $? = 2 ] && grep -q "no tgc at" "$tmp/e.txt" || fail "a missing tgc was not refused"

# Every command, tiny, on the device simulator.
"$bench" --tiny --backend sim --tgc "$tgc" --iters 3 --top 5 >"$tmp/sim.txt" 2>&1 || { cat "$tmp/sim.txt"; fail "the sim run failed"; }
cat "$tmp/sim.txt"
grep -qE '^bf16 fused: [0-9.]+ ms/step, [0-9]+ tokens/s, [0-9.]+ TFLOP/s' "$tmp/sim.txt" || fail "no throughput line"
grep -qE '^op +launches +ms/step +share +MB/step +GFLOP/step +GB/s$' "$tmp/sim.txt" || fail "no profile header with GB/s"
[ "$(grep -cE '^[a-z_()]+ +[0-9]+ +[0-9.]+ +[0-9.]+% +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$tmp/sim.txt")" = 5 ] || fail "not 5 profile rows"
grep -qE '^total +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$tmp/sim.txt" || fail "no profile total"
echo "gpu_bench.sh: ok"
