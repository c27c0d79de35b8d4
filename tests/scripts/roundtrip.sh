#!/usr/bin/env bash
# roundtrip.sh TGC FILE [ARGS...]: print -> read -> print is byte-identical,
# for the graph after lowering and after the whole pipeline (autodiff,
# optimizer, memory plan), and through standard input.
set -euo pipefail
tgc=$1 file=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
check() { cmp "$1" "$2" || { diff -u "$1" "$2" | sed -n 1,40p; exit 1; }; }
# After lowering: reading the text back (running no pass) gives the same text.
"$tgc" dump-ir "$file" "$@" --after lower -o "$dir/lower.ir"
"$tgc" dump-ir "$dir/lower.ir" --passes= -o "$dir/lower2.ir"
check "$dir/lower.ir" "$dir/lower2.ir"
# After every pass; a golden file (already IR) goes through the pipeline too.
"$tgc" dump-ir "$file" "$@" -o "$dir/full.ir"
"$tgc" dump-ir "$dir/full.ir" --passes= -o "$dir/full2.ir"
check "$dir/full.ir" "$dir/full2.ir"
# Standard input works the same as a file.
"$tgc" dump-ir - --passes= < "$dir/full.ir" | cmp - "$dir/full.ir"
echo "round trip ok: $file ($(grep -c '^%' "$dir/full.ir") nodes after the pipeline)"
