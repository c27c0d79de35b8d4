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
                                  openai's encoder.py written here (GPT-2's
                                  pattern with the `regex` module, the byte
                                  map, merges by rank) on English and a
                                  Unicode corpus; the pieces against the
                                  pattern's findall
    megatron.py TGC train MODEL TEXT [--set ...]
                                  training on a Megatron dataset gives the
                                  same losses, bit for bit, as on the text
                                  file with the same tokens (sequential and
                                  --shuffle; sequences back to back or not)
"""
import json
import os
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
#
# The reference is openai's encoder.py: GPT-2's pattern with the Python
# `regex` module (Debian's python3-regex), bytes_to_unicode, and bpe() with
# merges by rank. It works on decoded text; tgc's rule for bytes that are not
# valid UTF-8 is to treat each as a character that is neither letter, number
# nor space, which is what the text decoded with errors="surrogateescape"
# gives (U+DC80 + byte, category Cs), so the reference decodes that way.

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Text where Unicode classes matter: Unicode spaces (NBSP runs, U+2028,
# U+3000, ...), controls that Python's str.isspace() calls space but \s does
# not, combining marks, CJK, emoji (modifiers, ZWJ sequences, flags,
# keycaps), Arabic and Hebrew (with marks and bidi controls), digits of
# other scripts, contractions, mixed spacing; then bytes that are not UTF-8.
UNICODE_LINES = [
    "x \u00a0y, a\u00a0\u00a0\u00a0b and \u00a0\u00a0 end\u00a0\u00a0",
    "5\u00a0000 km \u00a05 \u00a0\u00a0x \u00a0\u00a0\u00a0",
    "one\u2028two\u2029three \u2028 four\u3000\u3000five \u3000six",
    "em\u2003space\u2003\u2003x, narrow\u202fnbsp, math\u205fspace, ogham\u1680mark, nel\u0085next",
    "mongolian\u180eseparator, zero\u200bwidth, bom\ufeffhere, info\x1cseparator\x1f\x1e",
    "cafe\u0301 cre\u0300me bru\u0302le\u0301e \u0301x e\u0301\u0302\u0303",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e, \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "\u4e2d\u6587\u5b57\u7b26\u548c\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u300c\u5f15\u7528\u300d\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8 \uff8a\uff9d\uff76\uff78 \uff21\uff22\uff23",
    "\U0001F600 \U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family",
    "\U0001F1EF\U0001F1F5 flag 1\ufe0f\u20e3 keycap \u2764\ufe0f heart \U0001F3F3\ufe0f\u200d\U0001F308",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u061f \u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u0651\u064e\u0629",
    "\u05e2\u05d1\u05e8\u05d9\u05ea \u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd \u200f\u05d0\u200e rtl\u202eoverride\u202c",
    "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669 \u06f1\u06f2\u06f3 \u0967\u0968\u0969 "
    "\uff11\uff12\uff13 x\u00b2\u00b3 \u216b \u00bd \u2460\u2461 12\u0663",
    "it's I'M we'll've they'd you're 's ''s don\u2019t o'clock 'tis 'S 'll",
    "a  b a \t b  \n  x\t\tword \r\n\r\n\f\v end   ",
    "\u0141\u00f3d\u017a \u00c6\u00d8\u00c5\u00df \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac "
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u01c5ungla \u02b0aspirated",
    "\u20ac100 \u00a9\u00ae\u2122 \u2026 \u2014 -- !? \u00bfqu\u00e9? \u00a1s\u00ed!",
]
INVALID_UTF8 = (b"\nab\xffcd \xff \xff x\xe2\x82y \x80\x80z \xc0\xaf \xe0\x80\xaf \xed\xa0\x80 "
                b"\xf4\x90\x80\x80 \xf8\x88\x80\x80\x80 \xfe\xff \xc3( \xef\xbf\xbe \xf4\x8f\xbf\xbf "
                b"nul\x00byte \xc2\xa0\xc2 12\xd9\xa3\xd9 \xe2\x82")
UNICODE_TEXT = "\n".join(UNICODE_LINES).encode("utf-8") + INVALID_UTF8


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


def gpt2_pieces(data):
    """The reference pre-tokenizer: the pattern's findall, as bytes."""
    try:
        import regex  # Debian's python3-regex
    except ImportError:
        sys.exit("FAIL: the GPT-2 reference needs Python's regex module (Debian: apt-get install python3-regex)")
    text = data.decode("utf-8", "surrogateescape")
    return [p.encode("utf-8", "surrogateescape") for p in regex.findall(GPT2_PATTERN, text)]


