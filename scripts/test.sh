#!/usr/bin/env bash
# The test suite, from nothing: installs the Debian packages it needs (as
# root; otherwise prints the apt-get line and stops), configures and builds
# in build/, then runs every test, one per core (docs/testing.md); the
# failures are printed with their output. Extra arguments go to ctest (e.g. scripts/test.sh -R lit).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/deps.sh
tgc_deps test
# Hugging Face transformers for tests/hf, in a venv that sees Debian's torch.
. scripts/lib/hf_venv.sh
tgc_hf_venv_link build/hf-venv
cmake -S . -B build
cmake --build build -j"$(nproc)"
ctest --test-dir build -j"$(nproc)" --output-on-failure "$@"
