#!/usr/bin/env bash
# The GPU acceptance check: one prepared script for a machine with an NVIDIA
# GPU (at most 8 minutes on one H200), ending in one table
#
#   check | configuration | result | figures
#
# and exiting non-zero if any check failed (docs/cuda.md, "The GPU check").
#
#   scripts/gpu_check.sh [CHECK...]          (from anywhere; default: every check)
#   GPU_CHECK_BACKEND=sim scripts/gpu_check.sh   the dry run, on any machine
#   scripts/gpu_check.sh --pack DIR [TGC]    a folder to carry to a GPU machine
#
# CHECK picks checks by key: machine report equiv nccl ckpt reshard eval
# sample models attention cudnn throughput profile tests kernels.
#
#   machine     nvidia-smi, the CUDA runtime, driver and NVRTC versions
#   report      the CUDA kernels' report (tgc compile --kernel-report)
#   equiv       the (t,p,d,v) equivalence table on ONE GPU (ranks share it):
#               serial, --tp 2, --pp 2, --dp 2, --tp 2 --pp 2 --dp 2,
#               interleaved --pp 2 with 2 chunks per rank; each against the
#               same partition on --backend cpu and against the serial GPU run
#               (fp32: GPU_CHECK_TOL, default 1e-5 relative, on the loss;
#               10x on the gradient norm)
#   nccl        the same partitions over NCCL, one rank per GPU, where the
#               machine has enough GPUs (nvidia-smi -L); skipped on one
#   ckpt        --save, a rank killed (TGC_TEST_FAULT=0:5:kill), --load: the
#               resumed losses and the --export'ed weights equal an
#               uninterrupted run's byte for byte (serial and --tp 2)
#   reshard     saved on the GPU with --tp 2, resumed on --backend cpu with
#               --pp 2: losses against the uninterrupted GPU run (tolerance)
#   eval        --split 98,2 --eval-interval 2 --eval-iters 2: validation
#               losses, GPU against CPU
#   sample      tgc sample --backend cuda --check-kv-cache, greedy: the KV
#               cache agrees with the full forward, tokens equal the CPU's
#   models      20-step loss curves, CPU against GPU: GPT (dropout 0 and 0.1),
#               LLaMA, BERT, GPT --bf16, GPT with full recomputation
#   attention   fused attention against the unfused chain on the device: GPT
#               with attention dropout, LLaMA (grouped-query), BERT (padding
#               mask), GPT --bf16
#   cudnn       --attention-backend cudnn against tgc's kernel, bf16 training
#               of GPT and LLaMA (grouped-query): losses within 2e-2, gradient
#               norms within 2e-1, and what cuDNN ran (docs/attention.md)
#   throughput  GPT-2 124M at s = 1024: fp32 unfused, fp32 and bf16 with fused
#               attention: ms/step, tokens/s, TFLOP/s, MFU (bf16 dense peak)
#   profile     a per-op profile of one step (TGC_DEBUG=2)
#   tests       the GPU tests of the build found beside tgc: test_nccl (every
#               bootstrap on every GPU), test_lt, test_cuda
#   kernels     kernel_check: every CUDA kernel against its C twin
#
# GPU_CHECK_BACKEND=sim runs every check with --backend sim (the device
# simulator, docs/runtime.md) in place of cuda, with smaller models, so the
# script itself is tested on a machine without a GPU; the checks that need
# CUDA (machine, report, nccl, throughput, profile, kernels) are skipped.
# GPU_CHECK_BUDGET (seconds, default 450): a check that would start later is
# skipped, so the whole run fits its device time.
#
# Each check runs under `timeout`; one failing does not stop the others. A
# failed CUDA training run is rerun for one step with TGC_CUDA_SYNC=1, which
# names the first kernel, GEMM or collective that failed. Everything printed
# also goes to $OUT/gpu_check.log when $OUT is set.
#
# Which tgc: $TGC if set (with $TGC_LIBS, a folder of the shared libraries it
# needs, added to LD_LIBRARY_PATH where the machine lacks them); else, for
# cuda, one built from source when cmake, flex, bison and OpenBLAS are
# present; else ./build/tgc, then ./build-gpu/tgc.
#
# --pack DIR [TGC] copies a built tgc (default ./build-gpu/tgc), the GPU tests
# of its build directory (test_cuda, test_nccl, test_lt, kernel_check) and
# the shared libraries they need beyond the C library into DIR, for a GPU
# machine without flex/bison/OpenBLAS: there, TGC=DIR/tgc TGC_LIBS=DIR/lib
# gpu_check.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

