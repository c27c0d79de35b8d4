#!/usr/bin/env python3
"""Blended datasets (`--data-path 0.3 A 0.7 B`, docs/data.md) against a
reference written here from Megatron-LM's algorithm, in plain Python
(numpy, where it is installed, only to check the weight normalisation).

    blend.py TGC index BLEND_INDEX
        tgc's blend index (tests/data/blend_index.c) equals the reference
        of Megatron's build_blending_indices (megatron/core/datasets/
        helpers.cpp) for many weight sets, position for position, after the
        weights are normalised as Megatron's normalize() does (numpy.sum,
        pairwise); and every dataset's share at every prefix lies within the
        bounds the greedy guarantees. The largest deviations are printed.
    blend.py TGC train MODEL TEXT
        a blend of a text file, an llm.c token file and a Megatron dataset:
        the training losses equal, bit for bit, those of the batches the
        reference assigns fed with --inputs (serial, 4 micro-batches a
        step, (t, p, d) = (1, 2, 2), and --shuffle: each dataset in its order from a Philox
        written here); with --split the training parts and the validation blend
        are Megatron's per-split blends (the losses again, and val_loss
        against the exported weights' loss on the validation batches); the
        per-split sizes tgc reports are Megatron's rule.
    blend.py TGC errors MODEL TEXT
        bad --data-path arguments and datasets: the messages and exit codes.
"""
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from megatron import write_dataset  # noqa: E402  (the MMIDIDX writer of the Megatron tests)


def fail(what):
    sys.exit("FAIL: " + what)


def check(cond, what):
    if not cond:
        fail(what)


def run(cmd, expect_rc=0):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != expect_rc:
        fail("%s: exit %d (expected %d)\n%s%s" % (" ".join(cmd), p.returncode, expect_rc, p.stdout, p.stderr))
    return p


# ---- the reference ---------------------------------------------------------------

def _pairwise(a):
    """numpy's pairwise summation of a float64 run (numpy/core/src/umath/loops_utils.h)."""
    n = len(a)
    if n < 8:
        r = 0.0
        for x in a:
            r += x
        return r
    if n <= 128:
        r = list(a[:8])
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += a[i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for x in a[i:]:
            res += x
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a[:n2]) + _pairwise(a[n2:])


def numpy_sum(a):
    """numpy.sum of a 1-D float64 array: the pairwise sum of each 8192-element buffer, in order."""
    r = 0.0
    for i in range(0, len(a), 8192):
        r += _pairwise(a[i:i + 8192])
    return r


def normalize(weights):
    """Megatron's megatron/core/datasets/utils.py normalize: w / numpy.sum(w)."""
    total = numpy_sum(weights)
    return [w / total for w in weights]


def blending_indices(weights, size):
    """Megatron's build_blending_indices: position i goes to the dataset with the
    largest w * max(i, 1) - (samples it has so far), the first on a tie, and takes
    its next sample."""
    counts = [0] * len(weights)
    dataset, sample = [], []
    for i in range(size):
        x = float(max(i, 1))
        best, most = 0, weights[0] * x - float(counts[0])
        for k in range(1, len(weights)):
            e = weights[k] * x - float(counts[k])
            if e > most:
                best, most = k, e
        dataset.append(best)
        sample.append(counts[best])
        counts[best] += 1
    return dataset, sample


M32 = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    """Philox4x32-10 (Salmon et al., SC 2011; Random123's philox4x32_10)."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


# Random123's known-answer test for philox4x32_10: counter 0, key 0.
assert philox4x32_10((0, 0, 0, 0), (0, 0)) == (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)


def shuffle_perm(n, epoch, seed):
    """tgc's --shuffle order of n samples in an epoch (docs/data.md, "Shuffling")."""
    key = seed ^ 0x53485546464c4521
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        r = philox4x32_10((i & M32, i >> 32, epoch & M32, epoch >> 32), (key & M32, key >> 32))
        j = (r[0] | r[1] << 32) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def get_blend_from_list(words):
    """Megatron's megatron/core/datasets/utils.py get_blend_from_list, as it
    reads the words: (prefixes, weights or None). Its `is_none` is a map
    iterator that any() consumes up to the first None before all() sees the
    rest, so a mix is refused (AssertionError) only when a number follows
    the first non-number; otherwise the mix is read as prefixes alone. Both
    are errors for tgc (a mix is refused; a number read as a prefix names no
    dataset), so the reference refuses every mix: None."""
    if len(words) % 2 == 1:
        return list(words), None
    weights = []
    for w in words[0::2]:
        try:
            weights.append(float(w))
        except ValueError:
            weights.append(None)
    if all(w is None for w in weights):
        return list(words), None
    if any(w is None for w in weights):
        return None
    return list(words[1::2]), weights


