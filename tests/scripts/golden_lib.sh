# golden_compare MARK GOLDEN ACTUAL WHAT: the body of GOLDEN (after its
# header, the leading lines starting with MARK) must equal file ACTUAL;
# UPDATE_GOLDEN=1 rewrites the body and keeps the header. Sourced by the
# golden scripts; exits the script with its status.
golden_compare() {
  local mark=$1 golden=$2 actual=$3 what=$4 tmp
  tmp=$(mktemp -d)
  if [ -f "$golden" ]; then
    awk -v m="^$mark" 'body || $0 !~ m { body = 1; print }' "$golden" > "$tmp/expected"
    awk -v m="^$mark" '!body && $0 ~ m { print; next } { body = 1 }' "$golden" > "$tmp/header"
  else
    : > "$tmp/expected"
    : > "$tmp/header"
  fi
  if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
    cat "$tmp/header" "$actual" > "$golden"
    rm -rf "$tmp"
    echo "updated $golden"
    exit 0
  fi
  if [ ! -s "$tmp/expected" ]; then
    rm -rf "$tmp"
    echo "golden file $golden is missing or empty; create it with UPDATE_GOLDEN=1" >&2
    exit 1
  fi
  if ! diff -u --label "$golden (expected)" --label "$what (actual)" "$tmp/expected" "$actual"; then
    rm -rf "$tmp"
    echo "$what changed; if intended, run with UPDATE_GOLDEN=1 and review git diff" >&2
    exit 1
  fi
  rm -rf "$tmp"
}
