#!/usr/bin/env bash
# json.sh TGC MODEL: the JSON output parses and agrees with the text IR on
# the number of nodes, names and shapes, and the passes applied.
set -euo pipefail
tgc=$1 model=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tgc" dump-ir "$model" --format json -o "$dir/g.json"
"$tgc" dump-ir "$model" -o "$dir/g.ir"
python3 - "$dir/g.json" "$dir/g.ir" <<'PY'
import json, re, sys
doc = json.load(open(sys.argv[1]))
assert doc["format"] == "tgc-ir" and doc["version"] == 1, doc.get("format")
text = open(sys.argv[2]).read().splitlines()
# The names, without the options each pass ran with ("fuse(fuse=all ...)").
args = re.compile(r'\((?:[^()"]|"(?:[^"\\]|\\.)*")*\)')
passes = [args.sub("", l[len("passes "):]).split(", ") for l in text if l.startswith("passes ")]
assert doc["passes"] == (passes[0] if passes else []), (doc["passes"], passes)
lines = [l for l in text if l.startswith("%")]
assert len(lines) == len(doc["nodes"]), (len(lines), len(doc["nodes"]))
for line, node in zip(lines, doc["nodes"]):
    name = line.split(" = ", 1)[0][1:]
    assert name == node["name"], (name, node["name"])
    m = re.search(r" : (\w+)\[([^\]]*)\]", line)
    shape = [int(d) for d in m.group(2).split(",")] if m.group(2).strip() else []
    assert m.group(1) == node["dtype"] and shape == node["shape"], (line, node)
    for i in node["operands"]:
        assert 0 <= i < node["id"], node
print("json ok:", len(doc["nodes"]), "nodes")
PY
