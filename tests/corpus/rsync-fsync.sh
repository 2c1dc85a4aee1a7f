#!/bin/sh
# rsync -a --fsync of ~1,200 man pages (median 1.5 KiB): every file fsynced before its
# rename.
exec rsync -a --fsync /usr/share/man/man3 "$D/"
