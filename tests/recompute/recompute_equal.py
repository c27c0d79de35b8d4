#!/usr/bin/env python3
"""Recomputation changes no bit (docs/recompute.md): tgc trains the same
model from the same seed on the same batches, dropout on, once without
recomputation and once per --recompute variant, and the losses of every
step and the gradients of the last step (--export-grads) must agree within
--tol (relative for losses; for gradients, relative to the largest gradient
of the model), and with --identical bit for bit.

usage: recompute_equal.py TGC MODEL [--set k=v ...] [--config "ARGS"] ...
       [--recompute "ARGS"] ... [--run-args "ARGS"] [--steps N] [--tol T] [--identical]

Each --config (default: serial) is a string of extra options of the passes,
e.g. "--tp 2 --sequence-parallel"; each --recompute a set of recompute
options, e.g. "--recompute-granularity full --recompute-num-layers 2". The
recomputing plan must really hold clones (`%NAME.recompute`), the plain one
none. The batches and safetensors helpers are fused_vs_unfused.py's.
"""
import argparse, json, os, shlex, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fusion"))
from fused_vs_unfused import make_inputs, st_read, st_write  # noqa: E402


def clones(tgc, model, sets, extra):
    ir = subprocess.check_output([tgc, "dump-ir", model, "--after", "recompute"] + sets + extra).decode()
    return sum(1 for line in ir.splitlines() if line.startswith("%") and ".recompute = " in line)


def run(tgc, model, sets, extra, steps, batches, tmp, tag, run_args):
    log, grads = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".safetensors")
    subprocess.check_call([tgc, "run", model] + sets + extra + run_args + [
        "--inputs", batches, "--train-iters", str(steps), "--quiet", "--log", log, "--export-grads", grads])
    return [json.loads(l)["loss"] for l in open(log)], st_read(grads)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("model")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--recompute", action="append", default=[])
    ap.add_argument("--run-args", default="")
    ap.add_argument("--identical", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tol", type=float, default=1e-6)
    args = ap.parse_args()
    sets = sum([["--set", s] for s in args.set], [])
    run_args = shlex.split(args.run_args)
    variants = args.recompute or ["--recompute-granularity selective", "--recompute-granularity full"]
    graph = json.loads(subprocess.check_output([args.tgc, "dump-ir", args.model, "--after", "lower",
                                                "--format", "json"] + sets))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        batches = os.path.join(tmp, "batches.safetensors")
        st_write(batches, make_inputs(graph, args.steps))
        print("%-34s %-58s %6s %10s %10s  %s" % ("configuration", "recompute", "clones", "loss diff", "grad diff",
                                               "identical"))
        for i, config in enumerate(args.config or ["serial"]):
            extra = [] if config == "serial" else shlex.split(config)
            if clones(args.tgc, args.model, sets, extra) != 0:
                print("%s: clones without --recompute-granularity" % config)
                ok = False
                continue
            ref_loss, ref_g = run(args.tgc, args.model, sets, extra, args.steps, batches, tmp, "plain%d" % i, run_args)
            scale = max(max(abs(x) for x in v) for v in ref_g.values())
            for j, variant in enumerate(variants):
                rc = shlex.split(variant)
                n = clones(args.tgc, args.model, sets, extra + rc)
                loss, g = run(args.tgc, args.model, sets, extra + rc, args.steps, batches, tmp, "rc%d_%d" % (i, j),
                              run_args)
                dl = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(ref_loss, loss))
                dg = max(max(abs(x - y) for x, y in zip(g[k], ref_g[k])) for k in ref_g) / scale
                same = loss == ref_loss and all(g[k] == ref_g[k] for k in ref_g)
                good = (n > 0 and len(loss) == args.steps == len(ref_loss) and sorted(g) == sorted(ref_g)
                        and dl <= args.tol and dg <= args.tol and (same or not args.identical))
                ok &= good
                print("%-34s %-58s %6d %10.2e %10.2e  %s%s" % (config, variant, n, dl, dg,
                                                           "bit-identical" if same else "no", "" if good else "  FAIL"))
    print("recompute vs none:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
