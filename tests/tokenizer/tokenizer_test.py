#!/usr/bin/env python3
"""Tokenizers under Megatron's names (docs/data.md "Tokenizers").

SentencePieceTokenizer against Debian's sentencepiece tools, on models that
spm_train builds here from the KJV text (a unigram model and a BPE model
with byte fallback, a few hundred pieces each):
  - `tgc data prep --tokenizer-type SentencePieceTokenizer` gives, line by
    line (--split-paragraphs over one line per paragraph), the ids of
    `spm_encode --output_format=id`, for KJV lines and Unicode lines;
  - `tgc sample --prompt TEXT --tokens 0` prints spm_decode(spm_encode(TEXT))
    (the round trip) and says how many tokens the prompt made;
  - a sampled continuation: --prompt-tokens with spm_encode's ids prints
    ids, --prompt with the text (same seed) prints text equal to spm_decode
    of those ids;
  - a safetensors file whose __metadata__ names the tokenizer
    (tgc.tokenizer_type, tgc.tokenizer_model relative to the file) samples
    as with the flags;
  - `tgc run --data TEXT --tokenizer-type ...` trains on the same tokens as
    `tgc data prep` of the text (identical losses).
GPT2BPETokenizer: data prep against the reference encoder of
tests/data/megatron.py (openai's encoder.py written out in Python) on merges
learned from the text; the sample round trip gives the prompt back byte for
byte and a sampled continuation decodes as GPT-2's byte_decoder decodes its
ids; the metadata case (tgc.vocab_file, tgc.merge_file); transformers'
GPT2Tokenizer gives the same ids (and decodes them back) where transformers
is importable, here or in HF_PYTHON (the Hugging Face tests' venv); with
transformers and `tgc import hf`, a GPT-2 saved by transformers with that
tokenizer imports, and tgc sample's greedy text from the prompt text (the
tokenizer taken from the weights' metadata) is transformers' generate
decoded by GPT2Tokenizer.
Bad input: a model vocabulary smaller than the tokenizer's (both sizes
named), a missing, corrupt, empty or /dev/zero tokenizer model, a vocab file
that is not JSON, an unknown type, options that do not go together.

usage: tokenizer_test.py TGC MODEL TEXT [HF_PYTHON]
"""
import json, os, shutil, struct, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
import megatron  # noqa: E402  (the GPT-2 BPE reference and the dataset reader)

FAILED = []
HF_PYTHON = None
TINY = ["--set", "layers=1", "--set", "hidden=32", "--set", "heads=2", "--set", "seq=32"]
UNICODE = ["naïve café, crème brûlée", "Ελληνικά and Русский text", "中文字符 and 日本語",
           "emoji \U0001F600 \U0001F44D\U0001F3FD done", "tabs\tand  double  spaces", "digits 12345 and ½"]


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        FAILED.append(what)


def run(cmd, rc=0, stdin=None, timeout=300):
    p = subprocess.run(cmd, capture_output=True, timeout=timeout, input=stdin)
    if rc is not None and p.returncode != rc:
        sys.stderr.write(p.stderr.decode("utf-8", "replace"))
        raise SystemExit("FAIL: exit %d (expected %d): %s" % (p.returncode, rc, " ".join(cmd)))
    return p


def spm_ids(model, lines):
    out = run(["spm_encode", "--model=" + model, "--output_format=id"], stdin="\n".join(lines).encode() + b"\n")
    return [[int(t) for t in l.split()] for l in out.stdout.decode().split("\n")[:len(lines)]]


def spm_text(model, ids):
    out = run(["spm_decode", "--model=" + model, "--input_format=id"],
              stdin=" ".join(str(i) for i in ids).encode() + b"\n")
    return out.stdout.decode("utf-8").rstrip("\n")


def prep_docs(tgc, tmp, lines, tok, name):
    """data prep of the lines, one paragraph each: the documents' tokens."""
    src = os.path.join(tmp, name + ".txt")
    open(src, "w", encoding="utf-8").write("\n\n".join(lines) + "\n")
    prefix = os.path.join(tmp, name)
    run([tgc, "data", "prep", src, "-o", prefix, "--split-paragraphs"] + tok)
    return megatron.read_dataset(prefix)[1]


def sample(tgc, model, weights, vocab, args, rc=0):
    p = run([tgc, "sample", model] + TINY + ["--set", "vocab=%d" % vocab, "--weights", weights] + args, rc=rc)
    return p.stdout, p.stderr.decode("utf-8", "replace")


