"""A lab001-like logger: records of 64 to 512 bytes, each made durable with fsync, and a
1 MiB dump every 100th record."""
import os
import random
import sys
import time

path = os.path.join(os.environ["D"], "app.log")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
rnd = random.Random(7)
end = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 3)
i = 0
while time.time() < end:
    i += 1
    size = (1 << 20) if i % 100 == 0 else rnd.randint(64, 512)
    os.write(fd, b"r" * size)
    os.fsync(fd)
os.close(fd)
