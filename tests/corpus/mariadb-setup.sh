#!/bin/sh
# A fresh MariaDB data directory on the filesystem (InnoDB's system tablespace, undo and redo
# logs: ~110 MB, most of it the preallocated redo log), and the statements the run sends.
set -e
mariadb-install-db --no-defaults --datadir="$D/mariadb" --user=root \
    --auth-root-authentication-method=normal --skip-test-db >/dev/null 2>&1
python3 -c '
import sys
print("CREATE DATABASE corpus; USE corpus;")
print("CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(32)) ENGINE=InnoDB;")
for i in range(int(sys.argv[1])):
    print(f"INSERT INTO t (v) VALUES (\"value-{i}\");")
' "$1" >"$D/statements.sql"
