#!/usr/bin/env bash
# pipe_lint.sh ROOT: no script of the project cuts a pipe short. `W | grep -q`
# and `W | head` stop reading early; the writer W then dies of SIGPIPE, and
# under `set -o pipefail` (every script here, and lit's RUN lines) the
# pipeline fails for a check that matched: a test that fails or passes by
# the scheduler's luck (issue 32: ir.refeed on a fresh Debian 12). Read the
# whole input instead: `grep PAT >/dev/null`, `sed -n 1,Np`, `<<<"$out"`,
# or a file.
set -euo pipefail
root=${1:?usage: pipe_lint.sh ROOT}
cd "$root"
# A pipe (not `||`) into head, grep -q/-m/--quiet/--max-count, or sed with q.
pat='(^|[^|])\|[[:space:]]*(head([[:space:]]|$)|grep[[:space:]]+([^|]*[[:space:]])?(-[a-zA-Z]*[qm]|--quiet|--max-count|--silent)|sed[[:space:]]+[^|]*[0-9]q)'
files=$(find .ci scripts tests bench fuzz examples -type f \( -name '*.sh' -o -name '*.test' -o -name 'run' \
  -o -name '*.ir' -o -name 'CMakeLists.txt' \) -not -name pipe_lint.sh | sort)
bad=$(grep -nE "$pat" $files || true)
if [ -n "$bad" ]; then
  echo "these lines cut a pipe short (the writer dies of SIGPIPE under pipefail):" >&2
  echo "$bad" >&2
  exit 1
fi
# The check itself finds what it is for.
for probe in 'x | grep -q y' 'x | head -1' 'x 2>&1 | grep -m1 y' 'x | grep -E -q y' 'x | sed 1q'; do
  grep -qE "$pat" <<<"$probe" || { echo "pipe_lint misses '$probe'" >&2; exit 1; }
done
for fine in 'x || grep -q y f' 'x | grep y >/dev/null' 'x | sed -n 1,20p' 'grep -q y <<<"$x"'; do
  grep -qE "$pat" <<<"$fine" && { echo "pipe_lint flags '$fine'" >&2; exit 1; }
done
echo "pipe_lint: $(wc -w <<<"$files") files, no pipe cut short"
