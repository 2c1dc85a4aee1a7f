"""A sequential scan of the same 512 MiB mapped file, from a cold cache: every page read
ahead is used (the healthy shape the read-amplification finding must leave alone)."""
import mmap
import os

path = os.path.join(os.environ["D"], "index.dat")
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
total = 0
for off in range(0, size, 4096):
    total += m[off]
m.close()
os.close(fd)
