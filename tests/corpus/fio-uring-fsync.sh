#!/bin/sh
# io_uring 4 KiB writes, each followed by an io_uring fsync (IORING_OP_FSYNC).
exec fio --name=uring --directory="$D" --ioengine=io_uring --rw=write --bs=4k --size=2m \
    --fsync=1 >/dev/null
