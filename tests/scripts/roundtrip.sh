#!/usr/bin/env bash
# roundtrip.sh TGC FILE [ARGS...]: print -> read -> print is byte-identical,
# for the text after lowering and after the whole pipeline.
set -euo pipefail
tgc=$1 file=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for after in lower ""; do
  flags=()
  [ -n "$after" ] && flags=(--after "$after")
  "$tgc" dump-ir "$file" "$@" "${flags[@]}" -o "$dir/a.ir"
  "$tgc" dump-ir "$dir/a.ir" "${flags[@]}" -o "$dir/b.ir"
  if [ -z "$after" ]; then
    cmp "$dir/a.ir" "$dir/b.ir" || { diff -u "$dir/a.ir" "$dir/b.ir" | head -40; exit 1; }
  else
    # After lowering, reading the text back must give the same text.
    "$tgc" dump-ir "$dir/a.ir" --after lower -o "$dir/c.ir"
    cmp "$dir/a.ir" "$dir/c.ir" || { diff -u "$dir/a.ir" "$dir/c.ir" | head -40; exit 1; }
  fi
done
# Standard input works the same as a file.
"$tgc" dump-ir - --after lower < "$dir/a.ir" | cmp - "$dir/a.ir"
echo "round trip ok: $file"
