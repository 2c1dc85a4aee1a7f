#!/bin/sh
# A small-sync database beside a bulk writer on one disk: journal-fsync.py (a line, then
# fsync, as fast as it goes) alone for 3 s, then with fio writing 1 MiB O_DIRECT blocks
# (QD 16) to the same filesystem for 3 s more.
set -e
python3 "$CORPUS/journal-fsync.py" 6 &
db=$!
sleep 3
fio --name=bulk --filename="$D/bulk.dat" --rw=write --bs=1M --direct=1 --ioengine=libaio \
    --iodepth=16 --size=512M --time_based --runtime=3 --output=/dev/null
wait $db
