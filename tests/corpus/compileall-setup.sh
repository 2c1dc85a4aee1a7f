#!/bin/sh
# A copy of Python's standard library without its bytecode, out of the page cache.
set -e
lib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
mkdir -p "$D/py"
cp -a "$lib"/. "$D/py/"
find "$D/py" -name __pycache__ -prune -exec rm -rf {} +
sync -f "$D"
echo 3 > /proc/sys/vm/drop_caches
