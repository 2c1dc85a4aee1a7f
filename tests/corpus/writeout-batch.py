"""git's batch fsync shape, by hand: batches of 200 small files (0.5-3 KiB), each written to a
temporary name and its write-out started with sync_file_range(SYNC_FILE_RANGE_WRITE) (git
also waits for it; dpkg does not), then one fsync of a marker file that flushes the lot, then
the renames into place; for argv[1] seconds."""
import ctypes
import os
import random
import sys
import time

SYNC_FILE_RANGE_WRITE = 2
libc = ctypes.CDLL(None, use_errno=True)
libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]

d = os.path.join(os.environ["D"], "objects")
os.makedirs(d, exist_ok=True)
rnd = random.Random(9)
end = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 3)
batch = 0
while time.time() < end:
    batch += 1
    names = []
    for i in range(200):
        tmp = os.path.join(d, f"tmp_{batch}_{i}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        os.write(fd, os.urandom(rnd.randint(512, 3072)))
        if libc.sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) != 0:
            raise OSError(ctypes.get_errno(), "sync_file_range")
        os.close(fd)
        names.append(tmp)
    marker = os.path.join(d, f"bulk_fsync_{batch}")
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600)
    os.fsync(fd)
    os.close(fd)
    os.unlink(marker)
    for tmp in names:
        os.rename(tmp, tmp.replace("tmp_", "obj_"))
