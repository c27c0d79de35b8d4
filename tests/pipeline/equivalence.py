#!/usr/bin/env python3
"""Any partition trains the same model (docs/pipeline.md, "Execution").

tgc trains one GPT on the same data under several 3D configurations
(t, p, d, v, schedule, sequence parallelism, distributed optimizer) and the
losses of every step and the weights after the last must equal those of the
serial run that takes the same micro-batches one after the other
(--micro-batch-size b --global-batch-size B: gradient accumulation), dropout
on: the masks follow the global micro-batch number, so every configuration
draws the same ones. With dropout off the serial accumulating run must also
equal one step over the whole global batch (--set batch=B).

usage: equivalence.py TGC MODEL TEXT [--steps N] [--only NAME] [--edge] [--flag=--bf16 ...]
--flag: an option of every run, the serial one too (mixed precision);
then the comparison with one step over the whole batch is left out.
--edge: instead, sizes where a dimension is 1 or equals t (micro-batch 1,
a micro-batch of t, t heads, a sequence of t with SP; EDGE below).
Prints the equivalence table; exit 0 when every row is within the
tolerances (losses: relative; weights: max |diff| over all weights divided by
the largest weight, as tests/parallel/equivalence.py; against the single
batch of B: --whole-weight-tol).
"""
import argparse, json, os, struct, subprocess, sys, tempfile

SETS = ["--set", "layers=8", "--set", "hidden=64", "--set", "heads=4", "--set", "seq=32", "--set", "vocab=256"]
B, b = 16, 2
MB = ["--micro-batch-size", str(b), "--global-batch-size", str(B)]

# (name, flags): the (t, p, d, v) list, every schedule.
CONFIGS = [
    ("(1,2,1,1) 1f1b", ["--pp", "2"]),
    ("(1,2,1,1) gpipe", ["--pp", "2", "--pipeline-schedule", "gpipe"]),
    ("(1,4,1,2) interleaved", ["--pp", "4", "--vp", "2", "--pipeline-schedule", "interleaved"]),
    ("(2,2,2,1) 1f1b +SP", ["--tp", "2", "--pp", "2", "--dp", "2", "--sequence-parallel"]),
    ("(2,2,2,2) interleaved +SP +distopt", ["--tp", "2", "--pp", "2", "--dp", "2", "--vp", "2",
                                            "--pipeline-schedule", "interleaved", "--sequence-parallel",
                                            "--use-distributed-optimizer"]),
    ("(1,2,4,1) 1f1b", ["--pp", "2", "--dp", "4"]),
    ("(1,2,4,1) gpipe +distopt", ["--pp", "2", "--dp", "4", "--pipeline-schedule", "gpipe",
                                  "--use-distributed-optimizer"]),
    ("(1,1,8,1) data parallel", ["--dp", "8"]),
]

# Sizes where a dimension is 1 or equals t = 2 (--edge): micro-batch 1, a
# micro-batch of t, t heads, a sequence of t with SP. (name, model sizes,
# micro-batching, flags); each is compared with the serial run of the same
# sizes and micro-batches, 3 steps of a 4-layer model. With micro-batches of
# 8 tokens a few weights get gradients near zero whose float noise Adam
# turns into steps of lr (the same effect as the key bias in
# tests/parallel/equivalence.py), hence a smaller learning rate.
EDGE_SETS = ["--set", "layers=4", "--set", "hidden=32", "--set", "heads=4", "--set", "seq=8", "--set", "vocab=256"]
EDGE_LR = "1e-4"
EDGE_MB1 = ["--micro-batch-size", "1", "--global-batch-size", "4"]
EDGE_MB2 = ["--micro-batch-size", "2", "--global-batch-size", "4"]
EDGE = [
    ("mb=1 (2,2,1,1) 1f1b +SP", [], EDGE_MB1, ["--tp", "2", "--pp", "2", "--sequence-parallel"]),
    ("mb=1 (1,2,2,1) gpipe", [], EDGE_MB1, ["--pp", "2", "--dp", "2", "--pipeline-schedule", "gpipe"]),
    ("mb=1 (1,2,1,2) interleaved", [], EDGE_MB1, ["--pp", "2", "--vp", "2", "--pipeline-schedule", "interleaved"]),
    ("mb=1 (2,1,2,1) +distopt", [], EDGE_MB1, ["--tp", "2", "--dp", "2", "--use-distributed-optimizer"]),
    ("mb=t (2,2,1,1) 1f1b", [], EDGE_MB2, ["--tp", "2", "--pp", "2"]),
    ("heads=t (2,2,1,1) 1f1b", ["--set", "heads=2"], EDGE_MB1, ["--tp", "2", "--pp", "2"]),
    ("seq=t (2,1,2,1) +SP", ["--set", "seq=2"], EDGE_MB1, ["--tp", "2", "--dp", "2", "--sequence-parallel"]),
]


