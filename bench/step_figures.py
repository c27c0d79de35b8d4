#!/usr/bin/env python3
"""The figures of a `tgc run --log` throughput run, for bench/gpu_bench.sh
and scripts/gpu_check.sh: the losses, then the median step time, tokens/s,
TFLOP/s (tgc's FLOPs model: FLOP per token from `tgc check`) and the MFU
against a peak, over the steps after the first two (they pay for
cuBLASLt's algorithm choice).

usage: step_figures.py LOG.jsonl FLOP_PER_TOKEN PEAK_TFLOPS NAME
FLOP_PER_TOKEN as `tgc check` prints it (e.g. 1.2G); PEAK_TFLOPS 0: none."""
import json
import sys


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    log, f, peak, name = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    rows = [json.loads(line) for line in open(log) if line.strip()]
    rows = [r for r in rows if "tokens_per_s" in r]
    if not rows:
        sys.exit("step_figures: no step in %s" % log)
    scale = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}.get(f[-1:], 1.0)
    fpt = float(f.rstrip("KMGT")) * scale
    steady = rows[2:] or rows
    ms = sorted(r["step_ms"] for r in steady)[len(steady) // 2]
    tps = sorted(r["tokens_per_s"] for r in steady)[len(steady) // 2]
    tf = fpt * tps / 1e12
    mfu = ", MFU %.1f%%" % (100 * tf / peak) if peak > 0 else ", MFU: no peak for this device"
    print("%s losses: %s" % (name, " ".join("%.4f" % r["loss"] for r in rows)))
    print("%s: %.1f ms/step, %.0f tokens/s, %.2f TFLOP/s%s (median of %d steps)" % (name, ms, tps, tf, mfu,
                                                                                  len(steady)))


if __name__ == "__main__":
    main()