def weights_for(tgc, model, text, tmp, vocab):
    w = os.path.join(tmp, "w%d.safetensors" % vocab)
    run([tgc, "run", model] + TINY + ["--set", "vocab=%d" % vocab, "--data", text, "--train-iters", "2", "--quiet",
                                      "--export", w])
    return w


def with_metadata(src, dst, meta):
    """src's tensors with meta added to its __metadata__."""
    raw = open(src, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.setdefault("__metadata__", {}).update(meta)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])


def losses(log):
    return [json.loads(l)["loss"] for l in open(log) if l.strip()]


def sentencepiece(tgc, model, text, tmp):
    lines = [l for l in open(text, encoding="utf-8").read().split("\n") if l.strip()][:300]
    for kind, extra in (("unigram", []), ("bpe", ["--byte_fallback=true"])):
        prefix = os.path.join(tmp, "spm-" + kind)
        run(["spm_train", "--input=" + text, "--model_prefix=" + prefix, "--vocab_size=400", "--model_type=" + kind,
             "--minloglevel=2", "--num_threads=1"] + extra)
        sp = prefix + ".model"
        tok = ["--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", sp]
        for name, ls in (("kjv", lines), ("unicode", UNICODE)):
            got, want = prep_docs(tgc, tmp, ls, tok, "%s-%s" % (kind, name)), spm_ids(sp, ls)
            bad = [i for i in range(len(ls)) if got[i] != want[i]] if len(got) == len(want) else [-1]
            check(not bad, "%s %s: data prep's ids of %d lines equal spm_encode's%s" % (
                kind, name, len(ls), "" if not bad else " (first difference: line %d: %s against %s)" % (
                    bad[0], got[bad[0]] if bad[0] >= 0 else len(got), want[bad[0]] if bad[0] >= 0 else len(want))))
        if kind == "bpe":
            check(any(i for l in spm_ids(sp, UNICODE) for i in l if 3 <= i < 259),
                  "bpe: the Unicode lines use byte-fallback pieces")
        w = weights_for(tgc, model, text, tmp, 400)
        for prompt in ["And God said unto Moses", UNICODE[0], UNICODE[3]]:
            out, err = sample(tgc, model, w, 400, tok + ["--prompt", prompt, "--tokens", "0"])
            ids = spm_ids(sp, [prompt])[0]
            want = spm_text(sp, ids)
            check(out.decode("utf-8") == want + "\n", "%s: the round trip of %r is spm_decode(spm_encode()) %r (got %r)"
                  % (kind, prompt, want, out.decode("utf-8", "replace")))
            said = [l for l in err.split("\n") if "the prompt is" in l]
            check("the prompt is %d tokens" % len(ids) in err, "%s: %r is %d tokens: %s" % (
                kind, prompt, len(ids), said[0] if said else err.strip()))
        prompt = "And the LORD spake"
        ids = spm_ids(sp, [prompt])[0]
        gen = ["--tokens", "24", "--seed", "7", "--temperature", "1"]
        out_ids, _ = sample(tgc, model, w, 400, tok + ["--prompt-tokens", ",".join(map(str, ids))] + gen)
        got_ids = [int(t) for t in out_ids.decode().strip().split(",")]
        check(got_ids[:len(ids)] == ids and len(got_ids) == len(ids) + 24, "%s: --prompt-tokens: %d ids" %
              (kind, len(got_ids)))
        out, _ = sample(tgc, model, w, 400, tok + ["--prompt", prompt] + gen)
        want = spm_text(sp, got_ids)
        check(out.decode("utf-8") == want + "\n", "%s: the sampled text is spm_decode of the sampled ids: %r (%r)" %
              (kind, out.decode("utf-8", "replace"), want))
        meta = os.path.join(tmp, "meta-%s.safetensors" % kind)
        os.symlink(sp, os.path.join(tmp, "beside-%s.model" % kind))
        with_metadata(w, meta, {"tgc.tokenizer_type": "SentencePieceTokenizer",
                                "tgc.tokenizer_model": "beside-%s.model" % kind})
        cwd_out = run([tgc, "sample", model] + TINY + ["--set", "vocab=400", "--weights", meta, "--prompt", prompt] +
                      gen, timeout=300)
        check(cwd_out.stdout == out, "%s: the weights' __metadata__ tokenizer samples as the flags do" % kind)
        check("named by the weights' __metadata__" in cwd_out.stderr.decode(), "%s: and says so" % kind)
        if kind == "unigram":
            # tgc run on the text through the tokenizer = on data prep's tokens.
            src = os.path.join(tmp, "train.txt")
            open(src, "w", encoding="utf-8").write("\n".join(lines[:200]) + "\n")
            run([tgc, "data", "prep", src, "-o", os.path.join(tmp, "train")] + tok)
            la, lb = os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")
            base = [tgc, "run", model] + TINY + ["--set", "vocab=400", "--train-iters", "3", "--quiet"]
            run(base + ["--data", src, "--log", la] + tok)
            run(base + ["--data", os.path.join(tmp, "train"), "--log", lb])
            check(losses(la) == losses(lb) and len(losses(la)) == 3,
                  "tgc run --data TEXT --tokenizer-type SentencePieceTokenizer trains on data prep's tokens: %s and %s"
                  % (losses(la), losses(lb)))
            p = run([tgc, "run", model] + TINY + ["--set", "vocab=256", "--train-iters", "1", "--data", src] + tok, rc=1)
            err = p.stderr.decode()
            check("400" in err and "256" in err and "cover" in err, "run: a vocabulary of 256 under 400 pieces: " +
                  err.strip())
            _, err = sample(tgc, model, weights_for(tgc, model, text, tmp, 300), 300, tok + ["--prompt", "x", "--tokens",
                                                                                           "1"], rc=1)
            check("400" in err and "300" in err and "cover" in err, "sample: vocabulary 300 under 400 pieces: " +
                  err.strip())
    return sp


