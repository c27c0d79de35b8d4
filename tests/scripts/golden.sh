#!/usr/bin/env bash
# golden.sh TGC MODEL GOLDEN [PASS [ARGS...]]: the IR of MODEL after PASS
# (default: lower) must equal GOLDEN byte for byte. UPDATE_GOLDEN=1 rewrites
# GOLDEN instead (review the change with git diff before committing it).
set -euo pipefail
tgc=$1 model=$2 golden=$3
after=${4:-lower}
shift $(( $# < 4 ? $# : 4 ))
actual=$(mktemp)
trap 'rm -f "$actual"' EXIT
"$tgc" dump-ir "$model" --after "$after" "$@" -o "$actual"
if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
  cp "$actual" "$golden"
  echo "updated $golden"
  exit 0
fi
if [ ! -f "$golden" ]; then
  echo "golden file $golden is missing; create it with UPDATE_GOLDEN=1" >&2
  exit 1
fi
if ! diff -u --label "$golden (expected)" --label "$model (actual)" "$golden" "$actual"; then
  echo "the IR of $model changed; if the change is intended, run the test with UPDATE_GOLDEN=1 and review git diff" >&2
  exit 1
fi
