#!/usr/bin/env python3
"""Fused attention against the unfused chain (docs/attention.md): tgc trains
the same model from the same seed on the same batches, dropout on, once with
--attention-backend unfused (bmm, softmax, dropout, bmm) and once fused (the
attention pass's attention op, its backward attention_back), and the losses
of every step, the gradients of the last step and the final weights must
agree to rounding: the fused op draws the dropout mask the unfused dropout
draws (the same Philox key, by global element index), so only the order of
the floating-point sums differs.

usage: attention_vs_unfused.py TGC MODEL [--set k=v ...] [--config "ARGS"] ...
       [--run-args "ARGS"] [--steps N] [--tol T] [--dsl] [--against unfused|copy]

Each --config (default: serial) is a string of extra options of the passes
("--tp 2 --sequence-parallel", "--pp 2 --global-batch-size 8",
"--recompute-granularity full"; "serial": none). Losses agree within --tol
relative; each gradient and weight tensor within --tol of the largest of
the model. The fused plan must hold attention ops and the unfused none.

--dsl: the fused run trains the model with its attention core written as
one attention() call (the chain of the model's .tg replaced, text for text)
instead of the pass's rewrite, so attention() goes through the tp, sp and
pp passes itself; give --set attn_pdrop=0 (the call's mask is keyed by its
own name, not the chain's dropout's).

--against copy: the reference is the fused run with --no-attention-inplace
(q, k and v permuted to [b, n, s, d] and the output permuted back, as
written) instead of the unfused chain; the in-place run (docs/attention.md,
"Layouts") must then have every attention op in a layout other than
[b, n, s, d] (`layout=` or `out=` in its IR), no permute left reading a
value an attention op reads or writes, and the reference none of that.
The kernels sum in the same order either way: give --tol 0 (bit for bit).
"""
import argparse, json, os, re, shlex, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fused_vs_unfused import make_inputs, st_read, st_write  # noqa: E402

CHAIN = re.compile(r"(?P<i>[ \t]*)scores = bmm\(q, k, transpose_b=true\)[^\n]*\n"
                   r"[ \t]*probs = softmax\(scores, (?P<args>[^\n]*)\)[^\n]*\n"
                   r"(?:[ \t]*probs = dropout\(probs, p=(?P<p>[a-z_0-9.]+)\)[^\n]*\n)?"
                   r"[ \t]*ctx = bmm\(probs, v\)[^\n]*\n")


def dsl_variant(model, tmp):
    """The model with its attention chain as one attention() call."""
    text = open(model).read()

    def call(m):
        args = re.sub(r"^mask, ", "mask=mask, ", m.group("args"))
        drop = ", dropout=%s" % m.group("p") if m.group("p") else ""
        return "%sctx = attention(q, k, v, %s%s)\n" % (m.group("i"), args, drop)

    out, n = CHAIN.subn(call, text)
    if n != 1:
        sys.exit("%s: expected one attention chain (bmm, softmax, dropout, bmm) to rewrite, found %d" % (model, n))
    path = os.path.join(tmp, "dsl_" + os.path.basename(model))
    open(path, "w").write(out)
    return path


def run(tgc, model, sets, extra, steps, batches, tmp, tag, run_args):
    log = os.path.join(tmp, tag + ".jsonl")
    grads, weights = os.path.join(tmp, tag + ".grads.safetensors"), os.path.join(tmp, tag + ".w.safetensors")
    subprocess.check_call([tgc, "run", model] + sets + extra + run_args + [
        "--inputs", batches, "--train-iters", str(steps), "--quiet", "--log", log, "--export-grads", grads,
        "--export", weights])
    return [json.loads(l)["loss"] for l in open(log)], st_read(grads), st_read(weights)


def rel_diff(a, b):
    scale = max(max(abs(x) for x in v) for v in b.values())
    return max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in b) / scale


NODE = re.compile(r"^%(\S+) = (\w+)\(([^)]*)\)(.*)$", re.M)


