#!/usr/bin/env python3
"""docs.flags: README.md and docs/*.md name no option tgc does not have.

usage: doc_flags.py TGC ROOT

Every `--name` in README.md and docs/*.md is checked against what the built
tgc accepts, asked of tgc itself: `tgc CMD --name --zz-sentinel` answers
"unknown option '--name'" exactly when CMD's option table lacks it (the
sentinel, an unknown option, stops the command before it does anything).

- In a command (a line of a code block, backslash continuations joined, or
  an inline code span) that invokes tgc (`tgc`, `build/tgc`, any path ending
  in /tgc), the options after `tgc CMD` must be options of that CMD.
- Options of the command heads below (mpirun, cmake, ...) are another
  tool's; those of a program of this repository (bench/train_bench.py,
  scripts/gpu_check.sh, build/bench_optim: bench/optim.c) must occur in its
  source.
- Elsewhere (prose, a span without a command) an option must be one of any
  tgc command, one a program of this repository defines (its literal in
  bench/, scripts/ or tests/ sources), or in ALLOWED below with its reason,
  where a word that must stand in the same paragraph says whose it is.

Each problem is printed as FILE:LINE: --name: why; exit 1 if any.
"""
import glob
import os
import re
import shlex
import subprocess
import sys

# Command heads whose options are another tool's (not checked).
EXTERNAL = {
    "mpirun": "Open MPI's launcher", "mpiexec": "Open MPI's launcher",
    "torchrun": "PyTorch's launcher", "cmake": "CMake", "ctest": "CTest",
    "pip": "pip", "pip3": "pip", "git": "git", "valgrind": "valgrind",
    "spm_train": "SentencePiece's trainer", "dot": "Graphviz", "lit.py": "LLVM's lit",
    "pkg-config": "pkg-config", "apt-get": "apt", "nvcc": "CUDA's compiler",
    "ncu": "Nsight Compute", "nsys": "Nsight Systems", "gdb": "gdb", "perf": "perf",
    "python3": "Python (a script argument follows)", "env": "env",
}

# Options named in prose that are no tgc option: (name, word that must be
# in the same paragraph, why).
ALLOWED = [
    ("micro", "abbreviate", "docs/tools.md's example of an abbreviation tgc refuses"),
    ("use-cpu-initialization", "Megatron", "Megatron-LM's flag, named as Megatron's"),
    ("test-data-path", "Not implemented", "Megatron-LM's flag that docs/data.md says tgc does not implement"),
    ("data-args-path", "Not implemented", "the same"),
    ("per-split-data-args-path", "Not implemented", "the same"),
    ("use_fast_math", "NVRTC", "an NVRTC option tgc does not pass"),
    ("gpu-architecture", "NVRTC", "an NVRTC option"),
    ("ptxas-options", "NVRTC", "an NVRTC option"),
    ("allow-run-as-root", "mpirun", "Open MPI's option"),
    ("oversubscribe", "mpirun", "Open MPI's option"),
    ("mca", "mpirun", "Open MPI's option"),
    ("nnodes", "torchrun", "torchrun's option"),
]

SUBCOMMANDS = {"check", "dump-ir", "compile", "run", "plan", "plot", "inspect", "export", "sample", "help"}
TWO_WORDS = {"data": {"prep", "info", "dump"}, "import": {"hf"}}
PROBE_CMDS = [["run"], ["check"], ["dump-ir"], ["compile"], ["plan"], ["sample"], ["export"], ["import"],
              ["data", "prep"], ["data", "info"], ["data", "dump"], ["plot"], ["inspect"], []]
FLAG = re.compile(r"(?<![A-Za-z0-9_./-])--([a-z0-9][a-z0-9_-]*[a-z0-9]|[a-z0-9])(-\*)?(?![A-Za-z0-9_]|->)")


