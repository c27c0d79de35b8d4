#!/usr/bin/env bash
# The GPU check: tgc's CUDA backend against its CPU backend, then speed.
# For a machine with an NVIDIA GPU; about 5 minutes on one H200.
#
#   scripts/gpu_check.sh [PART...]  (from anywhere; writes to stdout)
#
# PART picks parts by key (default: all): machine cpudiag report gpt
# gpt_dropout llama bert bf16 recompute throughput profile nccl lt kernels
# kernels1.
#
#   scripts/gpu_check.sh --pack DIR [TGC]
#
# run here, copies a built tgc (default ./build-gpu/tgc), the GPU tests of
# its build directory (test_cuda, test_nccl, test_lt, kernel_check) and the
# shared libraries they need beyond the C library (OpenBLAS and its Fortran
# and OpenMP runtimes) into DIR, for a GPU machine without
# flex/bison/OpenBLAS: there, TGC=DIR/tgc TGC_LIBS=DIR/lib gpu_check.sh.
#
# Everything printed also goes to $OUT/gpu_check.log when $OUT is set.
# Which tgc: $TGC if set (with $TGC_LIBS, a folder of the shared libraries
# it needs, added to LD_LIBRARY_PATH); else one built here from source when
# cmake, flex, bison and OpenBLAS are present; else ./build-gpu/tgc.
#
# Parts (each under `timeout`; one failing does not stop the others):
#   1. the machine: nvidia-smi, CUDA runtime, driver and NVRTC versions
#   2. the CUDA kernels' report (tgc compile --backend cuda --kernel-report)
#   3. loss curves, CPU against CUDA, 20 steps, same seed: GPT without and
#      with dropout, BERT, LLaMA, GPT with --bf16 (fp32 GEMMs are exact fp32
#      on both, so the curves agree to ~1e-5 relative)
#   4. throughput of a GPT-2 124M-like model: ms/step, tokens/s, TFLOP/s
#   5. a per-op profile of one step (TGC_DEBUG=2, CUDA events)
#   6. the GPU tests of the build, where found beside tgc: NCCL on a
#      one-rank world, cuBLASLt, and every CUDA kernel against its C twin
#      (kernel_check: names the kernel when the loss curves disagree)
# A failed CUDA run is rerun with TGC_CUDA_SYNC=1, which names the first
# kernel, GEMM or collective that failed and its IR node.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

# --make-ref DIR [PART...]: runs only the CPU side of the comparisons and
# keeps the curves (and BERT's inputs) in DIR; CPU_REF=DIR on the GPU
# machine then compares against them.
if [ "${1:-}" = --make-ref ]; then
  export MAKE_REF=${2:?usage: gpu_check.sh --make-ref DIR [PART...]} TGC=${TGC:-$ROOT/build/tgc}
  mkdir -p "$MAKE_REF"
  shift 2
  set -- "${@:-gpt gpt_dropout llama bert bf16 recompute}"
fi

