#!/bin/sh
# fio as people run it: a new 64 MiB file laid out with fio's default fallocate (native:
# unwritten extents, i_size set), then sequential O_DIRECT psync writes of $1 bytes (6k or
# 1536): on a filesystem whose block does not divide the write size, every write that ends
# (or starts) inside a block that is still unwritten makes the filesystem zero the rest of that
# block with an extra write (and XFS serialises such unaligned direct I/O).
exec fio --name=layout --directory="$D" --filename=layout.dat --size=64m --rw=write \
    --bs="$1" --direct=1 --ioengine=psync --runtime=3 >/dev/null
