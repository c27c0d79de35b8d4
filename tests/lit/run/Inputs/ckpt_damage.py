"""ckpt_damage.py MODE FILE [TENSOR]: damages a safetensors file of a checkpoint in place.

  flip FILE TENSOR    inverts one byte in the middle of TENSOR's data
  truncate FILE       cuts the last 100 bytes (the last tensor of the data buffer)
  meta FILE KEY VALUE rewrites metadata KEY (the header keeps its length)
"""
import json
import struct
import sys

mode, path = sys.argv[1], sys.argv[2]
raw = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
if mode == "flip":
    begin, end = header[sys.argv[3]]["data_offsets"]
    raw[8 + n + (begin + end) // 2] ^= 0xFF
elif mode == "truncate":
    del raw[-100:]
elif mode == "meta":
    header["__metadata__"][sys.argv[3]] = sys.argv[4]
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= n, "the new header is longer"
    raw[8:8 + n] = text + b" " * (n - len(text))
open(path, "wb").write(raw)
