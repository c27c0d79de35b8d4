#!/usr/bin/env python3
"""docs.readme_tour: every command of README.md's "A short tour" runs.

usage: readme_tour.py TGC ROOT [--cuda-toolkit ON|OFF] [--hf-venv DIR] [--mpi ON|OFF] [--keep DIR]

The commands of the tour's ```sh block (backslash continuations joined, one
command a line, comments dropped) run in order in a temporary directory
that holds the inputs the tour names: text.txt (tests/data/kjv-64k.txt),
a.txt and b.txt (its two halves), tok.model (spm_train, a 1000-piece
unigram model of text.txt), vocab.json + merges.txt (a GPT-2 BPE of 100
merges learnt from text.txt by tests/data/megatron.py, as the tokenizer
tests make them), model.ir (HAND_IR below: a matmul, a gelu, a mean), llama-dir (a tiny
transformers LlamaForCausalLM saved with save_pretrained, made with the
venv of tests/hf) and samples/ (a link to the repository's). Everything
else a command reads (gpt.plan, log.jsonl, corpus, ckpt, llama.tg, ...) is
what an earlier tour command wrote.

A command is parsed with shlex and run with an argument vector, never a
shell; a `|` between two commands connects the two processes; words with
`*` are expanded with glob in the directory, sorted as the shell does; any
other shell syntax (redirections, `;`, `&&`) is refused, so a tour line
this test cannot run as written is noticed. Mechanical substitutions,
printed with each command:

  - `build/tgc` -> TGC;
  - `tgc run`: `--train-iters N` becomes 2 (4 with `--load`: two steps
    past the checkpoint the tour saved at step 2), added where missing;
  - `tgc run`, `tgc sample` and `tgc compile -o` of samples/*.tg: SHRINK
    below (2 layers, hidden 64, sequence 64): the tour's sizes take ~10 s
    a run on 2 cores, and `run gpt.plan` and `sample --weights ckpt` must
    see the sizes the plan and the checkpoint were made with.

Skipped, each printed with its reason: `--backend cuda` runs (a GPU), but
not `tgc compile --backend cuda ... --kernel-report` where the build has
the CUDA toolkit (NVRTC only); bench/ (minutes by design); mpirun lines
without mpirun or without MPI in tgc; a line needing spm_train, dot or the
transformers venv where it is missing; and a line naming a file that only
a skipped command makes. Every other command must exit 0. Every
`build/tgc X` of the tour must be one of `tgc --help`'s commands.
Exit 1 naming each failed command with its standard error.
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

# model.ir: a small graph written by hand in the text IR (docs/ir.md).
HAND_IR = """tgc-ir 1
model "tour"
%x = input : f32[4, 8]
%w = param init=normal : f32[8, 8]
%y = matmul(%x, %w) : f32[4, 8]
%h = gelu(%y) : f32[4, 8]
%loss = mean(%h) : f32[] loss
"""
SHRINK = ["--set", "layers=2", "--set", "hidden=64", "--set", "seq=64"]
TIMEOUT = 180


def tour_lines(readme):
    text = open(readme).read().split("\n")
    start = next(i for i, l in enumerate(text) if l.strip() == "## A short tour")
    begin = next(i for i in range(start, len(text)) if text[i].strip() == "```sh")
    end = next(i for i in range(begin + 1, len(text)) if text[i].strip() == "```")
    cmds, cur, first = [], "", None
    for n in range(begin + 1, end):
        line = text[n]
        if first is None:
            first = n + 1
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        words = shlex.split(cur, comments=True)
        if words:
            cmds.append((first, cur.strip(), words))
        cur, first = "", None
    return cmds


def make_inputs(work, root, venv, log):
    shutil.copy(os.path.join(root, "tests", "data", "kjv-64k.txt"), os.path.join(work, "text.txt"))
    data = open(os.path.join(work, "text.txt"), "rb").read()
    half = data.index(b"\n", len(data) // 2) + 1
    open(os.path.join(work, "a.txt"), "wb").write(data[:half])
    open(os.path.join(work, "b.txt"), "wb").write(data[half:])
    os.symlink(os.path.join(root, "samples"), os.path.join(work, "samples"))
    with open(os.path.join(work, "model.ir"), "w") as f:
        f.write(HAND_IR)
    missing = {}
    if shutil.which("spm_train"):
        subprocess.run(["spm_train", "--input=text.txt", "--model_prefix=tok", "--vocab_size=1000",
                        "--model_type=unigram", "--minloglevel=2"], cwd=work, check=True, capture_output=True)
        os.remove(os.path.join(work, "tok.vocab"))
    else:
        missing["tok.model"] = "spm_train is not installed (Debian's sentencepiece)"
    sys.path.insert(0, os.path.join(root, "tests", "data"))
    import megatron
    bm = megatron.byte_map()
    counts = {}
    for p in megatron.gpt2_pieces(data):
        s = "".join(bm[b] for b in p)
        counts[s] = counts.get(s, 0) + 1
    _, _, vf, mf = megatron.write_bpe(work, "gpt2", megatron.learn_merges(counts, 100))
    os.rename(vf, os.path.join(work, "vocab.json"))
    os.rename(mf, os.path.join(work, "merges.txt"))
    vpy = os.path.join(venv, "bin", "python") if venv else ""
    if vpy and os.access(vpy, os.X_OK):
        # A tiny LLaMA with a byte vocabulary (the tour fine-tunes it on the byte corpus).
        code = ("import sys, torch\nfrom transformers import LlamaConfig, LlamaForCausalLM\ntorch.manual_seed(0)\n"
                "LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,"
                " num_attention_heads=4, num_key_value_heads=2, vocab_size=256, max_position_embeddings=64,"
                " tie_word_embeddings=False)).save_pretrained(sys.argv[1])\n")
        subprocess.run([vpy, "-c", code, os.path.join(work, "llama-dir")], check=True, capture_output=True)
    else:
        missing["llama-dir"] = "no transformers venv (scripts/lib/hf_venv.sh; build/hf-venv)"
    log("inputs: text.txt a.txt b.txt vocab.json merges.txt model.ir samples/ %s%s" % (
        "" if "tok.model" in missing else "tok.model ", "" if "llama-dir" in missing else "llama-dir"))
    return missing


def outputs(words):
    """The paths a command writes (for the skipped-command bookkeeping)."""
    out = []
    for i, w in enumerate(words[:-1]):
        if w in ("-o", "--output", "--save", "--log", "--trace", "--weights") and (w != "--weights" or
                                                                                  "import" in words):
            out.append(words[i + 1])
    return out


def tgc_cmd(words):
    """(index of the tgc word, its subcommand) or (None, None)."""
    for i, w in enumerate(words):
        if w == "build/tgc" and (i == 0 or words[0] == "mpirun"):  # not an argument: --tgc build/tgc
            return i, (words[i + 1] if i + 1 < len(words) else "")
    return None, None


def substitute(words, tgc):
    """The words as run, and the substitutions made."""
    notes = []
    i, sub = tgc_cmd(words)
    if i is None:
        return words, notes
    w = list(words)
    w[i] = tgc
    notes.append("build/tgc -> %s" % tgc)
    model = w[i + 2] if i + 2 < len(w) else ""
    if sub == "run":
        n = 4 if "--load" in w else 2
        if "--train-iters" in w:
            k = w.index("--train-iters")
            if w[k + 1] != str(n):
                notes.append("--train-iters %s -> %d" % (w[k + 1], n))
                w[k + 1] = str(n)
        else:
            w += ["--train-iters", str(n)]
            notes.append("+ --train-iters %d" % n)
    if model.startswith("samples/") and (sub in ("run", "sample") or (sub == "compile" and "-o" in w)):
        w += SHRINK
        notes.append("+ " + " ".join(SHRINK))
    return w, notes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("root")
    ap.add_argument("--cuda-toolkit", default="OFF")
    ap.add_argument("--hf-venv", default="")
    ap.add_argument("--mpi", default="ON")
    ap.add_argument("--keep", default="")
    a = ap.parse_args()
    a.root = os.path.abspath(a.root)
    a.hf_venv = os.path.abspath(a.hf_venv) if a.hf_venv else ""
    tgc = os.path.abspath(a.tgc)
    toolkit = a.cuda_toolkit.upper() in ("ON", "TRUE", "1", "YES")
    t0 = time.time()

    def log(s):
        print(s, flush=True)

    helptext = subprocess.run([tgc, "--help"], capture_output=True, text=True).stdout
    known = set(re.findall(r"^  ([a-z][a-z-]*) ", helptext.split("commands:", 1)[1], re.M))
    cmds = tour_lines(os.path.join(a.root, "README.md"))
    failures = []
    for n, _, words in cmds:
        i, sub = tgc_cmd(words)
        if i is not None and sub not in known:
            failures.append("README.md:%d: 'tgc %s' is no tgc command (tgc --help: %s)" % (n, sub, ", ".join(
                sorted(known))))
    if len(cmds) < 20:
        failures.append("README.md: the tour has %d commands; the parse lost some" % len(cmds))

    work = a.keep or tempfile.mkdtemp(prefix="tgc-tour-")
    os.makedirs(work, exist_ok=True)
    unavailable = make_inputs(work, a.root, a.hf_venv, log)
    if not shutil.which("dot"):
        unavailable["|dot"] = "Graphviz's dot is not installed"
    ran = skipped = 0
    for n, line, words in cmds:
        where = "README.md:%d" % n
        reason = None
        i, sub = tgc_cmd(words)
        if words[0].startswith("bench/") or any(w.startswith("bench/") for w in words[:2]):
            reason = "a benchmark (bench/: minutes by design)"
        elif "cuda" in [words[k + 1] for k, w in enumerate(words[:-1]) if w == "--backend"]:
            if sub == "compile" and "--kernel-report" in words:
                if not toolkit:
                    reason = "compile --backend cuda needs NVRTC: this build has no CUDA toolkit"
            else:
                reason = "needs a GPU (--backend cuda)"
        elif words[0] == "mpirun" and not (shutil.which("mpirun") and a.mpi.upper() in ("ON", "TRUE", "1")):
            reason = "no mpirun, or tgc built without MPI"
        if not reason:
            for w in words:
                if w in unavailable:
                    reason = "needs %s: %s" % (w, unavailable[w])
                    break
                if w == "|" and "|dot" in unavailable:
                    reason = unavailable["|dot"]
        if reason:
            skipped += 1
            log("SKIP %s: %s\n     (%s)" % (where, line, reason))
            for o in outputs(words):
                unavailable[o] = "made by the skipped %s" % where
            continue
        stages, cur = [], []
        bad = [w for w in words if w in (">", ">>", "<", ";", "&&", "||", "&", "2>")]
        if bad:
            failures.append("%s: shell syntax this test does not run: %s" % (where, " ".join(bad)))
            continue
        for w in words:
            if w == "|":
                stages.append(cur)
                cur = []
            elif any(c in w for c in "*?[") and not w.startswith("-"):
                hits = sorted(os.path.relpath(p, work) for p in glob.glob(os.path.join(work, w)))
                cur += hits or [w]  # no match: the word as is, as the shell leaves it
            else:
                cur.append(w)
        stages.append(cur)
        run_stages, notes = [], []
        for s in stages:
            s2, nt = substitute(s, tgc)
            run_stages.append(s2)
            notes += nt
        log("RUN  %s: %s" % (where, " | ".join(shlex.join(s) for s in run_stages)))
        if notes:
            log("     (substituted: %s)" % "; ".join(dict.fromkeys(notes)))
        ran += 1
        t = time.time()
        procs, errs = [], []
        prev = None
        try:
            for k, s in enumerate(run_stages):
                last = k == len(run_stages) - 1
                e = tempfile.TemporaryFile()
                p = subprocess.Popen(s, cwd=work, stdin=prev.stdout if prev else subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL if last else subprocess.PIPE, stderr=e)
                if prev:
                    prev.stdout.close()  # the reader holds the pipe alone: a writer sees its reader end
                procs.append(p)
                errs.append(e)
                prev = p
            rcs = [p.wait(timeout=TIMEOUT) for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
                p.wait()
            rcs = ["timeout after %d s" % TIMEOUT] * len(procs)
        except OSError as ex:
            rcs = ["cannot start: %s" % ex]
        stderr = ""
        for e in errs:
            e.seek(0)
            stderr += e.read().decode(errors="replace")
            e.close()
        log("     %.1f s, exit %s" % (time.time() - t, " | ".join(map(str, rcs))))
        if any(rc != 0 for rc in rcs):
            failures.append("%s: exit %s: %s\n%s" % (where, " | ".join(map(str, rcs)), line, stderr.rstrip()))
            log("     FAILED; its standard error:\n" + stderr.rstrip())
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    log("readme_tour: %d commands, %d run, %d skipped, %d failed, %.0f s" % (
        len(cmds), ran, skipped, len(failures), time.time() - t0))
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
