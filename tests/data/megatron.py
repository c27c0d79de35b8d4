#!/usr/bin/env python3
"""Megatron-LM indexed datasets (MMIDIDX) against tgc, with a writer and a
reader of the format written here from its description (docs/data.md), in
plain Python (struct only: no numpy, no torch), independent of tgc's C.

    megatron.py TGC read          datasets written here, read back by tgc
                                  (`tgc data info` / `tgc data dump`) token
                                  for token, every integer dtype, empty
                                  documents, sequences not back to back,
                                  multimodal indices
    megatron.py TGC prep TEXT     `tgc data prep` output read here: the
                                  documents are the input bytes (per file,
                                  per paragraph, with end-of-document)
    megatron.py TGC gpt2 TEXT     `tgc data prep --tokenizer gpt2` against
                                  a BPE written here (GPT-2's byte map,
                                  pre-tokenizer for ASCII, merges by rank)
    megatron.py TGC train MODEL TEXT [--set ...]
                                  training on a Megatron dataset gives the
                                  same losses, bit for bit, as on the text
                                  file with the same tokens (sequential and
                                  --shuffle; sequences back to back or not)
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

MAGIC = b"MMIDIDX\x00\x00"
# code: (struct format, size)
DTYPES = {1: ("B", 1), 2: ("b", 1), 3: ("h", 2), 4: ("i", 4), 5: ("q", 8), 6: ("d", 8), 7: ("f", 4), 8: ("H", 2)}
NAMES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 8: "uint16"}


def write_dataset(prefix, docs, code, gap=0, modes=False):
    """docs: a list of documents, each a list of sequences (lists of ints).
    gap: bytes of padding before every sequence (pointers not back to back)."""
    fmt, size = DTYPES[code]
    lengths, pointers, doc_idx, data = [], [], [0], bytearray()
    for doc in docs:
        for seq in doc:
            data += b"\x55" * gap
            pointers.append(len(data))
            lengths.append(len(seq))
            data += struct.pack("<%d%s" % (len(seq), fmt), *seq)
        doc_idx.append(len(lengths))
    with open(prefix + ".bin", "wb") as f:
        f.write(data)
    with open(prefix + ".idx", "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(struct.pack("<%di" % len(lengths), *lengths))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_idx), *doc_idx))
        if modes:
            f.write(bytes(len(lengths)))


def read_dataset(prefix):
    """Returns (dtype code, documents as flat token lists)."""
    idx = open(prefix + ".idx", "rb").read()
    binary = open(prefix + ".bin", "rb").read()
    assert idx[:9] == MAGIC, "bad magic"
    (version,) = struct.unpack_from("<Q", idx, 9)
    assert version == 1
    code = idx[17]
    nseq, ndoc = struct.unpack_from("<QQ", idx, 18)
    off = 34
    lengths = struct.unpack_from("<%di" % nseq, idx, off)
    pointers = struct.unpack_from("<%dq" % nseq, idx, off + 4 * nseq)
    doc_idx = struct.unpack_from("<%dq" % ndoc, idx, off + 12 * nseq)
    assert len(idx) == off + 12 * nseq + 8 * ndoc, "index size"
    fmt, size = DTYPES[code]
    seqs = [list(struct.unpack_from("<%d%s" % (n, fmt), binary, p)) for n, p in zip(lengths, pointers)]
    docs = [sum(seqs[doc_idx[k]:doc_idx[k + 1]], []) for k in range(ndoc - 1)]
    return code, docs


def run(cmd, expect_rc=0):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != expect_rc:
        sys.exit("FAIL: %s: exit %d (expected %d)\n%s%s" % (" ".join(cmd), p.returncode, expect_rc, p.stdout, p.stderr))
    return p.stdout


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


def dump_docs(tgc, path, *extra):
    """`tgc data dump`: a line per document."""
    out = run([tgc, "data", "dump", path] + list(extra))
    return [[int(t) for t in line.split()] for line in out.split("\n")[:-1]]


def info(tgc, path):
    out = run([tgc, "data", "info", path])
    return dict(line.split(": ", 1) for line in out.splitlines())


def mode_read(tgc, tmp):
    # Empty documents at the start, in the middle and at the end.
    docs = [[], [[]], [[1, 2, 3], [4, 5]], [[6]], [], [[7, 8, 9, 10]], [[], [11, 12]], [[13] * 5], [], [[]]]
    flat = [sum(d, []) for d in docs]
    stream = sum(flat, [])
    nempty = sum(1 for d in flat if not d)
    n = 0
    for code in (1, 2, 3, 4, 5, 8):
        for gap, modes in ((0, False), (3 * DTYPES[code][1], False), (0, True)):
            n += 1
            prefix = os.path.join(tmp, "ds%d" % n)
            write_dataset(prefix, docs, code, gap=gap, modes=modes)
            for path in (prefix, prefix + ".idx", prefix + ".bin"):
                i = info(tgc, path)
                check(i["format"] == "megatron" and i["dtype"] == NAMES[code], "%s: info %s" % (path, i))
                check(i["documents"] == str(len(docs)) and i["tokens"] == str(len(stream)),
                      "%s: counts %s" % (path, i))
                check(i["sequences"] == str(sum(len(d) for d in docs)), "%s: sequences %s" % (path, i))
            got = dump_docs(tgc, prefix)
            check(got == flat, "%s (dtype %s, gap %d): dump %s != %s" % (prefix, NAMES[code], gap, got, flat))
            # Any window: the tokens of the stream, lines at document starts.
            for start, count in ((0, 1), (2, 3), (5, 7), (11, 100), (len(stream) - 1, 1)):
                got = sum(dump_docs(tgc, prefix, "--start", str(start), "--count", str(count)), [])
                check(got == stream[start:start + count], "%s: window %d+%d: %s" % (prefix, start, count, got))
            # Windows that partition the stream print every empty document
            # once (at its position; those at the end in the last window).
            for cut in (1, 3, 6, 11):
                lines = dump_docs(tgc, prefix, "--count", str(cut)) + dump_docs(tgc, prefix, "--start", str(cut))
                check(sum(lines, []) == stream and lines.count([]) == nempty,
                      "%s: windows cut at %d: %s (%d empty documents)" % (prefix, cut, lines, nempty))
    # The writer here and the reader here agree (the reader checks prep).
    code, back = read_dataset(os.path.join(tmp, "ds1"))
    check(code == 1 and back == flat, "python reader: %s" % back)
    # A vocabulary below a token: the position and document are named.
    p = subprocess.run([tgc, "data", "info", os.path.join(tmp, "ds1"), "--vocab", "13"], capture_output=True, text=True)
    check(p.returncode == 1 and "token 13 at position 12 (document 7) is out of range for vocabulary 13" in p.stderr,
          "vocab check: %r" % p.stderr)
    print("ok: %d datasets read back token for token" % n)


def mode_prep(tgc, tmp, text_path):
    text = open(text_path, "rb").read()
    files = []
    for k, chunk in enumerate((text[:3000], b"tiny", text[3000:9000])):
        files.append(os.path.join(tmp, "in%d.txt" % k))
        open(files[-1], "wb").write(chunk)
    prefix = os.path.join(tmp, "bytes")
    out = run([tgc, "data", "prep"] + files + ["-o", prefix])
    check("3 documents, 9004 tokens (uint16, vocabulary 256)" in out, "summary: " + out)
    code, docs = read_dataset(prefix)
    check(code == 8, "dtype code %d" % code)
    check(docs == [list(open(f, "rb").read()) for f in files], "prep: the documents are not the input bytes")
    check(not [f for f in os.listdir(tmp) if f.endswith(".tmp")], "temporary files left behind")
    # --append-eod: 256 after every document.
    run([tgc, "data", "prep"] + files + ["-o", prefix + "-eod", "--append-eod"])
    code, docs = read_dataset(prefix + "-eod")
    check(docs == [list(open(f, "rb").read()) + [256] for f in files], "prep --append-eod")
    # --split-paragraphs: runs of non-blank lines.
    para = b"first para\nstill first\n\n\n  \nsecond\n\nthird without newline"
    open(os.path.join(tmp, "para.txt"), "wb").write(para)
    run([tgc, "data", "prep", os.path.join(tmp, "para.txt"), "-o", prefix + "-para", "--split-paragraphs"])
    code, docs = read_dataset(prefix + "-para")
    want = [b"first para\nstill first\n", b"second\n", b"third without newline"]
    check(docs == [list(w) for w in want], "prep --split-paragraphs: %s" % docs)
    print("ok: prep output read back here equals the input bytes")


# ---- GPT-2 BPE, written here from its description ------------------------------

def byte_map():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


# GPT-2's pattern for ASCII text (\p{L} = [A-Za-z], \p{N} = [0-9]).
PIECE = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def bpe(word, ranks):
    syms = list(word)
    while len(syms) > 1:
        pairs = [(ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(syms, syms[1:])) if (a, b) in ranks]
        if not pairs:
            break
        best = min(pairs)[1]
        pair = (syms[best], syms[best + 1])
        out, i = [], 0
        while i < len(syms):
            if i + 1 < len(syms) and (syms[i], syms[i + 1]) == pair:
                out.append(syms[i] + syms[i + 1])
                i += 2
            else:
                out.append(syms[i])
                i += 1
        syms = out
    return syms


def mode_gpt2(tgc, tmp, text_path):
    text = open(text_path, "rb").read()[:20000]
    text += b"\nIt's 2024: they'll say   'hi'  -- ok?\t\n\n  end  "
    bm = byte_map()
    vocab = {bm[b]: b for b in range(256)}
    # Merges: the most frequent pairs of a few rounds over the text's words,
    # ranked in order, so that multi-level merges happen.
    words = [m.group(0) for m in PIECE.finditer(text.decode("ascii"))]
    words = ["".join(bm[b] for b in w.encode()) for w in words]
    merges, ranks = [], {}
    for _ in range(60):
        counts = {}
        for w in words:
            for p in zip(bpe(w, ranks), bpe(w, ranks)[1:]):
                counts[p] = counts.get(p, 0) + 1
        if not counts:
            break
        pair = max(sorted(counts), key=lambda p: counts[p])
        ranks[pair] = len(merges)
        merges.append(pair)
        vocab.setdefault(pair[0] + pair[1], len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    vf, mf = os.path.join(tmp, "vocab.json"), os.path.join(tmp, "merges.txt")
    json.dump(vocab, open(vf, "w"))  # ASCII with \u escapes, as GPT-2's file
    with open(mf, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write("%s %s\n" % (a, b))
    src = os.path.join(tmp, "gpt2.txt")
    open(src, "wb").write(text)
    prefix = os.path.join(tmp, "gpt2")
    run([tgc, "data", "prep", src, "-o", prefix, "--tokenizer", "gpt2", "--vocab-file", vf, "--merge-file", mf,
         "--append-eod"])
    want = []
    for m in PIECE.finditer(text.decode("ascii")):
        want += [vocab[s] for s in bpe("".join(bm[b] for b in m.group(0).encode()), ranks)]
    want.append(vocab["<|endoftext|>"])
    code, docs = read_dataset(prefix)
    check(code == 8 and len(docs) == 1, "gpt2: dtype %d, %d documents" % (code, len(docs)))
    got = docs[0]
    if got != want:
        i = next(k for k in range(min(len(got), len(want))) if got[k] != want[k]) if got[:len(want)] != want[:len(got)] else min(len(got), len(want))
        sys.exit("FAIL: gpt2: %d tokens vs %d expected; first difference at %d: %s vs %s"
                 % (len(got), len(want), i, got[i:i + 8], want[i:i + 8]))
    check(len(got) < len(text) * 0.8, "gpt2: the merges did not shorten the text (%d tokens)" % len(got))
    print("ok: %d GPT-2 BPE tokens (%d merges) equal the reference" % (len(got), len(merges)))


def losses(log):
    return [json.loads(line)["loss"] for line in open(log)]


def mode_train(tgc, tmp, model, text_path, extra):
    text = open(text_path, "rb").read()[:40000]
    plain = os.path.join(tmp, "train.txt")
    open(plain, "wb").write(text)
    # The same stream as documents of varied sizes; once back to back
    # (prep, uint16) and once with gaps between int32 sequences (written here).
    cuts = [0, 1, 700, 701, 5000, 12345, 30000, len(text)]
    docs = [[list(text[a:b])] for a, b in zip(cuts, cuts[1:])]
    for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
        open(os.path.join(tmp, "part%d.txt" % k), "wb").write(text[a:b])
    prepped = os.path.join(tmp, "prepped")
    run([tgc, "data", "prep"] + [os.path.join(tmp, "part%d.txt" % k) for k in range(len(docs))] + ["-o", prepped])
    gapped = os.path.join(tmp, "gapped")
    write_dataset(gapped, docs, 4, gap=12)
    refs = []
    for shuffle in ([], ["--shuffle", "--seed", "7"]):
        ref = None
        for data in (plain, prepped, gapped + ".idx"):
            log = os.path.join(tmp, "log%d.jsonl" % len(os.listdir(tmp)))
            run([tgc, "run", model, "--data", data, "--train-iters", "3", "--quiet", "--log", log] + shuffle + extra)
            got = losses(log)
            check(len(got) == 3, "%s: %d logged steps" % (data, len(got)))
            if ref is None:
                ref = got
            check(got == ref, "%s %s: losses %s differ from the text file's %s" % (data, shuffle, got, ref))
        refs.append(ref)
    check(refs[0] != refs[1], "--shuffle changed nothing: %s" % refs)
    print("ok: training on Megatron datasets matches the text file bit for bit: sequential %s, shuffled %s"
          % (refs[0], refs[1]))


def main():
    tgc, mode = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        if mode == "read":
            mode_read(tgc, tmp)
        elif mode == "prep":
            mode_prep(tgc, tmp, sys.argv[3])
        elif mode == "gpt2":
            mode_gpt2(tgc, tmp, sys.argv[3])
        elif mode == "train":
            mode_train(tgc, tmp, sys.argv[3], sys.argv[4], sys.argv[5:])
        else:
            sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
