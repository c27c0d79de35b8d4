#!/usr/bin/env python3
"""CPU training benchmark: tgc against a PyTorch reference of the same GPT.

Trains each configuration with tgc (samples/gpt.tg with --set) and with a
PyTorch eager fp32 model of the same architecture (learned positions, pre-LN,
causal attention, GELU(tanh) MLP, tied LM head; AdamW, gradient clipping),
on the same random llm.c token file, alternating the two in separate
processes, and prints per configuration: the median ms/step (warm-up steps
left out), tokens/s, achieved GFLOP/s (the seed's 72 B s l h^2 (1 + s/6h +
V/12lh)), the percentage of an sgemm peak measured in the same run (`tgc
plan --calibrate`: OpenBLAS sgemm with the same threads), peak RSS, and the
ratio tgc / PyTorch in tokens/s. See docs/performance.md.

usage: /usr/bin/python3 bench/train_bench.py [--tgc build/tgc] [--configs small,124m]
       [--threads 2] [--rounds 3] [--tiny] [--pdrop 0] [--wait-quiet S] [--json FILE]

Both sides use the same number of threads (default 2, the cores of the
machine it was written for): tgc with OMP_NUM_THREADS (its kernels and its
OpenMP OpenBLAS), PyTorch tuned as its CPU performance notes advise for a
small machine: torch.set_num_threads(1) and OPENBLAS_NUM_THREADS (Debian's
torch calls the system BLAS, which then runs the GEMMs on the threads);
--torch-untuned leaves PyTorch's defaults instead.

The script is its own PyTorch worker (`--worker torch`): every measured run
is a fresh process, so peak RSS (getrusage) is that run's alone.
"""
import argparse, array, json, os, random, re, resource, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (layers, hidden, heads, seq, batch, vocab, timed steps, warm-up steps)
CONFIGS = {
    "small": (4, 256, 4, 256, 8, 8192, 16, 3),
    "124m": (12, 768, 12, 256, 4, 50304, 6, 2),
    "tiny": (2, 64, 2, 32, 2, 512, 4, 1),
}
# What tgc should reach, in tokens/s against tuned PyTorch (issue 10).
TARGET = {"small": 1.5, "124m": 1.25}


def flops_per_iter(L, h, n, s, B, V):
    """The seed's FLOPs of one iteration without recomputation (what tgc reports)."""
    return 72.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * L * h))


def write_tokens(path, vocab, count, seed=1234):
    """An llm.c token file: a 256 x int32 header (magic, version, count), then uint16 tokens."""
    rng = random.Random(seed)
    header = array.array("i", [0] * 256)
    header[0], header[1], header[2] = 20240520, 1, count
    toks = array.array("H", (rng.randrange(vocab) for _ in range(count)))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())


def read_tokens(path):
    with open(path, "rb") as f:
        header = array.array("i")
        header.frombytes(f.read(1024))
        toks = array.array("H")
        toks.frombytes(f.read(2 * header[2]))
    return toks


# ---- the PyTorch side ---------------------------------------------------------


