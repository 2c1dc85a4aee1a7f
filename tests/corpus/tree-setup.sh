#!/bin/sh
# A tree of ~2,400 real files (man pages of 1-4 KiB and Perl's modules, 24 MiB), made durable
# and dropped from the page cache: the program after it reads from the device.
set -e
mkdir -p "$D/tree"
cp -a /usr/share/man/man3 /usr/share/perl "$D/tree/"
sync -f "$D"
echo 3 > /proc/sys/vm/drop_caches
