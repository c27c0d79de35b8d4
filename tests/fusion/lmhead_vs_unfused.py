#!/usr/bin/env python3
"""The fused LM head and loss against the unfused pair (docs/fusion.md, "The
LM head and its loss"): tgc trains the same model from the same seed on the
same batches (some labels ignored), once with --no-fused-lm-head (linear,
cross_entropy and cross_entropy_back over the whole [tokens, vocab] logits)
and once fused (the lmhead pass's lm_head_ce and lm_head_ce_back, the logits
computed chunk by chunk), and the losses of every step, the gradients of the
last step and the final weights must agree to rounding: only the order of
the floating-point sums differs (the chunks' log-sum-exp combined, dx summed
chunk by chunk).

usage: lmhead_vs_unfused.py TGC MODEL [--set k=v ...] [--config "ARGS"] ...
       [--run-args "ARGS"] [--steps N] [--tol T]

Each --config (default: serial) is a string of extra options ("--tp 2",
"--lm-head-chunk 100", "--pp 2 --global-batch-size 8"; "serial": none).
Losses agree within --tol relative; each gradient and weight tensor within
--tol of the largest of the model. The fused plan must hold one lm_head_ce
and one lm_head_ce_back and the unfused none; and `tgc plan` must show the
logits gone: the activations kept for the backward pass at least one
[tokens, vocab / t] f32 tensor smaller fused than unfused."""
import argparse, json, os, re, shlex, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fused_vs_unfused import make_inputs, st_write  # noqa: E402
from attention_vs_unfused import rel_diff, run  # noqa: E402

KEPT = re.compile(r"^activations kept for the backward pass: (\d+) B", re.M)


def plan_kept(tgc, model, sets, extra):
    out = subprocess.check_output([tgc, "plan", model] + sets + extra).decode()
    m = KEPT.search(out)
    if not m:
        sys.exit("tgc plan printed no 'activations kept for the backward pass' line:\n" + out)
    return int(m.group(1))


def logits_bytes(graph, extra):
    """Bytes of one rank's f32 logits: tokens x vocab / t."""
    nodes = graph["nodes"]
    ce = [n for n in nodes if n["op"] == "cross_entropy"][0]
    shape = nodes[ce["operands"][0]]["shape"]
    tokens = 1
    for d in shape[:-1]:
        tokens *= d
    t = int(extra[extra.index("--tp") + 1]) if "--tp" in extra else 1
    return tokens * shape[-1] // t * 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("model")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--run-args", default="")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    sets = sum([["--set", s] for s in args.set], [])
    run_args = shlex.split(args.run_args)
    graph = json.loads(subprocess.check_output([args.tgc, "dump-ir", args.model, "--after", "lower",
                                                "--format", "json"] + sets))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        batches = os.path.join(tmp, "batches.safetensors")
        st_write(batches, make_inputs(graph, args.steps))
        print("%-50s %11s %11s %11s %13s" % ("configuration", "loss diff", "grad diff", "weight diff", "kept saved"))
        for i, config in enumerate(args.config or ["serial"]):
            extra = [] if config == "serial" else shlex.split(config)
            unf = ["--no-fused-lm-head"]
            fused_ir = subprocess.check_output([args.tgc, "dump-ir", args.model, "--after", "fuse"] + sets + extra
                                               ).decode()
            plain_ir = subprocess.check_output([args.tgc, "dump-ir", args.model, "--after", "fuse"] + sets + extra +
                                               unf).decode()
            nf, nb = fused_ir.count("= lm_head_ce("), fused_ir.count("= lm_head_ce_back(")
            if nf != 1 or nb != 1 or "lm_head_ce" in plain_ir or "cross_entropy" in fused_ir:
                print("%s %s: %d lm_head_ce and %d lm_head_ce_back fused (want 1 and 1, no cross_entropy left), "
                      "or the unfused plan has some" % (args.model, config, nf, nb))
                ok = False
                continue
            pp = "--pp" in extra
            saved = 0 if pp else plan_kept(args.tgc, args.model, sets, extra + unf) - plan_kept(
                args.tgc, args.model, sets, extra)
            ref = run(args.tgc, args.model, sets, extra + unf, args.steps, batches, tmp, "unfused%d" % i, run_args)
            got = run(args.tgc, args.model, sets, extra, args.steps, batches, tmp, "fused%d" % i, run_args)
            dl = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(ref[0], got[0]))
            same_names = sorted(ref[1]) == sorted(got[1]) and sorted(ref[2]) == sorted(got[2])
            dg = rel_diff(got[1], ref[1]) if same_names else float("inf")
            dw = rel_diff(got[2], ref[2]) if same_names else float("inf")
            good = (len(got[0]) == args.steps == len(ref[0]) and dl <= args.tol and dg <= args.tol and
                    dw <= args.tol and (pp or saved >= logits_bytes(graph, extra)))
            ok &= good
            name = (os.path.basename(args.model) + " " + " ".join(extra)).strip()
            print("%-50s %11.2e %11.2e %11.2e %13s%s" % (name, dl, dg, dw, "-" if pp else "%d B" % saved,
                                                        "" if good else "  FAIL"))
    print("fused LM head vs unfused:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
