#!/usr/bin/env python3
"""An independent safetensors reader/writer (json + struct only) to
cross-check runtime/io/safetensors.c.

  st_check.py read FILE    validate FILE strictly and print
                           "meta KEY VALUE" and "NAME DTYPE SHAPE VALUES" lines
  st_check.py write FILE   write a known file the way other writers do
                           (spaced JSON, unsorted keys, insertion-order data)
"""
import json
import struct
import sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
         "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}
FMT = {"BOOL": "?", "U8": "B", "I8": "b", "I16": "h", "U16": "H", "F16": "e", "I32": "i",
       "U32": "I", "F32": "f", "F64": "d", "I64": "q", "U64": "Q"}


def decode(dtype, raw):
    if dtype == "BF16":
        bits = struct.unpack("<%dH" % (len(raw) // 2), raw)
        return [struct.unpack("<f", struct.pack("<I", b << 16))[0] for b in bits]
    if dtype not in FMT:
        return list(raw)
    return list(struct.unpack("<%d%s" % (len(raw) // SIZES[dtype], FMT[dtype]), raw))


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), "duplicate key"
    return dict(pairs)


def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    assert 8 + n <= len(data), "header length"
    header = json.loads(data[8:8 + n].decode("utf-8"), object_pairs_hook=no_duplicates)
    buf = data[8 + n:]
    meta = header.pop("__metadata__", None) or {}
    for k in sorted(meta):
        assert isinstance(meta[k], str)
        print("meta", k, meta[k])
    end = 0
    for name, t in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        b, e = t["data_offsets"]
        assert b == end and e >= b, ("offsets", name)
        count = 1
        for d in t["shape"]:
            count *= d
        assert e - b == count * SIZES[t["dtype"]], ("size", name)
        end = e
    assert end == len(buf), "buffer length"
    for name in sorted(header):
        t = header[name]
        b, e = t["data_offsets"]
        print(name, t["dtype"], t["shape"], decode(t["dtype"], buf[b:e]))


def write(path):
    tensors = [  # name, dtype, shape, struct format, values (insertion order = data order)
        ("emb.weight", "F32", [2, 3], "f", [0.5, -1.25, 2.0, 3.5, -0.0, 1e-3]),
        ("step", "I64", [], "q", [-7]),
        ("mask", "U8", [4], "B", [1, 0, 255, 3]),
        ("odd \"name\" \u00e9 \U0001F600", "F64", [2], "d", [1.0 / 3.0, -2.5]),
        ("half", "F16", [2], "e", [1.5, -2.0]),
        ("empty", "F32", [0, 4], "f", []),
    ]
    header = {"__metadata__": {"format": "pt", "source": "st_check.py"}}
    body = b""
    for name, dtype, shape, fmt, values in tensors:
        raw = struct.pack("<%d%s" % (len(values), fmt), *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    text = json.dumps(header, indent=1).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


if __name__ == "__main__":
    {"read": read, "write": write}[sys.argv[1]](sys.argv[2])
