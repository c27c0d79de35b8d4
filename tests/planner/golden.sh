#!/usr/bin/env bash
# golden.sh TGC GOLDEN ARGS...: the output of `tgc plan ARGS...` (a --search
# on a fixed cluster description: every constant given, no calibration) must
# equal GOLDEN byte for byte. UPDATE_GOLDEN=1 rewrites GOLDEN instead (review
# the change with git diff before committing it).
set -euo pipefail
tgc=$1 golden=$2
shift 2
actual=$(mktemp)
trap 'rm -f "$actual"' EXIT
"$tgc" plan "$@" > "$actual"
if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
  cp "$actual" "$golden"
  echo "updated $golden"
  exit 0
fi
if [ ! -f "$golden" ]; then
  echo "golden file $golden is missing; create it with UPDATE_GOLDEN=1" >&2
  exit 1
fi
if ! diff -u --label "$golden (expected)" --label "tgc plan $* (actual)" "$golden" "$actual"; then
  echo "the planner's ranking changed; if the change is intended, run the test with UPDATE_GOLDEN=1 and review git diff" >&2
  exit 1
fi