if [ "${1:-}" = --pack ]; then
  dir=${2:?usage: gpu_check.sh --pack DIR [TGC]} tgc=${3:-$ROOT/build-gpu/tgc}
  [ -x "$tgc" ] || { echo "gpu_check: no tgc at $tgc" >&2; exit 1; }
  mkdir -p "$dir/lib" && cp "$tgc" "$dir/tgc" || exit 1
  for t in test_cuda test_nccl test_lt kernel_check; do
    for f in "$(dirname "$tgc")/tests/$t" "$(dirname "$tgc")/$t"; do
      [ -x "$f" ] && cp "$f" "$dir/" && break
    done
  done
  # OpenBLAS, which tgc opens with dlopen (runtime/backend/blas.h), by its
  # soname; then every library the loader finds outside the C library's own set.
  blas=$(sed -n 's/^TGC_OPENBLAS:FILEPATH=//p' "$(dirname "$tgc")/CMakeCache.txt" 2>/dev/null)
  [ -n "$blas" ] && cp -L "$blas" "$dir/lib/libopenblas.so.0"
  for f in "$dir"/* "$dir"/lib/libopenblas.so.0; do [ -f "$f" ] && ldd "$f"; done | awk '/=> \//{print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  ls -l "$dir" "$dir/lib"
  exit 0
fi

DEV=${GPU_CHECK_BACKEND:-cuda}
case $DEV in
  cuda | sim) ;;
  *) echo "gpu_check: GPU_CHECK_BACKEND=$DEV: cuda or sim" >&2; exit 2 ;;
esac
BUDGET=${GPU_CHECK_BUDGET:-450}
TOL=${GPU_CHECK_TOL:-1e-5}
KEYS="machine report equiv nccl ckpt reshard eval sample models attention cudnn throughput graphs profile tests kernels"
for k in "$@"; do
  [[ " $KEYS " == *" $k "* ]] || { echo "gpu_check: unknown check '$k' (one of: $KEYS)" >&2; exit 2; }
done
PARTS=" $* "

LOG=/dev/null
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && LOG=$OUT/gpu_check.log; fi
W=$(mktemp -d "${TMPDIR:-/tmp}/tgc-gpu-check.XXXXXX")
export TGC_CACHE_DIR=${TGC_CACHE_DIR:-$W/kcache}
DATA=$ROOT/tests/data/kjv-64k.txt
RESULTS=$W/results.tsv
: >"$RESULTS"

# The models. EQ: the partition checks (4 layers, so 2 stages x 2 chunks;
# micro-batch 4, global batch 8: every partition takes the same samples).
# On sim (host kernels on this machine's cores) everything is smaller.
if [ "$DEV" = cuda ]; then
  EQ=(--set layers=4 --set hidden=128 --set heads=4 --set seq=64 --set batch=4 --set pdrop=0 --global-batch-size 8)
  EQM=(--set layers=4 --set hidden=128 --set heads=4 --set seq=64 --set pdrop=0) # the same model for tgc sample
  SMALL=(--set layers=2 --set hidden=256 --set heads=4 --set seq=128 --set batch=8)
  ITERS=20
else
  EQ=(--set layers=4 --set hidden=64 --set heads=2 --set seq=32 --set batch=4 --set pdrop=0 --global-batch-size 8)
  EQM=(--set layers=4 --set hidden=64 --set heads=2 --set seq=32 --set pdrop=0)
  SMALL=(--set layers=2 --set hidden=64 --set heads=2 --set seq=32 --set batch=4)
  ITERS=6
fi
EQ_ITERS=6
COMMON=(--data "$DATA" --seed 7 --lr 1e-3 --quiet)

# timeout SECONDS CMD...: the direct child only (--foreground), so the
# check's own timeout (a process group) still reaches everything.
T() { timeout --foreground --kill-after=10 "$@"; }
# Figures of the running check, for its row of the table.
fig() { printf '%s; ' "$*" >>"$W/fig"; }
export ROOT DEV TOL W DATA TGC_CACHE_DIR EQ_ITERS ITERS
# The shared runs: GPU 0 only, whatever the machine has.
one_gpu() { if [ "$DEV" = cuda ]; then export CUDA_VISIBLE_DEVICES=0; fi; }

# ---- the comparisons ------------------------------------------------------------

cat >"$W/cmp.py" <<'PY'
"""cmp.py A B TOL [FIRST_STEP] [KEY]: the log lines of A and B (JSON lines of
tgc run --log) side by side from FIRST_STEP on; KEY loss (default) or
val_loss. TOL 0: every value equal (bit for bit); else the largest relative
difference of KEY must be <= TOL and of the gradient norm <= 10 TOL (loss
only). Prints the table, then the verdict as its last line."""
import json, sys
a_path, b_path, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
first = int(sys.argv[4]) if len(sys.argv) > 4 else 1
key = sys.argv[5] if len(sys.argv) > 5 else "loss"
def rows(p):
    try:
        return {r["step"]: r for r in map(json.loads, open(p)) if r.get("step", 0) >= first and key in r}
    except OSError as e:
        print("cannot read %s: %s" % (p, e.strerror)); sys.exit(1)
a, b = rows(a_path), rows(b_path)
if not a or sorted(a) != sorted(b):
    print("steps differ: %s against %s" % (sorted(a), sorted(b))); sys.exit(1)
rel = lambda x, y: 0.0 if x == y else abs(x - y) / max(abs(x), 1e-30)
print("%5s %20s %20s %10s" % ("step", key + " A", key + " B", "rel diff"))
dl = dg = 0.0
for s in sorted(a):
    x, y = a[s][key], b[s][key]
    print("%5d %20.12g %20.12g %10.2e" % (s, x, y, rel(x, y)))
    dl = max(dl, rel(x, y))
    if key == "loss" and "grad_norm" in a[s]:
        dg = max(dg, rel(a[s]["grad_norm"], b[s]["grad_norm"]))
ok = (dl == 0 and dg == 0) if tol == 0 else (dl <= tol and dg <= 10 * tol)
if key == "loss":
    fig = "loss %.1e, grad norm %.1e" % (dl, dg)
else:
    fig = "%s %.1e" % (key, dl)
if tol == 0:
    print("largest relative difference: %s (bit for bit: %s)" % (fig, "yes" if ok else "NO"))
else:
    print("largest relative difference: %s (limit %g)" % (fig, tol))
sys.exit(0 if ok else 1)
PY

# CMP LABEL A B TOL [FIRST] [KEY]: cmp.py; its verdict is a figure (with
# CMP_SHORT set: the loss's difference alone).
CMP() {
  local label=$1
  shift
  python3 "$W/cmp.py" "$@" >"$W/cmp.out"
  local rc=$?
  cat "$W/cmp.out"
  if [ -n "${CMP_SHORT:-}" ]; then # only the loss's difference
    fig "$label $(tail -1 "$W/cmp.out" | sed -n 's/^largest relative difference: loss \([^,]*\),.*/\1/p')"
  else
    fig "$label: $(tail -1 "$W/cmp.out" | sed 's/^largest relative difference: //')"
  fi
  return $rc
}

