#!/bin/sh
# The same inserts, 1000 rows per transaction: twenty commits.
set -e
cd "$D"
sqlite3 app.db "create table t(id integer primary key, v text);"
b=0
while [ $b -lt 20 ]; do
    echo "begin;"
    i=0
    while [ $i -lt 1000 ]; do
        echo "insert into t(v) values('row $b $i with some text payload');"
        i=$((i + 1))
    done
    echo "commit;"
    b=$((b + 1))
done | sqlite3 app.db
