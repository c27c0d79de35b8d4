#!/usr/bin/env bash
# kernel_dedupe.sh TGC MODEL DATA [ARGS...]: the C kernels of identical
# layers are compiled once (codegen/render_c.c): a model with 6 layers has
# as many kernel bodies as one with 2; its other kernels are calls.
set -euo pipefail
tgc=$1 model=$2 data=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bodies() { # the functions with a body: a header line, then "{"
  awk '/^(static )?void k[0-9_]+(_body)?\(/ { h = 1; next } h && /^\{/ { n++ } { h = 0 } END { print n + 0 }' "$1"
}
calls() { grep -c "^void k[0-9_]*(void \*const \*io, const tgc_rt \*rt) { k" "$1" || true; }
for layers in 2 6; do
  TGC_CACHE_DIR="$dir/$layers" TGC_KEEP_SOURCE=1 "$tgc" run "$model" --data "$data" --quiet --train-iters 1 \
    --set layers=$layers "$@" >/dev/null
  src=$(ls "$dir/$layers"/*.c)
  echo "layers=$layers: $(bodies "$src") kernel bodies, $(calls "$src") kernels that call a shared one"
  eval "b$layers=$(bodies "$src") c$layers=$(calls "$src")"
done
[ "$b2" -gt 0 ] || { echo "no kernel bodies found" >&2; exit 1; }
[ "$b6" -eq "$b2" ] || { echo "6 layers compile $b6 bodies, 2 layers $b2: the layers' kernels are not shared" >&2; exit 1; }
[ "$c6" -gt "$c2" ] || { echo "no more shared calls with more layers ($c6 vs $c2)" >&2; exit 1; }