# RUN NAME BACKEND ARGS...: tgc run into $W/NAME.jsonl (once per name: the
# CPU references are shared between checks). A failed cuda run is rerun for
# one step with TGC_CUDA_SYNC=1.
RUN() {
  local name=$1 be=$2
  shift 2
  [ -s "$W/$name.jsonl" ] && return 0
  echo "+ tgc run $* --backend $be"
  T 240 "$TGC" run "$@" --backend "$be" --log "$W/$name.jsonl.tmp" 2>"$W/$name.err"
  local rc=$?
  cat "$W/$name.err"
  if [ $rc != 0 ]; then
    local why
    case $rc in
      124 | 137) why="timed out" ;;
      139) why="segmentation fault" ;;
      134) why="aborted" ;;
      *) why=$(grep -m1 'error' "$W/$name.err" | cut -c1-120) ;;
    esac
    echo "the $be run ($name) failed: exit $rc"
    fig "the $be run failed (exit $rc${why:+: $why})"
    if [ "$be" = cuda ]; then
      echo "again for one step with TGC_CUDA_SYNC=1 (a check after every launch):"
      local a=() skip=0 x
      for x in "$@"; do
        if [ $skip = 1 ]; then skip=0; continue; fi
        case $x in --train-iters | --save | --load | --export | --log) skip=1; continue ;; esac
        a+=("$x")
      done
      TGC_CUDA_SYNC=1 T 120 "$TGC" run "${a[@]}" --backend cuda --train-iters 1
    fi
    rm -f "$W/$name.jsonl.tmp"
    return 1
  fi
  mv "$W/$name.jsonl.tmp" "$W/$name.jsonl"
}

# ---- the checks ---------------------------------------------------------------------
# Each prints what it does; fig adds to its row; 0 ok, 77 skipped (the
# reason as a figure), anything else failed.

machine() {
  if [ "$DEV" = sim ]; then
    uname -a
    fig "sim: $(nproc) CPU cores, no GPU"
    return 77
  fi
  T 30 nvidia-smi
  T 10 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  command -v nvcc >/dev/null && T 10 nvcc --version | tail -2
  # The NVRTC and CUDA runtime the toolkit has (tgc opens them with dlopen).
  T 20 python3 - <<'PY' | tee "$W/versions"
import ctypes, os
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
  fig "$GPUS GPU(s): $(T 10 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs)"
  fig "$(grep -o 'CUDA runtime [0-9]*, driver supports [0-9]*' "$W/versions" 2>/dev/null)"
  [ "$GPUS" -ge 1 ]
}

kernel_report() {
  [ "$DEV" = cuda ] || { fig "needs cuda"; return 77; }
  # For the GPU's architecture (compute capability 9.0: sm_90).
  local arch
  arch=$(T 10 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | sed -n 1p | tr -d ' .')
  T 300 "$TGC" compile "$ROOT/samples/gpt.tg" "${SMALL[@]}" --backend cuda --kernel-report \
    --cuda-arch "sm_${arch:-80}" -o "$W/gpt.plan" >"$W/report.txt" 2>&1
  local rc=$?
  tail -25 "$W/report.txt"
  fig "$(sed -n 's/.*: \([0-9]* CUDA kernels for .*\)/\1/p' "$W/report.txt" | tail -1)"
  return $rc
}

# The partitions of the equivalence table: name and options.
PARTITIONS=(
  "serial|"
  "tp2|--tp 2"
  "pp2|--pp 2"
  "dp2|--dp 2"
  "tp2pp2dp2|--tp 2 --pp 2 --dp 2"
  "interleaved|--pp 2 --num-layers-per-virtual-pipeline-stage 1 --pipeline-schedule interleaved"
)

