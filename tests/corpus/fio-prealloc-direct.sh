#!/bin/sh
# Aligned 4 KiB O_DIRECT writes into a preallocated file (overwrites, nothing extends EOF).
exec fio --name=pre --directory="$D" --size=64m --rw=randwrite --bs=4k --direct=1 \
    --ioengine=psync --fallocate=native --overwrite=1 --runtime=3 --time_based >/dev/null