def merge_pair(syms, pair):
    out, i = [], 0
    while i < len(syms):
        if i + 1 < len(syms) and (syms[i], syms[i + 1]) == pair:
            out.append(syms[i] + syms[i + 1])
            i += 2
        else:
            out.append(syms[i])
            i += 1
    return out


def bpe(word, ranks):
    syms = list(word)
    while len(syms) > 1:
        pairs = [(ranks[p], p) for p in zip(syms, syms[1:]) if p in ranks]
        if not pairs:
            break
        syms = merge_pair(syms, min(pairs)[1])
    return syms


def learn_merges(counts, rounds):
    """GPT-2-style training: the most frequent pair, `rounds` times."""
    segs, merges = {w: list(w) for w in counts}, []
    for _ in range(rounds):
        pairs = {}
        for w, c in counts.items():
            for p in zip(segs[w], segs[w][1:]):
                pairs[p] = pairs.get(p, 0) + c
        if not pairs:
            break
        pair = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(pair)
        segs = {w: merge_pair(s, pair) for w, s in segs.items()}
    return merges


def complete_merges(words):
    """Merges that make every word of `words` (symbol strings) one token:
    pairs are merged everywhere, in turn, until no word has two symbols."""
    # where: pair -> the words holding it (dicts as ordered sets, so that
    # the merges do not depend on Python's string hashing).
    segs, where, merges, seen = {w: list(w) for w in words}, {}, [], set()
    for w, s in segs.items():
        for p in zip(s, s[1:]):
            where.setdefault(p, {})[w] = None
    while where:
        pair = next(iter(where))
        if pair not in seen:
            merges.append(pair)
            seen.add(pair)
        for w in where.pop(pair):
            for p in zip(segs[w], segs[w][1:]):
                if p in where:
                    where[p].pop(w, None)
                    if not where[p]:
                        del where[p]
            segs[w] = merge_pair(segs[w], pair)
            for p in zip(segs[w], segs[w][1:]):
                where.setdefault(p, {})[w] = None
    return merges


