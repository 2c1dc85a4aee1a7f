#!/bin/sh
# 128-byte writes on an O_DSYNC file: each write syncs before it returns (no fsync call).
exec dd if=/dev/zero of="$D/dd.out" bs=128 count=300 oflag=dsync status=none