if [ "${1:-}" = --pack ]; then
  dir=${2:?usage: gpu_check.sh --pack DIR [TGC]} tgc=${3:-$ROOT/build-gpu/tgc}
  [ -x "$tgc" ] || { echo "gpu_check: no tgc at $tgc" >&2; exit 1; }
  mkdir -p "$dir/lib" && cp "$tgc" "$dir/tgc" || exit 1
  for t in test_cuda test_nccl test_lt kernel_check; do
    for f in "$(dirname "$tgc")/tests/$t" "$(dirname "$tgc")/$t"; do
      [ -x "$f" ] && cp "$f" "$dir/" && break
    done
  done
  # Every library the loader finds outside the C library's own set.
  for f in "$dir"/*; do [ -f "$f" ] && ldd "$f"; done | awk '/=> \//{print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  ls -l "$dir" "$dir/lib"
  exit 0
fi

LOG=/dev/null
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && LOG=$OUT/gpu_check.log; fi
W=$(mktemp -d "${TMPDIR:-/tmp}/tgc-gpu-check.XXXXXX")
export TGC_CACHE_DIR=$W/kcache
DATA=$ROOT/tests/data/kjv-64k.txt
SMALL=(--set layers=2 --set hidden=256 --set heads=4 --set seq=128 --set batch=8)
FAILED=()

PARTS=" $* "

# Runs a part: KEY, NAME, then a shell function and its arguments.
part() {
  local key=$1 name=$2 t0=$SECONDS
  shift 2
  [ "$PARTS" = "  " ] || [[ "$PARTS" == *" $key "* ]] || return 0
  echo
  echo "=== $name"
  "$@"
  local rc=$?
  if [ $rc = 0 ]; then echo "--- $name: ok ($((SECONDS - t0)) s)"
  else echo "--- $name: FAILED (exit $rc, $((SECONDS - t0)) s)"; FAILED+=("$name"); fi
}

# timeout SECONDS CMD...: a wedged GPU or compiler cannot stall the check.
T() { timeout --kill-after=10 "$@"; }

find_tgc() {
  if [ -n "${TGC:-}" ]; then
    # Only the carried libraries this machine lacks: a carried libgomp or
    # libgcc_s older than the system's would break the compiler's output.
    if [ -n "${TGC_LIBS:-}" ]; then
      local f n have
      mkdir -p "$W/lib"
      have=$({ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null)
      for f in "$TGC_LIBS"/*.so*; do
        n=$(basename "$f")
        grep -q "^[[:space:]]*$n " <<<"$have" || ln -sf "$(readlink -f "$f")" "$W/lib/$n"
      done
      echo "carried libraries used: $(ls "$W/lib" | tr '\n' ' ')"
      export LD_LIBRARY_PATH=$W/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    return 0
  fi
  if command -v cmake >/dev/null && command -v flex >/dev/null && command -v bison >/dev/null &&
     { [ -e /usr/include/cblas.h ] || [ -e /usr/include/x86_64-linux-gnu/cblas.h ] ||
       [ -e /usr/include/openblas/cblas.h ]; }; then
    echo "building tgc from source in $W/build"
    if T 300 cmake -S "$ROOT" -B "$W/build" -DCMAKE_BUILD_TYPE=Release >"$W/cmake.log" 2>&1 &&
       T 300 cmake --build "$W/build" -j"$(nproc)" --target tgc >>"$W/cmake.log" 2>&1; then
      TGC=$W/build/tgc
      return 0
    fi
    tail -20 "$W/cmake.log"
  fi
  TGC=$ROOT/build-gpu/tgc
  [ -x "$TGC" ] || { echo "no tgc: set TGC (and TGC_LIBS), or install cmake flex bison libopenblas-dev"; return 1; }
}

machine() {
  T 30 nvidia-smi
  T 10 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  command -v nvcc >/dev/null && T 10 nvcc --version | tail -2
  # The NVRTC and CUDA runtime the toolkit has (tgc opens them with dlopen).
  T 20 python3 - <<'PY'
import ctypes, ctypes.util, os
dirs = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
def load(names):
    for n in names:
        for d in [""] + [os.path.join(x, "lib64") for x in dirs if x]:
            try:
                return ctypes.CDLL(os.path.join(d, n) if d else n), os.path.join(d, n) if d else n
            except OSError:
                pass
    return None, None
nv, p = load(["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"])
if nv:
    a, b = ctypes.c_int(), ctypes.c_int()
    nv.nvrtcVersion(ctypes.byref(a), ctypes.byref(b))
    print("NVRTC %d.%d (%s)" % (a.value, b.value, p))
else:
    print("NVRTC: not found")
rt, p = load(["libcudart.so.13", "libcudart.so.12", "libcudart.so"])
if rt:
    v, dv, n = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    rt.cudaRuntimeGetVersion(ctypes.byref(v))
    rt.cudaDriverGetVersion(ctypes.byref(dv))
    st = rt.cudaGetDeviceCount(ctypes.byref(n))
    print("CUDA runtime %d, driver supports %d, %d device(s) (status %d) (%s)" % (v.value, dv.value, n.value, st, p))
else:
    print("libcudart: not found")
PY
  echo "tgc: $TGC"
  ldd "$TGC" | grep -iE "cuda|nvrtc|cublas|nccl|not found" || echo "tgc links no CUDA library"
  # The loader's unit test, where it was built or carried beside tgc.
  gpu_test test_cuda 60
}

kernel_report() {
  if ! "$TGC" compile --help 2>&1 | grep -q -- --kernel-report; then
    echo "(this tgc has no --kernel-report)"
    return 0
  fi
  T 300 "$TGC" compile "$ROOT/samples/gpt.tg" "${SMALL[@]}" --backend cuda --kernel-report -o "$W/gpt.plan" |
    tail -25
}

# Inputs for models other than tokens/labels from text (BERT): N batches of
# every input, from the model's JSON IR, deterministic.
make_inputs() {
  local model=$1 out=$2
  shift 2
  T 60 "$TGC" dump-ir "$model" "$@" --after lower --format json >"$W/graph.json" || return 1
  python3 - "$W/graph.json" "$out" <<'PY'
import json, random, struct, sys
g = json.load(open(sys.argv[1]))
nodes, rng, steps = g["nodes"], random.Random(1234), 20
vocab = {}
for n in nodes:
    if n["op"] == "embedding":
        vocab[nodes[n["operands"][0]]["name"]] = nodes[n["operands"][1]]["shape"][0]
    if n["op"] == "cross_entropy":
        vocab[nodes[n["operands"][1]]["name"]] = nodes[n["operands"][0]]["shape"][-1]
fmt = {"i32": ("I32", "i"), "u8": ("U8", "B"), "f32": ("F32", "f"), "i64": ("I64", "q")}
header, blobs, off = {}, [], 0
for n in nodes:
    if n["op"] != "input":
        continue
    shape, count = [steps] + n["shape"], steps
    for s in n["shape"]:
        count *= s
    st, code = fmt[n["dtype"]]
    if n["dtype"] == "u8":  # padding masks: the last 3 positions are padding
        last = n["shape"][-1]
        vals = [0 if i % last >= last - 3 else 1 for i in range(count)]
    elif n["dtype"] == "f32":
        vals = [rng.gauss(0, 1) for _ in range(count)]
    else:
        v = vocab.get(n["name"], 2)
        vals = [rng.randrange(v) for _ in range(count)]
        if n["name"] == "labels":
            vals = [x if rng.random() < 0.3 else -100 for x in vals]  # BERT: 30% masked positions scored
    raw = struct.pack("<%d%s" % (count, code), *vals)
    header[n["name"]] = {"dtype": st, "shape": shape, "data_offsets": [off, off + len(raw)]}
    blobs.append(raw)
    off += len(raw)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
}

# Prints two loss curves side by side and their largest relative
# differences (loss, gradient norm); fails above TOL.
compare() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
if len(a) != len(b) or not a:
    print("the runs have %d and %d steps" % (len(a), len(b)))
    sys.exit(1)
rel = lambda x, y: abs(x - y) / max(abs(x), 1e-30)
print("%5s %14s %14s %10s %12s %12s" % ("step", "loss cpu", "loss cuda", "rel diff", "gnorm cpu", "gnorm cuda"))
for x, y in zip(a, b):
    print("%5d %14.8f %14.8f %10.2e %12.6f %12.6f" % (x["step"], x["loss"], y["loss"], rel(x["loss"], y["loss"]),
                                                     x["grad_norm"], y["grad_norm"]))
dl = max(rel(x["loss"], y["loss"]) for x, y in zip(a, b))
dg = max(rel(x["grad_norm"], y["grad_norm"]) for x, y in zip(a, b))
ms = sorted(y["step_ms"] for y in b[1:]) or [0]
mc = sorted(x["step_ms"] for x in a[1:]) or [0]
print("max relative difference: loss %.3e, gradient norm %.3e (tolerance %g); median step: cpu %.2f ms, cuda %.2f ms"
      % (dl, dg, tol, mc[len(mc) // 2], ms[len(ms) // 2]))
sys.exit(0 if dl <= tol and dg <= 10 * tol else 1)
PY
}

# NAME TOL MODEL ARGS...: 20 steps on each backend from the same seed.
pair() {
  local name=$1 tol=$2 model=$3
  shift 3
  local common=("$model" "$@" --seed 7 --lr 1e-3 --quiet) # --train-iters per run: an option given twice is an error
  rm -f "$W/$name".*.jsonl
  if [ -n "${CPU_REF:-}" ] && [ -f "$CPU_REF/$name.cpu.jsonl" ]; then
    # CPU curves made on another machine (--make-ref): the runs are
    # deterministic, so the reference needs no CPU time here.
    cp "$CPU_REF/$name.cpu.jsonl" "$W/$name.cpu.jsonl"
    echo "CPU curve: $CPU_REF/$name.cpu.jsonl"
  else
    T 240 "$TGC" run "${common[@]}" --train-iters 20 --backend cpu --log "$W/$name.cpu.jsonl" ||
      { echo "the CPU run failed"; return 1; }
  fi
  [ -n "${MAKE_REF:-}" ] && { cp "$W/$name.cpu.jsonl" "$MAKE_REF/"; return 0; }
  if ! T 240 "$TGC" run "${common[@]}" --train-iters 20 --backend cuda --log "$W/$name.cuda.jsonl"; then
    echo "the CUDA run failed; again with TGC_CUDA_SYNC=1 (a check after every launch):"
    TGC_CUDA_SYNC=1 T 240 "$TGC" run "${common[@]}" --backend cuda --train-iters 1
    return 1
  fi
  compare "$W/$name.cpu.jsonl" "$W/$name.cuda.jsonl" "$tol"
}

gpt() { pair gpt 1e-4 "$ROOT/samples/gpt.tg" "${SMALL[@]}" --set pdrop=0 --data "$DATA"; }
gpt_dropout() { pair gpt_dropout 1e-4 "$ROOT/samples/gpt.tg" "${SMALL[@]}" --set pdrop=0.1 --data "$DATA"; }
llama() { pair llama 1e-4 "$ROOT/samples/llama.tg" "${SMALL[@]}" --data "$DATA"; }
gpt_recompute() {
  pair gpt_recompute 1e-4 "$ROOT/samples/gpt.tg" "${SMALL[@]}" --set pdrop=0.1 --data "$DATA" --recompute-granularity full
}
gpt_bf16() { pair gpt_bf16 2e-2 "$ROOT/samples/gpt.tg" "${SMALL[@]}" --set pdrop=0 --bf16 --data "$DATA"; }
bert() {
  if [ -n "${CPU_REF:-}" ] && [ -f "$CPU_REF/bert.safetensors" ]; then cp "$CPU_REF/bert.safetensors" "$W/"
  else make_inputs "$ROOT/samples/bert.tg" "$W/bert.safetensors" "${SMALL[@]}" --set pdrop=0 || return 1; fi
  [ -n "${MAKE_REF:-}" ] && cp "$W/bert.safetensors" "$MAKE_REF/"
  pair bert 1e-4 "$ROOT/samples/bert.tg" "${SMALL[@]}" --set pdrop=0 --inputs "$W/bert.safetensors"
}

BIG=(--set layers=12 --set hidden=768 --set heads=12 --set seq=1024 --set batch=8 --set vocab=50304 --set pdrop=0)

throughput() {
  local fpt
  fpt=$("$TGC" check "$ROOT/samples/gpt.tg" "${BIG[@]}" | sed -n 's/.* \([0-9.]*[KMGT]*\)FLOP per token.*/\1/p')
  echo "GPT-2 124M-like: ${BIG[*]}; ${fpt}FLOP per token (forward + backward)"
  rm -f "$W/big.jsonl"
  T 300 "$TGC" run "$ROOT/samples/gpt.tg" "${BIG[@]}" --data "$DATA" --train-iters 8 --backend cuda \
    --log "$W/big.jsonl" --log-interval 1 || return 1
  python3 - "$W/big.jsonl" "$fpt" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
