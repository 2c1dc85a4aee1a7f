#!/bin/sh
# VACUUM: the database rebuilt through its rollback journal, synced a few times.
set -e
sqlite3 "$D/db" VACUUM
