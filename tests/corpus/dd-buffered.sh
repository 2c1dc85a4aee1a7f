#!/bin/sh
# Big buffered writes, made durable once at the end.
exec dd if=/dev/zero of="$D/big" bs=1M count=256 conv=fdatasync status=none
