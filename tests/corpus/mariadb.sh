#!/bin/sh
# mariadbd (Debian's MariaDB 10.11, InnoDB's defaults: innodb_flush_log_at_trx_commit=1) on
# the data directory mariadb-setup.sh made, on a private unix socket with networking off;
# the mariadb client sends the statements (INSERTs, each its own transaction), then the
# server shuts down.
set -e
mariadbd --no-defaults --datadir="$D/mariadb" --socket="$D/mariadb.sock" --skip-networking \
    --user=root --log-error="$D/mariadb.err" --pid-file="$D/mariadb.pid" &
server=$!
i=0
until [ -S "$D/mariadb.sock" ]; do
    i=$((i + 1))
    [ $i -lt 1000 ] || { kill $server; exit 1; }
    sleep 0.01
done
mariadb -S "$D/mariadb.sock" -u root <"$D/statements.sql"
kill -TERM $server
wait $server || true
