"""LMDB (through Debian's python3-lmdb, sync=True), writing for argv[2] seconds:
- `batched`: 1,000 puts of ~100-byte values per transaction;
- `per-record`: one put per transaction;
- `writemap`: one put per transaction with a writable map (LMDB persists with msync(MS_SYNC)).
Each commit makes its dirty pages durable (fdatasync, or msync of the map), then its meta
page (a ~100-byte write through an O_DSYNC fd, or an msync of the meta page)."""
import os
import sys
import time

import lmdb

mode = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3
env = lmdb.open(os.path.join(os.environ["D"], "lmdb"), map_size=1 << 30, sync=True,
                writemap=(mode == "writemap"))
per_txn = 1000 if mode == "batched" else 1
value = b"v" * 100
end = time.time() + seconds
n = 0
while time.time() < end:
    with env.begin(write=True) as txn:
        for _ in range(per_txn):
            txn.put(b"key%012d" % n, value)
            n += 1
env.close()
