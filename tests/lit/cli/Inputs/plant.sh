#!/bin/sh
# plant.sh plant|check DIR NAME...: the symlinks a stranger plants where tgc
# writes DIR/NAME (tests/lit/cli/planted_outputs.test), then the check that
# tgc wrote none of their targets and made each NAME a regular file.
# plant: NAME.tmp and NAME itself are links to NAME.victim ("victim").
# check: every NAME.victim still says "victim", NAME is a regular file and
# no temporary of tgc's (NAME.*.tmp) is left.
set -e
mode=$1 dir=$2
shift 2
mkdir -p "$dir"
for name; do
    case $mode in
    plant)
        echo victim > "$dir/$name.victim"
        ln -sf "$name.victim" "$dir/$name.tmp"
        ln -sf "$name.victim" "$dir/$name"
        ;;
    check)
        if [ "$(cat "$dir/$name.victim")" != victim ]; then echo "$name: the victim was written"; exit 1; fi
        if [ -L "$dir/$name" ] || [ ! -f "$dir/$name" ]; then echo "$name: not a regular file"; exit 1; fi
        for t in "$dir/$name".*.tmp; do
            if [ -e "$t" ]; then echo "$name: a temporary is left: $t"; exit 1; fi
        done
        ;;
    esac
done
echo "planted: $mode ok"
