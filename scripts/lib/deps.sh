# Sourced by scripts/demo.sh, scripts/test.sh and .ci/run: the Debian 12
# packages tgc needs, by purpose, and one function that installs the missing
# ones (as root, through apt-get) or prints the one apt-get line to run and
# stops (as anyone else).
#
#   tgc_deps build|demo|test|fuzz ...

TGC_DEPS_BUILD="build-essential cmake flex bison libopenblas-openmp-dev libutf8proc-dev libsentencepiece-dev"
# The demo trains on the King James Bible (the 'bible' command) and prints
# the loss curve with python3.
TGC_DEPS_DEMO="$TGC_DEPS_BUILD bible-kjv python3"
# The test suite: lit and FileCheck, graphviz for the DOT tests, Debian's
# python3 with torch (the outside oracle) and regex (GPT-2's reference
# pre-tokenizer), Debian's sentencepiece (spm_train, spm_encode and spm_decode:
# the SentencePiece tokenizer's reference), OpenMPI for the mpi communicator's tests, oneDNN (headers
# and library) for the 16-bit CPU GEMMs' matmul path (optional to build:
# runtime/backend/gemm16.h).
# python3-venv, python3-pip, python3-yaml and python3-requests: the venv of
# the Hugging Face tests (scripts/lib/hf_venv.sh), which sees Debian's torch.
TGC_DEPS_TEST="$TGC_DEPS_BUILD sentencepiece python3 python3-torch python3-regex graphviz llvm-14-tools openmpi-bin libopenmpi-dev libdnnl-dev python3-venv python3-pip python3-yaml python3-requests"
# The fuzzers and sanitizer builds: clang with its runtimes.
TGC_DEPS_FUZZ="clang clang-14 libclang-rt-14-dev"
# pkg-config: api.install builds the example against the installed tgc.pc (docs/api.md).
TGC_DEPS_TEST="$TGC_DEPS_TEST pkg-config"

tgc_deps_missing() {
  local p missing=""
  for p in "$@"; do
    if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != *"install ok installed"* ]]; then
      missing="$missing $p"
    fi
  done
  echo "${missing# }"
}

tgc_deps() {
  local want="" purpose missing
  for purpose in "$@"; do
    case "$purpose" in
      build) want="$want $TGC_DEPS_BUILD" ;;
      demo) want="$want $TGC_DEPS_DEMO" ;;
      test) want="$want $TGC_DEPS_TEST" ;;
      fuzz) want="$want $TGC_DEPS_FUZZ" ;;
      *) echo "tgc_deps: unknown purpose '$purpose'" >&2; return 2 ;;
    esac
  done
  if ! command -v dpkg-query >/dev/null; then
    echo "note: not a Debian system; make sure these are installed:$want" >&2
    return 0
  fi
  # shellcheck disable=SC2086
  missing=$(tgc_deps_missing $want)
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing: $missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || return 1
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null || return 1
    return 0
  fi
  echo "missing Debian packages; install them with:" >&2
  echo "  sudo apt-get install -y --no-install-recommends $missing" >&2
  return 1
}
