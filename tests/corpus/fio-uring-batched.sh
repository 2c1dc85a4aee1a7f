#!/bin/sh
# io_uring 1 MiB writes, an io_uring fsync after every 16 of them: batched, healthy.
exec fio --name=batched --directory="$D" --ioengine=io_uring --rw=write --bs=1m --size=256m \
    --iodepth=4 --fsync=16 >/dev/null
