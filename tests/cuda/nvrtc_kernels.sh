#!/bin/sh
# Every CUDA kernel of a sample compiles with NVRTC, without a GPU:
#   nvrtc_kernels.sh TGC MODEL.tg OUTDIR [--set NAME=VALUE ...]
# for the serial plan, t = 2 with and without sequence parallelism, bf16 and
# fp16, each for sm_80 and sm_90. `tgc compile --kernel-report` exits 1 on a
# warning or a spilling kernel; each report (one line per kernel: registers,
# spill bytes, stack, shared memory) is kept as OUTDIR/SAMPLE.CONFIG.ARCH.txt
# and its summary line printed. Exit 77 (skipped) where NVRTC cannot load.
set -u
tgc=$1 model=$2 out=$3
shift 3
name=$(basename "$model" .tg)
mkdir -p "$out"
status=0
for arch in sm_80 sm_90; do
    for cfg in serial tp2 sp2 bf16 fp16; do
        case $cfg in
            serial) flags= ;;
            tp2) flags="--tp 2" ;;
            sp2) flags="--tp 2 --sequence-parallel" ;;
            bf16) flags=--bf16 ;;
            fp16) flags=--fp16 ;;
        esac
        report=$out/$name.$cfg.$arch.txt
        # shellcheck disable=SC2086 # flags are words
        "$tgc" compile "$model" "$@" $flags --backend cuda --cuda-arch $arch --kernel-report \
            > "$report" 2> "$report.err"
        rc=$?
        if grep -q "cannot load NVRTC" "$report.err"; then
            cat "$report.err"
            exit 77
        fi
        # One line per kernel between the header and the summary.
        kernels=$(($(wc -l < "$report") - 2))
        summary=$(tail -n 1 "$report")
        echo "$cfg: $summary"
        if [ $rc -ne 0 ] || [ $kernels -lt 1 ]; then
            echo "FAIL: $name $cfg $arch (exit $rc, $kernels kernel lines):" >&2
            cat "$report.err" >&2
            awk 'NR > 1 && $6 != "0"' "$report" >&2 # the spilling kernels
            status=1
        else
            rm -f "$report.err"
        fi
    done
done
exit $status
