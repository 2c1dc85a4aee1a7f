#!/bin/sh
# Copy a 200 MiB file onto the filesystem, then sync.
set -e
head -c 200M /dev/urandom > "$D/../cp-src-$$"
cp "$D/../cp-src-$$" "$D/copy"
rm -f "$D/../cp-src-$$"
sync
