#!/bin/sh
# sort with an 8 MiB buffer: runs written to temporary files in $D, then merged.
set -e
sort -S 8M -T "$D" "$D/in" -o "$D/out"
