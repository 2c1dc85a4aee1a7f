#!/bin/sh
# sysbench fileio seqwr, 4 KiB writes over four files, --file-fsync-freq=1: after every write
# it fsyncs all four files (one has 4 KiB new, three have nothing), for 3 s.
set -e
cd "$D"
exec sysbench fileio --file-test-mode=seqwr --file-fsync-freq=1 --file-num=4 \
    --file-total-size=16M --file-block-size=4096 --time=3 run >/dev/null
