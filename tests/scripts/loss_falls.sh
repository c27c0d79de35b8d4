#!/usr/bin/env bash
# loss_falls.sh TGC MODEL DATA MAX_FINAL [ARGS...]: training on real text
# lowers the loss: the mean of the last 5 logged losses is below MAX_FINAL
# and below the first loss.
set -euo pipefail
tgc=$1 model=$2 data=$3 max_final=$4
shift 4
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$tgc" run "$model" --data "$data" --quiet --log "$log" "$@"
python3 - "$log" "$max_final" <<'PY'
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1])]
first, last = losses[0], sum(losses[-5:]) / len(losses[-5:])
print("loss %.4f -> %.4f over %d steps" % (first, last, len(losses)))
assert last < first and last < float(sys.argv[2]), "the loss did not fall enough"
PY
