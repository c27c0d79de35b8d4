#!/usr/bin/env python3
"""Fused against unfused (docs/fusion.md): tgc trains the same model from the
same seed on the same batches, dropout on, once with --no-fuse and once with
every fusion, and the losses of every step and the gradients of the last
step (--export-grads) must agree.

usage: fused_vs_unfused.py TGC MODEL [--set k=v ...] [--config "ARGS"] ...
       [--run-args "ARGS"] [--fuse LIST] [--identical] [--steps N] [--tol T]

Each --config (default: serial) is a string of extra options of the passes,
e.g. "--tp 2 --sequence-parallel" ("serial": none); --run-args go to every `tgc run` (e.g.
the learning rate). Losses agree within --tol relative; each
gradient tensor within --tol of the largest gradient of the model (a tensor
whose exact gradient is 0 holds float noise of that size in any run); with
--identical they must be bit-identical. --fuse LIST chooses the fusions of
the fused run (default: all). The fused plan must really hold fused ops or
kernels, and the unfused none.
Prints, per configuration, the differences and whether the runs were
bit-identical. Needs only python3 (safetensors are read and written here).
"""
import argparse, json, os, shlex, struct, subprocess, sys, tempfile

FMT = {"F32": "f", "F64": "d", "I32": "i", "I64": "q", "U8": "B"}
SIZE = {"F32": 4, "F64": 8, "I32": 4, "I64": 8, "U8": 1}
ST_DTYPE = {"f32": "F32", "f64": "F64", "i32": "I32", "i64": "I64", "u8": "U8"}


def st_write(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dtype, shape, values = tensors[name]
        raw = struct.pack("<%d%s" % (len(values), FMT[dtype]), *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    out = {}
    for name, info in json.loads(data[8:8 + n]).items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[8 + n + a:8 + n + b]
        out[name] = struct.unpack("<%d%s" % (len(raw) // SIZE[info["dtype"]], FMT[info["dtype"]]), raw)
    return out


def make_inputs(graph, steps):
    """Deterministic batches from a small LCG: token ids below the vocabulary
    of the embedding (or loss) that reads them, some ignored labels, and a
    padding mask whose last positions are masked."""
    state = [12345]

    def rnd():
        state[0] = (state[0] * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return state[0] >> 33

    nodes = graph["nodes"]
    vocab = {}
    for n in nodes:
        if n["op"] == "embedding":
            vocab[nodes[n["operands"][0]]["name"]] = nodes[n["operands"][1]]["shape"][0]
        if n["op"] == "cross_entropy":
            vocab[nodes[n["operands"][1]]["name"]] = nodes[n["operands"][0]]["shape"][-1]
    out = {}
    for n in nodes:
        if n["op"] != "input":
            continue
        count = steps
        for d in n["shape"]:
            count *= d
        dt = ST_DTYPE[n["dtype"]]
        if dt == "U8":
            last = n["shape"][-1]
            vals = [0 if i % last >= last - 3 else 1 for i in range(count)]
        elif dt in ("F32", "F64"):
            vals = [(rnd() % 20001) / 10000.0 - 1.0 for _ in range(count)]
        else:
            v = vocab.get(n["name"], 16)
            vals = [rnd() % v for _ in range(count)]
            if n["name"] == "labels":
                vals = [-100 if rnd() % 10 < 2 else x for x in vals]
        out[n["name"]] = (dt, [steps] + n["shape"], vals)
    return out


def dump(tgc, model, sets, extra, fuse):
    return subprocess.check_output([tgc, "dump-ir", model, "--after", "fuse"] + sets + extra + fuse).decode()


def run(tgc, model, sets, extra, fuse, steps, batches, tmp, tag):
    log, grads = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".safetensors")
    subprocess.check_call([tgc, "run", model] + sets + extra + RUN_ARGS + fuse + [
        "--inputs", batches, "--train-iters", str(steps), "--quiet", "--log", log, "--export-grads", grads])
    return [json.loads(l)["loss"] for l in open(log)], st_read(grads)


RUN_ARGS = []


def fusion_ops(ir):
    ops = ("= bias_gelu(", "= bias_dropout_add(", "# fused kernel")
    return sum(ir.count(o) for o in ops)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("model")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--run-args", default="")
    ap.add_argument("--fuse", default=None)
    ap.add_argument("--identical", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tol", type=float, default=1e-6)
    args = ap.parse_args()
    sets = sum([["--set", s] for s in args.set], [])
    RUN_ARGS.extend(shlex.split(args.run_args))
    graph = json.loads(subprocess.check_output([args.tgc, "dump-ir", args.model, "--after", "lower",
                                                "--format", "json"] + sets))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        batches = os.path.join(tmp, "batches.safetensors")
        st_write(batches, make_inputs(graph, args.steps))
        print("%-40s %6s %12s %12s  %s" % ("configuration", "fused", "loss diff", "grad diff", "identical"))
        for i, config in enumerate(args.config or [""]):
            extra = [] if config == "serial" else shlex.split(config)
            fuse = ["--fuse", args.fuse] if args.fuse else []
            fused_ir = dump(args.tgc, args.model, sets, extra, fuse)
            plain_ir = dump(args.tgc, args.model, sets, extra, ["--no-fuse"])
            nfused = fusion_ops(fused_ir)
            if nfused == 0 or fusion_ops(plain_ir) != 0 or "fuse(" in plain_ir:
                print("%s %s: the fuse pass made %d fusions with fusion on and %d with --no-fuse"
                      % (os.path.basename(args.model), config, nfused, fusion_ops(plain_ir)))
                ok = False
                continue
            ref_loss, ref_g = run(args.tgc, args.model, sets, extra, ["--no-fuse"], args.steps, batches, tmp,
                                  "plain%d" % i)
            loss, g = run(args.tgc, args.model, sets, extra, fuse, args.steps, batches, tmp, "fused%d" % i)
            dl = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(ref_loss, loss))
            scale = max(max(abs(x) for x in v) for v in ref_g.values())
            dg = max(max(abs(x - y) for x, y in zip(g[k], ref_g[k])) for k in ref_g) / scale
            same = loss == ref_loss and all(g[k] == ref_g[k] for k in ref_g)
            good = (len(loss) == args.steps == len(ref_loss) and sorted(g) == sorted(ref_g) and dl <= args.tol
                    and dg <= args.tol and (same or not args.identical))
            ok &= good
            name = (os.path.basename(args.model) + " " + " ".join(extra)).strip()
            print("%-40s %6d %12.2e %12.2e  %s%s" % (name, nfused, dl, dg, "bit-identical" if same else "no",
                                                    "" if good else "  FAIL"))
    print("fused vs unfused:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