def torch_worker(a):
    """Trains the PyTorch reference; prints one JSON line of results."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if not a.torch_untuned:
        torch.set_num_threads(1)  # GEMMs run on OpenBLAS's threads (OPENBLAS_NUM_THREADS)
    torch.manual_seed(a.seed)
    L, h, nh, s, B, V = a.layers, a.hidden, a.heads, a.seq, a.batch, a.vocab
    hd, std, p = h // nh, 0.02, a.pdrop

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(h, eps=1e-5), nn.LayerNorm(h, eps=1e-5)
            self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
            for m, sd in ((self.qkv, std), (self.proj, std / (2 * L) ** 0.5), (self.fc, std),
                          (self.fc2, std / (2 * L) ** 0.5)):
                nn.init.normal_(m.weight, std=sd)
                nn.init.zeros_(m.bias)

        def forward(self, x, mask):  # x: [B, s, h]
            b, t, _ = x.shape
            qkv = self.qkv(self.ln1(x)).view(b, t, nh, 3 * hd)  # per head [q | k | v], as gpt.tg splits
            q, k, v = qkv.transpose(1, 2).split(hd, dim=-1)  # [b, n, s, d]
            att = torch.matmul(q, k.transpose(-2, -1)).mul_(1.0 / hd ** 0.5).masked_fill_(mask, float("-inf"))
            att = F.dropout(torch.softmax(att, dim=-1), p, True)
            y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, h)
            x = x + F.dropout(self.proj(y), p, True)
            return x + F.dropout(self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh")), p, True)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, h), nn.Embedding(s, h)
            nn.init.normal_(self.wte.weight, std=std)
            nn.init.normal_(self.wpe.weight, std=std)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(h, eps=1e-5)
            self.register_buffer("mask", torch.ones(s, s, dtype=torch.bool).triu(1), persistent=False)
            self.register_buffer("pos", torch.arange(s), persistent=False)

        def forward(self, idx, labels):
            x = F.dropout(self.wte(idx) + self.wpe(self.pos), p, True)
            for blk in self.blocks:
                x = blk(x, self.mask)
            logits = F.linear(self.lnf(x), self.wte.weight)  # the tied LM head
            return F.cross_entropy(logits.view(-1, V), labels.view(-1))

    model = GPT()
    model.train()
    decay = [q for q in model.parameters() if q.dim() >= 2]  # tgc: weights decay, biases and norms do not
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8, foreach=not a.torch_untuned)
    toks = torch.tensor(read_tokens(a.data).tolist(), dtype=torch.long)
    per = s + 1
    nseq = len(toks) // per

    def batch(step):
        rows = [toks[((step * B + j) % nseq) * per:((step * B + j) % nseq + 1) * per] for j in range(B)]
        t = torch.stack(rows)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()

    times, losses = [], []
    for step in range(a.steps):
        t0 = time.perf_counter()
        x, y = batch(step)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
    # The GEMM rate of this process (same threads): the MLP's [B s, h] x [h, 4h].
    ma, mb = torch.randn(B * s, h), torch.randn(h, 4 * h)
    torch.matmul(ma, mb)
    best = min(_timed(lambda: torch.matmul(ma, mb)) for _ in range(5))
    print(json.dumps({"step_ms": [1e3 * t for t in times], "loss": losses, "rss_mib": rss,
                      "threads": torch.get_num_threads(), "matmul_gflops": 2.0 * B * s * h * 4 * h / best / 1e9}))


def cpu_seconds():
    """(CPU seconds the whole machine was busy, CPU seconds of this process and its children so far)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait
    me = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return busy, sum(r.ru_utime + r.ru_stime for r in me)


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# ---- the driver -----------------------------------------------------------------


def thread_env(a, side):
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
        env.pop(k, None)
    if side == "tgc":
        env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = str(a.threads)
    elif not a.torch_untuned:
        env["OPENBLAS_NUM_THREADS"] = str(a.threads)
    return env


def sets(cfg, pdrop):
    L, h, n, s, B, V = cfg[:6]
    kv = dict(layers=L, hidden=h, heads=n, seq=s, batch=B, vocab=V, pdrop=pdrop)
    return sum((["--set", "%s=%s" % (k, v)] for k, v in kv.items()), [])


