#!/bin/sh
# Not measured: five real Debian packages (~450 files, none with a preinst, so nothing runs in
# the scratch root), downloaded once into $CACHE, and an empty dpkg database in $D/root.
set -e
debs="$CACHE/debs"
if [ ! -f "$debs/.complete" ]; then
    mkdir -p "$debs"
    (cd "$debs" && apt-get download -q python3-pygments python3-six python3-yaml python3-jinja2 \
        python3-markupsafe >/dev/null 2>&1)
    touch "$debs/.complete"
fi
mkdir -p "$D/root/var/lib/dpkg/info" "$D/root/var/lib/dpkg/updates" "$D/root/var/log"
touch "$D/root/var/lib/dpkg/status" "$D/root/var/lib/dpkg/available"
