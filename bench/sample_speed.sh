#!/usr/bin/env bash
# Generation speed (docs/sampling.md, docs/performance.md): `tgc sample`
# with the KV cache (a prefill, then one position per token) and without
# it (a forward over all s positions per token), greedy, for the default
# GPT (s=256) and GPT-2 124M (s=256). The weights come from one training
# step (speed does not depend on them); both modes must print the same text.
#
# usage: bench/sample_speed.sh [TGC] [TOKENS]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TGC=${1:-$ROOT/build/tgc}
TOKENS=${2:-200}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export TGC_CACHE_DIR=${TGC_CACHE_DIR:-$TMP/cache}
DATA=$ROOT/tests/data/kjv-64k.txt
echo "# tgc sample, greedy, prompt \"And God said\", $TOKENS tokens; $(nproc) cores;" \
  "$(date -u '+%Y-%m-%d %H:%M UTC'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| model | parameters | s | KV cache: tokens/s | without: tokens/s | speed-up | same text |"
echo "|---|---|---|---|---|---|---|"
run() { # run NAME SETS...
  local name=$1
  shift
  "$TGC" run "$ROOT/samples/gpt.tg" "$@" --set batch=1 --data "$DATA" --train-iters 1 \
    --export "$TMP/$name.safetensors" --quiet >/dev/null
  local args=(sample "$ROOT/samples/gpt.tg" "$@" --weights "$TMP/$name.safetensors" --prompt "And God said"
    --tokens "$TOKENS" --temperature 0)
  "$TGC" "${args[@]}" >"$TMP/kv.out" 2>"$TMP/kv.err"
  "$TGC" "${args[@]}" --no-kv-cache >"$TMP/full.out" 2>"$TMP/full.err"
  local params kv full same
  params=$(sed -n 's/.*(\([0-9]*\) parameters.*/\1/p' "$TMP/kv.err")
  kv=$(sed -n 's/.* s, \([0-9.]*\) tokens\/s.*/\1/p' "$TMP/kv.err")
  full=$(sed -n 's/.* s, \([0-9.]*\) tokens\/s.*/\1/p' "$TMP/full.err")
  same=$(cmp -s "$TMP/kv.out" "$TMP/full.out" && echo yes || echo NO)
  echo "| $name | $params | 256 | $kv | $full | $(awk -v a="$kv" -v b="$full" 'BEGIN{printf "%.1fx", a / b}') | $same |"
  [ "$same" = yes ]
}
run gpt-default
run gpt2-124m --set layers=12 --set hidden=768 --set heads=12 --set vocab=50304
