"""tfrecords.py DIR: the event file in DIR read without the tensorboard package.

Checks each TFRecord's length and data CRC32C (masked), decodes each Event
(wall_time 1, step 2, file_version 3, summary 5 of Value {tag 1,
simple_value 2}), and prints the record count, the file version, and per
tag its steps (tensorboard_test.py reads the same files with the
tensorboard package).
"""
import glob
import struct
import sys


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    """(field, value) of a protobuf message: varints as ints, the rest as bytes."""
    at = 0
    while at < len(buf):
        key, at = varint(buf, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, at = varint(buf, at)
        elif wire == 1:
            v, at = buf[at:at + 8], at + 8
        elif wire == 5:
            v, at = buf[at:at + 4], at + 4
        elif wire == 2:
            n, at = varint(buf, at)
            v, at = buf[at:at + n], at + n
        else:
            sys.exit("wire type %d" % wire)
        yield field, v


def varint(buf, at):
    v = shift = 0
    while True:
        b = buf[at]
        at += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, at


path, = glob.glob(sys.argv[1] + "/events.out.tfevents.*")
data = open(path, "rb").read()
at, n, version, steps = 0, 0, None, {}
while at < len(data):
    length, = struct.unpack("<Q", data[at:at + 8])
    assert struct.unpack("<I", data[at + 8:at + 12])[0] == masked(crc32c(data[at:at + 8])), "length CRC"
    rec = data[at + 12:at + 12 + length]
    assert struct.unpack("<I", data[at + 12 + length:at + 16 + length])[0] == masked(crc32c(rec)), "data CRC"
    at += 16 + length
    n += 1
    ev = dict(fields(rec))
    if 3 in ev:
        version = ev[3].decode()
    for f, summary in fields(rec):
        if f == 5:
            for _, value in fields(summary):
                tag = dict(fields(value))[1].decode()
                steps.setdefault(tag, []).append(ev.get(2, 0))
print("%d records, first %s" % (n, version))
for tag, s in steps.items():
    print("%s: %s" % (tag, " ".join(map(str, s))))