def size_weights(counts):
    """BlendedDataset's weights for prefixes alone: the datasets' lengths, normalised."""
    return normalize([float(c) for c in counts])


def split_sizes(weights, size):
    """blended_megatron_dataset_builder.py, _get_size_per_split_per_dataset: each
    dataset's target ceil(size * w) (surplus 0) and what Megatron builds,
    ceil(ceil(size * w) * 1.005); the blend is the sum of the targets."""
    targets = [int(math.ceil(size * w)) for w in weights]
    built = [int(math.ceil(math.ceil(size * w) * (1 + 0.005))) for w in weights]
    return targets, built, sum(targets)


# ---- index -------------------------------------------------------------------------

def weight_sets():
    rng = random.Random(20)
    sets = [
        ([0.3, 0.7], 5000), ([30, 70], 5000), ([1, 1], 2000), ([1, 2, 3], 5000), ([0.2, 0.5, 0.3], 5000),
        ([1, 1, 1], 3000), ([1e-3, 1.0], 5000), ([0.999, 0.001], 3000), ([1], 100),
        ([5, 3, 2, 7, 1, 1, 9, 4, 6, 2, 3], 5000),
        ([rng.uniform(0.01, 10) for _ in range(40)], 4000),
        ([rng.uniform(1e-4, 1) ** 3 for _ in range(200)], 4000),
    ]
    return sets


def parse_words():
    """--data-path word lists: weights in Python's float() spellings, paths
    that look almost like numbers, and mixes."""
    spellings = ["1", "0.3", " 2 ", "1_000", "1.5_0", "1e3", "1E-2", ".5", "5.", "+3", "1e-999", "inf",
                 "-Infinity", "nan", "NaN", "0", "-1", "0.0"]
    words = ["A", "0x10", "1__0", "_1", "1_", "e5", "1e", ".", "-", "1.2.3", "1e5.0", "infinit", "nan1", "a1"]
    lists = [[w, "A"] for w in spellings + words]
    lists += [["A", "B"], ["A", "B", "C", "D"], ["A", "B", "C"], ["0.3", "A", "B"], ["0.3", "A", "0.7", "B"],
              ["x", "A", "1", "B"], ["1", "A", "x", "B"], ["1", "A", "1", "B", "x", "C"], ["A"], ["0.5"]]
    return lists


def mode_parse(tgc_index):
    refused = 0
    for words in parse_words():
        want = get_blend_from_list(words)
        ok_weights = want is not None and (want[1] is None or all(math.isfinite(w) and w > 0 for w in want[1]))
        p = subprocess.run([tgc_index, "--parse"] + words, capture_output=True, text=True)
        if not ok_weights:
            check(p.returncode == 1 and "--data-path: " in p.stderr,
                  "--data-path %r: Megatron refuses it (%s), tgc: exit %d %s" % (words, want, p.returncode, p.stdout))
            refused += 1
            continue
        check(p.returncode == 0, "--data-path %r: exit %d: %s" % (words, p.returncode, p.stderr))
        out = p.stdout.split("\n")
        prefixes, weights = want
        kind, n = out[0].split()
        check(kind == ("paths" if weights is None else "weighted") and int(n) == len(prefixes),
              "--data-path %r: tgc reads %r, Megatron %s" % (words, out[0], want))
        for k, line in enumerate(out[1:1 + len(prefixes)]):
            w, path = line.split(" ", 1)
            check(path == prefixes[k], "--data-path %r: dataset %d is %r (Megatron: %r)" % (words, k, path, prefixes[k]))
            if weights is not None:
                check(float(w) == weights[k], "--data-path %r: weight %s (Megatron: %r)" % (words, w, weights[k]))
    print("ok: %d --data-path word lists read as Megatron's get_blend_from_list reads them (weights by Python's "
          "float()); %d refused" % (len(parse_words()), refused))


