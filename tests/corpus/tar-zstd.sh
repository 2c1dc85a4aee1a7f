#!/bin/sh
# An archive of a cold tree, compressed on the way: sequential reads of each file, one
# buffered archive written and left to write-back.
set -e
tar -C "$D" -cf - tree | zstd -q -1 -o "$D/tree.tar.zst"
