#!/usr/bin/env bash
# The main demo: trains samples/gpt.tg byte-level on the King James Bible
# (Debian's bible-kjv prints it) on the CPU, prints the loss curve, saves a
# checkpoint, then samples 200 bytes after "And God said" from it.
#
#   scripts/demo.sh [ITERS]        (default 1700; about 5 minutes on 2 cores)
#
# The model is samples/gpt.tg made small enough to learn words in those
# minutes: 4 layers, hidden 128, context 128, batch 16 (0.8M parameters,
# 2048 bytes a step). 1% of the text is held out (--split 99,1) and its
# loss is printed beside the training loss.
#
# From nothing: installs the Debian packages it needs (as root; otherwise
# prints the apt-get line and stops), builds build/tgc, and stops at the
# first failure.
#
# Writes demo/kjv.txt, demo/log.jsonl (one JSON object per step),
# demo/gpt.safetensors (the trained weights) and the checkpoint directory
# demo/ckpt (docs/checkpoints.md), which `tgc sample` reads
# (docs/sampling.md).
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-1700}
model=(samples/gpt.tg --set hidden=128 --set seq=128 --set batch=16)
. scripts/lib/deps.sh
tgc_deps demo
cmake -S . -B build
cmake --build build -j"$(nproc)" --target tgc
mkdir -p demo
if [ ! -s demo/kjv.txt ]; then
  bible -f Gen1:1-Rev22:21 > demo/kjv.txt
fi
rm -f demo/log.jsonl
rm -rf demo/ckpt
build/tgc run "${model[@]}" --data demo/kjv.txt --set pdrop=0 \
  --train-iters "$iters" --lr 5e-3 --lr-warmup-iters 20 --lr-decay-style cosine --min-lr 5e-4 \
  --weight-decay 0.1 --clip-grad 1.0 --split 99,1 --eval-interval 100 --eval-iters 8 \
  --log-interval 100 --log demo/log.jsonl --export demo/gpt.safetensors --save demo/ckpt
python3 - demo/log.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("loss curve (step: training loss, validation loss on the held-out 1%):")
evals = [r for r in rows if r.get("val_loss") is not None]
shown = evals if evals else rows[::max(1, len(rows) // 15)]
if shown[-1] is not rows[-1]:
    shown.append(rows[-1])
for r in shown:
    val = r.get("val_loss")
    print("  %4d: %.4f%s" % (r["step"], r["loss"], "   validation %.4f" % val if val is not None else ""))
tps = sorted(r["tokens_per_s"] for r in rows[1:]) or [0]
print("median tokens/s: %.0f" % tps[len(tps) // 2])
PY
echo "sample (200 bytes, temperature 0.8, top-k 40, from the checkpoint demo/ckpt):"
build/tgc sample "${model[@]}" --weights demo/ckpt --prompt "And God said" --tokens 200 \
  --temperature 0.8 --top-k 40 --seed 1
