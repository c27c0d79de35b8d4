#!/usr/bin/env python3
"""tgc as an installed library (docs/api.md): `cmake --install` into a
temporary prefix; examples/ built against it as a CMake project of its own
(find_package(tgc), tgc::tgc) and with pkg-config; the example's losses,
gradient norms and learning rates equal `tgc run`'s for the same model,
options and data, on one rank, on two tensor-parallel rank threads and on
two pipeline stages; the generation example's tokens and text equal `tgc
sample`'s (greedy and seeded) for the weights of such a run; the installed
library exports the public API's tgc_* symbols only.

  install.py BUILD_DIR SOURCE_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def run(argv, **kw):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(argv)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def example_figures(out):
    rows = []
    for line in out.splitlines():
        w = line.split()
        if w and w[0] == "iteration":
            rows.append((int(w[1]), float(w[3]), float(w[5]), float(w[7])))
    return rows


def main():
    build, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    tmp = tempfile.mkdtemp(prefix="tgc-install-")
    try:
        prefix = os.path.join(tmp, "prefix")
        run(["cmake", "--install", build, "--prefix", prefix])
        libdirs = [d for d in ("lib", "lib64") if os.path.isdir(os.path.join(prefix, d))]
        libdir = os.path.join(prefix, libdirs[0])
        for f in ("include/tgc.h",):
            assert os.path.isfile(os.path.join(prefix, f)), f
        for f in ("libtgc.so", "pkgconfig/tgc.pc", "cmake/tgc/tgcConfig.cmake", "cmake/tgc/tgcConfigVersion.cmake"):
            assert os.path.exists(os.path.join(libdir, f)), f

        # Only the public API is exported.
        syms = run(["nm", "-D", "--defined-only", os.path.join(libdir, "libtgc.so")]).split("\n")
        names = [s.split()[-1] for s in syms if s.strip() and s.split()[-2] in ("T", "D", "B", "R")]
        hidden = [n for n in names if not n.startswith("tgc_")]
        assert not hidden, f"libtgc.so exports more than tgc_*: {hidden[:10]}"
        with open(os.path.join(src, "include", "tgc.h")) as f:
            header = f.read()
        for n in names:
            assert re.search(rf"\bTGC_API\b[^;]*\b{n}\(", header), f"libtgc.so exports {n}, which tgc.h does not declare"
        print(f"libtgc.so exports {len(names)} symbols, all tgc_* and declared in tgc.h")

        # The installed tgc finds the installed libtgc.so by its RPATH
        # ($ORIGIN/../lib), not the build tree's, with no LD_LIBRARY_PATH.
        tgc_bin = os.path.join(prefix, "bin", "tgc")
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        ldd = run(["ldd", tgc_bin], env=env)
        where = [l.split("=>")[1].split()[0] for l in ldd.splitlines() if "libtgc.so" in l and "=>" in l]
        assert where and os.path.realpath(where[0]).startswith(os.path.realpath(libdir)), ldd
        assert run([tgc_bin, "--version"], env=env).startswith("tgc "), "the installed tgc does not run"
        print(f"the installed tgc runs on {where[0]}")

        # A CMake project of its own, with find_package(tgc) against the prefix.
        exb = os.path.join(tmp, "examples-build")
        run(["cmake", "-S", os.path.join(src, "examples"), "-B", exb, f"-DCMAKE_PREFIX_PATH={prefix}",
             "-DCMAKE_BUILD_TYPE=Release"])
        run(["cmake", "--build", exb])
        cmake_exe = os.path.join(exb, "train_gpt")
        # And with pkg-config.
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"))
        flags = run(["pkg-config", "--cflags", "--libs", "tgc"], env=env).split()
        incs = [os.path.normpath(f[2:]) for f in flags if f.startswith("-I")]
        assert os.path.join(prefix, "include") in incs, flags
        pc_exe = os.path.join(tmp, "train_gpt_pc")
        cc = os.environ.get("CC", "cc")
        run([cc, os.path.join(src, "examples", "train_gpt.c"), "-o", pc_exe] + flags + [f"-Wl,-rpath,{libdir}"])

        model, data = os.path.join(src, "samples", "gpt.tg"), os.path.join(src, "README.md")
        # One rank; two tensor-parallel rank threads; the pipeline runtime
        # (two stages, four micro-batches a step), whose state lives on
        # between the example's one-iteration calls.
        pp = [("set", "seq=32"), ("pp", "2"), ("global-batch-size", "16"), ("micro-batch-size", "4")]
        for extra in ([], [("tp", "2")], pp):
            opts = [("set", "layers=2"), ("set", "hidden=64"), ("train-iters", "3")] + extra
            log = os.path.join(tmp, "run.jsonl")
            if os.path.exists(log):
                os.remove(log)
            cli = [os.path.join(build, "tgc"), "run", model, "--data", data, "--quiet", "--log", log]
            for k, v in opts:
                cli += ["--set", v] if k == "set" else [f"--{k}", v]
            run(cli, cwd=tmp)
            with open(log) as f:
                ref = [json.loads(l) for l in f if l.strip()]
            ref = [(r["step"], r["loss"], r["grad_norm"], r["lr"]) for r in ref]
            for exe in (cmake_exe, pc_exe):
                got = example_figures(run([exe, model, data] + [f"{k}={v}" for k, v in opts], cwd=tmp))
                assert len(got) == 3 and got == ref, f"{exe} {extra}: {got}\n  tgc run: {ref}"
            print(f"{' '.join(f'{k}={v}' for k, v in opts)}: the example (CMake and pkg-config builds) and tgc run "
                  f"give losses {[r[1] for r in ref]}")

        # Generation through the installed library: examples/generate.c
        # against `tgc sample` on the weights of a tgc run.
        gen_pc = os.path.join(tmp, "generate_pc")
        run([cc, os.path.join(src, "examples", "generate.c"), "-o", gen_pc] + flags + [f"-Wl,-rpath,{libdir}"])
        save = os.path.join(tmp, "ckpt")
        run([os.path.join(build, "tgc"), "run", model, "--data", data, "--quiet", "--set", "layers=2", "--set",
             "hidden=64", "--train-iters", "3", "--lr", "3e-3", "--save", save], cwd=tmp)
        prompt = "In the beginning"
        ids = ",".join(str(b) for b in prompt.encode())
        for sampler in ([("temperature", "0")], [("temperature", "0.9"), ("top-k", "8"), ("seed", "5")]):
            sample = [os.path.join(build, "tgc"), "sample", model, "--set", "layers=2", "--set", "hidden=64",
                      "--weights", save, "--prompt-tokens", ids, "--tokens", "24"]
            for k, v in sampler:
                sample += [f"--{k}", v]
            sample_ids = run(sample, cwd=tmp).strip()
            assert len(sample_ids.split(",")) == len(prompt) + 24, sample_ids
            for exe in (os.path.join(exb, "generate"), gen_pc):
                p = subprocess.run([exe, model, save, prompt, "24", "set=layers=2", "set=hidden=64"] +
                                   [f"{k}={v}" for k, v in sampler], stdout=subprocess.PIPE, cwd=tmp)
                assert p.returncode == 0, f"{exe} {sampler}: status {p.returncode}"
                got_ids, got_text = p.stdout.split(b"\n", 1)
                assert got_ids.decode() == sample_ids, f"{exe} {sampler}: tokens {got_ids}\n  tgc sample: {sample_ids}"
                # A byte-level model: the text is the tokens' bytes.
                want = bytes(int(t) for t in sample_ids.split(","))
                assert got_text == want + b"\n", f"{exe} {sampler}: text {got_text!r}, the tokens' bytes {want!r}"
            print(f"generation {sampler}: the example (CMake and pkg-config builds) and tgc sample give {sample_ids}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
