"""plan_damage.py MODE IN OUT: a damaged copy of the plan IN.

  huge   the kernels section's length becomes "-4" (its body dropped), under
         a valid checksum: only the framing can reject it (found by
         fuzz_plan: "-4" was read as 2^64 - 4 and the bounds check wrapped)
  keys   the header's hash of the keys becomes another one, under a valid
         checksum: a plan of a tgc with other configuration keys
  first  the first byte changes ('t' becomes 'u')
  magic  the whole "tgc-plan" word is overwritten
"""
import re
import sys

mode, src, dst = sys.argv[1:4]
data = bytearray(open(src, "rb").read())


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for c in b:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def resum(body):
    return body + b"checksum %016x\n" % fnv1a64(body)


body = bytes(data[: data.rindex(b"checksum ")])
if mode == "huge":
    at = body.index(b"\nsection kernels ") + 1
    out = resum(body[:at] + b"section kernels -4\n")
elif mode == "keys":
    head, rest = body.split(b"\n", 1)
    keys = re.match(rb"tgc-plan \d+ keys ([0-9a-f]{16})$", head).group(1)
    other = b"%016x" % (int(keys, 16) ^ 1)
    out = resum(head.replace(keys, other) + b"\n" + rest)
elif mode == "first":
    data[0] = ord("u")
    out = bytes(data)
elif mode == "magic":
    data[0:8] = b"XXXXXXXX"
    out = bytes(data)
else:
    sys.exit("unknown mode " + mode)
open(dst, "wb").write(out)