def gpt2(tgc, model, text, tmp):
    data = open(text, "rb").read()
    bm = megatron.byte_map()
    pieces = ["".join(bm[b] for b in p) for p in megatron.gpt2_pieces(data)]
    counts = {}
    for p in pieces:
        counts[p] = counts.get(p, 0) + 1
    merges = megatron.learn_merges(counts, 100)
    vocab, ranks, vf, mf = megatron.write_bpe(tmp, "gpt2", merges)
    tok = ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vf, "--merge-file", mf]
    lines = [l for l in data.decode().split("\n") if l.strip()][:100] + UNICODE
    got = prep_docs(tgc, tmp, lines, tok, "gpt2-lines")
    # each paragraph is its line and the newline after it
    want = [[vocab[s] for p in megatron.gpt2_pieces(l.encode() + b"\n") for s in megatron.bpe(
        "".join(bm[b] for b in p), ranks)] for l in lines]
    check(got == want, "gpt2: data prep's ids of %d lines equal the reference encoder's" % len(lines))
    # transformers' GPT2Tokenizer, in this interpreter or the Hugging Face
    # tests' venv (HF_PYTHON: build/hf-venv/bin/python), where there is one.
    hf = [py for py in (sys.executable, HF_PYTHON) if py and os.path.exists(py) and subprocess.run(
        [py, "-c", "import transformers"], capture_output=True).returncode == 0]
    if not hf:
        print("note: transformers is not importable here (nor in %s); GPT2Tokenizer's ids not compared" % HF_PYTHON)
    else:
        prog = ("import json, sys; from transformers import GPT2Tokenizer; v, m, ls = json.load(sys.stdin); "
                "t = GPT2Tokenizer(v, m); print(json.dumps([t.encode(l) for l in ls] + [t.decode(t.encode(l)) "
                "for l in ls]))")
        texts = [l + "\n" for l in lines]
        p = run([hf[0], "-c", prog], stdin=json.dumps([vf, mf, texts]).encode())
        res = json.loads(p.stdout)
        check(got == res[:len(lines)], "gpt2: the ids equal transformers' GPT2Tokenizer's (%s)" % hf[0])
        check(res[len(lines):] == texts, "gpt2: and GPT2Tokenizer decodes them to the lines")
    V = len(vocab)
    w = weights_for(tgc, model, text, tmp, V)
    for prompt in ["And God said unto Moses", UNICODE[2], UNICODE[3]]:
        out, _ = sample(tgc, model, w, V, tok + ["--prompt", prompt, "--tokens", "0"])
        check(out.decode("utf-8") == prompt + "\n", "gpt2: the round trip of %r gives it back" % prompt)
    prompt = "And the LORD spake"
    ids = [vocab[s] for p in megatron.gpt2_pieces(prompt.encode()) for s in megatron.bpe(
        "".join(bm[b] for b in p), ranks)]
    gen = ["--tokens", "24", "--seed", "7", "--temperature", "1"]
    out_ids, _ = sample(tgc, model, w, V, tok + ["--prompt-tokens", ",".join(map(str, ids))] + gen)
    got_ids = [int(t) for t in out_ids.decode().strip().split(",")]
    inv, byte_of = {i: s for s, i in vocab.items()}, {c: b for b, c in bm.items()}
    want = b"".join(bytes(byte_of[c] for c in inv[i]) for i in got_ids if i != vocab["<|endoftext|>"])
    want_eod = b"".join(bytes(byte_of[c] for c in inv[i]) if i != vocab["<|endoftext|>"] else b"<|endoftext|>"
                        for i in got_ids)
    out, _ = sample(tgc, model, w, V, tok + ["--prompt", prompt] + gen)
    check(out == want_eod + b"\n", "gpt2: the sampled text is the byte_decoder's of the sampled ids: %r (%r)" %
          (out, want))
    meta = os.path.join(tmp, "meta-gpt2.safetensors")
    with_metadata(w, meta, {"tgc.tokenizer_type": "GPT2BPETokenizer", "tgc.vocab_file": "gpt2.json",
                            "tgc.merge_file": "gpt2.txt"})
    p = run([tgc, "sample", model] + TINY + ["--set", "vocab=%d" % V, "--weights", meta, "--prompt", prompt] + gen)
    check(p.stdout == out, "gpt2: the weights' __metadata__ tokenizer samples as the flags do")
    return vf, mf, w, V


