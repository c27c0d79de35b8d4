#!/usr/bin/env python3
"""tgc run --trace FILE.json (docs/pipeline.md): a Chrome trace Perfetto
opens -- valid JSON in the traceEvents format, a process per rank named with
its (tp, dp, pp) coordinates, and per rank one forward and one backward span
per (chunk, micro-batch) and step, sends and receives, the data-parallel
reduction and the update once per step; spans of one thread do not overlap.

usage: trace.py TGC MODEL TEXT
"""
import json, os, subprocess, sys, tempfile
from collections import Counter


def main():
    tgc, model, text = sys.argv[1:4]
    steps, m, v, p, d = 2, 4, 2, 2, 2
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        subprocess.check_call([tgc, "run", model, "--set", "layers=4", "--set", "hidden=64", "--set", "heads=4",
                               "--set", "seq=32", "--micro-batch-size", "2", "--global-batch-size", str(2 * m * d),
                               "--pp", str(p), "--vp", str(v), "--pipeline-schedule", "interleaved", "--dp", str(d),
                               "--data", text, "--train-iters", str(steps), "--quiet", "--trace", path])
        events = json.load(open(path))["traceEvents"]
    ok = True
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    spans = [e for e in events if e["ph"] == "X"]
    count = Counter((e["pid"], e["cat"]) for e in spans)
    print("ranks:", names)
    for rank in range(p * d):
        want = {"forward": steps * m * v, "backward": steps * m * v, "all-reduce": steps, "optimizer": steps}
        for cat, n in want.items():
            if count[(rank, cat)] != n:
                print("FAIL: rank %d has %d %s spans, expected %d" % (rank, count[(rank, cat)], cat, n))
                ok = False
        comm = sum(count[(rank, c)] for c in ("send", "recv", "send+recv"))
        if comm == 0:
            print("FAIL: rank %d has no send or receive spans" % rank)
            ok = False
        if "pp %d" % (rank // d) not in names.get(rank, ""):
            print("FAIL: rank %d is named %r" % (rank, names.get(rank)))
            ok = False
        for tid in (0, 1):
            row = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if e["pid"] == rank and e["tid"] == tid)
            if any(b[0] < a[1] - 1e-3 for a, b in zip(row, row[1:])):
                print("FAIL: rank %d thread %d has overlapping spans" % (rank, tid))
                ok = False
    print("spans per (rank, category):", sorted(count.items()))
    print("trace:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
