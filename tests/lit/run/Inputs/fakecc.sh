#!/bin/sh
# A C compiler that answers `-Q --help=target` as a machine whose
# -march=native means $FAKE_MARCH would (kernel_cache.test), and otherwise
# is the system's cc: two machines sharing one kernel cache.
for a in "$@"; do
  if [ "$a" = "--help=target" ]; then
    printf '  -march=                     \t\t%s\n' "$FAKE_MARCH"
    exit 0
  fi
done
exec cc "$@"