def mode_sizes(tgc_index):
    """Prefixes alone: the weights are the parts' sizes, and a blend as long as
    their sum takes every sample of every dataset exactly once."""
    rng = random.Random(21)
    sets = [[40, 80], [9, 312, 437], [1, 1], [1, 1000], [5, 5, 5], [3, 7, 2, 11, 1],
            [rng.randint(1, 60) for _ in range(30)]]
    for counts in sets:
        total = sum(counts)
        w = size_weights(counts)
        out = run([tgc_index, "--sizes", str(total)] + [str(c) for c in counts]).stdout.split("\n")
        got_w = [float(x) for x in out[0].split()]
        check(got_w == w, "sizes %s: tgc weighs them %s, Megatron %s" % (counts, got_w[:4], w[:4]))
        got = [tuple(int(v) for v in line.split()) for line in out[1:] if line]
        dataset, sample = blending_indices(w, total)
        check(got == list(zip(dataset, sample)), "sizes %s: the index differs from Megatron's" % counts)
        seen = [set() for _ in counts]
        for d, c in got:
            check(c < counts[d] and c not in seen[d], "sizes %s: dataset %d sample %d twice or beyond its %d"
                  % (counts, d, c, counts[d]))
            seen[d].add(c)
        check([len(x) for x in seen] == counts, "sizes %s: not every sample once: %s" % (counts, [len(x) for x in seen]))
    print("ok: %d blends of paths alone: weights = sizes normalised, the index Megatron's, and a blend of their "
          "total length takes every sample of every dataset exactly once" % len(sets))


def mode_index(tgc_index):
    mode_parse(tgc_index)
    mode_sizes(tgc_index)
    try:
        import numpy
    except ImportError:
        numpy = None
    print("numpy: %s" % ("normalisation checked against numpy %s" % numpy.__version__ if numpy else "not installed"))
    for weights, size in weight_sets():
        given = [float(w) for w in weights]
        if numpy is not None:
            want = (numpy.array(given, dtype=numpy.float64) / numpy.sum(numpy.array(given, dtype=numpy.float64)))
            check(normalize(given) == want.tolist(), "numpy normalises %s otherwise" % weights)
        w = normalize(given)
        out = run([tgc_index, str(size)] + [repr(x) for x in given]).stdout.split("\n")
        got_w = [float(x) for x in out[0].split()]
        check(got_w == w, "%d weights: tgc normalises them to %s, Megatron to %s" % (len(w), got_w[:4], w[:4]))
        got = [tuple(int(v) for v in line.split()) for line in out[1:] if line]
        dataset, sample = blending_indices(w, size)
        check(len(got) == size, "%d positions (expected %d)" % (len(got), size))
        for i, (d, s) in enumerate(got):
            if (d, s) != (dataset[i], sample[i]):
                fail("weights %s: position %d is dataset %d sample %d; Megatron's: dataset %d sample %d"
                     % (weights[:6], i, d, s, dataset[i], sample[i]))
        # Shares at every prefix n: w n - c(n) in [w - 1, N - 2 + w].
        n_ds, counts = len(w), [0] * len(w)
        over = under = 0.0
        worst_share = 0.0
        for n in range(1, size + 1):
            counts[dataset[n - 1]] += 1
            for k in range(n_ds):
                e = w[k] * n - counts[k]
                if not (w[k] - 1 - 1e-9 <= e <= n_ds - 2 + w[k] + 1e-9):
                    fail("weights %s: after %d samples dataset %d has %d (weight %.6g): outside the greedy's bounds"
                         % (weights[:6], n, k, counts[k], w[k]))
                over, under = max(over, -e), max(under, e)
                if n >= 100:
                    worst_share = max(worst_share, abs(counts[k] / n - w[k]))
        print("ok: %3d datasets, %5d positions equal Megatron's; at every prefix each dataset's count is within "
              "+%.3f / -%.3f samples of w n; |share - w| <= %.2e from 100 samples on"
              % (n_ds, size, over, under, worst_share))


# ---- train -------------------------------------------------------------------------

S, B = 32, 4  # sequence length and global batch of the runs


def make_datasets(tmp, text):
    """A text file, an llm.c token file and a Megatron dataset (uint16, several
    documents) of different parts of the text, and their token streams. The
    text file is small, so that its samples repeat (epochs) within the run
    and its --split parts differ from the whole."""
    a_tok = list(text[0:300])  # 9 samples: the blend wraps around it
    b_tok = list(text[6000:16000])
    c_tok = list(text[16000:30000])
    a = os.path.join(tmp, "a.txt")
    open(a, "wb").write(bytes(a_tok))
    b = os.path.join(tmp, "b.bin")
    with open(b, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(b_tok), *([0] * 253)))
        f.write(struct.pack("<%dH" % len(b_tok), *b_tok))
    c = os.path.join(tmp, "c")
    cuts = [0, 3000, 3001, 9000, len(c_tok)]
    write_dataset(c, [[c_tok[x:y]] for x, y in zip(cuts, cuts[1:])], 8)
    return [a, b, c], [a_tok, b_tok, c_tok]


