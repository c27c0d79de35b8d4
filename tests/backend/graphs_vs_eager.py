#!/usr/bin/env python3
"""Captured and replayed steps against uncaptured ones (docs/cuda.md, "CUDA
graphs"), on the device simulator: `tgc run --backend sim --cuda-graphs on`
records each distinct run of a step on its second call and replays the
recording after that (the same instructions in the same order on the
pointers they had at capture, the kernels reading the run-time scalars from
their device copy), which is what the cuda backend does with
cudaStreamBeginCapture / cudaGraphLaunch. Every per-step value (the
learning rate of a warm-up and cosine schedule, the step and dropout's
seed, Adam's step, fp16's loss scale, the evaluation flag, the inputs in
their fixed buffers) must reach the replayed kernels, so for each
configuration below the run with graphs must write

  * the same JSON log as the run without, byte for byte in every field of
    every step but the timings, and
  * byte-identical --export safetensors,

and it must really have replayed: TGC_DEBUG=1's line per rank ("tgc: sim
graphs: R runs captured, C captures, P replays") must show, on every rank,
at least one capture and a replay per run and step after the first two
(a run is warmed up once, then captured). --check-numerics reads every
instruction's output on the host: there the count must be 0 replays.

usage: graphs_vs_eager.py TGC MODEL [--only NAME ...] [--steps N]
Exits 1 on any mismatch or failed run. Uses tests/backend/sim_vs_cpu.py's
log and safetensors comparisons.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sim_vs_cpu as sv  # noqa: E402

# A learning rate that changes at every step: 2 warm-up steps, then cosine to min-lr.
LR = ["--lr", "1e-3", "--min-lr", "1e-4", "--lr-warmup-iters", "2", "--lr-decay-style", "cosine"]
FP16 = ["--fp16", "--initial-loss-scale", str(2 ** 18), "--hysteresis", "1", "--loss-scale-window", "1"]
EVAL = ["--split", "98,2", "--eval-interval", "2", "--eval-iters", "2"]

def fp16_skips(rows):
    """Some steps overflow and are skipped, a later one is clean."""
    skipped = [r.get("skipped") == "1.0" for r in rows]
    if not (any(skipped) and not skipped[-1]):
        return "expected overflowing steps skipped, then a clean one: skipped %s" % skipped
    return None


# (name, arguments, ranks, check of the log rows or None, replays expected)
CASES = [
    ("serial", LR, 1, None, True),
    ("tp2", LR + ["--tp", "2"], 2, None, True),
    ("micro-batches b2 B8", LR + sv.MB, 1, None, True),
    ("pp2 1f1b", LR + ["--pp", "2"] + sv.MB, 2, None, True),
    ("dp2 distributed optimizer", LR + ["--dp", "2", "--use-distributed-optimizer"] + sv.MB, 2, None, True),
    ("bf16 tp2", LR + ["--bf16", "--tp", "2"], 2, None, True),
    ("fp16 dynamic loss scale", LR + FP16, 1, sv.fp16_skips_and_grows, True),
    ("fp16 dynamic loss scale pp2", LR + FP16 + ["--pp", "2"] + sv.MB, 2, fp16_skips, True),
    ("eval serial", LR + EVAL, 1, sv.has_val_loss, True),
    ("check-numerics (uncaptured)", LR + ["--check-numerics"], 1, None, False),
]

COUNTS = re.compile(r"^tgc: sim graphs: (\d+) runs captured, (\d+) captures, (\d+) replays$", re.M)


def run(ctx, args, graphs, log, st):
    cmd = [ctx.tgc, "run", ctx.model, "--data", ctx.text, "--quiet", "--backend", "sim", "--cuda-graphs", graphs,
           "--train-iters", str(ctx.steps), "--log", log, "--export", st] + sv.model_args(args) + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=ctx.timeout, env=dict(os.environ, TGC_DEBUG="1"))
    if p.returncode != 0:
        raise sv.RunFailed("--cuda-graphs %s %s: %s\n  %s" % (graphs, sv.describe_exit(p.returncode), " ".join(cmd),
                                                            p.stderr.strip()[-1500:]))
    return [tuple(int(x) for x in m) for m in COUNTS.findall(p.stderr)]


def case(ctx, name, args, ranks, require, replays):
    d = ctx.case_dir(name)
    out = {}
    for g in ("off", "on"):
        log, st = os.path.join(d, g + ".jsonl"), os.path.join(d, g + ".safetensors")
        out[g] = (run(ctx, args, g, log, st), sv.log_rows(log), st)
    if out["off"][0]:
        return "--cuda-graphs off printed graph counts %s" % out["off"][0]
    rows = out["off"][1]
    if len(rows) != ctx.steps:
        return "logged %d steps of %d" % (len(rows), ctx.steps)
    why = sv.compare_logs(rows, out["on"][1], "uncaptured", "replayed") or sv.compare_files(out["off"][2], out["on"][2])
    if why:
        return why
    counts = out["on"][0]
    if len(counts) != ranks:
        return "expected a graph count line from each of %d ranks, got %d" % (ranks, len(counts))
    for r, (ready, captures, replayed) in enumerate(counts):
        if replays and not (ready >= 1 and captures >= ready and replayed >= ready * (ctx.steps - 2)):
            return "rank %d: %d runs captured, %d captures, %d replays: expected at least one run replayed at " \
                   "each of the %d steps after the first two" % (r, ready, captures, replayed, ctx.steps - 2)
        if not replays and (ready or replayed):
            return "rank %d: %d runs captured and %d replays under --check-numerics (expected none)" % (
                r, ready, replayed)
    ctx.notes[name] = "; ".join("%d runs, %d replays" % (c[0], c[2]) for c in counts)
    return require(rows) if require else None


def main():
    ap = argparse.ArgumentParser(description="tgc run --cuda-graphs on against off on the device simulator")
    ap.add_argument("tgc")
    ap.add_argument("model")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--steps", type=int, default=5, help="training steps per run (5)")
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args()
    if a.steps < 4:
        ap.error("--steps must be at least 4 (two warm-up steps, then replays)")
    cases = [c for c in CASES if not a.only or c[0] in a.only]
    if not cases:
        ap.error("no case selected")
    tmp = tempfile.mkdtemp(prefix="tgc-graphs-")
    ctx = sv.Ctx(argparse.Namespace(tgc=a.tgc, model=a.model, steps=a.steps, timeout=a.timeout), tmp)
    bad = 0
    print("%-32s %s" % ("configuration", "replayed == uncaptured"))
    try:
        for name, args, ranks, require, replays in cases:
            t0 = time.time()
            try:
                why = case(ctx, name, args, ranks, require, replays)
                why = "MISMATCH: " + why if why else None
            except (sv.RunFailed, subprocess.TimeoutExpired) as e:
                why = "FAILED: %s" % e
            bad += why is not None
            print("%-32s %s  [%.1f s]" % (name, why or "yes (%s)" % ctx.notes.get(name, ""), time.time() - t0),
                  flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\ngraphs vs eager: %d of %d configurations %s" % (len(cases) - bad, len(cases),
                                                           "equal: PASS" if not bad else "equal: FAIL"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
