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
. "$(dirname "$0")/golden_lib.sh"
golden_compare '##' "$golden" "$dir/actual" "tgc dump-ir $* --rank $ranks"
echo "rank programs ok: $golden"