# equiv_one NAME OPTS TAG: the partition on the device (TAG names the run:
# shared or nccl) against the CPU's and the serial device run.
equiv_one() {
  local name=$1 opts=$2 tag=$3 rc=0
  [ "$tag" = shared ] && one_gpu
  local eq=("$ROOT/samples/gpt.tg" "${EQ[@]}" "${COMMON[@]}" --train-iters "$EQ_ITERS")
  # shellcheck disable=SC2086
  RUN "eq_cpu_$name" cpu "${eq[@]}" $opts || return 1
  # shellcheck disable=SC2086
  RUN "eq_${tag}_$name" "$DEV" "${eq[@]}" $opts || return 1
  echo "-- $DEV ($tag) against cpu, $name"
  CMP "vs cpu" "$W/eq_cpu_$name.jsonl" "$W/eq_${tag}_$name.jsonl" "$TOL" || rc=1
  if [ "$name" != serial ]; then
    RUN "eq_shared_serial" "$DEV" "${eq[@]}" || return 1
    echo "-- $DEV ($tag, $name) against the serial $DEV run"
    CMP "vs serial $DEV" "$W/eq_shared_serial.jsonl" "$W/eq_${tag}_$name.jsonl" "$TOL" || rc=1
  fi
  return $rc
}

ckpt() {
  local name=$1 opts=$2 rc=0
  one_gpu
  local c=("$ROOT/samples/gpt.tg" "${EQ[@]}" "${COMMON[@]}" --train-iters 6)
  rm -rf "$W/ck_$name"
  # shellcheck disable=SC2086
  RUN "ck_${name}_ref" "$DEV" "${c[@]}" $opts --export "$W/ck_${name}_ref.safetensors" || return 1
  echo "+ TGC_TEST_FAULT=0:5:kill tgc run ... --save --save-interval 2 (rank 0 dies at the start of step 5)"
  # shellcheck disable=SC2086
  TGC_TEST_FAULT=0:5:kill T 240 "$TGC" run "${c[@]}" $opts --backend "$DEV" --save "$W/ck_$name" --save-interval 2 \
    --log "$W/ck_${name}_killed.jsonl"
  local k=$?
  echo "the killed run exited $k; checkpoints: $(cd "$W/ck_$name" 2>/dev/null && echo *)"
  [ "$k" != 0 ] || { echo "the run was not killed"; fig "TGC_TEST_FAULT did not kill the run"; return 1; }
  [ -d "$W/ck_$name/iter_0000004" ] || { fig "no checkpoint of step 4"; return 1; }
  # shellcheck disable=SC2086
  RUN "ck_${name}_resumed" "$DEV" "${c[@]}" $opts --load "$W/ck_$name" --export "$W/ck_${name}_resumed.safetensors" ||
    return 1
  echo "-- the resumed steps against the uninterrupted run, bit for bit"
  CMP "steps 5-6" "$W/ck_${name}_ref.jsonl" "$W/ck_${name}_resumed.jsonl" 0 5 || rc=1
  if cmp "$W/ck_${name}_ref.safetensors" "$W/ck_${name}_resumed.safetensors"; then
    fig "exported weights identical ($(stat -c %s "$W/ck_${name}_ref.safetensors") bytes)"
  else
    fig "exported weights DIFFER"
    rc=1
  fi
  return $rc
}

reshard() {
  one_gpu
  local c=("$ROOT/samples/gpt.tg" "${EQ[@]}" "${COMMON[@]}")
  rm -rf "$W/rs"
  RUN rs_ref "$DEV" "${c[@]}" --tp 2 --train-iters 6 || return 1
  RUN rs_saved "$DEV" "${c[@]}" --tp 2 --train-iters 4 --save "$W/rs" || return 1
  RUN rs_cpu cpu "${c[@]}" --pp 2 --train-iters 6 --load "$W/rs" || return 1
  echo "-- steps 5, 6 resumed on cpu --pp 2 from $DEV --tp 2, against the uninterrupted $DEV run"
  CMP "steps 5-6" "$W/rs_ref.jsonl" "$W/rs_cpu.jsonl" "$TOL" 5
}

evaluation() {
  one_gpu
  local c=("$ROOT/samples/gpt.tg" "${EQ[@]}" "${COMMON[@]}" --train-iters 6 --split "98,2" --eval-interval 2
           --eval-iters 2)
  RUN ev_cpu cpu "${c[@]}" || return 1
  RUN ev_dev "$DEV" "${c[@]}" || return 1
  local n
  n=$(grep -c '"val_loss"' "$W/ev_dev.jsonl")
  fig "$n evaluations"
  [ "$n" = 3 ] || { echo "expected validation losses at steps 2, 4, 6; found $n"; return 1; }
  echo "-- validation losses, $DEV against cpu"
  CMP "vs cpu" "$W/ev_cpu.jsonl" "$W/ev_dev.jsonl" "$TOL" 1 val_loss
}

sampling() {
  one_gpu
  local w=$W/sample.safetensors rc=0
  if [ ! -s "$w" ]; then
    T 240 "$TGC" run "$ROOT/samples/gpt.tg" "${EQ[@]}" "${COMMON[@]}" --train-iters 6 --backend cpu \
      --export "$w" || { fig "training the weights failed"; return 1; }
  fi
  local s=(sample "$ROOT/samples/gpt.tg" "${EQM[@]}" --weights "$w" --prompt "And God said" --tokens 16
           --temperature 0 --check-kv-cache)
  echo "+ tgc ${s[*]} --backend cpu"
  T 120 "$TGC" "${s[@]}" --backend cpu >"$W/sample_cpu.txt" 2>"$W/sample_cpu.err" || rc=1
  cat "$W/sample_cpu.txt" "$W/sample_cpu.err"
  echo
  echo "+ tgc ${s[*]} --backend $DEV"
  T 120 "$TGC" "${s[@]}" --backend "$DEV" >"$W/sample_dev.txt" 2>"$W/sample_dev.err" || rc=1
  cat "$W/sample_dev.txt" "$W/sample_dev.err"
  echo
  if [ $rc != 0 ]; then
    fig "$(grep -h 'error' "$W/sample_cpu.err" "$W/sample_dev.err" | sed -n 1p)"
    return 1
  fi
  fig "KV cache $(sed -n 's/.*max |difference| \([^ ]*\).*/max diff \1/p' "$W/sample_dev.err")"
  if cmp -s "$W/sample_cpu.txt" "$W/sample_dev.txt"; then fig "16 greedy tokens equal the cpu's"
  else fig "tokens DIFFER from the cpu's"; return 1; fi
}

