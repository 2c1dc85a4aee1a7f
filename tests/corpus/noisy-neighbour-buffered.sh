#!/bin/sh
# A small-sync database beside a buffered bulk writer on one disk: journal-fsync.py (a line,
# then fsync, as fast as it goes) alone for 4 s, then dd writing $1 MiB through the page
# cache (no O_DIRECT) onto the same filesystem. The kernel's flushers write dd's pages back;
# as free space runs short, ext4 makes every writer wait for that write-back
# (ext4_nonda_switch), the logger's writes included.
set -e
python3 "$CORPUS/journal-fsync.py" 10 &
db=$!
sleep 4
dd if=/dev/zero of="$D/bulk.dat" bs=1M count="$1" status=none
wait $db
