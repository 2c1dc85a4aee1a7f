#!/bin/sh
# Not measured: sysbench's four 4 MiB files.
set -e
cd "$D"
sysbench fileio --file-num=4 --file-total-size=16M prepare >/dev/null
