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
# The two architectures compile at once (NVRTC is one thread: the suite's
# longest tests run serially, so this halves their time on two cores); each
# writes its lines to OUTDIR/SAMPLE.ARCH.log, printed in order after.
compile_arch() {
    arch=$1 st=0
    shift
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
            return 77
        fi
        # One line per kernel between the header and the summary.
        kernels=$(($(wc -l < "$report") - 2))
        summary=$(tail -n 1 "$report")
        echo "$cfg: $summary"
        if [ $rc -ne 0 ] || [ $kernels -lt 1 ]; then
            echo "FAIL: $name $cfg $arch (exit $rc, $kernels kernel lines):"
            cat "$report.err"
            awk 'NR > 1 && $6 != "0"' "$report" # the spilling kernels
            st=1
        else
            rm -f "$report.err"
        fi
    done
    return $st
}
compile_arch sm_80 "$@" > "$out/$name.sm_80.log" 2>&1 &
pid80=$!
compile_arch sm_90 "$@" > "$out/$name.sm_90.log" 2>&1
rc90=$?
wait $pid80
rc80=$?
cat "$out/$name.sm_80.log" "$out/$name.sm_90.log"
[ $rc80 -eq 77 ] || [ $rc90 -eq 77 ] && exit 77
[ $rc80 -eq 0 ] && [ $rc90 -eq 0 ] && exit 0
exit 1
