#!/bin/sh
# SQLite in WAL mode, 1000 INSERTs, each its own transaction, with PRAGMA synchronous=$1:
# FULL syncs the WAL at every commit (one fdatasync of a ~4 KiB frame per row); NORMAL syncs
# only at checkpoints (every 1000 pages, and at close).
set -e
cd "$D"
sqlite3 wal.db "pragma journal_mode=wal; create table t(id integer primary key, v text);" >/dev/null
{
    echo "pragma synchronous=$1;"
    i=0
    while [ $i -lt 1000 ]; do
        echo "insert into t(v) values('row $i with some text payload');"
        i=$((i + 1))
    done
} | sqlite3 wal.db