HF_GREEDY = r"""
import json, sys, torch
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer
vf, mf, out, prompt = sys.argv[1:5]
tok = GPT2Tokenizer(vf, mf)
torch.manual_seed(0)
v = len(tok)
m = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=32, vocab_size=v, bos_token_id=v - 1,
                               eos_token_id=v - 1)).eval()
m.save_pretrained(out)
tok.save_pretrained(out)
ids = tok.encode(prompt)
gen = m.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False, pad_token_id=0)[0].tolist()
print(json.dumps({"ids": ids, "gen": gen, "text": tok.decode(gen)}))
"""


def hf_import(tgc, tmp, vf, mf):
    """A GPT-2 saved by transformers with its tokenizer, through `tgc import
    hf` (which names the tokenizer in the weights' metadata): tgc sample's
    greedy text from the prompt text equals transformers' generate decoded
    by GPT2Tokenizer. Needs transformers and tgc's import command."""
    hf = [py for py in (sys.executable, HF_PYTHON) if py and os.path.exists(py) and subprocess.run(
        [py, "-c", "import transformers"], capture_output=True).returncode == 0]
    has_import = subprocess.run([tgc, "import", "--help"], capture_output=True).returncode == 0
    if not hf or not has_import:
        print("note: %s; the Hugging Face import's tokenizer not checked" %
              ("transformers is not importable" if not hf else "this tgc has no import command"))
        return
    src, prompt = os.path.join(tmp, "hf-gpt2"), "And God said"
    ref = json.loads(run([hf[0], "-c", HF_GREEDY, vf, mf, src, prompt]).stdout.decode().strip().split("\n")[-1])
    tg, w = os.path.join(tmp, "hf.tg"), os.path.join(tmp, "hf.safetensors")
    run([tgc, "import", "hf", src, "-o", tg, "--weights", w])
    p = run([tgc, "sample", tg, "--weights", w, "--prompt", prompt, "--tokens", "12", "--temperature", "0"])
    err = p.stderr.decode()
    check("named by the weights' __metadata__" in err and "the prompt is %d tokens" % len(ref["ids"]) in err,
          "hf import: sample takes the imported GPT2BPETokenizer (%d prompt tokens)" % len(ref["ids"]))
    got = p.stdout.decode("utf-8", "replace")  # GPT2Tokenizer.decode's errors="replace"
    check(got == ref["text"] + "\n", "hf import: the greedy text %r equals transformers' generate decoded by "
          "GPT2Tokenizer (%r)" % (got, ref["text"]))
    p = run([tgc, "sample", tg, "--weights", w, "--prompt-tokens", ",".join(map(str, ref["ids"])), "--tokens", "12",
             "--temperature", "0"])
    check(p.stdout.decode().strip() == ",".join(map(str, ref["gen"])), "hf import: and its ids are generate's")


