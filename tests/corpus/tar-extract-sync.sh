#!/bin/sh
# Unpack a tree of documentation files, then sync.
set -e
tar -C /usr/share -cf "$D/../doc-$$.tar" doc 2>/dev/null || tar -C /usr/share -cf "$D/../doc-$$.tar" doc
mkdir -p "$D/tree"
tar -C "$D/tree" -xf "$D/../doc-$$.tar"
rm -f "$D/../doc-$$.tar"
sync
