#!/bin/sh
# env_table.sh ROOT TGC: every TGC_* environment variable goes through the
# one table (support/env.c): no getenv of a TGC_ name elsewhere in the
# library and the command line, every table row in docs/runtime.md's
# table, and a refused value stops tgc with its name and value.
root=$1 tgc=$2
fail=0
cd "$root" || exit 1
direct=$(grep -rn 'getenv *( *"TGC_' runtime api cli support codegen passes ir frontend tokenizer \
             --include='*.c' --include='*.h' | grep -v '^support/env\.c:')
if [ -n "$direct" ]; then
    echo "FAIL: TGC_ variables read around support/env.c's table:"
    echo "$direct"
    fail=1
fi
for name in $(grep -o '{"TGC_[A-Z0-9_]*"' support/env.c | tr -d '{"'); do
    grep -q "^| \`$name\` |" docs/runtime.md || { echo "FAIL: $name is not in docs/runtime.md's table"; fail=1; }
done
for name in $(grep -o '^| `TGC_[A-Z0-9_]*`' docs/runtime.md | tr -d '|` '); do
    grep -q "{\"$name\"" support/env.c || { echo "FAIL: docs/runtime.md lists $name, not in support/env.c"; fail=1; }
done
# Names read through the table but missing from it (an assertion at run time).
for name in $(grep -rhoE 'env_(int|flag|text)\("TGC_[A-Z0-9_]*"' runtime api cli support codegen passes | grep -o 'TGC_[A-Z0-9_]*' | sort -u); do
    grep -q "{\"$name\"" support/env.c || { echo "FAIL: $name is read but not in support/env.c"; fail=1; }
done
check() { # VAR=VALUE EXPECTED
    out=$(env "$1" "$tgc" compile samples/gpt.tg --set layers=1 -o "${TMPDIR:-/tmp}/env_table.$$.plan" 2>&1)
    rc=$?
    case "$out" in
    *"$2"*) [ $rc -ne 0 ] || { echo "FAIL: $1: exit status 0"; fail=1; } ;;
    *) echo "FAIL: $1: expected '$2', got: $out"; fail=1 ;;
    esac
}
check TGC_DEBUG=x "tgc: error: TGC_DEBUG='x': expected an integer from 0 to 5"
check TGC_DEBUG=6 "tgc: error: TGC_DEBUG='6': expected an integer from 0 to 5"
check TGC_GEMM16_WORKSPACE=0x100 "tgc: error: TGC_GEMM16_WORKSPACE='0x100': expected an integer"
check TGC_CKPT_TEST_DELAY_MS=-1 "tgc: error: TGC_CKPT_TEST_DELAY_MS='-1': expected an integer from 0 to 600000"
check TGC_NO_CACHE=yes "tgc: error: TGC_NO_CACHE='yes': expected 0 or 1"
rm -f "${TMPDIR:-/tmp}/env_table.$$.plan"
[ $fail -eq 0 ] && echo "env_table: ok"
exit $fail
