#!/usr/bin/env python3
"""`tgc sample` end to end (docs/sampling.md).

Trains a tiny GPT (with --export, and --save when tgc run has it) for 150
steps at lr 1e-2: after 20 steps it knows only that a space is the most
frequent byte, and greedy decoding prints nothing but spaces, which would
make the comparison with PyTorch weak. Then checks:
  - determinism: one seed gives the same text twice, another seed another
    continuation (temperature 1);
  - greedy decoding against PyTorch: the model's graph (`tgc dump-ir --after
    lower --format json`) interpreted op by op with tests/oracle/oracle.py's
    PyTorch ops, from the exported weights, decoded greedily with the same
    left-aligned window of s positions; the token ids must agree (a
    disagreement is tolerated only where torch's two best logits are closer
    than float rounding can decide, and the comparison stops there);
  - --top-k 1 at temperature 1 is greedy; a prompt longer than the context;
  - the same weights as a checkpoint directory, its iter_N and the
    model.safetensors inside give the same text as the --export file;
  - a compiled plan (batch 4, dropout 0.1 compiled in) samples greedily like
    the .tg model (dropout off, batch column 0);
  - the KV cache (the default; every case above decodes through it, so the
    PyTorch comparisons check it independently): --no-kv-cache gives the
    same greedy ids and the same seeded text; --check-kv-cache, which runs
    the full forward beside every token and compares the logits rows, passes
    for the .tg model over prefill, decoding steps and a sliding window, for
    the compiled plan, and for a tiny Llama (RoPE from rt.pos, RMSNorm,
    SwiGLU) trained here.

usage: sample_test.py TGC MODEL DATA [--tokens N]
"""
import argparse, json, os, subprocess, sys, tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
import oracle  # noqa: E402  (the PyTorch interpretation of every op)

