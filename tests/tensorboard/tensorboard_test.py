#!/usr/bin/env python3
"""tgc run --tensorboard-dir read back by the tensorboard package.

    tensorboard_test.py TGC VENV MODEL DATA CASE

tgc writes its event files itself (runtime/io/tfevents.c, no TensorFlow);
here TensorBoard's own readers load them: EventFileLoader for every event
in order (the first is file_version brain.Event:2; every record's CRCs are
checked against tensorboard's masked_crc32c, and each Event's bytes equal
protobuf's serialisation of what LegacyEventFileLoader parsed), EventAccumulator for the
scalars by tag. CASE:

  fp32    a run with --log-timers-to-tensorboard,
          --log-validation-ppl-to-tensorboard, --log-memory-to-tensorboard,
          validation every 3 steps and --log-interval 2: exactly Megatron's
          tags (docs/runtime.md, "TensorBoard"), at the steps Megatron
          writes them, each value the float of what tgc's JSON log has for
          the step (and the loss what its progress line printed, to its 4
          decimals); iteration-time the mean step time since the last one,
          throughput the TFLOP/s per rank, the memory what tgc printed;
  fp16    loss-scale and its vs-samples twin equal to the log's, no
          grad-norm on a skipped step, --tensorboard-log-interval 2;
  tp2     --tp 2: one file (the reporting rank's), its losses the log's.

The driver runs under the virtual environment VENV (scripts/lib/hf_venv.sh,
the Hugging Face tests' venv, which holds the tensorboard package); without
it, it exits 77 (skip).
"""
import glob
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

if len(sys.argv) != 6:
    sys.exit(__doc__)
TGC, VENV, MODEL, DATA, CASE = sys.argv[1:6]
VPY = os.path.join(VENV, "bin", "python")
if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
    if not os.access(VPY, os.X_OK):
        print("SKIP: no transformers environment at %s (scripts/test.sh creates it: "
              "scripts/lib/hf_venv.sh)" % VENV)
        sys.exit(77)
    os.execv(VPY, [VPY] + sys.argv)

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: E402
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader  # noqa: E402
    from tensorboard.compat.proto import event_pb2  # noqa: E402
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c  # noqa: E402
except ImportError as e:
    print("SKIP: the environment at %s has no tensorboard package (%s); scripts/lib/hf_venv.sh installs it" %
          (VENV, e))
    sys.exit(77)

SETS = ["--set", "layers=1", "--set", "hidden=32", "--set", "heads=2", "--set", "seq=16", "--set", "batch=2"]
FAILED = []


