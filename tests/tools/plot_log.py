#!/usr/bin/env python3
"""plot_log.py TGC MODEL DATA [run args]: `tgc plot` on a real run's log.

Trains a tiny model with --log, plots the log, and checks with xml.etree
that the SVG parses and that the training-loss and learning-rate polylines
have exactly one point per log line (lines counted here, independently),
in step order; then a log with a validation loss on some steps gives a
validation polyline with exactly those points."""
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p.stdout


def polylines(path):
    root = ET.parse(path).getroot()  # raises on malformed XML
    assert root.tag == SVG + "svg", root.tag
    out = {}
    for pl in root.iter(SVG + "polyline"):
        out[pl.get("id")] = [tuple(float(v) for v in pt.split(",")) for pt in pl.get("points").split()]
    return root, out


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


def main():
    tgc, model, data = sys.argv[1:4]
    extra = sys.argv[4:]
    with tempfile.TemporaryDirectory() as tmp:
        log, svg = os.path.join(tmp, "run.jsonl"), os.path.join(tmp, "loss.svg")
        run([tgc, "run", model, "--data", data, "--log", log, "--quiet", "--train-iters", "7",
             "--lr-warmup-iters", "3"] + extra)
        nlines = sum(1 for line in open(log) if line.strip())
        check(nlines == 7, "the run logged %d lines" % nlines)
        out = run([tgc, "plot", log, "-o", svg])
        check("7 steps" in out, "summary: " + out)
        root, lines = polylines(svg)
        for name in ("train-loss", "lr"):
            pts = lines.get(name, [])
            check(len(pts) == nlines, "%s: %d points for %d log lines" % (name, len(pts), nlines))
            xs = [x for x, _ in pts]
            check(xs == sorted(xs) and len(set(xs)) == len(xs), "%s: x not increasing with step: %s" % (name, xs))
        check("val-loss" not in lines, "a validation line without val_loss in the log")
        # Warm-up: the learning rate rises over the first steps (y grows
        # downwards in SVG), and the loss panel lies above the lr panel.
        lr = lines["lr"]
        check(lr[0][1] > lr[3][1], "the lr polyline does not rise during warm-up: %s" % lr[:4])
        check(max(y for _, y in lines["train-loss"]) < min(y for _, y in lr), "the panels overlap")
        # A log with a validation loss on every third step (and a null loss).
        vlog, vsvg = os.path.join(tmp, "val.jsonl"), os.path.join(tmp, "val.svg")
        with open(vlog, "w") as f:
            for step in range(10):
                loss = "null" if step == 4 else "%.3f" % (5.0 - 0.3 * step)
                val = ',"val_loss":%.3f' % (5.2 - 0.25 * step) if step % 3 == 0 else ""
                f.write('{"step":%d,"loss":%s,"lr":0.001%s}\n' % (step, loss, val))
        run([tgc, "plot", vlog, "-o", vsvg, "--title", "val <&> \"test\""])
        root, lines = polylines(vsvg)
        check(len(lines.get("val-loss", [])) == 4, "val-loss points: %s" % lines.get("val-loss"))
        check(len(lines["train-loss"]) == 9, "train-loss points (one null): %d" % len(lines["train-loss"]))
        texts = [t.text for t in root.iter(SVG + "text")]
        check("val <&> \"test\"" in texts, "the title did not round-trip through XML: %s" % texts[:3])
        check("validation loss" in texts and "training loss" in texts, "legend: %s" % texts)
    print("ok: one polyline point per logged step (%d), validation and escaping" % nlines)


if __name__ == "__main__":
    main()
