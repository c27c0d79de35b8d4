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
. "$(dirname "$0")/golden_lib.sh"
golden_compare '#' "$golden" "$dir/actual" "tgc dump-ir $* --format schedule"
echo "schedule ok: $golden"