f = sys.argv[2]
scale = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}.get(f[-1:], 1.0)
fpt = float(f.rstrip("KMGT")) * scale
steady = rows[2:] or rows  # the first steps pay for cuBLASLt's algorithm choice
ms = sorted(r["step_ms"] for r in steady)[len(steady) // 2]
tps = sorted(r["tokens_per_s"] for r in steady)[len(steady) // 2]
print("losses: %s" % " ".join("%.4f" % r["loss"] for r in rows))
print("median of steps 3..%d: %.1f ms/step, %.0f tokens/s, %.1f TFLOP/s achieved (exact fp32 GEMMs)"
      % (len(rows), ms, tps, fpt * tps / 1e12))
PY
}

profile() {
  TGC_DEBUG=2 T 300 "$TGC" run "$ROOT/samples/gpt.tg" "${BIG[@]}" --data "$DATA" --train-iters 3 --backend cuda --quiet 2>&1 |
    grep -v "^step"
}

# A test binary of the build, beside tgc (carried) or in its tests/.
test_bin() {
  local f
  for f in "$(dirname "$TGC")/$1" "$(dirname "$TGC")/tests/$1"; do
    [ -x "$f" ] && { echo "$f"; return 0; }
  done
  return 1
}

# NAME TIMEOUT ARGS...: runs a GPU test of the build (77: skipped).
gpu_test() {
  local name=$1 t=$2 bin
  shift 2
  bin=$(test_bin "$name") || { echo "($name not found beside $TGC)"; return 0; }
  T "$t" "$bin" "$@"
  local rc=$?
  [ $rc = 77 ] && { echo "($name skipped itself)"; return 0; }
  return $rc
}

# Why a CPU run fails on this machine: a tiny run under a few variants
# (OpenMP threads, the carried vs the system libraries, kernel flags), then a
# backtrace under cuda-gdb (the image's only debugger) when one fails.
cpudiag() {
  local run=("$TGC" run "$ROOT/samples/gpt.tg" --set layers=1 --set hidden=64 --set heads=2 --set seq=32 --set batch=2
             --set pdrop=0 --data "$DATA" --train-iters 2 --quiet --backend cpu --no-kernel-cache)
  echo "cc: $(cc --version | head -1)"
  local v
  for v in "" "OMP_NUM_THREADS=1" "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1" "TGC_KERNEL_CFLAGS=-O0" \
           "LD_LIBRARY_PATH=${TGC_LIBS:-/nonexistent}"; do
    env $v timeout 60 "${run[@]}" >"$W/diag.out" 2>&1
    echo "[$v] exit $? $(tail -1 "$W/diag.out")"
  done
  if command -v cuda-gdb >/dev/null; then
    timeout 120 cuda-gdb -batch -ex run -ex bt -ex "info threads" --args "${run[@]}" 2>&1 | grep -vE "^\[(New|Thread)" | tail -40
  fi
}

nccl() { gpu_test test_nccl 120; }
lt() { gpu_test test_lt 120 "$ROOT/samples" | tail -15; }
kernels() { TGC_CACHE_DIR=$W/kcache gpu_test kernel_check 300 "$ROOT/samples"; }

main() {
  echo "tgc GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(uname -n)"
  find_tgc || return 1
  part machine "machine" machine
  part cpudiag "why a CPU run fails here" cpudiag
  part report "CUDA kernel report (gpt)" kernel_report
  part gpt "GPT: CPU vs CUDA, no dropout" gpt
  part gpt_dropout "GPT: CPU vs CUDA, dropout 0.1" gpt_dropout
  part llama "LLaMA: CPU vs CUDA" llama
  part bert "BERT: CPU vs CUDA" bert
  part bf16 "GPT --bf16: CPU vs CUDA" gpt_bf16
  part recompute "GPT, full recomputation, dropout 0.1: CPU vs CUDA" gpt_recompute
  part throughput "throughput: GPT-2 124M-like on CUDA" throughput
  part profile "per-op profile of one step (TGC_DEBUG=2)" profile
  part nccl "NCCL on a one-rank world (test_nccl)" nccl
  part lt "cuBLASLt (test_lt)" lt
  part kernels "every CUDA kernel against its C twin (kernel_check)" kernels
  part kernels1 "kernel_check with one OpenMP thread" env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 bash -c "TGC_CACHE_DIR=$W/kcache1 \"\$@\"" _ "$(test_bin kernel_check)" "$ROOT/samples"
  echo
  if [ ${#FAILED[@]} = 0 ]; then echo "gpu check: all parts passed"
  else echo "gpu check: ${#FAILED[@]} part(s) failed: $(IFS=';'; echo "${FAILED[*]}")"; fi
  [ ${#FAILED[@]} = 0 ]
}

main "$@" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
rm -rf "$W"
exit "$rc"
