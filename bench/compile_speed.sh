#!/usr/bin/env bash
# Compile speed (docs/performance.md): `tgc compile` of GPT-2 124M (s=256)
# under t=2, p=2, d=2 with sequence parallelism, cold and warm, and the
# C compiler on the plan's generated kernels, which `tgc run` adds the first
# time it meets them (then the kernel cache serves them).
#
# usage: bench/compile_speed.sh [TGC]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TGC=${1:-$ROOT/build/tgc}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export TGC_CACHE_DIR=$TMP/cache
ARGS=(compile "$ROOT/samples/gpt.tg" --set layers=12 --set hidden=768 --set heads=12 --set seq=256 --set vocab=50304
  --tp 2 --pp 2 --dp 2 --sequence-parallel --micro-batch-size 2 --global-batch-size 8 -o "$TMP/gpt.plan")
secs() { # secs CMD...: the wall seconds of CMD
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >"$TMP/out.txt" 2>&1 || { cat "$TMP/out.txt" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}
echo "# tgc compile, GPT-2 124M (L=12 h=768 heads=12 s=256 V=50304), --tp 2 --pp 2 --dp 2 --sequence-parallel"
echo "# --micro-batch-size 2 --global-batch-size 8; $(date -u '+%Y-%m-%d %H:%M UTC'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| what | wall s |"
echo "|---|---|"
echo "| tgc compile --no-kernel-cache (cold) | $(secs "$TGC" "${ARGS[@]}" --no-kernel-cache) |"
echo "| tgc compile, first with a cache | $(secs "$TGC" "${ARGS[@]}") |"
echo "| tgc compile, second (same plan) | $(secs "$TGC" "${ARGS[@]}") |"
# The plan's kernel section, compiled as runtime/backend/cpu.c does (cc_flags, cc_libs).
python3 - "$TMP/gpt.plan" "$TMP/kernels.c" <<'EOF'
import sys
data = open(sys.argv[1], "rb").read()
at = data.index(b"\nsection kernels ") + 1
line_end = data.index(b"\n", at)
n = int(data[at:line_end].split()[2])
open(sys.argv[2], "wb").write(data[line_end + 1:line_end + 1 + n])
EOF
CC=${TGC_CC:-cc}
echo "| $CC -O3 -march=native -fopenmp on its kernels ($(grep -c '^void k' "$TMP/kernels.c") functions, $(wc -c <"$TMP/kernels.c") bytes of C) | $(secs "$CC" -std=c11 -O3 -march=native -fopenmp -fPIC -shared -fno-math-errno -Wno-unused -o "$TMP/k.so" "$TMP/kernels.c" -lmvec -lm) |"
echo
"$TGC" "${ARGS[@]}" 2>&1 | sed -n 1p
