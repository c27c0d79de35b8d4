#!/usr/bin/env python3
"""CPU benchmark of long sequences and 16-bit storage: tgc at s = 256 against s = 1024.

Trains samples/gpt.tg at the same tokens per step (batch * seq) at several
sequence lengths, with fused attention (--attention-backend tgc) and with
the unfused chain (bmm, softmax, dropout, bmm), in fp32 and --bf16, and
prints per run: the median ms/step (warm-up left out), tokens/s, the
achieved GFLOP/s of the seed's FLOPs model (72 B s l h^2 (1 + s/6h +
V/12lh), which grows with s through the attention term), peak RSS, and the
activation bytes the memory plan gives (tgc plan). The figure of merit
(issue 19): achieved GFLOP/s at the longest s over that at the shortest,
per attention mode and precision; 1.0 means the attention FLOPs run as fast
as the rest of the model (goal 0.9 or better fused). --bf16 against fp32
shows what 16-bit storage and GEMMs give on this processor (its flags are
printed: AVX-512-BF16 or not). See docs/performance.md.

usage: python3 bench/attention_bench.py [--tgc build/tgc] [--seqs 256,1024] [--tokens 4096]
       [--modes tgc,unfused] [--precisions fp32,bf16] [--rounds 2] [--threads 2] [--json FILE]
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import train_bench as tb  # noqa: E402  (the token file, FLOPs model, thread environment, sgemm peak)


def cpu_flags():
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    name = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return name, [x for x in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if x in flags]


def model_sets(a, s):
    B = max(1, a.tokens // s)
    kv = dict(layers=a.layers, hidden=a.hidden, heads=a.heads, seq=s, batch=B, vocab=a.vocab, pdrop=0)
    return B, sum((["--set", "%s=%s" % (k, v)] for k, v in kv.items()), [])


def mode_flags(mode, prec):
    return ["--attention-backend", mode] + (["--bf16"] if prec == "bf16" else [])


def act_bytes(a, sets, flags):
    cmd = [a.tgc, "plan", os.path.join(ROOT, "samples", "gpt.tg")] + sets + flags
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("attention_bench: %s failed:\n%s" % (" ".join(cmd), r.stderr[-2000:]))
    m = re.search(r"^\s+activations\s+(\d+) B", r.stdout, re.M)
    return int(m.group(1)) / 2**20 if m else float("nan")


def run(a, sets, flags, data, tmp):
    log = os.path.join(tmp, "run.jsonl")
    if os.path.exists(log):
        os.remove(log)
    steps = a.steps + a.warmup
    cmd = [a.tgc, "run", os.path.join(ROOT, "samples", "gpt.tg")] + sets + flags + [
        "--data", data, "--train-iters", str(steps), "--log", log, "--log-interval", "1", "--seed", "1"]
    r = subprocess.run(cmd, env=tb.thread_env(a, "tgc"), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("attention_bench: tgc failed (%d):\n%s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-3000:]))
    rows = [json.loads(x) for x in open(log)]
    m = re.search(r"peak RSS of the process ([0-9.]+) MiB", r.stderr)
    return [x["step_ms"] for x in rows][a.warmup:], rows[-1]["loss"], float(m.group(1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tgc", default=os.path.join(ROOT, "build", "tgc"))
    ap.add_argument("--seqs", default="256,1024")
    ap.add_argument("--tokens", type=int, default=4096, help="batch * seq of every run")
    ap.add_argument("--modes", default="tgc,unfused", help="--attention-backend values")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    a.torch_untuned = False
    seqs = [int(x) for x in a.seqs.split(",")]
    name, flags = cpu_flags()
    print("machine: %s, %d CPUs, flags %s" % (name, os.cpu_count(), " ".join(flags) or "-"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tokens.bin")
        tb.write_tokens(data, a.vocab, 4 * a.tokens * (a.steps + a.warmup) + 1)
        for prec in a.precisions.split(","):
            for mode in a.modes.split(","):
                for s in seqs:
                    B, sets = model_sets(a, s)
                    fl = mode_flags(mode, prec)
                    times, loss, rss = [], None, 0.0
                    for _ in range(a.rounds):
                        t, loss, r = run(a, sets, fl, data, tmp)
                        times += t
                        rss = max(rss, r)
                    ms = statistics.median(times)
                    gf = tb.flops_per_iter(a.layers, a.hidden, a.heads, s, B, a.vocab) / (ms / 1e3) / 1e9
                    rows.append(dict(precision=prec, mode=mode, seq=s, batch=B, ms=ms, tok_s=B * s / (ms / 1e3),
                                     gflops=gf, rss_mib=rss, act_mib=act_bytes(a, sets, fl), loss=loss))
                    print("  %s %s s=%d: %.1f ms/step" % (prec, mode, s, ms), file=sys.stderr)
    print("| precision | attention | s | batch | median ms/step | tokens/s | GFLOP/s (model) | vs shortest s "
          "| plan activations MiB | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = next(x for x in rows if x["precision"] == r["precision"] and x["mode"] == r["mode"])
        r["vs_short"] = r["gflops"] / base["gflops"]
        print("| %s | %s | %d | %d | %.1f | %.0f | %.2f | %.2f | %.1f | %.0f |" % (
            r["precision"], r["mode"], r["seq"], r["batch"], r["ms"], r["tok_s"], r["gflops"], r["vs_short"],
            r["act_mib"], r["rss_mib"]))
    for mode in a.modes.split(","):
        for s in seqs:
            f = [x for x in rows if x["mode"] == mode and x["seq"] == s]
            if len(f) == 2:
                print("%s s=%d: bf16 / fp32 step time %.2f" % (mode, s, f[1]["ms"] / f[0]["ms"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": name, "flags": flags, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
