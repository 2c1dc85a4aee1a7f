#!/bin/sh
# SQLite inserts in autocommit mode: every INSERT is its own transaction (journal, directory
# and database synced per row).
set -e
cd "$D"
sqlite3 app.db "create table t(id integer primary key, v text);"
i=0
while [ $i -lt 300 ]; do
    echo "insert into t(v) values('row $i with some text payload');"
    i=$((i + 1))
done | sqlite3 app.db