TINY = ["--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "seq=32"]
PROMPT = "And God said"
FAILED = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        FAILED.append(what)


def run_sample(tgc, model, weights, args, sets):
    """tgc sample, which must succeed: its completed process."""
    p = subprocess.run([tgc, "sample", model] + sets + ["--weights", weights] + list(args),
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit("tgc sample failed (exit %d): %s" % (p.returncode, " ".join(args)))
    return p


def sample(tgc, model, weights, *args, sets=TINY):
    return run_sample(tgc, model, weights, args, sets).stdout


def sample_err(tgc, model, weights, *args, sets=TINY):
    return run_sample(tgc, model, weights, args, sets).stderr


def kv_check(tgc, model, weights, what, *args, sets=TINY):
    """--check-kv-cache: every token's cached logits against the full forward."""
    err = sample_err(tgc, model, weights, "--check-kv-cache", *args, sets=sets)
    line = [l for l in err.splitlines() if "KV cache check" in l]
    print("      " + (line[0] if line else "(no check line)"))
    check(len(line) == 1 and line[0].endswith(": ok"), "--check-kv-cache, %s" % what)
    return err


def escape(ids):
    """What tgc sample prints for byte tokens: printable ASCII, newline and
    tab as they are, a backslash doubled, anything else as \\xNN."""
    out = []
    for c in ids:
        ch = chr(c)
        out.append("\\\\" if ch == "\\" else ch if ch in "\n\t" or 0x20 <= c < 0x7f else "\\x%02x" % c)
    return "".join(out)


def ids_of(out):
    return [int(x) for x in out.strip().split(",")]


def torch_logits(graph, params, tokens):
    """The logits [s, b, V] of the graph's forward (oracle.run_node per op)."""
    vals, want = {}, None
    for n in graph["nodes"]:
        if n["op"] == "cross_entropy":
            want = n["operands"][0]
            break
    for n in graph["nodes"]:
        op = n["op"]
        if op == "param":
            v = params[n["name"]]
        elif op == "input":
            v = tokens if n["name"] == "tokens" else torch.zeros(n["shape"], dtype=oracle.DT[n["dtype"]])
        elif not n["operands"]:
            v = oracle.leaf(n)
        else:
            v = oracle.run_node(n, None, [vals[i] for i in n["operands"]])
        vals[n["id"]] = v
        if n["id"] == want:
            return v
    raise SystemExit("no cross_entropy in the graph")


def torch_greedy(tgc, model, weights, prompt_ids, count):
    graph = json.loads(subprocess.check_output([tgc, "dump-ir", model, "--after", "lower", "--format", "json"]
                                               + TINY + ["--set", "batch=1", "--set", "pdrop=0"]))
    params = oracle.st_read(weights)
    s = next(n for n in graph["nodes"] if n["name"] == "tokens")["shape"][0]
    ctx, out, margins = list(prompt_ids), [], []
    with torch.no_grad():
        for _ in range(count):
            win = ctx[-s:]
            tok = torch.zeros(s, 1, dtype=torch.int32)
            tok[:len(win), 0] = torch.tensor(win, dtype=torch.int32)
            row = torch_logits(graph, params, tok)[len(win) - 1, 0]
            top = torch.topk(row, 2)
            margins.append((top.values[0] - top.values[1]).item())
            nxt = int(torch.argmax(row).item())
            out.append(nxt)
            ctx.append(nxt)
    return out, margins


def compare_greedy(tgc_ids, torch_ids, margins, what):
    for i, (a, b) in enumerate(zip(tgc_ids, torch_ids)):
        if a != b:
            near = margins[i] < 1e-4
            check(near, "%s: token %d: tgc %d, torch %d (torch's top-2 margin %.2e)" % (what, i, a, b, margins[i]))
            return
    check(tgc_ids == torch_ids, "%s: %d greedy tokens equal torch's" % (what, len(torch_ids)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--iters", type=int, default=150)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tgc, model, n = a.tgc, a.model, str(a.tokens)
    with tempfile.TemporaryDirectory() as tmp:
        w, ck = os.path.join(tmp, "W.safetensors"), os.path.join(tmp, "ckpt")
        has_save = "--save" in subprocess.run([tgc, "run", "--help"], capture_output=True, text=True).stdout
        subprocess.check_call([tgc, "run", model] + TINY + ["--set", "batch=4", "--data", a.data,
                               "--train-iters", str(a.iters), "--lr", "1e-2", "--export", w, "--quiet"] + (["--save", ck] if has_save else []))

        # Determinism.
        one = sample(tgc, model, w, "--prompt", PROMPT, "--tokens", n, "--temperature", "1", "--seed", "7")
        again = sample(tgc, model, w, "--prompt", PROMPT, "--tokens", n, "--temperature", "1", "--seed", "7")
        other = sample(tgc, model, w, "--prompt", PROMPT, "--tokens", n, "--temperature", "1", "--seed", "8")
        check(one.startswith(PROMPT), "the output starts with the prompt")
        check(one == again, "seed 7 twice: the same text")
        check(one != other, "seed 7 and seed 8: different continuations")

        # Greedy against PyTorch.
        pids = list(PROMPT.encode())
        plist = ",".join(map(str, pids))
        greedy = ids_of(sample(tgc, model, w, "--prompt-tokens", plist, "--tokens", n, "--temperature", "0"))
        check(greedy[:len(pids)] == pids and len(greedy) == len(pids) + a.tokens,
              "--prompt-tokens: the prompt's ids and %s more" % n)
        ref, margins = torch_greedy(tgc, model, w, pids, a.tokens)
        compare_greedy(greedy[len(pids):], ref, margins, "greedy")
        text = sample(tgc, model, w, "--prompt", PROMPT, "--tokens", n, "--temperature", "0")
        check(text == escape(greedy) + "\n", "--prompt TEXT prints the greedy bytes of --prompt-tokens, escaped")
        topk1 = ids_of(sample(tgc, model, w, "--prompt-tokens", plist, "--tokens", n, "--top-k", "1",
                              "--seed", "3"))
        check(topk1 == greedy, "--top-k 1 at temperature 1 is greedy")

        # A prompt longer than the context (s = 32): its last 32 tokens.
        long_ids = list(b"In the beginning God created the heaven and the earth. And the earth")
        got = ids_of(sample(tgc, model, w, "--prompt-tokens", ",".join(map(str, long_ids)), "--tokens", "8",
                            "--temperature", "0"))
        ref, margins = torch_greedy(tgc, model, w, long_ids, 8)
        compare_greedy(got[len(long_ids):], ref, margins, "a prompt of %d > 32 tokens" % len(long_ids))

        # Checkpoints: the directory, its iter_N, the file inside.
        if has_save:
            it = open(os.path.join(ck, "latest")).read().strip()
            it_dir = os.path.join(ck, "iter_%07d" % int(it))
            check(int(it) == a.iters, "the checkpoint is of the last step")
            for wt in (ck, it_dir, os.path.join(it_dir, "model.safetensors")):
                got = ids_of(sample(tgc, model, wt, "--prompt-tokens", plist, "--tokens", n, "--temperature", "0"))
                check(got == greedy, "--weights %s: the --export file's text" % os.path.relpath(wt, tmp))
        else:
            print("note: tgc run has no --save: the checkpoint cases are not run")

        # A compiled plan: batch 4, dropout compiled in at 0.1.
        plan = os.path.join(tmp, "gpt.plan")
        subprocess.check_call([tgc, "compile", model] + TINY + ["--set", "batch=4", "-o", plan],
                              stdout=subprocess.DEVNULL)
        got = ids_of(sample(tgc, plan, w, "--prompt-tokens", plist, "--tokens", n, "--temperature", "0", sets=[]))
        ref, margins = torch_greedy(tgc, model, w, pids, a.tokens)
        compare_greedy(got[len(pids):], ref, margins, "a compiled plan (batch 4, dropout 0.1)")

        # The KV cache against the full forward per token (--no-kv-cache).
        full = ids_of(sample(tgc, model, w, "--prompt-tokens", plist, "--tokens", n, "--temperature", "0",
                             "--no-kv-cache"))
        check(full == greedy, "--no-kv-cache: the same greedy ids as the KV cache")
        full7 = sample(tgc, model, w, "--prompt", PROMPT, "--tokens", n, "--temperature", "1", "--seed", "7",
                       "--no-kv-cache")
        check(full7 == one, "--no-kv-cache: seed 7 gives the KV cache's text")
        # 12 + 40 tokens with s = 32: a prefill, 19 decoding steps, then a window that slides.
        err = kv_check(tgc, model, w, "prefill, decoding steps, a sliding window", "--prompt", PROMPT,
                       "--tokens", n, "--temperature", "1", "--seed", "7")
        check("1 forward" not in err and "decoding steps of one" in err,
              "the summary counts the prefills and the decoding steps")
        kv_check(tgc, plan, w, "a compiled plan", "--prompt", PROMPT, "--tokens", "24", sets=[])
        kv_check(tgc, model, w, "a prompt longer than the context", "--prompt-tokens",
                 ",".join(map(str, long_ids)), "--tokens", "4")

        # A tiny Llama: rope at rt.pos, RMSNorm, SwiGLU, an untied head;
        # grouped-query attention (4 query heads over its default 2 key/value
        # heads: the cache holds the 2, before their repeat), and full heads.
        llama = os.path.join(os.path.dirname(model), "llama.tg")
        text = open(llama).read()
        for kv in ([[], ["--set", "kv_heads=4"]] if "hparam kv_heads" in text else [[]]):
            what = "Llama, %s" % ("full heads" if kv else "grouped-query")
            lw = os.path.join(tmp, "L%d.safetensors" % len(kv))
            lsets = ["--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "seq=32"] + kv
            lsets += ["--set", "ffn=128"] if "hparam ffn" in text else []
            subprocess.check_call([tgc, "run", llama] + lsets + ["--set", "batch=4", "--data", a.data,
                                   "--train-iters", "30", "--lr", "1e-2", "--export", lw, "--quiet"])
            kv_check(tgc, llama, lw, what + " (RoPE, RMSNorm, SwiGLU)", "--prompt", PROMPT, "--tokens", n,
                     "--temperature", "1", sets=lsets)
            lg = ids_of(sample(tgc, llama, lw, "--prompt-tokens", plist, "--tokens", n, "--temperature", "0",
                               sets=lsets))
            lf = ids_of(sample(tgc, llama, lw, "--prompt-tokens", plist, "--tokens", n, "--temperature", "0",
                               "--no-kv-cache", sets=lsets))
            check(lg == lf, what + ": the KV cache's greedy ids equal the full forward's")

    print("sample_test:", "FAIL" if FAILED else "PASS")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