def parts(streams, split):
    """Each dataset's (first, count) per split: tgc's --split rule of one dataset."""
    out = {"train": [], "valid": []}
    for st in streams:
        n = (len(st) - 1) // S
        if split is None:
            out["train"].append((0, n))
            continue
        t, v = split[0] / sum(split), split[1] / sum(split)
        train = int(math.floor(n * t))
        out["train"].append((0, train))
        out["valid"].append((train, int(math.floor(n * (t + v))) - train))
    return out


def blend_samples(streams, w, part, count, seed=None):
    """The first `count` samples of a split's blend: lists of S + 1 tokens; with a
    seed, each dataset's part in its --shuffle order."""
    dataset, sample = blending_indices(w, count)
    out = []
    for d, c in zip(dataset, sample):
        first, n = part[d]
        i = first + (c % n if seed is None else shuffle_perm(n, c // n, seed)[c % n])
        out.append(streams[d][i * S:i * S + S + 1])
    return out


def write_inputs(path, samples, rows):
    """--inputs: entries of `rows` samples, tokens and labels [N, S, rows] int32."""
    n = len(samples) // rows
    tok, lab = [], []
    for e in range(n):
        for t in range(S):
            for r in range(rows):
                smp = samples[e * rows + r]
                tok.append(smp[t])
                lab.append(smp[t + 1])
    size = 4 * len(tok)
    header = {"tokens": {"dtype": "I32", "shape": [n, S, rows], "data_offsets": [0, size]},
              "labels": {"dtype": "I32", "shape": [n, S, rows], "data_offsets": [size, 2 * size]}}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.write(struct.pack("<%di" % len(tok), *tok))
        f.write(struct.pack("<%di" % len(lab), *lab))


def log_of(path, key):
    return [json.loads(line)[key] for line in open(path) if key in json.loads(line)]


def mode_train(tgc, tmp, model, text_path):
    text = open(text_path, "rb").read()
    paths, streams = make_datasets(tmp, text)
    given = [0.5, 0.2, 0.3]
    w = normalize(given)
    blend = []
    for g, p in zip(given, paths):
        blend += [repr(g), p]
    base = [tgc, "run", model, "--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "seq=%d" % S]
    iters = 6
    micro = ["--micro-batch-size", "1", "--global-batch-size", str(B)]
    # (name, the blended run's flags, the reference run's, rows per --inputs entry, --split)
    cases = [("serial", ["--set", "batch=%d" % B], ["--set", "batch=%d" % B], B, None),
             ("4 micro-batches", micro, micro, 1, None),
             ("pp 2 x dp 2", micro + ["--pp", "2", "--dp", "2"], micro + ["--pp", "2", "--dp", "2"], 1, None),
             ("--shuffle --seed 7", ["--set", "batch=%d" % B, "--shuffle", "--seed", "7"],
              ["--set", "batch=%d" % B, "--seed", "7"], B, None),
             ("--split 90,10", micro + ["--split", "90,10", "--eval-iters", "2", "--eval-interval", "3"], micro, 1,
              (90, 10))]
    seen = []
    for name, flags, ref_flags, rows, split in cases:
        pt = parts(streams, split)
        tag = str(len(os.listdir(tmp)))  # a log appends: fresh names per case
        log, ref_log = os.path.join(tmp, "blend%s.jsonl" % tag), os.path.join(tmp, "ref%s.jsonl" % tag)
        wts = os.path.join(tmp, "w.safetensors")
        p = run(base + flags + ["--data-path"] + blend + ["--train-iters", str(iters), "--log", log, "--export", wts])
        # The sizes tgc reports: Megatron's rule for iters x B training samples.
        targets, built, size = split_sizes(w, iters * B)
        line = [l for l in p.stderr.split("\n") if l.startswith("tgc: training blend")]
        check(len(line) == 1, "%s: no 'training blend' line in\n%s" % (name, p.stderr))
        want = "tgc: training blend of 3 datasets: %d samples for %d:" % (size, iters * B)
        check(line[0].startswith(want), "%s: %r does not start %r" % (name, line[0], want))
        for k in range(3):
            piece = "%s: %d of its %d (Megatron builds %d)" % (paths[k], targets[k], pt["train"][k][1], built[k])
            check(piece in line[0], "%s: %r not in %r" % (name, piece, line[0]))
        samples = blend_samples(streams, w, pt["train"], iters * B, 7 if "--shuffle" in flags else None)
        inputs = os.path.join(tmp, "inputs.safetensors")
        write_inputs(inputs, samples, rows)
        run(base + ref_flags + ["--inputs", inputs, "--train-iters", str(iters), "--quiet", "--log", ref_log])
        got, ref = log_of(log, "loss"), log_of(ref_log, "loss")
        check(len(got) == iters and got == ref, "%s: the blend's losses %s differ from the reference batches' %s"
              % (name, got, ref))
        print("ok: %s: the blend's %d losses equal the reference batches' bit for bit (%s)"
              % (name, iters, ", ".join("%.6f" % x for x in got)))
        if name == "pp 2 x dp 2":  # the data of "4 micro-batches", every rank reading its own blend
            same = seen[-1]
            check(all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(got, same)),
                  "%s: losses %s, the single-rank run's %s" % (name, got, same))
            continue
        check(got not in seen, "%s: the same losses as an earlier case: the test would not see the parts" % name)
        seen.append(got)
        if split is None:
            continue
        check_validation(tgc, tmp, base, name, log, wts, p.stderr, streams, w, pt, tag, True)
    mode_train_paths(tgc, tmp, base, paths, streams)
    mode_train_per_split(tgc, tmp, base, paths, streams)


def mode_train_per_split(tgc, tmp, base, paths, streams):
    """Megatron's per-split blends (--train-data-path, --valid-data-path): each
    split its own datasets, each whole (split (0, 1)); the training blend as
    --data-path's without --split, the validation blend's first 2 x B
    samples evaluated as --split's part is."""
    iters = 6
    micro = ["--micro-batch-size", "1", "--global-batch-size", str(B), "--eval-iters", "2", "--eval-interval", "3"]
    a, b, c = paths
    # (name, train words, their datasets, valid words, their datasets)
    cases = [("weights / paths alone", ["0.5", a, "0.2", b, "0.3", c], [0, 1, 2], [c, b], [2, 1]),
             ("paths alone / weights", [b, c], [1, 2], ["0.3", a, "0.7", b], [0, 1]),
             ("one path each", [c], [2], [a], [0])]
    for name, twords, tk, vwords, vk in cases:
        st, vst = [streams[k] for k in tk], [streams[k] for k in vk]
        tpt, vpt = parts(st, None), {"valid": [(0, n) for _, n in parts(vst, None)["train"]]}
        tgiven, vgiven = get_blend_from_list(twords)[1], get_blend_from_list(vwords)[1]
        tw = normalize(tgiven) if tgiven else size_weights([n for _, n in tpt["train"]])
        vweighted = vgiven is not None
        vw = normalize(vgiven) if vweighted else size_weights([n for _, n in vpt["valid"]])
        tag = str(len(os.listdir(tmp)))
        log, ref_log = os.path.join(tmp, "blend%s.jsonl" % tag), os.path.join(tmp, "ref%s.jsonl" % tag)
        wts = os.path.join(tmp, "w.safetensors")
        p = run(base + micro + ["--train-data-path"] + twords + ["--valid-data-path"] + vwords +
                ["--train-iters", str(iters), "--log", log, "--export", wts])
        inputs = os.path.join(tmp, "inputs.safetensors")
        write_inputs(inputs, blend_samples(st, tw, tpt["train"], iters * B), 1)
        run(base + micro[:4] + ["--inputs", inputs, "--train-iters", str(iters), "--quiet", "--log", ref_log])
        got, ref = log_of(log, "loss"), log_of(ref_log, "loss")
        check(len(got) == iters and got == ref, "%s: the training losses %s differ from the reference batches' %s"
              % (name, got, ref))
        print("ok: per-split blends, %s: the %d training losses equal the reference batches' bit for bit"
              % (name, iters))
        check_validation(tgc, tmp, base, "per-split blends, " + name, log, wts, p.stderr, vst, vw, vpt, tag,
                         vweighted or len(vwords) == 1)


def check_validation(tgc, tmp, base, name, log, wts, stderr, streams, w, pt, tag, weighted):
    """val_loss of a --split run: the exported weights' loss on the first 2 x B
    samples of the validation blend (weights w over the parts pt["valid"])."""
    # The validation blend: the first eval_iters x B samples of the per-split
    # blend; val_loss = the exported weights' mean loss on them (dropout off).
    vsamples = blend_samples(streams, w, pt["valid"], 2 * B)
    vin = os.path.join(tmp, "valid.safetensors")
    write_inputs(vin, vsamples, B)
    check_log = os.path.join(tmp, "check%s.jsonl" % tag)
    run(base + ["--set", "batch=%d" % B, "--set", "pdrop=0", "--inputs", vin, "--init-from", wts, "--lr", "0",
                "--train-iters", "2", "--quiet", "--log", check_log])
    want_val = sum(log_of(check_log, "loss")) / 2
    val = log_of(log, "val_loss")
    check(len(val) == 2, "%s: %d validation losses (expected 2)" % (name, len(val)))
    check(abs(val[-1] - want_val) <= 1e-6 * abs(want_val), "%s: val_loss %.9g, the exported weights' loss on "
          "the validation blend %.9g" % (name, val[-1], want_val))
    print("ok: %s: val_loss %.9g equals the exported weights' loss %.9g on the validation blend"
          % (name, val[-1], want_val))
    vline = [l for l in stderr.split("\n") if l.startswith("tgc: validation blend")]
    vs = split_sizes(w, 2 * B)[2] if weighted else 2 * B
    want = "tgc: validation blend of %d datasets%s: %d samples for %d:" % (
        len(w), "" if weighted else " weighted by their sizes", vs, 2 * B)
    check(len(vline) == 1 and vline[0].startswith(want), "%s: validation line %s (expected %r)" % (name, vline, want))


def mode_train_paths(tgc, tmp, base, paths, streams):
    """Prefixes alone (`--data-path A B C`): each split's blend weighted by the
    sizes of the datasets' parts, one pass; and a prefix given twice (also
    spelt otherwise), each occurrence a dataset of its own, from its first
    sample, as Megatron builds one dataset per occurrence."""
    iters = 6
    micro = ["--micro-batch-size", "1", "--global-batch-size", str(B)]
    a, b, c = paths
    # (name, --data-path words, the datasets they name, flags, rows, --split)
    cases = [("paths alone", [a, b, c], [0, 1, 2], ["--set", "batch=%d" % B], B, None),
             ("paths alone --shuffle --seed 5", [c, a, b], [2, 0, 1],
              ["--set", "batch=%d" % B, "--shuffle", "--seed", "5"], B, None),
             ("paths alone --split 80,20", [b, c, a], [1, 2, 0],
              micro + ["--split", "80,20", "--eval-iters", "2", "--eval-interval", "3"], 1, (80, 20)),
             ("a prefix twice, with weights", ["0.5", c, "0.2", b, "0.3", c + ".idx"], [2, 1, 2],
              ["--set", "batch=%d" % B], B, None),
             ("a prefix twice, alone", [b, c, b], [1, 2, 1], ["--set", "batch=%d" % B], B, None)]
    seen = []
    for name, words, which, flags, rows, split in cases:
        st = [streams[k] for k in which]
        pt = parts(st, split)
        weighted = len(words) % 2 == 0
        w = normalize([float(x) for x in words[0::2]]) if weighted else size_weights([n for _, n in pt["train"]])
        tag = str(len(os.listdir(tmp)))
        log, ref_log = os.path.join(tmp, "blend%s.jsonl" % tag), os.path.join(tmp, "ref%s.jsonl" % tag)
        wts = os.path.join(tmp, "w.safetensors")
        p = run(base + flags + ["--data-path"] + words + ["--train-iters", str(iters), "--log", log, "--export", wts])
        line = [l for l in p.stderr.split("\n") if l.startswith("tgc: training blend")]
        check(len(line) == 1, "%s: no 'training blend' line in\n%s" % (name, p.stderr))
        dataset, _ = blending_indices(w, iters * B)
        names = words[1::2] if weighted else words
        if not weighted:
            want = "tgc: training blend of %d datasets weighted by their sizes: %d samples for %d:" % (
                len(st), iters * B, iters * B)
            check(line[0].startswith(want), "%s: %r does not start %r" % (name, line[0], want))
            for k in range(len(st)):
                piece = "weight %.4g %s: %d of its %d" % (w[k], names[k], dataset.count(k), pt["train"][k][1])
                check(piece in line[0], "%s: %r not in %r" % (name, piece, line[0]))
        samples = blend_samples(st, w, pt["train"], iters * B, 5 if "--shuffle" in flags else None)
        if "twice" in name:  # both occurrences from their first sample: some sample comes twice
            check(len(set(map(tuple, samples))) < len(samples), "%s: no sample repeats" % name)
        inputs = os.path.join(tmp, "inputs.safetensors")
        write_inputs(inputs, samples, rows)
        ref_flags = [f for f in flags if f != "--shuffle"]
        if split is not None:
            ref_flags = micro
        run(base + ref_flags + ["--inputs", inputs, "--train-iters", str(iters), "--quiet", "--log", ref_log])
        got, ref = log_of(log, "loss"), log_of(ref_log, "loss")
        check(len(got) == iters and got == ref, "%s: the blend's losses %s differ from the reference batches' %s"
              % (name, got, ref))
        check(got not in seen, "%s: the same losses as an earlier case: the test would not see the order" % name)
        seen.append(got)
        print("ok: %s: weights %s; the %d losses equal the reference batches' bit for bit (%s)"
              % (name, ", ".join("%.4f" % x for x in w), iters, ", ".join("%.6f" % x for x in got)))
        if split is not None:
            vw = size_weights([n for _, n in pt["valid"]])
            check_validation(tgc, tmp, base, name, log, wts, p.stderr, st, vw, pt, tag, False)


# ---- errors ------------------------------------------------------------------------

def mode_errors(tgc, tmp, model, text_path):
    text = os.path.join(tmp, "t.txt")
    open(text, "wb").write(open(text_path, "rb").read()[:20000])
    bad_bin = os.path.join(tmp, "bad.bin")
    open(bad_bin, "wb").write(b"not tokens")
    short = os.path.join(tmp, "short.txt")
    open(short, "wb").write(b"x" * 20)
    base = [tgc, "run", model, "--set", "layers=2", "--set", "hidden=64", "--set", "seq=32", "--train-iters", "1",
            "--quiet"]
    missing = os.path.join(tmp, "missing")
    # Megatron datasets with a file missing or corrupt, each named in its message.
    docs = [[list(range(1, 200))], [list(range(5, 150))]]
    for name in ("nobin", "noidx", "badidx", "shortbin"):
        write_dataset(os.path.join(tmp, name), docs, 8)
    P = lambda name: os.path.join(tmp, name)  # noqa: E731
    os.remove(P("nobin.bin"))
    os.remove(P("noidx.idx"))
    with open(P("badidx.idx"), "r+b") as f:
        f.write(b"MMIDIDY")
    with open(P("shortbin.bin"), "r+b") as f:
        f.truncate(300)
    cases = [
        # An odd count is paths alone (Megatron's get_blend_from_list): "0.3" names no dataset.
        (["0.3", text, "0.7"], 1, "0.3: error: cannot open: No such file or directory"),
        # Numbers in some weight places only: refused (Megatron: AssertionError, or the words read as paths).
        (["x", text, "1", text], 2, "--data-path: 'x' (argument 1) stands where a weight belongs but is not a number, "
         "while '1' (argument 3) is one: give WEIGHT PATH pairs, a weight before every path, or paths alone"),
        (["1", text, "x", text], 2, "--data-path: 'x' (argument 3) stands where a weight belongs but is not a number, "
         "while '1' (argument 1) is one"),
        (["1", text, "0", text], 2, "--data-path: weight '0' (argument 3, before '%s') is not a positive number" % text),
        (["1", text, "-2", text], 2, "weight '-2' (argument 3"),
        (["nan", text, "1", text], 2, "weight 'nan' (argument 1"),
        (["inf", text, "1", text], 2, "weight 'inf' (argument 1"),
        (["1e308", text, "1e308", text], 2, "--data-path: the weights sum to inf: expected a positive finite sum"),
        (["1e-999", text, "1", text], 2, "weight '1e-999' (argument 1"),  # 0 in float64
        (["1", text, "1", missing], 1, "%s: error: cannot open: No such file or directory" % missing),
        (["1", text, "1", tmp], 1, "%s: error: cannot open: it is a directory, not a regular file" % tmp),
        (["1", text, "1", bad_bin], 1, "%s: error: not an llm.c token file" % bad_bin),
        (["1", text, "1", short], 1, "%s: error: 20 tokens are too few for one sample of sequence length 32" % short),
        ([text, short], 1, "%s: error: 20 tokens are too few for one sample of sequence length 32" % short),
    ]
    for words in (["1", text, "1", "%s"], [text, "%s"]):
        cases += [
            ([x.replace("%s", P("nobin")) for x in words], 1,
             "%s: error: cannot open: No such file or directory" % P("nobin.bin")),
            ([x.replace("%s", P("noidx")) for x in words], 1,
             "%s: error: cannot open: No such file or directory" % P("noidx.idx")),
            ([x.replace("%s", P("badidx.bin")) for x in words], 1,
             "%s: error: not a Megatron index file" % P("badidx.idx")),
            ([x.replace("%s", P("shortbin")) for x in words], 1,
             "%s: error: truncated: " % P("shortbin.bin")),
        ]
    for words, rc, msg in cases:
        p = run(base + ["--data-path"] + words, expect_rc=rc)
        check(msg in p.stderr, "--data-path %s: %r not in %r" % (" ".join(words), msg, p.stderr))
    # A blended dataset whose --split leaves a part empty is named.
    mid = os.path.join(tmp, "mid.txt")
    open(mid, "wb").write(b"y" * 400)  # 12 samples of 32: 98,1,1 leaves no validation sample
    p = run(base + ["--data-path", "1", text, "1", mid, "--split", "98,1,1"], expect_rc=1)
    want = "%s: error: --split gives 11 training and 0 validation samples of 32 tokens (of 12) of this blended dataset" % mid
    check(want in p.stderr, "%r not in %r" % (want, p.stderr))
    p = run(base + ["--data-path", text, mid, "--split", "98,1,1"], expect_rc=1)
    check(want in p.stderr, "paths alone: %r not in %r" % (want, p.stderr))
    # Paths alone are one pass: a run reading more is refused, for each split.
    p = run(base[:-3] + ["--train-iters", "200", "--quiet", "--data-path", text, mid], expect_rc=1)
    want = ("--data-path: a blend of paths without weights is one pass over its datasets (Megatron weighs them by "
            "their sizes): its training split has 636 samples of 32 tokens, but the run reads 1600 (--train-iters x "
            "the global batch); give weights, or read fewer")
    check(want in p.stderr, "%r not in %r" % (want, p.stderr))
    p = run(base + ["--data-path", text, mid, "--split", "90,10", "--eval-iters", "20"], expect_rc=1)
    want = "its validation split has 65 samples of 32 tokens, but the run reads 160 (--eval-iters x the global batch)"
    check(want in p.stderr, "%r not in %r" % (want, p.stderr))
    # --data is --data-path's other name: both together are one option given twice.
    p = run(base + ["--data", text, "--data-path", "1", text, "1", mid], expect_rc=2)
    want = "an option is given twice: --data '%s', then --data-path '1'; give it once" % text
    check(want in p.stderr, "%r not in %r" % (want, p.stderr))
    # Megatron's per-split blends: one data source, no --split, training data given.
    per_split = [
        (["--data-path", text, "--valid-data-path", mid], 2, "--data-path (or --data) and --train-data-path/"
         "--valid-data-path: a single data source must be provided in training mode (Megatron's rule)"),
        (["--train-data-path", text, "--valid-data-path", mid, "--split", "9,1"], 2, "--split and --train-data-path/"
         "--valid-data-path are incompatible: each split has its own data (Megatron's rule)"),
        (["--valid-data-path", mid], 2, "--valid-data-path needs --train-data-path (the training data)"),
        (["--train-data-path", text, "--valid-data-path", "x", mid, "1", text], 2, "--data-path: 'x' (argument 1) "
         "stands where a weight belongs"),
        (["--train-data-path", text, "--valid-data-path", "1", mid, "1", missing], 1,
         "%s: error: cannot open: No such file or directory" % missing),
        (["--train-data-path", text, "--valid-data-path", text, mid, "--eval-iters", "100"], 1,
         "its validation split has 636 samples of 32 tokens, but the run reads 800 (--eval-iters x the global batch)"),
        (["--train-data-path", text, "--valid-data-path", mid, "--log", mid], 1,
         "--log %s: is the input --valid-data-path %s" % (mid, mid)),
    ]
    for words, rc, msg in per_split:
        p = run(base + words, expect_rc=rc)
        check(msg in p.stderr, "%s: %r not in %r" % (" ".join(words), msg, p.stderr))
    # An output that would overwrite a blended dataset is refused.
    p = run(base + ["--data-path", "1", text, "1", mid, "--log", mid], expect_rc=1)
    check("is the input --data" in p.stderr, "--log over a blended dataset: %r" % p.stderr)
    print("ok: %d bad --data-path, --train-data-path and --valid-data-path arguments and datasets refused with "
          "their messages" % (len(cases) + len(per_split) + 6))


def main():
    tgc, mode = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        if mode == "index":
            mode_index(sys.argv[3])
        elif mode == "train":
            mode_train(tgc, tmp, sys.argv[3], sys.argv[4])
        elif mode == "errors":
            mode_errors(tgc, tmp, sys.argv[3], sys.argv[4])
        else:
            sys.exit("usage: blend.py TGC index BLEND_INDEX | train MODEL TEXT | errors MODEL TEXT")
    print("PASS")


if __name__ == "__main__":
    main()
