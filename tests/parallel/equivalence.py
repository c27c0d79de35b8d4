#!/usr/bin/env python3
"""One model under any partition: tgc trains a sample serially and split
over t tensor-parallel ranks (with and without sequence parallelism), on
the same batches with dropout on, and the losses of every step and the
exported weights after the last one must agree.

usage: equivalence.py TGC MODEL [--set k=v ...] [--tp 2 --tp 4] [--steps N] [--flag=--bf16 ...]
(--flag: an option every run takes, the serial one too, e.g. mixed precision)
Prints the equivalence table; exit 0 when every configuration is within
--loss-tol (relative) and --weight-tol (max |diff| over all weights divided
by the largest weight).
"""
import argparse, json, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "oracle"))
import oracle  # noqa: E402  (the safetensors helpers and batch maker)
import torch  # noqa: E402


def run(tgc, model, sets, extra, steps, batches, tmp, tag):
    log, weights = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".safetensors")
    subprocess.check_call([tgc, "run", model] + sets + extra + [
        "--inputs", batches, "--train-iters", str(steps), "--lr", os.environ.get("EQ_LR", "3e-5"), "--quiet", "--log", log, "--export", weights])
    return [json.loads(l)["loss"] for l in open(log)], oracle.st_read(weights)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("model")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--tp", action="append", type=int, default=[])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--flag", action="append", default=[])
    ap.add_argument("--loss-tol", type=float, default=1e-5)
    ap.add_argument("--weight-tol", type=float, default=1e-5)
    args = ap.parse_args()
    sets = sum([["--set", s] for s in args.set], [])
    graph = json.loads(subprocess.check_output([args.tgc, "dump-ir", args.model, "--after", "lower",
                                                "--format", "json"] + sets))
    gen = torch.Generator().manual_seed(4321)
    inputs = oracle.make_inputs(graph, args.steps, gen)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        batches = os.path.join(tmp, "batches.safetensors")
        oracle.st_write(batches, inputs)
        ref_loss, ref_w = run(args.tgc, args.model, sets, args.flag, args.steps, batches, tmp, "serial")
        print("%-34s %-14s %s" % ("configuration", "max loss diff", "max weight diff"))
        for t in args.tp or [2, 4]:
            for sp in ([], ["--sequence-parallel"]):
                tag = "tp%d%s" % (t, "+sp" if sp else "")
                loss, w = run(args.tgc, args.model, sets, args.flag + ["--tp", str(t)] + sp, args.steps, batches, tmp, tag)
                dl = max(abs(a - b) / abs(a) for a, b in zip(ref_loss, loss))
                # Normalised by the largest weight of the model: a tensor that
                # starts at zero and whose exact gradient is zero (the key bias:
                # softmax ignores a shift of every score) holds only Adam's
                # amplification of float noise, identical in size in any run.
                scale = max(v.abs().max().item() for v in ref_w.values())
                dw = max((w[k] - ref_w[k]).abs().max().item() for k in ref_w) / scale
                good = len(loss) == len(ref_loss) and dl <= args.loss_tol and dw <= args.weight_tol
                ok &= good
                print("%-34s %-14.2e %.2e %s" % (os.path.basename(args.model) + " " + tag, dl, dw,
                                                 "" if good else "FAIL"))
    print("equivalence:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
