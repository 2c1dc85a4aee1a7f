#!/bin/sh
# 4 million shuffled lines (~30 MiB), durable and out of the page cache.
set -e
seq 1 4000000 | shuf --random-source=/dev/zero > "$D/in"
sync -f "$D"
echo 3 > /proc/sys/vm/drop_caches