# Inputs for models other than tokens/labels from text (BERT): N batches of
# every input, from the model's JSON IR, deterministic.
make_inputs() {
  local model=$1 out=$2
  shift 2
  T 60 "$TGC" dump-ir "$model" "$@" --after lower --format json >"$W/graph.json" || return 1
  python3 - "$W/graph.json" "$out" "$ITERS" <<'PY'
import json, random, struct, sys
g = json.load(open(sys.argv[1]))
nodes, rng, steps = g["nodes"], random.Random(1234), int(sys.argv[3])
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

# pair NAME TOL MODEL ARGS...: ITERS steps on cpu and on the device, one seed.
pair() {
  local name=$1 tol=$2 model=$3
  shift 3
  local c=("$model" "$@" --seed 7 --lr 1e-3 --quiet --train-iters "$ITERS")
  RUN "m_${name}_cpu" cpu "${c[@]}" || return 1
  RUN "m_${name}_dev" "$DEV" "${c[@]}" || return 1
  echo "-- $name: $DEV against cpu"
  CMP_SHORT=1 CMP "$name" "$W/m_${name}_cpu.jsonl" "$W/m_${name}_dev.jsonl" "$tol"
}

models() {
  one_gpu
  local rc=0 m=$ROOT/samples
  # 1e-4: 20 steps through a loss spike drift further than the 6 of equiv.
  pair gpt 1e-4 "$m/gpt.tg" "${SMALL[@]}" --set pdrop=0 --data "$DATA" || rc=1
  pair gpt_dropout 1e-4 "$m/gpt.tg" "${SMALL[@]}" --set pdrop=0.1 --data "$DATA" || rc=1
  pair llama 1e-4 "$m/llama.tg" "${SMALL[@]}" --data "$DATA" || rc=1
  if make_inputs "$m/bert.tg" "$W/bert.safetensors" "${SMALL[@]}" --set pdrop=0; then
    pair bert 1e-4 "$m/bert.tg" "${SMALL[@]}" --set pdrop=0 --inputs "$W/bert.safetensors" || rc=1
  else
    fig "bert: no inputs"
    rc=1
  fi
  pair bf16 2e-2 "$m/gpt.tg" "${SMALL[@]}" --set pdrop=0 --bf16 --data "$DATA" || rc=1
  pair recompute 1e-4 "$m/gpt.tg" "${SMALL[@]}" --set pdrop=0.1 --data "$DATA" --recompute-granularity full || rc=1
  return $rc
}

# attn_cmp LABEL TOL A B MODEL ARGS...: one training run with
# --attention-backend A and one with B, both on the device, their losses and
# gradient norms compared (CMP: TOL on the loss, 10 TOL on the norm).
attn_cmp() {
  local label=$1 tol=$2 first=$3 second=$4 model=$5
  shift 5
  local c=("$model" "$@" --seed 7 --lr 1e-3 --quiet --train-iters "$ITERS")
  RUN "a_${label}_$first" "$DEV" "${c[@]}" --attention-backend "$first" || return 1
  RUN "a_${label}_$second" "$DEV" "${c[@]}" --attention-backend "$second" || return 1
  echo "-- $label: --attention-backend $second against $first on $DEV"
  CMP_SHORT=1 CMP "$label" "$W/a_${label}_$first.jsonl" "$W/a_${label}_$second.jsonl" "$tol"
}

# attn_pair NAME TOL MODEL ARGS...: the fused attention kernel against the
# unfused chain (bmm, softmax, dropout, bmm), both on the device.
attn_pair() {
  local name=$1 tol=$2
  shift 2
  attn_cmp "attn_$name" "$tol" unfused tgc "$@"
}

# attention: fused against unfused on the device: GPT with attention
# dropout (the same Philox masks), LLaMA with grouped-query attention, BERT
# with a padding mask, and GPT in bf16.
attention() {
  one_gpu
  local rc=0 m=$ROOT/samples
  attn_pair gpt_dropout 1e-4 "$m/gpt.tg" "${SMALL[@]}" --set pdrop=0.1 --data "$DATA" || rc=1
  attn_pair llama_gqa 1e-4 "$m/llama.tg" "${SMALL[@]}" --data "$DATA" || rc=1
  if make_inputs "$m/bert.tg" "$W/bert.safetensors" "${SMALL[@]}" --set pdrop=0; then
    attn_pair bert 1e-4 "$m/bert.tg" "${SMALL[@]}" --set pdrop=0 --inputs "$W/bert.safetensors" || rc=1
  else
    fig "bert: no inputs"
    rc=1
  fi
  attn_pair gpt_bf16 2e-2 "$m/gpt.tg" "${SMALL[@]}" --set pdrop=0 --bf16 --data "$DATA" || rc=1
  return $rc
}

# cudnn: cuDNN's fused attention (--attention-backend cudnn, explicit, so a
# graph no engine takes fails the check) against tgc's kernel, bf16, no
# attention dropout (cuDNN is not given dropout: its masks are not tgc's):
# GPT (causal, 4 heads of 64) and LLaMA (grouped-query: 4 query heads over
# 2). ITERS steps from the same seed; the loss within 2e-2 relative at every
# step and the gradient norm within 2e-1, the limits of the bf16 fused
# against unfused pair above (two bf16 attentions that round P and the
# products differently). The figures start with what cuDNN ran (the device
# line of a one-step run: kernels taken, version, engine, workspace).
cudnn() {
  [ "$DEV" = cuda ] || { fig "needs cuda"; return 77; }
  one_gpu
  local rc=0 m=$ROOT/samples took
  took=$(T 120 "$TGC" run "$m/gpt.tg" "${SMALL[@]}" --set pdrop=0 --bf16 --data "$DATA" --train-iters 1 \
    --attention-backend cudnn --backend cuda 2>&1 | tee "$W/cudnn.out" | grep -o 'attention: cuDNN for [^;]*' | sed -n 1p)
  cat "$W/cudnn.out"
  fig "${took:-cuDNN did not run}"
  [ -n "$took" ] || rc=1
  attn_cmp cudnn_gpt 2e-2 tgc cudnn "$m/gpt.tg" "${SMALL[@]}" --set pdrop=0 --bf16 --data "$DATA" || rc=1
  attn_cmp cudnn_llama_gqa 2e-2 tgc cudnn "$m/llama.tg" "${SMALL[@]}" --bf16 --data "$DATA" || rc=1
  return $rc
}

BIG=(--set layers=12 --set hidden=768 --set heads=12 --set seq=1024 --set batch=8 --set vocab=50304 --set pdrop=0)

# The bf16 dense tensor-core peak of the GPU, in TFLOP/s (the vendor's
# datasheet, without sparsity), for MFU; empty when the GPU is not listed.
bf16_peak() {
  case "$(T 10 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed -n 1p)" in
    *H200* | *H100*SXM* | *H100\ 80GB\ HBM3*) echo 989.4 ;;
    *H100*) echo 756.0 ;;   # PCIe
    *A100*) echo 312.0 ;;
    *L40S*) echo 362.1 ;;
    *) echo "" ;;
  esac
}

