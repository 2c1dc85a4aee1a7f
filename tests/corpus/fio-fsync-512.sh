#!/bin/sh
# 512-byte writes, each followed by fsync.
exec fio --name=fs --directory="$D" --rw=write --bs=512 --size=1m --fsync=1 --ioengine=sync >/dev/null
