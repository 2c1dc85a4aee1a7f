#!/bin/sh
# Not measured: a private PostgreSQL cluster on the filesystem ($D/pg, owned by postgres, its
# unix socket in $D/pg, no TCP), pgbench's tables at scale 2 (200,000 accounts), then a clean
# shutdown so the measured run starts from a checkpoint.
set -e
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
mkdir -p "$D/pg"
chown postgres: "$D/pg"
runuser -u postgres -- "$PGBIN/initdb" -D "$D/pg/data" --no-sync -A trust -U postgres >/dev/null
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$D/pg/data" -l "$D/pg/log" -w \
    -o "-k $D/pg -c listen_addresses=''" start >/dev/null
pgbench -h "$D/pg" -U postgres -i -s 2 -q postgres >/dev/null 2>&1
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$D/pg/data" -m fast -w stop >/dev/null
