#!/usr/bin/env bash
# lsan_options.sh TGC [PROGRAM ...]: every program of the sanitizer build
# starts with LeakSanitizer's defaults (support/sanitizer/lsan_options.c),
# not the runtime's: tgc reports intercept_tls_get_addr false (the
# runtime's help lists each flag's current value), and every other program
# exports the hook the runtime looks up. Without them the leak check at
# exit crashed once oneDNN's OpenMP workers had run ("Tracer caught
# signal 11").
set -euo pipefail
tgc=$1; shift
fail=0
value=$(LSAN_OPTIONS=help=1 "$tgc" --version 2>&1 | awk '$1 == "intercept_tls_get_addr" { getline; v = $0 } END { print v }')
case $value in
  *"Current Value: false"*) echo "tgc: intercept_tls_get_addr is false" ;;
  *) echo "FAIL: tgc starts with intercept_tls_get_addr ${value:-(not listed)}, not false"; fail=1 ;;
esac
for p in "$tgc" "$@"; do
  if ! nm -D --defined-only "$p" | awk '$NF == "__lsan_default_options" { n++ } END { exit !n }'; then
    echo "FAIL: $p does not export __lsan_default_options"; fail=1
  fi
done
[ $fail -eq 0 ] && echo "$(( $# + 1 )) programs carry LeakSanitizer's defaults"
exit $fail
