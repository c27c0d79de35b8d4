#!/usr/bin/env bash
# schedule_golden.sh TGC GOLDEN ARGS...: `tgc dump-ir ARGS --format schedule`
# (every rank's pipeline instruction list and the simulated figures) must
# equal GOLDEN after its header, the leading lines that start with '#'
# (how the file was reviewed). UPDATE_GOLDEN=1 rewrites the body and keeps
# the header (review the change with git diff before committing it).
set -euo pipefail
tgc=$1 golden=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tgc" dump-ir "$@" --format schedule -o "$dir/actual"
if [ -f "$golden" ]; then
  awk 'body || !/^#/ { body = 1; print }' "$golden" > "$dir/expected"
  awk '!body && /^#/ { print; next } { body = 1 }' "$golden" > "$dir/header"
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
if ! diff -u --label "$golden (expected)" --label "tgc dump-ir $* (actual)" "$dir/expected" "$dir/actual"; then
  echo "the schedule changed; if intended, run with UPDATE_GOLDEN=1 and review git diff" >&2
  exit 1
fi
echo "schedule ok: $golden"
