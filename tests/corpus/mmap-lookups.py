"""A search-index-like reader: 3,000 lookups at random pages of a 512 MiB file mapped into
memory, from a cold cache, one a millisecond (a server answering queries); with `random` as
argv[1] it first tells the kernel so (madvise(MADV_RANDOM)), as LMDB's readahead=False does.
The file is written, synced and dropped from the cache by the setup (mmap-setup.sh)."""
import mmap
import os
import random
import sys
import time

path = os.path.join(os.environ["D"], "index.dat")
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
if len(sys.argv) > 1 and sys.argv[1] == "random":
    m.madvise(mmap.MADV_RANDOM)
rnd = random.Random(7)
pages = size // 4096
total = 0
start = time.time()
for i in range(3000):
    total += m[rnd.randrange(pages) * 4096]
    pause = start + (i + 1) / 1000 - time.time()
    if pause > 0:
        time.sleep(pause)
m.close()
os.close(fd)