# throughput: GPT-2 124M at s = 1024 (issue 19), three ways: fp32 with the
# unfused attention chain (what tgc ran before fused attention), fp32 fused,
# and bf16 fused (16-bit storage, tensor-core GEMMs, the fused kernel);
# tokens/s, TFLOP/s (the FLOPs model of tgc check) and MFU against the
# GPU's bf16 dense peak.
throughput() {
  [ "$DEV" = cuda ] || { fig "needs cuda"; return 77; }
  local fpt peak
  fpt=$("$TGC" check "$ROOT/samples/gpt.tg" "${BIG[@]}" | sed -n 's/.* \([0-9.]*[KMGT]*\)FLOP per token.*/\1/p')
  peak=$(bf16_peak)
  echo "GPT-2 124M: ${BIG[*]}; ${fpt}FLOP per token (forward + backward); bf16 dense peak ${peak:-unknown} TFLOP/s"
  local how rc=0
  for how in "fp32-unfused|--attention-backend unfused" "fp32-fused|--attention-backend tgc" \
    "bf16-fused|--attention-backend tgc --bf16"; do
    local name=${how%%|*} opts=${how#*|}
    # shellcheck disable=SC2086  # opts: words
    RUN "big-$name" cuda "$ROOT/samples/gpt.tg" "${BIG[@]}" $opts --data "$DATA" --train-iters 8 --log-interval 1 \
      --quiet || { rc=1; fig "$name: failed"; continue; }
    python3 "$ROOT/bench/step_figures.py" "$W/big-$name.jsonl" "$fpt" "${peak:-0}" "$name" | tee "$W/big-$name.txt"
    fig "$(tail -1 "$W/big-$name.txt")"
  done
  return $rc
}

# cuda_graphs: --cuda-graphs on against off (docs/cuda.md "CUDA graphs"): a
# small GPT whose step is launch-bound, a learning rate that changes every
# step; the losses bit for bit equal, every run after its warm-up replayed
# (TGC_DEBUG=1's count), and the median step time of each from step 3 on.
cuda_graphs() {
  one_gpu
  local m=("$ROOT/samples/gpt.tg" --set layers=4 --set hidden=256 --set seq=128 --set batch=8 "${COMMON[@]}"
    --min-lr 1e-4 --lr-warmup-iters 2 --lr-decay-style cosine --train-iters 20 --log-interval 1) rc=0
  TGC_DEBUG=1 RUN graphs-on "$DEV" "${m[@]}" --cuda-graphs on || return 1
  RUN graphs-off "$DEV" "${m[@]}" --cuda-graphs off || return 1
  CMP "on vs off" "$W/graphs-off.jsonl" "$W/graphs-on.jsonl" 0 || rc=1
  grep "graphs:" "$W/graphs-on.err" | tee "$W/graphs.count"
  grep -Eq "graphs: [1-9][0-9]* runs captured, [0-9]+ captures, (1[0-9]|[2-9][0-9]|[0-9]{3,}) replays" "$W/graphs.count" ||
    { echo "expected the run replayed at 18 steps or more"; fig "not replayed"; rc=1; }
  python3 - "$W/graphs-off.jsonl" "$W/graphs-on.jsonl" <<'PY' | tee "$W/graphs.txt"
import json, sys
def med(p):
    ms = sorted(r["step_ms"] for r in map(json.loads, open(p)) if r["step"] >= 3)
    return ms[len(ms) // 2]
off, on = med(sys.argv[1]), med(sys.argv[2])
print("step %.2f ms uncaptured, %.2f ms replayed: %.2fx" % (off, on, off / on))
PY
  fig "$(tail -1 "$W/graphs.txt")"
  return $rc
}

profile() {
  [ "$DEV" = cuda ] || { fig "needs cuda"; return 77; }
  TGC_DEBUG=2 T 300 "$TGC" run "$ROOT/samples/gpt.tg" "${BIG[@]}" --data "$DATA" --train-iters 3 --backend cuda \
    --quiet 2>&1 | grep -v "^step"
}

# gpu_bench: bench/gpu_bench.sh (issue 21): GPT-2 124M, s = 1024, bf16,
# fused attention: tokens/s, TFLOP/s, MFU, the profile's top ops with GB/s.
gpu_bench() {
  [ "$DEV" = cuda ] || { fig "needs cuda"; return 77; }
  "$ROOT/bench/gpu_bench.sh" --tgc "$TGC" --iters 8 --top 10 >"$W/gpu_bench.txt" 2>&1
  local rc=$?
  cat "$W/gpu_bench.txt"
  fig "$(grep '^bf16 fused: ' "$W/gpu_bench.txt" | tail -1)"
  return $rc
}

# A test binary of the build, beside tgc (carried) or in its tests/.
test_bin() {
  local f
  for f in "$(dirname "$TGC")/$1" "$(dirname "$TGC")/tests/$1"; do
    [ -x "$f" ] && { echo "$f"; return 0; }
  done
  return 1
}

# gpu_test NAME TIMEOUT ARGS...: a GPU test of the build (77: skipped).
gpu_test() {
  local name=$1 t=$2 bin
  shift 2
  bin=$(test_bin "$name") || { fig "$name: not found beside tgc"; return 77; }
  T "$t" "$bin" "$@" >"$W/$name.out" 2>&1
  local rc=$?
  tail -30 "$W/$name.out"
  case $rc in
    0) fig "$name: $(grep -E '^nccl: |checks, ' "$W/$name.out" | tail -4 | tr '\n' ' ')" ;;
    77) fig "$name: skipped itself" ;;
    *) fig "$name: FAILED (exit $rc)"; return 1 ;;
  esac
  return $rc
}

