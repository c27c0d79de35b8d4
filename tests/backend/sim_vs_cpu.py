#!/usr/bin/env python3
"""The device simulator against the CPU (docs/testing.md, "The device
simulator"): `tgc run --backend sim` runs cpu's kernels on memory that only
the backend's operations may touch, so any host code that reaches a device
buffer without the backend interface faults there. Whatever passes on sim
must compute exactly what cpu computes: for each configuration of the
table below, the same run on both backends must write

  * the same JSON log, byte for byte in every field of every step but the
    timings (tokens_per_s, step_ms, tflops, mfu), with the same fields in
    the same order, and
  * byte-identical --export safetensors (and, where the case saves, the
    same checkpoint files).

The checkpoint cases save on one backend and resume on the other, under the
same partition (the resumed steps' log fields equal the uninterrupted run's,
byte for byte) and under another one (resharding: each resumed step's loss
within 1e-6, relative, of the uninterrupted run in the saving partition).

A run that dies is reported with its backend and the signal (SIGSEGV: host
code touched simulated device memory) or the exit status and the last
lines of its stderr. Any python3 (json and struct only).

usage: sim_vs_cpu.py TGC MODEL [--group G ...] [--only NAME ...] [--list]
                     [--steps N] [--timeout S] [--keep DIR]
  --group   run the cases of these groups (equivalence, recompute,
            precision, eval, checkpoint, pipeline, data; default all)
  --only    run the cases of these names (exact; repeatable)
Prints the table (configuration, cpu == sim) and exits 1 on any mismatch or
failed run, 2 on a usage error.
"""
import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

