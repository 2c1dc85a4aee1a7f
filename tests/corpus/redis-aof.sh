#!/bin/sh
# redis-server with an append-only file (appendfsync $1: "always" fdatasyncs the AOF before
# replying, once per event-loop pass; "everysec" leaves it to a background fdatasync once a
# second), loaded for 3 s by redis-benchmark: 4 clients, SET of 16-byte values. Private unix
# socket, no TCP port, no RDB snapshots, its dir on the filesystem.
set -e
redis-server --port 0 --unixsocket "$D/redis.sock" --dir "$D" --appendonly yes \
    --appendfsync "$1" --save "" --daemonize no --logfile "" --loglevel warning >/dev/null &
server=$!
i=0
until [ -S "$D/redis.sock" ]; do
    i=$((i + 1))
    [ $i -lt 500 ] || { kill $server; exit 1; }
    sleep 0.01
done
timeout 3 redis-benchmark -s "$D/redis.sock" -t set -c 4 -d 16 -r 100000 -l -q >/dev/null 2>&1 || true
redis-cli -s "$D/redis.sock" shutdown >/dev/null 2>&1 || kill $server
wait $server || true