def write_bpe(tmp, name, merges, eod_id=None):
    """vocab.json (the 256 byte symbols, then every merge's symbol) and
    merges.txt; returns (vocab, ranks, vocab path, merges path)."""
    bm = byte_map()
    vocab, ranks = {bm[b]: b for b in range(256)}, {}
    for a, b in merges:
        ranks.setdefault((a, b), len(ranks))
        vocab.setdefault(a + b, len(vocab))
    # A vocabulary as large as eod_id says (ids far past the entry count
    # are refused): the rest are symbols no merge makes, as a real
    # vocabulary's unused slots.
    while eod_id is not None and len(vocab) < eod_id:
        vocab["<|unused%d|>" % len(vocab)] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab) if eod_id is None else eod_id
    vf, mf = os.path.join(tmp, name + ".json"), os.path.join(tmp, name + ".txt")
    json.dump(vocab, open(vf, "w"))  # ASCII with \u escapes, as GPT-2's file
    with open(mf, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write("%s %s\n" % (a, b))
    return vocab, ranks, vf, mf


def gpt2_prep(tgc, tmp, src, vf, mf, name):
    """`tgc data prep --tokenizer gpt2 --append-eod` of one file: (dtype code, tokens)."""
    prefix = os.path.join(tmp, name)
    run([tgc, "data", "prep", src, "-o", prefix, "--tokenizer", "gpt2", "--vocab-file", vf, "--merge-file", mf,
         "--append-eod"])
    code, docs = read_dataset(prefix)
    check(len(docs) == 1, "%s: %d documents" % (name, len(docs)))
    return code, docs[0]


def first_difference(got, want):
    i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
    return "%d tokens vs %d expected; first difference at %d: %s vs %s" % (len(got), len(want), i, got[i:i + 8],
                                                                         want[i:i + 8])


def gpt2_tokens_check(tgc, tmp, text):
    """Merges learned on the text (English and the Unicode corpus): tgc's
    tokens equal the reference encoder's."""
    bm = byte_map()
    pieces = ["".join(bm[b] for b in p) for p in gpt2_pieces(text)]
    counts = {}
    for p in pieces:
        counts[p] = counts.get(p, 0) + 1
    for p in gpt2_pieces(UNICODE_TEXT):  # weigh the Unicode corpus up so that its pairs merge too
        w = "".join(bm[b] for b in p)
        counts[w] += 20
    merges = learn_merges(counts, 120)
    vocab, ranks, vf, mf = write_bpe(tmp, "learned", merges)
    src = os.path.join(tmp, "gpt2.txt")
    open(src, "wb").write(text)
    code, got = gpt2_prep(tgc, tmp, src, vf, mf, "gpt2")
    want = [vocab[s] for p in pieces for s in bpe(p, ranks)] + [vocab["<|endoftext|>"]]
    check(code == 8, "gpt2: dtype code %d" % code)
    check(got == want, "gpt2: " + first_difference(got, want))
    check(len(got) < len(text) * 0.8, "gpt2: the merges did not shorten the text (%d tokens)" % len(got))
    multibyte = [m for m in merges if any(ord(c) >= 0x80 for c in m[0] + m[1])]
    check(len(multibyte) >= 10, "gpt2: only %d merges of non-ASCII symbols" % len(multibyte))
    return len(got), len(merges)


def gpt2_pieces_equal(tgc, tmp, data, name, eod_ids):
    """tgc's pieces of `data` are the pattern's findall: with merges that make
    every reference piece, and every two adjacent ones, a single token,
    tgc's tokens spell the pieces one by one (a piece split in two gives two
    tokens, two pieces joined their joint token). Once per id of
    <|endoftext|> in eod_ids; returns the dtype codes, the piece and merge
    counts."""
    bm = byte_map()
    unmap = {c: b for b, c in bm.items()}
    want = gpt2_pieces(data)
    syms = ["".join(bm[b] for b in p) for p in want]
    words = list(dict.fromkeys(syms + [a + b for a, b in zip(syms, syms[1:])]))
    merges = complete_merges(words)
    src = os.path.join(tmp, name + ".txt")
    open(src, "wb").write(data)
    codes = []
    for eod_id in eod_ids:
        vocab, ranks, vf, mf = write_bpe(tmp, "%s-bpe%s" % (name, eod_id), merges, eod_id)
        check(all(bpe(w, ranks) == [w] for w in words), "%s: the merges do not make every piece one token" % name)
        code, ids = gpt2_prep(tgc, tmp, src, vf, mf, "%s%s" % (name, eod_id))
        codes.append(code)
        inverse = {v: k for k, v in vocab.items()}
        check(ids[-1] == vocab["<|endoftext|>"], "%s: the end of document %d" % (name, ids[-1]))
        pieces = [bytes(unmap[c] for c in inverse[t]) for t in ids[:-1]]
        if pieces != want:
            i = next((k for k in range(min(len(pieces), len(want))) if pieces[k] != want[k]), len(want))
            sys.exit("FAIL: %s: tgc's pieces differ from the pattern's at piece %d: %r vs %r (text %r)"
                     % (name, i, pieces[i:i + 4], want[i:i + 4], b"".join(want[max(0, i - 3):i + 4])))
    return codes, len(want), len(merges)


def class_sweep_text(step):
    """Every `step`-th code point of Unicode 3.2 (Python's unicodedata.ucd_3_2_0:
    old enough that the tables of utf8proc and of the regex module agree on
    it, whatever their versions) in contexts that give letters, numbers,
    spaces and the rest different pieces: "a" c "1" c "!" c newline."""
    import unicodedata
    old = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000 and unicodedata.ucd_3_2_0.category(chr(c)) != "Cn"]
    return "".join("a%s1%s!%s\n" % ((chr(c),) * 3) for c in old[::step]).encode("utf-8")


def mode_gpt2(tgc, tmp, text_path):
    text = open(text_path, "rb").read()[:20000]
    text += b"\nIt's 2024: they'll say   'hi'  -- ok?\t\n\n  end  \n" + UNICODE_TEXT
    ntok, nmerges = gpt2_tokens_check(tgc, tmp, text)
    print("ok: %d GPT-2 BPE tokens (%d merges) equal the reference" % (ntok, nmerges))
    # The Unicode corpus; with it the dtype: uint16 for a vocabulary of
    # 65499 (<|endoftext|> = 65498), int32 for 65500 (Megatron's rule).
    want = gpt2_pieces(UNICODE_TEXT)
    check(b"\xff" in want and b"\xc2\xa0" in want and b" " in want, "corpus: %s" % want[:20])
    codes, npieces, nmerges = gpt2_pieces_equal(tgc, tmp, UNICODE_TEXT, "unicode", (65498, 65499))
    check(codes == [8, 4], "vocabularies 65499 and 65500: dtype codes %s (expected uint16 8, int32 4)" % codes)
    print("ok: the %d pieces of the Unicode corpus equal the pattern's (%d merges); uint16 below 65500"
          % (npieces, nmerges))
    codes, npieces, nmerges = gpt2_pieces_equal(tgc, tmp, class_sweep_text(89), "sweep", (None,))
    print("ok: the %d pieces of a sweep over Unicode's code points equal the pattern's (%d merges)"
          % (npieces, nmerges))


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
