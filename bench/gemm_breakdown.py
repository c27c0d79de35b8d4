#!/usr/bin/env python3
"""The GEMMs of one tgc training step, each timed alone with OpenBLAS.

Lists a model's GEMMs with `tgc compile --backend cuda --gemm-report` (no GPU
needed: it prints every GEMM's m, n, k, transposes, leading dimensions and
batch strides, column-major), calls cblas_sgemm on each exactly as tgc's CPU
backend does (a batched GEMM is a loop of sgemm calls, runtime/exec.c),
through ctypes on the OpenMP OpenBLAS that tgc links, and prints the time
per GEMM kind and in all: what a step's GEMMs cost with warm caches and
nothing else running, to set beside `TGC_DEBUG=2 tgc run`'s (gemm) row.

usage: bench/gemm_breakdown.py TGC [--set NAME=VALUE ...] [--reps N]
Threads: OMP_NUM_THREADS (as for tgc).
"""
import argparse, ctypes, os, re, subprocess, sys, time
from collections import OrderedDict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBS = ["/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0", "libopenblas.so.0"]
COL_MAJOR, NO_TRANS, TRANS = 102, 111, 112


def parse(report):
    gemms, name = [], None
    for line in report.splitlines():
        m = re.match(r"gemm \d+\s+%(\S+)", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"cublasLt m=(\d+) n=(\d+) k=(\d+) op=([NT])([NT]) lda=(\d+) ldb=(\d+) ldc=(\d+) batch=(\d+)"
                      r"(?: strides=(\d+),(\d+),(\d+))?", line)
        if m:
            v = m.groups()
            g = dict(name=name, m=int(v[0]), n=int(v[1]), k=int(v[2]), ta=v[3] == "T", tb=v[4] == "T",
                     lda=int(v[5]), ldb=int(v[6]), ldc=int(v[7]), batch=int(v[8]),
                     sa=int(v[9] or 0), sb=int(v[10] or 0), sc=int(v[11] or 0))
            gemms.append(g)
    return gemms


def kind(name):
    """layers.3.self_attention.qkv -> self_attention.qkv (the layers merged)."""
    return re.sub(r"layers\.\d+\.", "", name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    sets = sum((["--set", s] for s in a.set), [])
    out = subprocess.run([a.tgc, "compile", os.path.join(ROOT, "samples", "gpt.tg")] + sets +
                         ["--backend", "cuda", "--gemm-report"], capture_output=True, text=True)
    gemms = parse(out.stdout + out.stderr)
    if not gemms:
        sys.exit("gemm_breakdown: no GEMMs in the report:\n" + out.stdout + out.stderr)
    lib = None
    for path in LIBS:
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError:
            pass
    if lib is None:
        sys.exit("gemm_breakdown: no OpenBLAS")
    f, i, p = ctypes.c_float, ctypes.c_int, ctypes.c_void_p
    lib.cblas_sgemm.argtypes = [i, i, i, i, i, i, f, p, i, p, i, f, p, i]
    lib.cblas_sgemm.restype = None
    # Column-major operands: A is lda x (k, or m transposed), B ldb x (n, or k), C ldc x n, per batch entry.
    need = [max((g["batch"] - 1) * g[st] + g[ld] * cols for g in gemms for st, ld, cols in
                [(("sa", "lda", g["m"] if g["ta"] else g["k"]), ("sb", "ldb", g["k"] if g["tb"] else g["n"]),
                  ("sc", "ldc", g["n"]))[w]]) for w in range(3)]
    bufs = [(ctypes.c_float * n)() for n in need]  # zeroed by ctypes
    A, B, C = (ctypes.addressof(b) for b in bufs)

    def call(g):
        for j in range(g["batch"]):
            lib.cblas_sgemm(COL_MAJOR, TRANS if g["ta"] else NO_TRANS, TRANS if g["tb"] else NO_TRANS,
                            g["m"], g["n"], g["k"], 1.0, A + 4 * j * g["sa"], g["lda"], B + 4 * j * g["sb"],
                            g["ldb"], 0.0, C + 4 * j * g["sc"], g["ldc"])

    groups = OrderedDict()
    total_s = total_f = 0.0
    for g in gemms:
        call(g)
        best = min(_timed(call, g) for _ in range(a.reps))
        fl = 2.0 * g["m"] * g["n"] * g["k"] * g["batch"]
        shape = "%dx%dx%d%s%s" % (g["m"], g["n"], g["k"], " op=" + "NT"[g["ta"]] + "NT"[g["tb"]],
                                   " x%d" % g["batch"] if g["batch"] > 1 else "")
        e = groups.setdefault(kind(g["name"]), {"n": 0, "s": 0.0, "f": 0.0, "shape": shape})
        e["n"] += 1
        e["s"] += best
        e["f"] += fl
        total_s += best
        total_f += fl
    print("| GEMM (tgc's name, layers merged) | count | m x n x k (column-major) | ms/step | GFLOP/s | share |")
    print("|---|---|---|---|---|---|")
    for k, e in sorted(groups.items(), key=lambda kv: -kv[1]["s"]):
        print("| %s | %d | %s | %.2f | %.0f | %.1f%% |" % (k, e["n"], e["shape"], 1e3 * e["s"], e["f"] / e["s"] / 1e9,
                                                         100 * e["s"] / total_s))
    print("| all %d GEMMs | | %.4g FLOPs | %.1f | %.0f | |" % (len(gemms), total_f, 1e3 * total_s,
                                                              total_f / total_s / 1e9))


def _timed(fn, g):
    t0 = time.perf_counter()
    fn(g)
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
