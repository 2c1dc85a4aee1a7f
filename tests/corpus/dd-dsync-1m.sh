#!/bin/sh
# 1 MiB writes on an O_DSYNC file: each write syncs a megabyte, nothing amplified.
exec dd if=/dev/zero of="$D/big.out" bs=1M count=64 oflag=dsync status=none
