#!/bin/sh
# The classic libaio job: random 4 KiB O_DIRECT writes from two jobs.
exec fio -name=aio -directory="$D" -rw=randwrite -bs=4k -size=100m -direct=1 -numjobs=2 \
    -ioengine=libaio -iodepth=16 -runtime=3 -time_based -group_reporting >/dev/null
