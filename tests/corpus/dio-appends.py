"""O_DIRECT appends into new files from unaligned offsets, with several sizes."""
import mmap
import os

d = os.environ["D"]
for n, (start, size) in enumerate([(3584, 1 << 20), (1024, 64 << 10), (512, 8 << 10), (2560, 256 << 10)]):
    fd = os.open(os.path.join(d, f"dio{n}"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    buf = mmap.mmap(-1, size)
    buf.write(b"d" * size)
    pos = start
    for _ in range(20):
        os.pwrite(fd, buf, pos)
        pos += size
    os.close(fd)