# Every test of the build that is there (a build without the CUDA
# toolkit has none of the NCCL and cuBLASLt ones): failed if one failed,
# skipped if none ran.
tests() {
  local failed=0 ran=0 st t
  for t in test_cuda test_nccl test_lt; do
    case $t in
      test_cuda) gpu_test test_cuda 60 ;;
      test_nccl) gpu_test test_nccl 180 ;;
      test_lt) [ "$DEV" = cuda ] || continue; gpu_test test_lt 120 "$ROOT/samples" ;;
    esac
    st=$?
    [ $st = 0 ] && ran=1
    [ $st != 0 ] && [ $st != 77 ] && failed=1
  done
  [ $failed = 1 ] && return 1
  [ $ran = 1 ] || return 77
  return 0
}

kernels() {
  [ "$DEV" = cuda ] || { fig "needs cuda"; return 77; }
  gpu_test kernel_check "$1" "$ROOT/samples"
}

# ---- running them -------------------------------------------------------------------

# Whether the command line asked for check KEY (no keys: every check).
wanted() { [ "$PARTS" = "  " ] || [[ "$PARTS" == *" $1 "* ]]; }

# check KEY NAME CONFIGURATION LIMIT FN ARGS...: one row of the table.
check() {
  local key=$1 name=$2 conf=$3 limit=$4
  shift 4
  wanted "$key" || return 0
  local t0=$SECONDS left=$((BUDGET - SECONDS))
  echo
  echo "=== $name ($conf)"
  if [ $left -lt 10 ]; then
    echo "skipped: the ${BUDGET} s budget is spent"
    printf '%s\t%s\t%s\t%s\n' "$name" "$conf" "skipped" "over the ${BUDGET} s budget" >>"$RESULTS"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  : >"$W/fig"
  # A process group of its own: timeout reaches every child.
  timeout --kill-after=10 "$limit" bash -c 'source "$W/env.sh"; "$@"' _ "$@"
  local rc=$? result
  case $rc in
    0) result=ok ;;
    77) result=skipped ;;
    124 | 137) result="FAILED (timeout ${limit} s)" ;;
    *) result="FAILED (exit $rc)" ;;
  esac
  local figs
  figs=$(sed 's/; $//' "$W/fig")
  echo "--- $name ($conf): $result, $((SECONDS - t0)) s${figs:+: $figs}"
  printf '%s\t%s\t%s\t%s\n' "$name" "$conf" "$result" "${figs:-} [$((SECONDS - t0)) s]" >>"$RESULTS"
}

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
  if [ "$DEV" = cuda ] && command -v cmake >/dev/null && command -v flex >/dev/null && command -v bison >/dev/null &&
     { [ -e /usr/include/cblas.h ] || [ -e /usr/include/x86_64-linux-gnu/cblas.h ] ||
       [ -e /usr/include/openblas/cblas.h ]; }; then
    echo "building tgc from source in $W/build"
    if T 300 cmake -S "$ROOT" -B "$W/build" -DCMAKE_BUILD_TYPE=Release >"$W/cmake.log" 2>&1 &&
       T 300 cmake --build "$W/build" -j"$(nproc)" --target tgc test_nccl test_cuda test_lt kernel_check \
         >>"$W/cmake.log" 2>&1; then
      TGC=$W/build/tgc
      return 0
    fi
    tail -20 "$W/cmake.log"
  fi
  for TGC in "$ROOT/build/tgc" "$ROOT/build-gpu/tgc"; do [ -x "$TGC" ] && return 0; done
  echo "no tgc: set TGC (and TGC_LIBS), build one in build/, or install cmake flex bison libopenblas-dev"
  return 1
}

