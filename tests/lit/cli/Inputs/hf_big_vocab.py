"""hf_big_vocab.py SRC DST VOCAB: the Hugging Face GPT-2 directory SRC (one
model.safetensors) again in DST with VOCAB tokens and every tensor in f16,
its data a sparse run of zeros (nothing is written to disk): an import whose
output tensor is twice the mapped input's size, for ulimit -v to refuse
(tests/lit/cli/hf_import_oom.test)."""
import json
import os
import struct
import sys

src, dst, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(os.path.join(src, "model.safetensors"), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
meta = header.pop("__metadata__", {})
out, at = {"__metadata__": meta}, 0
for name in sorted(header):
    shape = header[name]["shape"]
    if name.endswith("wte.weight"):
        shape = [vocab, shape[1]]
    size = 2
    for d in shape:
        size *= d
    out[name] = {"dtype": "F16", "shape": shape, "data_offsets": [at, at + size]}
    at += size
text = json.dumps(out).encode()
text += b" " * (-len(text) % 8)
os.makedirs(dst, exist_ok=True)
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    f.truncate(8 + len(text) + at)
with open(os.path.join(src, "config.json")) as f:
    config = json.load(f)
config["vocab_size"] = vocab
config["torch_dtype"] = "float16"
with open(os.path.join(dst, "config.json"), "w") as f:
    json.dump(config, f)
