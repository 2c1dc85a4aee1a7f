#!/bin/sh
# PostgreSQL under pgbench (TPC-B-like, 4 clients, 3 s) with synchronous_commit=$1: "on" (each
# commit waits for its WAL fdatasync; backends flush for each other: group commit) or "off"
# (commits return at once; the WAL writer flushes every 200 ms). Then a fast shutdown (one
# checkpoint). The cluster is pgbench-setup.sh's.
set -e
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
stop() { runuser -u postgres -- "$PGBIN/pg_ctl" -D "$D/pg/data" -m fast -w stop >/dev/null; }
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$D/pg/data" -l "$D/pg/log" -w \
    -o "-k $D/pg -c listen_addresses='' -c synchronous_commit=$1" start >/dev/null
trap stop EXIT
pgbench -h "$D/pg" -U postgres -c 4 -j 2 -T 3 postgres >/dev/null 2>&1