def run_tgc(a, cfg, data, tmp, steps):
    log = os.path.join(tmp, "tgc.jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = [a.tgc, "run", os.path.join(ROOT, "samples", "gpt.tg")] + sets(cfg, a.pdrop) + [
        "--data", data, "--train-iters", str(steps), "--log", log, "--log-interval", str(steps), "--seed", "1"]
    t0 = time.time()
    r = subprocess.run(cmd, env=thread_env(a, "tgc"), capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        sys.exit("train_bench: tgc failed (%d):\n%s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-3000:]))
    rows = [json.loads(x) for x in open(log)]
    m = re.search(r"peak RSS of the process ([0-9.]+) MiB", r.stderr)
    return {"step_ms": [x["step_ms"] for x in rows], "loss": [x["loss"] for x in rows],
            "rss_mib": float(m.group(1)) if m else float("nan"), "wall_s": wall}


def run_torch(a, cfg, data, steps):
    L, h, n, s, B, V = cfg[:6]
    cmd = [a.python, os.path.abspath(__file__), "--worker", "torch", "--data", data, "--steps", str(steps),
           "--layers", str(L), "--hidden", str(h), "--heads", str(n), "--seq", str(s), "--batch", str(B),
           "--vocab", str(V), "--pdrop", str(a.pdrop)] + (["--torch-untuned"] if a.torch_untuned else [])
    t0 = time.time()
    r = subprocess.run(cmd, env=thread_env(a, "torch"), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("train_bench: the PyTorch worker failed (%d):\n%s" % (r.returncode, r.stderr[-3000:]))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.time() - t0
    return out


def sgemm_peak(a, cfg):
    """tgc plan --calibrate: cblas_sgemm at square and [b s, h] x [h, 4h] sizes, the same threads as tgc."""
    cmd = [a.tgc, "plan", os.path.join(ROOT, "samples", "gpt.tg")] + sets(cfg, a.pdrop) + ["--calibrate"]
    r = subprocess.run(cmd, env=thread_env(a, "tgc"), capture_output=True, text=True)
    m = re.search(r"peak \(the best measured\): ([0-9.]+) GFLOP/s", r.stdout + r.stderr)
    if r.returncode != 0 or not m:
        sys.exit("train_bench: tgc plan --calibrate failed:\n%s" % (r.stdout + r.stderr)[-3000:])
    return float(m.group(1))


def others_now(seconds):
    """CPUs that processes other than this benchmark keep busy, sampled over `seconds`."""
    c0, t0 = cpu_seconds(), time.time()
    time.sleep(seconds)
    c1 = cpu_seconds()
    return max(0.0, (c1[0] - c0[0]) - (c1[1] - c0[1])) / (time.time() - t0)


def wait_quiet(a):
    """Waits (at most --wait-quiet seconds) until other processes use under --quiet-cpus CPUs."""
    t0 = time.time()
    while True:
        busy = others_now(2.0)
        if busy < a.quiet_cpus or time.time() - t0 >= a.wait_quiet:
            return busy


def measured(fn):
    """Runs fn(), adding the CPUs other processes used meanwhile to its result."""
    c0, t0 = cpu_seconds(), time.time()
    res = fn()
    c1 = cpu_seconds()
    res["others"] = max(0.0, (c1[0] - c0[0]) - (c1[1] - c0[1])) / (time.time() - t0)
    return res


def summarise(name, side, cfg, runs, warm, peak, quiet_cpus):
    L, h, n, s, B, V = cfg[:6]
    # The runs that had the machine to themselves, if any did: another
    # process on a 2-core machine measures that process, not the program.
    quiet = [r for r in runs if r["others"] < quiet_cpus]
    runs = quiet or runs
    timed = [t for r in runs for t in r["step_ms"][warm:]]
    med = statistics.median(timed)
    gflops = flops_per_iter(L, h, n, s, B, V) / (med / 1e3) / 1e9
    return {"config": name, "side": side, "ms": med, "tok_s": B * s / (med / 1e3), "gflops": gflops,
            "pct_peak": 100.0 * gflops / peak, "rss_mib": max(r["rss_mib"] for r in runs),
            "spread": (min(timed), max(timed)), "rounds": [statistics.median(r["step_ms"][warm:]) for r in runs],
            "loss": runs[-1]["loss"][-1], "used": len(runs), "others": max(r["others"] for r in runs)}


def print_table(rows, peaks, out):
    hdr = ("| config | side | median ms/step | tokens/s | GFLOP/s | % of sgemm peak | peak RSS MiB | tgc/PyTorch "
           "| runs used (others' CPUs) |")
    print(hdr, file=out)
    print("|" + "---|" * (hdr.count("|") - 1), file=out)
    for r in rows:
        ratio = r.get("ratio")
        print("| %s | %s | %.1f | %.0f | %.1f | %.1f%% | %.0f | %s | %d (max %.2f) |" % (
            r["config"], r["side"], r["ms"], r["tok_s"], r["gflops"], r["pct_peak"], r["rss_mib"],
            "%.2fx" % ratio if ratio else "", r["used"], r["others"]), file=out)
    print("", file=out)
    for name, (peak, mm) in peaks.items():
        print("%s: sgemm peak %.1f GFLOP/s (tgc plan --calibrate; the %% column divides by the best of the run, "
              "%.1f); PyTorch's matmul [B s, h] x [h, 4h] in its worker %.1f GFLOP/s"
              % (name, peak, max(p for p, _ in peaks.values()), mm), file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tgc", default=os.path.join(ROOT, "build", "tgc"))
    ap.add_argument("--python", default=sys.executable, help="the interpreter with torch (default: this one)")
    ap.add_argument("--configs", default="small,124m", help="comma list of %s" % ",".join(CONFIGS))
    ap.add_argument("--tiny", action="store_true", help="the tiny configuration, one round (seconds: the test)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="alternating tgc / PyTorch runs per configuration")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per run (default: per configuration)")
    ap.add_argument("--warmup", type=int, default=-1, help="warm-up steps per run, left out (default: per config)")
    ap.add_argument("--pdrop", type=float, default=0.0, help="dropout probability on both sides")
    ap.add_argument("--torch-untuned", action="store_true", help="PyTorch's default threads and AdamW")
    ap.add_argument("--json", help="also write the results as JSON")
    ap.add_argument("--quiet-cpus", type=float, default=0.25,
                    help="a run is quiet when other processes used fewer CPUs meanwhile; the medians use the quiet "
                         "runs when there are any (default 0.25)")
    ap.add_argument("--wait-quiet", type=float, default=0.0,
                    help="before each run, wait up to this many seconds for other processes to use under "
                         "--quiet-cpus CPUs")
    # the worker's own arguments
    ap.add_argument("--worker", choices=["torch"], help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    for k in ("layers", "hidden", "heads", "seq", "batch", "vocab"):
        ap.add_argument("--" + k, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        a.steps = a.steps or 1
        return torch_worker(a)
    if a.tiny:
        a.configs, a.rounds = "tiny", 1
    names = [c for c in a.configs.split(",") if c]
    for c in names:
        if c not in CONFIGS:
            sys.exit("train_bench: unknown configuration '%s' (%s)" % (c, ",".join(CONFIGS)))
    if not os.access(a.tgc, os.X_OK):
        sys.exit("train_bench: no tgc at %s (build it, or pass --tgc)" % a.tgc)
    print("# tgc vs PyTorch, CPU fp32 training, %d threads each; %s; load average %.2f %.2f %.2f" % (
        a.threads, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), *os.getloadavg()))
    print("# PyTorch: %s; dropout %g on both sides; rounds %d (alternating)" % (
        "untuned (defaults)" if a.torch_untuned else "tuned (set_num_threads(1), OPENBLAS_NUM_THREADS=%d, "
        "AdamW foreach)" % a.threads, a.pdrop, a.rounds))
    rows, peaks, t_start, cpu0 = [], {}, time.time(), cpu_seconds()
    with tempfile.TemporaryDirectory(prefix="tgc-bench-") as tmp:
        for name in names:
            cfg = CONFIGS[name]
            L, h, n, s, B, V, steps, warm = cfg
            steps = a.steps or steps
            warm = a.warmup if a.warmup >= 0 else warm
            total = steps + warm
            data = os.path.join(tmp, "tokens_%d.bin" % V)
            write_tokens(data, V, max(B * (s + 1) * (total + 1), 4096))
            if a.wait_quiet > 0:
                wait_quiet(a)
            peak = sgemm_peak(a, cfg)
            runs = {"tgc": [], "torch": []}
            for r in range(a.rounds):
                order = ("tgc", "torch") if r % 2 == 0 else ("torch", "tgc")
                for side in order:
                    if a.wait_quiet > 0:
                        wait_quiet(a)
                    res = measured(lambda: run_tgc(a, cfg, data, tmp, total) if side == "tgc"
                                   else run_torch(a, cfg, data, total))
                    runs[side].append(res)
                    print("#   %s round %d %-5s median %.1f ms/step (steps %s), run %.1f s, other processes %.2f CPUs"
                          % (name, r + 1, side, statistics.median(res["step_ms"][warm:]),
                             " ".join("%.0f" % t for t in res["step_ms"]), res["wall_s"], res["others"]), flush=True)
            tg = summarise(name, "tgc", cfg, runs["tgc"], warm, peak, a.quiet_cpus)
            pt = summarise(name, "PyTorch", cfg, runs["torch"], warm, peak, a.quiet_cpus)
            tg["ratio"] = tg["tok_s"] / pt["tok_s"]
            tg["target"] = TARGET.get(name)
            rows += [tg, pt]
            peaks[name] = (peak, statistics.median(r["matmul_gflops"] for r in runs["torch"]))
            print("# %s: L=%d h=%d heads=%d s=%d B=%d V=%d, %.4g FLOPs/iteration, %d timed + %d warm-up steps per run"
                  % (name, L, h, n, s, B, V, flops_per_iter(L, h, n, s, B, V), steps, warm), flush=True)
    # The machine's sgemm peak does not depend on the configuration: the best
    # calibration of the run is every row's reference.
    best = max(p for p, _ in peaks.values())
    for r in rows:
        r["pct_peak"] = 100.0 * r["gflops"] / best
    print()
    print_table(rows, peaks, sys.stdout)
    for r in rows:
        if r.get("target"):
            print("%s: tgc/PyTorch %.2fx, target %.2fx: %s" % (r["config"], r["ratio"], r["target"],
                                                             "met" if r["ratio"] >= r["target"] else "NOT met"))
    cpu1, wall = cpu_seconds(), time.time() - t_start
    print("total %.0f s; other processes used %.2f CPUs on average meanwhile (/proc/stat less this benchmark's "
          "processes); load average %.2f %.2f %.2f" % (wall, max(0.0, (cpu1[0] - cpu0[0]) - (cpu1[1] - cpu0[1])) / wall,
                                                       *os.getloadavg()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "peaks": peaks}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
