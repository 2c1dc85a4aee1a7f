#!/bin/sh
# Read a 200 MiB file back from the device (page cache dropped first).
set -e
dd if=/dev/zero of="$D/f" bs=1M count=200 status=none
sync
echo 3 > /proc/sys/vm/drop_caches
cat "$D/f" > /dev/null
