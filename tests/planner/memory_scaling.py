#!/usr/bin/env python3
"""Activation memory of one layer as `tgc plan` measures it from the compiled
plan, against Korthikanti et al.'s formula, for t = 1, 2, 4 with and without
sequence parallelism.

The formula counts fp16 values and 1-byte dropout masks; the plan holds
4-byte values and no masks (tgc regenerates them from Philox), and with SP it
keeps the all-gathered inputs of the two column-parallel GEMMs whole (8 sbh
bytes, of which the formula's share is 8 sbh / t). So the plan should hold

    2 * (formula - masks) + 8 sbh (1 - 1/t) [SP only]

bytes, up to the layer norms' weights copied per rank (a few h): the bound is
0.5%. And the memory must fall as the formula says: with t, and again with SP.
That is the unfused attention chain (--attention-backend unfused). With fused
attention (the default; docs/attention.md) the formula's 5as/h becomes the
f32 row log-sum-exp, 4a/h (4 a s b bytes, not doubled), there is no attention
dropout mask, and the op writes its output as the [s, b, h] the dense GEMM
reads (out=sbnd, docs/attention.md "Layouts"), the one copy the formula
counts:

    2 * (formula - masks - lse) + lse + 8 sbh (1 - 1/t) [SP only]

With --no-attention-inplace the plan keeps the attention's [b, n, s, d]
output (4 sbh / t bytes) beside its permuted copy, the dense GEMM's input:
+ 4 sbh / t.

usage: memory_scaling.py TGC MODEL"""
import re
import subprocess
import sys

tgc, model = sys.argv[1], sys.argv[2]
S, B, H, A = 128, 4, 128, 4
SETS = ["--set", "layers=2", "--set", f"hidden={H}", "--set", f"heads={A}", "--set", f"seq={S}",
        "--set", f"batch={B}"]
SBH = S * B * H


def formula(t, sp, fused):
    """Korthikanti et al.: bytes of one layer, the dropout masks' share, and
    the f32 row log-sum-exp of fused attention."""
    core = 4 * A / H if fused else 5 * A * S / H
    total = SBH * (34 + core) / t if sp else SBH * (10 + 24 / t + core / t)
    masks = (2 * SBH / t if sp else 2 * SBH) + (0 if fused else A * S * S * B / t)
    lse = 4 * A * S * B / t if fused else 0
    return total, masks, lse


def measure(args):
    out = subprocess.run([tgc, "plan", model, *SETS, *args], check=True, capture_output=True, text=True).stdout
    layer = int(re.search(r"^  measured +(\d+) B", out, re.M).group(1))
    arena = int(re.search(r"^  activations +(\d+) B", out, re.M).group(1))
    return layer, arena


failures = 0
for backend, copy in [("unfused", False), ("auto", False), ("auto", True)]:
    fused = backend != "unfused"
    prev = None
    for t, sp in [(1, False), (2, False), (2, True), (4, False), (4, True)]:
        args = (["--tp", str(t), "--attention-backend", backend] + (["--sequence-parallel"] if sp else []) +
                (["--no-attention-inplace"] if copy else []))
        layer, arena = measure(args)
        total, masks, lse = formula(t, sp, fused)
        expect = 2 * (total - masks - lse) + lse + (4 * SBH / t if copy else 0) + (8 * SBH * (1 - 1 / t) if sp else 0)
        ok = abs(layer / expect - 1) < 0.005
        print(f"attention {backend}{' copy' if copy else ''} t={t} SP={'on' if sp else 'off'}: layer {layer} B, "
              f"expected {expect:.0f} B "
              f"(formula {total:.0f} B), ratio {layer / expect:.4f}, plan's arena {arena} B {'ok' if ok else 'FAIL'}")
        failures += not ok
        # In this order the formula falls at every step (more TP, then SP): so must the plan, layer and arena.
        if prev and not (layer < prev[0] and arena < prev[1]):
            print("  FAIL: the memory did not fall from the configuration before")
            failures += 1
        prev = (layer, arena)
sys.exit(1 if failures else 0)
