#!/bin/sh
# A 40 MiB SQLite database (rollback journal), half its rows deleted.
set -e
python3 - "$D/db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("create table t (id integer primary key, v blob)")
db.executemany("insert into t (v) values (?)", ((bytes(200),) for _ in range(200_000)))
db.execute("delete from t where id % 2 = 0")
db.commit()
PY
sync -f "$D"