def main():
    tgc, root = sys.argv[1], sys.argv[2]
    cache = {}

    def accepts(cmd, flag):
        key = (tuple(cmd), flag)
        if key not in cache:
            r = subprocess.run([tgc] + cmd + ["--" + flag, "--zz-sentinel"], capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=60)
            unknown = ("unknown command '--%s'" if not cmd else "unknown option '--%s'") % flag
            cache[key] = unknown not in r.stderr
        return cache[key]

    # The probe itself must be able to fail: a made-up option is unknown everywhere.
    for cmd in PROBE_CMDS:
        if accepts(cmd, "no-such-option-zz"):
            print("doc_flags: the probe of 'tgc %s' accepts a made-up option; it cannot check" % " ".join(cmd))
            return 1

    def any_cmd(flag):
        return next((c for c in PROBE_CMDS if accepts(c, flag)), None) is not None

    def tgc_prefix(prefix):  # --recompute-*: some option starts so
        names = set()
        for cmd in (["run"], ["dump-ir"]):
            r = subprocess.run([tgc] + cmd + ["--help"], capture_output=True, text=True)
            names |= set(re.findall(r"--([a-z0-9-]+)", r.stdout))
        return any(n.startswith(prefix + "-") for n in names)

    sources = {}
    for pat in ("bench/*", "scripts/*.sh", "scripts/lib/*.sh", "tests/**/*.py", "tests/**/*.sh", "tests/**/*.c"):
        for p in glob.glob(os.path.join(root, pat), recursive=True):
            if os.path.isfile(p) and "/lit/" not in p:
                with open(p, errors="replace") as f:
                    sources[os.path.relpath(p, root)] = f.read()

    def defined_in(flag, path=None):
        pat = re.compile(r"(?<![A-Za-z0-9_-])--%s(?![A-Za-z0-9_-])" % re.escape(flag))
        files = [path] if path else sorted(sources)
        return [p for p in files if p in sources and pat.search(sources[p])]

    def repo_program(word):  # bench/x.py, scripts/y.sh, build/bench_z -> its source, or None
        w = word[2:] if word.startswith("./") else word
        if w in sources:
            return w
        m = re.match(r"(?:build[^/]*/)?bench_([a-z0-9_]+)$", w)
        if m and "bench/%s.c" % m.group(1) in sources:
            return "bench/%s.c" % m.group(1)
        return None

    problems = []
    checked = 0
    used = set()

    def check_command(text, where, para):
        """Options of one command line; returns the flags it accounted for."""
        nonlocal checked
        try:
            words = shlex.split(text, comments=False)
        except ValueError:
            words = text.split()
        done = set()
        i = 0
        head = None  # ("tgc", cmd) | ("repo", path) | ("ext", name) | None
        while i < len(words):
            w = words[i]
            base = os.path.basename(w)
            if w in ("|", "&&", ";", "||") or w.endswith(";"):
                head = None
            elif base == "tgc" and (w == "tgc" or "/" in w) and not (i and FLAG.fullmatch(words[i - 1])) \
                    and (head is None or head[0] != "repo"):
                # (not the value of an option, --tgc build/tgc, nor a repo program's argument)
                cmd = []
                if i + 1 < len(words) and words[i + 1] in SUBCOMMANDS:
                    cmd = [words[i + 1]]
                    i += 1
                elif i + 1 < len(words) and words[i + 1] in TWO_WORDS:
                    cmd = [words[i + 1]]
                    i += 1
                    if i + 1 < len(words) and words[i + 1] in TWO_WORDS[cmd[0]]:
                        cmd.append(words[i + 1])
                        i += 1
                if cmd and cmd[0] == "import":
                    cmd = ["import"]
                head = ("tgc", cmd)
            elif head is None or head[0] in ("ext",) and base in EXTERNAL:
                if repo_program(w):
                    head = ("repo", repo_program(w))
                elif base in EXTERNAL:
                    head = ("ext", base)
            elif head[0] == "ext" and head[1] == "python3" and repo_program(w):
                head = ("repo", repo_program(w))
            m = FLAG.fullmatch(w.split("=", 1)[0]) if w.startswith("--") else None
            if m and head:
                flag = m.group(1)
                done.add(flag)
                checked += 1
                if head[0] == "tgc":
                    cmd = head[1]  # [] for tgc alone: --version, --help
                    if cmd == ["help"]:
                        cmd = []
                    if not accepts(cmd, flag):
                        problems.append("%s: --%s: 'tgc %s' has no such option" % (where, flag, " ".join(cmd)))
                elif head[0] == "repo" and not defined_in(flag, head[1]):
                    problems.append("%s: --%s: %s does not define it" % (where, flag, head[1]))
            i += 1
        return done

    def check_loose(flag, star, where, para):
        nonlocal checked
        checked += 1
        if star:
            if not tgc_prefix(flag):
                problems.append("%s: --%s-*: no tgc option starts so" % (where, flag))
            return
        if any_cmd(flag) or defined_in(flag):
            return
        for name, word, _why in ALLOWED:
            if name == flag and word.lower() in para.lower():
                used.add(name)
                return
        problems.append("%s: --%s: no tgc command has this option, no program of the repository defines it, and "
                        "it is not allowed as another tool's (tests/scripts/doc_flags.py, ALLOWED)" % (where, flag))

    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    for path in files:
        rel = os.path.relpath(path, root)
        with open(path) as f:
            lines = f.read().split("\n")
        in_code = False
        para, para_start = [], 0
        n = 0
        blocks = []  # (kind, start line, text)
        while n < len(lines):
            line = lines[n]
            if line.lstrip().startswith("```"):
                if para:
                    blocks.append(("prose", para_start, para))
                    para = []
                in_code = not in_code
                n += 1
                continue
            if in_code:
                start = n
                text = line
                while text.endswith("\\") and n + 1 < len(lines):
                    n += 1
                    text = text[:-1] + " " + lines[n]
                blocks.append(("code", start + 1, [text]))
            elif line.strip() == "" or line.lstrip().startswith(("#", "|")):
                if para:
                    blocks.append(("prose", para_start, para))
                    para = []
                if line.strip():
                    blocks.append(("prose", n + 1, [line]))
            else:
                if not para:
                    para_start = n + 1
                para.append(line)
            n += 1
        if para:
            blocks.append(("prose", para_start, para))

        for kind, start, text_lines in blocks:
            first = len(problems)
            text = " ".join(text_lines)
            where = "%s:%d" % (rel, start)
            if kind == "code":
                code, _, comment = text.partition(" #")
                if text.lstrip().startswith("#"):
                    code, comment = "", text
                done = check_command(code, where, text)
                rest = comment + " " + " ".join(w for w in code.split() if FLAG.fullmatch(w.split("=")[0] or "")
                                                and FLAG.fullmatch(w.split("=")[0]).group(1) not in done)
            else:
                rest = text
                for span in re.findall(r"`([^`]+)`", text):
                    done = check_command(span, where, text)
                    rest = rest.replace("`%s`" % span, " ".join(
                        "`%s`" % w for w in span.split() if w.startswith("--") and
                        (FLAG.match(w) and FLAG.match(w).group(1) not in done)) or " ", 1)
            for m in FLAG.finditer(rest):
                check_loose(m.group(1), m.group(2), where, text)
            for k in range(first, len(problems)):  # name the line the option is on, not the paragraph's first
                flag = problems[k].split(": ", 2)[1].split("-*")[0]
                line = next((start + j for j, l in enumerate(text_lines) if flag in l), start)
                problems[k] = problems[k].replace(where + ":", "%s:%d:" % (rel, line), 1)

    for name, _word, _why in ALLOWED:
        if name not in used:
            print("note: ALLOWED's --%s is named by no document now (remove it?)" % name)
    for p in problems:
        print(p)
    print("doc_flags: %d options checked in %d files, %d problems" % (checked, len(files), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
