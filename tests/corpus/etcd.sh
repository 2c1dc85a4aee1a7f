#!/bin/sh
# etcd (Debian's etcd-server, one member) with its data directory on the filesystem, loaded
# for 3 s by one client putting 16-byte values one after another through the v3 gRPC gateway
# (etcd-put.py). etcd appends each entry to its write-ahead log and fdatasyncs it before the
# put is acknowledged: the fsync latency Kubernetes' control planes are judged by. Client and
# peer URLs are unix sockets in $D (no TCP port; the package's own service may hold 2379).
set -e
cd "$D"
etcd --name corpus --data-dir "$D/etcd" --log-level error \
    --listen-client-urls unix://client.sock:0 --advertise-client-urls unix://client.sock:0 \
    --listen-peer-urls unix://peer.sock:0 --initial-advertise-peer-urls unix://peer.sock:0 \
    --initial-cluster corpus=unix://peer.sock:0 >/dev/null 2>&1 &
server=$!
python3 "$CORPUS/etcd-put.py" "$D/client.sock:0" 3 || { kill $server; exit 1; }
kill -TERM $server
wait $server || true