def bad_input(tgc, model, tmp, sp, vf, mf, w, V):
    def refused(args, rc, words, what):
        p = subprocess.run([tgc] + args, capture_output=True, timeout=120)
        err = p.stderr.decode("utf-8", "replace")
        check(p.returncode == rc and all(x in err for x in words), "%s: exit %d: %s" % (what, p.returncode, err.strip()))
    src = os.path.join(tmp, "bad.txt")
    open(src, "w").write("some text\n")
    out = os.path.join(tmp, "bad")
    spm = ["data", "prep", src, "-o", out, "--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model"]
    corrupt = os.path.join(tmp, "corrupt.model")
    raw = open(sp, "rb").read()
    open(corrupt, "wb").write(raw[:len(raw) // 3])
    empty = os.path.join(tmp, "empty.model")
    open(empty, "wb").close()
    missing = os.path.join(tmp, "missing.model")
    refused(spm + [missing], 1, [missing, "cannot read"], "a missing SentencePiece model")
    refused(spm + [corrupt], 1, [corrupt, "not a SentencePiece model"], "a truncated SentencePiece model")
    refused(spm + [empty], 1, [empty, "not a SentencePiece model"], "an empty SentencePiece model")
    refused(spm + [vf], 1, [vf, "not a SentencePiece model"], "a vocab.json as the SentencePiece model")
    refused(spm + ["/dev/zero"], 1, ["/dev/zero", "not a regular file"], "/dev/zero as the SentencePiece model")
    notjson = os.path.join(tmp, "notjson.json")
    open(notjson, "w").write("this is not JSON\n")
    bpe = ["data", "prep", src, "-o", out, "--tokenizer-type", "GPT2BPETokenizer", "--merge-file", mf, "--vocab-file"]
    refused(bpe + [notjson], 1, [notjson + ":1:1:", "expected '{'"], "a vocab file that is not JSON")
    refused(bpe + ["/dev/zero"], 1, ["/dev/zero", "not a regular file"], "/dev/zero as the vocab file")
    refused(["data", "prep", src, "-o", out, "--tokenizer-type", "Llama3Tokenizer"], 2,
            ["'Llama3Tokenizer'", "GPT2BPETokenizer"], "an unknown --tokenizer-type")
    refused(["sample", model] + TINY + ["--set", "vocab=%d" % V, "--weights", w, "--prompt", "x", "--tokens", "1",
                                        "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vf], 2,
            ["--merge-file"], "sample: GPT2BPETokenizer without --merge-file")
    refused(["sample", model] + TINY + ["--set", "vocab=%d" % V, "--weights", w, "--prompt", "x", "--tokens", "1",
                                        "--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", corrupt], 1,
            [corrupt, "not a SentencePiece model"], "sample: a corrupt SentencePiece model")
    meta = os.path.join(tmp, "meta-bad.safetensors")
    with_metadata(w, meta, {"tgc.tokenizer_type": "WordPiece"})
    refused(["sample", model] + TINY + ["--set", "vocab=%d" % V, "--weights", meta, "--prompt", "x", "--tokens", "1"],
            1, [meta, "'WordPiece'"], "sample: an unknown tokenizer in the weights' __metadata__")
    refused(["run", model] + TINY + ["--train-iters", "1", "--inputs", w, "--tokenizer-type", "GPT2BPETokenizer",
                                     "--vocab-file", vf, "--merge-file", mf], 2, ["--data"],
            "run: a tokenizer without --data")


def main():
    global HF_PYTHON
    tgc, model, text = sys.argv[1:4]
    HF_PYTHON = sys.argv[4] if len(sys.argv) > 4 else None
    missing = [t for t in ("spm_train", "spm_encode", "spm_decode") if not shutil.which(t)]
    if missing:
        sys.exit("FAIL: %s missing: the reference is Debian's sentencepiece package (apt-get install sentencepiece; "
                 "scripts/lib/deps.sh lists it)" % ", ".join(missing))
    with tempfile.TemporaryDirectory() as tmp:
        sp = sentencepiece(tgc, model, text, tmp)
        vf, mf, w, V = gpt2(tgc, model, text, tmp)
        hf_import(tgc, tmp, vf, mf)
        bad_input(tgc, model, tmp, sp, vf, mf, w, V)
    if FAILED:
        sys.exit("FAILED: %d checks" % len(FAILED))
    print("all tokenizer checks passed")


if __name__ == "__main__":
    main()
