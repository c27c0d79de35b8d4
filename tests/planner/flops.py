#!/usr/bin/env python3
"""FLOPs of an iteration from the IR (`tgc plan`: 3 x the forward graph's
ops, and the training graph's ops) against the seed's formula
72 B s l h^2 (1 + s/6h + V/12lh), for GPT at a few sizes.

The formula counts the GEMMs only (the layers' and the LM head's), and the
backward pass as twice the forward; the IR counts every op, so its figure
is higher by the non-GEMM ops: per token and layer, two layer norms (8h
each in ir/flops.c), GeLU on 4h values (8 each), the linears' biases (9h),
the residual adds and dropouts (4h), and on the a s attention scores a
causal softmax (5) and its dropout (1); outside the layers the embedding
add, the final norm and the loss (4V). The expected ratio is therefore

    1 + [l (61h + 6as) + 10h + 4V] / [l (24h^2 + 4sh) + 2hV],

which the 3 x forward figure must meet within 0.5%, and which shrinks like
1/h (asserted: the ratio falls when h doubles). The training graph's backward
ops are not exactly twice the forward non-GEMM ops (fused backward kernels
count their own FLOPs), so it is held to the looser bound
1 <= ratio <= expected + 1%: the GEMMs, which the formula counts exactly,
must all be there and nothing much else.

The forward graph is the model as written (the chain); the training graph is
the compiled one. With fused attention (the default; --attention-backend
unfused keeps the chain) its backward recomputes q k^T: the training graph
may exceed the bound by l 2 s h / (3 [l (24h^2 + 4sh) + 2hV]). The fused LM
head (the default; --no-fused-lm-head keeps the logits) recomputes the
logits in its backward: one more head GEMM, 2hV / (3 [l (24h^2 + 4sh) + 2hV]).

usage: flops.py TGC MODEL"""
import re
import subprocess
import sys

tgc, model = sys.argv[1], sys.argv[2]
SIZES = [  # l, h, a, s, V
    (2, 128, 2, 64, 256),
    (4, 256, 4, 256, 256),
    (12, 768, 12, 1024, 50304),  # GPT-2 124M
    (2, 512, 8, 128, 512),
    (2, 1024, 16, 128, 512),  # the one before with h doubled: the ratio must fall
]
failures = 0
for backend in ["unfused", "auto"]:
    fused, last = backend != "unfused", None
    for l, h, a, s, V in SIZES:
        sets = ["--attention-backend", backend]
        for k, v in dict(layers=l, hidden=h, heads=a, seq=s, vocab=V, batch=2).items():
            sets += ["--set", f"{k}={v}"]
        out = subprocess.run([tgc, "plan", model, *sets], check=True, capture_output=True, text=True).stdout
        f72 = float(re.search(r"72 B s l h\^2 .* = (\S+)", out).group(1))
        fwd3 = re.search(r"IR: 3 x the forward graph's ops +=\s+(\S+)\s+\((\S+) x", out)
        graph = re.search(r"IR: the training graph's ops, one rank x t +=\s+(\S+)\s+\((\S+) x", out)
        formula = 72 * 2 * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
        gemms = l * (24 * h * h + 4 * s * h) + 2 * h * V
        expect = 1 + (l * (61 * h + 6 * a * s) + 10 * h + 4 * V) / gemms
        recompute = l * 2 * s * h / (3 * gemms) if fused else 0
        recompute += 2 * h * V / (3 * gemms)  # the fused LM head's recomputed logits
        r3, rg = float(fwd3.group(1)) / f72, float(graph.group(1)) / f72
        ok = abs(f72 / formula - 1) < 1e-4 and abs(r3 / expect - 1) < 0.005 and 1 <= rg <= expect + recompute + 0.01
        if last and last[0] == (l, s, V):
            ok = ok and r3 < last[1]
        print(f"attention {backend} l={l} h={h} a={a} s={s} V={V}: formula {f72:.4e}; IR 3 x forward {r3:.4f} x "
              f"(expected {expect:.4f}), training graph {rg:.4f} x {'ok' if ok else 'FAIL'}")
        failures += not ok
        last = ((l, s, V), r3)
sys.exit(1 if failures else 0)
