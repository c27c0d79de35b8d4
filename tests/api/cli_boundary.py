#!/usr/bin/env python3
"""The command line is a client of libtgc.so (docs/architecture.md), by
construction:

  (a) every cli/*.c and cli/*.h includes only "tgc.h", cli's own headers
      (and tgc_version.h, which the build generates for the CLI), and
      system headers (<...> naming no header of the source tree);
  (b) the tgc binary needs libtgc.so (readelf -d), and every symbol it
      takes from a library is libc's (versioned, GLIBC_*), a sanitizer
      runtime's that it needs (the sanitizer builds: libasan's
      interceptors of malloc, strlen, ..., and its __asan_*, __ubsan_*
      calls; never one libtgc.so defines) or a public tgc_* call that
      include/tgc.h declares and libtgc.so exports;
  (c) the binary defines no internal symbol of the library: nothing named
      like the library's modules (ir_, cg_, rt_, pass_, fe_, api_, tgc_,
      ...) and none of libtgc.so's own (hidden) global symbols.

  cli_boundary.py SOURCE_DIR TGC_BINARY LIBTGC
"""
import os
import re
import subprocess
import sys

# The library's internal prefixes (its modules; tgc_ is the public API's,
# which the binary must call, never define).
INTERNAL = re.compile(r"^(ir|cg|rt|pass|passes|fe|api|tgc|diag|sb|hf|tokenizer|bpe|spm|pipe|cost|plan_search|"
                      r"memplan|cuda|nvrtc|blas|comm|philox|file|xmalloc|xrealloc|xstrdup|xcalloc|parse_i64|"
                      r"parse_double)(_|$)")
# What a linked C program takes from the toolchain's start files (weak, or
# the loader's), not from a library of ours.
RUNTIME = {"_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable", "__gmon_start__", "__cxa_finalize",
           "_Jv_RegisterClasses"}


def out(argv):
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout


def check_includes(src, errors):
    cli = os.path.join(src, "cli")
    own = {f for f in os.listdir(cli) if f.endswith(".h")}
    for name in sorted(os.listdir(cli)):
        if not name.endswith((".c", ".h")):
            continue
        with open(os.path.join(cli, name)) as f:
            for n, line in enumerate(f, 1):
                m = re.match(r'\s*#\s*include\s*([<"])([^>"]+)[>"]', line)
                if not m:
                    continue
                kind, inc = m.groups()
                where = f"cli/{name}:{n}: #include {kind}{inc}{'>' if kind == '<' else kind}"
                if kind == '"':
                    ok = (inc == "tgc.h" or inc == "tgc_version.h" or inc in own or
                          (inc.startswith("cli/") and inc[4:] in own))
                    if not ok:
                        errors.append(f"{where}: not tgc.h nor a header of cli/")
                elif inc != "tgc.h" and (os.path.exists(os.path.join(src, inc)) or
                                         os.path.exists(os.path.join(src, "include", inc))):
                    errors.append(f"{where}: a header of the source tree, not a system header")


def sanitizer_symbols(tgc, needed):
    """What the sanitizer runtimes the binary needs export (none in the
    release build): their paths as the loader resolves them (ldd)."""
    runtimes = [n for n in needed if re.match(r"lib(asan|ubsan|tsan|lsan)\.so", n)]
    if not runtimes:
        return set()
    paths = dict(re.findall(r"^\s*(\S+) => (/\S+)", out(["ldd", tgc]), re.M))
    syms = set()
    for n in runtimes:
        if n not in paths:
            raise SystemExit(f"{tgc} needs {n}, which ldd does not resolve")
        syms |= {l.split()[-1].split("@")[0] for l in out(["nm", "-D", "--defined-only", paths[n]]).splitlines()
                 if l.strip()}
    return syms


def check_binary(src, tgc, lib, errors):
    dyn = out(["readelf", "-d", tgc])
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    if not any(re.match(r"libtgc\.so(\.|$)", n) for n in needed):
        errors.append(f"{tgc} does not need libtgc.so (NEEDED: {', '.join(needed)})")
    with open(os.path.join(src, "include", "tgc.h")) as f:
        header = f.read()
    public = set(re.findall(r"\bTGC_API\b[^;{]*?\b(tgc_\w+)\s*\(", header, re.S))
    exported = {l.split()[-1] for l in out(["nm", "-D", "--defined-only", lib]).splitlines() if l.strip()}
    sanitizer = sanitizer_symbols(tgc, needed) - exported
    taken = 0
    for line in out(["nm", "-D", "--undefined-only", tgc]).splitlines():
        w = line.split()
        if not w:
            continue
        kind, sym = w[-2], w[-1]
        base = sym.split("@")[0]
        if base in RUNTIME or kind == "w":
            continue
        if "@GLIBC_" in sym or base in sanitizer:
            continue
        if base.startswith("tgc_") and base in public and base in exported:
            taken += 1
            continue
        why = ("not declared TGC_API in include/tgc.h" if base.startswith("tgc_") and base not in public else
               "not exported by libtgc.so" if base.startswith("tgc_") else "neither libc's nor the public API's")
        errors.append(f"{tgc} takes {sym} from a library: {why}")
    # (c): the binary's own symbols (its static symbol table, or the dynamic one where stripped).
    own = out(["nm", "--defined-only", tgc]) or out(["nm", "-D", "--defined-only", tgc])
    lib_globals = {l.split()[-1] for l in out(["nm", "--defined-only", lib]).splitlines()
                   if len(l.split()) >= 3 and l.split()[-2] in "TDBRV"}
    for line in own.splitlines():
        w = line.split()
        if len(w) < 2:
            continue
        sym = re.sub(r"\.(cold|part|constprop|isra|lto_priv)(\.\d+)*.*$", "", w[-1])
        if sym in RUNTIME or sym.startswith("_") or sym == "main":
            continue
        if INTERNAL.match(sym):
            errors.append(f"{tgc} defines {w[-1]}: a name of the library's internals")
        elif sym in lib_globals:
            errors.append(f"{tgc} defines {w[-1]}, one of libtgc.so's own symbols")
    return taken


def main():
    src, tgc, lib = (os.path.abspath(a) for a in sys.argv[1:4])
    errors = []
    check_includes(src, errors)
    taken = check_binary(src, tgc, lib, errors)
    if errors:
        print("the command line reaches past include/tgc.h:")
        for e in errors:
            print("  " + e)
        return 1
    print(f"cli/ includes tgc.h and its own headers only; tgc needs libtgc.so and takes {taken} public tgc_* "
          "calls from it, nothing else of the library's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
