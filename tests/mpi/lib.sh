# What the mpirun tests share (sourced with their arguments): PROG MODEL
# TEXT MPIEXEC [MPIEXEC_FLAGS...] into tgc (the program), model, text,
# mpiexec and flags; a scratch directory $dir removed at exit; fail()
# counting the failures in $fails.
set -u
tgc=$1 model=$2 text=$3 mpiexec=$4
shift 4
flags=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