def check(cond, what):
    print(("ok: " if cond else "FAILED: ") + what)
    if not cond:
        FAILED.append(what)


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def run(work, extra):
    """tgc run; its JSON log by step, its progress lines' losses by step, its stderr."""
    log = os.path.join(work, "log.jsonl")
    r = subprocess.run([TGC, "run", MODEL] + SETS + ["--data", DATA, "--log", log] + extra,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("tgc run failed (%d):\n%s" % (r.returncode, r.stderr))
    rows = {j["step"]: j for j in map(json.loads, open(log))}
    printed = {int(m.group(1)): float(m.group(2))
               for m in re.finditer(r"^step (\d+)/\d+ \| loss ([0-9.]+) \|", r.stderr, re.M)}
    return rows, printed, r.stderr


def records(path):
    """The raw Event bytes of every record, CRCs checked with tensorboard's masked_crc32c."""
    data, at, out = open(path, "rb").read(), 0, []
    while at < len(data):
        head = data[at:at + 8]
        n, = struct.unpack("<Q", head)
        crc_head, = struct.unpack("<I", data[at + 8:at + 12])
        rec = data[at + 12:at + 12 + n]
        crc_data, = struct.unpack("<I", data[at + 12 + n:at + 16 + n])
        if crc_head != masked_crc32c(head) or crc_data != masked_crc32c(rec):
            check(False, "record %d of %s: its CRCs are tensorboard's" % (len(out), path))
        out.append(rec)
        at += 16 + n
    check(at == len(data), "the file ends with a whole record")
    return out


def load(tbdir):
    """Checks the one event file's records; its scalars: {tag: [(step, value)]}."""
    files = glob.glob(os.path.join(tbdir, "events.out.tfevents.*"))
    check(len(files) == 1, "one event file in --tensorboard-dir (%s)" % [os.path.basename(f) for f in files])
    name = os.path.basename(files[0]).split(".")
    check(len(name) >= 7 and name[3].isdigit() and name[-2].isdigit() and name[-1] == "0", "the file's name is events.out.tfevents.SECONDS.HOST.PID.0: %s" % ".".join(name))
    raw = records(files[0])
    events = list(EventFileLoader(files[0]).Load())
    check(len(events) == len(raw) and len(raw) > 1, "EventFileLoader reads every record (%d)" % len(raw))
    check(events[0].file_version == "brain.Event:2", "the first event is file_version brain.Event:2")
    # The legacy loader gives the events as read (EventFileLoader migrates
    # simple_value to tensors, as TensorBoard's scalars plugin reads them).
    legacy = list(LegacyEventFileLoader(files[0]).Load())
    same = sum(e.SerializeToString() == r for e, r in zip(legacy, raw))
    check(same == len(raw), "every Event's bytes are protobuf's serialisation (%d of %d)" % (same, len(raw)))
    check(all(abs(e.wall_time - events[0].wall_time) < 600 and e.wall_time > 1.5e9 for e in events),
          "wall times are the run's")
    ea = EventAccumulator(tbdir, size_guidance={"scalars": 0})
    ea.Reload()
    return {t: [(s.step, s.value) for s in ea.Scalars(t)] for t in ea.Tags()["scalars"]}


def expect_series(sc, tag, want, rel=0.0):
    """sc[tag] is [(step, value)] of want, values the floats of want's (within rel)."""
    got = sc.get(tag, [])
    steps_ok = [s for s, _ in got] == [s for s, _ in want]
    vals_ok = steps_ok and all(g == f32(w) if rel == 0 else abs(g - w) <= rel * abs(w)
                               for (_, g), (_, w) in zip(got, want))
    check(steps_ok and vals_ok, "%r: %s%s" % (tag, [s for s, _ in got],
                                            "" if vals_ok else " got %s, want %s" % (got, want)))


def case_fp32(work):
    tb = os.path.join(work, "tb", "run")
    rows, printed, err = run(work, ["--train-iters", "6", "--log-interval", "2", "--split", "90,10",
                                    "--eval-interval", "3", "--eval-iters", "1", "--tensorboard-dir", tb,
                                    "--log-timers-to-tensorboard", "--log-validation-ppl-to-tensorboard",
                                    "--log-memory-to-tensorboard"])
    sc = load(tb)
    B, steps = 2, sorted(rows)
    want_tags = {"learning-rate", "batch-size", "lm loss", "grad-norm", "iteration-time", "throughput",
                 "mem-allocated-bytes", "mem-max-allocated-bytes", "lm loss validation", "lm loss validation ppl"}
    want_tags |= {t + " vs samples" for t in ("learning-rate", "batch-size", "lm loss", "grad-norm",
                                              "lm loss validation", "lm loss validation ppl")}
    check(set(sc) == want_tags, "the tags are Megatron's: extra %s, missing %s" %
          (sorted(set(sc) - want_tags), sorted(want_tags - set(sc))))
    for tag, key in (("learning-rate", "lr"), ("lm loss", "loss"), ("grad-norm", "grad_norm")):
        expect_series(sc, tag, [(s, rows[s][key]) for s in steps])
        expect_series(sc, tag + " vs samples", [(s * B, rows[s][key]) for s in steps])
    expect_series(sc, "batch-size", [(s, B) for s in steps])
    expect_series(sc, "batch-size vs samples", [(s * B, B) for s in steps])
    # The loss the progress line printed (steps 1, 2, 4, 6), to its 4 decimals.
    tbloss = dict(sc["lm loss"])
    check(sorted(printed) == [1, 2, 4, 6] and all(abs(tbloss[s] - v) <= 5.1e-5 for s, v in printed.items()),
          "lm loss is what tgc printed: %s against %s" % (printed, tbloss))
    val = [(s, rows[s]["val_loss"]) for s in steps if "val_loss" in rows[s]]
    check([s for s, _ in val] == [3, 6], "validation after steps 3 and 6 in the log")
    expect_series(sc, "lm loss validation", val)
    expect_series(sc, "lm loss validation vs samples", [(s * B, v) for s, v in val])
    expect_series(sc, "lm loss validation ppl", [(s, math.exp(min(20, v))) for s, v in val], rel=1e-6)
    expect_series(sc, "lm loss validation ppl vs samples", [(s * B, math.exp(min(20, v))) for s, v in val], rel=1e-6)
    # Timers every --log-interval: iteration-time from step 2 (not the run's
    # first), the mean since the last one, which step 1 (not reset) is in.
    ms = {s: rows[s]["step_ms"] for s in steps}
    means = {2: (ms[1] + ms[2]) / 2, 4: (ms[3] + ms[4]) / 2, 6: (ms[5] + ms[6]) / 2}
    expect_series(sc, "iteration-time", [(s, m / 1e3) for s, m in sorted(means.items())], rel=1e-5)
    flops = rows[1]["tflops"] * 1e12 * ms[1] / 1e3  # the model FLOPs of an iteration
    thr = [(1, flops / (ms[1] / 1e3) / 1e12)] + [(s, flops / (m / 1e3) / 1e12) for s, m in sorted(means.items())]
    expect_series(sc, "throughput", thr, rel=1e-4)
    m = re.search(r"memory per rank: (\d+) B allocated by the executor", err)
    check(m is not None, "tgc printed its memory")
    if m:
        expect_series(sc, "mem-allocated-bytes", [(s, int(m.group(1))) for s in steps])
        expect_series(sc, "mem-max-allocated-bytes", [(s, int(m.group(1))) for s in steps])


def case_fp16(work):
    tb = os.path.join(work, "tb")
    # The scale halves after each overflow until the backward fits (steps 1-4 here).
    rows, _, _ = run(work, ["--train-iters", "8", "--quiet", "--fp16", "--initial-loss-scale", "1e6",
                            "--hysteresis", "1", "--tensorboard-dir", tb, "--tensorboard-log-interval", "2"])
    sc = load(tb)
    logged = [2, 4, 6, 8]
    skipped = [s for s in logged if rows[s]["skipped"]]
    check(0 < len(skipped) < len(logged), "some logged steps were skipped (the scale overflowed): %s" % skipped)
    expect_series(sc, "loss-scale", [(s, rows[s]["loss_scale"]) for s in logged])
    expect_series(sc, "loss-scale vs samples", [(2 * s, rows[s]["loss_scale"]) for s in logged])
    expect_series(sc, "lm loss", [(s, rows[s]["loss"]) for s in logged])
    expect_series(sc, "grad-norm", [(s, rows[s]["grad_norm"]) for s in logged if not rows[s]["skipped"]])
    check("iteration-time" not in sc and "lm loss validation" not in sc, "no timers, no validation")


def case_tp2(work):
    tb = os.path.join(work, "tb")
    rows, _, _ = run(work, ["--train-iters", "3", "--quiet", "--tp", "2", "--tensorboard-dir", tb])
    sc = load(tb)
    expect_series(sc, "lm loss", [(s, rows[s]["loss"]) for s in sorted(rows)])
    expect_series(sc, "grad-norm", [(s, rows[s]["grad_norm"]) for s in sorted(rows)])


def main():
    cases = {"fp32": case_fp32, "fp16": case_fp16, "tp2": case_tp2}
    if CASE not in cases:
        sys.exit("unknown case %r (%s)" % (CASE, ", ".join(cases)))
    work = tempfile.mkdtemp(prefix="tgc-tensorboard-")
    try:
        cases[CASE](work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if FAILED:
        sys.exit("%d check(s) failed" % len(FAILED))
    print("all checks passed")


main()
