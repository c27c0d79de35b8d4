#!/usr/bin/env python3
"""`tgc sample --backend` (docs/sampling.md): the device simulator gives the
CPU's tokens exactly.

`sim` runs the CPU's kernels on memory that is mapped PROT_NONE except
while a backend operation runs, so any host read or write of a device
buffer that bypasses the executor's interface (the tokens, the logits row,
the labels, the borrowed parameters and caches) is a segmentation fault.
Its kernels are the CPU's, so its logits agree with the CPU's bit for bit
and every draw must agree. Trains a tiny GPT and a tiny Llama (RoPE at
rt.pos), then for each case runs `tgc sample` with --backend cpu and with
--backend sim and checks: both exit 0, the summary names the backend, the
standard output (prompt and continuation) is the same and holds every
token asked for, and with --check-kv-cache the check passes with the same
largest difference on both. Cases: greedy and seeded (temperature 1,
top-k) draws through the KV cache, a context longer than s (the window
slides: prefills again), --no-kv-cache, --check-kv-cache, token ids, a
checkpoint directory, and a compiled bf16 plan.

usage: backends_test.py TGC MODEL_DIR DATA
"""
import os, re, subprocess, sys, tempfile

GPT = ["--set", "layers=1", "--set", "hidden=32", "--set", "heads=2", "--set", "seq=16"]
LLAMA = ["--set", "layers=1", "--set", "hidden=32", "--set", "heads=2", "--set", "seq=16"]
PROMPT = "And God said"
FAILED = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        FAILED.append(what)


def sample(tgc, model, sets, weights, backend, args):
    return subprocess.run([tgc, "sample", model] + sets + ["--weights", weights, "--backend", backend] + args,
                          capture_output=True, text=True)


def continuation(out, args):
    """How many tokens the output holds past the prompt."""
    out = out.rstrip("\n")
    if "--prompt-tokens" in args:
        return len(out.split(",")) - len(args[args.index("--prompt-tokens") + 1].split(","))
    # Text: bytes, non-printable ones as \xNN and a backslash doubled.
    return len(re.findall(r"\\x[0-9a-f]{2}|\\\\|.", out, re.S)) - len(PROMPT)


def same(tgc, what, model, sets, weights, *args):
    args = list(args)
    runs = {b: sample(tgc, model, sets, weights, b, args) for b in ("cpu", "sim")}
    for b, p in runs.items():
        if p.returncode != 0:
            sys.stderr.write(p.stderr)
            check(False, "%s: --backend %s exits 0 (got %d)" % (what, b, p.returncode))
            return
        check("backend %s\n" % b in p.stderr, "%s: the summary names backend %s" % (what, b))
    cpu, sim = runs["cpu"], runs["sim"]
    n = int(args[args.index("--tokens") + 1])
    check(continuation(cpu.stdout, args) == n, "%s: %d tokens generated" % (what, n))
    check(cpu.stdout == sim.stdout, "%s: sim's tokens are cpu's" % what)
    if cpu.stdout != sim.stdout:
        print("  cpu: %r\n  sim: %r" % (cpu.stdout, sim.stdout))
    if "--check-kv-cache" in args:
        diffs = []
        for p in (cpu, sim):
            m = re.search(r"KV cache check: (\d+) tokens' logits .* max \|difference\| (\S+) .*: ok$", p.stderr, re.M)
            diffs.append(m.groups() if m else None)
        check(diffs[0] is not None and diffs[0] == diffs[1],
              "%s: the KV cache check passes on both, with the same difference (%s)" % (what, diffs))


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    tgc, models, data = sys.argv[1:]
    gpt, llama = os.path.join(models, "gpt.tg"), os.path.join(models, "llama.tg")
    with tempfile.TemporaryDirectory() as tmp:
        w, ck, lw = (os.path.join(tmp, f) for f in ("gpt.safetensors", "ck", "llama.safetensors"))
        plan = os.path.join(tmp, "bf16.plan")
        # Trained enough that the continuation is not all spaces.
        subprocess.check_call([tgc, "run", gpt] + GPT + ["--set", "batch=2", "--data", data, "--train-iters", "60",
                               "--lr", "1e-2", "--export", w, "--save", ck, "--quiet"])
        subprocess.check_call([tgc, "run", llama] + LLAMA + ["--set", "batch=2", "--data", data, "--train-iters",
                               "30", "--lr", "1e-2", "--export", lw, "--quiet"])
        subprocess.check_call([tgc, "compile", gpt] + GPT + ["--set", "batch=2", "--bf16", "-o", plan],
                              stdout=subprocess.DEVNULL)

        same(tgc, "greedy, KV cache", gpt, GPT, w, "--prompt", PROMPT, "--tokens", "4", "--temperature", "0")
        same(tgc, "seeded, KV cache, sliding window", gpt, GPT, w, "--prompt", PROMPT, "--tokens", "24",
             "--temperature", "1", "--top-k", "20", "--seed", "5")
        same(tgc, "greedy, --no-kv-cache", gpt, GPT, w, "--prompt", PROMPT, "--tokens", "24", "--temperature", "0",
             "--no-kv-cache")
        same(tgc, "seeded, --no-kv-cache", gpt, GPT, w, "--prompt", PROMPT, "--tokens", "24", "--seed", "9",
             "--no-kv-cache")
        same(tgc, "--check-kv-cache", gpt, GPT, w, "--prompt", PROMPT, "--tokens", "24", "--seed", "3",
             "--check-kv-cache")
        same(tgc, "token ids, a checkpoint directory", gpt, GPT, ck, "--prompt-tokens", "65,110,100",
             "--tokens", "6", "--temperature", "0")
        same(tgc, "a compiled bf16 plan, --check-kv-cache", plan, [], w, "--prompt", PROMPT, "--tokens", "20",
             "--seed", "2", "--check-kv-cache")
        same(tgc, "a Llama (RoPE at rt.pos), --check-kv-cache", llama, LLAMA, lw, "--prompt", PROMPT,
             "--tokens", "8", "--seed", "4", "--check-kv-cache")
    print("backends_test:", "FAIL" if FAILED else "PASS")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
