#!/bin/sh
# dpkg --unpack of five packages into a scratch root, with dpkg's default safe I/O (containers
# often set force-unsafe-io in /etc/dpkg/dpkg.cfg.d; --refuse-unsafe-io undoes it): each file
# is written, sync_file_range(WRITE), then sync_file_range(WAIT_BEFORE) and fsync before its
# rename, and the database files are fsynced at each step. Its log goes into the scratch root
# too (--root alone would append to the host's /var/log/dpkg.log).
set -e
exec dpkg --refuse-unsafe-io --root="$D/root" --log="$D/root/var/log/dpkg.log" --force-depends \
    --unpack "$CACHE"/debs/*.deb >/dev/null