# The small model: 2 layers of hidden 64, 32 positions, 4 sequences.
TINY = ["--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "seq=32", "--set", "batch=4"]
TIMING = {"tokens_per_s", "step_ms", "tflops", "mfu"}
MB = ["--micro-batch-size", "2", "--global-batch-size", "8"]  # 4 micro-batches of 2 (2 per replica with d = 2)
RESHARD_TOL = 1e-6

# (group, name, run arguments, what the case does). "equal": one run per
# backend. ("ckpt", save backend, load backend, saving partition, loading
# partition): see ckpt_case. ("require", f): also f(log rows) must hold
# (the case exercises what it is for).
EQ = ("equal",)


def fp16_skips_and_grows(rows):
    """The case's steps skip, halve the scale, then run clean and double it."""
    skipped = [r.get("skipped") == "1.0" for r in rows]
    scales = [float(r["loss_scale"]) for r in rows]
    halved = any(skipped[i - 1] and scales[i] == scales[i - 1] / 2 for i in range(1, len(rows)))
    grew = any(not skipped[i - 1] and scales[i] == scales[i - 1] * 2 for i in range(1, len(rows)))
    if not (halved and grew):
        return "expected skipped steps halving the loss scale and clean ones doubling it, got skipped %s, " \
               "scales %s" % (skipped, scales)
    return None


def has_val_loss(rows):
    n = sum(1 for r in rows if "val_loss" in r)
    return None if n >= 2 else "expected validation losses at steps 2 and 4, %d log lines have val_loss" % n


CASES = [
    ("equivalence", "serial", [], EQ),
    ("equivalence", "tp2", ["--tp", "2"], EQ),
    ("equivalence", "tp2+sp", ["--tp", "2", "--sequence-parallel"], EQ),
    ("equivalence", "micro-batches b2 B8", MB, EQ),
    ("equivalence", "check-numerics tp2", ["--check-numerics", "--tp", "2"], EQ),
    ("recompute", "recompute full", ["--recompute-granularity", "full"], EQ),
    ("recompute", "recompute selective tp2+sp",
     ["--recompute-granularity", "selective", "--tp", "2", "--sequence-parallel"], EQ),
    ("recompute", "recompute full block", ["--recompute-granularity", "full", "--recompute-method", "block",
                                             "--recompute-num-layers", "1"], EQ),
    ("pipeline", "pp2 1f1b", ["--pp", "2"] + MB, EQ),
    ("pipeline", "pp2 gpipe", ["--pp", "2", "--pipeline-schedule", "gpipe"] + MB, EQ),
    ("pipeline", "pp2 interleaved v2", ["--set", "layers=4", "--pp", "2", "--vp", "2",
                                        "--pipeline-schedule", "interleaved"] + MB, EQ),
    ("pipeline", "tp2 pp2 dp2", ["--tp", "2", "--pp", "2", "--dp", "2"] + MB, EQ),
    ("data", "dp2", ["--dp", "2"] + MB, EQ),
    ("data", "dp2 distributed optimizer", ["--dp", "2", "--use-distributed-optimizer"] + MB, EQ),
    ("precision", "bf16", ["--bf16"], EQ),
    ("precision", "bf16 tp2", ["--bf16", "--tp", "2"], EQ),
    # 16-bit gradients summed over micro-batches, scaled by 1/M and
    # all-reduced in bf16 over d; 16-bit activations sent between stages.
    ("precision", "bf16 dp2 pp2 micro-batches", ["--bf16", "--dp", "2", "--pp", "2"] + MB, EQ),
    # From 2^18 the first two steps overflow and are skipped (hysteresis 1:
    # the scale halves at each), the third is clean and (window 1) the
    # scale doubles after it.
    ("precision", "fp16 dynamic loss scale",
     ["--fp16", "--initial-loss-scale", str(2 ** 18), "--hysteresis", "1", "--loss-scale-window", "1"],
     ("require", fp16_skips_and_grows)),
    ("precision", "fp16 dynamic loss scale tp2",
     ["--fp16", "--initial-loss-scale", str(2 ** 18), "--hysteresis", "1", "--loss-scale-window", "1", "--tp", "2"],
     ("require", fp16_skips_and_grows)),
    ("precision", "fp16 static scale check-numerics", ["--fp16", "--loss-scale", "1024", "--check-numerics"], EQ),
    ("eval", "eval serial", ["--split", "98,2", "--eval-interval", "2", "--eval-iters", "2"],
     ("require", has_val_loss)),
    ("eval", "eval tp2", ["--tp", "2", "--split", "98,2", "--eval-interval", "2", "--eval-iters", "2"],
     ("require", has_val_loss)),
    ("checkpoint", "save sim t1 -> load cpu t1", [], ("ckpt", "sim", "cpu", [], [])),
    ("checkpoint", "bf16 save sim t2 -> load cpu t2", [], ("ckpt", "sim", "cpu", ["--bf16", "--tp", "2"], ["--bf16", "--tp", "2"])),
    ("checkpoint", "save cpu t2 -> load sim t2", [], ("ckpt", "cpu", "sim", ["--tp", "2"], ["--tp", "2"])),
    ("checkpoint", "save sim t1 -> load cpu t2", [], ("ckpt", "sim", "cpu", [], ["--tp", "2"])),
    ("checkpoint", "save cpu t2+sp -> load sim t1", [], ("ckpt", "cpu", "sim", ["--tp", "2", "--sequence-parallel"],
                                                         [])),
    ("pipeline", "save sim t2p2 -> load cpu t1", [], ("ckpt", "sim", "cpu", ["--tp", "2", "--pp", "2"] + MB, MB)),
    ("pipeline", "save cpu t1 -> load sim t2p2", [], ("ckpt", "cpu", "sim", MB, ["--tp", "2", "--pp", "2"] + MB)),
]
GROUPS = sorted({c[0] for c in CASES})


class RunFailed(Exception):
    pass


def make_text(path):
    """A deterministic text of about 48 KB (byte tokens)."""
    words = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have "
             "an they you were her she there one all we their has been would when so if more no what out up into "
             "time some could them other than then now only its also two first new may any these").split()
    x, out, n = 12345, [], 0
    while n < 48000:
        x = (1103515245 * x + 12345) % 2 ** 31
        out.append(words[x % len(words)])
        n += len(out[-1]) + 1
    with open(path, "w") as f:
        f.write(" ".join(out) + "\n")


def model_args(args):
    # --micro-batch-size is the model's batch: TINY's batch=4 would contradict it.
    return TINY[:-2] if "--micro-batch-size" in args else TINY


def describe_exit(rc):
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = "signal %d" % -rc
        return "killed by %s" % name + (" (host code touched simulated device memory?)" if -rc in (
            signal.SIGSEGV, signal.SIGBUS) else "")
    if rc > 128 and rc - 128 < 65:
        try:
            return "exit %d (%s)" % (rc, signal.Signals(rc - 128).name)
        except ValueError:
            pass
    return "exit %d" % rc


def tgc_run(ctx, backend, args, tag):
    cmd = [ctx.tgc, "run", ctx.model, "--data", ctx.text, "--quiet", "--backend", backend] + model_args(args) + args
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=ctx.timeout)
    except subprocess.TimeoutExpired:
        raise RunFailed("%s: timed out after %.0f s (%s)" % (backend, ctx.timeout, tag))
    ctx.seconds += time.time() - t0
    if p.returncode != 0:
        tail = " | ".join(p.stderr.strip().splitlines()[-3:])
        ctx.failures.append("%s [%s]\n  %s\n  %s" % (tag, backend, " ".join(cmd),
                                                     p.stderr.strip()[-2000:] or "(nothing on stderr)"))
        raise RunFailed("%s %s%s" % (backend, describe_exit(p.returncode), ": " + tail if tail else ""))
    return p


