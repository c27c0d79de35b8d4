#!/usr/bin/env python3
"""The optimizer update's loops vectorise (docs/performance.md, "The
optimizer update"): for AdamW, Adam and SGD with momentum, fp32 and --bf16
(not --fp16: gcc keeps the f16 update scalar, "control flow in loop"),
with parameter groups (a no-decay segment and a group with its own lr and
wd), tgc runs one step keeping its kernels' C (TGC_KEEP_SOURCE), and the
same compiler with the backend's flags (runtime/backend/cpu.c) compiles
that source with -fopt-info-vec: every loop of the update kernel must be
reported vectorised, and the kernel must test the skip of a non-finite step
once (`if (tgc_uniform)`), not per element. Needs GCC's -fopt-info
(another compiler: skipped, 77).

usage: vectorised.py TGC
"""
import os, re, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAGS = ["-std=c11", "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno", "-Wno-unused"]
CASES = [
    ("adamw", []),
    ("adamw bf16", ["--bf16"]),
    ("adam bf16", ["--optimizer", "adam", "--bf16"]),
    ("sgd momentum", ["--optimizer", "sgd", "--sgd-momentum", "0.9"]),
]


def kernel_lines(src, op):
    """The first and last line (1-based) of the kernel computing `= op`."""
    lines = src.split("\n")
    for i, l in enumerate(lines):
        if re.match(r"/\* %\S+ = " + op + r" \*/$", l):
            for j in range(i + 1, len(lines)):
                if lines[j] == "}":
                    return i + 1, j + 1, "\n".join(lines[i:j + 1])
    return None


def main():
    tgc = sys.argv[1]
    cc = os.environ.get("TGC_CC") or "cc"
    ver = subprocess.run([cc, "--version"], capture_output=True, text=True)
    if ver.returncode != 0 or "Free Software Foundation" not in ver.stdout:
        print("skipped: the kernel compiler is not GCC (-fopt-info)")
        return 77
    failures = 0
    for name, args in CASES:
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, TGC_KEEP_SOURCE="1", TGC_CACHE_DIR=d)
            groups = ["--param-group", "layers.0.*:lr_mult=0.5,wd_mult=2"]
            r = subprocess.run([tgc, "run", os.path.join(ROOT, "samples/gpt.tg"), "--set", "layers=2", "--set",
                                "hidden=64", "--data", os.path.join(ROOT, "README.md"), "--train-iters", "1",
                                "--quiet"] + groups + args, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {name}: tgc run exited {r.returncode}: {r.stderr}")
                failures += 1
                continue
            srcs = [os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs if f.endswith(".c")]
            if len(srcs) != 1:
                print(f"FAIL {name}: expected one kept source, found {srcs}")
                failures += 1
                continue
            src = open(srcs[0]).read()
            op = "sgd" if "sgd" in args else "adamw"
            found = kernel_lines(src, op)
            if not found:
                print(f"FAIL {name}: no {op} kernel in {srcs[0]}")
                failures += 1
                continue
            lo, hi, text = found
            info = subprocess.run([cc] + FLAGS + ["-fopt-info-vec-all", "-c", srcs[0], "-o", os.devnull],
                                  capture_output=True, text=True)
            base = re.escape(os.path.basename(srcs[0]))
            loops, vec, found_vec = set(), set(), set()
            for l in info.stderr.split("\n"):
                m = re.search(base + r":(\d+):\d+: (optimized|missed): (.*)", l)
                if not m or not lo <= int(m.group(1)) <= hi:
                    continue
                if m.group(2) == "optimized" and "loop vectorized" in m.group(3):
                    vec.add(int(m.group(1)))
            starts = [lo + i for i, l in enumerate(text.split("\n")) if re.match(r"\s*for \(int64_t i = ", l)]
            # gcc reports a vectorised loop at a line of its body: loop j spans its `for` to the next one's
            for j, a in enumerate(starts):
                loops.add(a)
                if any(a <= v < (starts[j + 1] if j + 1 < len(starts) else hi) for v in vec):
                    found_vec.add(a)
            vec = found_vec
            # 4 segments in each branch of the skip test: the decayed weights, the no-decay
            # parameters, and the two runs the group splits off (its weights, its no-decay ones)
            segs = len(loops) // 2
            ok = loops and loops <= vec and "if (tgc_uniform)" in text and len(loops) == 8
            print(f"{'ok' if ok else 'FAIL'} {name}: {len(loops)} loops ({segs} segments per branch), "
                  f"{len(loops & vec)} vectorised")
            if not ok:
                print(text)
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
