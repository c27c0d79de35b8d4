#!/usr/bin/env python3
"""The activation peak of the plan falls with recomputation
(docs/recompute.md): tgc compile prints "activations N bytes (peak of the
plan)"; selective must be below none, full below selective, and the saving
of selective must be the attention core's stored values the paper's 5as/h
term counts: per layer the softmax output and the attention dropout's
output, b*a*s*s elements each (the dropout mask is not stored: Philox
redraws it), within 10%. That is the unfused attention chain
(--attention-backend unfused); with fused attention (docs/attention.md)
nothing s x s is kept, selective recomputes nothing (its peak is none's)
and full is below both.

usage: memory.py TGC MODEL --set layers=L --set hidden=H --set heads=A --set seq=S --set batch=B
"""
import argparse, os, re, subprocess, sys, tempfile


def peak(tgc, model, sets, extra, tmp):
    out = subprocess.run([tgc, "compile", model, "-o", os.path.join(tmp, "m.plan")] + sets + extra,
                         check=True, capture_output=True, text=True)
    m = re.search(r"activations (\d+) bytes \(peak of the plan\)", out.stdout + out.stderr)
    if not m:
        sys.exit("no activation peak in the output of tgc compile:\n" + out.stdout + out.stderr)
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("model")
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()
    hp = dict(s.split("=", 1) for s in args.set)
    L, a, s, b = (int(hp[k]) for k in ("layers", "heads", "seq", "batch"))
    sets = sum([["--set", x] for x in args.set], [])
    unf = ["--attention-backend", "unfused"]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [("none", unf), ("selective", ["--recompute-granularity", "selective"] + unf),
                ("full", ["--recompute-granularity", "full"] + unf),
                ("fused none", []), ("fused selective", ["--recompute-granularity", "selective"]),
                ("fused full", ["--recompute-granularity", "full"])]
        got = {name: peak(args.tgc, args.model, sets, extra, tmp) for name, extra in rows}
    core = L * 2 * b * a * s * s * 4  # f32
    saved = got["none"] - got["selective"]
    for name, _ in rows:
        print("%-16s activations %12d bytes (%.1f MiB)" % (name, got[name], got[name] / 2**20))
    print("selective saves %d bytes; the attention core of %d layers: %d bytes" % (saved, L, core))
    ok = got["selective"] < got["none"] and got["full"] < got["selective"] and abs(saved - core) <= 0.1 * core
    ok = ok and got["fused selective"] == got["fused none"] and got["fused full"] < got["fused none"]
    ok = ok and got["fused none"] < got["none"]
    print("recompute memory:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
