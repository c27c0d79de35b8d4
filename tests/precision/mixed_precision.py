#!/usr/bin/env python3
"""Mixed precision on the CPU (16-bit storage, round-to-nearest-even
stores, fp32 master weights, fp16 loss scaling), checked three ways:

1. fp16 overflow: a run starting from a loss scale of 2^40 overflows; each
   overflow skips the step (and its LR step) and, once the hysteresis is
   used up, halves the scale; after --loss-scale-window clean steps the
   scale doubles again. A skipped step changes nothing: on a repeated batch
   the first clean step's loss equals step 0 of a run started at that scale.
2. bf16 and fp16 (static scale) track the fp32 run on real text, dropout
   on: over 30 AdamW steps (lr 1e-3) the mean relative loss difference is
   below 0.5% and the largest below 1%. Justification: bf16 keeps 8
   significant bits, so each stored value carries a relative rounding error
   up to 2^-9 (0.2%); the loss averages 256 tokens' log-probabilities whose
   errors are largely independent, so it moves far less than one rounding
   (measured: 1.7e-4 mean, 4.6e-4 largest), but the errors compound over
   steps, hence the bounds at a few roundings. fp16 keeps 11 bits (2^-12)
   and tracks about 10x closer (1.2e-5 / 2.8e-5). At lr 3e-3 this small
   model's loss spikes, and a spike amplifies any difference to several %:
   that regime tests the loss curve, not the arithmetic.

usage: mixed_precision.py TGC MODEL TEXT
"""
import json, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "oracle"))
import oracle  # noqa: E402
import torch  # noqa: E402

TINY = ["--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "seq=64", "--set", "batch=4"]


def run(tgc, model, args, tmp, tag):
    log = os.path.join(tmp, tag + ".jsonl")
    subprocess.check_call([tgc, "run", model] + TINY + args + ["--quiet", "--log", log])
    return [json.loads(l) for l in open(log)]


def check_overflow(tgc, model, tmp):
    graph = json.loads(subprocess.check_output([tgc, "dump-ir", model, "--after", "lower", "--format", "json"] + TINY))
    one = oracle.make_inputs(graph, 1, torch.Generator().manual_seed(5))  # one batch, repeated every step
    batches = os.path.join(tmp, "one.safetensors")
    oracle.st_write(batches, one)
    common = ["--fp16", "--inputs", batches, "--set", "pdrop=0", "--lr", "1e-3",
              "--loss-scale-window", "5", "--hysteresis", "2"]
    rows = run(tgc, model, common + ["--train-iters", "40", "--initial-loss-scale", str(2.0 ** 40)], tmp, "overflow")
    first = next(i for i, r in enumerate(rows) if not r["skipped"])
    assert first >= 2, "the scale 2^40 should overflow at first"
    scales = [r["loss_scale"] for r in rows]
    # Hysteresis 2: the first overflow keeps the scale, each later one halves it.
    assert scales[1] == scales[0] == 2.0 ** 40, scales[:3]
    for i in range(2, first + 1):
        assert scales[i] == scales[i - 1] / 2, (i, scales[i - 1], scales[i])
    grew = [i for i in range(first + 1, len(rows)) if scales[i] == 2 * scales[i - 1]]
    assert grew and not rows[grew[0] - 1]["skipped"], "the scale never grew back after clean steps"
    clean_run = ["--initial-loss-scale", str(scales[first])]
    ref = run(tgc, model, common + clean_run + ["--train-iters", "1"], tmp, "clean")
    assert ref[0]["loss"] == rows[first]["loss"], (ref[0]["loss"], rows[first]["loss"])
    print("fp16: %d skipped steps, scale 2^40 -> 2^%d, grew back at step %d; first clean loss %.7f equals a fresh "
          "run's" % (first, scales[first].bit_length() if isinstance(scales[first], int) else
                     int(round(__import__("math").log2(scales[first]))), grew[0], rows[first]["loss"]))


def check_tracking(tgc, model, text, tmp):
    common = ["--data", text, "--train-iters", "30", "--lr", "1e-3"]
    ref = [r["loss"] for r in run(tgc, model, common, tmp, "fp32")]
    ok = True
    for tag, extra in (("bf16", ["--bf16"]), ("fp16", ["--fp16", "--loss-scale", "1024"])):
        got = [r["loss"] for r in run(tgc, model, common + extra, tmp, tag)]
        rel = [abs(a - b) / a for a, b in zip(ref, got)]
        mean, worst = sum(rel) / len(rel), max(rel)
        good = len(got) == len(ref) and mean < 0.005 and worst < 0.01
        ok &= good
        print("%s vs fp32 over %d steps: mean relative loss difference %.2e, largest %.2e %s"
              % (tag, len(got), mean, worst, "" if good else "FAIL"))
    return ok


def main():
    tgc, model, text = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        check_overflow(tgc, model, tmp)
        ok = check_tracking(tgc, model, text, tmp)
    print("mixed precision:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
