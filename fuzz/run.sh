#!/usr/bin/env bash
# fuzz/run.sh [SECONDS]: builds the libFuzzer targets with clang (build-fuzz/,
# or $TGC_FUZZ_BUILD) and runs each for SECONDS (default 60) on a working copy
# of the seed corpus (fuzz/corpus-run/, or $TGC_FUZZ_WORK), as many targets
# side by side as there are cores. Exits non-zero on any crash, leak, timeout, out-of-memory or
# sanitizer report; the reproducer is left in WORK/TARGET/artifacts/ and can
# be replayed with `build-fuzz/fuzz/fuzz_TARGET FILE`.
set -u
secs=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TGC_FUZZ_BUILD:-$root/build-fuzz}
work=${TGC_FUZZ_WORK:-$root/fuzz/corpus-run}
cc=${CC:-clang}
cxx=${CXX:-clang++} # tokenizer/spm.cc, the one C++ file
names="ir dsl plan safetensors data cli ckpt"
targets=$(for t in $names; do printf "fuzz_%s " "$t"; done)

echo "fuzz: building in $build with $cc"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DTGC_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBUILD_TESTING=OFF >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 2; }
cmake --build "$build" --target $targets -j"$(nproc)" >"$build.build.log" 2>&1 ||
    { tail -n 40 "$build.build.log"; exit 2; }

# Dictionaries: the IR's keywords and every op and attribute of ops.def; the
# DSL's keywords and operators from the lexer.
for t in $names; do mkdir -p "$work/$t/corpus" "$work/$t/artifacts"; done
python3 - "$root" "$work" <<'PY'
import re, sys
root, work = sys.argv[1], sys.argv[2]
words = {"tgc-ir 1", "model", "hparam", "num_layers", "%", " = ", " : ", "(", ")", "[", "]", ", ", "=",
         "output", "loss", "no_decay", "shard(", "stage(", "chunk(", "loc(", "tp", "dp", "pp", "true",
         "false", "inf", "-inf", "nan", "1e-05", "f32[", "f16[", "bf16[", "f64[", "i32[", "i64[", "u8[",
         "f32[]", "\\x", "\\\"", "#", "\n", "layers.0."}
ops = open(root + "/ir/ops.def").read()
for m in re.finditer(r'^OP\(\s*\w+\s*,\s*"(\w+)"\s*,[^"]*"([^"]*)"', ops, re.M):
    words.add(m.group(1))
    for item in m.group(2).split():
        name, _, kind = item.partition(":")
        words.add(name + "=")
        words.update(re.findall(r"\w+", kind.split("=")[0].strip("{}")) if kind.startswith("{") else [])
with open(work + "/ir/dict", "w") as f:
    for w in sorted(words):
        f.write('"%s"\n' % w.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\x0A"))
try:
    lex = open(root + "/frontend/lexer.l").read()
except OSError:
    lex = ""
toks = set(re.findall(r'^"([^"\\]+)"', lex, re.M)) | {"layers", "hidden", "=", ":", "(", ")", "\n", "    "}
with open(work + "/dsl/dict", "w") as f:
    for w in sorted(toks):
        f.write('"%s"\n' % w.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\x0A"))
def write(name, ws):
    with open(work + "/" + name + "/dict", "w") as f:
        for w in sorted(ws):
            f.write('"%s"\n' % w.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\x0A"))
write("plan", words | {"tgc-plan 2 keys ", "section config ", "section lowered ", "section ir ", "section kernels ", "checksum "})
cfg = open(root + "/api/config.c").read()
opts = set("--" + m for m in re.findall(r'^\s*\{"([a-z0-9-]+)"', cfg, re.M))
write("cli", opts | {"\n", "=", "then", " at ", "linear(", "cosine(", "step(", "T_max=", "total_iters=", "1e-3", "0"})
write("safetensors", {'"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"F32"', '"I32"', '"BF16"', '"F16"', '"I64"', ":", ",", "[", "]", "{", "}"})
write("data", {" ", "e", "the ", "MMIDIDX"})
ck = open(root + "/runtime/io/checkpoint.c").read()
write("ckpt", {'"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"F32"', ":", ",", "[", "]", "{", "}"} |
      {'"%s"' % k for k in re.findall(r'kv_add\(m, "([a-z_0-9]+)"', ck)} | {"exp_avg.", "exp_avg_sq.", "checksum."})
PY

jobs=$(nproc)
status=0
run_one() { # target name
    local t=$1 extra=""
    local len=8192
    [ "$t" = cli ] && extra="-close_fd_mask=2" # usage errors go to stderr
    [ "$t" = ckpt ] && len=65536             # a checkpoint of the smallest model is about 45 KB
    cp "$root/fuzz/corpus/$t/"* "$work/$t/corpus/" 2>/dev/null
    "$build/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=$len $extra \
        -dict="$work/$t/dict" -artifact_prefix="$work/$t/artifacts/" -print_final_stats=1 \
        "$work/$t/corpus" >"$work/$t/log" 2>&1
}
report() { # target name, exit code
    local t=$1 rc=$2
    if [ "$rc" -ne 0 ] || grep -qE "runtime error:|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)" "$work/$t/log"; then
        echo "fuzz_$t: FAILED (exit $rc); log: $work/$t/log"
        grep -E "^(==|SUMMARY|.*runtime error:|fuzz_)" "$work/$t/log" | sed -n 1,20p
        ls "$work/$t/artifacts/" 2>/dev/null | sed "s|^|  artifact: $work/$t/artifacts/|"
        status=1
    else
        runs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "$work/$t/log" | grep -o "[0-9]*$")
        echo "fuzz_$t: ok (${runs:-?} inputs in ${secs}s, $(( ${runs:-0} / secs ))/s, corpus $(ls "$work/$t/corpus" | wc -l) files)"
    fi
}
# Batches of $jobs targets side by side.
set -- $names
while [ $# -gt 0 ]; do
    batch=()
    pids=()
    for _ in $(seq "$jobs"); do
        [ $# -gt 0 ] || break
        batch+=("$1")
        run_one "$1" &
        pids+=($!)
        shift
    done
    for i in "${!batch[@]}"; do
        wait "${pids[$i]}"
        report "${batch[$i]}" $?
    done
done
exit $status
