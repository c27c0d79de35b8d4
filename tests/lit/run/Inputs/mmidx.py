#!/usr/bin/env python3
"""mmidx.py DIR: Megatron-LM indexed datasets (PREFIX.idx + PREFIX.bin), one
good and many corrupt, written from the format's description (docs/data.md)
for the diagnostics test megatron_errors.test."""
import os
import struct
import sys

out = sys.argv[1]


def index(code=8, lengths=(3, 4), pointers=None, docs=(0, 1, 2), version=1, magic=b"MMIDIDX\x00\x00", size=2,
          nseq=None, ndoc=None):
    if pointers is None:
        pointers, at = [], 0
        for n in lengths:
            pointers.append(at)
            at += n * size
    return (magic + struct.pack("<QB", version, code)
            + struct.pack("<QQ", len(lengths) if nseq is None else nseq, len(docs) if ndoc is None else ndoc)
            + struct.pack("<%di" % len(lengths), *lengths) + struct.pack("<%dq" % len(pointers), *pointers)
            + struct.pack("<%dq" % len(docs), *docs))


def tokens(values, fmt="H"):
    return struct.pack("<%d%s" % (len(values), fmt), *values)


GOOD_BIN = tokens([1, 2, 3, 4, 5, 6, 7])
cases = {
    "good": (index(), GOOD_BIN),
    "magic": (index(magic=b"MMIDIDY\x00\x00"), GOOD_BIN),
    "short": (index()[:20], GOOD_BIN),
    "version": (index(version=2), GOOD_BIN),
    "dtype9": (index(code=9), GOOD_BIN),
    "float": (index(code=7, size=4), GOOD_BIN),
    "idxsize": (index()[:-8], GOOD_BIN),
    "idxlong": (index() + b"\x00" * 5, GOOD_BIN),
    "multimodal": (index() + b"\x00" * 2, GOOD_BIN),
    "huge": (index(nseq=1 << 62), GOOD_BIN),
    "neglen": (index(lengths=(3, -4), pointers=(0, 6)), GOOD_BIN),
    "overlap": (index(pointers=(0, 2)), GOOD_BIN),
    "align": (index(pointers=(0, 7)), GOOD_BIN + b"\x00"),
    "bintrunc": (index(), GOOD_BIN[:-3]),
    "binlong": (index(), GOOD_BIN + b"\x00\x00"),
    "doc0": (index(docs=(1, 2)), GOOD_BIN),
    "docdec": (index(docs=(0, 2, 1, 2)), GOOD_BIN),
    "doclast": (index(docs=(0, 1)), GOOD_BIN),
    "docempty": (index(docs=()), GOOD_BIN),
    "vocab": (index(), tokens([1, 2, 3, 4, 300, 6, 7])),
    "negative": (index(code=2, size=1), tokens([1, 2, 3, 4, 5, -6, 7], "b")),
    "int64big": (index(code=5, size=8), tokens([1, 2, 3, 4, 5, 6, 1 << 40], "q")),
    "onetoken": (index(lengths=(1,), docs=(0, 1)), tokens([9])),
    "nobin": (index(), None),
}
for name, (idx, binary) in cases.items():
    with open(os.path.join(out, name + ".idx"), "wb") as f:
        f.write(idx)
    if binary is not None:
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(binary)
# Only the .bin of a dataset: the path picks Megatron, the index is missing.
with open(os.path.join(out, "noidx.bin"), "wb") as f:
    f.write(GOOD_BIN)
