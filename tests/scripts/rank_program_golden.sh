#!/usr/bin/env bash
# rank_program_golden.sh TGC GOLDEN RANKS ARGS...: `tgc dump-ir ARGS --rank R`
# for each R of the comma-separated RANKS (each rank's compiled step: its
# step arena, buckets and step instructions, codegen/step.h), one after
# the other, must equal GOLDEN after its header (the leading lines that
# start with '##': what the file pins and how it was reviewed).
# UPDATE_GOLDEN=1 rewrites the body and keeps the header (review the change
# with git diff before committing it).
set -euo pipefail
tgc=$1 golden=$2 ranks=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
: > "$dir/actual"
IFS=, read -ra list <<<"$ranks"
for r in "${list[@]}"; do
  "$tgc" dump-ir "$@" --rank "$r" -o "$dir/one"
  cat "$dir/one" >> "$dir/actual"
done
if [ -f "$golden" ]; then
  awk 'body || !/^##/ { body = 1; print }' "$golden" > "$dir/expected"
  awk '!body && /^##/ { print; next } { body = 1 }' "$golden" > "$dir/header"
else
  : > "$dir/expected"
  : > "$dir/header"
fi
if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
  cat "$dir/header" "$dir/actual" > "$golden"
  echo "updated $golden"
  exit 0
fi
if [ ! -s "$dir/expected" ]; then
  echo "golden file $golden is missing or empty; create it with UPDATE_GOLDEN=1" >&2
  exit 1
fi
if ! diff -u --label "$golden (expected)" --label "tgc dump-ir $* --rank $ranks (actual)" "$dir/expected" "$dir/actual"; then
  echo "the rank programs changed; if intended, run with UPDATE_GOLDEN=1 and review git diff" >&2
  exit 1
fi
echo "rank programs ok: $golden"