def log_rows(path):
    """Per line, {field: the value's JSON text}, in the line's order (the
    values are numbers: the text between the commas is theirs)."""
    rows = []
    for line in open(path):
        keys = [k for k, _ in json.loads(line, object_pairs_hook=lambda kv: kv)]
        fields = dict(seg.split(":", 1) for seg in line.strip()[1:-1].split(","))
        fields = {json.loads(k): v for k, v in fields.items()}
        if list(fields) != keys:
            raise RunFailed("cannot split the log line %r of %s into fields" % (line, path))
        rows.append(fields)
    return rows


def compare_logs(a, b, what="cpu", other="sim"):
    """None when every non-timing field of every step is the same text."""
    if len(a) != len(b):
        return "%s logged %d steps, %s %d" % (what, len(a), other, len(b))
    for ra, rb in zip(a, b):
        ka = [k for k in ra if k not in TIMING]
        kb = [k for k in rb if k not in TIMING]
        if ka != kb:
            return "step %s: fields %s (%s) against %s (%s)" % (ra.get("step"), ka, what, kb, other)
        for k in ka:
            if ra[k] != rb[k]:
                return "step %s: %s %s (%s) != %s (%s)" % (ra.get("step"), k, ra[k], what, rb[k], other)
    return None


def read_st(path):
    """The tensors of a safetensors file: {name: (dtype, shape, bytes)}, and its metadata."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    return meta, {k: (v["dtype"], v["shape"], raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
                  for k, v in header.items()}


def compare_files(a, b):
    """None when the two files are byte-identical; else which tensors differ."""
    ra, rb = open(a, "rb").read(), open(b, "rb").read()
    if ra == rb:
        return None
    try:
        (ma, ta), (mb, tb) = read_st(a), read_st(b)
    except (ValueError, struct.error, KeyError) as e:
        return "%s and %s differ (%s)" % (os.path.basename(a), os.path.basename(b), e)
    diff = sorted(k for k in set(ta) | set(tb) if ta.get(k) != tb.get(k))
    if diff:
        return "%s: %d tensors differ, e.g. %s" % (os.path.basename(a), len(diff), ", ".join(diff[:3]))
    if ma != mb:
        return "%s: the metadata differs: %s against %s" % (os.path.basename(a), ma, mb)
    return "%s: the files differ in their layout (%d and %d bytes)" % (os.path.basename(a), len(ra), len(rb))


def tree(path):
    out = []
    for root, _, files in os.walk(path):
        for f in files:
            if f != "tgc.lock":  # names its holder's pid
                out.append(os.path.relpath(os.path.join(root, f), path))
    return sorted(out)


def compare_trees(a, b):
    ta, tb = tree(a), tree(b)
    if ta != tb:
        return "the checkpoint directories hold %s (cpu) and %s (sim)" % (ta, tb)
    for f in ta:
        why = compare_files(os.path.join(a, f), os.path.join(b, f))
        if why:
            return "checkpoint file %s: %s" % (f, why)
    return None


def equal_case(ctx, name, args, require):
    d = ctx.case_dir(name)
    out = {}
    for be in ("cpu", "sim"):
        log, st = os.path.join(d, be + ".jsonl"), os.path.join(d, be + ".safetensors")
        tgc_run(ctx, be, args + ["--train-iters", str(ctx.steps), "--log", log, "--export", st], name)
        out[be] = (log_rows(log), st)
    if len(out["cpu"][0]) != ctx.steps:
        return "cpu logged %d steps of %d" % (len(out["cpu"][0]), ctx.steps)
    why = compare_logs(out["cpu"][0], out["sim"][0]) or compare_files(out["cpu"][1], out["sim"][1])
    if not why and require:
        why = require(out["cpu"][0])
    return why


def ckpt_case(ctx, name, save_be, load_be, save_args, load_args):
    """Both backends train N steps in the saving partition with a
    checkpoint at k (the uninterrupted runs: their logs and checkpoints
    must be equal); then load_be resumes from save_be's checkpoint at k in
    the loading partition for the steps k+1..N."""
    d = ctx.case_dir(name)
    n, k = ctx.steps, ctx.steps // 2
    full = {}
    for be in ("cpu", "sim"):
        tgc_run(ctx, be, save_args + ["--train-iters", str(n), "--save", os.path.join(d, "ck-" + be),
                                      "--save-interval", str(k), "--log", os.path.join(d, "full-" + be + ".jsonl")],
                name + " (uninterrupted)")
        full[be] = log_rows(os.path.join(d, "full-" + be + ".jsonl"))
    why = compare_logs(full["cpu"], full["sim"]) or compare_trees(os.path.join(d, "ck-cpu"), os.path.join(d, "ck-sim"))
    if why:
        return "uninterrupted, saving partition: " + why
    ck = os.path.join(d, "ck-" + save_be, "iter_%07d" % k)
    if not os.path.isdir(ck):
        return "%s saved no %s" % (save_be, os.path.basename(ck))
    log = os.path.join(d, "resumed.jsonl")
    tgc_run(ctx, load_be, load_args + ["--train-iters", str(n), "--load", ck, "--log", log], name + " (resumed)")
    got, want = log_rows(log), full[save_be][k:]
    if [r["step"] for r in got] != [r["step"] for r in want]:
        return "the resumed run logged steps %s, expected %s" % ([r["step"] for r in got], [r["step"] for r in want])
    if save_args == load_args:
        why = compare_logs(want, got, "uninterrupted", "resumed on " + load_be)
        return "same partition: " + why if why else None
    worst = 0.0
    for a, b in zip(want, got):
        la, lb = float(a["loss"]), float(b["loss"])
        rel = abs(la - lb) / abs(la)
        worst = max(worst, rel)
        if not rel <= RESHARD_TOL:
            return "resharded: step %s loss %s resumed against %s uninterrupted (relative %.3g > %g)" % (
                a["step"], b["loss"], a["loss"], rel, RESHARD_TOL)
    ctx.notes[name] = "resharded losses within %.2g relative" % worst
    return None


class Ctx:
    def __init__(self, a, tmp):
        self.tgc, self.model, self.steps, self.timeout = a.tgc, a.model, a.steps, a.timeout
        self.tmp, self.text = tmp, os.path.join(tmp, "text.txt")
        self.failures, self.notes, self.seconds = [], {}, 0.0
        make_text(self.text)

    def case_dir(self, name):
        d = os.path.join(self.tmp, "".join(c if c.isalnum() else "_" for c in name))
        os.makedirs(d)
        return d


def main():
    ap = argparse.ArgumentParser(description="tgc run --backend sim against --backend cpu, bit for bit")
    ap.add_argument("tgc")
    ap.add_argument("model")
    ap.add_argument("--group", action="append", default=[], choices=GROUPS)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--steps", type=int, default=4, help="training steps per run (4; checkpoints at half)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one tgc run may take (120)")
    ap.add_argument("--keep", help="work in this directory and keep it (default: a temporary one)")
    a = ap.parse_args()
    if a.steps < 2:
        ap.error("--steps must be at least 2")
    names = {c[1] for c in CASES}
    for o in a.only:
        if o not in names:
            ap.error("--only %r: no such case (--list prints them)" % o)
    cases = [c for c in CASES if (not a.group or c[0] in a.group) and (not a.only or c[1] in a.only)]
    if a.list:
        for g, name, args, kind in cases:
            print("%-12s %-36s %s" % (g, name, " ".join(args) if kind[0] != "ckpt" else
                                      "save on %s [%s], load on %s [%s]" % (kind[1], " ".join(kind[3]), kind[2],
                                                                           " ".join(kind[4]))))
        return 0
    if not cases:
        ap.error("no case selected")
    tmp = a.keep or tempfile.mkdtemp(prefix="tgc-sim-")
    if a.keep:
        os.makedirs(tmp, exist_ok=True)
    ctx = Ctx(a, tmp)
    bad = 0
    print("%-12s %-36s %s" % ("group", "configuration", "cpu == sim"))
    try:
        for g, name, args, kind in cases:
            t0 = time.time()
            try:
                if kind[0] == "ckpt":
                    why = ckpt_case(ctx, name, *kind[1:])
                else:
                    why = equal_case(ctx, name, args, kind[1] if kind[0] == "require" else None)
            except RunFailed as e:
                why = "CRASH: %s" % e if "killed by" in str(e) else "FAILED: %s" % e
            else:
                why = "MISMATCH: " + why if why else None
            bad += why is not None
            verdict = why or "yes" + (" (%s)" % ctx.notes[name] if name in ctx.notes else "")
            print("%-12s %-36s %s  [%.1f s]" % (g, name, verdict, time.time() - t0), flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    for f in ctx.failures:
        print("\n--- failed run: " + f)
    print("\nsim vs cpu: %d of %d configurations %s" % (len(cases) - bad, len(cases), "equal: PASS" if not bad else
                                                        "equal: FAIL"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