# The configuration column of a partition.
conf_name() {
  case $1 in
    serial) echo serial ;;
    interleaved) echo "--pp 2, 2 chunks/rank" ;;
    *) echo "$2" ;;
  esac
}

table() {
  python3 - "$RESULTS" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
head = ["check", "configuration", "result", "figures"]
w = [max([len(head[i])] + [len(r[i]) for r in rows]) for i in range(3)]
line = lambda r: "| " + " | ".join(r[i].ljust(w[i]) for i in range(3)) + " | " + r[3]
print(line(head))
print("|" + "|".join("-" * (x + 2) for x in w) + "|---")
for r in rows:
    print(line(r))
PY
}

main() {
  echo "tgc GPU check ($DEV), $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(uname -n)"
  find_tgc || return 1
  export TGC
  echo "tgc: $TGC"
  GPUS=0
  [ "$DEV" = cuda ] && GPUS=$(T 20 nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  export GPUS
  # What every check's shell needs beyond the exported variables.
  { declare -p EQ EQM SMALL BIG COMMON PARTITIONS; declare -f; } >"$W/env.sh"
  local where="1 GPU"
  [ "$DEV" = sim ] && where="sim"
  check machine "machine" "$GPUS GPU(s)" 60 machine
  check report "CUDA kernel report" "gpt, small" 300 kernel_report
  local p name opts
  for p in "${PARTITIONS[@]}"; do
    name=${p%%|*} opts=${p#*|}
    check equiv "equivalence" "$(conf_name "$name" "$opts"), $where" 240 equiv_one "$name" "$opts" shared
  done
  for p in "${PARTITIONS[@]:1}"; do
    name=${p%%|*} opts=${p#*|}
    local ranks=2
    [ "$name" = tp2pp2dp2 ] && ranks=8
    if [ "$DEV" != cuda ] || [ "$GPUS" -lt "$ranks" ]; then
      [ "$DEV" = cuda ] && wanted nccl && printf '%s\t%s\t%s\t%s\n' "equivalence over NCCL" "$(conf_name "$name" "$opts")" "skipped" \
        "needs $ranks GPUs, $GPUS here" >>"$RESULTS"
      continue
    fi
    check nccl "equivalence over NCCL" "$(conf_name "$name" "$opts"), $ranks GPUs" 240 equiv_one "$name" "$opts" nccl
  done
  check ckpt "checkpoint, kill, resume" "serial, $where" 240 ckpt serial ""
  check ckpt "checkpoint, kill, resume" "--tp 2, $where" 240 ckpt tp2 "--tp 2"
  check reshard "resharded resume" "$DEV --tp 2 -> cpu --pp 2" 240 reshard
  check eval "evaluation" "--split 98,2 --eval-interval 2" 240 evaluation
  check sample "sampling, KV cache" "greedy, 16 tokens" 240 sampling
  check models "loss curves, 6 models" "$ITERS steps, $where" 400 models
  check attention "fused attention" "against unfused, $where" 300 attention
  check cudnn "cuDNN attention" "bf16, against tgc's kernel" 240 cudnn
  check throughput "GPU bench (bench/gpu_bench.sh)" "GPT-2 124M, s=1024, bf16" 240 gpu_bench
  check throughput "throughput" "GPT-2 124M, s=1024" 300 throughput
  check graphs "CUDA graphs" "captured vs uncaptured, small gpt" 120 cuda_graphs
  check profile "per-op profile" "TGC_DEBUG=2" 200 profile
  check tests "GPU tests of the build" "test_cuda test_nccl$([ "$DEV" = cuda ] && echo " test_lt")" 300 tests
  check kernels "kernel_check" "every kernel vs its C twin" 300 kernels 290
  echo
  echo "=== the table"
  table
  local failed
  failed=$(awk -F'\t' '$3 ~ /^FAILED/' "$RESULTS" | wc -l)
  echo
  if [ "$failed" = 0 ]; then echo "gpu check ($DEV): every check passed or was skipped, $SECONDS s"
  else echo "gpu check ($DEV): $failed check(s) failed, $SECONDS s"; fi
  [ "$failed" = 0 ]
}

main "$@" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
rm -rf "$W"
exit "$rc"