def st_read(path):
    """The tensors of a safetensors file as flat float lists (F32/F64 only)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, z = t["data_offsets"]
        fmt = {"F32": "f", "F64": "d"}[t["dtype"]]
        size = struct.calcsize(fmt)
        out[name] = struct.unpack("<%d%s" % ((z - a) // size, fmt), data[a:z])
    return out


def run(tgc, model, text, flags, steps, tmp, tag, sets=SETS, lr="1e-3"):
    log, weights = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".safetensors")
    for p in (log, weights):
        if os.path.exists(p):
            os.remove(p)
    subprocess.check_call([tgc, "run", model] + sets + flags + [
        "--data", text, "--train-iters", str(steps), "--lr", lr, "--quiet", "--log", log, "--export", weights])
    return [json.loads(l)["loss"] for l in open(log)], st_read(weights)


def compare(ref, got):
    (rl, rw), (gl, gw) = ref, got
    dl = max(abs(x - y) / abs(x) for x, y in zip(rl, gl)) if len(rl) == len(gl) else float("inf")
    scale = max(max(abs(v) for v in t) for t in rw.values())
    dw = max(max(abs(x - y) for x, y in zip(rw[k], gw[k])) for k in rw) / scale if rw.keys() == gw.keys() \
        else float("inf")
    return dl, dw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--only", default=None)
    ap.add_argument("--loss-tol", type=float, default=1e-5)
    ap.add_argument("--weight-tol", type=float, default=1e-5)
    ap.add_argument("--whole-weight-tol", type=float, default=1e-4)
    ap.add_argument("--edge", action="store_true", help="the sizes where a dimension is 1 or equals t")
    ap.add_argument("--flag", action="append", default=[])
    args = ap.parse_args()
    global MB
    MB = MB + args.flag
    if args.edge:
        return edge(args)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        print("%-38s %-14s %s" % ("(t,p,d,v) schedule", "max loss diff", "max weight diff"))
        ref = run(args.tgc, args.model, args.text, MB, args.steps, tmp, "serial")
        for name, flags in CONFIGS:
            if args.only and args.only not in name:
                continue
            dl, dw = compare(ref, run(args.tgc, args.model, args.text, MB + flags, args.steps, tmp, "cfg"))
            good = dl <= args.loss_tol and dw <= args.weight_tol
            ok &= good
            print("%-38s %-14.2e %.2e %s" % (name, dl, dw, "" if good else "FAIL"), flush=True)
        # Dropout off: accumulating micro-batches is one step over the global
        # batch, up to the order of float sums (the batch is summed inside one
        # GEMM instead of over 8 micro-batches), which Adam's normalisation
        # amplifies in weights whose gradient is nearly zero: a looser weight
        # tolerance, the losses as tight as above.
        off = ["--set", "pdrop=0"]
        if args.flag:
            print("equivalence:", "PASS" if ok else "FAIL")
            return 0 if ok else 1
        whole = run(args.tgc, args.model, args.text, off + ["--set", "batch=%d" % B], args.steps, tmp, "whole")
        for name, flags in [("serial accumulation, no dropout", MB + off),
                            ("(2,2,2,1) +SP, no dropout", MB + off + CONFIGS[3][1])]:
            dl, dw = compare(whole, run(args.tgc, args.model, args.text, flags, args.steps, tmp, "cfg"))
            good = dl <= args.loss_tol and dw <= args.whole_weight_tol
            ok &= good
            print("%-38s %-14.2e %.2e %s" % (name + " vs one batch of %d" % B, dl, dw, "" if good else "FAIL"))
    print("equivalence:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def edge(args):
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        print("%-38s %-14s %s" % ("sizes (t,p,d,v) schedule", "max loss diff", "max weight diff"))
        for name, sets, mb, flags in EDGE:
            if args.only and args.only not in name:
                continue
            sets = EDGE_SETS + sets
            ref = run(args.tgc, args.model, args.text, mb, args.steps, tmp, "serial", sets, EDGE_LR)
            dl, dw = compare(ref, run(args.tgc, args.model, args.text, mb + flags, args.steps, tmp, "cfg", sets, EDGE_LR))
            good = dl <= args.loss_tol and dw <= args.weight_tol
            ok &= good
            print("%-38s %-14.2e %.2e %s" % (name, dl, dw, "" if good else "FAIL"), flush=True)
    print("equivalence:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
