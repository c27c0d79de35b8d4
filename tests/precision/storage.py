#!/usr/bin/env python3
"""Real 16-bit storage: the memory of a --bf16 / --fp16 plan against fp32.

1. `tgc plan` of the default GPT: activations and gradients in 16 bits take
   at most 0.55 of their fp32 bytes (half, plus each buffer's 64-byte
   alignment), together and each; the parameters too; the optimizer state
   is fp32 per parameter element and gains the master weights: Adam's two
   moments plus the masters are 1.5 x the fp32 run's two moments (within
   1%: the 16-bit parameter buffer pads each tensor to 32 elements, the
   fp32 one to 16).
2. `tgc run` allocates what the plan predicts, and under --bf16 less than
   0.75 x the fp32 run (not one half: the fp32 optimizer state, 1.5 x
   fp32's, is a large share of a small model's memory).

usage: storage.py TGC MODEL TEXT
"""
import re, subprocess, sys

TINY = ["--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "seq=64", "--set", "batch=4"]
ROWS = ("parameters", "gradients", "optimizer state", "activations")


def plan_rows(tgc, model, flags):
    out = subprocess.check_output([tgc, "plan", model] + flags, text=True)
    rows = {}
    for name in ROWS:
        m = re.search(r"^\s+%s\s+(\d+) B" % re.escape(name), out, re.M)
        assert m, "no %r row in tgc plan's output:\n%s" % (name, out)
        rows[name] = int(m.group(1))
    return rows


def allocated(tgc, model, text, flags):
    out = subprocess.run([tgc, "run", model] + TINY + flags + ["--data", text, "--train-iters", "1"],
                         check=True, capture_output=True, text=True)
    m = re.search(r"memory per rank: (\d+) B allocated by the executor, (\d+) B predicted by the plan", out.stderr)
    assert m, "no memory line in tgc run's output:\n" + out.stderr
    got, want = int(m.group(1)), int(m.group(2))
    assert got == want, "the executor allocated %d B, the plan predicted %d B" % (got, want)
    return got


def main():
    tgc, model, text = sys.argv[1:4]
    f32 = plan_rows(tgc, model, [])
    ok = True
    for flag in ("--bf16", "--fp16"):
        h = plan_rows(tgc, model, [flag])
        act_grad = (h["activations"] + h["gradients"]) / (f32["activations"] + f32["gradients"])
        ratios = {k: h[k] / f32[k] for k in ROWS}
        print("%s / fp32: activations %.4f, gradients %.4f, parameters %.4f, optimizer state %.4f; "
              "activations + gradients %.4f" % (flag, ratios["activations"], ratios["gradients"],
                                               ratios["parameters"], ratios["optimizer state"], act_grad))
        good = act_grad <= 0.55 and all(ratios[k] <= 0.55 for k in ("activations", "gradients", "parameters"))
        good &= abs(ratios["optimizer state"] - 1.5) <= 0.015
        ok &= good
    a32, a16 = allocated(tgc, model, text, []), allocated(tgc, model, text, ["--bf16"])
    print("tgc run allocates %d B in fp32, %d B with --bf16 (%.3f x)" % (a32, a16, a16 / a32))
    ok &= a16 < 0.75 * a32
    print("storage: " + ("ok" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
