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

Then what limits each configuration: tgc's step split by its per-op
profile (TGC_DEBUG=2, every tgc run) into GEMMs, generated kernels by kind
(attention, norms, elementwise, LM head, embeddings and copies), the
optimizer update, communication and the rest (feed, loss, overhead); the
fastest achievable step from the same run's rates (the GEMM FLOPs at the
sgemm peak, every other instruction's bytes at the STREAM-like copy rate
of build/bench_stream, a fused attention kernel's FLOPs at the sgemm peak
where they take longer than its bytes); the achieved fraction of that
bound and of the sgemm peak (issue 21's goals: small 75%, 124m 85%); and
the fork-joins of a step (OpenMP parallel regions, counted by the
build/libtgc_forkjoin_count.so preload) at the measured cost of one. The
header names the machine: CPU, ISA, cores, the thread settings and
OpenBLAS's threading, the load average at the start and the end.

usage: /usr/bin/python3 bench/train_bench.py [--tgc build/tgc] [--configs small,124m]
       [--threads 2] [--rounds 3] [--tiny] [--pdrop 0] [--wait-quiet S] [--json FILE]
       [--stream build/bench_stream] [--forkjoin-lib build/libtgc_forkjoin_count.so]

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
# Issue 21's goal: tgc's achieved GFLOP/s as a percentage of the run's sgemm peak.
PEAK_GOAL = {"small": 75, "124m": 85}


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
        # PyTorch's BLAS (Debian's: OpenBLAS) gets the kernels tgc's runs
        # (OpenBLAS's SSE3 fallback on a CPU it does not know, otherwise).
        if a.blas_core and "OPENBLAS_CORETYPE" not in env:
            env["OPENBLAS_CORETYPE"] = a.blas_core
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
    env = thread_env(a, "tgc")
    env["TGC_DEBUG"] = "2"  # the per-op profile: two clock reads per instruction, microseconds of a step
    t0 = time.time()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        sys.exit("train_bench: tgc failed (%d):\n%s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-3000:]))
    rows = [json.loads(x) for x in open(log)]
    m = re.search(r"peak RSS of the process ([0-9.]+) MiB", r.stderr)
    return {"step_ms": [x["step_ms"] for x in rows], "loss": [x["loss"] for x in rows],
            "rss_mib": float(m.group(1)) if m else float("nan"), "wall_s": wall, "profile": parse_profile(r.stderr)}


def parse_profile(text):
    """TGC_DEBUG=2's table: {op: (launches, ms/step, MB/step, GFLOP/step)}; ms averaged over all the run's steps."""
    prof = {}
    for m in re.finditer(r"^(\S+)\s+(\d+)\s+([0-9.]+)\s+[0-9.]+%\s+([0-9.]+)\s+([0-9.]+)\s+[0-9.]+$", text, re.M):
        prof[m.group(1)] = (int(m.group(2)), float(m.group(3)), float(m.group(4)), float(m.group(5)))
    if not prof:
        sys.exit("train_bench: no per-op profile (TGC_DEBUG=2) in tgc's output:\n" + text[-3000:])
    return prof


# The step's parts: every op of the profile belongs to one (the rest of the
# step, outside the instructions, is "other").
KINDS = [
    ("GEMM", lambda op: op == "(gemm)"),
    ("attention", lambda op: op.startswith(("attention", "softmax", "permute", "rope", "repeat_interleave"))),
    ("norms", lambda op: op.startswith(("layernorm", "rmsnorm"))),
    ("LM head", lambda op: op.startswith(("lm_head", "cross_entropy", "vocab_parallel"))),
    ("optimizer", lambda op: op in ("adamw", "sgd", "global_norm")),
    ("communication", lambda op: op == "(comm)"),
    ("embedding, copies", lambda op: op.startswith(("embedding", "slice", "concat", "pad", "reshape", "broadcast",
                                                      "arange", "full", "kv_cache"))),
    ("elementwise", lambda op: True),  # adds, biases (linear, colsum), activations, dropout, ...
]


def kind_of(op):
    return next(k for k, test in KINDS if test(op))


def limits(name, runs, peak_gflops, copy_gbs):
    """The step split by kind and its bound, from the profiles of the runs the medians used."""
    parts = {k: [0.0, 0.0, 0.0] for k, _ in KINDS}  # ms/step, MB/step, bound ms/step
    gemm_gf = attn_gf = 0.0
    for op, (_, _, mb, gf) in runs[0]["profile"].items():
        k = kind_of(op)
        parts[k][0] = parts[k][0] + statistics.mean(r["profile"][op][1] for r in runs)
        parts[k][1] += mb if k != "GEMM" else 0.0
        # GEMMs at the sgemm peak; any other instruction at the copy's bandwidth, or its
        # FLOPs (a fused attention kernel's) at the peak where they take longer.
        t = gf / peak_gflops if k == "GEMM" else max(gf / peak_gflops, mb / 1e3 / copy_gbs)
        parts[k][2] += 1e3 * t
        gemm_gf += gf if k == "GEMM" else 0.0
        attn_gf += gf if k != "GEMM" else 0.0
    mean_step = statistics.mean(t for r in runs for t in r["step_ms"])
    other = mean_step - sum(p[0] for p in parts.values())
    return {"config": name, "parts": parts, "other_ms": other, "mean_ms": mean_step, "gemm_gflop": gemm_gf,
            "attn_gflop": attn_gf, "bound_ms": sum(p[2] for p in parts.values()), "peak": peak_gflops,
            "copy_gbs": copy_gbs}


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


def machine(a):
    """The machine line: CPU model, ISA, cores, the threads both sides get, OpenBLAS's threading."""
    model, flags = "unknown", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    isa = ", ".join(x for x, f in (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("AVX-512-BF16", "avx512_bf16"),
                                   ("AMX-BF16", "amx_bf16")) if f in flags) or "no AVX2"
    r = subprocess.run([a.tgc, "--version"], capture_output=True, text=True)
    m = re.search(r"^blas: (.*)$", r.stdout, re.M)
    c = re.search(r"; core (\w+) \(", m.group(1)) if m else None
    a.blas_core = c.group(1) if c else None
    blas = "BLAS: %s" % (m.group(1) if m else "unknown (tgc --version printed no blas line)")
    return ("%s; ISA %s; %d cores online; tgc: OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=%d; %s"
            % (model, isa, os.cpu_count(), a.threads, blas))


def stream(a):
    """bench_stream with tgc's threads: (copy GB/s, fork-join us)."""
    r = subprocess.run([a.stream, "--mib", str(a.stream_mib)], env=thread_env(a, "tgc"), capture_output=True,
                       text=True)
    c = re.search(r"^copy: ([0-9.]+) GB/s", r.stdout, re.M)
    f = re.search(r"^fork-join: ([0-9.]+) us", r.stdout, re.M)
    if r.returncode != 0 or not c or not f:
        sys.exit("train_bench: %s failed:\n%s" % (a.stream, (r.stdout + r.stderr)[-3000:]))
    return float(c.group(1)), float(f.group(1))


def sanitizer_runtimes(binary):
    """The shared sanitizer runtimes `binary` links (a -DTGC_SANITIZE or
    -DTGC_TSAN build with gcc): they must come first in LD_PRELOAD, before
    the fork-join counter, or the runtime refuses to start."""
    r = subprocess.run(["ldd", binary], capture_output=True, text=True)
    return re.findall(r"^\s*lib[at]san\.so[.0-9]* => (\S+)", r.stdout, re.M) if r.returncode == 0 else []


def forkjoins(a, cfg, data, tmp):
    """OpenMP parallel regions of one step, (kernels', OpenBLAS's): runs of 1 and 2 steps under the counter."""
    counts = []
    for steps in (1, 2):
        cmd = [a.tgc, "run", os.path.join(ROOT, "samples", "gpt.tg")] + sets(cfg, a.pdrop) + [
            "--data", data, "--train-iters", str(steps), "--quiet", "--seed", "1"]
        env = thread_env(a, "tgc")
        san = sanitizer_runtimes(a.tgc)
        env["LD_PRELOAD"] = ":".join(san + [a.forkjoin_lib])
        if san:  # the preload reaches tgc's children (cc): LeakSanitizer would fail them at exit
            env["ASAN_OPTIONS"] = ":".join(x for x in (env.get("ASAN_OPTIONS"), "detect_leaks=0") if x)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        m = re.findall(r"^forkjoin: total (\d+) kernels (\d+) openblas (\d+) other (\d+) threads (-?\d+)$",
                       r.stderr, re.M)
        if r.returncode != 0 or len(m) != 1:
            sys.exit("train_bench: the fork-join count failed:\n%s" % r.stderr[-3000:])
        counts.append([int(x) for x in m[0]])
    return {"kernels": counts[1][1] - counts[0][1], "openblas": counts[1][2] - counts[0][2],
            "other": counts[1][3] - counts[0][3], "threads": counts[1][4]}


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


def print_limits(lims, out):
    """The step split by kind, then the bound against the step."""
    names = [k for k, _ in KINDS]
    hdr = "| config | mean ms/step | " + " | ".join(names) + " | other (feed, loss, overhead) |"
    print(hdr, file=out)
    print("|" + "---|" * (hdr.count("|") - 1), file=out)
    for L in lims:
        cells = ["%.1f (%.1f%%)" % (L["parts"][k][0], 100 * L["parts"][k][0] / L["mean_ms"]) for k in names]
        print("| %s | %.1f | %s | %.1f (%.1f%%) |" % (L["config"], L["mean_ms"], " | ".join(cells), L["other_ms"],
                                                     100 * L["other_ms"] / L["mean_ms"]), file=out)
    print("", file=out)
    hdr = ("| config | GEMM GFLOP/step | sgemm GFLOP/s | GEMM floor ms | other instructions MB/step (optimizer) "
           "| copy GB/s | other instructions floor ms | fastest step ms | median ms/step | of the fastest | % of sgemm peak "
           "| fork-joins/step (kernels + BLAS) | their cost |")
    print(hdr, file=out)
    print("|" + "---|" * (hdr.count("|") - 1), file=out)
    for L in lims:
        mb = sum(p[1] for k, p in L["parts"].items() if k != "GEMM")
        gemm_floor = L["parts"]["GEMM"][2]
        fj = L.get("forkjoins")
        fjs = "%d + %d" % (fj["kernels"], fj["openblas"]) if fj else "-"
        cost = ("%.2f ms (%.2f%%)" % (L["forkjoin_ms"], 100 * L["forkjoin_ms"] / L["median_ms"])) if fj else "-"
        print("| %s | %.2f | %.1f | %.1f | %.1f (%.1f) | %.1f | %.1f | %.1f | %.1f | %.1f%% | %.1f%% | %s | %s |" % (
            L["config"], L["gemm_gflop"], L["peak"], gemm_floor, mb, L["parts"]["optimizer"][1], L["copy_gbs"],
            L["bound_ms"] - gemm_floor, L["bound_ms"], L["median_ms"], 100 * L["bound_ms"] / L["median_ms"],
            L["pct_peak"], fjs, cost), file=out)
    print("", file=out)
    print("(fastest step: the GEMM FLOPs at the sgemm peak, plus every other instruction's bytes, each buffer "
          "once, at the copy's rate, or a fused attention kernel's FLOPs at the peak where longer; the split "
          "averages the profile over all steps, warm-up included; fork-joins at bench_stream's empty-region cost)",
          file=out)


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
    ap.add_argument("--stream", default=os.path.join(ROOT, "build", "bench_stream"),
                    help="bench/stream.c's program: the copy bandwidth and a fork-join's cost")
    ap.add_argument("--stream-mib", type=int, default=256, help="MiB per array of the copy (default 256)")
    ap.add_argument("--forkjoin-lib", default=os.path.join(ROOT, "build", "libtgc_forkjoin_count.so"),
                    help="bench/forkjoin_count.c's preload library; 'none': no count")
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
        a.configs, a.rounds, a.stream_mib = "tiny", 1, min(a.stream_mib, 32)
    names = [c for c in a.configs.split(",") if c]
    for c in names:
        if c not in CONFIGS:
            sys.exit("train_bench: unknown configuration '%s' (%s)" % (c, ",".join(CONFIGS)))
    if not os.access(a.tgc, os.X_OK):
        sys.exit("train_bench: no tgc at %s (build it, or pass --tgc)" % a.tgc)
    if not os.access(a.stream, os.X_OK):
        sys.exit("train_bench: no bench_stream at %s (build it, or pass --stream)" % a.stream)
    if a.forkjoin_lib != "none" and not os.path.exists(a.forkjoin_lib):
        sys.exit("train_bench: no fork-join counter at %s (build it, or pass --forkjoin-lib none)" % a.forkjoin_lib)
    load0 = os.getloadavg()
    print("# tgc vs PyTorch, CPU fp32 training, %d threads each; %s; load average %.2f %.2f %.2f" % (
        a.threads, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), *load0))
    print("# machine: %s" % machine(a))
    print("# PyTorch: %s; dropout %g on both sides; rounds %d (alternating)" % (
        "untuned (defaults)" if a.torch_untuned else "tuned (set_num_threads(1), OPENBLAS_NUM_THREADS=%d, "
        "OPENBLAS_CORETYPE=%s, AdamW foreach)" % (a.threads, os.environ.get("OPENBLAS_CORETYPE", a.blas_core)),
        a.pdrop, a.rounds))
    rows, peaks, lims, t_start, cpu0 = [], {}, [], time.time(), cpu_seconds()
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
            copy_gbs, fj_us = stream(a)
            fj = forkjoins(a, cfg, data, tmp) if a.forkjoin_lib != "none" else None
            print("# %s: sgemm peak %.1f GFLOP/s, copy %.1f GB/s, fork-join %.2f us%s" % (
                name, peak, copy_gbs, fj_us, "; a step opens %d parallel regions in the kernels, %d in OpenBLAS, "
                "%d elsewhere; tgc's threads at exit: %d (%s)" % (
                    fj["kernels"], fj["openblas"], fj["other"], fj["threads"],
                    "one pool for kernels and BLAS" if fj["threads"] <= a.threads else
                    "MORE than OMP_NUM_THREADS: another pool") if fj else ""), flush=True)
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
            quiet = [r for r in runs["tgc"] if r["others"] < a.quiet_cpus] or runs["tgc"]
            lim = limits(name, quiet, peak, copy_gbs)
            lim.update(median_ms=tg["ms"], forkjoins=fj, forkjoin_us=fj_us,
                       forkjoin_ms=(fj["kernels"] + fj["openblas"] + fj["other"]) * fj_us / 1e3 if fj else 0.0)
            lims.append(lim)
            peaks[name] = (peak, statistics.median(r["matmul_gflops"] for r in runs["torch"]))
            print("# %s: L=%d h=%d heads=%d s=%d B=%d V=%d, %.4g FLOPs/iteration, %d timed + %d warm-up steps per run"
                  % (name, L, h, n, s, B, V, flops_per_iter(L, h, n, s, B, V), steps, warm), flush=True)
    # The machine's sgemm peak does not depend on the configuration: the best
    # calibration of the run is every row's reference.
    best = max(p for p, _ in peaks.values())
    for r in rows:
        r["pct_peak"] = 100.0 * r["gflops"] / best
    for L in lims:
        L["pct_peak"] = next(r["pct_peak"] for r in rows if r["config"] == L["config"] and r["side"] == "tgc")
    cpu1, wall = cpu_seconds(), time.time() - t_start
    others = max(0.0, (cpu1[0] - cpu0[0]) - (cpu1[1] - cpu0[1])) / wall
    load1 = os.getloadavg()
    # A machine another process kept busy measures that process too: the tables say so.
    loaded = others >= a.quiet_cpus or max(load0[0], load1[0]) >= 0.5 * os.cpu_count()
    print()
    if loaded:
        print("LOADED MACHINE: other processes used %.2f CPUs on average, load average %.2f at the start, %.2f at "
              "the end (%d cores): these figures measure the sharing too" % (others, load0[0], load1[0],
                                                                           os.cpu_count()))
        print()
    print_table(rows, peaks, sys.stdout)
    for r in rows:
        if r.get("target"):
            print("%s: tgc/PyTorch %.2fx, target %.2fx: %s" % (r["config"], r["ratio"], r["target"],
                                                             "met" if r["ratio"] >= r["target"] else "NOT met"))
    print()
    print("What limits each configuration (tgc; TGC_DEBUG=2's per-op profile, ms/step and share of the mean step):")
    print()
    print_limits(lims, sys.stdout)
    for L in lims:
        goal = PEAK_GOAL.get(L["config"])
        if goal:
            print("%s: %.1f%% of the sgemm peak, goal %d%%: %s" % (L["config"], L["pct_peak"], goal,
                                                                "met" if L["pct_peak"] >= goal else "NOT met"))
    print("total %.0f s; other processes used %.2f CPUs on average meanwhile (/proc/stat less this benchmark's "
          "processes); load average %.2f %.2f %.2f at the start, %.2f %.2f %.2f at the end" % (
              wall, others, *load0, *load1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "peaks": peaks, "limits": lims, "loaded": loaded}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