def layout_problems(inplace_ir, copy_ir, nattn):
    """What is wrong with the in-place IR against the copying one, or None."""
    nodes = {m.group(1): (m.group(2), m.group(3), m.group(4)) for m in NODE.finditer(inplace_ir)}
    attn = [n for n, (op, _, _) in nodes.items() if op in ("attention", "attention_back")]  # clones too
    nback = sum(nodes[n][0] == "attention_back" for n in attn)
    if nattn == 0 or nback != nattn:
        return "%d attention ops, %d attention_back" % (nattn, nback)
    for n in attn:
        op, srcs, attrs = nodes[n]
        if not re.search(r"\b(layout|out)=(sbnd|packed)\b", attrs):
            return "%s %s keeps the [b, n, s, d] layout: %s" % (op, n, attrs.strip())
        for s in re.findall(r"%(\S+?)(?:,|$)", srcs):
            if nodes.get(s, ("",))[0] == "permute":
                return "%s %s still reads permute %s" % (op, n, s)
    readers = [m for m in NODE.finditer(inplace_ir) if m.group(2) == "permute"
               and nodes.get(m.group(3).strip().lstrip("%"), ("",))[0] in ("attention", "attention_back", "result")]
    if readers:
        return "permute %s still copies an attention result" % readers[0].group(1)
    if re.search(r"\b(layout|out)=(sbnd|packed)\b", copy_ir):
        return "--no-attention-inplace still folds a layout"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("model")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--run-args", default="")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--dsl", action="store_true")
    ap.add_argument("--against", choices=["unfused", "copy"], default="unfused")
    args = ap.parse_args()
    sets = sum([["--set", s] for s in args.set], [])
    run_args = shlex.split(args.run_args)
    graph = json.loads(subprocess.check_output([args.tgc, "dump-ir", args.model, "--after", "lower",
                                                "--format", "json"] + sets))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        batches = os.path.join(tmp, "batches.safetensors")
        st_write(batches, make_inputs(graph, args.steps))
        fused_model = dsl_variant(args.model, tmp) if args.dsl else args.model
        print("%-56s %5s %11s %11s %11s" % ("configuration", "attn", "loss diff", "grad diff", "weight diff"))
        for i, config in enumerate(args.config or ["serial"]):
            extra = [] if config == "serial" else shlex.split(config)
            unf = ["--attention-backend", "unfused"] if args.against == "unfused" else ["--no-attention-inplace"]
            fused_ir = subprocess.check_output([args.tgc, "dump-ir", fused_model, "--after", "fuse"] + sets + extra
                                               ).decode()
            plain_ir = subprocess.check_output([args.tgc, "dump-ir", args.model, "--after", "fuse"] + sets + extra +
                                               unf).decode()
            nattn = len(re.findall(r"^%(?!\S*\.recompute )\S+ = attention\(", fused_ir, re.M))  # clones aside
            if args.against == "copy":
                bad = layout_problems(fused_ir, plain_ir, nattn)
                if bad:
                    print("%s %s: %s" % (args.model, config, bad))
                    ok = False
                    continue
            elif nattn == 0 or fused_ir.count("= attention_back(") != nattn or "= attention" in plain_ir:
                print("%s %s: %d attention ops fused, or the unfused plan has some" % (args.model, config, nattn))
                ok = False
                continue
            ref = run(args.tgc, args.model, sets, extra + unf, args.steps, batches, tmp, "unfused%d" % i, run_args)
            got = run(args.tgc, fused_model, sets, extra, args.steps, batches, tmp, "fused%d" % i, run_args)
            dl = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(ref[0], got[0]))
            same_names = sorted(ref[1]) == sorted(got[1]) and sorted(ref[2]) == sorted(got[2])
            dg = rel_diff(got[1], ref[1]) if same_names else float("inf")
            dw = rel_diff(got[2], ref[2]) if same_names else float("inf")
            good = len(got[0]) == args.steps == len(ref[0]) and dl <= args.tol and dg <= args.tol and dw <= args.tol
            ok &= good
            name = (os.path.basename(fused_model) + " " + " ".join(extra)).strip()
            print("%-56s %5d %11.2e %11.2e %11.2e%s" % (name, nattn, dl, dg, dw, "" if good else "  FAIL"))
    what = "fused attention vs unfused" if args.against == "unfused" else "attention in place vs its layout copies"
    print(what + ":", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
