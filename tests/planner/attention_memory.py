#!/usr/bin/env python3
"""Activation memory against the sequence length (docs/attention.md): with
fused attention nothing s x s is kept, so a layer's kept activations (`tgc
plan`'s "measured" row: layer 0's values kept for the backward pass) and the
plan's whole activation arena grow linearly in s: at s = 2048 about twice
what they are at s = 1024 (asserted: 1.9 to 2.1). The unfused chain keeps
the scores' softmax and dropout outputs, a s^2 b values each, so with a small
hidden size (5 a s / h >> 34) it grows nearly fourfold (asserted: above 3.5
for the layer, 3.3 for the arena), and at s = 2048 fused needs less than a
quarter of it.

usage: attention_memory.py TGC MODEL"""
import re
import subprocess
import sys

tgc, model = sys.argv[1], sys.argv[2]
SETS = ["--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "batch=1"]


def measure(backend, s):
    out = subprocess.run([tgc, "plan", model, *SETS, "--set", f"seq={s}", "--attention-backend", backend],
                         check=True, capture_output=True, text=True).stdout
    layer = int(re.search(r"^  measured +(\d+) B", out, re.M).group(1))
    arena = int(re.search(r"^  activations +(\d+) B", out, re.M).group(1))
    return layer, arena


failures = 0
at = {}
for backend, lo, hi, arena_lo, arena_hi in [("auto", 1.9, 2.1, 1.9, 2.1), ("unfused", 3.5, 4.0, 3.3, 4.0)]:
    (l1, a1), (l2, a2) = measure(backend, 1024), measure(backend, 2048)
    at[backend] = (l2, a2)
    ok = lo <= l2 / l1 <= hi and arena_lo <= a2 / a1 <= arena_hi
    print(f"attention {backend}: layer {l1} -> {l2} B ({l2 / l1:.3f} x), arena {a1} -> {a2} B ({a2 / a1:.3f} x) "
          f"from s = 1024 to 2048 {'ok' if ok else 'FAIL'}")
    failures += not ok
if not (at["auto"][0] * 4 < at["unfused"][0] and at["auto"][1] * 4 < at["unfused"][1]):
    print(f"FAIL: at s = 2048 fused attention keeps {at['auto']} B, not under a quarter of unfused {at['unfused']}")
    failures += 1
sys.exit(1 if failures else 0)
