#!/usr/bin/env bash
# dot.sh TGC MODEL DOT: the DOT output renders with Graphviz.
set -euo pipefail
tgc=$1 model=$2 dot=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$tgc" dump-ir "$model" --format dot | "$dot" -Tsvg -o "$out"
grep -q '<svg' "$out"
echo "dot ok: $(wc -c < "$out") bytes of SVG"
