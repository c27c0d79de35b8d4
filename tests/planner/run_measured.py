#!/usr/bin/env python3
"""What `tgc run` measures against what `tgc plan` predicts (docs/runtime.md,
"Compute and memory figures"), for GPT serial and with --tp 2
--sequence-parallel:

- memory: the bytes the executor allocated per rank (its buffers as
  allocated, not the process's RSS, which also holds the compiler, the
  generated kernels and the runtime) within 5% of `tgc plan`'s total per
  rank, and the plan figure the run prints equal to it;
- FLOPs: the run's model FLOPs per iteration equal to the plan's
  "formula, no recomputation" line; each JSON log line's "tflops" times its
  step time gives them back, and its "mfu" is tflops / --peak-tflops;
- --calibrate-peak measures a peak and reports an MFU between 0 and 1.

usage: run_measured.py TGC MODEL DATA [--set k=v ...]"""
import json
import os
import re
import subprocess
import sys
import tempfile

tgc, model, data, sets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
CONFIGS = [[], ["--tp", "2", "--sequence-parallel"]]
PEAK = 0.5  # TFLOP/s, any value: the MFU must be tflops / PEAK


def plan(extra):
    out = subprocess.run([tgc, "plan", model] + sets + extra, check=True, capture_output=True, text=True).stdout
    total = int(re.search(r"^  total\s+(\d+) B", out, re.M).group(1))
    flops = float(re.search(r"formula, no recomputation .*= ([0-9.e+]+)", out).group(1))
    return total, flops


def run(extra, log):
    iters = [] if "--train-iters" in extra else ["--train-iters", "3"]  # an option given twice is an error
    p = subprocess.run([tgc, "run", model, "--data", data, "--log", log] + iters + sets + extra,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stderr


failed = False
with tempfile.TemporaryDirectory() as tmp:
    print(f"{'configuration':32} {'plan (B)':>12} {'allocated (B)':>14} {'ratio':>8}")
    for extra in CONFIGS:
        name = " ".join(extra) or "serial"
        total, flops = plan(extra)
        log = os.path.join(tmp, name.replace(" ", "_") + ".jsonl")
        err = run(extra + ["--peak-tflops", str(PEAK)], log)
        m = re.search(r"tgc: memory per rank[^:]*: (\d+) B allocated by the executor, (\d+) B predicted by the plan", err)
        got, predicted = int(m.group(1)), int(m.group(2))
        ratio = got / total
        print(f"{name:32} {total:12d} {got:14d} {ratio:8.4f}")
        if abs(ratio - 1) > 0.05 or predicted != total:
            print(f"  FAIL: {name}: allocated {got} B, tgc plan {total} B, the run's plan figure {predicted} B")
            failed = True
        c = re.search(r"tgc: compute: ([0-9.e+]+) model FLOPs per iteration .* MFU ([0-9.]+)% of", err)
        run_flops = float(c.group(1))
        if abs(run_flops / flops - 1) > 1e-3:
            print(f"  FAIL: {name}: run's model FLOPs {run_flops:.6e}, plan's formula {flops:.6e}")
            failed = True
        for row in map(json.loads, open(log)):
            back = row["tflops"] * 1e12 * row["step_ms"] / 1e3
            # The plan prints its FLOPs to 5 digits.
            if abs(back / flops - 1) > 1e-4 or abs(row["mfu"] - row["tflops"] / PEAK) > 1e-9 * max(1, row["mfu"]):
                print(f"  FAIL: {name}: step {row['step']}: tflops {row['tflops']}, step_ms {row['step_ms']}, "
                      f"mfu {row['mfu']} do not agree with {flops:.6e} FLOPs and a peak of {PEAK} TFLOP/s")
                failed = True
    err = run(["--calibrate-peak", "--train-iters", "2"], os.path.join(tmp, "calibrated.jsonl"))
    c = re.search(r"MFU ([0-9.]+)% of ([0-9.e+]+) TFLOP/s \(--calibrate-peak", err)
    if not c or not 0 < float(c.group(1)) < 100:
        print("  FAIL: --calibrate-peak gave no MFU in (0, 100%):\n" + err)
        failed = True
    else:
        print(f"--calibrate-peak: MFU {c.group(1)}% of {c.group(2)} TFLOP/s")
sys.exit(1 if failed else 0)
