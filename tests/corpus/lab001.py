"""Brendan Gregg's bpf-perf-workshop lab001 as it ships: 128-byte writes, each followed by
fsync, a 2 MiB write (also fsynced) every 200th, overwriting a 50 MiB file in a loop."""
import os
import sys
import time

FILE_SIZE = 50 << 20
path = os.path.join(os.environ["D"], "lab001.data")
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
small, big = b"x" * 128, b"y" * (2 << 20)
end = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 3)
i = offset = 0
while time.time() < end:
    i += 1
    record = big if i % 200 == 0 else small
    if offset + len(record) > FILE_SIZE:
        offset = 0
    os.pwrite(fd, record, offset)
    offset += len(record)
    os.fsync(fd)
os.close(fd)
