#!/bin/sh
# A 512 MiB file of data for mmap-lookups.py, on the device and out of the page cache.
set -e
dd if=/dev/urandom of="$D/index.dat" bs=1M count=512 status=none
sync
echo 3 > /proc/sys/vm/drop_caches
