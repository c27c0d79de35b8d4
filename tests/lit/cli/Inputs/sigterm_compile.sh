#!/bin/sh
# sigterm_compile.sh TGC DIR ARGS...: runs TGC run ARGS... with a C
# compiler that waits, sends tgc SIGTERM while the compiler waits, and
# prints tgc's standard error and exit status.
tgc=$1 dir=$2
shift 2
mkdir -p "$dir"
cat > "$dir/slowcc" <<EOS
#!/bin/sh
touch "$dir/started"
sleep 2
exec cc "\$@"
EOS
chmod +x "$dir/slowcc"
rm -f "$dir/started"
TGC_CC="$dir/slowcc" TGC_CACHE_DIR="$dir/cache" "$tgc" run "$@" > "$dir/out" 2> "$dir/err" &
pid=$!
n=0
while [ ! -e "$dir/started" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
kill -TERM $pid
wait $pid
echo "exit status $?"
cat "$dir/err"
