#!/bin/sh
# Not measured: a pack of 3,002 objects (3,000 small files, their tree and a commit), built
# once into $CACHE, and an empty repository on the filesystem.
set -e
pack="$CACHE/git-3000.pack"
if [ ! -s "$pack" ]; then
    src="$CACHE/git-src.$$"
    rm -rf "$src"
    mkdir -p "$src"
    git init -q "$src"
    i=0
    while [ $i -lt 3000 ]; do
        echo "file $i: a small source file, one line of text and a number $((i * 7919 % 10007))" >"$src/f$i.txt"
        i=$((i + 1))
    done
    git -C "$src" add .
    git -C "$src" -c user.name=eval -c user.email=eval@localhost commit -q -m corpus
    git -C "$src" rev-list --objects --all | git -C "$src" pack-objects --stdout -q >"$pack.tmp"
    mv "$pack.tmp" "$pack"
    rm -rf "$src"
fi
git init -q "$D/repo"
